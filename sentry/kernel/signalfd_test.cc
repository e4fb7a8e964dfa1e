// signalfd: the siginfo -> signalfd_siginfo copy, reads that take pending
// signals off the reading task, readiness and its notifications, blocking.
#include "sentry/kernel/signalfd.h"

#include <errno.h>
#include <signal.h>

#include <future>
#include <memory>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/testing/fakes.h"

namespace sandboxd::kernel {
namespace {

using testing::FakeAddressSpace;
using testing::NoFs;

TEST(ToSignalfdSiginfoTest, KillCarriesSender) {
  siginfo_t si{};
  si.si_signo = SIGUSR1;
  si.si_code = SI_USER;
  si.si_pid = 12;
  si.si_uid = 34;
  signalfd_siginfo s = ToSignalfdSiginfo(si);
  EXPECT_EQ(s.ssi_signo, static_cast<uint32_t>(SIGUSR1));
  EXPECT_EQ(s.ssi_code, SI_USER);
  EXPECT_EQ(s.ssi_pid, 12u);
  EXPECT_EQ(s.ssi_uid, 34u);
  EXPECT_EQ(s.ssi_status, 0);
}

TEST(ToSignalfdSiginfoTest, SigchldCarriesStatus) {
  siginfo_t si{};
  si.si_signo = SIGCHLD;
  si.si_code = CLD_EXITED;
  si.si_pid = 5;
  si.si_status = 33;
  signalfd_siginfo s = ToSignalfdSiginfo(si);
  EXPECT_EQ(s.ssi_code, CLD_EXITED);
  EXPECT_EQ(s.ssi_pid, 5u);
  EXPECT_EQ(s.ssi_status, 33);
}

TEST(ToSignalfdSiginfoTest, SigqueueCarriesValue) {
  siginfo_t si{};
  si.si_signo = SIGRTMIN;
  si.si_code = SI_QUEUE;
  si.si_pid = 3;
  si.si_value.sival_int = 4242;
  signalfd_siginfo s = ToSignalfdSiginfo(si);
  EXPECT_EQ(s.ssi_int, 4242);
  EXPECT_EQ(s.ssi_ptr, 4242u);
  EXPECT_EQ(s.ssi_pid, 3u);
}

TEST(ToSignalfdSiginfoTest, TimerCarriesIdAndOverrun) {
  siginfo_t si{};
  si.si_signo = SIGALRM;
  si.si_code = SI_TIMER;
  si.si_timerid = 7;
  si.si_overrun = 2;
  si.si_value.sival_int = 9;
  signalfd_siginfo s = ToSignalfdSiginfo(si);
  EXPECT_EQ(s.ssi_tid, 7u);
  EXPECT_EQ(s.ssi_overrun, 2u);
  EXPECT_EQ(s.ssi_int, 9);
  EXPECT_EQ(s.ssi_pid, 0u) << "not part of the timer layout";
}

TEST(ToSignalfdSiginfoTest, FaultCarriesAddress) {
  siginfo_t si{};
  si.si_signo = SIGSEGV;
  si.si_code = SEGV_MAPERR;
  si.si_addr = reinterpret_cast<void*>(0x1234);
  signalfd_siginfo s = ToSignalfdSiginfo(si);
  EXPECT_EQ(s.ssi_addr, 0x1234u);
}

class CountingWaiter : public waiter::Waiter {
 public:
  void Notify(waiter::EventMask) override { count++; }
  int count = 0;
};

class SignalFdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 28);
    ASSERT_TRUE(mf.ok()) << mf.status();
    kernel_ = std::make_unique<Kernel>(
        std::move(mf).value(), std::make_unique<testing::FakePlatform>(),
        &syscalls_, KernelOptions{});
    auto mm = std::make_shared<mm::MM>(&kernel_->memory_file(),
                                       std::make_unique<FakeAddressSpace>(),
                                       testing::kMinUserAddr,
                                       testing::kMaxUserAddr);
    auto t = kernel_->CreateInit(mm, std::make_shared<fs::FdTable>(64), NoFs(),
                                 platform::CpuState{});
    ASSERT_TRUE(t.ok()) << t.status();
    task_ = *t;
    // The usual use: the signals are blocked, and read instead.
    task_->set_signal_mask(SigBit(SIGUSR1) | SigBit(SIGUSR2));
  }

  std::shared_ptr<SignalFd> NewFd(SigSet mask, int flags = SFD_NONBLOCK) {
    return std::make_shared<SignalFd>(task_->group_ptr(), mask, flags);
  }

  testing::NoSyscalls syscalls_;
  std::unique_ptr<Kernel> kernel_;
  Task* task_ = nullptr;
};

TEST_F(SignalFdTest, EmptyIsEagainAndNotReadable) {
  auto f = NewFd(SigBit(SIGUSR1));
  signalfd_siginfo s[2];
  EXPECT_EQ(f->Read(s, sizeof(s), -1, task_->io()), -EAGAIN);
  EXPECT_EQ(f->Readiness(POLLIN), 0u);
  EXPECT_EQ(f->Read(s, sizeof(s[0]) - 1, -1, task_->io()), -EINVAL);
}

TEST_F(SignalFdTest, ReadTakesThePendingSignal) {
  auto f = NewFd(SigBit(SIGUSR1));
  CountingWaiter w;
  f->EventRegister(&w, POLLIN);
  task_->SendSignal(SIGUSR1, 42);
  EXPECT_GE(w.count, 1) << "queueing a signal notifies readers";
  EXPECT_EQ(f->Readiness(POLLIN), static_cast<waiter::EventMask>(POLLIN));
  signalfd_siginfo s[2] = {};
  ASSERT_EQ(f->Read(s, sizeof(s), -1, task_->io()),
            static_cast<int64_t>(sizeof(s[0])));
  EXPECT_EQ(s[0].ssi_signo, static_cast<uint32_t>(SIGUSR1));
  EXPECT_EQ(s[0].ssi_code, SI_USER);
  EXPECT_EQ(s[0].ssi_pid, 42u);
  EXPECT_EQ(task_->pending_signals() & SigBit(SIGUSR1), 0u)
      << "taken: it will not be delivered";
  EXPECT_EQ(f->Readiness(POLLIN), 0u);
  f->EventUnregister(&w);
}

TEST_F(SignalFdTest, SeveralRecordsPerReadAndOnlyTheMask) {
  auto f = NewFd(SigBit(SIGUSR1) | SigBit(SIGUSR2));
  task_->SendSignal(SIGUSR2, 1);
  task_->SendSignal(SIGUSR1, 1);
  signalfd_siginfo s[4] = {};
  ASSERT_EQ(f->Read(s, sizeof(s), -1, task_->io()),
            static_cast<int64_t>(2 * sizeof(s[0])));
  EXPECT_EQ(s[0].ssi_signo, static_cast<uint32_t>(SIGUSR1));
  EXPECT_EQ(s[1].ssi_signo, static_cast<uint32_t>(SIGUSR2));

  f->set_mask(SigBit(SIGUSR2));
  task_->SendSignal(SIGUSR1, 1);
  EXPECT_EQ(f->Readiness(POLLIN), 0u);
  EXPECT_EQ(f->Read(s, sizeof(s), -1, task_->io()), -EAGAIN);
  EXPECT_NE(task_->pending_signals() & SigBit(SIGUSR1), 0u);
}

TEST_F(SignalFdTest, SigkillAndSigstopAreNeverInTheMask) {
  auto f = NewFd(~0ull);
  EXPECT_EQ(f->mask() & kUnblockable, 0u);
}

TEST_F(SignalFdTest, BlockingReadWakesOnASignal) {
  auto f = NewFd(SigBit(SIGUSR1), 0);
  auto reader = std::async(std::launch::async, [&] {
    signalfd_siginfo s{};
    int64_t r = f->Read(&s, sizeof(s), -1, task_->io());
    return r == static_cast<int64_t>(sizeof(s)) ? static_cast<int>(s.ssi_signo)
                                                : static_cast<int>(r);
  });
  absl::SleepFor(absl::Milliseconds(20));
  task_->SendSignal(SIGUSR1, 1);
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  EXPECT_EQ(reader.get(), SIGUSR1);
}

TEST_F(SignalFdTest, QueuedSiginfoIsKept) {
  auto f = NewFd(SigBit(SIGUSR1));
  siginfo_t si{};
  si.si_signo = SIGUSR1;
  si.si_code = SI_QUEUE;
  si.si_value.sival_int = 77;
  task_->SendSignalInfo(si);
  signalfd_siginfo s{};
  ASSERT_EQ(f->Read(&s, sizeof(s), -1, task_->io()),
            static_cast<int64_t>(sizeof(s)));
  EXPECT_EQ(s.ssi_code, SI_QUEUE);
  EXPECT_EQ(s.ssi_int, 77);
}

TEST_F(SignalFdTest, AnotherThreadTakesProcessSignalsButNotThreadSignals) {
  auto t2 = kernel_->CreateThread(*task_, platform::CpuState{});
  ASSERT_TRUE(t2.ok()) << t2.status();
  auto f = NewFd(SigBit(SIGUSR1) | SigBit(SIGUSR2));
  task_->SendSignal(SIGUSR2, 1);  // directed at the first thread
  kernel_->SignalGroup(task_->group(), SIGUSR1, 1);  // at the process
  EXPECT_EQ((*t2)->PendingForThreadAndGroup(), SigBit(SIGUSR1));
  signalfd_siginfo s[2] = {};
  ASSERT_EQ(f->Read(s, sizeof(s), -1, (*t2)->io()),
            static_cast<int64_t>(sizeof(s[0])));
  EXPECT_EQ(s[0].ssi_signo, static_cast<uint32_t>(SIGUSR1));
  EXPECT_EQ(f->Read(s, sizeof(s), -1, (*t2)->io()), -EAGAIN);
  ASSERT_EQ(f->Read(s, sizeof(s), -1, task_->io()),
            static_cast<int64_t>(sizeof(s[0])));
  EXPECT_EQ(s[0].ssi_signo, static_cast<uint32_t>(SIGUSR2));
}

}  // namespace
}  // namespace sandboxd::kernel
