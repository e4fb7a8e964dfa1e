// Objects that can become ready (pipes, eventfd, timerfd, epoll, host
// streams, sockets, signalfd): they notify readiness changes through a
// WaitQueue that they share-own, which is what lets epoll watch them safely.
//
// Why a shared queue: epoll must drop a watched file when the file's last
// descriptor closes (Linux ties the interest to the file description), and
// it holds the file only weakly so as not to keep it open (a watched pipe
// end must still give EOF). When the weak reference dies, epoll's waiter may
// still sit in the file's queue, and a notification could reach it after
// epoll freed it. Holding the queue itself lets epoll remove its waiter
// from it whether or not the file is still alive.
#ifndef SANDBOXD_SENTRY_WAITER_EVENT_SOURCE_H_
#define SANDBOXD_SENTRY_WAITER_EVENT_SOURCE_H_

#include <memory>

#include "sentry/waiter/waiter.h"

namespace sandboxd::waiter {

// The contract: once the object is destroyed, the waiters registered through
// its EventRegister (fs::File::EventRegister for files) can only still be on
// event_queue() (an object that registers waiters elsewhere too, e.g. on a
// peer's queue, removes them itself when it is released).
class EventSource {
 public:
  virtual ~EventSource() = default;
  // The queue EventRegister adds waiters to; null if this object never
  // becomes ready or unready (then epoll_ctl fails with EPERM, as Linux does
  // for regular files).
  virtual std::shared_ptr<WaitQueue> event_queue() = 0;
};

}  // namespace sandboxd::waiter

#endif  // SANDBOXD_SENTRY_WAITER_EVENT_SOURCE_H_
