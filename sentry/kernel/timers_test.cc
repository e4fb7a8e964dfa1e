// Interval and POSIX timers against a kernel whose tasks are never
// started: expiries queue signals on the task, which the test takes with
// TakePendingSignal as the task loop or sigtimedwait would.
#include "sentry/kernel/timers.h"

#include <errno.h>
#include <signal.h>

#include <memory>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/testing/fakes.h"

namespace sandboxd::kernel {
namespace {

using testing::FakeAddressSpace;
using testing::FakePlatform;
using testing::NoFs;
using testing::NoSyscalls;

constexpr int kSig = 40;  // a real-time signal

TEST(ExpiredPeriodsTest, CountsEveryPeriodThatEnded) {
  EXPECT_EQ(ExpiredPeriods(100, 0, 500), 1u);    // one-shot
  EXPECT_EQ(ExpiredPeriods(100, 10, 100), 1u);   // exactly on time
  EXPECT_EQ(ExpiredPeriods(100, 10, 109), 1u);
  EXPECT_EQ(ExpiredPeriods(100, 10, 110), 2u);
  EXPECT_EQ(ExpiredPeriods(100, 10, 1099), 100u);
  EXPECT_EQ(ExpiredPeriods(100, 10, 50), 1u);    // early: never less than 1
}

class TimersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    kernel_ = std::make_unique<Kernel>(std::move(mf).value(),
                                       std::make_unique<FakePlatform>(),
                                       &syscalls_, KernelOptions{});
    auto mm = std::make_shared<mm::MM>(&kernel_->memory_file(),
                                       std::make_unique<FakeAddressSpace>(),
                                       testing::kMinUserAddr,
                                       testing::kMaxUserAddr);
    auto init = kernel_->CreateInit(mm, std::make_shared<fs::FdTable>(64),
                                    NoFs(), platform::CpuState{});
    ASSERT_TRUE(init.ok()) << init.status();
    task_ = *init;
    // Handlers everywhere: a queued signal is never dropped as ignored.
    SigAction act;
    act.handler = 0x401000;
    for (int s : {kSig, kSig + 1, SIGALRM, SIGVTALRM, SIGPROF}) {
      task_->group().SetAction(s, act);
    }
  }
  void TearDown() override { timers().DeleteAll(); }

  ProcessTimers& timers() { return task_->group().timers(); }

  // Waits up to `patience` for `signo` to be pending, then takes it.
  bool TakeSignal(int signo, siginfo_t* info,
                  absl::Duration patience = absl::Seconds(10)) {
    absl::Time end = absl::Now() + patience;
    while (absl::Now() < end) {
      if (task_->TakePendingSignal(SigBit(signo), info) == signo) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }

  int CreateTimer(int signo, uint64_t value, clockid_t clock = CLOCK_MONOTONIC) {
    KSigEvent sev;
    sev.signo = signo;
    sev.notify = 0;  // SIGEV_SIGNAL
    sev.value = value;
    int id = -1;
    EXPECT_EQ(timers().Create(*task_, clock, &sev, &id), 0);
    return id;
  }

  static itimerspec Spec(int64_t value_ms, int64_t interval_ms) {
    itimerspec v{};
    v.it_value.tv_sec = value_ms / 1000;
    v.it_value.tv_nsec = (value_ms % 1000) * 1000000;
    v.it_interval.tv_sec = interval_ms / 1000;
    v.it_interval.tv_nsec = (interval_ms % 1000) * 1000000;
    return v;
  }

  NoSyscalls syscalls_;
  std::unique_ptr<Kernel> kernel_;
  Task* task_ = nullptr;
};

TEST_F(TimersTest, IdsCountUpFromZeroWithoutReuse) {
  int a = CreateTimer(kSig, 0), b = CreateTimer(kSig, 0);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(timers().Delete(a), 0);
  EXPECT_EQ(CreateTimer(kSig, 0), 2);
  EXPECT_EQ(timers().Delete(a), -EINVAL);
  itimerspec cur;
  EXPECT_EQ(timers().GetTime(a, &cur), -EINVAL);
  EXPECT_EQ(timers().GetOverrun(a), -EINVAL);
}

TEST_F(TimersTest, CreateRejectsWhatLinuxRejects) {
  int id;
  KSigEvent sev;
  sev.signo = kSig;
  EXPECT_EQ(timers().Create(*task_, CLOCK_REALTIME_ALARM, &sev, &id), -EPERM);
  EXPECT_EQ(timers().Create(*task_, CLOCK_BOOTTIME_ALARM, &sev, &id), -EPERM);
  EXPECT_EQ(timers().Create(*task_, CLOCK_MONOTONIC_RAW, &sev, &id),
            -EOPNOTSUPP);
  EXPECT_EQ(timers().Create(*task_, 99, &sev, &id), -EINVAL);
  sev.signo = 0;
  EXPECT_EQ(timers().Create(*task_, CLOCK_MONOTONIC, &sev, &id), -EINVAL);
  sev.signo = 65;
  EXPECT_EQ(timers().Create(*task_, CLOCK_MONOTONIC, &sev, &id), -EINVAL);
  sev.signo = kSig;
  sev.notify = 3;
  EXPECT_EQ(timers().Create(*task_, CLOCK_MONOTONIC, &sev, &id), -EINVAL);
  sev.notify = 4;  // SIGEV_SIGNAL | SIGEV_THREAD_ID
  sev.tid = 4242;  // no such thread
  EXPECT_EQ(timers().Create(*task_, CLOCK_MONOTONIC, &sev, &id), -EINVAL);
  sev.tid = task_->tid();
  EXPECT_EQ(timers().Create(*task_, CLOCK_MONOTONIC, &sev, &id), 0);
}

TEST_F(TimersTest, OneShotDeliversSiTimerWithValueAndId) {
  int id = CreateTimer(kSig, 0xabcdef);
  ASSERT_EQ(timers().SetTime(id, 0, Spec(5, 0), nullptr), 0);
  siginfo_t info{};
  ASSERT_TRUE(TakeSignal(kSig, &info));
  EXPECT_EQ(info.si_code, SI_TIMER);
  EXPECT_EQ(info.si_timerid, id);
  EXPECT_EQ(reinterpret_cast<uint64_t>(info.si_value.sival_ptr), 0xabcdefu);
  EXPECT_EQ(info.si_overrun, 0);
  itimerspec cur;
  ASSERT_EQ(timers().GetTime(id, &cur), 0);
  EXPECT_EQ(cur.it_value.tv_sec, 0);
  EXPECT_EQ(cur.it_value.tv_nsec, 0);
}

TEST_F(TimersTest, PendingSignalTurnsExpiriesIntoOverruns) {
  int id = CreateTimer(kSig, 1);
  ASSERT_EQ(timers().SetTime(id, 0, Spec(2, 2), nullptr), 0);
  absl::SleepFor(absl::Milliseconds(100));
  siginfo_t info{};
  ASSERT_TRUE(TakeSignal(kSig, &info));
  // ~50 periods ended while the first signal waited.
  EXPECT_GE(info.si_overrun, 10);
  EXPECT_EQ(timers().GetOverrun(id), info.si_overrun);
  timers().Delete(id);
}

TEST_F(TimersTest, RearmingDropsTheStaleSignal) {
  int id = CreateTimer(kSig, 1);
  ASSERT_EQ(timers().SetTime(id, 0, Spec(1, 0), nullptr), 0);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_NE(task_->pending_signals() & SigBit(kSig), 0u);
  ASSERT_EQ(timers().SetTime(id, 0, Spec(0, 0), nullptr), 0);
  siginfo_t info{};
  EXPECT_EQ(task_->TakePendingSignal(SigBit(kSig), &info), 0);
}

TEST_F(TimersTest, AbsoluteTimeInThePastFiresAtOnce) {
  int id = CreateTimer(kSig, 1, CLOCK_REALTIME);
  itimerspec v = Spec(0, 0);
  v.it_value.tv_sec = 1;  // 1970
  ASSERT_EQ(timers().SetTime(id, TIMER_ABSTIME, v, nullptr), 0);
  siginfo_t info{};
  EXPECT_TRUE(TakeSignal(kSig, &info, absl::Seconds(2)));
}

TEST_F(TimersTest, SettimeReturnsTheOldSetting) {
  int id = CreateTimer(kSig, 1);
  ASSERT_EQ(timers().SetTime(id, 0, Spec(10000, 250), nullptr), 0);
  itimerspec old;
  ASSERT_EQ(timers().SetTime(id, 0, Spec(0, 0), &old), 0);
  EXPECT_EQ(old.it_value.tv_sec, 9);
  EXPECT_EQ(old.it_interval.tv_nsec, 250000000);
  itimerspec bad = Spec(0, 0);
  bad.it_value.tv_nsec = 1000000000;
  EXPECT_EQ(timers().SetTime(id, 0, bad, nullptr), -EINVAL);
}

TEST_F(TimersTest, ItimerRealSendsSigalrmFromTheKernel) {
  itimerval v{};
  v.it_value.tv_usec = 3000;
  ASSERT_EQ(timers().SetITimer(*task_, ITIMER_REAL, v, nullptr), 0);
  siginfo_t info{};
  ASSERT_TRUE(TakeSignal(SIGALRM, &info));
  EXPECT_EQ(info.si_code, SI_KERNEL);
  itimerval cur;
  ASSERT_EQ(timers().GetITimer(ITIMER_REAL, &cur), 0);
  EXPECT_EQ(cur.it_value.tv_sec, 0);
  EXPECT_EQ(cur.it_value.tv_usec, 0);
  EXPECT_EQ(timers().GetITimer(3, &cur), -EINVAL);
}

// CPU timers follow the task's accounting: running application code
// advances ITIMER_VIRTUAL, sleeping does not.
TEST_F(TimersTest, ItimerVirtualCountsOnlyApplicationTime) {
  TaskCpuTime& c = task_->cputime();
  c.Start(MonotonicNowNs());
  c.StartBlocking(MonotonicNowNs());
  itimerval v{};
  v.it_value.tv_usec = 20000;
  ASSERT_EQ(timers().SetITimer(*task_, ITIMER_VIRTUAL, v, nullptr), 0);
  siginfo_t info{};
  EXPECT_FALSE(TakeSignal(SIGVTALRM, &info, absl::Milliseconds(150)));
  c.StopBlocking(MonotonicNowNs());
  c.EnterApp(MonotonicNowNs());
  EXPECT_TRUE(TakeSignal(SIGVTALRM, &info, absl::Seconds(5)));
  c.LeaveApp(MonotonicNowNs());
}

TEST_F(TimersTest, ThreadCpuClockTimerFires) {
  TaskCpuTime& c = task_->cputime();
  c.Start(MonotonicNowNs());
  c.EnterApp(MonotonicNowNs());
  int id = CreateTimer(kSig + 1, 7, CLOCK_THREAD_CPUTIME_ID);
  ASSERT_EQ(timers().SetTime(id, 0, Spec(10, 0), nullptr), 0);
  siginfo_t info{};
  EXPECT_TRUE(TakeSignal(kSig + 1, &info));
  EXPECT_EQ(reinterpret_cast<uint64_t>(info.si_value.sival_ptr), 7u);
  c.LeaveApp(MonotonicNowNs());
}

TEST_F(TimersTest, DeletingStopsPeriodicTimers) {
  int id = CreateTimer(kSig, 1);
  ASSERT_EQ(timers().SetTime(id, 0, Spec(1, 1), nullptr), 0);
  siginfo_t info{};
  ASSERT_TRUE(TakeSignal(kSig, &info));
  timers().DeletePosixTimers();
  task_->TakePendingSignal(SigBit(kSig), &info);
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(task_->pending_signals() & SigBit(kSig), 0u);
}

}  // namespace
}  // namespace sandboxd::kernel
