// Advisory file locks: fcntl(2) record locks (classic POSIX and open file
// description "OFD" locks) and flock(2) locks.
//
// Linux keeps these on the inode (i_flctx); Inode is shared by every
// filesystem, so here they live in a side table keyed by the Inode's
// address. An entry exists only while the inode has locks or waiters, and
// remembers the inode by weak_ptr, so that a stale entry (an inode that died
// with locks left on it because a release hook was missed) is recognized
// and dropped rather than inherited by a new inode at the same address.
//
// Owners, as on Linux:
//   - POSIX record locks belong to the descriptor table (Linux's
//     fl_owner = current->files), so a process's threads share them and a
//     fork child does not inherit them; F_GETLK reports the tgid stored
//     with the lock. Closing ANY descriptor of the inode releases all of
//     the table's locks on it (ReleasePosixLocks).
//   - OFD record locks belong to the open file description and are
//     released when it is destroyed (ReleaseDescriptionLocks).
//   - flock locks belong to the open file description too, and live in a
//     separate namespace: they never conflict with record locks.
// POSIX and OFD locks conflict with each other, even within one process.
//
// Blocking requests (F_SETLKW, F_OFD_SETLKW, flock without LOCK_NB) wait
// through the caller's Blocker on the inode's WaitQueue, retrying the
// acquisition after every change of the inode's locks.
//
// Lock order: LockTable::mu_ > WaitQueue::mu_ (the inode's queue is
// notified with mu_ held) > Task::mu_ (a waiter's wake-up). No other lock
// is taken with mu_ held, and none may be held by callers that can block.
#ifndef SANDBOXD_SENTRY_FS_LOCK_H_
#define SANDBOXD_SENTRY_FS_LOCK_H_

#include <fcntl.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/inode.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::fs {

class File;
class FdTable;

// Linux's OFFSET_MAX: the last byte of a lock that extends to infinity
// (l_len == 0).
inline constexpr int64_t kLockOffsetMax = INT64_MAX;

struct RecordLockOwner {
  enum class Kind : uint8_t { kPosix, kOfd };
  Kind kind = Kind::kPosix;
  // The FdTable (POSIX) or File (OFD) address: an identity only, never
  // dereferenced.
  uintptr_t id = 0;
  // POSIX: the tgid that F_GETLK reports. OFD locks report -1.
  pid_t pid = 0;

  bool SameAs(const RecordLockOwner& o) const {
    return kind == o.kind && id == o.id;
  }
  static RecordLockOwner Posix(const FdTable* table, pid_t tgid) {
    return {Kind::kPosix, reinterpret_cast<uintptr_t>(table), tgid};
  }
  static RecordLockOwner Ofd(const File* file) {
    return {Kind::kOfd, reinterpret_cast<uintptr_t>(file), -1};
  }
};

// A byte range [start, end] (inclusive; end == kLockOffsetMax: to infinity)
// locked F_RDLCK or F_WRLCK by `owner`. As a request, type may be F_UNLCK.
struct RecordLock {
  short type = F_UNLCK;
  int64_t start = 0;
  int64_t end = kLockOffsetMax;
  RecordLockOwner owner;
};

// The Sentry's lock state. Thread-safe. There is one per Sentry process
// (Global()), which runs exactly one sandbox; tests make their own.
class LockTable {
 public:
  LockTable() = default;
  LockTable(const LockTable&) = delete;
  LockTable& operator=(const LockTable&) = delete;

  static LockTable& Global();

  // F_GETLK: fills *conflict with a lock of another owner that conflicts
  // with `want` (type F_RDLCK or F_WRLCK) and returns true; false when
  // `want` could be set now.
  bool TestRecord(const std::shared_ptr<Inode>& inode, const RecordLock& want,
                  RecordLock* conflict);

  // F_SETLK (blocker == nullptr) / F_SETLKW: sets, replaces or (F_UNLCK)
  // removes `req.owner`'s locks over the range, splitting and merging that
  // owner's locks as Linux does. -EAGAIN on conflict without a blocker;
  // with one, waits: -EINTR when interrupted, -EDEADLK when a POSIX
  // request would close a cycle of POSIX owners waiting for each other.
  int SetRecord(const std::shared_ptr<Inode>& inode, const RecordLock& req,
                waiter::Blocker* blocker);

  // flock(2) for description `file`: type F_RDLCK (LOCK_SH), F_WRLCK
  // (LOCK_EX) or F_UNLCK (LOCK_UN). Converting a lock first drops the old
  // one, as on Linux, so a failed or interrupted conversion leaves none.
  // -EWOULDBLOCK on conflict without a blocker; -EINTR when interrupted.
  int Flock(const std::shared_ptr<Inode>& inode, const File* file, short type,
            waiter::Blocker* blocker);

  // Releases every POSIX lock of `table` on `inode`: call when the table
  // closes (or otherwise drops) any descriptor whose file has this inode,
  // and for each of its files when the table itself is destroyed.
  void ReleasePosix(const Inode* inode, const FdTable* table);
  // Releases the OFD and flock locks of description `file` on `inode`:
  // call when the description is destroyed.
  void ReleaseDescription(const Inode* inode, const File* file);

  // The record locks on `inode`, ordered by start (tests; a future
  // /proc/locks).
  std::vector<RecordLock> RecordLocks(const Inode* inode);
  // How many inodes have lock state: 0 once everything was released.
  size_t TrackedInodes();

 private:
  friend struct ::sandboxd::state::FsState;
  struct FlockLock {
    uintptr_t file;
    short type;  // F_RDLCK or F_WRLCK
  };
  // One inode's locks. The fields are guarded by the table's mu_ (they are
  // reached only through inodes_, which is); the queue locks itself.
  struct InodeLocks {
    std::weak_ptr<Inode> inode;
    std::vector<RecordLock> records;  // sorted by start
    std::vector<FlockLock> flocks;
    // Tasks blocked on this inode; the entry is kept while any are, since
    // they wait on `queue`.
    int waiters = 0;
    waiter::WaitQueue queue;
  };
  // A blocked POSIX request: `waiter` waits for a lock of `holder`.
  struct WaitEdge {
    RecordLockOwner waiter;
    RecordLockOwner holder;
  };

  // The entry of `inode`, created if needed; a stale one is emptied first.
  InodeLocks& EntryLocked(const std::shared_ptr<Inode>& inode)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The entry of `inode` if it has one (stale or not).
  InodeLocks* FindLocked(const Inode* inode) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes the entry's waiters if it changed, and forgets the entry when
  // nothing is left in it.
  void ChangedLocked(const Inode* inode, InodeLocks& e, bool changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One attempt at a record lock request: 0 (done), or -EAGAIN with the
  // first conflicting lock in *conflict. Sets *changed when the owner's
  // locks changed.
  static int TrySetRecordLocked(InodeLocks& e, const RecordLock& req,
                                RecordLock* conflict, bool* changed);
  // Replaces req.owner's locks over the request's range.
  static void ApplyRecordLocked(InodeLocks& e, const RecordLock& req);
  static int TryFlockLocked(InodeLocks& e, uintptr_t file, short type,
                            bool* changed);

  // Whether a POSIX `waiter` blocking on `holder` would wait for itself.
  bool WouldDeadlockLocked(const RecordLockOwner& waiter,
                           const RecordLockOwner& holder)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  // Node-based: an entry stays put while waiters hold its queue.
  std::map<const Inode*, InodeLocks> inodes_ ABSL_GUARDED_BY(mu_);
  // Blocked POSIX requests, by waiter id, for deadlock detection.
  std::map<uint64_t, WaitEdge> blocked_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  // inodes_.size(), readable without mu_: most files are closed without
  // ever having been locked, and the release hooks then return at once.
  std::atomic<size_t> tracked_{0};
};

// The hooks for descriptor tables and file descriptions, on the global
// table. Both accept a null inode (files without one) and are cheap when
// nothing is locked.
void ReleasePosixLocks(const Inode* inode, const FdTable* table);
void ReleaseDescriptionLocks(const Inode* inode, const File* file);

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_LOCK_H_
