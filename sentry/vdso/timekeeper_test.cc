// Timekeeper: the update logic on synthetic samples (rate, slewing,
// stepping, offsets, the seqcount), and the drift of the real thing against
// the host's clocks.
#include "sentry/vdso/timekeeper.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/vdso/vvar.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::vdso {
namespace {

// A 3 GHz TSC that started at 1000 cycles when the host's monotonic clock
// was at 5 s.
constexpr int64_t kMono0 = 5000000000;
constexpr int64_t kRealOff = 1700000000000000000;
constexpr int64_t kBootOff = 42000000;
Timekeeper::Sample At(int64_t mono_ns) {
  Timekeeper::Sample s;
  s.tsc = 1000 + static_cast<uint64_t>(mono_ns - kMono0) * 3;
  s.mono = mono_ns;
  s.real = mono_ns + kRealOff;
  s.boot = mono_ns + kBootOff;
  return s;
}

int64_t Base(const Vvar& v, int c) {
  return v.base_sec[c] * 1000000000 + v.base_nsec[c];
}

TEST(TimekeeperLogic, TwoSamplesCalibrate) {
  alignas(64) Vvar v{};
  Timekeeper tk(&v, /*use_tsc=*/true);
  tk.PublishAtSampleForTest();
  EXPECT_EQ(v.mode, kVvarModeSyscall);
  tk.Update(At(kMono0), 1000000);
  EXPECT_FALSE(tk.calibrated());
  EXPECT_EQ(v.mode, kVvarModeSyscall);
  tk.Update(At(kMono0 + 1000000), 2000000);
  ASSERT_TRUE(tk.calibrated());
  EXPECT_EQ(v.mode, kVvarModeTsc);
  EXPECT_EQ(v.seq % 2, 0u);
  EXPECT_EQ(v.shift, kVvarShift);
  // 1/3 ns per cycle.
  EXPECT_NEAR(static_cast<double>(v.mult), 4294967296.0 / 3, 1.0);
  EXPECT_EQ(Base(v, kVvarMonotonic), kMono0 + 1000000);
  EXPECT_EQ(Base(v, kVvarRealtime), kMono0 + 1000000 + kRealOff);
  EXPECT_EQ(Base(v, kVvarBoottime), kMono0 + 1000000 + kBootOff);
  // One second later, predicted to within a nanosecond.
  EXPECT_NEAR(tk.MonotonicAt(At(kMono0 + 1001000000).tsc), kMono0 + 1001000000,
              1);
}

TEST(TimekeeperLogic, AnErrorIsSlewedAwayWithoutAStep) {
  alignas(64) Vvar v{};
  Timekeeper tk(&v, true);
  tk.PublishAtSampleForTest();
  Timekeeper::Sample prev = At(kMono0 + 1000000);
  tk.Update(At(kMono0), 1000000);
  tk.Update(prev, 1000000000);
  // The host's clock ran slower over the last second (NTP slewing it): it
  // is now 400 ns behind what the parameters predict.
  Timekeeper::Sample s = At(kMono0 + 1001000000);
  s.mono -= 400;
  s.real -= 400;
  s.boot -= 400;
  int64_t predicted = tk.MonotonicAt(s.tsc);
  EXPECT_NEAR(predicted - s.mono, 400, 1);
  tk.Update(s, 1000000000);
  // Continuous at the update (no step back for readers)...
  EXPECT_EQ(tk.MonotonicAt(s.tsc), predicted);
  // ...and on the host's clock (running on at its new rate) again one
  // interval later.
  const double host_rate = static_cast<double>(s.mono - prev.mono) /
                           static_cast<double>(s.tsc - prev.tsc);
  uint64_t later = s.tsc + 3000000000ull;
  EXPECT_NEAR(tk.MonotonicAt(later), s.mono + host_rate * 3000000000.0, 2);
}

TEST(TimekeeperLogic, ALargeErrorIsStepped) {
  alignas(64) Vvar v{};
  Timekeeper tk(&v, true);
  tk.PublishAtSampleForTest();
  tk.Update(At(kMono0), 1000000);
  tk.Update(At(kMono0 + 1000000), 1000000);
  Timekeeper::Sample s = At(kMono0 + 2000000);
  s.mono += 5000000;  // e.g. the updater was stalled and the TSC lied
  tk.Update(s, 1000000);
  EXPECT_EQ(tk.MonotonicAt(s.tsc), s.mono);
}

TEST(TimekeeperLogic, OffsetNoiseIsIgnoredAndStepsAreFollowed) {
  alignas(64) Vvar v{};
  Timekeeper tk(&v, true);
  tk.PublishAtSampleForTest();
  tk.Update(At(kMono0), 1000000);
  tk.Update(At(kMono0 + 1000000), 2000000);
  Timekeeper::Sample s = At(kMono0 + 3000000);
  s.real += 30;  // measurement noise
  tk.Update(s, 4000000);
  EXPECT_EQ(Base(v, kVvarRealtime) - Base(v, kVvarMonotonic), kRealOff);
  s = At(kMono0 + 7000000);
  s.real += 3600000000000;  // the host's clock was set an hour ahead
  tk.Update(s, 8000000);
  EXPECT_EQ(Base(v, kVvarRealtime) - Base(v, kVvarMonotonic),
            kRealOff + 3600000000000);
  EXPECT_EQ(Base(v, kVvarBoottime) - Base(v, kVvarMonotonic), kBootOff);
}

// An updater preempted between its sample and the publication must not
// make the clock jump back: the parameters start at the TSC of the
// publication, where they continue the old ones, even when the update
// slews hard (here: the sample says the clock is 500 ns ahead, and the next
// update is due in 1 ms: a 1% slow-down, applied from 20 ms back, would
// step back 200 us).
TEST(TimekeeperLogic, APreemptedUpdaterDoesNotStepBack) {
  std::string why;
  if (!HostTscUsable(&why)) GTEST_SKIP() << "no usable TSC: " << why;
  alignas(64) Vvar v{};
  Timekeeper tk(&v, true);
  // Calibrated over 20 ms, from samples that were not preempted (Update
  // ignores those).
  for (int i = 0; i < 100 && !tk.calibrated(); i++) {
    tk.Update(Timekeeper::Now(), 1000000);
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(tk.calibrated());
  Timekeeper::Sample s;
  do {
    s = Timekeeper::Now();
  } while (s.window > Timekeeper::kMaxSampleWindowNs);
  s.mono -= 500;
  absl::SleepFor(absl::Milliseconds(20));
  const int64_t before = tk.MonotonicAt(VvarRdtsc());
  tk.Update(s, 1000000);
  const int64_t after = tk.MonotonicAt(VvarRdtsc());
  EXPECT_GE(after, before);
  EXPECT_LT(after - before, 1000000);
}

TEST(TimekeeperLogic, BoottimeIsNeverBehindMonotonic) {
  alignas(64) Vvar v{};
  Timekeeper tk(&v, true);
  tk.PublishAtSampleForTest();
  Timekeeper::Sample s = At(kMono0);
  s.boot = s.mono - 40;  // a host that never slept, measured with noise
  tk.Update(s, 1000000);
  s = At(kMono0 + 1000000);
  s.boot = s.mono - 40;
  tk.Update(s, 1000000);
  EXPECT_EQ(Base(v, kVvarBoottime), Base(v, kVvarMonotonic));
}

// A restore's clock offsets (waiter::SetClockOffsets) move the published
// MONOTONIC and BOOTTIME bases, not REALTIME, and the next update keeps
// them without a step: the rate and slewing work on the host's clock.
TEST(TimekeeperLogic, RestoreOffsetsMoveMonotonicAndBoottime) {
  alignas(64) Vvar v{};
  Timekeeper tk(&v, true);
  tk.PublishAtSampleForTest();
  tk.Update(At(kMono0), 1000000);
  tk.Update(At(kMono0 + 1000000), 2000000);
  ASSERT_TRUE(tk.calibrated());
  const int64_t mono = Base(v, kVvarMonotonic), real = Base(v, kVvarRealtime),
                boot = Base(v, kVvarBoottime);
  // The sandbox's clocks were saved 3 s (monotonic) and 4 s (boottime)
  // behind this host's.
  waiter::SetClockOffsets(-3000000000, -4000000000);
  tk.Republish();
  EXPECT_EQ(Base(v, kVvarMonotonic), mono - 3000000000);
  EXPECT_EQ(Base(v, kVvarBoottime), boot - 4000000000);
  EXPECT_EQ(Base(v, kVvarRealtime), real);
  tk.Update(At(kMono0 + 3000000), 4000000);
  // (Within the nanosecond that the rate's rounding may leave.)
  EXPECT_LE(std::llabs(Base(v, kVvarMonotonic) - (kMono0 + 3000000 - 3000000000)),
            1);
  EXPECT_LE(std::llabs(Base(v, kVvarBoottime) -
                       (kMono0 + 3000000 + kBootOff - 4000000000)),
            1);
  EXPECT_LE(std::llabs(Base(v, kVvarRealtime) - (kMono0 + 3000000 + kRealOff)),
            1);
  waiter::SetClockOffsets(0, 0);
}

TEST(TimekeeperLogic, PreemptedSamplesAreIgnored) {
  alignas(64) Vvar v{};
  Timekeeper tk(&v, true);
  tk.PublishAtSampleForTest();
  tk.Update(At(kMono0), 1000000);
  Timekeeper::Sample s = At(kMono0 + 1000000);
  s.window = Timekeeper::kMaxSampleWindowNs + 1;
  tk.Update(s, 1000000);
  EXPECT_FALSE(tk.calibrated());
  s.window = 100;
  tk.Update(s, 1000000);
  EXPECT_TRUE(tk.calibrated());
}

TEST(TimekeeperLogic, WithoutTscTheVvarStaysInSyscallMode) {
  alignas(64) Vvar v{};
  Timekeeper tk(&v, /*use_tsc=*/false);
  ASSERT_TRUE(tk.Start().ok());
  tk.WaitCalibrated();  // returns at once
  tk.Update(At(kMono0), 1000000);
  tk.Update(At(kMono0 + 1000000), 1000000);
  EXPECT_EQ(v.mode, kVvarModeSyscall);
  EXPECT_EQ(v.seq, 0u);
}

// The seqcount: a reader racing a writer that flips between two parameter
// sets never sees a mix of them. With mult 0 a clock reads exactly its
// base, so every reading must be one set's (sec, nsec) pair.
TEST(VvarSeqcount, ReadersNeverSeeATornUpdate) {
  alignas(64) static Vvar v{};
  VvarParams a{}, b{};
  a.mode = b.mode = kVvarModeTsc;
  for (uint32_t c = 0; c < kVvarNumClocks; c++) {
    a.base_sec[c] = 1000 + c;
    a.base_nsec[c] = 111;
    b.base_sec[c] = 2000 + c;
    b.base_nsec[c] = 222;
  }
  b.base_tsc = ~0ull;  // a delta clamped to 0 either way
  VvarWrite(&v, a);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); i++) {
      VvarWrite(&v, (i & 1) ? a : b);
    }
  });
  // Until the two threads have overlapped a lot (the machine may be busy):
  // 200 000 changes of set seen by the reader, or 3 s.
  uint64_t torn = 0, seen_a = 0, seen_b = 0, changes = 0;
  bool last_a = true;
  const absl::Time deadline = absl::Now() + absl::Seconds(3);
  for (uint64_t i = 0; changes < 200000 && ((i & 4095) || absl::Now() < deadline);
       i++) {
    int64_t sec, nsec;
    uint32_t c = static_cast<uint32_t>(i % kVvarNumClocks);
    ASSERT_TRUE(VvarRead(&v, c, &sec, &nsec));
    if (sec == 1000 + c && nsec == 111) {
      seen_a++;
      changes += !last_a;
      last_a = true;
    } else if (sec == 2000 + c && nsec == 222) {
      seen_b++;
      changes += last_a;
      last_a = false;
    } else {
      torn++;
    }
  }
  stop = true;
  writer.join();
  EXPECT_EQ(torn, 0u);
  EXPECT_GT(seen_a, 0u);
  EXPECT_GT(seen_b, 0u);
  EXPECT_EQ(v.seq % 2, 0u);
}

TEST(TscUsable, FromCpuinfoAndClocksource) {
  std::string why;
  const std::string good = "processor\t: 0\nflags\t\t: fpu tsc constant_tsc nonstop_tsc rdtscp\n";
  EXPECT_TRUE(TscUsable(good, "tsc\n", &why));
  EXPECT_TRUE(TscUsable(good, "", &why));
  EXPECT_TRUE(TscUsable(good, "kvm-clock\n", &why));
  EXPECT_FALSE(TscUsable(good, "hpet\n", &why));
  EXPECT_EQ(why, "the host clocksource is hpet");
  EXPECT_FALSE(TscUsable("flags\t\t: fpu tsc constant_tsc\n", "tsc", &why));
  EXPECT_FALSE(TscUsable("flags\t\t: fpu tsc nonstop_tsc\n", "tsc", &why));
  EXPECT_FALSE(TscUsable("", "tsc", &why));
}

// The real Timekeeper against the host: how far the vDSO's monotonic clock
// strays from the host's over 3 s (its updates at 1, 2, 4, ... ms, then
// every second). Readings whose host bracket is wider than 2 us (this
// thread was preempted) say nothing and are skipped.
TEST(TimekeeperDrift, StaysWithinMicrosecondsOfTheHost) {
  std::string why;
  if (!HostTscUsable(&why)) GTEST_SKIP() << "no usable TSC: " << why;
  alignas(64) static Vvar v{};
  Timekeeper tk(&v, true);
  ASSERT_TRUE(tk.Start().ok());
  tk.WaitCalibrated();
  auto ns = [](clockid_t c) {
    timespec ts;
    clock_gettime(c, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  int64_t start = ns(CLOCK_MONOTONIC);
  int64_t worst = 0, worst_after_1s = 0, samples = 0;
  while (ns(CLOCK_MONOTONIC) - start < 3000000000) {
    int64_t m1 = ns(CLOCK_MONOTONIC);
    int64_t sec, nsec;
    ASSERT_TRUE(VvarRead(&v, kVvarMonotonic, &sec, &nsec));
    int64_t m2 = ns(CLOCK_MONOTONIC);
    if (m2 - m1 > 2000) continue;
    int64_t t = sec * 1000000000 + nsec;
    int64_t err = t < m1 ? m1 - t : (t > m2 ? t - m2 : 0);
    worst = std::max(worst, err);
    if (m1 - start > 1000000000) worst_after_1s = std::max(worst_after_1s, err);
    samples++;
    timespec pause = {0, 200000};
    nanosleep(&pause, nullptr);
  }
  printf("vdso drift against host CLOCK_MONOTONIC: worst %lld ns overall, "
         "%lld ns after the first second (%lld samples)\n",
         static_cast<long long>(worst), static_cast<long long>(worst_after_1s),
         static_cast<long long>(samples));
  EXPECT_GT(samples, 1000);
  // The bound the README promises; typical figures are far below it.
  EXPECT_LT(worst_after_1s, 5000);
  EXPECT_LT(worst, 20000);
}

}  // namespace
}  // namespace sandboxd::vdso
