// The Sentry's timer thread.
//
// Every armed timer of the Sentry is served by one host thread
// (TimerThread): it sleeps until the earliest deadline, each deadline on its
// own clock (CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME, read from the
// host as the application's clock_gettime does), and calls that timer's
// Expired(). No thread per timer. timerfds (sentry/fs/timerfd.h) and the
// kernel's interval and POSIX timers (sentry/kernel/timers.h) share it.
//
// Lock order: a timer's own lock > TimerThread::mu_ (Arm and Disarm are
// called with it held; Expired() runs with mu_ released).
#ifndef SANDBOXD_SENTRY_WAITER_TIMER_THREAD_H_
#define SANDBOXD_SENTRY_WAITER_TIMER_THREAD_H_

#include <time.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace sandboxd::waiter {

// Something the timer thread fires.
class Timer {
 public:
  virtual ~Timer() = default;
  // Called on the timer thread, with no lock of the thread's held, at or
  // after the deadline the timer was armed for. May re-arm.
  virtual void Expired() = 0;
};

// The sandbox's clocks. CLOCK_REALTIME (and its _COARSE, _ALARM, TAI) is
// the host's. The monotonic family (CLOCK_MONOTONIC, _COARSE, _RAW) and
// the boottime one (CLOCK_BOOTTIME, _ALARM) are the host's plus an offset
// each, as a Linux time namespace offsets them: zero in a sandbox that
// booted here; a restore sets them (SetClockOffsets) so that those clocks
// go on from their values at the checkpoint, the time between the save and
// the restore not passing on them (as gVisor and Firecracker do). One
// sandbox per Sentry process: the offsets are the process's.
//
// The offset `clock` reads with (0 for the host's own clocks).
int64_t ClockOffsetNs(clockid_t clock);
// Sets the offsets (ns) of the monotonic and the boottime families, and
// has the timer thread look at its deadlines again. Called by a restore
// before it loads anything that reads a clock (state/kernel_state.h,
// KernelState::LoadClocks); the vDSO's parameters follow
// (vdso::Timekeeper::Republish).
void SetClockOffsets(int64_t monotonic_ns, int64_t boottime_ns);
// clock_gettime(2) of the sandbox's `clock`: the host's plus its offset.
// Returns clock_gettime's result (-1 with errno).
int ClockGettime(clockid_t clock, struct timespec* ts);
// Nanoseconds on the sandbox's `clock` now.
int64_t ClockNowNs(clockid_t clock);

class TimerThread {
 public:
  // The Sentry's timer thread, started by Start or at the first Arm; it
  // lives as long as the process.
  static TimerThread& Get();

  // Starts the host thread if it is not running (boot calls it while the
  // Sentry prewarms, so that a host that refuses it fails the start, with
  // its reason, rather than leave timers unfired).
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);

  // Arms `t` for `deadline_ns` on `clock`, replacing its previous deadline.
  // The thread holds `t` weakly: a timer destroyed while armed is dropped.
  void Arm(const std::shared_ptr<Timer>& t, clockid_t clock,
           int64_t deadline_ns);
  void Disarm(Timer* t);
  // Has the thread read the clocks again (their offsets changed).
  void Kick();

 private:
  TimerThread();
  void Loop();
  absl::Status StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Entry {
    std::weak_ptr<Timer> timer;
    clockid_t clock;
    int64_t deadline_ns;
  };
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::unordered_map<Timer*, Entry> armed_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sandboxd::waiter

#endif  // SANDBOXD_SENTRY_WAITER_TIMER_THREAD_H_
