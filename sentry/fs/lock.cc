#include "sentry/fs/lock.h"

#include <errno.h>
#include <poll.h>

#include <algorithm>

namespace sandboxd::fs {

namespace {

// What lock waiters register for on an inode's queue; the queue carries
// nothing else.
constexpr waiter::EventMask kLockEvents = POLLIN;

// Linux gives up looking for a deadlock after this many owners
// (MAX_DEADLK_ITERATIONS): a longer chain is let through rather than
// walked while every lock operation waits.
constexpr int kMaxDeadlockSteps = 10;

bool Overlaps(const RecordLock& a, int64_t start, int64_t end) {
  return a.start <= end && a.end >= start;
}

bool Conflicts(const RecordLock& held, const RecordLock& want) {
  return !held.owner.SameAs(want.owner) &&
         Overlaps(held, want.start, want.end) &&
         (want.type == F_WRLCK || held.type == F_WRLCK);
}

}  // namespace

LockTable& LockTable::Global() {
  // Never destroyed: file descriptions may be released during exit, after
  // static destructors would have run.
  static LockTable* const table = new LockTable();
  return *table;
}

LockTable::InodeLocks& LockTable::EntryLocked(
    const std::shared_ptr<Inode>& inode) {
  auto [it, inserted] = inodes_.try_emplace(inode.get());
  InodeLocks& e = it->second;
  if (inserted) {
    e.inode = inode;
    tracked_.store(inodes_.size(), std::memory_order_relaxed);
    return e;
  }
  // A weak_ptr keeps its control block alive, so a different control block
  // at this address means the locked inode died and this is a new one. Its
  // locks were never released (a missed hook); they must not carry over.
  // Nobody can be waiting on it: waiters hold the inode.
  if (e.inode.owner_before(inode) || inode.owner_before(e.inode)) {
    e.records.clear();
    e.flocks.clear();
    e.inode = inode;
  }
  return e;
}

LockTable::InodeLocks* LockTable::FindLocked(const Inode* inode) {
  auto it = inodes_.find(inode);
  return it == inodes_.end() ? nullptr : &it->second;
}

void LockTable::ChangedLocked(const Inode* inode, InodeLocks& e, bool changed) {
  if (changed && e.waiters > 0) e.queue.Notify(kLockEvents);
  if (e.records.empty() && e.flocks.empty() && e.waiters == 0) {
    inodes_.erase(inode);
    tracked_.store(inodes_.size(), std::memory_order_relaxed);
  }
}

// ---------------------------------------------------------------------------
// Record locks

void LockTable::ApplyRecordLocked(InodeLocks& e, const RecordLock& req) {
  // The owner's own locks never overlap, and two of the same type never
  // touch (they would have been merged), as on Linux. The request replaces
  // whatever the owner had over its range: locks of the same type that
  // overlap or adjoin it merge into it; the others are cut back, possibly
  // into two pieces.
  int64_t start = req.start;
  int64_t end = req.end;
  std::vector<RecordLock> out;
  out.reserve(e.records.size() + 2);
  for (const RecordLock& l : e.records) {
    if (!l.owner.SameAs(req.owner)) {
      out.push_back(l);
      continue;
    }
    if (req.type != F_UNLCK && l.type == req.type) {
      const bool adjoins_or_overlaps =
          (req.end == kLockOffsetMax || l.start <= req.end + 1) &&
          (req.start == 0 || l.end >= req.start - 1);
      if (adjoins_or_overlaps) {
        start = std::min(start, l.start);
        end = std::max(end, l.end);
      } else {
        out.push_back(l);
      }
      continue;
    }
    if (!Overlaps(l, req.start, req.end)) {
      out.push_back(l);
      continue;
    }
    if (l.start < req.start) {
      out.push_back(RecordLock{l.type, l.start, req.start - 1, l.owner});
    }
    if (l.end > req.end) {
      out.push_back(RecordLock{l.type, req.end + 1, l.end, l.owner});
    }
  }
  if (req.type != F_UNLCK) {
    out.push_back(RecordLock{req.type, start, end, req.owner});
  }
  std::sort(out.begin(), out.end(),
            [](const RecordLock& a, const RecordLock& b) {
              return a.start != b.start ? a.start < b.start : a.end < b.end;
            });
  e.records = std::move(out);
}

int LockTable::TrySetRecordLocked(InodeLocks& e, const RecordLock& req,
                                  RecordLock* conflict, bool* changed) {
  if (req.type != F_UNLCK) {
    for (const RecordLock& l : e.records) {
      if (Conflicts(l, req)) {
        *conflict = l;
        return -EAGAIN;
      }
    }
  }
  bool touches = req.type != F_UNLCK;
  for (const RecordLock& l : e.records) {
    if (l.owner.SameAs(req.owner) && Overlaps(l, req.start, req.end)) {
      touches = true;
      break;
    }
  }
  if (touches) {
    ApplyRecordLocked(e, req);
    *changed = true;
  }
  return 0;
}

bool LockTable::WouldDeadlockLocked(const RecordLockOwner& waiter,
                                    const RecordLockOwner& holder) {
  // Only POSIX owners are followed (as Linux's posix_locks_deadlock): an
  // OFD lock's owner is a description, which may be shared by processes
  // that do not wait for each other.
  if (waiter.kind != RecordLockOwner::Kind::kPosix ||
      holder.kind != RecordLockOwner::Kind::kPosix) {
    return false;
  }
  RecordLockOwner cur = holder;
  for (int i = 0; i < kMaxDeadlockSteps; i++) {
    const WaitEdge* next = nullptr;
    for (const auto& [id, edge] : blocked_) {
      if (edge.waiter.SameAs(cur)) {
        next = &edge;
        break;
      }
    }
    if (next == nullptr) return false;
    if (next->holder.SameAs(waiter)) return true;
    cur = next->holder;
  }
  return false;
}

bool LockTable::TestRecord(const std::shared_ptr<Inode>& inode,
                           const RecordLock& want, RecordLock* conflict) {
  if (tracked_.load(std::memory_order_relaxed) == 0) return false;
  absl::MutexLock l(&mu_);
  if (FindLocked(inode.get()) == nullptr) return false;
  InodeLocks& e = EntryLocked(inode);  // drops the locks of a stale entry
  bool found = false;
  for (const RecordLock& held : e.records) {
    if (Conflicts(held, want)) {
      *conflict = held;
      found = true;
      break;
    }
  }
  ChangedLocked(inode.get(), e, false);
  return found;
}

int LockTable::SetRecord(const std::shared_ptr<Inode>& inode,
                         const RecordLock& req, waiter::Blocker* blocker) {
  if (req.start < 0 || req.end < req.start) return -EINVAL;
  mu_.Lock();
  InodeLocks& e = EntryLocked(inode);
  RecordLock conflict;
  bool changed = false;
  int r = TrySetRecordLocked(e, req, &conflict, &changed);
  if (r != -EAGAIN || blocker == nullptr) {
    ChangedLocked(inode.get(), e, changed);
    mu_.Unlock();
    return r;
  }
  if (WouldDeadlockLocked(req.owner, conflict.owner)) {
    ChangedLocked(inode.get(), e, false);
    mu_.Unlock();
    return -EDEADLK;
  }
  // Blocked. The entry stays in inodes_ (and `e` valid) while waiters > 0.
  const uint64_t id = next_waiter_id_++;
  const bool posix = req.owner.kind == RecordLockOwner::Kind::kPosix;
  if (posix) blocked_[id] = WaitEdge{req.owner, conflict.owner};
  e.waiters++;
  mu_.Unlock();

  int result = -EAGAIN;
  // Retried after every change of the inode's locks.
  auto ready = [&]() {
    absl::MutexLock l(&mu_);
    RecordLock c;
    bool ch = false;
    int r = TrySetRecordLocked(e, req, &c, &ch);
    if (ch) e.queue.Notify(kLockEvents);
    if (r != -EAGAIN) {
      result = r;
      return true;
    }
    if (posix) {
      // The holder may have changed: look for a cycle through the new one.
      blocked_.erase(id);
      if (WouldDeadlockLocked(req.owner, c.owner)) {
        result = -EDEADLK;
        return true;
      }
      blocked_[id] = WaitEdge{req.owner, c.owner};
    }
    return false;
  };
  int w = blocker->Wait(e.queue, kLockEvents, ready);

  absl::MutexLock l(&mu_);
  blocked_.erase(id);
  e.waiters--;
  ChangedLocked(inode.get(), e, false);
  return w < 0 ? w : result;
}

// ---------------------------------------------------------------------------
// flock

int LockTable::TryFlockLocked(InodeLocks& e, uintptr_t file, short type,
                              bool* changed) {
  auto mine = std::find_if(e.flocks.begin(), e.flocks.end(),
                           [&](const FlockLock& f) { return f.file == file; });
  if (mine != e.flocks.end()) {
    if (mine->type == type) return 0;
    // Linux removes the old lock before trying for the new one, so that
    // two holders of LOCK_SH both upgrading cannot deadlock.
    e.flocks.erase(mine);
    *changed = true;
  }
  if (type == F_UNLCK) return 0;
  for (const FlockLock& f : e.flocks) {
    if (type == F_WRLCK || f.type == F_WRLCK) return -EWOULDBLOCK;
  }
  e.flocks.push_back(FlockLock{file, type});
  *changed = true;
  return 0;
}

int LockTable::Flock(const std::shared_ptr<Inode>& inode, const File* file,
                     short type, waiter::Blocker* blocker) {
  const uintptr_t id = reinterpret_cast<uintptr_t>(file);
  mu_.Lock();
  InodeLocks& e = EntryLocked(inode);
  bool changed = false;
  int r = TryFlockLocked(e, id, type, &changed);
  if (r != -EWOULDBLOCK || blocker == nullptr) {
    ChangedLocked(inode.get(), e, changed);
    mu_.Unlock();
    return r;
  }
  // A dropped old lock may unblock others while we wait.
  if (changed) e.queue.Notify(kLockEvents);
  e.waiters++;
  mu_.Unlock();

  int result = -EWOULDBLOCK;
  auto ready = [&]() {
    absl::MutexLock l(&mu_);
    bool ch = false;
    int r = TryFlockLocked(e, id, type, &ch);
    if (ch) e.queue.Notify(kLockEvents);
    if (r == -EWOULDBLOCK) return false;
    result = r;
    return true;
  };
  int w = blocker->Wait(e.queue, kLockEvents, ready);

  absl::MutexLock l(&mu_);
  e.waiters--;
  ChangedLocked(inode.get(), e, false);
  return w < 0 ? w : result;
}

// ---------------------------------------------------------------------------
// Release

void LockTable::ReleasePosix(const Inode* inode, const FdTable* table) {
  if (inode == nullptr || tracked_.load(std::memory_order_relaxed) == 0) {
    return;
  }
  const RecordLockOwner owner = RecordLockOwner::Posix(table, 0);
  absl::MutexLock l(&mu_);
  InodeLocks* e = FindLocked(inode);
  if (e == nullptr) return;
  const size_t before = e->records.size();
  e->records.erase(std::remove_if(e->records.begin(), e->records.end(),
                                  [&](const RecordLock& r) {
                                    return r.owner.SameAs(owner);
                                  }),
                   e->records.end());
  ChangedLocked(inode, *e, e->records.size() != before);
}

void LockTable::ReleaseDescription(const Inode* inode, const File* file) {
  if (inode == nullptr || tracked_.load(std::memory_order_relaxed) == 0) {
    return;
  }
  const RecordLockOwner owner = RecordLockOwner::Ofd(file);
  const uintptr_t id = reinterpret_cast<uintptr_t>(file);
  absl::MutexLock l(&mu_);
  InodeLocks* e = FindLocked(inode);
  if (e == nullptr) return;
  const size_t before = e->records.size() + e->flocks.size();
  e->records.erase(std::remove_if(e->records.begin(), e->records.end(),
                                  [&](const RecordLock& r) {
                                    return r.owner.SameAs(owner);
                                  }),
                   e->records.end());
  e->flocks.erase(
      std::remove_if(e->flocks.begin(), e->flocks.end(),
                     [&](const FlockLock& f) { return f.file == id; }),
      e->flocks.end());
  ChangedLocked(inode, *e, e->records.size() + e->flocks.size() != before);
}

std::vector<RecordLock> LockTable::RecordLocks(const Inode* inode) {
  absl::MutexLock l(&mu_);
  InodeLocks* e = FindLocked(inode);
  if (e == nullptr) return {};
  return e->records;
}

size_t LockTable::TrackedInodes() {
  absl::MutexLock l(&mu_);
  return inodes_.size();
}

void ReleasePosixLocks(const Inode* inode, const FdTable* table) {
  LockTable::Global().ReleasePosix(inode, table);
}

void ReleaseDescriptionLocks(const Inode* inode, const File* file) {
  LockTable::Global().ReleaseDescription(inode, file);
}

}  // namespace sandboxd::fs
