// inotify(7): watches on inodes, and the event queue of an inotify file.
//
// Watches are keyed by Inode* (the inode a path resolves to in the VFS,
// which a watch holds a reference to, as Linux's mark pins its inode) in
// one Sentry-wide registry. The VFS and the file paths call the hooks
// below where Linux calls fsnotify: each hook first checks Active(), one
// relaxed atomic load, so that a sandbox without watches pays nothing else.
//
// Events on a file are reported to the file's own watches and, with the
// file's name, to the watches of the directory it was opened through (as
// fsnotify_parent does; after an unlink too, unless IN_EXCL_UNLINK).
// Identical consecutive events are merged, the queue holds at most
// kMaxQueuedEvents events and then one IN_Q_OVERFLOW.
//
// Lock order: Vfs::mu_ (ParentOf) is taken and dropped before the
// registry's lock; registry lock > InotifyFile::mu_ > wait queues.
// Not kept from Linux: IN_DELETE_SELF is reported when the last name goes
// even if the file is still open (Linux waits for the last close), and
// mounts do not send IN_UNMOUNT.
#ifndef SANDBOXD_SENTRY_FS_INOTIFY_H_
#define SANDBOXD_SENTRY_FS_INOTIFY_H_

#include <sys/inotify.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/file.h"
#include "sentry/fs/vfs.h"
#include "sentry/waiter/event_source.h"

namespace sandboxd::fs {

// Every bit inotify_add_watch accepts (Linux's ALL_INOTIFY_BITS): a mask
// with any other bit, or with none of these, is EINVAL. The event-only bits
// (IN_ISDIR, IN_IGNORED, IN_Q_OVERFLOW, IN_UNMOUNT) are accepted and watch
// nothing.
inline constexpr uint32_t kInotifyAllBits =
    IN_ALL_EVENTS | IN_UNMOUNT | IN_Q_OVERFLOW | IN_IGNORED | IN_ONLYDIR |
    IN_DONT_FOLLOW | IN_EXCL_UNLINK | IN_MASK_ADD | IN_MASK_CREATE |
    IN_ISDIR | IN_ONESHOT;

class InotifyFile : public File, public waiter::EventSource {
 public:
  // /proc/sys/fs/inotify/max_queued_events' default.
  static constexpr size_t kMaxQueuedEvents = 16384;

  explicit InotifyFile(bool nonblock);
  // Removes this instance's watches (no IN_IGNORED: nobody can read them).
  ~InotifyFile() override;

  // inotify_add_watch on `inode` (already resolved with IN_DONT_FOLLOW and
  // IN_ONLYDIR applied): the watch descriptor, or -EINVAL, -EEXIST
  // (IN_MASK_CREATE on a watched inode).
  int64_t AddWatch(std::shared_ptr<Inode> inode, uint32_t mask);
  // inotify_rm_watch: 0 or -EINVAL; queues IN_IGNORED.
  int64_t RemoveWatch(int wd);

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void*, uint64_t, int64_t, const IoContext&) override {
    return -EINVAL;
  }
  int64_t Seek(int64_t, int) override { return -ESPIPE; }
  int64_t Stat(struct stat* st) override;
  // FIONREAD: bytes a read would return if the buffer were large enough.
  int64_t Ioctl(uint64_t request, void* buf) override;
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override {
    queue_->Add(w, mask);
  }
  void EventUnregister(waiter::Waiter* w) override { queue_->Remove(w); }
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return queue_; }

  // Queues one event (the registry calls this with its lock held) and
  // returns whether readers must be woken.
  bool Enqueue(int wd, uint32_t mask, uint32_t cookie, const std::string& name);

  // Checkpoint/restore: this instance's watches (ascending wd) and the
  // last watch descriptor it handed out; and putting them back into a new
  // instance (which must have none yet).
  struct WatchState {
    int wd;
    uint32_t mask;  // events and IN_ONESHOT, IN_EXCL_UNLINK
    std::shared_ptr<Inode> inode;
  };
  std::vector<WatchState> Watches(int* last_wd);
  void RestoreWatches(const std::vector<WatchState>& watches, int last_wd);

 private:
  friend struct ::sandboxd::state::FsState;
  struct Event {
    int wd;
    uint32_t mask;
    uint32_t cookie;
    std::string name;
    // sizeof(inotify_event) + name padded with NULs (Linux rounds it up to
    // a multiple of sizeof(inotify_event)).
    size_t size() const;
  };

  const std::shared_ptr<waiter::WaitQueue> queue_ = std::make_shared<waiter::WaitQueue>();
  const uint64_t ino_;
  std::atomic<bool> nonblock_;

  absl::Mutex mu_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // An IN_Q_OVERFLOW is queued and not read yet: no second one.
  bool overflow_queued_ ABSL_GUARDED_BY(mu_) = false;
};

namespace inotify {

namespace internal {
// How many watches exist in the Sentry (the registry keeps it).
extern std::atomic<int64_t> watch_count;
}  // namespace internal

// Whether any watch exists in the Sentry: the hooks' fast path, one
// relaxed load.
inline bool Active() {
  return internal::watch_count.load(std::memory_order_relaxed) > 0;
}

// A fresh cookie tying IN_MOVED_FROM to IN_MOVED_TO.
uint32_t NewCookie();
// The cookie NewCookie hands out next (one counter per Sentry, as Linux
// has one): a checkpoint saves it and a restore sets it again, so that a
// restored program's renames get the cookies it would have got.
uint32_t NextCookie();
void SetNextCookie(uint32_t next);

// An event on `inode` itself (IN_ISDIR added for directories, but not to
// IN_MOVE_SELF).
void NotifyInode(Inode& inode, uint32_t mask);
// An event on the entry `name` of directory `dir` (IN_CREATE, IN_DELETE,
// IN_MOVED_FROM, IN_MOVED_TO); `is_dir` adds IN_ISDIR.
void NotifyEntry(Inode& dir, uint32_t mask, const std::string& name,
                 bool is_dir, uint32_t cookie = 0);
// An event on the file at `loc` (IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_OPEN,
// IN_CLOSE_*): to its watches and its parent directory's, with its name.
// `vfs` may be null (then only the file's own watches are told).
void NotifyFile(const Vfs* vfs, const Location& loc, uint32_t mask);
// `inode` lost its last name: IN_DELETE_SELF to its watches.
void NotifyDeleteSelf(Inode& inode);
// ... and then its watches go, each with IN_IGNORED (before the
// directory's IN_DELETE, as Linux orders them).
void DropWatches(Inode& inode);

// The inotify events of a setattr (fsnotify_change): IN_MODIFY for a size
// change or an mtime alone, IN_ACCESS for an atime alone, IN_ATTRIB for
// mode, owner, or both times.
uint32_t SetAttrMask(const SetAttrRequest& req);

}  // namespace inotify
}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_INOTIFY_H_
