#include "platforms/systrap/fastpath.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sandboxd::systrap {

int LatencyBucket(uint64_t ns) {
  if (ns == 0) return 0;
  int b = 63 - __builtin_clzll(ns);
  return std::min(b, kLatencyBuckets - 1);
}

uint64_t HistogramMedian(const uint64_t (&buckets)[kLatencyBuckets]) {
  uint64_t n = 0;
  for (uint64_t c : buckets) n += c;
  if (n == 0) return 0;
  const uint64_t target = (n + 1) / 2;  // 1-based rank of the median
  uint64_t before = 0;
  for (int i = 0; i < kLatencyBuckets; i++) {
    const uint64_t c = buckets[i];
    if (before + c >= target) {
      const uint64_t lo = i == 0 ? 0 : uint64_t{1} << i;
      const uint64_t hi = uint64_t{1} << (i + 1);
      // The k-th of c samples sits at (k - 1/2) / c of the bucket.
      return lo + (hi - lo) * (2 * (target - before) - 1) / (2 * c);
    }
    before += c;
  }
  return 0;  // not reached
}

absl::StatusOr<FastPathMode> ParseFastPathMode(absl::string_view s) {
  if (s == "adaptive") return FastPathMode::kAdaptive;
  if (s == "off") return FastPathMode::kOff;
  if (s == "timer") return FastPathMode::kTimer;
  return absl::InvalidArgumentError(
      absl::StrCat("systrap fast path: want adaptive, off or timer, got: ", s));
}

absl::string_view FastPathModeName(FastPathMode m) {
  switch (m) {
    case FastPathMode::kAdaptive:
      return "adaptive";
    case FastPathMode::kOff:
      return "off";
    case FastPathMode::kTimer:
      return "timer";
  }
  return "?";
}

FastPath::FastPath(const Options& o) : opts_(o) {}

bool FastPath::ShouldSpin(Side side, uint64_t now_ns, int my_cpu,
                          int other_cpu) const {
  if (opts_.mode == FastPathMode::kOff || opts_.cpus <= 1) return false;
  // The thread we wait for would need our core: spinning only delays it.
  if (my_cpu >= 0 && my_cpu == other_cpu) return false;
  if (!sides_[static_cast<int>(side)].on.load(std::memory_order_relaxed)) {
    return false;
  }
  // Two idle periods: the reset is due (it happens at the next submission
  // or tick); do not spin on a decision that old.
  const uint64_t last = last_submit_.load(std::memory_order_relaxed);
  return !(now_ns > last && now_ns - last >= 2 * opts_.period_ns);
}

void FastPath::Record(Side side, bool spun, uint64_t latency_ns) {
  const int s = static_cast<int>(side);
  const int b = LatencyBucket(latency_ns);
  counters_.latency[s][b].fetch_add(1, std::memory_order_relaxed);
  if (opts_.mode == FastPathMode::kOff) return;
  sides_[s].period.buckets[spun ? 1 : 0][b].fetch_add(
      1, std::memory_order_relaxed);
}

void FastPath::OnSubmit(uint64_t now_ns) {
  if (opts_.mode == FastPathMode::kOff) return;
  // The idle clock. Written only when it moved by a sixteenth of a period,
  // so that submitters on several cores do not fight over its cache line
  // at every hand-over.
  const uint64_t last = last_submit_.load(std::memory_order_relaxed);
  if (now_ns > last && now_ns - last >= opts_.period_ns / 16) {
    last_submit_.store(now_ns, std::memory_order_relaxed);
  }
  if (opts_.mode != FastPathMode::kAdaptive) return;
  uint64_t start = period_start_.load(std::memory_order_relaxed);
  if (start == 0) {
    // The first submission starts the first period.
    period_start_.compare_exchange_strong(start, now_ns,
                                          std::memory_order_relaxed);
    return;
  }
  if (now_ns < start || now_ns - start < opts_.period_ns) return;
  if (evaluating_.exchange(true, std::memory_order_acquire)) return;
  // Another submitter may have evaluated between our check and the lock.
  start = period_start_.load(std::memory_order_relaxed);
  if (now_ns >= start && now_ns - start >= opts_.period_ns) {
    // `last` is the submission before this one: were we idle since?
    if (now_ns > last && now_ns - last >= 2 * opts_.period_ns) {
      ResetAll();
    } else {
      Evaluate();
    }
    period_start_.store(now_ns, std::memory_order_relaxed);
  }
  evaluating_.store(false, std::memory_order_release);
}

void FastPath::Tick(uint64_t now_ns) {
  if (opts_.mode != FastPathMode::kTimer) return;
  if (evaluating_.exchange(true, std::memory_order_acquire)) return;
  const uint64_t last = last_submit_.load(std::memory_order_relaxed);
  if (now_ns > last && now_ns - last >= 2 * opts_.period_ns) {
    ResetAll();
  } else {
    Evaluate();
  }
  period_start_.store(now_ns, std::memory_order_relaxed);
  evaluating_.store(false, std::memory_order_release);
}

void FastPath::Evaluate() {
  counters_.evaluations.fetch_add(1, std::memory_order_relaxed);
  for (Side s : {Side::kSentry, Side::kStub}) EvaluateSide(s);
}

void FastPath::EvaluateSide(Side side) {
  SideState& st = sides_[static_cast<int>(side)];
  // Take the period's samples. A sample recorded concurrently lands in this
  // period or the next; either is fine for a median.
  uint64_t h[2][kLatencyBuckets];
  uint64_t n[2] = {0, 0};
  for (int spun = 0; spun < 2; spun++) {
    for (int b = 0; b < kLatencyBuckets; b++) {
      h[spun][b] =
          st.period.buckets[spun][b].exchange(0, std::memory_order_relaxed);
      n[spun] += h[spun][b];
    }
  }
  if (n[0] >= opts_.min_samples) st.baseline_ns = HistogramMedian(h[0]);

  switch (st.state) {
    case State::kOff:
      if (st.cooldown > 0) st.cooldown--;
      if (st.cooldown == 0 && st.baseline_ns != 0 && opts_.cpus > 1) {
        st.state = State::kOn;
        st.periods_on = 0;
        SetOn(side, true);
      }
      break;
    case State::kOn: {
      if (n[1] < opts_.min_samples) break;  // nothing to judge this period
      const uint64_t with_spin = HistogramMedian(h[1]);
      if (with_spin < st.baseline_ns) {
        // It pays: keep it, and forget earlier failures.
        st.backoff = 1;
        if (++st.periods_on >= opts_.refresh_periods) {
          // One period off to re-measure the baseline, then on again.
          st.state = State::kOff;
          st.cooldown = 1;
          SetOn(side, false);
        }
      } else {
        st.state = State::kOff;
        st.cooldown = st.backoff;
        st.backoff = std::min(st.backoff * 2, opts_.max_backoff_periods);
        SetOn(side, false);
      }
      break;
    }
  }
}

void FastPath::ResetAll() {
  // Counted only when a side was on: a long idle stretch in kTimer mode
  // ticks many times without anything to reset.
  if (sides_[0].state == State::kOn || sides_[1].state == State::kOn) {
    counters_.idle_resets.fetch_add(1, std::memory_order_relaxed);
  }
  for (Side s : {Side::kSentry, Side::kStub}) Reset(s);
}

void FastPath::Reset(Side side) {
  SideState& st = sides_[static_cast<int>(side)];
  if (st.state == State::kOn) SetOn(side, false);
  st.state = State::kOff;
  st.cooldown = 1;
  st.backoff = 1;
  st.periods_on = 0;
  st.baseline_ns = 0;
  for (auto& row : st.period.buckets) {
    for (auto& b : row) b.store(0, std::memory_order_relaxed);
  }
}

void FastPath::SetOn(Side side, bool on) {
  const int s = static_cast<int>(side);
  sides_[s].on.store(on, std::memory_order_relaxed);
  counters_.spinning[s].store(on ? 1 : 0, std::memory_order_relaxed);
  (on ? counters_.enabled[s] : counters_.disabled[s])
      .fetch_add(1, std::memory_order_relaxed);
}

}  // namespace sandboxd::systrap
