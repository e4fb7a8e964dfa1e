#include "sentry/fs/timerfd.h"

#include <errno.h>
#include <poll.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/fs/testing/fake_blocker.h"

namespace sandboxd::fs {
namespace {

struct itimerspec Spec(int64_t value_ms, int64_t interval_ms) {
  struct itimerspec s = {};
  s.it_value.tv_sec = value_ms / 1000;
  s.it_value.tv_nsec = (value_ms % 1000) * 1000000;
  s.it_interval.tv_sec = interval_ms / 1000;
  s.it_interval.tv_nsec = (interval_ms % 1000) * 1000000;
  return s;
}

std::shared_ptr<TimerFd> New(int clock, int flags) {
  std::shared_ptr<TimerFd> f;
  EXPECT_EQ(TimerFd::Create(clock, flags, &f), 0);
  return f;
}

uint64_t Ticks(TimerFd& f, FakeBlocker& b) {
  uint64_t v = 0;
  int64_t r = f.Read(&v, sizeof(v), -1, b.io());
  return r < 0 ? static_cast<uint64_t>(r) : v;
}

TEST(TimerFdTest, CreateChecksClockAndFlags) {
  std::shared_ptr<TimerFd> f;
  EXPECT_EQ(TimerFd::Create(12345, 0, &f), -EINVAL);
  EXPECT_EQ(TimerFd::Create(CLOCK_MONOTONIC, 0x4, &f), -EINVAL);
  EXPECT_EQ(TimerFd::Create(CLOCK_BOOTTIME_ALARM, 0, &f), -EPERM);
  EXPECT_EQ(TimerFd::Create(CLOCK_BOOTTIME, TFD_NONBLOCK, &f), 0);
}

TEST(TimerFdTest, OneShotBlocksUntilExpiry) {
  auto f = New(CLOCK_MONOTONIC, 0);
  FakeBlocker b;
  auto spec = Spec(50, 0);
  absl::Time start = absl::Now();
  ASSERT_EQ(f->SetTime(0, spec, nullptr), 0);
  EXPECT_EQ(Ticks(*f, b), 1u);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
  struct itimerspec cur;
  f->GetTime(&cur);
  EXPECT_EQ(cur.it_value.tv_sec, 0);
  EXPECT_EQ(cur.it_value.tv_nsec, 0);
}

TEST(TimerFdTest, PeriodicCountsEveryExpiration) {
  auto f = New(CLOCK_MONOTONIC, TFD_NONBLOCK);
  FakeBlocker b;
  auto spec = Spec(10, 10);
  absl::Time start = absl::Now();
  ASSERT_EQ(f->SetTime(0, spec, nullptr), 0);
  absl::SleepFor(absl::Milliseconds(105));
  uint64_t n = Ticks(*f, b);
  // Bounded by the time that really passed (a loaded machine oversleeps);
  // the timer thread may itself run late, hence the slack below.
  uint64_t most = (absl::Now() - start) / absl::Milliseconds(10);
  EXPECT_GE(n, 5u);
  EXPECT_LE(n, most);
  EXPECT_EQ(Ticks(*f, b), static_cast<uint64_t>(-EAGAIN));
  struct itimerspec old;
  auto off = Spec(0, 0);
  ASSERT_EQ(f->SetTime(0, off, &old), 0);
  EXPECT_EQ(old.it_interval.tv_nsec, 10 * 1000000);
}

TEST(TimerFdTest, AbsoluteTimeInThePastCountsElapsedPeriods) {
  auto f = New(CLOCK_REALTIME, 0);
  FakeBlocker b;
  struct itimerspec spec = Spec(0, 100);
  clock_gettime(CLOCK_REALTIME, &spec.it_value);
  spec.it_value.tv_sec -= 1;
  ASSERT_EQ(f->SetTime(TFD_TIMER_ABSTIME, spec, nullptr), 0);
  uint64_t n = Ticks(*f, b);
  EXPECT_GE(n, 10u);
  EXPECT_LE(n, 12u);
}

TEST(TimerFdTest, DisarmAndRearmResetTheCount) {
  auto f = New(CLOCK_MONOTONIC, TFD_NONBLOCK);
  FakeBlocker b;
  auto soon = Spec(1, 0), off = Spec(0, 0);
  f->SetTime(0, soon, nullptr);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(f->Readiness(POLLIN), static_cast<waiter::EventMask>(POLLIN));
  f->SetTime(0, off, nullptr);
  EXPECT_EQ(f->Readiness(POLLIN), 0u);
  EXPECT_EQ(Ticks(*f, b), static_cast<uint64_t>(-EAGAIN));
}

TEST(TimerFdTest, ExpiryNotifiesWaiters) {
  auto f = New(CLOCK_MONOTONIC, 0);
  waiter::CountingWaiter w;
  f->EventRegister(&w, POLLIN);
  auto spec = Spec(5, 0);
  f->SetTime(0, spec, nullptr);
  EXPECT_TRUE(w.AwaitCount(1, absl::Seconds(5)));
  f->EventUnregister(&w);
}

TEST(TimerFdTest, BadArguments) {
  auto f = New(CLOCK_MONOTONIC, 0);
  FakeBlocker b;
  struct itimerspec bad = Spec(0, 0);
  bad.it_value.tv_nsec = 1000000000;
  EXPECT_EQ(f->SetTime(0, bad, nullptr), -EINVAL);
  auto ok = Spec(10, 0);
  EXPECT_EQ(f->SetTime(0x10, ok, nullptr), -EINVAL);
  char small[4];
  EXPECT_EQ(f->Read(small, 4, -1, b.io()), -EINVAL);
}

TEST(TimerFdTest, ManyTimersShareTheThread) {
  std::vector<std::shared_ptr<TimerFd>> fds;
  for (int i = 0; i < 50; i++) {
    fds.push_back(New(CLOCK_MONOTONIC, 0));
    auto spec = Spec(1 + i % 7, 0);
    fds.back()->SetTime(0, spec, nullptr);
  }
  FakeBlocker b;
  for (auto& f : fds) EXPECT_EQ(Ticks(*f, b), 1u);
  // A timer destroyed while armed is dropped by the thread.
  auto later = Spec(5, 0);
  fds[0]->SetTime(0, later, nullptr);
  fds.clear();
  absl::SleepFor(absl::Milliseconds(20));
}

}  // namespace
}  // namespace sandboxd::fs
