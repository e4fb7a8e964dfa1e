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

// Nanoseconds on `clock` now (host clock_gettime).
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
