// timerfd_create(2) and the Sentry's timer thread.
//
// Every armed timer of the Sentry is served by one host thread
// (TimerThread): it sleeps until the earliest deadline, each deadline on its
// own clock (CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME, read from the
// host as the application's clock_gettime does), and calls that timer's
// Expired(). No thread per timer. timerfds and the kernel's interval and
// POSIX timers (sentry/kernel/timers.h) share it.
//
// Lock order: TimerFd::State::mu_ > TimerThread::mu_ > the timerfd's
// WaitQueue (notified with neither lock held).
#ifndef SANDBOXD_SENTRY_FS_TIMERFD_H_
#define SANDBOXD_SENTRY_FS_TIMERFD_H_

#include <sys/timerfd.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/event_source.h"
#include "sentry/fs/file.h"

namespace sandboxd::fs {

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
  // The Sentry's timer thread, started on first use; it lives as long as
  // the process.
  static TimerThread& Get();

  // Arms `t` for `deadline_ns` on `clock`, replacing its previous deadline.
  // The thread holds `t` weakly: a timer destroyed while armed is dropped.
  void Arm(const std::shared_ptr<Timer>& t, clockid_t clock,
           int64_t deadline_ns);
  void Disarm(Timer* t);

 private:
  TimerThread();
  void Loop();

  struct Entry {
    std::weak_ptr<Timer> timer;
    clockid_t clock;
    int64_t deadline_ns;
  };
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::unordered_map<Timer*, Entry> armed_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class TimerFd : public File, public EventSource {
 public:
  // timerfd_create: -EINVAL for unknown clocks and flags, -EPERM for the
  // _ALARM clocks (CAP_WAKE_ALARM, which the sandbox never has).
  static int64_t Create(int clock, int flags, std::shared_ptr<TimerFd>* out);

  // timerfd_settime: -EINVAL for bad flags or timespecs. `old` may be null.
  // TFD_TIMER_CANCEL_ON_SET is accepted but a clock change is never
  // reported (read never fails with ECANCELED).
  int64_t SetTime(int flags, const struct itimerspec& value,
                  struct itimerspec* old);
  void GetTime(struct itimerspec* cur);

  // 8 bytes: the number of expirations since the last read; blocks at 0.
  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void*, uint64_t, int64_t, const IoContext&) override {
    return -EINVAL;
  }
  int64_t Seek(int64_t, int) override { return 0; }  // noop_llseek
  int64_t Stat(struct stat* st) override;
  int64_t Ioctl(uint64_t, void*) override { return -ENOTTY; }
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  EventMask Readiness(EventMask mask) override;
  void EventRegister(Waiter* w, EventMask mask) override;
  void EventUnregister(Waiter* w) override;
  std::shared_ptr<WaitQueue> event_queue() override;

  TimerFd(clockid_t clock, int flags);
  ~TimerFd() override;

 private:
  friend struct ::sandboxd::state::FsState;
  // What the timer thread holds (weakly): the timer's settings and count.
  class State : public Timer, public std::enable_shared_from_this<State> {
   public:
    explicit State(clockid_t clock) : clock_(clock) {}
    void Expired() override;

    const clockid_t clock_;
    const std::shared_ptr<WaitQueue> queue_ = std::make_shared<WaitQueue>();
    absl::Mutex mu_;
    int64_t next_ns_ ABSL_GUARDED_BY(mu_) = 0;  // 0: disarmed
    int64_t interval_ns_ ABSL_GUARDED_BY(mu_) = 0;
    uint64_t ticks_ ABSL_GUARDED_BY(mu_) = 0;
  };

  const std::shared_ptr<State> state_;
  const uint64_t ino_;
  std::atomic<bool> nonblock_;
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_TIMERFD_H_
