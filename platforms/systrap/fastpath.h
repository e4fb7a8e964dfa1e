// The adaptive fast path of systrap's hand-over: whether the side that waits
// for the other spins (a bounded pause loop) before it sleeps on the futex.
//
// Two sides decide independently:
//   kSentry: a Sentry thread waiting for its stub thread's next trap
//            (latency "to Sentry": stub publishes -> Sentry sees it);
//   kStub:   a stub thread waiting for the Sentry's reply
//            (latency "to stub": Sentry publishes -> stub sees it).
//
// Every hand-over is timestamped on both sides and its latency recorded
// here, labelled with whether the waiter spun. Time is cut into recording
// periods. At the end of a period the state machine of each side compares
// the median latency with spinning against the baseline median without;
// a side whose spinning does not pay is turned off and tried again only
// after an exponential back-off (1, 2, 4, ... periods). The evaluation
// runs inline from the submit path (OnSubmit): one atomic timestamp check
// per submission, and a try-lock so that of concurrent submitters only one
// evaluates. Two whole periods without a submission reset both sides to
// "no spinning", so a bad "on" state always has a way out; no thread wakes
// on a timer (kTimer mode, for comparison, evaluates from Tick() instead).
//
// This class is pure: it is fed timestamps (ns, any monotonic origin) and
// does no I/O, so the unit tests drive it with a fake clock. It is safe for
// concurrent use: Record/OnSubmit/ShouldSpin from any number of threads.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_FASTPATH_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_FASTPATH_H_

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platforms/systrap/stats.h"

namespace sandboxd::systrap {

// The log2 bucket of a latency (stats.h).
int LatencyBucket(uint64_t ns);

enum class FastPathMode {
  kAdaptive,  // evaluated inline on the submit path (default)
  kOff,       // never spin: every wait sleeps on the futex at once
  kTimer,     // evaluated by a timer every kTimerPeriodNs (for comparison)
};
absl::StatusOr<FastPathMode> ParseFastPathMode(absl::string_view s);
absl::string_view FastPathModeName(FastPathMode m);

class FastPath {
 public:
  struct Options {
    FastPathMode mode = FastPathMode::kAdaptive;
    // CPUs the sandbox may run on. With one, a spinner always shares the
    // core with the thread it waits for: spinning is never used.
    int cpus = 2;
    uint64_t period_ns = 400 * 1000;
    // A period with fewer samples of a kind says nothing about that kind.
    uint64_t min_samples = 8;
    // Back-off after a failed trial: 1, 2, 4, ... up to this many periods.
    uint32_t max_backoff_periods = 256;
    // While spinning pays, the baseline is re-measured (one period off)
    // every this many periods, so that it does not go stale.
    uint32_t refresh_periods = 64;
  };
  static constexpr uint64_t kTimerPeriodNs = 400 * 1000;

  explicit FastPath(const Options& o);
  FastPath(const FastPath&) = delete;
  FastPath& operator=(const FastPath&) = delete;

  // Whether a thread of `side` about to wait should spin first. my_cpu and
  // other_cpu are the host CPUs of the waiter and of the thread it waits
  // for (last seen); -1 if unknown. Never spins on a shared core, nor
  // after two idle periods (before the evaluation that resets the state).
  bool ShouldSpin(Side side, uint64_t now_ns, int my_cpu, int other_cpu) const;

  // One hand-over towards `side`'s waiter took latency_ns; `spun` says
  // whether that waiter was spinning (rather than asleep at once).
  void Record(Side side, bool spun, uint64_t latency_ns);

  // A stub thread submitted a context at now_ns. In kAdaptive mode, ends
  // the recording period when it is over (at most one evaluation per
  // period, by one submitter). Cheap when the period is not over.
  void OnSubmit(uint64_t now_ns);

  // kTimer mode: the timer fired at now_ns; evaluates unconditionally.
  void Tick(uint64_t now_ns);

  // The fast-path fields of Stats: written here, read by anyone.
  const Stats& counters() const { return counters_; }
  Stats& mutable_counters() { return counters_; }
  FastPathMode mode() const { return opts_.mode; }

 private:
  enum class State : uint32_t { kOff, kOn };
  struct Period {
    std::atomic<uint64_t> buckets[2][kLatencyBuckets] = {};  // [spun]
  };
  // The decision state of one side: touched only by the evaluator (under
  // evaluating_), except `on`, which waiters read.
  struct SideState {
    std::atomic<bool> on{false};
    State state = State::kOff;
    uint32_t cooldown = 1;  // periods to stay off before the next trial
    uint32_t backoff = 1;   // cooldown after the next failed trial
    uint32_t periods_on = 0;
    uint64_t baseline_ns = 0;  // median without spinning; 0: not known
    Period period;
  };

  // Preconditions: evaluating_ is held (by this thread).
  void Evaluate();
  void EvaluateSide(Side side);
  void ResetAll();
  void Reset(Side side);
  void SetOn(Side side, bool on);

  const Options opts_;
  // Start of the current period, last submission (ns).
  std::atomic<uint64_t> period_start_{0};
  std::atomic<uint64_t> last_submit_{0};
  std::atomic<bool> evaluating_{false};
  SideState sides_[2];
  Stats counters_;
};

// The median of a log2 histogram, interpolated linearly inside its bucket;
// 0 if the histogram is empty. Exposed for tests.
uint64_t HistogramMedian(const uint64_t (&buckets)[kLatencyBuckets]);

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_FASTPATH_H_
