#include "sentry/vdso/timekeeper.h"

#include <cpuid.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::vdso {
namespace {

int64_t ClockNs(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Tries per reading: usually the first is tight; a preempted one is retried.
constexpr int kTries = 8;
constexpr int64_t kTightNs = 1000;

// Reads `clk` between two CLOCK_MONOTONIC reads and returns its offset to
// the monotonic midpoint, from the tightest of a few tries (*window: that
// bracket's width).
int64_t OffsetToMonotonic(clockid_t clk, int64_t* window) {
  int64_t best_window = INT64_MAX, off = 0;
  for (int i = 0; i < kTries && best_window > kTightNs; i++) {
    int64_t m1 = ClockNs(CLOCK_MONOTONIC);
    int64_t c = ClockNs(clk);
    int64_t m2 = ClockNs(CLOCK_MONOTONIC);
    if (m2 - m1 < best_window) {
      best_window = m2 - m1;
      off = c - (m1 + (m2 - m1) / 2);
    }
  }
  *window = best_window;
  return off;
}

std::string ReadFile(const char* path) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void SplitNs(int64_t ns, int64_t* sec, int64_t* nsec) {
  *sec = ns / 1000000000;
  *nsec = ns % 1000000000;
  if (*nsec < 0) {
    *nsec += 1000000000;
    --*sec;
  }
}

}  // namespace

bool TscUsable(const std::string& cpuinfo, const std::string& clocksource,
               std::string* why) {
  bool constant = false, nonstop = false, seen_flags = false;
  for (absl::string_view line : absl::StrSplit(cpuinfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "flags")) continue;
    seen_flags = true;
    for (absl::string_view flag : absl::StrSplit(line, ' ')) {
      constant |= flag == "constant_tsc";
      nonstop |= flag == "nonstop_tsc";
    }
    break;  // every CPU lists the same flags
  }
  if (!seen_flags || !constant || !nonstop) {
    *why = "the host CPU lacks constant_tsc/nonstop_tsc";
    return false;
  }
  std::string cs(absl::StripAsciiWhitespace(clocksource));
  // The host's clocks are TSC-based (possibly through a hypervisor's
  // scaled TSC); any other clocksource means the host kernel distrusts the
  // TSC.
  if (!cs.empty() && cs != "tsc" && cs != "kvm-clock" &&
      cs != "hyperv_clocksource_tsc_page") {
    *why = absl::StrCat("the host clocksource is ", cs);
    return false;
  }
  return true;
}

bool HostTscUsable(std::string* why) {
  std::string cpuinfo = ReadFile("/proc/cpuinfo");
  if (cpuinfo.empty()) {
    // CPUID 0x80000007 EDX bit 8: the invariant TSC, which Linux reports
    // as constant_tsc + nonstop_tsc.
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8))) {
      return true;
    }
    *why = "no invariant TSC (CPUID)";
    return false;
  }
  return TscUsable(
      cpuinfo,
      ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
      why);
}

Timekeeper::Sample Timekeeper::Now() {
  Sample s;
  int64_t best_window = INT64_MAX;
  for (int i = 0; i < kTries && best_window > kTightNs; i++) {
    int64_t m1 = ClockNs(CLOCK_MONOTONIC);
    uint64_t tsc = VvarRdtsc();
    int64_t m2 = ClockNs(CLOCK_MONOTONIC);
    if (m2 - m1 < best_window) {
      best_window = m2 - m1;
      s.tsc = tsc;
      s.mono = m1 + (m2 - m1) / 2;
    }
  }
  int64_t real_window, boot_window;
  s.real = s.mono + OffsetToMonotonic(CLOCK_REALTIME, &real_window);
  s.boot = s.mono + OffsetToMonotonic(CLOCK_BOOTTIME, &boot_window);
  s.window = std::max({best_window, real_window, boot_window});
  return s;
}

Timekeeper::Timekeeper(Vvar* vvar, bool use_tsc)
    : vvar_(vvar), use_tsc_(use_tsc) {
  struct timespec res;
  uint32_t coarse = 0;
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0) {
    coarse = static_cast<uint32_t>(res.tv_nsec);
  }
  __atomic_store_n(&vvar_->coarse_res_nsec, coarse, __ATOMIC_RELAXED);
  __atomic_store_n(&vvar_->mode, kVvarModeSyscall, __ATOMIC_RELEASE);
}

Timekeeper::~Timekeeper() {
  {
    absl::MutexLock l(&thread_mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::Status Timekeeper::Start() {
  if (!use_tsc_) return absl::OkStatus();
  Update(Now(), kFirstIntervalNs);
  ASSIGN_OR_RETURN(thread_,
                   StartThread("the vDSO timekeeper", [this] { Run(); }));
  return absl::OkStatus();
}

void Timekeeper::Run() {
  int64_t interval = kFirstIntervalNs;
  for (;;) {
    {
      absl::MutexLock l(&thread_mu_);
      if (thread_mu_.AwaitWithTimeout(absl::Condition(&stop_),
                                      absl::Nanoseconds(interval))) {
        return;
      }
    }
    int64_t next = std::min(interval * 2, kMaxIntervalNs);
    Update(Now(), next);
    interval = next;
  }
}

void Timekeeper::WaitCalibrated() {
  if (!use_tsc_) return;
  absl::MutexLock l(&update_mu_);
  update_mu_.Await(absl::Condition(&valid_));
}

bool Timekeeper::calibrated() const {
  absl::MutexLock l(&update_mu_);
  return valid_;
}

int64_t Timekeeper::MonotonicAt(uint64_t tsc) const {
  absl::MutexLock l(&update_mu_);
  uint64_t delta = tsc > base_tsc_ ? tsc - base_tsc_ : 0;
  return base_mono_ + static_cast<int64_t>(
                          (static_cast<unsigned __int128>(delta) * mult_) >>
                          kVvarShift);
}

void Timekeeper::Update(const Sample& s, int64_t next_interval_ns) {
  if (!use_tsc_ || s.window > kMaxSampleWindowNs) return;
  absl::MutexLock l(&update_mu_);
  if (!have_prev_ || s.tsc <= prev_.tsc || s.mono <= prev_.mono) {
    // Nothing to measure a rate against (first sample, or a TSC that went
    // backwards: start over from this sample).
    prev_ = s;
    have_prev_ = true;
    return;
  }
  double rate = static_cast<double>(s.mono - prev_.mono) /
                static_cast<double>(s.tsc - prev_.tsc);
  // The new parameters start at `at`: the TSC now, just before they are
  // published, so that readers are continuous across the update however
  // long ago the sample was taken (a preempted updater). The host's clock
  // at `at` is extrapolated from the sample at the measured rate.
  const uint64_t at =
      publish_at_sample_ ? s.tsc : std::max(VvarRdtsc(), s.tsc);
  const int64_t host_at =
      s.mono + static_cast<int64_t>(static_cast<double>(at - s.tsc) * rate);
  int64_t mono = host_at;
  if (valid_) {
    uint64_t delta = at > base_tsc_ ? at - base_tsc_ : 0;
    int64_t predicted =
        base_mono_ + static_cast<int64_t>(
                         (static_cast<unsigned __int128>(delta) * mult_) >>
                         kVvarShift);
    int64_t err = predicted - host_at;
    if (std::llabs(err) <= kMaxSlewNs) {
      // Continue from where the readers are, and run slower (faster) until
      // the next update so as to arrive on the host's clock.
      mono = predicted;
      double slew = static_cast<double>(err) /
                    static_cast<double>(std::max<int64_t>(next_interval_ns, 1));
      rate *= 1.0 - std::clamp(slew, -0.01, 0.01);
    }
  }
  int64_t real_off = s.real - s.mono, boot_off = s.boot - s.mono;
  // BOOTTIME is MONOTONIC plus the time the host spent suspended: never
  // less, and exactly equal on a host that never slept. A measured offset
  // within the noise is that zero (else a reader could see BOOTTIME a few
  // ns behind MONOTONIC).
  if (boot_off < kOffsetNoiseNs) boot_off = 0;
  if (!valid_ || std::llabs(real_off - real_off_) > kOffsetNoiseNs) {
    real_off_ = real_off;
  }
  if (!valid_ || std::llabs(boot_off - boot_off_) > kOffsetNoiseNs) {
    boot_off_ = boot_off;
  }
  uint64_t mult = static_cast<uint64_t>(
      std::llround(std::ldexp(rate, static_cast<int>(kVvarShift))));
  Publish(at, mult, mono);
  prev_ = s;
}

void Timekeeper::Publish(uint64_t base_tsc, uint64_t mult, int64_t mono) {
  base_tsc_ = base_tsc;
  mult_ = mult;
  base_mono_ = mono;
  valid_ = true;

  VvarParams p;
  p.mode = kVvarModeTsc;
  p.base_tsc = base_tsc;
  p.mult = mult;
  // The sandbox's clocks: the host's plus the offsets a restore set
  // (waiter::ClockOffsetNs), as the Sentry's clock_gettime reads them.
  SplitNs(mono + waiter::ClockOffsetNs(CLOCK_MONOTONIC),
          &p.base_sec[kVvarMonotonic], &p.base_nsec[kVvarMonotonic]);
  SplitNs(mono + real_off_, &p.base_sec[kVvarRealtime],
          &p.base_nsec[kVvarRealtime]);
  SplitNs(mono + boot_off_ + waiter::ClockOffsetNs(CLOCK_BOOTTIME),
          &p.base_sec[kVvarBoottime], &p.base_nsec[kVvarBoottime]);
  VvarWrite(vvar_, p);
}

void Timekeeper::Republish() {
  absl::MutexLock l(&update_mu_);
  // The same parameters (base_mono_ is the host's clock): only the
  // offsets added to the bases change.
  if (valid_) Publish(base_tsc_, mult_, base_mono_);
}

}  // namespace sandboxd::vdso
