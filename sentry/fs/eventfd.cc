#include "sentry/fs/eventfd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <cstring>

#include "sentry/fs/anon.h"

namespace sandboxd::fs {

EventFd::EventFd(uint64_t initval, int flags)
    : semaphore_((flags & EFD_SEMAPHORE) != 0),
      ino_(NextAnonIno()),
      nonblock_((flags & EFD_NONBLOCK) != 0),
      count_(initval) {}

int64_t EventFd::Read(void* buf, uint64_t n, int64_t offset,
                      const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  if (n < sizeof(uint64_t)) return -EINVAL;
  for (;;) {
    {
      absl::ReleasableMutexLock l(&mu_);
      if (count_ > 0) {
        uint64_t v = semaphore_ ? 1 : count_;
        count_ -= v;
        l.Release();
        std::memcpy(buf, &v, sizeof(v));
        queue_->Notify(POLLOUT | POLLWRNORM);
        return sizeof(v);
      }
    }
    if (nonblock_.load() || io.blocker == nullptr) return -EAGAIN;
    int r = io.blocker->Wait(*queue_, POLLIN, [this] {
      absl::MutexLock l(&mu_);
      return count_ > 0;
    });
    if (r < 0) return r;
  }
}

int64_t EventFd::Write(const void* buf, uint64_t n, int64_t offset,
                       const IoContext& io) {
  if (offset >= 0) return -ESPIPE;
  if (n < sizeof(uint64_t)) return -EINVAL;
  uint64_t v;
  std::memcpy(&v, buf, sizeof(v));
  if (v == UINT64_MAX) return -EINVAL;
  for (;;) {
    {
      absl::ReleasableMutexLock l(&mu_);
      if (kMax - count_ >= v) {
        count_ += v;
        l.Release();
        if (v > 0) queue_->Notify(POLLIN | POLLRDNORM);
        return sizeof(v);
      }
    }
    if (nonblock_.load() || io.blocker == nullptr) return -EAGAIN;
    int r = io.blocker->Wait(*queue_, POLLOUT, [this, v] {
      absl::MutexLock l(&mu_);
      return kMax - count_ >= v;
    });
    if (r < 0) return r;
  }
}

int64_t EventFd::Stat(struct stat* st) {
  // anon_inodefs: no file type bits, mode 0600.
  AnonStat(st, 0600, ino_);
  return 0;
}

int EventFd::StatusFlags() const {
  return O_RDWR | (nonblock_.load() ? O_NONBLOCK : 0);
}

int64_t EventFd::SetStatusFlags(int flags) {
  nonblock_.store((flags & O_NONBLOCK) != 0);
  return 0;
}

waiter::EventMask EventFd::Readiness(waiter::EventMask mask) {
  absl::MutexLock l(&mu_);
  waiter::EventMask m = 0;
  if (count_ > 0) m |= POLLIN | POLLRDNORM;
  if (count_ < kMax) m |= POLLOUT | POLLWRNORM;
  return m & (mask | POLLERR | POLLHUP);
}

uint64_t EventFd::value() {
  absl::MutexLock l(&mu_);
  return count_;
}

}  // namespace sandboxd::fs
