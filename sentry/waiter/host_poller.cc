#include "sentry/waiter/host_poller.h"

#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/thread.h"

namespace sandboxd::waiter {
namespace {

// epoll_data of the stop eventfd; handles start at 1.
constexpr uint64_t kStopHandle = 0;

// EPOLL* and POLL* share their values on Linux; this keeps to the ones
// poll(2) knows.
constexpr uint32_t kWatched = EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDHUP;

}  // namespace

absl::StatusOr<std::unique_ptr<HostPoller>> HostPoller::Create() {
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  if (!ep.valid()) {
    return absl::ErrnoToStatus(errno, "host poller: epoll_create1");
  }
  UniqueFd stop(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop.valid()) return absl::ErrnoToStatus(errno, "host poller: eventfd");
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = kStopHandle;
  if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, stop.get(), &ev) < 0) {
    return absl::ErrnoToStatus(errno, "host poller: adding the stop eventfd");
  }
  std::unique_ptr<HostPoller> p(
      new HostPoller(std::move(ep), std::move(stop)));
  ASSIGN_OR_RETURN(p->thread_, StartThread("the host poller's thread",
                                           [raw = p.get()] { raw->Loop(); }));
  return p;
}

namespace {
std::atomic<HostPoller*> started{nullptr};
}  // namespace

HostPoller* HostPoller::IfStarted() {
  return started.load(std::memory_order_acquire);
}

HostPoller* HostPoller::Get() {
  static HostPoller* p = [] {
    auto r = Create();
    if (!r.ok()) {
      fprintf(stderr, "sentry: %s\n", r.status().ToString().c_str());
      return static_cast<HostPoller*>(nullptr);
    }
    HostPoller* made = r->release();  // never destroyed: serves the whole Sentry
    started.store(made, std::memory_order_release);
    return made;
  }();
  return p;
}

HostPoller::HostPoller(UniqueFd epfd, UniqueFd stop_fd)
    : epfd_(std::move(epfd)), stop_fd_(std::move(stop_fd)) {}

HostPoller::~HostPoller() {
  uint64_t one = 1;
  (void)!write(stop_fd_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

int64_t HostPoller::Add(int fd, std::shared_ptr<WaitQueue> q) {
  absl::MutexLock l(&mu_);
  uint64_t h = next_handle_++;
  struct epoll_event ev = {};
  ev.events = kWatched | EPOLLET;
  ev.data.u64 = h;
  if (epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) return -errno;
  watched_[h] = std::move(q);
  return static_cast<int64_t>(h);
}

void HostPoller::Remove(int fd, uint64_t handle) {
  absl::MutexLock l(&mu_);
  // Events already fetched by the thread for this handle are dropped when
  // it looks the handle up under mu_.
  epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, fd, nullptr);
  watched_.erase(handle);
}

void HostPoller::Flush() {
  struct epoll_event evs[64];
  absl::MutexLock l(&mu_);
  for (int round = 0; round < 4; round++) {
    int n = epoll_wait(epfd_.get(), evs, 64, 0);
    if (n <= 0) return;
    for (int i = 0; i < n; i++) {
      // The stop eventfd is level-triggered: the thread still sees it.
      if (evs[i].data.u64 == kStopHandle) continue;
      auto it = watched_.find(evs[i].data.u64);
      if (it != watched_.end()) it->second->Notify(evs[i].events);
    }
    if (n < 64) return;
  }
}

void HostPoller::Loop() {
  struct epoll_event evs[64];
  for (;;) {
    // Wait until events are queued, without taking them: they are taken
    // and delivered under mu_ only, so that Flush, which takes them under
    // mu_ too, never misses one this thread holds undelivered.
    struct pollfd pfd = {epfd_.get(), POLLIN, 0};
    if (poll(&pfd, 1, -1) < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "sentry: host poller: poll: %s\n", strerror(errno));
      return;
    }
    absl::MutexLock l(&mu_);
    int n = epoll_wait(epfd_.get(), evs, 64, 0);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "sentry: host poller: epoll_wait: %s\n", strerror(errno));
      return;
    }
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u64 == kStopHandle) return;
      auto it = watched_.find(evs[i].data.u64);
      if (it != watched_.end()) it->second->Notify(evs[i].events);
    }
  }
}

}  // namespace sandboxd::waiter
