// Timekeeper: keeps the vvar page's time parameters in step with the host's
// clocks.
//
// The vDSO computes time as base + (rdtsc - base_tsc) * rate. The rate (ns
// per TSC cycle) is measured against the host's CLOCK_MONOTONIC between
// consecutive samples; each update also slews the rate so that the error
// seen at the update is worked off by the next one, instead of stepping the
// clock: CLOCK_MONOTONIC as the vDSO serves it never goes backwards across
// an update (only an error above kMaxSlewNs, after a stall, is stepped).
// Updates come from a thread of the Timekeeper, 1 ms after the start and
// then at doubling intervals up to kMaxIntervalNs, so the rate is first
// known coarsely and quickly, then precisely.
//
// REALTIME and BOOTTIME are MONOTONIC plus the host's offsets, which change
// only when the host's clock is stepped (or the host resumes): offsets that
// moved by less than kOffsetNoiseNs are measurement noise and are kept.
// The published MONOTONIC and BOOTTIME are the sandbox's: the host's plus
// waiter::ClockOffsetNs (non-zero after a restore); the rate and slewing
// work on the host's clock.
//
// Thread-safety: Update is called by one thread at a time (the updater
// thread, or a test); readers of the vvar page need no lock (seqcount).
#ifndef SANDBOXD_SENTRY_VDSO_TIMEKEEPER_H_
#define SANDBOXD_SENTRY_VDSO_TIMEKEEPER_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "sentry/vdso/vvar.h"

namespace sandboxd::vdso {

// Whether the TSC can serve time: the host kernel says constant_tsc and
// nonstop_tsc in `cpuinfo` (the text of /proc/cpuinfo) and uses a TSC-based
// clocksource (`clocksource`: the content of .../current_clocksource; empty
// when unknown). *why says what was missing when it returns false.
bool TscUsable(const std::string& cpuinfo, const std::string& clocksource,
               std::string* why);
// The same for this host, reading /proc/cpuinfo and sysfs; without
// /proc/cpuinfo, CPUID's invariant-TSC bit decides.
bool HostTscUsable(std::string* why);

class Timekeeper {
 public:
  static constexpr int64_t kFirstIntervalNs = 1000000;      // 1 ms
  static constexpr int64_t kMaxIntervalNs = 1000000000;     // 1 s
  static constexpr int64_t kMaxSlewNs = 1000000;            // 1 ms
  static constexpr int64_t kOffsetNoiseNs = 5000;           // 5 us
  // A sample whose host-clock bracket is wider than this (the thread was
  // preempted while taking it) says too little and is not used.
  static constexpr int64_t kMaxSampleWindowNs = 5000;       // 5 us

  // One reading of the TSC and the host's clocks, all in ns.
  struct Sample {
    uint64_t tsc = 0;
    int64_t mono = 0;
    int64_t real = 0;
    int64_t boot = 0;
    // The widest of the host-clock brackets around the TSC, realtime and
    // boottime reads: the sample's uncertainty.
    int64_t window = 0;
  };
  // Reads the TSC bracketed by host CLOCK_MONOTONIC reads (the tightest of a
  // few tries), and the realtime and boottime offsets the same way.
  static Sample Now();

  // `vvar` is written by this object and must outlive it. With
  // `use_tsc` false the vvar stays in syscall mode forever.
  Timekeeper(Vvar* vvar, bool use_tsc);
  ~Timekeeper();  // stops the updater thread
  Timekeeper(const Timekeeper&) = delete;
  Timekeeper& operator=(const Timekeeper&) = delete;

  // Starts the updater thread (takes the first sample now); an error when
  // the host refuses a thread.
  absl::Status Start();
  // Blocks until the vvar holds usable parameters (returns at once when
  // the TSC is not used).
  void WaitCalibrated();

  // One update step with sample `s`; the next update is expected
  // `next_interval_ns` later. Public for tests, which feed it samples.
  void Update(const Sample& s, int64_t next_interval_ns);

  // Tests: publish parameters based at the sample's TSC rather than at the
  // TSC read when publishing, so that synthetic samples give exact values.
  void PublishAtSampleForTest() {
    absl::MutexLock l(&update_mu_);
    publish_at_sample_ = true;
  }

  // Publishes the current parameters again with the sandbox's clock
  // offsets as they are now (waiter::SetClockOffsets: a restore). Nothing
  // while not calibrated (the first update reads them).
  void Republish();

  bool calibrated() const;
  // The monotonic time (ns) the current parameters give at TSC `tsc`.
  int64_t MonotonicAt(uint64_t tsc) const;

 private:
  void Run();
  void Publish(uint64_t base_tsc, uint64_t mult, int64_t mono)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu_);

  Vvar* const vvar_;
  const bool use_tsc_;

  // Serialises Update (the thread and tests).
  mutable absl::Mutex update_mu_;
  bool publish_at_sample_ ABSL_GUARDED_BY(update_mu_) = false;
  bool have_prev_ ABSL_GUARDED_BY(update_mu_) = false;
  Sample prev_ ABSL_GUARDED_BY(update_mu_);
  bool valid_ ABSL_GUARDED_BY(update_mu_) = false;
  uint64_t base_tsc_ ABSL_GUARDED_BY(update_mu_) = 0;
  uint64_t mult_ ABSL_GUARDED_BY(update_mu_) = 0;
  int64_t base_mono_ ABSL_GUARDED_BY(update_mu_) = 0;
  int64_t real_off_ ABSL_GUARDED_BY(update_mu_) = 0;
  int64_t boot_off_ ABSL_GUARDED_BY(update_mu_) = 0;

  absl::Mutex thread_mu_;
  bool stop_ ABSL_GUARDED_BY(thread_mu_) = false;
  std::thread thread_;
};

}  // namespace sandboxd::vdso

#endif  // SANDBOXD_SENTRY_VDSO_TIMEKEEPER_H_
