#include "sentry/fs/inotify.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>

#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include "sentry/fs/anon.h"

namespace sandboxd::fs {
namespace {

constexpr uint32_t kSelfOnly = IN_DELETE_SELF | IN_MOVE_SELF;

struct Watch {
  InotifyFile* owner;
  int wd;
  uint32_t mask;  // events and IN_ONESHOT, IN_EXCL_UNLINK
  std::shared_ptr<Inode> inode;
};

// Every watch of the Sentry. Watches are owned here; an InotifyFile finds
// its own by (owner, wd).
class Registry {
 public:
  absl::Mutex mu;
  std::unordered_map<const Inode*, std::vector<Watch*>> by_inode
      ABSL_GUARDED_BY(mu);
  std::map<std::pair<const InotifyFile*, int>, std::unique_ptr<Watch>> by_wd
      ABSL_GUARDED_BY(mu);
  std::map<const InotifyFile*, int> next_wd ABSL_GUARDED_BY(mu);

  // Unlinks `w` and frees it. The inode reference it held is handed to
  // `doomed`, to be released after the lock (a last reference may free
  // the inode, which must not happen under the registry lock).
  void RemoveLocked(Watch* w, std::vector<std::shared_ptr<Inode>>* doomed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = by_inode.find(w->inode.get());
    if (it != by_inode.end()) {
      auto& v = it->second;
      for (auto vi = v.begin(); vi != v.end(); ++vi) {
        if (*vi == w) {
          v.erase(vi);
          break;
        }
      }
      if (v.empty()) by_inode.erase(it);
    }
    doomed->push_back(std::move(w->inode));
    by_wd.erase({w->owner, w->wd});
    inotify::internal::watch_count.fetch_sub(1, std::memory_order_relaxed);
  }

  // Delivers an event to the watches of `inode`; `name` non-empty for
  // events about an entry. `unlinked`: the entry was unlinked already
  // (IN_EXCL_UNLINK watches skip it).
  void Deliver(const Inode* inode, uint32_t mask, uint32_t cookie,
               const std::string& name, bool unlinked) {
    std::vector<std::shared_ptr<Inode>> doomed;
    std::vector<std::shared_ptr<waiter::WaitQueue>> wake;
    {
      absl::MutexLock l(&mu);
      auto it = by_inode.find(inode);
      if (it == by_inode.end()) return;
      std::vector<Watch*> watches = it->second;  // oneshots remove theirs
      for (Watch* w : watches) {
        if ((w->mask & mask & IN_ALL_EVENTS) == 0) continue;
        if (unlinked && (w->mask & IN_EXCL_UNLINK)) continue;
        uint32_t m = mask & (w->mask | IN_ISDIR);
        if (w->owner->Enqueue(w->wd, m, cookie, name)) {
          wake.push_back(w->owner->event_queue());
        }
        if (w->mask & IN_ONESHOT) {
          if (w->owner->Enqueue(w->wd, IN_IGNORED, 0, "")) {
            wake.push_back(w->owner->event_queue());
          }
          RemoveLocked(w, &doomed);
        }
      }
    }
    for (auto& q : wake) q->Notify(POLLIN | POLLRDNORM);
  }
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

uint32_t DirFlag(Inode& inode) {
  return inode.Type() == S_IFDIR ? IN_ISDIR : 0;
}

}  // namespace

// ---------------------------------------------------------------------------
// InotifyFile

size_t InotifyFile::Event::size() const {
  size_t len = 0;
  if (!name.empty()) {
    len = (name.size() + 1 + sizeof(inotify_event) - 1) /
          sizeof(inotify_event) * sizeof(inotify_event);
  }
  return sizeof(inotify_event) + len;
}

InotifyFile::InotifyFile(bool nonblock)
    : ino_(NextAnonIno()), nonblock_(nonblock) {}

InotifyFile::~InotifyFile() {
  Registry& r = registry();
  std::vector<std::shared_ptr<Inode>> doomed;
  absl::MutexLock l(&r.mu);
  auto it = r.by_wd.lower_bound({this, 0});
  while (it != r.by_wd.end() && it->first.first == this) {
    Watch* w = it->second.get();
    ++it;
    r.RemoveLocked(w, &doomed);
  }
  r.next_wd.erase(this);
  // `doomed` is released after the lock (declared before it).
}

bool InotifyFile::Enqueue(int wd, uint32_t mask, uint32_t cookie,
                          const std::string& name) {
  absl::MutexLock l(&mu_);
  if (!events_.empty()) {
    const Event& last = events_.back();
    // Identical to the last queued event: merged (inotify_merge).
    if (last.wd == wd && last.mask == mask && last.cookie == cookie &&
        last.name == name) {
      return false;
    }
  }
  Event e{wd, mask, cookie, name};
  if (events_.size() >= kMaxQueuedEvents) {
    if (overflow_queued_) return false;  // full, and already reported
    e = Event{-1, IN_Q_OVERFLOW, 0, ""};
    overflow_queued_ = true;
  }
  bytes_ += e.size();
  events_.push_back(std::move(e));
  return true;
}

int64_t InotifyFile::AddWatch(std::shared_ptr<Inode> inode, uint32_t mask) {
  if ((mask & ~kInotifyAllBits) || !(mask & kInotifyAllBits)) return -EINVAL;
  if ((mask & IN_MASK_ADD) && (mask & IN_MASK_CREATE)) return -EINVAL;
  Registry& r = registry();
  absl::MutexLock l(&r.mu);
  uint32_t keep = mask & (IN_ALL_EVENTS | IN_ONESHOT | IN_EXCL_UNLINK);
  auto it = r.by_inode.find(inode.get());
  if (it != r.by_inode.end()) {
    for (Watch* w : it->second) {
      if (w->owner != this) continue;
      if (mask & IN_MASK_CREATE) return -EEXIST;
      w->mask = (mask & IN_MASK_ADD) ? (w->mask | keep) : keep;
      return w->wd;
    }
  }
  int& next = r.next_wd[this];
  int wd = ++next;
  auto w = std::make_unique<Watch>(Watch{this, wd, keep, inode});
  r.by_inode[inode.get()].push_back(w.get());
  r.by_wd[{this, wd}] = std::move(w);
  inotify::internal::watch_count.fetch_add(1, std::memory_order_relaxed);
  return wd;
}

std::vector<InotifyFile::WatchState> InotifyFile::Watches(int* last_wd) {
  Registry& r = registry();
  absl::MutexLock l(&r.mu);
  std::vector<WatchState> out;
  for (auto it = r.by_wd.lower_bound({this, 0});
       it != r.by_wd.end() && it->first.first == this; ++it) {
    out.push_back({it->second->wd, it->second->mask, it->second->inode});
  }
  auto n = r.next_wd.find(this);
  *last_wd = n == r.next_wd.end() ? 0 : n->second;
  return out;
}

void InotifyFile::RestoreWatches(const std::vector<WatchState>& watches,
                                 int last_wd) {
  Registry& r = registry();
  absl::MutexLock l(&r.mu);
  for (const WatchState& s : watches) {
    auto w = std::make_unique<Watch>(Watch{this, s.wd, s.mask, s.inode});
    r.by_inode[s.inode.get()].push_back(w.get());
    r.by_wd[{this, s.wd}] = std::move(w);
    inotify::internal::watch_count.fetch_add(1, std::memory_order_relaxed);
  }
  r.next_wd[this] = last_wd;
}

int64_t InotifyFile::RemoveWatch(int wd) {
  Registry& r = registry();
  std::vector<std::shared_ptr<Inode>> doomed;
  {
    absl::MutexLock l(&r.mu);
    auto it = r.by_wd.find({this, wd});
    if (it == r.by_wd.end()) return -EINVAL;
    r.RemoveLocked(it->second.get(), &doomed);
    Enqueue(wd, IN_IGNORED, 0, "");
  }
  queue_->Notify(POLLIN | POLLRDNORM);
  return 0;
}

int64_t InotifyFile::Read(void* buf, uint64_t n, int64_t offset,
                          const IoContext& io) {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (!events_.empty()) {
        auto* out = static_cast<uint8_t*>(buf);
        uint64_t done = 0;
        while (!events_.empty()) {
          const Event& e = events_.front();
          size_t sz = e.size();
          if (done + sz > n) break;
          inotify_event h = {};
          h.wd = e.wd;
          h.mask = e.mask;
          h.cookie = e.cookie;
          h.len = static_cast<uint32_t>(sz - sizeof(inotify_event));
          std::memcpy(out + done, &h, sizeof(h));
          std::memset(out + done + sizeof(h), 0, h.len);
          std::memcpy(out + done + sizeof(h), e.name.data(), e.name.size());
          done += sz;
          bytes_ -= sz;
          if (e.mask == IN_Q_OVERFLOW) overflow_queued_ = false;
          events_.pop_front();
        }
        // Not even the first event fits.
        if (done == 0) return -EINVAL;
        return static_cast<int64_t>(done);
      }
    }
    if (nonblock_.load() || io.blocker == nullptr) return -EAGAIN;
    int r = io.blocker->Wait(*queue_, POLLIN, [this] {
      absl::MutexLock l(&mu_);
      return !events_.empty();
    });
    if (r < 0) return r;
  }
}

int64_t InotifyFile::Stat(struct stat* st) {
  AnonStat(st, 0600, ino_);
  return 0;
}

int64_t InotifyFile::Ioctl(uint64_t request, void* buf) {
  if (request != FIONREAD) return -ENOTTY;
  absl::MutexLock l(&mu_);
  *static_cast<int*>(buf) = static_cast<int>(bytes_);
  return 0;
}

int InotifyFile::StatusFlags() const {
  return O_RDONLY | (nonblock_.load() ? O_NONBLOCK : 0);
}

int64_t InotifyFile::SetStatusFlags(int flags) {
  nonblock_.store((flags & O_NONBLOCK) != 0);
  return 0;
}

waiter::EventMask InotifyFile::Readiness(waiter::EventMask mask) {
  absl::MutexLock l(&mu_);
  return events_.empty() ? 0 : mask & (POLLIN | POLLRDNORM);
}

// ---------------------------------------------------------------------------
// Hooks

namespace inotify {

namespace internal {
std::atomic<int64_t> watch_count{0};
}  // namespace internal

namespace {
std::atomic<uint32_t> next_cookie{1};
}  // namespace

uint32_t NewCookie() { return next_cookie.fetch_add(1, std::memory_order_relaxed); }
uint32_t NextCookie() { return next_cookie.load(std::memory_order_relaxed); }
void SetNextCookie(uint32_t next) { next_cookie.store(next, std::memory_order_relaxed); }

void NotifyInode(Inode& inode, uint32_t mask) {
  if (!Active()) return;
  // IN_MOVE_SELF and IN_DELETE_SELF come without IN_ISDIR, as on Linux.
  if (!(mask & kSelfOnly)) mask |= DirFlag(inode);
  registry().Deliver(&inode, mask, 0, "", false);
}

void NotifyEntry(Inode& dir, uint32_t mask, const std::string& name,
                 bool is_dir, uint32_t cookie) {
  if (!Active()) return;
  registry().Deliver(&dir, mask | (is_dir ? IN_ISDIR : 0), cookie, name,
                     false);
}

void NotifyFile(const Vfs* vfs, const Location& loc, uint32_t mask) {
  if (!Active() || !loc.valid() || mask == 0) return;
  Inode& inode = loc.inode();
  mask |= DirFlag(inode);
  std::shared_ptr<Inode> parent;
  std::string name;
  bool unlinked = false;
  // The parent first, as fsnotify_parent reports to it before the inode.
  if (vfs != nullptr && vfs->ParentOf(loc, &parent, &name, &unlinked)) {
    registry().Deliver(parent.get(), mask & ~kSelfOnly, 0, name, unlinked);
  }
  registry().Deliver(&inode, mask, 0, "", false);
}

void NotifyDeleteSelf(Inode& inode) {
  if (!Active()) return;
  registry().Deliver(&inode, IN_DELETE_SELF, 0, "", false);
}

void DropWatches(Inode& inode) {
  if (!Active()) return;
  Registry& r = registry();
  std::vector<std::shared_ptr<Inode>> doomed;
  std::vector<std::shared_ptr<waiter::WaitQueue>> wake;
  {
    absl::MutexLock l(&r.mu);
    auto it = r.by_inode.find(&inode);
    if (it == r.by_inode.end()) return;
    std::vector<Watch*> watches = it->second;
    for (Watch* w : watches) {
      if (w->owner->Enqueue(w->wd, IN_IGNORED, 0, "")) {
        wake.push_back(w->owner->event_queue());
      }
      r.RemoveLocked(w, &doomed);
    }
  }
  for (auto& q : wake) q->Notify(POLLIN | POLLRDNORM);
}

uint32_t SetAttrMask(const SetAttrRequest& req) {
  uint32_t m = 0;
  if (req.set_uid || req.set_gid || req.set_mode) m |= IN_ATTRIB;
  if (req.set_size) m |= IN_MODIFY;
  if (req.set_atime && req.set_mtime) {
    m |= IN_ATTRIB;
  } else if (req.set_atime) {
    m |= IN_ACCESS;
  } else if (req.set_mtime) {
    m |= IN_MODIFY;
  }
  return m;
}

}  // namespace inotify
}  // namespace sandboxd::fs
