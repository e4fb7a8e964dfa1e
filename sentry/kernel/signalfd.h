// signalfd(2): a file from which a task reads its own pending signals as
// struct signalfd_siginfo records, instead of having them delivered.
//
// It lives in the kernel, not in fs, because reading takes signals off
// the reading task's pending set: as on Linux, the signals are those of
// whichever task reads (or polls), not of the one that created the file.
// Poll and epoll ask Task::Current() (the task whose host thread polls);
// readiness notifications come from the creating process's signal queue
// (ThreadGroup::signal_queue), notified whenever a signal becomes pending.
#ifndef SANDBOXD_SENTRY_KERNEL_SIGNALFD_H_
#define SANDBOXD_SENTRY_KERNEL_SIGNALFD_H_

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>

#include <atomic>
#include <memory>

#include "sentry/fs/file.h"
#include "sentry/kernel/signal.h"
#include "sentry/kernel/task.h"
#include "sentry/waiter/event_source.h"

namespace sandboxd::state {
struct FsState;
}  // namespace sandboxd::state

namespace sandboxd::kernel {

static_assert(sizeof(struct signalfd_siginfo) == 128);

// Linux's signalfd_copyinfo: the fields of `si` that its layout (by signal
// and si_code) defines, the others zero.
struct signalfd_siginfo ToSignalfdSiginfo(const siginfo_t& si);

class SignalFd : public fs::File, public waiter::EventSource {
 public:
  // `owner`: the creating process, whose signal queue gives readiness
  // notifications. `flags`: SFD_NONBLOCK (SFD_CLOEXEC is the fd table's).
  SignalFd(std::shared_ptr<ThreadGroup> owner, SigSet mask, int flags);

  // signalfd(fd, mask): SIGKILL and SIGSTOP are never taken.
  void set_mask(SigSet mask) {
    mask_.store(mask & ~kUnblockable, std::memory_order_release);
  }
  SigSet mask() const { return mask_.load(std::memory_order_acquire); }

  // As many records as fit in `n` (at least one: -EINVAL if n < 128),
  // blocking for the first unless non-blocking (-EAGAIN).
  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const fs::IoContext& io) override;
  int64_t Write(const void*, uint64_t, int64_t,
                const fs::IoContext&) override {
    return -EINVAL;
  }
  int64_t Seek(int64_t, int) override { return 0; }  // noop_llseek
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

 private:
  friend struct ::sandboxd::state::FsState;  // checkpoint save and load
  const std::weak_ptr<ThreadGroup> owner_;  // weak: its fd table holds us
  const std::shared_ptr<waiter::WaitQueue> queue_;
  const uint64_t ino_;
  std::atomic<SigSet> mask_;
  std::atomic<bool> nonblock_;
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_SIGNALFD_H_
