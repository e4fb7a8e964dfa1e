// procfs's inode kinds (ProcInode, SnapshotFile, SeqInode, LinkInode,
// DirInode) and what every procfs inode shares. Internal to sentry/proc:
// procfs.cc (the root and the system-wide files), process_dirs.cc
// (/proc/[pid]) and fd_links.cc (/proc/[pid]/fd/N) build on it.
#ifndef SANDBOXD_SENTRY_PROC_INODES_H_
#define SANDBOXD_SENTRY_PROC_INODES_H_

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/file.h"
#include "sentry/fs/inode.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/kernel.h"
#include "sentry/proc/procfs.h"
#include "sentry/waiter/event_source.h"

namespace sandboxd::fs::proc {

using kernel::Kernel;
using kernel::Task;
using kernel::ThreadGroup;

inline constexpr uint32_t kProcSuperMagic = 0x9fa0;
// /proc/[pid]/{cmdline,environ} copy at most this much of the process's
// memory, so that a process cannot make the Sentry allocate without bound.
inline constexpr uint64_t kMaxArgs = 2 * 1024 * 1024;

inline timespec Now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

// What every procfs inode shares.
struct Shared {
  Kernel* kernel = nullptr;
  ProcFsOptions opts;
};

// A stable inode number for a per-process name, so that two lookups of one
// file agree (ls -i, find's cycle checks).
inline uint64_t InoFor(pid_t pid, pid_t tid, const std::string& name) {
  const uint64_t h = std::hash<std::string>()(name) & 0xfffff;
  return (static_cast<uint64_t>(pid) << 40) ^
         (static_cast<uint64_t>(tid) << 20) ^ h ^ (1ull << 62);
}

// The caller's root: paths in links are shown from it.
inline Location ReaderRoot(Kernel& k) {
  Task* t = Task::Current();
  return t != nullptr ? t->group().fs().root() : k.vfs().Root();
}

// ---------------------------------------------------------------------------
// Inode kinds

class ProcInode : public Inode {
 public:
  ProcInode(std::shared_ptr<Shared> fs, uint32_t type, uint32_t perm,
            uint64_t ino)
      : fs_(std::move(fs)), type_(type), perm_(perm), ino_(ino), time_(Now()) {}

  uint32_t Type() const override { return type_; }
  int GetAttr(Attr* out) override {
    *out = Attr();
    out->dev = fs_->opts.dev;
    out->ino = ino_;
    out->mode = type_ | perm_;
    out->nlink = type_ == S_IFDIR ? 2 : 1;
    out->size = type_ == S_IFLNK ? 64 : 0;
    out->blksize = 1024;
    out->atime = out->mtime = out->ctime = time_;
    return 0;
  }
  int StatFs(struct statfs* out) override {
    Inode::StatFs(out);
    out->f_type = kProcSuperMagic;
    out->f_bsize = 4096;
    return 0;
  }

 protected:
  const std::shared_ptr<Shared> fs_;

 private:
  const uint32_t type_;
  const uint32_t perm_;
  const uint64_t ino_;
  const timespec time_;
};

// Generates a file's text: 0 or -errno (-ESRCH once the process is gone).
using Generator = std::function<int(std::string*)>;
// Takes one write(2) of a writable file: bytes accepted or -errno.
using Writer = std::function<int64_t(const std::string&)>;

// Whether epoll takes a procfs file, as Linux decides by its f_op->poll:
//  - kNone: no poll (the files of /proc/PID other than mounts and
//    mountinfo: seq_file's single_open): epoll_ctl fails with EPERM;
//  - kDefault: the files of /proc itself and of /proc/sys (proc_reg_poll,
//    proc_sys_poll): always ready with DEFAULT_POLLMASK (in and out);
//  - kMounts: /proc/PID/mounts and mountinfo (mounts_poll): ready to read
//    (POLLIN | POLLRDNORM; no mount-change events: the text is a snapshot).
// poll(2) and select(2) take every file (no poll: DEFAULT_POLLMASK).
enum class ProcPoll { kNone, kDefault, kMounts };

// An open procfs file: the text generated at open, read at the
// description's offset.
class SnapshotFile final : public InodeFile, public waiter::EventSource {
 public:
  SnapshotFile(std::shared_ptr<Inode> inode, int flags, std::string data,
               Writer writer, ProcPoll poll = ProcPoll::kNone)
      : InodeFile(std::move(inode), flags),
        data_(std::move(data)),
        writer_(std::move(writer)),
        poll_(poll),
        queue_(poll == ProcPoll::kNone
                   ? nullptr
                   : std::make_shared<waiter::WaitQueue>()) {}

  // Never changes: the queue only holds epoll's waiters (EventSource's
  // contract), nothing notifies them.
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return queue_; }
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override {
    if (queue_ != nullptr) queue_->Add(w, mask);
  }
  void EventUnregister(waiter::Waiter* w) override {
    if (queue_ != nullptr) queue_->Remove(w);
  }
  waiter::EventMask Readiness(waiter::EventMask mask) override {
    if (poll_ == ProcPoll::kMounts) return mask & (POLLIN | POLLRDNORM);
    return InodeFile::Readiness(mask);
  }

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override {
    if ((StatusFlags() & O_ACCMODE) == O_WRONLY) return -EBADF;
    absl::MutexLock l(&mu_);
    const int64_t off = offset >= 0 ? offset : offset_;
    if (static_cast<uint64_t>(off) >= data_.size()) return 0;
    const uint64_t len = std::min<uint64_t>(n, data_.size() - off);
    std::memcpy(buf, data_.data() + off, len);
    if (offset < 0) offset_ += static_cast<int64_t>(len);
    return static_cast<int64_t>(len);
  }

  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override {
    if ((StatusFlags() & O_ACCMODE) == O_RDONLY) return -EBADF;
    if (!writer_) return -EINVAL;
    return writer_(std::string(static_cast<const char*>(buf), n));
  }

  int64_t Seek(int64_t offset, int whence) override {
    absl::MutexLock l(&mu_);
    int64_t base;
    switch (whence) {
      case SEEK_SET:
        base = 0;
        break;
      case SEEK_CUR:
        base = offset_;
        break;
      default:
        return -EINVAL;  // seq_file has no end
    }
    if (base + offset < 0) return -EINVAL;
    offset_ = base + offset;
    return offset_;
  }

 private:
  const std::string data_;
  const Writer writer_;
  const ProcPoll poll_;
  const std::shared_ptr<waiter::WaitQueue> queue_;
  absl::Mutex mu_;
  int64_t offset_ ABSL_GUARDED_BY(mu_) = 0;
};

class SeqInode final : public ProcInode {
 public:
  SeqInode(std::shared_ptr<Shared> fs, uint64_t ino, Generator gen,
           Writer writer = Writer(), ProcPoll poll = ProcPoll::kNone)
      : ProcInode(std::move(fs), S_IFREG, writer ? 0644 : 0444, ino),
        gen_(std::move(gen)),
        writer_(std::move(writer)),
        poll_(poll) {}

  int Open(int flags, std::shared_ptr<File>* out) override {
    if (flags & O_PATH) return Inode::Open(flags, out);
    const int acc = flags & O_ACCMODE;
    if ((acc == O_WRONLY || acc == O_RDWR) && !writer_) return -EACCES;
    std::string data;
    if (acc != O_WRONLY) {
      int r = gen_(&data);
      if (r < 0) return r;
    }
    *out = std::make_shared<SnapshotFile>(shared_from_this(), flags,
                                          std::move(data), writer_, poll_);
    return 0;
  }

 private:
  const Generator gen_;
  const Writer writer_;
  const ProcPoll poll_;
};

// Symlinks; magic ones also know the object they lead to.
class LinkInode final : public ProcInode {
 public:
  using Follower = std::function<int(Location*)>;
  LinkInode(std::shared_ptr<Shared> fs, uint64_t ino, Generator target,
            Follower follow = Follower(), uint32_t perm = 0777)
      : ProcInode(std::move(fs), S_IFLNK, perm, ino),
        target_(std::move(target)),
        follow_(std::move(follow)) {}

  int Readlink(std::string* out) override { return target_(out); }
  int FollowMagicLink(Location* out) override {
    return follow_ ? follow_(out) : kNotMagicLink;
  }

 private:
  const Generator target_;
  const Follower follow_;
};

// A directory whose entries are computed at each listing and lookup.
class DirInode final : public ProcInode {
 public:
  using Lister = std::function<int(std::vector<DirEntry>*)>;
  using Looker =
      std::function<int(const std::string&, std::shared_ptr<Inode>*)>;
  DirInode(std::shared_ptr<Shared> fs, uint64_t ino, uint32_t perm, Lister list,
           Looker lookup)
      : ProcInode(std::move(fs), S_IFDIR, perm, ino),
        list_(std::move(list)),
        lookup_(std::move(lookup)) {}

  int Lookup(const std::string& name, std::shared_ptr<Inode>* out) override {
    return lookup_(name, out);
  }
  int ReadDir(std::vector<DirEntry>* out) override {
    out->clear();
    return list_(out);
  }
  bool CacheLookups() const override { return false; }
  int Create(const std::string&, const CreateRequest&,
             std::shared_ptr<Inode>*) override {
    return -EACCES;
  }
  int Unlink(const std::string&, bool) override { return -EACCES; }

 private:
  const Lister list_;
  const Looker lookup_;
};

// A fixed directory (/proc/sys and below).
inline std::shared_ptr<Inode> StaticDir(
    std::shared_ptr<Shared> fs,
    std::vector<std::pair<std::string, std::shared_ptr<Inode>>> entries) {
  auto map = std::make_shared<std::map<std::string, std::shared_ptr<Inode>>>(
      entries.begin(), entries.end());
  return std::make_shared<DirInode>(
      fs, NextInodeNumber(), 0555,
      [map](std::vector<DirEntry>* out) {
        for (const auto& [name, inode] : *map) {
          Attr a;
          inode->GetAttr(&a);
          out->push_back(DirEntry{name, a.ino, DirentType(inode->Type())});
        }
        return 0;
      },
      [map](const std::string& name, std::shared_ptr<Inode>* out) {
        auto it = map->find(name);
        if (it == map->end()) return -ENOENT;
        *out = it->second;
        return 0;
      });
}

// A file of /proc itself or /proc/sys (pollable: ProcPoll::kDefault).
inline std::shared_ptr<Inode> TextFile(const std::shared_ptr<Shared>& fs,
                                Generator gen) {
  return std::make_shared<SeqInode>(fs, NextInodeNumber(), std::move(gen),
                                    Writer(), ProcPoll::kDefault);
}

inline std::shared_ptr<Inode> ConstFile(const std::shared_ptr<Shared>& fs,
                                 std::string text) {
  return TextFile(fs, [text](std::string* out) {
    *out = text;
    return 0;
  });
}

}  // namespace sandboxd::fs::proc

#endif  // SANDBOXD_SENTRY_PROC_INODES_H_
