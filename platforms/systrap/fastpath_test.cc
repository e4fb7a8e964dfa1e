#include "platforms/systrap/fastpath.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sandboxd::systrap {
namespace {

constexpr uint64_t kPeriod = 400 * 1000;
constexpr uint64_t kT0 = 1'000'000'000;  // the fake clock's origin (ns)
constexpr uint64_t kFutexNs = 40'000;    // a sleeping waiter's wakeup
constexpr uint64_t kSpinNs = 300;        // a spinning waiter's

FastPath::Options Opts(FastPathMode mode = FastPathMode::kAdaptive,
                       int cpus = 2) {
  FastPath::Options o;
  o.mode = mode;
  o.cpus = cpus;
  o.period_ns = kPeriod;
  o.min_samples = 8;
  o.max_backoff_periods = 8;
  o.refresh_periods = 1000;
  return o;
}

void RecordMany(FastPath& fp, Side side, bool spun, uint64_t ns, int n = 20) {
  for (int i = 0; i < n; i++) fp.Record(side, spun, ns);
}

bool Spins(const FastPath& fp, Side side, uint64_t now) {
  return fp.ShouldSpin(side, now, /*my_cpu=*/0, /*other_cpu=*/1);
}

// Drives one side through periods with a fake clock: one submission at the
// end of each period (which evaluates the period just ended).
class Driver {
 public:
  explicit Driver(FastPath& fp) : fp_(fp) { fp_.OnSubmit(now_); }
  // Ends the current period; returns whether `side` spins afterwards.
  bool EndPeriod(Side side) {
    now_ += kPeriod;
    fp_.OnSubmit(now_);
    return Spins(fp_, side, now_);
  }
  uint64_t now() const { return now_; }
  void Advance(uint64_t ns) { now_ += ns; }

 private:
  FastPath& fp_;
  uint64_t now_ = kT0;
};

TEST(LatencyBucketTest, Log2) {
  EXPECT_EQ(LatencyBucket(0), 0);
  EXPECT_EQ(LatencyBucket(1), 0);
  EXPECT_EQ(LatencyBucket(2), 1);
  EXPECT_EQ(LatencyBucket(3), 1);
  EXPECT_EQ(LatencyBucket(1024), 10);
  EXPECT_EQ(LatencyBucket(2047), 10);
  EXPECT_EQ(LatencyBucket(~uint64_t{0}), kLatencyBuckets - 1);
}

TEST(HistogramMedianTest, InterpolatesInsideTheBucket) {
  uint64_t h[kLatencyBuckets] = {};
  EXPECT_EQ(HistogramMedian(h), 0u);
  h[10] = 1;  // one sample in [1024, 2048): the middle
  EXPECT_EQ(HistogramMedian(h), 1536u);
  h[10] = 0;
  h[4] = 3;   // 3 samples in [16, 32)
  h[15] = 2;  // 2 in [32768, 65536): the median is the 3rd, in bucket 4
  EXPECT_GE(HistogramMedian(h), 16u);
  EXPECT_LT(HistogramMedian(h), 32u);
  h[15] = 5;  // now the 5th of 8 (rank 4): the first in bucket 15
  EXPECT_GE(HistogramMedian(h), 32768u);
  EXPECT_LT(HistogramMedian(h), 65536u);
}

TEST(ParseFastPathModeTest, Names) {
  EXPECT_EQ(*ParseFastPathMode("adaptive"), FastPathMode::kAdaptive);
  EXPECT_EQ(*ParseFastPathMode("off"), FastPathMode::kOff);
  EXPECT_EQ(*ParseFastPathMode("timer"), FastPathMode::kTimer);
  EXPECT_FALSE(ParseFastPathMode("on").ok());
  EXPECT_EQ(FastPathModeName(FastPathMode::kTimer), "timer");
}

TEST(FastPathTest, StartsOffAndTurnsOnOnceABaselineIsKnown) {
  FastPath fp(Opts());
  Driver d(fp);
  EXPECT_FALSE(Spins(fp, Side::kSentry, d.now()));
  // A period without samples: no baseline, stays off.
  EXPECT_FALSE(d.EndPeriod(Side::kSentry));
  // A period of futex hand-overs gives the baseline: try spinning.
  RecordMany(fp, Side::kSentry, /*spun=*/false, kFutexNs);
  EXPECT_TRUE(d.EndPeriod(Side::kSentry));
  EXPECT_EQ(fp.counters().enabled[0].load(), 1u);
  EXPECT_EQ(fp.counters().spinning[0].load(), 1u);
  // The other side had no samples: still off.
  EXPECT_FALSE(Spins(fp, Side::kStub, d.now()));
  EXPECT_EQ(fp.counters().evaluations.load(), 2u);
}

TEST(FastPathTest, StaysOnWhileSpinningPays) {
  FastPath fp(Opts());
  Driver d(fp);
  RecordMany(fp, Side::kStub, false, kFutexNs);
  ASSERT_TRUE(d.EndPeriod(Side::kStub));
  for (int i = 0; i < 10; i++) {
    RecordMany(fp, Side::kStub, true, kSpinNs);
    EXPECT_TRUE(d.EndPeriod(Side::kStub)) << "period " << i;
  }
  EXPECT_EQ(fp.counters().enabled[1].load(), 1u);
  EXPECT_EQ(fp.counters().disabled[1].load(), 0u);
}

TEST(FastPathTest, TooFewSamplesDecideNothing) {
  FastPath fp(Opts());
  Driver d(fp);
  RecordMany(fp, Side::kSentry, false, kFutexNs);
  ASSERT_TRUE(d.EndPeriod(Side::kSentry));
  RecordMany(fp, Side::kSentry, true, 10 * kFutexNs, /*n=*/7);
  EXPECT_TRUE(d.EndPeriod(Side::kSentry));
}

TEST(FastPathTest, OnToOffWithExponentialBackOff) {
  FastPath fp(Opts());
  Driver d(fp);
  RecordMany(fp, Side::kSentry, false, kFutexNs);
  ASSERT_TRUE(d.EndPeriod(Side::kSentry));
  // Each trial fails (spinning is slower than the baseline); count the
  // periods it then stays off before the next trial: 1, 2, 4, 8, 8 (cap).
  std::vector<int> off_periods;
  for (int trial = 0; trial < 5; trial++) {
    RecordMany(fp, Side::kSentry, true, 2 * kFutexNs);
    ASSERT_FALSE(d.EndPeriod(Side::kSentry)) << "trial " << trial;
    int off = 1;
    while (!d.EndPeriod(Side::kSentry)) {
      off++;
      ASSERT_LT(off, 100);
    }
    off_periods.push_back(off);
  }
  EXPECT_EQ(off_periods, (std::vector<int>{1, 2, 4, 8, 8}));
  EXPECT_EQ(fp.counters().disabled[0].load(), 5u);
  EXPECT_EQ(fp.counters().enabled[0].load(), 6u);
  // A trial that pays resets the back-off: the next failure costs 1 period.
  RecordMany(fp, Side::kSentry, true, kSpinNs);
  ASSERT_TRUE(d.EndPeriod(Side::kSentry));
  RecordMany(fp, Side::kSentry, true, 2 * kFutexNs);
  ASSERT_FALSE(d.EndPeriod(Side::kSentry));
  EXPECT_TRUE(d.EndPeriod(Side::kSentry));
}

TEST(FastPathTest, BaselineIsRefreshedWhileOn) {
  FastPath::Options o = Opts();
  o.refresh_periods = 3;
  FastPath fp(o);
  Driver d(fp);
  RecordMany(fp, Side::kSentry, false, kFutexNs);
  ASSERT_TRUE(d.EndPeriod(Side::kSentry));
  for (int i = 0; i < 2; i++) {
    RecordMany(fp, Side::kSentry, true, kSpinNs);
    ASSERT_TRUE(d.EndPeriod(Side::kSentry));
  }
  // The third paying period: one period off to re-measure...
  RecordMany(fp, Side::kSentry, true, kSpinNs);
  EXPECT_FALSE(d.EndPeriod(Side::kSentry));
  // ... where the baseline is now faster than spinning was: stays off
  // after the next trial fails.
  RecordMany(fp, Side::kSentry, false, 100);
  EXPECT_TRUE(d.EndPeriod(Side::kSentry));
  RecordMany(fp, Side::kSentry, true, kSpinNs);
  EXPECT_FALSE(d.EndPeriod(Side::kSentry));
}

TEST(FastPathTest, ResetsAfterTwoIdlePeriods) {
  FastPath fp(Opts());
  Driver d(fp);
  RecordMany(fp, Side::kSentry, false, kFutexNs);
  RecordMany(fp, Side::kStub, false, kFutexNs);
  ASSERT_TRUE(d.EndPeriod(Side::kSentry));
  ASSERT_TRUE(Spins(fp, Side::kStub, d.now()));
  const uint64_t last = d.now();
  // Less than two periods of silence: still on.
  EXPECT_TRUE(Spins(fp, Side::kSentry, last + 2 * kPeriod - 1));
  // Two whole periods without a submission: no spinning, even before
  // anything evaluates (no timer runs)...
  EXPECT_FALSE(Spins(fp, Side::kSentry, last + 2 * kPeriod));
  EXPECT_FALSE(Spins(fp, Side::kStub, last + 5 * kPeriod));
  // ... and the next submission resets the state to its start.
  d.Advance(5 * kPeriod);
  fp.OnSubmit(d.now());
  EXPECT_FALSE(Spins(fp, Side::kSentry, d.now()));
  EXPECT_FALSE(Spins(fp, Side::kStub, d.now()));
  EXPECT_EQ(fp.counters().idle_resets.load(), 1u);
  EXPECT_EQ(fp.counters().spinning[0].load(), 0u);
  EXPECT_EQ(fp.counters().spinning[1].load(), 0u);
  // From the start: a baseline period first, then a trial.
  EXPECT_FALSE(d.EndPeriod(Side::kSentry));
  RecordMany(fp, Side::kSentry, false, kFutexNs);
  EXPECT_TRUE(d.EndPeriod(Side::kSentry));
}

TEST(FastPathTest, SamplesBeforeAnIdleResetAreDropped) {
  FastPath fp(Opts());
  Driver d(fp);
  RecordMany(fp, Side::kSentry, false, kFutexNs);
  d.Advance(3 * kPeriod);
  fp.OnSubmit(d.now());  // idle: reset, the samples are gone
  EXPECT_FALSE(d.EndPeriod(Side::kSentry));
  EXPECT_EQ(fp.counters().evaluations.load(), 1u);
}

TEST(FastPathTest, OneEvaluatorAmongConcurrentSubmitters) {
  FastPath fp(Opts());
  fp.OnSubmit(kT0);
  constexpr int kThreads = 8;
  constexpr int kPeriods = 50;
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      // Every thread submits many times in every period, all at once.
      for (int p = 1; p <= kPeriods; p++) {
        for (int i = 0; i < 200; i++) {
          fp.Record(Side::kSentry, false, kFutexNs);
          fp.OnSubmit(kT0 + p * kPeriod + i);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  // At most one evaluation per period; a thread that lags a period behind
  // may find its period already evaluated, never evaluate it again.
  EXPECT_LE(fp.counters().evaluations.load(), uint64_t{kPeriods});
  EXPECT_GE(fp.counters().evaluations.load(), 1u);
  uint64_t total = 0;
  for (int b = 0; b < kLatencyBuckets; b++) {
    total += fp.counters().latency[0][b].load();
  }
  EXPECT_EQ(total, uint64_t{kThreads} * kPeriods * 200);
}

TEST(FastPathTest, OneEvaluationPerPeriodWithAFakeClock) {
  FastPath fp(Opts());
  Driver d(fp);
  for (int i = 0; i < 100; i++) fp.OnSubmit(kT0 + kPeriod - 1 - i);
  EXPECT_EQ(fp.counters().evaluations.load(), 0u);
  for (int i = 0; i < 100; i++) fp.OnSubmit(kT0 + kPeriod + i);
  EXPECT_EQ(fp.counters().evaluations.load(), 1u);
  for (int i = 0; i < 100; i++) fp.OnSubmit(kT0 + 2 * kPeriod + i);
  EXPECT_EQ(fp.counters().evaluations.load(), 2u);
}

TEST(FastPathTest, NeverSpinsOnASharedCore) {
  // One CPU for the whole sandbox: never on, whatever the samples say.
  {
    FastPath fp(Opts(FastPathMode::kAdaptive, /*cpus=*/1));
    Driver d(fp);
    for (int i = 0; i < 10; i++) {
      RecordMany(fp, Side::kSentry, false, kFutexNs);
      EXPECT_FALSE(d.EndPeriod(Side::kSentry));
    }
    EXPECT_EQ(fp.counters().enabled[0].load(), 0u);
  }
  // Several CPUs, but the thread waited for was last seen on ours.
  FastPath fp(Opts());
  Driver d(fp);
  RecordMany(fp, Side::kSentry, false, kFutexNs);
  ASSERT_TRUE(d.EndPeriod(Side::kSentry));
  EXPECT_FALSE(fp.ShouldSpin(Side::kSentry, d.now(), 1, 1));
  EXPECT_TRUE(fp.ShouldSpin(Side::kSentry, d.now(), 1, 0));
  EXPECT_TRUE(fp.ShouldSpin(Side::kSentry, d.now(), -1, -1));  // unknown
}

TEST(FastPathTest, OffModeNeverSpinsButCounts) {
  FastPath fp(Opts(FastPathMode::kOff));
  Driver d(fp);
  for (int i = 0; i < 5; i++) {
    RecordMany(fp, Side::kStub, false, kFutexNs);
    EXPECT_FALSE(d.EndPeriod(Side::kStub));
  }
  EXPECT_EQ(fp.counters().evaluations.load(), 0u);
  EXPECT_EQ(fp.counters().latency[1][LatencyBucket(kFutexNs)].load(), 100u);
}

TEST(FastPathTest, TimerModeEvaluatesOnlyOnTicks) {
  FastPath fp(Opts(FastPathMode::kTimer));
  Driver d(fp);
  RecordMany(fp, Side::kSentry, false, kFutexNs);
  EXPECT_FALSE(d.EndPeriod(Side::kSentry));  // submissions do not evaluate
  EXPECT_EQ(fp.counters().evaluations.load(), 0u);
  fp.Tick(d.now());
  EXPECT_TRUE(Spins(fp, Side::kSentry, d.now()));
  // Idle ticks reset it, once.
  fp.Tick(d.now() + 2 * kPeriod);
  fp.Tick(d.now() + 3 * kPeriod);
  EXPECT_FALSE(Spins(fp, Side::kSentry, d.now() + 3 * kPeriod));
  EXPECT_EQ(fp.counters().idle_resets.load(), 1u);
}

}  // namespace
}  // namespace sandboxd::systrap
