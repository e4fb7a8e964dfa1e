// eventfd(2): a 64-bit counter that read drains (or decrements by one, in
// semaphore mode) and write adds to, blocking at zero and at overflow.
#ifndef SANDBOXD_SENTRY_FS_EVENTFD_H_
#define SANDBOXD_SENTRY_FS_EVENTFD_H_

#include <poll.h>

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/file.h"
#include "sentry/waiter/event_source.h"

namespace sandboxd::fs {

class EventFd : public File, public waiter::EventSource {
 public:
  // The counter's largest value; a write that would pass it blocks.
  static constexpr uint64_t kMax = UINT64_MAX - 1;

  // `flags`: EFD_NONBLOCK, EFD_SEMAPHORE (EFD_CLOEXEC is the fd table's).
  EventFd(uint64_t initval, int flags);
  // Epoll interests (which hold files weakly) learn that the file is gone.
  ~EventFd() override { queue_->Notify(POLLHUP); }

  // Reads need 8 bytes (-EINVAL otherwise) and return 8.
  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  // Writes need 8 bytes; UINT64_MAX is -EINVAL.
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override;
  // Linux's anon inodes seek nowhere but do not fail (noop_llseek).
  int64_t Seek(int64_t, int) override { return 0; }
  int64_t Stat(struct stat* st) override;
  int64_t Ioctl(uint64_t, void*) override { return -ENOTTY; }
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override {
    queue_->Add(w, mask);
  }
  void EventUnregister(waiter::Waiter* w) override { queue_->Remove(w); }
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return queue_; }

  uint64_t value();

 private:
  friend struct ::sandboxd::state::FsState;
  const std::shared_ptr<waiter::WaitQueue> queue_ = std::make_shared<waiter::WaitQueue>();
  const bool semaphore_;
  const uint64_t ino_;
  std::atomic<bool> nonblock_;
  absl::Mutex mu_;
  uint64_t count_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_EVENTFD_H_
