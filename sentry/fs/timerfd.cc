#include "sentry/fs/timerfd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/time/time.h"
#include "sentry/fs/anon.h"

namespace sandboxd::fs {
namespace {

constexpr int64_t kNsPerSec = 1000000000;

bool ValidTimespec(const struct timespec& ts) {
  return ts.tv_sec >= 0 && ts.tv_nsec >= 0 && ts.tv_nsec < kNsPerSec;
}

// Saturates instead of overflowing: a deadline centuries away is as good
// as never.
int64_t ToNs(const struct timespec& ts) {
  if (ts.tv_sec >= INT64_MAX / kNsPerSec - 1) return INT64_MAX / 2;
  return ts.tv_sec * kNsPerSec + ts.tv_nsec;
}

struct timespec FromNs(int64_t ns) {
  struct timespec ts;
  ts.tv_sec = ns / kNsPerSec;
  ts.tv_nsec = ns % kNsPerSec;
  return ts;
}

}  // namespace

int64_t TimerFd::Create(int clock, int flags, std::shared_ptr<TimerFd>* out) {
  if (flags & ~(TFD_CLOEXEC | TFD_NONBLOCK)) return -EINVAL;
  switch (clock) {
    case CLOCK_REALTIME:
    case CLOCK_MONOTONIC:
    case CLOCK_BOOTTIME:
      break;
    case CLOCK_REALTIME_ALARM:
    case CLOCK_BOOTTIME_ALARM:
      return -EPERM;
    default:
      return -EINVAL;
  }
  *out = std::make_shared<TimerFd>(clock, flags);
  return 0;
}

TimerFd::TimerFd(clockid_t clock, int flags)
    : state_(std::make_shared<State>(clock)),
      ino_(NextAnonIno()),
      nonblock_((flags & TFD_NONBLOCK) != 0) {}

TimerFd::~TimerFd() {
  waiter::TimerThread::Get().Disarm(state_.get());
  // Epoll interests (which hold files weakly) learn that the file is gone.
  state_->queue_->Notify(POLLHUP);
}

void TimerFd::State::Expired() {
  {
    absl::MutexLock l(&mu_);
    if (next_ns_ == 0) return;  // disarmed since
    int64_t now = waiter::ClockNowNs(clock_);
    if (now < next_ns_) {
      // Re-armed for later since the thread picked it up.
      waiter::TimerThread::Get().Arm(shared_from_this(), clock_, next_ns_);
      return;
    }
    if (interval_ns_ > 0) {
      // Every period that ended counts, as Linux's hrtimer_forward does.
      uint64_t periods = 1 + static_cast<uint64_t>((now - next_ns_) / interval_ns_);
      ticks_ += periods;
      next_ns_ += static_cast<int64_t>(periods) * interval_ns_;
      waiter::TimerThread::Get().Arm(shared_from_this(), clock_, next_ns_);
    } else {
      ticks_ += 1;
      next_ns_ = 0;
    }
  }
  queue_->Notify(POLLIN | POLLRDNORM);
}

int64_t TimerFd::SetTime(int flags, const struct itimerspec& value,
                         struct itimerspec* old) {
  if (flags & ~(TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET)) return -EINVAL;
  if (!ValidTimespec(value.it_value) || !ValidTimespec(value.it_interval)) {
    return -EINVAL;
  }
  if (old != nullptr) GetTime(old);
  State& s = *state_;
  absl::MutexLock l(&s.mu_);
  s.ticks_ = 0;  // Linux resets the count on every settime
  s.abs_realtime_ = (flags & TFD_TIMER_ABSTIME) && s.clock_ == CLOCK_REALTIME;
  s.interval_ns_ = ToNs(value.it_interval);
  int64_t v = ToNs(value.it_value);
  if (v == 0) {
    s.next_ns_ = 0;
    waiter::TimerThread::Get().Disarm(state_.get());
    return 0;
  }
  if (flags & TFD_TIMER_ABSTIME) {
    // An absolute time in the past fires at once (next_ns_ must stay
    // non-zero: zero means disarmed).
    s.next_ns_ = std::max<int64_t>(v, 1);
  } else {
    s.next_ns_ = waiter::ClockNowNs(s.clock_) + v;
  }
  waiter::TimerThread::Get().Arm(state_, s.clock_, s.next_ns_);
  return 0;
}

void TimerFd::GetTime(struct itimerspec* cur) {
  State& s = *state_;
  absl::MutexLock l(&s.mu_);
  int64_t left = 0;
  if (s.next_ns_ != 0) {
    left = std::max<int64_t>(0, s.next_ns_ - waiter::ClockNowNs(s.clock_));
  }
  cur->it_value = FromNs(left);
  cur->it_interval = FromNs(s.interval_ns_);
}

int64_t TimerFd::Read(void* buf, uint64_t n, int64_t offset,
                      const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  if (n < sizeof(uint64_t)) return -EINVAL;
  State& s = *state_;
  for (;;) {
    {
      absl::MutexLock l(&s.mu_);
      if (s.ticks_ > 0) {
        uint64_t v = s.ticks_;
        s.ticks_ = 0;
        std::memcpy(buf, &v, sizeof(v));
        return sizeof(v);
      }
    }
    if (nonblock_.load() || io.blocker == nullptr) return -EAGAIN;
    int r = io.blocker->Wait(*s.queue_, POLLIN, [&s] {
      absl::MutexLock l(&s.mu_);
      return s.ticks_ > 0;
    });
    if (r < 0) return r;
  }
}

int64_t TimerFd::Stat(struct stat* st) {
  AnonStat(st, 0600, ino_);
  return 0;
}

int TimerFd::StatusFlags() const {
  return O_RDWR | (nonblock_.load() ? O_NONBLOCK : 0);
}

int64_t TimerFd::SetStatusFlags(int flags) {
  nonblock_.store((flags & O_NONBLOCK) != 0);
  return 0;
}

waiter::EventMask TimerFd::Readiness(waiter::EventMask mask) {
  absl::MutexLock l(&state_->mu_);
  return state_->ticks_ > 0 ? mask & (POLLIN | POLLRDNORM) : 0;
}

void TimerFd::EventRegister(waiter::Waiter* w, waiter::EventMask mask) {
  state_->queue_->Add(w, mask);
}

void TimerFd::EventUnregister(waiter::Waiter* w) { state_->queue_->Remove(w); }

std::shared_ptr<waiter::WaitQueue> TimerFd::event_queue() { return state_->queue_; }

}  // namespace sandboxd::fs
