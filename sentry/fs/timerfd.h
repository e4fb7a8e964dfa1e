// timerfd_create(2): a file whose timer is fired by the Sentry's timer
// thread (sentry/waiter/timer_thread.h).
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

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/file.h"
#include "sentry/waiter/event_source.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::fs {

class TimerFd : public File, public waiter::EventSource {
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
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override;
  void EventUnregister(waiter::Waiter* w) override;
  std::shared_ptr<waiter::WaitQueue> event_queue() override;

  TimerFd(clockid_t clock, int flags);
  ~TimerFd() override;

 private:
  friend struct ::sandboxd::state::FsState;
  // What the timer thread holds (weakly): the timer's settings and count.
  class State : public waiter::Timer, public std::enable_shared_from_this<State> {
   public:
    explicit State(clockid_t clock) : clock_(clock) {}
    void Expired() override;

    const clockid_t clock_;
    const std::shared_ptr<waiter::WaitQueue> queue_ = std::make_shared<waiter::WaitQueue>();
    absl::Mutex mu_;
    int64_t next_ns_ ABSL_GUARDED_BY(mu_) = 0;  // 0: disarmed
    int64_t interval_ns_ ABSL_GUARDED_BY(mu_) = 0;
    uint64_t ticks_ ABSL_GUARDED_BY(mu_) = 0;
    // Armed with TFD_TIMER_ABSTIME on CLOCK_REALTIME: a checkpoint keeps
    // its deadline, which follows the host's real time across a restore
    // (relative timers keep the time left, as Linux's relative
    // CLOCK_REALTIME timers run on the monotonic base).
    bool abs_realtime_ ABSL_GUARDED_BY(mu_) = false;
  };

  const std::shared_ptr<State> state_;
  const uint64_t ino_;
  std::atomic<bool> nonblock_;
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_TIMERFD_H_
