// Job control: the stop/continue state machine of a thread group, what the
// parent learns (SIGCHLD siginfo, wait reports), the queueing rules and the
// orphaned-process-group rule. Children run on a context that "runs
// application code" until interrupted, so that their tasks reach their stop
// point as a real task would.
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

#include <memory>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/testing/fakes.h"

namespace sandboxd::kernel {
namespace {

using testing::EventOf;
using testing::FakeAddressSpace;
using testing::NoFs;
using testing::NoSyscalls;

// Switch waits for Interrupt (-> kInterrupted); after 10 s it gives up
// (-> kDead) so that a broken test cannot hang.
class RunningContext : public platform::Context {
 public:
  platform::Event Switch(platform::AddressSpace&, platform::CpuState&) override {
    absl::MutexLock l(&mu_);
    switches_++;
    if (!mu_.AwaitWithTimeout(absl::Condition(&interrupted_),
                              absl::Seconds(10))) {
      return EventOf(platform::Event::Kind::kDead);
    }
    interrupted_ = false;
    return EventOf(platform::Event::Kind::kInterrupted);
  }
  void Interrupt() override {
    absl::MutexLock l(&mu_);
    interrupted_ = true;
  }

 private:
  absl::Mutex mu_;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  int switches_ ABSL_GUARDED_BY(mu_) = 0;
};

class RunningPlatform : public testing::FakePlatform {
 public:
  absl::StatusOr<std::unique_ptr<platform::Context>> NewContext() override {
    return std::make_unique<RunningContext>();
  }
};

// Waits up to 10 s for `cond`.
template <typename F>
bool Eventually(F cond) {
  absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!cond()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

class JobControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 28);
    ASSERT_TRUE(mf.ok()) << mf.status();
    kernel_ = std::make_unique<Kernel>(std::move(mf).value(),
                                       std::make_unique<RunningPlatform>(),
                                       &syscalls_, KernelOptions{});
    auto init = kernel_->CreateInit(NewMM(), std::make_shared<fs::FdTable>(64),
                                    NoFs(), platform::CpuState{});
    ASSERT_TRUE(init.ok()) << init.status();
    init_ = *init;  // never started: the test thread acts for it
    // SIGCHLD is ignored by default: block it so that it stays pending.
    init_->set_signal_mask(SigBit(SIGCHLD));
  }

  void TearDown() override {
    // Kill what is left and wait for the host threads to end.
    for (pid_t pid : children_) {
      if (auto g = kernel_->FindGroup(pid)) {
        kernel_->SignalGroup(*g, SIGKILL, 0);
      }
    }
    for (pid_t pid : children_) {
      EXPECT_TRUE(Eventually([&] {
        auto g = kernel_->FindGroup(pid);
        return g == nullptr || g->zombie;
      }));
    }
  }

  std::shared_ptr<mm::MM> NewMM() {
    return std::make_shared<mm::MM>(&kernel_->memory_file(),
                                    std::make_unique<FakeAddressSpace>(),
                                    testing::kMinUserAddr,
                                    testing::kMaxUserAddr);
  }

  // A started child process of init, in its own process group (so that
  // the terminal stop signals apply) unless `same_pgrp`.
  Task* StartChild(bool same_pgrp = false) {
    auto c = kernel_->CreateProcess(*init_, NewMM(),
                                    std::make_shared<fs::FdTable>(64), NoFs(),
                                    SIGCHLD, platform::CpuState{});
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return nullptr;
    Task* t = *c;
    if (!same_pgrp) {
      EXPECT_EQ(kernel_->SetPgid(*t, 0, 0), 0);
    }
    children_.push_back(t->tid());
    t->Start();
    return t;
  }

  // The next SIGCHLD pending for init (si_code 0 if none).
  siginfo_t TakeSigchld() {
    siginfo_t si{};
    init_->TakePendingSignal(SigBit(SIGCHLD), &si);
    return si;
  }

  int Wait(pid_t pid, int options, Kernel::WaitResult* res) {
    return static_cast<int>(
        kernel_->WaitChild(*init_, pid, false, options | WNOHANG, res));
  }

  // Waits until `pid` reports a stop to WSTOPPED|WNOWAIT.
  bool AwaitStopped(pid_t pid) {
    return Eventually([&] {
      Kernel::WaitResult r;
      return Wait(pid, WSTOPPED | WNOWAIT, &r) == pid;
    });
  }

  NoSyscalls syscalls_;
  std::unique_ptr<Kernel> kernel_;
  Task* init_ = nullptr;
  std::vector<pid_t> children_;
};

TEST_F(JobControlTest, StopThenContinueReportedOnceEach) {
  Task* c = StartChild();
  const pid_t pid = c->tid();
  c->SendSignal(SIGSTOP, 1);
  ASSERT_TRUE(AwaitStopped(pid));

  siginfo_t si = TakeSigchld();
  EXPECT_EQ(si.si_code, CLD_STOPPED);
  EXPECT_EQ(si.si_status, SIGSTOP);
  EXPECT_EQ(si.si_pid, pid);

  Kernel::WaitResult r;
  EXPECT_EQ(Wait(pid, WEXITED, &r), 0) << "a stop is not an exit";
  ASSERT_EQ(Wait(pid, WSTOPPED, &r), pid);
  EXPECT_EQ(r.stop_signo, SIGSTOP);
  EXPECT_EQ(Wait(pid, WSTOPPED, &r), 0) << "reported once";

  c->SendSignal(SIGCONT, 1);
  ASSERT_TRUE(Eventually([&] { return Wait(pid, WCONTINUED, &r) == pid; }));
  EXPECT_TRUE(r.continued);
  EXPECT_EQ(Wait(pid, WCONTINUED, &r), 0) << "reported once";
  // The continued task sends the notification when it runs again.
  ASSERT_TRUE(Eventually([&] {
    return (init_->pending_signals() & SigBit(SIGCHLD)) != 0;
  }));
  si = TakeSigchld();
  EXPECT_EQ(si.si_code, CLD_CONTINUED);
  EXPECT_EQ(si.si_status, SIGCONT);
}

TEST_F(JobControlTest, EveryThreadStopsAndContinues) {
  Task* c = StartChild();
  auto t2 = kernel_->CreateThread(*c, platform::CpuState{});
  ASSERT_TRUE(t2.ok()) << t2.status();
  (*t2)->Start();
  // Sent to the second thread: the whole group stops all the same.
  (*t2)->SendSignal(SIGSTOP, 1);
  ASSERT_TRUE(AwaitStopped(c->tid()));
  EXPECT_TRUE(c->group().stop_requested());
  EXPECT_TRUE(c->group().stopped());
  c->SendSignal(SIGCONT, 1);
  EXPECT_FALSE(c->group().stop_requested());
  EXPECT_FALSE(c->group().stopped());
  Kernel::WaitResult r;
  ASSERT_TRUE(Eventually([&] {
    return Wait(c->tid(), WCONTINUED, &r) == c->tid();
  }));
  // And stops again, as a whole, at the next stop signal.
  c->SendSignal(SIGTTIN, 1);
  ASSERT_TRUE(AwaitStopped(c->tid()));
  ASSERT_EQ(Wait(c->tid(), WSTOPPED, &r), c->tid());
  EXPECT_EQ(r.stop_signo, SIGTTIN);
}

TEST_F(JobControlTest, SigkillEndsAStoppedProcess) {
  Task* c = StartChild();
  const pid_t pid = c->tid();
  c->SendSignal(SIGTSTP, 1);
  ASSERT_TRUE(AwaitStopped(pid));
  std::shared_ptr<ThreadGroup> g = c->group_ptr();
  kernel_->SignalGroup(*g, SIGKILL, 1);
  Kernel::WaitResult r;
  ASSERT_TRUE(Eventually([&] { return Wait(pid, WEXITED, &r) == pid; }));
  EXPECT_EQ(r.status.signo, SIGKILL);
}

TEST_F(JobControlTest, NoSigchldWithSaNocldstopButWaitSeesIt) {
  SigAction a;
  a.handler = 0x401000;
  a.flags = SA_NOCLDSTOP;
  init_->group().SetAction(SIGCHLD, a);
  Task* c = StartChild();
  c->SendSignal(SIGSTOP, 1);
  ASSERT_TRUE(AwaitStopped(c->tid()));
  EXPECT_EQ(init_->pending_signals() & SigBit(SIGCHLD), 0u);
}

TEST_F(JobControlTest, OrphanedProcessGroupDiscardsTerminalStops) {
  // In init's process group, which has no parent outside it: orphaned.
  Task* c = StartChild(/*same_pgrp=*/true);
  EXPECT_TRUE(kernel_->IsPgrpOrphaned(c->group()));
  c->SendSignal(SIGTSTP, 1);
  c->SendSignal(SIGTTIN, 1);
  c->SendSignal(SIGTTOU, 1);
  // The signals are taken and dropped: nothing pending, no stop.
  ASSERT_TRUE(Eventually([&] { return c->pending_signals() == 0; }));
  EXPECT_FALSE(c->group().stop_requested());
  // SIGSTOP is not subject to the rule.
  c->SendSignal(SIGSTOP, 1);
  EXPECT_TRUE(AwaitStopped(c->tid()));
}

TEST_F(JobControlTest, OwnProcessGroupIsNotOrphaned) {
  Task* c = StartChild();
  EXPECT_FALSE(kernel_->IsPgrpOrphaned(c->group()));
}

TEST_F(JobControlTest, SigcontDiscardsPendingStopsAndViceVersa) {
  Task* c = StartChild();
  c->set_signal_mask(SigBit(SIGTSTP) | SigBit(SIGCONT));
  c->SendSignal(SIGTSTP, 1);
  EXPECT_NE(c->pending_signals() & SigBit(SIGTSTP), 0u);
  c->SendSignal(SIGCONT, 1);  // blocked and default: still continues
  EXPECT_EQ(c->pending_signals() & SigBit(SIGTSTP), 0u);
  EXPECT_NE(c->pending_signals() & SigBit(SIGCONT), 0u);
  c->SendSignal(SIGTTOU, 1);
  EXPECT_EQ(c->pending_signals() & SigBit(SIGCONT), 0u);
}

TEST_F(JobControlTest, SigcontToARunningProcessReportsNothing) {
  Task* c = StartChild();
  c->SendSignal(SIGCONT, 1);
  Kernel::WaitResult r;
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(Wait(c->tid(), WCONTINUED | WSTOPPED, &r), 0);
  EXPECT_EQ(init_->pending_signals() & SigBit(SIGCHLD), 0u);
}

}  // namespace
}  // namespace sandboxd::kernel
