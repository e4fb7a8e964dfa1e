// Test helper: a Blocker that is not a task. It sleeps on a CondVar until
// a notification of the queue it waits on, an Interrupt() (-EINTR), or the
// deadline (-ETIMEDOUT), and counts how often it went to sleep so that a
// test can tell a blocked caller from one that has not got there yet.
#ifndef SANDBOXD_SENTRY_WAITER_TESTING_FAKE_BLOCKER_H_
#define SANDBOXD_SENTRY_WAITER_TESTING_FAKE_BLOCKER_H_

#include <errno.h>

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sentry/waiter/host_poller.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::waiter {

class FakeBlocker : public Blocker {
 public:
  int Wait(WaitQueue& q, EventMask mask, const std::function<bool()>& ready,
           absl::Time deadline = absl::InfiniteFuture()) override {
    Relay relay(this);
    q.Add(&relay, mask);
    // As kernel::Task's Wait: the host poller's thread watches while this
    // sleeps (host fds' changes reach q through it).
    HostPoller::NeedThread();
    int r = 0;
    for (;;) {
      uint64_t seen;
      {
        absl::MutexLock l(&mu_);
        seen = wakes_;
      }
      if (ready()) break;
      absl::MutexLock l(&mu_);
      if (interrupted_) {
        interrupted_ = false;
        r = -EINTR;
        break;
      }
      sleeps_++;
      bool timed_out = false;
      while (wakes_ == seen && !interrupted_ && !timed_out) {
        timed_out = cv_.WaitWithDeadline(&mu_, deadline);
      }
      if (timed_out && wakes_ == seen && !interrupted_) {
        mu_.Unlock();
        r = ready() ? 0 : -ETIMEDOUT;
        mu_.Lock();
        break;
      }
    }
    HostPoller::DoneWithThread();
    q.Remove(&relay);
    return r;
  }

  // Makes the current (or next) Wait return -EINTR.
  void Interrupt() {
    absl::MutexLock l(&mu_);
    interrupted_ = true;
    cv_.SignalAll();
  }

  // How many times a Wait went to sleep.
  uint64_t sleeps() {
    absl::MutexLock l(&mu_);
    return sleeps_;
  }

  // Waits (really) until some Wait has gone to sleep `n` times.
  void AwaitSleeps(uint64_t n) {
    absl::MutexLock l(&mu_);
    auto cond = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return sleeps_ >= n;
    };
    mu_.Await(absl::Condition(&cond));
  }

 private:
  class Relay : public Waiter {
   public:
    explicit Relay(FakeBlocker* b) : b_(b) {}
    void Notify(EventMask) override {
      absl::MutexLock l(&b_->mu_);
      b_->wakes_++;
      b_->cv_.SignalAll();
    }

   private:
    FakeBlocker* const b_;
  };

  absl::Mutex mu_;
  absl::CondVar cv_;
  uint64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sleeps_ ABSL_GUARDED_BY(mu_) = 0;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
};

// A Waiter that counts notifications and remembers the events.
class CountingWaiter : public Waiter {
 public:
  void Notify(EventMask events) override {
    absl::MutexLock l(&mu_);
    count_++;
    events_ |= events;
  }
  int count() {
    absl::MutexLock l(&mu_);
    return count_;
  }
  EventMask events() {
    absl::MutexLock l(&mu_);
    return events_;
  }
  // Waits up to `timeout` for at least `n` notifications.
  bool AwaitCount(int n, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto cond = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return count_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }

 private:
  absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
  EventMask events_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sandboxd::waiter

#endif  // SANDBOXD_SENTRY_WAITER_TESTING_FAKE_BLOCKER_H_
