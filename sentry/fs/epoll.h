// epoll(7): an interest list of (file, fd) pairs and a ready list fed by
// the watched files' notifications.
//
// Each interest has a Link, a Waiter registered on the watched file; a
// notification puts the interest on the ready list and wakes epoll_wait,
// which then asks the file for its readiness and reports what holds.
// Level-triggered interests go back on the ready list after being reported
// (and leave it once the file is no longer ready); EPOLLET ones only come
// back with the next notification; EPOLLONESHOT ones are disabled until
// EPOLL_CTL_MOD. EPOLLEXCLUSIVE is accepted and has no effect (every waiter
// is woken); EPOLLWAKEUP is ignored.
//
// Interests hold their file weakly (a watched pipe end must still close),
// and the file's WaitQueue strongly, so that a Link can be taken off the
// queue whether or not the file still exists (event_source.h). An interest
// whose file is gone is dropped the next time epoll looks at it: when it is
// reported, looked up by epoll_ctl, or the epoll file is closed.
//
// Lock order: EpollFile::mu_ (interest list) > the watched files' locks >
// their queues' locks > EpollFile::ready_mu_ > EpollFile's own queue. An
// epoll file watching another takes the outer mu_ before the inner one;
// cycles are refused (ELOOP). Nesting depth is not limited as Linux limits
// it (5).
#ifndef SANDBOXD_SENTRY_FS_EPOLL_H_
#define SANDBOXD_SENTRY_FS_EPOLL_H_

#include <sys/epoll.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sentry/fs/file.h"
#include "sentry/waiter/event_source.h"

namespace sandboxd::fs {

class EpollFile : public File, public waiter::EventSource {
 public:
  EpollFile();
  ~EpollFile() override;

  // epoll_ctl(op, fd) with `file` the description `fd` refers to; `ev` is
  // ignored for EPOLL_CTL_DEL. -EPERM for files epoll cannot watch,
  // -EEXIST, -ENOENT, -EINVAL, -ELOOP as epoll_ctl(2).
  int64_t Ctl(int op, int fd, const std::shared_ptr<File>& file,
              const struct epoll_event& ev);

  // epoll_wait: fills up to `max` (> 0) events, waiting until there is one,
  // `deadline` passes (0 returned) or the task is interrupted (-EINTR).
  int64_t Wait(struct epoll_event* out, int max, absl::Time deadline,
               const IoContext& io);
  // The number of interests (an upper bound of what one Wait returns).
  size_t NumInterests();

  int64_t Read(void*, uint64_t, int64_t, const IoContext&) override {
    return -EINVAL;
  }
  int64_t Write(const void*, uint64_t, int64_t, const IoContext&) override {
    return -EINVAL;
  }
  int64_t Seek(int64_t, int) override { return 0; }  // noop_llseek
  int64_t Stat(struct stat* st) override;
  int64_t Ioctl(uint64_t, void*) override { return -ENOTTY; }
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  // POLLIN while some interest is ready.
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override {
    queue_->Add(w, mask);
  }
  void EventUnregister(waiter::Waiter* w) override { queue_->Remove(w); }
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return queue_; }

 private:
  friend struct ::sandboxd::state::FsState;
  struct Interest;
  class Link : public waiter::Waiter {
   public:
    explicit Link(Interest* i) : i_(i) {}
    void Notify(waiter::EventMask events) override;
    bool NeedsPromptNotify() const override { return false; }

   private:
    Interest* const i_;
  };
  struct Interest {
    Interest(EpollFile* ep, std::weak_ptr<File> file,
             std::shared_ptr<waiter::WaitQueue> queue, int fd)
        : ep(ep), link(this), file(std::move(file)), queue(std::move(queue)),
          fd(fd) {}
    EpollFile* const ep;
    Link link;
    const std::weak_ptr<File> file;
    const std::shared_ptr<waiter::WaitQueue> queue;
    const int fd;
    File* key_file = nullptr;  // the key's file pointer, for erasing
    // epoll_event.events and .data as last set by ADD or MOD.
    std::atomic<uint32_t> events{0};
    uint64_t data = 0;  // guarded by ep->mu_
    bool queued = false;    // on ep->ready_; guarded by ep->ready_mu_
    bool disabled = false;  // EPOLLONESHOT reported; guarded by ep->ready_mu_
  };
  using Key = std::pair<File*, int>;

  // The interest for `key`, dropping it if its file is gone.
  Interest* FindLocked(const Key& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unregisters and frees `i`. `keep` receives the file reference taken to
  // unregister, to be released after mu_.
  void RemoveLocked(Interest* i, std::vector<std::shared_ptr<File>>* keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts `i` on the ready list if the file is ready for it now.
  void QueueIfReadyLocked(Interest* i, File& f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Enqueue(Interest* i);
  int HarvestLocked(struct epoll_event* out, int max,
                    std::vector<std::shared_ptr<File>>* keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Epoll files this one watches (for the ELOOP check).
  std::vector<std::shared_ptr<EpollFile>> Children();
  // Whether `target` is this file or is watched by it, directly or not.
  bool Reaches(const EpollFile* target);

  const std::shared_ptr<waiter::WaitQueue> queue_ = std::make_shared<waiter::WaitQueue>();
  const uint64_t ino_;
  std::atomic<bool> nonblock_{false};

  absl::Mutex mu_;
  std::map<Key, std::unique_ptr<Interest>> interests_ ABSL_GUARDED_BY(mu_);

  absl::Mutex ready_mu_;
  std::deque<Interest*> ready_ ABSL_GUARDED_BY(ready_mu_);
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_EPOLL_H_
