#include "sentry/fs/epoll.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include <algorithm>

#include "absl/time/clock.h"
#include "sentry/fs/anon.h"
#include "sentry/waiter/host_poller.h"

namespace sandboxd::fs {
namespace {

constexpr uint32_t kFlagBits =
    EPOLLET | EPOLLONESHOT | EPOLLWAKEUP | EPOLLEXCLUSIVE;
// What EPOLLEXCLUSIVE may be combined with (Linux's EPOLLEXCLUSIVE_OK_BITS).
constexpr uint32_t kExclusiveOk = EPOLLIN | EPOLLOUT | EPOLLRDNORM |
                                  EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND |
                                  EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET |
                                  EPOLLEXCLUSIVE;

// The poll events an interest asks for: errors and hang-ups always.
waiter::EventMask PollMask(uint32_t events) {
  return (events & ~kFlagBits) | POLLERR | POLLHUP;
}

// Serializes the adds of epoll files to epoll files, so that two concurrent
// adds cannot build a cycle that each alone would not (Linux's epmutex).
absl::Mutex nest_mu(absl::kConstInit);

}  // namespace

EpollFile::EpollFile() : ino_(NextAnonIno()) {}

EpollFile::~EpollFile() {
  std::vector<std::shared_ptr<File>> keep;  // released after the lock
  absl::MutexLock l(&mu_);
  while (!interests_.empty()) RemoveLocked(interests_.begin()->second.get(), &keep);
  // Anyone watching this epoll file weakly learns that it is gone.
  queue_->Notify(POLLHUP);
}

void EpollFile::Link::Notify(waiter::EventMask events) {
  if ((events & PollMask(i_->events.load())) == 0) return;
  i_->ep->Enqueue(i_);
}

void EpollFile::Enqueue(Interest* i) {
  {
    absl::MutexLock l(&ready_mu_);
    if (i->disabled) return;
    if (!i->queued) {
      i->queued = true;
      ready_.push_back(i);
    }
  }
  // Waiters are woken even when the interest was queued already: a
  // level-triggered interest stays queued after its file went unready, and
  // this notification may be the one that makes it ready again (Linux's
  // ep_poll_callback wakes in both cases too).
  queue_->Notify(POLLIN | POLLRDNORM);
}

EpollFile::Interest* EpollFile::FindLocked(const Key& key) {
  auto it = interests_.find(key);
  if (it == interests_.end()) return nullptr;
  if (it->second->file.expired()) {
    // Its file is gone (and with it the key's meaning: the address may
    // belong to a new file by now).
    RemoveLocked(it->second.get(), nullptr);
    return nullptr;
  }
  return it->second.get();
}

void EpollFile::RemoveLocked(Interest* i,
                             std::vector<std::shared_ptr<File>>* keep) {
  if (auto f = i->file.lock()) {
    f->EventUnregister(&i->link);  // host files stop being watched
    if (keep != nullptr) keep->push_back(std::move(f));
  } else {
    i->queue->Remove(&i->link);
  }
  // From here no notification reaches the link.
  {
    absl::MutexLock l(&ready_mu_);
    if (i->queued) ready_.erase(std::find(ready_.begin(), ready_.end(), i));
  }
  interests_.erase(Key{i->key_file, i->fd});
}

void EpollFile::QueueIfReadyLocked(Interest* i, File& f) {
  waiter::EventMask m = PollMask(i->events.load());
  if ((f.Readiness(m) & m) != 0) Enqueue(i);
}

std::vector<std::shared_ptr<EpollFile>> EpollFile::Children() {
  std::vector<std::shared_ptr<EpollFile>> out;
  absl::MutexLock l(&mu_);
  for (auto& [key, i] : interests_) {
    if (auto f = i->file.lock()) {
      if (auto ep = std::dynamic_pointer_cast<EpollFile>(f)) out.push_back(ep);
    }
  }
  return out;
}

bool EpollFile::Reaches(const EpollFile* target) {
  if (this == target) return true;
  for (auto& c : Children()) {
    if (c->Reaches(target)) return true;
  }
  return false;
}

int64_t EpollFile::Ctl(int op, int fd, const std::shared_ptr<File>& file,
                       const struct epoll_event& ev) {
  if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL) {
    return -EINVAL;
  }
  auto* source = dynamic_cast<waiter::EventSource*>(file.get());
  std::shared_ptr<waiter::WaitQueue> q = source ? source->event_queue() : nullptr;
  if (q == nullptr) return -EPERM;
  if (file.get() == this) return -EINVAL;
  auto* target_ep = dynamic_cast<EpollFile*>(file.get());
  uint32_t events = ev.events;
  if (op != EPOLL_CTL_DEL && (events & EPOLLEXCLUSIVE)) {
    if (op == EPOLL_CTL_MOD) return -EINVAL;
    if (target_ep != nullptr || (events & ~kExclusiveOk)) return -EINVAL;
  }

  std::vector<std::shared_ptr<File>> keep;  // released after the locks
  std::unique_ptr<absl::MutexLock> nest;
  if (op == EPOLL_CTL_ADD && target_ep != nullptr) {
    nest = std::make_unique<absl::MutexLock>(&nest_mu);
    if (target_ep->Reaches(this)) return -ELOOP;
  }
  absl::MutexLock l(&mu_);
  Key key{file.get(), fd};
  Interest* i = FindLocked(key);
  switch (op) {
    case EPOLL_CTL_ADD: {
      if (i != nullptr) return -EEXIST;
      auto owned = std::make_unique<Interest>(this, file, q, fd);
      i = owned.get();
      i->key_file = file.get();
      i->events.store(events);
      i->data = ev.data.u64;
      interests_[key] = std::move(owned);
      file->EventRegister(&i->link, PollMask(events));
      QueueIfReadyLocked(i, *file);
      return 0;
    }
    case EPOLL_CTL_MOD: {
      if (i == nullptr) return -ENOENT;
      if (i->events.load() & EPOLLEXCLUSIVE) return -EINVAL;
      // Re-registered so that the file's queue filters with the new mask.
      file->EventUnregister(&i->link);
      {
        absl::MutexLock rl(&ready_mu_);
        i->events.store(events);
        i->disabled = false;
      }
      i->data = ev.data.u64;
      file->EventRegister(&i->link, PollMask(events));
      QueueIfReadyLocked(i, *file);
      return 0;
    }
    default:  // EPOLL_CTL_DEL
      if (i == nullptr) return -ENOENT;
      RemoveLocked(i, &keep);
      return 0;
  }
}

int EpollFile::HarvestLocked(struct epoll_event* out, int max,
                             std::vector<std::shared_ptr<File>>* keep) {
  std::deque<Interest*> batch;
  {
    absl::MutexLock l(&ready_mu_);
    batch.swap(ready_);
    for (Interest* i : batch) i->queued = false;
  }
  int n = 0;
  // Interests not looked at go back to the head of the list, reported
  // level-triggered ones to its tail, so that a small maxevents still
  // reaches every ready interest in turn (as Linux's ep_send_events).
  std::vector<Interest*> unseen, requeue;
  for (Interest* i : batch) {
    if (n == max) {
      unseen.push_back(i);
      continue;
    }
    auto f = i->file.lock();
    if (f == nullptr) {
      RemoveLocked(i, nullptr);
      continue;
    }
    uint32_t events = i->events.load();
    waiter::EventMask m = PollMask(events);
    waiter::EventMask r = f->Readiness(m) & m;
    keep->push_back(std::move(f));
    if (r == 0) continue;  // not ready (any more): off the list
    {
      absl::MutexLock l(&ready_mu_);
      if (i->disabled) continue;  // a concurrent report of a one-shot
      if (events & EPOLLONESHOT) i->disabled = true;
    }
    out[n].events = r;
    out[n].data.u64 = i->data;
    n++;
    // Level-triggered: reported again for as long as it stays ready.
    if (!(events & (EPOLLET | EPOLLONESHOT))) requeue.push_back(i);
  }
  absl::MutexLock l(&ready_mu_);
  for (auto it = unseen.rbegin(); it != unseen.rend(); ++it) {
    Interest* i = *it;
    if (!i->queued && !i->disabled) {
      i->queued = true;
      ready_.push_front(i);
    }
  }
  for (Interest* i : requeue) {
    if (!i->queued && !i->disabled) {
      i->queued = true;
      ready_.push_back(i);
    }
  }
  return n;
}

int64_t EpollFile::Wait(struct epoll_event* out, int max, absl::Time deadline,
                        const IoContext& io) {
  // Host fds' changes that already happened are this wait's, not a later
  // edge (waiter::HostPoller::Flush).
  waiter::HostPoller* const poller = waiter::HostPoller::IfStarted();
  if (poller != nullptr) poller->Flush();
  for (bool last = false;; ) {
    std::vector<std::shared_ptr<File>> keep;
    int n;
    {
      absl::MutexLock l(&mu_);
      n = HarvestLocked(out, max, &keep);
    }
    if (n > 0 || last) return n;
    if (deadline <= absl::Now() || io.blocker == nullptr) return 0;
    auto ready = [this] {
      absl::MutexLock l(&ready_mu_);
      return !ready_.empty();
    };
    // With host fds watched, the task sleeps on the poller's epoll fd
    // itself and delivers what changed on its own thread: a request to a
    // hostinet server wakes one host thread, not the poller's and then
    // the task's.
    int r = poller != nullptr
                ? io.blocker->WaitOrHostFd(*queue_, POLLIN, ready, poller->fd(),
                                           [poller] { poller->Flush(); },
                                           deadline)
                : io.blocker->Wait(*queue_, POLLIN, ready, deadline);
    if (r == -EINTR) return -EINTR;
    // At the deadline, one last look, as Linux's ep_poll does.
    if (r == -ETIMEDOUT) last = true;
  }
}

size_t EpollFile::NumInterests() {
  absl::MutexLock l(&mu_);
  return interests_.size();
}

int64_t EpollFile::Stat(struct stat* st) {
  AnonStat(st, 0600, ino_);
  return 0;
}

int EpollFile::StatusFlags() const {
  return O_RDWR | (nonblock_.load() ? O_NONBLOCK : 0);
}

int64_t EpollFile::SetStatusFlags(int flags) {
  nonblock_.store((flags & O_NONBLOCK) != 0);
  return 0;
}

waiter::EventMask EpollFile::Readiness(waiter::EventMask mask) {
  if ((mask & (POLLIN | POLLRDNORM)) == 0) return 0;
  // Host fds' changes may still be queued in the host (the poller's thread
  // watches only on demand): they are this look's, as in Wait.
  if (waiter::HostPoller* poller = waiter::HostPoller::IfStarted()) {
    poller->Flush();
  }
  std::vector<std::shared_ptr<File>> keep;  // released after the lock
  absl::MutexLock l(&mu_);
  std::vector<Interest*> ready;
  {
    absl::MutexLock rl(&ready_mu_);
    for (Interest* i : ready_) {
      if (!i->disabled) ready.push_back(i);
    }
  }
  for (Interest* i : ready) {
    auto f = i->file.lock();
    if (f == nullptr) continue;
    waiter::EventMask m = PollMask(i->events.load());
    bool is_ready = (f->Readiness(m) & m) != 0;
    keep.push_back(std::move(f));
    if (is_ready) return mask & (POLLIN | POLLRDNORM);
  }
  return 0;
}

}  // namespace sandboxd::fs
