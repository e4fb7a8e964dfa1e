// Readiness and blocking: what poll, select, epoll and blocking reads and
// writes of files, sockets and signalfds are built on.
//
// A file that can become ready (pipes, sockets, eventfd, ...) owns a
// WaitQueue and calls Notify(events) whenever its readiness may have
// changed. A Waiter registered on the queue for some events is called then
// (from the notifying thread, with the queue's lock held: it must only
// wake something up, never call back into the file).
//
// A blocking operation waits through a Blocker (the task; a file operation
// finds it in its fs::IoContext):
// Wait(queue, mask, ready, deadline) sleeps until ready() holds, rechecked
// after every notification, or the task is interrupted (a signal, group
// exit) or the deadline passes.
#ifndef SANDBOXD_SENTRY_WAITER_WAITER_H_
#define SANDBOXD_SENTRY_WAITER_WAITER_H_

#include <poll.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sandboxd::waiter {

// POLLIN, POLLOUT, POLLERR, POLLHUP, POLLRDHUP, POLLPRI... as poll(2).
using EventMask = uint32_t;

class Waiter {
 public:
  virtual ~Waiter() = default;
  // Called with the events that happened. Must not block or re-enter the
  // queue.
  virtual void Notify(EventMask events) = 0;
  // Whether a notification must reach this waiter as soon as a host fd
  // changes, i.e. from the HostPoller's thread (host_poller.h). False for
  // an epoll interest: it only queues itself on its epoll's ready list,
  // which every epoll_wait fills from the host first (HostPoller::Flush)
  // and whose sleepers are counted on their own (HostPoller::NeedThread).
  virtual bool NeedsPromptNotify() const { return true; }
};

class WaitQueue {
 public:
  void Add(Waiter* w, EventMask mask) {
    absl::MutexLock l(&mu_);
    entries_.push_back({w, mask});
  }
  void Remove(Waiter* w) {
    absl::MutexLock l(&mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->w == w) {
        entries_.erase(it);
        return;
      }
    }
  }
  void Notify(EventMask events) {
    absl::MutexLock l(&mu_);
    for (const Entry& e : entries_) {
      // Errors and hang-ups are always of interest, as in poll(2).
      if (events & (e.mask | POLLERR | POLLHUP)) e.w->Notify(events);
    }
  }
  bool empty() const {
    absl::MutexLock l(&mu_);
    return entries_.empty();
  }

 private:
  struct Entry {
    Waiter* w;
    EventMask mask;
  };
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// What a blocking operation blocks with: the calling task (kernel::Task).
class Blocker {
 public:
  virtual ~Blocker() = default;
  // 0 once ready() is true; -EINTR if the task is interrupted first (a
  // signal to handle, or exit); -ETIMEDOUT at the deadline. ready() is
  // evaluated without any lock of the caller's held by the Blocker.
  virtual int Wait(WaitQueue& q, EventMask mask,
                   const std::function<bool()>& ready,
                   absl::Time deadline = absl::InfiniteFuture()) = 0;
  // Wait, with the sleep itself a host poll that also watches `host_fd`
  // (the HostPoller's epoll fd): when it becomes readable, the waiting
  // thread calls `on_host_ready` (HostPoller::Flush, which notifies the
  // queues of the host fds that changed) and looks at ready() again. The
  // same results as Wait; it saves the hand-off from the poller's thread
  // to this one when what the wait is for is a host fd. This default
  // ignores `host_fd`.
  virtual int WaitOrHostFd(WaitQueue& q, EventMask mask,
                           const std::function<bool()>& ready, int host_fd,
                           const std::function<void()>& on_host_ready,
                           absl::Time deadline = absl::InfiniteFuture()) {
    return Wait(q, mask, ready, deadline);
  }
  // Bracket a wait that a file does on a host fd itself (poll with the
  // interrupt eventfd): the task shows as sleeping meanwhile (state S in
  // /proc) and its CPU accounting leaves the wait out.
  virtual void HostWaitBegin() {}
  virtual void HostWaitEnd() {}
  // The current call has moved data the program can see (part of a write
  // queued, part of a MSG_WAITALL read consumed) and is about to wait for
  // more: from now on a checkpoint's stop ends its waits (-EINTR, and the
  // call returns what it moved, as Linux's does when a stop interrupts it)
  // instead of parking in them to execute the call again after a restore,
  // which would move that data a second time.
  virtual void MarkProgress() {}
};

}  // namespace sandboxd::waiter

#endif  // SANDBOXD_SENTRY_WAITER_WAITER_H_
