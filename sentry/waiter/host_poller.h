// The Sentry's watcher of host descriptors (inherited stdio): one host
// epoll instance and one thread, started on first use, that turn readiness
// changes of host fds into WaitQueue notifications, so that poll, select,
// epoll and blocking waits can include host files.
//
// Host fds are watched edge-triggered: every change wakes the waiters once,
// and they recheck the fd themselves (HostFile::Readiness polls it), so a
// readable fd that nobody reads does not keep the thread spinning.
//
// The Sentry's poller (Get) runs its thread on demand: the thread watches
// the epoll fd only while something needs changes delivered as they
// happen (NeedThread: a waiter that is not an epoll interest is registered
// on a watched file, or a task sleeps in Blocker::Wait). Otherwise the
// changes stay queued in the host epoll instance until a waiter takes them
// itself (Flush: every sandbox epoll_wait, and a task asleep in
// Blocker::WaitOrHostFd, which polls fd()), so an event loop's request
// does not also wake the poller's thread.
//
// Lock order: HostPoller::mu_ > the watched queues' locks. A queue is
// notified with mu_ held, which is what makes Remove a barrier: once it
// returns, the thread never touches that queue again.
#ifndef SANDBOXD_SENTRY_WAITER_HOST_POLLER_H_
#define SANDBOXD_SENTRY_WAITER_HOST_POLLER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::waiter {

class HostPoller {
 public:
  // The Sentry's poller, started on first use (the thread and the epoll fd
  // live as long as the process). Null if the host epoll instance could not
  // be created: then host files cannot be watched.
  static HostPoller* Get();

  // Watches `fd` and notifies `q` with the events (POLLIN, POLLOUT, POLLHUP,
  // POLLERR, POLLRDHUP, POLLPRI) of every change, until Remove. Returns a
  // handle for Remove, or -errno: -EPERM for fds that are always ready
  // (regular files, directories).
  int64_t Add(int fd, std::shared_ptr<WaitQueue> q);
  // Stops watching. After it returns `q` is not notified again.
  void Remove(int fd, uint64_t handle);
  // Delivers, on the calling thread, the changes the host has already
  // queued for watched fds, so that a wait that looks at its queues next
  // sees them now, as Linux's waiters would, rather than as a later,
  // second edge from the thread (an edge-triggered epoll's spurious
  // event). The thread, too, takes events only under mu_.
  void Flush();
  // The host epoll fd: readable while changes are queued that Flush
  // would deliver. A waiter may sleep on it (poll(2), never epoll_wait,
  // which would take the events) and Flush when it becomes readable.
  int fd() const { return epfd_.get(); }
  // The Sentry's poller if Get() has made it, else null (nothing watched).
  static HostPoller* IfStarted();

  // Something needs changes delivered by the thread from now until the
  // matching DoneWithThread (a prompt waiter registered on a watched file,
  // a task asleep in Blocker::Wait). Process-wide, and valid before any
  // poller exists (a poller made later starts watching if needed). Wakes
  // every on-demand poller's thread that is not watching; cheap when they
  // all are.
  static void NeedThread();
  static void DoneWithThread();
  // Whether the thread watches the epoll fd now (for tests).
  bool watching() const { return watching_.load(); }

  // For tests: a poller of one's own (its thread stops in the destructor).
  // on_demand: the thread watches only between NeedThread and
  // DoneWithThread (as Get's); else always.
  static absl::StatusOr<std::unique_ptr<HostPoller>> Create(
      bool on_demand = false);
  ~HostPoller();

 private:
  HostPoller(UniqueFd epfd, UniqueFd stop_fd, UniqueFd rouse_fd,
             bool on_demand);
  void Loop();

  const UniqueFd epfd_;
  // An eventfd in the epoll set whose readability stops the thread.
  const UniqueFd stop_fd_;
  // An eventfd that wakes a thread that is not watching (NeedThread).
  const UniqueFd rouse_fd_;
  const bool on_demand_;
  // Whether the thread watches the epoll fd (or is about to look at
  // the count again): a NeedThread that finds it false wakes the thread.
  std::atomic<bool> watching_{true};
  std::thread thread_;
  // The next on-demand poller: a list under host_poller.cc's registry_mu.
  HostPoller* next_on_demand_ = nullptr;

  absl::Mutex mu_;
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, std::shared_ptr<WaitQueue>> watched_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace sandboxd::waiter

#endif  // SANDBOXD_SENTRY_WAITER_HOST_POLLER_H_
