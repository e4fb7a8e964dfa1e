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

absl::StatusOr<std::unique_ptr<HostPoller>> HostPoller::Create(
    bool on_demand) {
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
  UniqueFd rouse(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!rouse.valid()) return absl::ErrnoToStatus(errno, "host poller: eventfd");
  std::unique_ptr<HostPoller> p(new HostPoller(
      std::move(ep), std::move(stop), std::move(rouse), on_demand));
  ASSIGN_OR_RETURN(p->thread_, StartThread("the host poller's thread",
                                           [raw = p.get()] { raw->Loop(); }));
  return p;
}

namespace {
std::atomic<HostPoller*> started{nullptr};
// NeedThread minus DoneWithThread, process-wide.
std::atomic<int64_t> needed{0};
// The on-demand pollers (the Sentry's, and tests' own).
absl::Mutex registry_mu(absl::kConstInit);
HostPoller* on_demand_pollers ABSL_GUARDED_BY(registry_mu) = nullptr;
}  // namespace

HostPoller* HostPoller::IfStarted() {
  return started.load(std::memory_order_acquire);
}

HostPoller* HostPoller::Get() {
  static HostPoller* p = [] {
    auto r = Create(/*on_demand=*/true);
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

HostPoller::HostPoller(UniqueFd epfd, UniqueFd stop_fd, UniqueFd rouse_fd,
                       bool on_demand)
    : epfd_(std::move(epfd)),
      stop_fd_(std::move(stop_fd)),
      rouse_fd_(std::move(rouse_fd)),
      on_demand_(on_demand) {
  if (on_demand_) {
    absl::MutexLock l(&registry_mu);
    next_on_demand_ = on_demand_pollers;
    on_demand_pollers = this;
  }
}

void HostPoller::NeedThread() {
  needed.fetch_add(1, std::memory_order_seq_cst);
  absl::MutexLock l(&registry_mu);
  for (HostPoller* q = on_demand_pollers; q != nullptr; q = q->next_on_demand_) {
    // Pairs with the thread's store of watching_ and load of needed (all
    // seq_cst): either it sees this count or this sees it not watching.
    // Of concurrent callers, the one that flips watching_ wakes it.
    if (!q->watching_.load(std::memory_order_seq_cst) &&
        !q->watching_.exchange(true, std::memory_order_seq_cst)) {
      uint64_t one = 1;
      (void)!write(q->rouse_fd_.get(), &one, sizeof(one));
    }
  }
}

void HostPoller::DoneWithThread() {
  needed.fetch_sub(1, std::memory_order_seq_cst);
}

HostPoller::~HostPoller() {
  if (on_demand_) {
    absl::MutexLock l(&registry_mu);
    for (HostPoller** q = &on_demand_pollers; *q != nullptr;
         q = &(*q)->next_on_demand_) {
      if (*q == this) {
        *q = next_on_demand_;
        break;
      }
    }
  }
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
    bool watch = true;
    if (on_demand_) {
      watch = needed.load(std::memory_order_seq_cst) > 0;
      watching_.store(watch, std::memory_order_seq_cst);
      // A NeedThread between the load and the store saw watching_ still
      // true and did not wake the thread: look again.
      if (!watch && needed.load(std::memory_order_seq_cst) > 0) continue;
    }
    // Wait until events are queued, without taking them: they are taken
    // and delivered under mu_ only, so that Flush, which takes them under
    // mu_ too, never misses one this thread holds undelivered. Not
    // watching, the thread waits for NeedThread (or the stop) only.
    struct pollfd pfd[3] = {{epfd_.get(), static_cast<short>(watch ? POLLIN : 0), 0},
                            {rouse_fd_.get(), POLLIN, 0},
                            {stop_fd_.get(), POLLIN, 0}};
    if (poll(pfd, 3, -1) < 0) {
      if (errno == EINTR) continue;
      fprintf(stderr, "sentry: host poller: poll: %s\n", strerror(errno));
      return;
    }
    if (pfd[2].revents & POLLIN) return;
    if (pfd[1].revents & POLLIN) {
      uint64_t drained;
      (void)!read(rouse_fd_.get(), &drained, sizeof(drained));
    }
    if (!(pfd[0].revents & POLLIN)) continue;
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
