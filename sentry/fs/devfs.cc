#include "sentry/fs/devfs.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"

namespace sandboxd::fs {
namespace {

timespec Now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

// What all inodes of one devfs share. Immutable after construction but for
// the inode counter.
struct DevFsShared {
  uint64_t dev = 0;
  TtyOpener open_tty;
  TtyOpener open_console;
  std::function<int64_t(std::shared_ptr<Inode>, int, std::shared_ptr<File>*)>
      open_ptmx;
  timespec created = {};
  std::atomic<uint64_t> next_ino{1};  // the root is inode 1
};

// Identity, permissions, owner and times, which every devfs inode has and
// chmod/chown/utimensat may change.
class DevInode : public Inode {
 public:
  DevInode(std::shared_ptr<DevFsShared> fs, uint32_t type, uint32_t perm,
           uint64_t rdev = 0)
      : fs_(std::move(fs)),
        ino_(fs_->next_ino.fetch_add(1, std::memory_order_relaxed)),
        type_(type),
        rdev_(rdev),
        perm_(perm),
        atime_(fs_->created),
        mtime_(fs_->created),
        ctime_(fs_->created) {}

  uint32_t Type() const override { return type_; }
  uint64_t ino() const { return ino_; }

  int GetAttr(Attr* out) override {
    *out = Attr();
    out->dev = fs_->dev;
    out->ino = ino_;
    out->rdev = rdev_;
    FillKindAttr(out);
    absl::MutexLock l(&mu_);
    out->mode = type_ | perm_;
    out->uid = uid_;
    out->gid = gid_;
    out->atime = atime_;
    out->mtime = mtime_;
    out->ctime = ctime_;
    return 0;
  }

  int SetAttr(const SetAttrRequest& req) override {
    // truncate(2): EISDIR for directories, EINVAL for anything else that
    // is not a regular file (O_TRUNC on a device never gets here).
    if (req.set_size) return type_ == S_IFDIR ? -EISDIR : -EINVAL;
    const timespec now = Now();
    absl::MutexLock l(&mu_);
    if (req.set_mode) perm_ = req.mode & 07777;
    if (req.set_uid) uid_ = req.uid;
    if (req.set_gid) gid_ = req.gid;
    if (req.set_atime) atime_ = req.atime;
    if (req.set_mtime) mtime_ = req.mtime;
    ctime_ = now;
    return 0;
  }

 protected:
  // Size and link count, which depend on the kind.
  virtual void FillKindAttr(Attr* out) const {}

  const std::shared_ptr<DevFsShared> fs_;

 private:
  const uint64_t ino_;
  const uint32_t type_;
  const uint64_t rdev_;
  absl::Mutex mu_;
  uint32_t perm_ ABSL_GUARDED_BY(mu_);
  uint32_t uid_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t gid_ ABSL_GUARDED_BY(mu_) = 0;
  timespec atime_ ABSL_GUARDED_BY(mu_);
  timespec mtime_ ABSL_GUARDED_BY(mu_);
  timespec ctime_ ABSL_GUARDED_BY(mu_);
};

class DevSymlink final : public DevInode {
 public:
  DevSymlink(std::shared_ptr<DevFsShared> fs, std::string target)
      : DevInode(std::move(fs), S_IFLNK, 0777), target_(std::move(target)) {}

  int Readlink(std::string* target) override {
    *target = target_;
    return 0;
  }

 private:
  void FillKindAttr(Attr* out) const override { out->size = target_.size(); }
  const std::string target_;
};

// A directory whose entries are fixed when devfs is built.
class DevDirectory final : public DevInode {
 public:
  DevDirectory(std::shared_ptr<DevFsShared> fs, uint32_t perm)
      : DevInode(std::move(fs), S_IFDIR, perm) {}

  // Only while building the tree, before the directory is shared.
  void Add(const std::string& name, std::shared_ptr<Inode> inode) {
    if (inode->Type() == S_IFDIR) subdirs_++;
    entries_.emplace(name, std::move(inode));
  }

  int Lookup(const std::string& name, std::shared_ptr<Inode>* out) override {
    auto it = entries_.find(name);
    if (it == entries_.end()) return -ENOENT;
    *out = it->second;
    return 0;
  }

  int ReadDir(std::vector<DirEntry>* out) override {
    out->clear();
    for (const auto& [name, inode] : entries_) {
      Attr a;
      inode->GetAttr(&a);
      out->push_back(DirEntry{name, a.ino, DirentType(inode->Type())});
    }
    return 0;
  }

  int Create(const std::string& name, const CreateRequest& req,
             std::shared_ptr<Inode>* out) override {
    return entries_.count(name) != 0 ? -EEXIST : -EPERM;
  }
  int Link(const std::string& name,
           const std::shared_ptr<Inode>& target) override {
    return entries_.count(name) != 0 ? -EEXIST : -EPERM;
  }
  int Unlink(const std::string& name, bool dir) override {
    return entries_.count(name) == 0 ? -ENOENT : -EPERM;
  }
  int Rename(const std::string& old_name, Inode& new_dir,
             const std::string& new_name, unsigned flags) override {
    return entries_.count(old_name) == 0 ? -ENOENT : -EPERM;
  }

 private:
  void FillKindAttr(Attr* out) const override {
    out->nlink = 2 + subdirs_;
    // As tmpfs (and devtmpfs) count: 20 bytes per entry with "." and "..".
    out->size = 20 * (2 + entries_.size());
  }

  // Constant once the tree is built, hence unguarded.
  std::map<std::string, std::shared_ptr<Inode>> entries_;
  uint32_t subdirs_ = 0;
};

enum class DeviceKind { kNull, kZero, kFull, kRandom, kTty, kConsole, kPtmx };

// An open null, zero, full, random or urandom device. The inode's file
// for stat, fchmod and /proc/self/fd; reads and writes are the device's.
class DeviceFile final : public InodeFile {
 public:
  DeviceFile(std::shared_ptr<Inode> inode, int flags, DeviceKind kind)
      : InodeFile(std::move(inode), flags), kind_(kind) {}

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override {
    if ((StatusFlags() & O_ACCMODE) == O_WRONLY) return -EBADF;
    switch (kind_) {
      case DeviceKind::kNull:
        return 0;
      case DeviceKind::kZero:
      case DeviceKind::kFull:
        std::memset(buf, 0, n);
        return static_cast<int64_t>(n);
      case DeviceKind::kRandom:
        return ReadRandom(static_cast<uint8_t*>(buf), n);
      case DeviceKind::kTty:
      case DeviceKind::kConsole:
      case DeviceKind::kPtmx:
        break;
    }
    return -EIO;  // unreachable: the tty's file is the opener's
  }

  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override {
    if ((StatusFlags() & O_ACCMODE) == O_RDONLY) return -EBADF;
    if (kind_ == DeviceKind::kFull) return -ENOSPC;
    return static_cast<int64_t>(n);
  }

  // Linux's null, zero and full reset the position to 0 and random's
  // never moves from it: every seek lands on 0.
  int64_t Seek(int64_t offset, int whence) override { return 0; }

 private:
  // Since Linux 5.6 /dev/random blocks only until the pool is first
  // initialized, exactly as getrandom(2) without flags does.
  static int64_t ReadRandom(uint8_t* buf, uint64_t n) {
    uint64_t done = 0;
    while (done < n) {
      ssize_t r = getrandom(buf + done, n - done, 0);
      if (r < 0) {
        if (errno == EINTR) continue;
        return done > 0 ? static_cast<int64_t>(done) : -errno;
      }
      done += static_cast<uint64_t>(r);
    }
    return static_cast<int64_t>(done);
  }

  const DeviceKind kind_;
};

class DevDevice final : public DevInode {
 public:
  DevDevice(std::shared_ptr<DevFsShared> fs, DeviceKind kind, uint64_t rdev)
      : DevInode(std::move(fs), S_IFCHR,
                 kind == DeviceKind::kConsole ? 0600 : 0666, rdev),
        kind_(kind) {}

  int Open(int flags, std::shared_ptr<File>* out) override {
    // O_PATH does no I/O: a plain inode file, as for any other node.
    if (flags & O_PATH) return Inode::Open(flags, out);
    if (kind_ == DeviceKind::kTty) return OpenTty(fs_->open_tty, flags, out);
    if (kind_ == DeviceKind::kConsole) {
      return OpenTty(fs_->open_console, flags, out);
    }
    if (kind_ == DeviceKind::kPtmx) {
      return static_cast<int>(fs_->open_ptmx(shared_from_this(), flags, out));
    }
    *out = std::make_shared<DeviceFile>(shared_from_this(), flags, kind_);
    return 0;
  }

 private:
  static int OpenTty(const TtyOpener& open, int flags,
                     std::shared_ptr<File>* out) {
    if (!open) return -ENXIO;
    std::shared_ptr<File> f;
    int64_t r = open(&f);
    if (r < 0) return static_cast<int>(r);
    if (flags & O_NONBLOCK) {
      r = f->SetStatusFlags(f->StatusFlags() | O_NONBLOCK);
      if (r < 0) return static_cast<int>(r);
    }
    *out = std::move(f);
    return 0;
  }

  const DeviceKind kind_;
};

}  // namespace

DevFs::DevFs(DevFsOptions opts) {
  auto fs = std::make_shared<DevFsShared>();
  fs->dev = opts.dev;
  fs->open_tty = std::move(opts.open_tty);
  fs->open_console = std::move(opts.open_console);
  fs->open_ptmx = std::move(opts.open_ptmx);
  fs->created = Now();

  auto root = std::make_shared<DevDirectory>(fs, 0755);
  auto device = [&](DeviceKind kind, uint64_t rdev) {
    return std::make_shared<DevDevice>(fs, kind, rdev);
  };
  root->Add("null", device(DeviceKind::kNull, kDevNull));
  root->Add("zero", device(DeviceKind::kZero, kDevZero));
  root->Add("full", device(DeviceKind::kFull, kDevFull));
  root->Add("random", device(DeviceKind::kRandom, kDevRandom));
  root->Add("urandom", device(DeviceKind::kRandom, kDevURandom));
  root->Add("tty", device(DeviceKind::kTty, kDevTty));
  root->Add("fd", std::make_shared<DevSymlink>(fs, "/proc/self/fd"));
  root->Add("stdin", std::make_shared<DevSymlink>(fs, "/proc/self/fd/0"));
  root->Add("stdout", std::make_shared<DevSymlink>(fs, "/proc/self/fd/1"));
  root->Add("stderr", std::make_shared<DevSymlink>(fs, "/proc/self/fd/2"));
  if (fs->open_console) {
    root->Add("console", device(DeviceKind::kConsole, kDevConsole));
  }
  if (fs->open_ptmx) root->Add("ptmx", device(DeviceKind::kPtmx, kDevPtmx));
  if (opts.pts != nullptr) {
    root->Add("pts", opts.pts);
  } else {
    root->Add("pts", std::make_shared<DevDirectory>(fs, 0755));
  }
  // Sticky and world-writable, like the tmpfs that is mounted over it.
  root->Add("shm", std::make_shared<DevDirectory>(fs, 01777));
  root_ = std::move(root);
}

TtyOpener HostTtyOpener(int host_fd) {
  if (isatty(host_fd) != 1) return TtyOpener();
  return [host_fd](std::shared_ptr<File>* out) -> int64_t {
    int d = fcntl(host_fd, F_DUPFD_CLOEXEC, 3);
    if (d < 0) return -errno;
    *out = std::make_shared<HostFile>(UniqueFd(d));
    return 0;
  };
}

}  // namespace sandboxd::fs
