// The task loop (Task::Run) driven by a scripted platform Context: what a
// task does with syscall, fault, exception, interrupt and dead events.
#include "sentry/kernel/kernel.h"

#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/kernel/testing/fakes.h"

namespace sandboxd::kernel {
namespace {

using testing::EventOf;
using testing::FakeAddressSpace;
using testing::kSaRestorer;
using testing::NoFs;

using platform::CpuState;
using platform::Event;

constexpr uintptr_t kMin = testing::kMinUserAddr;
constexpr uintptr_t kMax = testing::kMaxUserAddr;
constexpr uint64_t kHandler = 0x401000;
constexpr uint64_t kRestorer = 0x401100;
// A pseudo syscall number the fake table uses to create a thread.
constexpr uint64_t kNrSpawn = 1000;
// Sleeps in Task::Block until woken (0) or interrupted (-EINTR).
constexpr uint64_t kNrBlock = 1001;
// Does not block, but takes until the test notifies `busy_go`.
constexpr uint64_t kNrBusy = 1002;

std::atomic<int> blocked_calls{0};   // kNrBlock entered
std::atomic<int> blocked_returns{0};  // kNrBlock returned
std::atomic<int> busy_calls{0};
std::atomic<int> busy_returns{0};
absl::Notification* busy_go = nullptr;

// One step of a script: sees the task's registers as Switch would, and
// says what "the application" did next.
using Step = std::function<Event(CpuState&)>;

Event Syscall(CpuState& cpu, uint64_t nr, uint64_t a0 = 0) {
  cpu.regs.orig_rax = nr;
  cpu.regs.rdi = a0;
  return EventOf(Event::Kind::kSyscall);
}

// Runs its steps in order; with none left, "runs application code" until
// Interrupt() (-> kInterrupted), giving up after 10 s (-> kDead) so that a
// broken test cannot hang.
class ScriptedContext : public platform::Context {
 public:
  ScriptedContext(std::deque<Step> steps, std::atomic<int>* releases)
      : steps_(std::move(steps)), releases_(releases) {}

  Event Switch(platform::AddressSpace&, CpuState& cpu) override {
    Step step;
    {
      absl::MutexLock l(&mu_);
      if (!interrupted_ && steps_.empty()) {
        parked_++;
        mu_.AwaitWithTimeout(absl::Condition(&interrupted_), absl::Seconds(10));
      }
      if (interrupted_) {
        interrupted_ = false;
        return EventOf(Event::Kind::kInterrupted);
      }
      if (steps_.empty()) {
        Event ev = EventOf(Event::Kind::kDead);
        ev.detail = "test timeout";
        return ev;
      }
      step = std::move(steps_.front());
      steps_.pop_front();
    }
    return step(cpu);
  }
  void Interrupt() override {
    absl::MutexLock l(&mu_);
    interrupted_ = true;
  }
  // Adds a step for a later Switch (one already waiting for an interrupt
  // keeps waiting).
  void Append(Step s) {
    absl::MutexLock l(&mu_);
    steps_.push_back(std::move(s));
  }
  void Release() override { releases_->fetch_add(1); }

  // Waits until Switch has, `times` times in all, run out of steps and
  // waited for an interrupt.
  bool AwaitParked(int times = 1) {
    absl::MutexLock l(&mu_);
    auto parked = [this, times]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return parked_ >= times;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&parked), absl::Seconds(10));
  }

 private:
  absl::Mutex mu_;
  std::deque<Step> steps_ ABSL_GUARDED_BY(mu_);
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  int parked_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int>* const releases_;
};

// Hands out the scripts the test queued, one per NewContext, in order.
class FakePlatform : public platform::Platform {
 public:
  std::string Name() const override { return "fake"; }
  uintptr_t MaxUserAddress() const override { return kMax; }
  absl::StatusOr<std::unique_ptr<platform::AddressSpace>> NewAddressSpace()
      override {
    return std::make_unique<FakeAddressSpace>();
  }
  absl::StatusOr<std::unique_ptr<platform::Context>> NewContext() override {
    absl::MutexLock l(&mu_);
    std::deque<Step> steps;
    if (!scripts_.empty()) {
      steps = std::move(scripts_.front());
      scripts_.pop_front();
    }
    auto ctx = std::make_unique<ScriptedContext>(std::move(steps), &releases_);
    contexts_.push_back(ctx.get());
    return ctx;
  }

  void AddScript(std::deque<Step> steps) {
    absl::MutexLock l(&mu_);
    scripts_.push_back(std::move(steps));
  }
  // How many contexts were released (their task's host thread ended).
  int releases() const { return releases_.load(); }
  // Valid while the task that owns it lives.
  ScriptedContext* context(size_t i) {
    absl::MutexLock l(&mu_);
    return i < contexts_.size() ? contexts_[i] : nullptr;
  }

 private:
  absl::Mutex mu_;
  std::deque<std::deque<Step>> scripts_ ABSL_GUARDED_BY(mu_);
  std::vector<ScriptedContext*> contexts_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> releases_{0};
};

// Just enough of a syscall table for the loop: exit, exit_group,
// rt_sigreturn, getpid, and kNrSpawn (a thread with the next script).
class FakeSyscalls : public SyscallTable {
 public:
  int64_t Invoke(Task& t, const SyscallArgs& a) override {
    switch (a.nr) {
      case SYS_exit:
        t.ExitThread(static_cast<int>(a.a[0]));
        return kNoReturnValue;
      case SYS_exit_group:
        t.group().Exit(ExitStatus{static_cast<int>(a.a[0]), 0, false});
        return kNoReturnValue;
      case SYS_rt_sigreturn:
        return t.SigReturn();
      case SYS_getpid:
        return t.group().tgid();
      case kNrBlock: {
        blocked_calls++;
        Task::WakeReason why = t.Block(absl::InfiniteFuture());
        blocked_returns++;
        return why == Task::WakeReason::kWoken ? 0 : -EINTR;
      }
      case kNrBusy:
        busy_calls++;
        busy_go->WaitForNotification();
        busy_returns++;
        return 0;
      case kNrSpawn: {
        auto c = t.kernel().CreateThread(t, t.cpu());
        if (!c.ok()) return -EAGAIN;
        (*c)->Start();
        return (*c)->tid();
      }
      default:
        return -ENOSYS;
    }
  }
};

class TaskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    blocked_calls = 0;
    blocked_returns = 0;
    busy_calls = 0;
    busy_returns = 0;
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    auto platform = std::make_unique<FakePlatform>();
    platform_ = platform.get();
    kernel_ = std::make_unique<Kernel>(std::move(mf).value(),
                                       std::move(platform), &syscalls_,
                                       KernelOptions{});
    mm_ = std::make_shared<mm::MM>(&kernel_->memory_file(),
                                   std::make_unique<FakeAddressSpace>(), kMin,
                                   kMax);
    int64_t stack = mm_->Mmap(0, 0x10000, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS);
    ASSERT_GT(stack, 0);
    cpu_.regs.rsp = stack + 0x10000 - 64;
    cpu_.regs.rip = 0x400500;
  }

  Task* CreateInit() {
    auto t = kernel_->CreateInit(mm_, std::make_shared<fs::FdTable>(64), NoFs(), cpu_);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }

  FakeSyscalls syscalls_;
  FakePlatform* platform_ = nullptr;
  std::unique_ptr<Kernel> kernel_;
  std::shared_ptr<mm::MM> mm_;
  CpuState cpu_;
};

TEST_F(TaskTest, SyscallResultGoesToRaxAndExitGroupEndsTheProcess) {
  uint64_t seen_rax = 0;
  platform_->AddScript({
      [](CpuState& cpu) { return Syscall(cpu, SYS_getpid); },
      [&](CpuState& cpu) {
        seen_rax = cpu.regs.rax;
        return Syscall(cpu, 9999);  // unknown: -ENOSYS
      },
      [&](CpuState& cpu) {
        EXPECT_EQ(static_cast<int64_t>(cpu.regs.rax), -ENOSYS);
        return Syscall(cpu, SYS_exit_group, 7);
      },
  });
  Task* init = CreateInit();
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(init->tid(), 1);
  ExitStatus st = kernel_->RunUntilInitExits(init);
  EXPECT_EQ(seen_rax, 1u);
  EXPECT_EQ(st.code, 7);
  EXPECT_EQ(st.signo, 0);
  EXPECT_EQ(st.ShellStatus(), 7);
  EXPECT_EQ(kernel_->FindTask(1), nullptr);
}

// An address space whose teardown waits until the test lets it go: what
// killing and reaping systrap's stub process is, only slower.
class SlowToTearDown : public FakeAddressSpace {
 public:
  SlowToTearDown(absl::Notification* go, std::atomic<bool>* gone)
      : go_(go), gone_(gone) {}
  ~SlowToTearDown() override {
    go_->WaitForNotification();
    gone_->store(true);
  }

 private:
  absl::Notification* const go_;
  std::atomic<bool>* const gone_;
};

TEST_F(TaskTest, InitsExitIsReportedBeforeItsAddressSpaceIsTornDown) {
  platform_->AddScript({
      [](CpuState& cpu) { return Syscall(cpu, SYS_exit_group, 3); },
  });
  absl::Notification go;
  std::atomic<bool> gone{false};
  auto init = kernel_->CreateInit(
      std::make_shared<mm::MM>(&kernel_->memory_file(),
                               std::make_unique<SlowToTearDown>(&go, &gone),
                               kMin, kMax),
      std::make_shared<fs::FdTable>(64), NoFs(), cpu_);
  ASSERT_TRUE(init.ok()) << init.status();
  absl::Notification reported;
  ExitStatus seen;
  ExitStatus returned;
  std::thread runner([&] {
    returned = kernel_->RunUntilInitExits(*init, [&](const ExitStatus& st) {
      seen = st;
      reported.Notify();
    });
  });
  // The status comes while the address space is still going away.
  const bool early = reported.WaitForNotificationWithTimeout(absl::Seconds(5));
  const bool gone_then = gone.load();
  go.Notify();
  runner.join();
  EXPECT_TRUE(early);
  EXPECT_FALSE(gone_then);
  EXPECT_EQ(seen.code, 3);
  // RunUntilInitExits itself returns once the teardown is done.
  EXPECT_TRUE(gone.load());
  EXPECT_EQ(returned.code, 3);
}

TEST_F(TaskTest, UnresolvableFaultKillsWithSegv) {
  platform_->AddScript({
      [](CpuState&) {
        Event ev = EventOf(Event::Kind::kFault);
        ev.signo = SIGSEGV;
        ev.addr = 0x20000000;
        ev.write = true;
        return ev;
      },
  });
  Task* init = CreateInit();
  ExitStatus st = kernel_->RunUntilInitExits(init);
  EXPECT_EQ(st.signo, SIGSEGV);
  EXPECT_TRUE(st.core);
  EXPECT_EQ(st.ShellStatus(), 139);
}

TEST_F(TaskTest, FaultOnMappedMemoryIsResolvedByMm) {
  int64_t heap = mm_->Mmap(0, 0x4000, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS);
  ASSERT_GT(heap, 0);
  platform_->AddScript({
      [&](CpuState&) {
        Event ev = EventOf(Event::Kind::kFault);
        ev.signo = SIGSEGV;
        ev.addr = heap + 0x10;
        ev.write = true;
        return ev;
      },
      [](CpuState& cpu) { return Syscall(cpu, SYS_exit_group, 3); },
  });
  ExitStatus st = kernel_->RunUntilInitExits(CreateInit());
  EXPECT_EQ(st.signo, 0);
  EXPECT_EQ(st.code, 3);
}

TEST_F(TaskTest, FaultRunsTheHandlerAndSigreturnResumes) {
  uint64_t handler_rdi = 0, resumed_rip = 0, resumed_rsp = 0;
  platform_->AddScript({
      [](CpuState&) {
        Event ev = EventOf(Event::Kind::kFault);
        ev.signo = SIGSEGV;
        ev.addr = 0x20000000;
        return ev;
      },
      [&](CpuState& cpu) {
        EXPECT_EQ(cpu.regs.rip, kHandler);
        handler_rdi = cpu.regs.rdi;
        cpu.regs.rsp += 8;  // the handler's ret into the restorer
        return Syscall(cpu, SYS_rt_sigreturn);
      },
      [&](CpuState& cpu) {
        resumed_rip = cpu.regs.rip;
        resumed_rsp = cpu.regs.rsp;
        return Syscall(cpu, SYS_exit_group, 0);
      },
  });
  Task* init = CreateInit();
  SigAction act;
  act.handler = kHandler;
  act.flags = SA_SIGINFO | kSaRestorer;
  act.restorer = kRestorer;
  init->group().SetAction(SIGSEGV, act);
  ExitStatus st = kernel_->RunUntilInitExits(init);
  EXPECT_EQ(handler_rdi, static_cast<uint64_t>(SIGSEGV));
  EXPECT_EQ(resumed_rip, cpu_.regs.rip);
  EXPECT_EQ(resumed_rsp, cpu_.regs.rsp);
  EXPECT_EQ(st.signo, 0);
  EXPECT_EQ(st.code, 0);
}

TEST_F(TaskTest, ExceptionTakesItsSignal) {
  platform_->AddScript({
      [](CpuState&) {
        Event ev = EventOf(Event::Kind::kException);
        ev.signo = SIGFPE;
        ev.code = FPE_INTDIV;
        return ev;
      },
  });
  ExitStatus st = kernel_->RunUntilInitExits(CreateInit());
  EXPECT_EQ(st.signo, SIGFPE);
  EXPECT_TRUE(st.core);
}

TEST_F(TaskTest, DeadContextKillsTheGroup) {
  platform_->AddScript({
      [](CpuState&) {
        Event ev = EventOf(Event::Kind::kDead);
        ev.detail = "stub died";
        return ev;
      },
  });
  Task* init = CreateInit();
  ExitStatus st = kernel_->RunUntilInitExits(init);
  EXPECT_EQ(st.signo, SIGKILL);
  EXPECT_EQ(platform_->releases(), 1);
}

TEST_F(TaskTest, SignalFromAnotherThreadInterruptsRunningCode) {
  Task* init = CreateInit();
  std::thread killer([&] {
    ASSERT_TRUE(platform_->context(0)->AwaitParked());
    init->SendSignal(SIGTERM, 0);
  });
  ExitStatus st = kernel_->RunUntilInitExits(init);
  killer.join();
  EXPECT_EQ(st.signo, SIGTERM);
  EXPECT_FALSE(st.core);
}

TEST_F(TaskTest, SentSignalRunsTheHandlerWithTheSender) {
  uint64_t rdi = 0, rip = 0;
  siginfo_t info{};
  Task* init = CreateInit();
  SigAction act;
  act.handler = kHandler;
  act.flags = SA_SIGINFO | kSaRestorer;
  act.restorer = kRestorer;
  init->group().SetAction(SIGUSR1, act);
  ScriptedContext* ctx = platform_->context(0);
  std::thread sender([&] {
    ASSERT_TRUE(ctx->AwaitParked());
    // What the application does once the handler runs.
    ctx->Append([&](CpuState& cpu) {
      rip = cpu.regs.rip;
      rdi = cpu.regs.rdi;
      EXPECT_EQ(mm_->CopyIn(cpu.regs.rsi, &info, sizeof(info)),
                static_cast<int64_t>(sizeof(info)));
      return Syscall(cpu, SYS_exit_group, 0);
    });
    init->SendSignal(SIGUSR1, 42);
  });
  ExitStatus st = kernel_->RunUntilInitExits(init);
  sender.join();
  EXPECT_EQ(rip, kHandler);
  EXPECT_EQ(rdi, static_cast<uint64_t>(SIGUSR1));
  EXPECT_EQ(info.si_signo, SIGUSR1);
  EXPECT_EQ(info.si_code, SI_USER);
  EXPECT_EQ(info.si_pid, 42);
  EXPECT_EQ(st.signo, 0);
}

TEST_F(TaskTest, BlockedSignalWaitsUntilUnblocked) {
  Task* init = CreateInit();
  init->set_signal_mask(SigBit(SIGTERM));
  ScriptedContext* ctx = platform_->context(0);
  auto run = std::async(std::launch::async,
                        [&] { return kernel_->RunUntilInitExits(init); });
  ASSERT_TRUE(ctx->AwaitParked(1));
  init->SendSignal(SIGTERM, 0);
  // Blocked: it stays pending and interrupts nothing (Linux wakes a task
  // only for a signal it can take).
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_NE(init->pending_signals() & SigBit(SIGTERM), 0u);
  EXPECT_FALSE(init->group().exiting());
  ctx->Append([&](CpuState& cpu) {
    // What rt_sigprocmask(SIG_UNBLOCK) does.
    init->set_signal_mask(0);
    return Syscall(cpu, SYS_getpid);
  });
  ctx->Interrupt();
  ASSERT_EQ(run.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(run.get().signo, SIGTERM);
}

TEST_F(TaskTest, ProcessExitCodeIsTheLeadersWhenAllThreadsExit) {
  // Linux reports the thread-group leader's exit code when every thread
  // left with exit(2) (wait_task_zombie reads the leader's exit_code), not
  // the last thread's.
  platform_->AddScript({
      [](CpuState& cpu) { return Syscall(cpu, kNrSpawn); },
      [](CpuState& cpu) { return Syscall(cpu, SYS_exit, 9); },
  });
  Kernel* k = kernel_.get();
  platform_->AddScript({
      [k](CpuState& cpu) {
        // Leave after the leader is gone.
        absl::Time give_up = absl::Now() + absl::Seconds(10);
        while (k->FindTask(1) != nullptr && absl::Now() < give_up) {
          absl::SleepFor(absl::Milliseconds(1));
        }
        return Syscall(cpu, SYS_exit, 5);
      },
  });
  ExitStatus st = kernel_->RunUntilInitExits(CreateInit());
  EXPECT_EQ(st.signo, 0);
  EXPECT_EQ(st.code, 9);
}

TEST_F(TaskTest, ThreadsGetNewTidsInTheSameGroup) {
  Task* init = CreateInit();
  auto t2 = kernel_->CreateThread(*init, cpu_);
  ASSERT_TRUE(t2.ok()) << t2.status();
  EXPECT_EQ((*t2)->tid(), 2);
  EXPECT_EQ(&(*t2)->group(), &init->group());
  EXPECT_EQ(kernel_->FindTask(2).get(), *t2);
  EXPECT_EQ(kernel_->FindGroup(1).get(), &init->group());
  EXPECT_EQ(kernel_->FindGroup(2), nullptr);
  EXPECT_EQ(init->group().Tasks().size(), 2u);
  // The mask is inherited.
  init->set_signal_mask(SigBit(SIGUSR1) | SigBit(SIGKILL));
  EXPECT_EQ(init->signal_mask(), SigBit(SIGUSR1));
  auto t3 = kernel_->CreateThread(*init, cpu_);
  ASSERT_TRUE(t3.ok());
  EXPECT_EQ((*t3)->signal_mask(), SigBit(SIGUSR1));
  // No new threads in an exiting group.
  init->group().Exit(ExitStatus{0, SIGKILL, false});
  EXPECT_FALSE(kernel_->CreateThread(*init, cpu_).ok());
}

bool Eventually(const std::function<bool()>& cond) {
  absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!cond()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// A checkpoint's stop: a task running application code parks on its way
// back, a task asleep in a syscall parks inside it (the call does not
// return), and a signal sent during the stop acts only after it.
TEST_F(TaskTest, WorldStopParksRunningAndBlockedTasksUntilResumed) {
  platform_->AddScript({
      [](CpuState& cpu) { return Syscall(cpu, kNrSpawn); },
  });
  platform_->AddScript({
      [](CpuState& cpu) { return Syscall(cpu, kNrBlock); },
  });
  Task* init = CreateInit();
  // A signal's sender holds the task (it may exit before Send returns).
  std::shared_ptr<Task> hold = kernel_->FindTask(1);
  auto run = std::async(std::launch::async,
                        [&] { return kernel_->RunUntilInitExits(init); });
  ASSERT_TRUE(platform_->context(0)->AwaitParked());
  ASSERT_TRUE(Eventually([] { return blocked_calls.load() == 1; }));
  ASSERT_TRUE(kernel_->StopTheWorld(absl::Seconds(5)).ok());
  // A second stopper is refused while this one holds the stop.
  EXPECT_EQ(kernel_->StopTheWorld(absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  init->SendSignal(SIGTERM, 0);
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(blocked_returns.load(), 0);  // still inside its syscall
  EXPECT_FALSE(init->group().exiting());
  EXPECT_NE(run.wait_for(std::chrono::milliseconds(0)),
            std::future_status::ready);
  kernel_->ResumeTheWorld();
  ASSERT_EQ(run.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(run.get().signo, SIGTERM);
  EXPECT_EQ(blocked_returns.load(), 1);
}

// A stop while a blocked task is merely parked: after the resume its wait
// goes on and a wakeup still ends it normally.
TEST_F(TaskTest, WorldStopLeavesABlockedWaitWaiting) {
  uint64_t rax = 1;
  platform_->AddScript({
      [](CpuState& cpu) { return Syscall(cpu, kNrBlock); },
      [&](CpuState& cpu) {
        rax = cpu.regs.rax;
        return Syscall(cpu, SYS_exit_group, 4);
      },
  });
  Task* init = CreateInit();
  // A signal's sender holds the task (it may exit before Send returns).
  std::shared_ptr<Task> hold = kernel_->FindTask(1);
  auto run = std::async(std::launch::async,
                        [&] { return kernel_->RunUntilInitExits(init); });
  ASSERT_TRUE(Eventually([] { return blocked_calls.load() == 1; }));
  for (int i = 0; i < 20; i++) {
    ASSERT_TRUE(kernel_->StopTheWorld(absl::Seconds(5)).ok());
    kernel_->ResumeTheWorld();
  }
  absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(blocked_returns.load(), 0);
  init->Wake();
  ASSERT_EQ(run.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(run.get().code, 4);
  EXPECT_EQ(rax, 0u);  // woken, not interrupted
}

// A syscall that does not block finishes before its task parks; a stop
// that cannot complete in time fails naming the task, and ends.
TEST_F(TaskTest, WorldStopWaitsForANonBlockingSyscallAndTimesOut) {
  absl::Notification go;
  busy_go = &go;
  platform_->AddScript({
      [](CpuState& cpu) { return Syscall(cpu, kNrBusy); },
  });
  Task* init = CreateInit();
  // A signal's sender holds the task (it may exit before Send returns).
  std::shared_ptr<Task> hold = kernel_->FindTask(1);
  auto run = std::async(std::launch::async,
                        [&] { return kernel_->RunUntilInitExits(init); });
  ASSERT_TRUE(Eventually([] { return busy_calls.load() == 1; }));
  absl::Status late = kernel_->StopTheWorld(absl::Milliseconds(50));
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  EXPECT_NE(late.message().find("task 1 "), absl::string_view::npos) << late;
  EXPECT_FALSE(kernel_->world_stop_requested());
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(30));
    go.Notify();
  });
  ASSERT_TRUE(kernel_->StopTheWorld(absl::Seconds(5)).ok());
  EXPECT_EQ(busy_returns.load(), 1);  // done before the stop completed
  release.join();
  platform_->context(0)->Append(
      [](CpuState& cpu) { return Syscall(cpu, SYS_exit_group, 2); });
  kernel_->ResumeTheWorld();
  ASSERT_EQ(run.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(run.get().code, 2);
  busy_go = nullptr;
}

// Stops taken over and over while threads are being created and exit:
// every stop completes (a task made during a stop parks before its first
// instruction, an exiting one is not waited for) and nothing is lost.
TEST_F(TaskTest, WorldStopIsRaceFreeWithCloneAndExit) {
  constexpr int kThreads = 150;
  std::deque<Step> init_steps;
  for (int i = 0; i < kThreads; i++) {
    init_steps.push_back([](CpuState& cpu) { return Syscall(cpu, kNrSpawn); });
  }
  // Threads still running then are killed by the group's exit.
  init_steps.push_back(
      [](CpuState& cpu) { return Syscall(cpu, SYS_exit_group, 0); });
  platform_->AddScript(std::move(init_steps));
  for (int i = 0; i < kThreads; i++) {
    platform_->AddScript({
        [](CpuState& cpu) { return Syscall(cpu, SYS_getpid); },
        [](CpuState& cpu) { return Syscall(cpu, SYS_exit, 0); },
    });
  }
  Task* init = CreateInit();
  // A signal's sender holds the task (it may exit before Send returns).
  std::shared_ptr<Task> hold = kernel_->FindTask(1);
  auto run = std::async(std::launch::async,
                        [&] { return kernel_->RunUntilInitExits(init); });
  int stops = 0;
  while (run.wait_for(std::chrono::milliseconds(0)) !=
         std::future_status::ready) {
    absl::Status st = kernel_->StopTheWorld(absl::Seconds(5));
    ASSERT_TRUE(st.ok()) << st;
    stops++;
    kernel_->ResumeTheWorld();
  }
  EXPECT_GT(stops, 0);
  ExitStatus st = run.get();
  EXPECT_EQ(st.code, 0);
  EXPECT_EQ(st.signo, 0);
}

// A stop taken right after another ended does not count the tasks parked
// in the first one as parked: each has to park again. A task woken by a
// signal sent during the first stop would otherwise act on it (here: end
// its group) while the second stop is held.
TEST_F(TaskTest, WorldStopRightAfterAResumeWaitsForEveryTaskToParkAgain) {
  platform_->AddScript({
      [](CpuState& cpu) { return Syscall(cpu, kNrBlock); },
  });
  Task* init = CreateInit();
  // A signal's sender holds the task (it may exit before Send returns).
  std::shared_ptr<Task> hold = kernel_->FindTask(1);
  auto run = std::async(std::launch::async,
                        [&] { return kernel_->RunUntilInitExits(init); });
  ASSERT_TRUE(Eventually([] { return blocked_calls.load() == 1; }));
  ASSERT_TRUE(kernel_->StopTheWorld(absl::Seconds(5)).ok());
  init->SendSignal(SIGTERM, 0);
  kernel_->ResumeTheWorld();
  absl::Status again = kernel_->StopTheWorld(absl::Seconds(5));
  // Either the task parked again (the signal waits) or it went on and
  // the group ended before the stop completed: never both a completed
  // stop and a group that acts during it.
  if (again.ok()) {
    const bool exiting_at_stop = init->group().exiting();
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(init->group().exiting(), exiting_at_stop)
        << "the task ran during the stop";
    kernel_->ResumeTheWorld();
  }
  ASSERT_EQ(run.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(run.get().signo, SIGTERM);
}

// A task of a stopped group (SIGSTOP) is at a safe point too.
TEST_F(TaskTest, WorldStopIncludesAGroupStoppedTask) {
  Task* init = CreateInit();
  // A signal's sender holds the task (it may exit before Send returns).
  std::shared_ptr<Task> hold = kernel_->FindTask(1);
  auto run = std::async(std::launch::async,
                        [&] { return kernel_->RunUntilInitExits(init); });
  ASSERT_TRUE(platform_->context(0)->AwaitParked());
  init->SendSignal(SIGSTOP, 0);
  ASSERT_TRUE(Eventually([&] { return init->group().stopped(); }));
  ASSERT_TRUE(kernel_->StopTheWorld(absl::Seconds(5)).ok());
  kernel_->ResumeTheWorld();
  EXPECT_TRUE(init->group().stopped());
  init->SendSignal(SIGKILL, 0);
  ASSERT_EQ(run.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(run.get().signo, SIGKILL);
}

}  // namespace
}  // namespace sandboxd::kernel
