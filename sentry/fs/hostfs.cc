#include "sentry/fs/hostfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/hash/hash.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "sentry/fs/pipe.h"
#include "sentry/mm/memory_file.h"

namespace sandboxd::fs::hostfs {
namespace {

// Retries a host call interrupted by a signal (the Sentry's own timers and
// interrupt signals may land while a task thread is in one).
template <typename F>
auto RetryEintr(F f) {
  decltype(f()) r;
  do {
    r = f();
  } while (r < 0 && errno == EINTR);
  return r;
}

// The permission bits a writable hostfs gives a host file of `type`:
// never set-user-ID or set-group-ID on a regular file. Every file the
// sandbox makes belongs to the Sentry's host uid, so such a bit would let
// a program of the sandbox leave a set-uid binary of that uid on the host.
mode_t HostMode(uint32_t type, uint32_t mode) {
  mode &= 07777;
  if (type == S_IFREG) mode &= ~static_cast<uint32_t>(S_ISUID | S_ISGID);
  return mode;
}

int StatFd(int fd, struct stat* st) {
  if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
    return -errno;
  }
  return 0;
}

class HostInode;

// PageCache (hostfs.h) of one HostInode, which owns it. Lock order: mu_
// before the inode's descriptor lock (it reads and writes the host file
// under mu_); never held while calling into mm.
class HostPageCache final : public PageCache {
 public:
  HostPageCache(HostInode* inode, mm::MemoryFile* mf) : inode_(inode), mf_(mf) {}
  ~HostPageCache() override { FreeAll(); }

  void BeginMapping(bool may_write) override;
  void EndMapping() override;
  int GetPage(uint64_t index, uint64_t* memfile_off, bool ref) override;
  int Writeback() override;
  // read() of the host file `fd` at `off`, with the cached pages' bytes
  // over what the host gave, so that it shows what mappings wrote.
  // write(): to the host, and copied into the cached pages. Both are one
  // step under mu_ against a mapping's end, which writes the pages back
  // and frees them: a read between the two could get neither.
  int64_t Read(int fd, void* buf, uint64_t n, uint64_t off);
  int64_t Write(int fd, const void* buf, uint64_t n, uint64_t off);
  // The file was cut to `size` or a range was punched: the cached bytes
  // there read as zeros (mapped pages stay mapped, as tmpfs's do).
  void Zero(uint64_t off, uint64_t len);

 private:
  int WritebackLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls f(cached bytes, their offset from `off`, length) for each
  // cached piece of [off, end). `host_too`: f changes the bytes as the
  // host file's were changed, so a page that was clean stays clean (its
  // hash is taken again); a page with mapped changes not yet written back
  // keeps its old hash, and is written back whole.
  template <typename F>
  void ForEachCachedLocked(uint64_t off, uint64_t end, bool host_too, F f)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeAll();
  // A cached page: where it is in the memory file, and a hash of its
  // bytes as the host file had them when it was last read or written
  // back. Writeback writes only the pages whose bytes hash differently
  // now: the ones a mapping changed. (A hash, not a copy: a second copy
  // of every page would double what the cache costs; two different pages
  // of the same 64-bit hash are the one case a change is missed.)
  struct Page {
    uint64_t off;
    uint64_t hash;
  };
  uint64_t HashOf(uint64_t off) {
    return absl::HashOf(std::string_view(
        reinterpret_cast<const char*>(mf_->Internal(off)), mm::kPageSize));
  }

  HostInode* const inode_;
  mm::MemoryFile* const mf_;
  absl::Mutex mu_;
  std::map<uint64_t, Page> pages_ ABSL_GUARDED_BY(mu_);  // by page index
  uint64_t mappings_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether a mapping that may write existed since the pages were last
  // freed: else there is nothing to write back (nor an mtime to change).
  bool may_be_written_ ABSL_GUARDED_BY(mu_) = false;
};

class HostInode : public Inode {
 public:
  // `st` is fstat of `fd`. `parent` and `name` are how the file was found
  // (null and "" for the root); they are only used to reopen it for reading.
  HostInode(UniqueFd fd, const struct stat& st, uint64_t dev, bool writable,
            std::shared_ptr<HostInode> parent, std::string name)
      : fd_(std::move(fd)),
        dev_(dev),
        writable_(writable),
        type_(st.st_mode & S_IFMT),
        host_dev_(st.st_dev),
        host_ino_(st.st_ino),
        root_host_dev_(parent != nullptr ? parent->root_host_dev_ : st.st_dev),
        fs_root_(parent != nullptr ? parent->fs_root_ : this),
        // Another host filesystem mounted inside the rootfs (/proc, /sys,
        // /dev, /run of the host...) is the host kernel's, not the
        // sandbox's: it shows as an empty directory, as an unmounted
        // mountpoint would.
        hidden_(st.st_dev != root_host_dev_),
        parent_(std::move(parent)),
        name_(std::move(name)),
        fifo_(type_ == S_IFIFO && !writable ? std::make_unique<Fifo>()
                                            : nullptr) {}

  uint32_t Type() const override { return type_; }

  int GetAttr(Attr* out) override {
    struct stat st;
    if (int r = StatFd(fd_.get(), &st); r < 0) return r;
    *out = Attr{};
    out->dev = dev_;  // not st.st_dev: the host's numbering stays hidden
    out->ino = st.st_ino;
    out->mode = st.st_mode;
    out->nlink = static_cast<uint32_t>(st.st_nlink);
    out->uid = st.st_uid;
    out->gid = st.st_gid;
    if (writable_) fs_root_->OwnerOf(st, &out->uid, &out->gid);
    out->rdev = st.st_rdev;
    out->size = static_cast<uint64_t>(st.st_size);
    out->blocks = static_cast<uint64_t>(st.st_blocks);
    out->blksize = static_cast<uint32_t>(st.st_blksize);
    out->atime = st.st_atim;
    out->mtime = st.st_mtim;
    out->ctime = st.st_ctim;
    return 0;
  }

  int SetAttr(const SetAttrRequest& req) override {
    if (!writable_) return -EROFS;
    if (req.set_uid || req.set_gid) {
      // The sandbox's owners are its own, as a user namespace maps them:
      // the Sentry is one host uid, so the host file keeps its owner and
      // the sandbox's chown is recorded here (README.md, "Owners in a
      // writable bind mount"); the syscall layer checked the rules.
      struct stat st;
      if (int r = StatFd(fd_.get(), &st); r < 0) return r;
      fs_root_->SetOwner(st, req.set_uid ? req.uid : static_cast<uid_t>(-1),
                         req.set_gid ? req.gid : static_cast<gid_t>(-1));
    }
    if (!req.set_mode && !req.set_size && !req.set_atime && !req.set_mtime) {
      return 0;
    }
    if (type_ != S_IFREG && type_ != S_IFDIR) return -EPERM;
    // fchmod, ftruncate and futimens need a descriptor that is not O_PATH.
    int fd = req.set_size ? WriteFd() : IoFd();
    if (fd < 0) return fd;
    if (req.set_mode && fchmod(fd, HostMode(type_, req.mode)) < 0) return -errno;
    if (req.set_size) {
      if (type_ != S_IFREG) return -EISDIR;
      if (RetryEintr([&] { return ftruncate(fd, static_cast<off_t>(req.size)); }) < 0) {
        return -errno;
      }
      if (HostPageCache* c = page_cache()) c->Zero(req.size, UINT64_MAX - req.size);
    }
    if (req.set_atime || req.set_mtime) {
      struct timespec ts[2];
      ts[0] = req.set_atime ? req.atime : timespec{0, UTIME_OMIT};
      ts[1] = req.set_mtime ? req.mtime : timespec{0, UTIME_OMIT};
      if (futimens(fd, ts) < 0) return -errno;
    }
    return 0;
  }

  int StatFs(struct statfs* out) override {
    if (fstatfs(fd_.get(), out) < 0) return -errno;
    // The fsid identifies the host filesystem; the sandbox has no use for
    // it. ST_RDONLY because that is what this filesystem is, whatever the
    // host mount allows.
    std::memset(&out->f_fsid, 0, sizeof(out->f_fsid));
    if (!writable_) out->f_flags |= ST_RDONLY;
    return 0;
  }

  int Lookup(const std::string& name, std::shared_ptr<Inode>* out) override {
    if (type_ != S_IFDIR) return -ENOTDIR;
    if (hidden_) return -ENOENT;
    // The VFS guarantees a single component. Checked again because
    // containment rests on it: "..", or a '/' (or a NUL that would cut the
    // C string short), would let openat resolve more than one name.
    if (name.empty() || name == "." || name == ".." ||
        name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos) {
      return -EINVAL;
    }

    // Fast path: the cached inode is still what `name` names on the host.
    // An fstatat of one component with AT_SYMLINK_NOFOLLOW follows nothing.
    // (st_ino cannot have been reused: the cached inode's O_PATH fd keeps
    // its host file alive.)
    struct stat st;
    if (fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      return -errno;
    }
    if (std::shared_ptr<HostInode> cached = Cached(name, st)) {
      *out = std::move(cached);
      return 0;
    }

    UniqueFd fd(RetryEintr([&] {
      return openat(fd_.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }));
    if (!fd.valid()) return -errno;
    return Adopt(name, std::move(fd), out);
  }

  // Makes (or finds in the cache) the child `name` whose O_PATH fd is `fd`.
  int Adopt(const std::string& name, UniqueFd fd, std::shared_ptr<Inode>* out)
      ABSL_LOCKS_EXCLUDED(mu_) {
    struct stat st;
    // The name may have changed between fstatat and openat; what the fd
    // refers to is what counts.
    if (int r = StatFd(fd.get(), &st); r < 0) return r;
    // A file bind-mounted from another host filesystem is not part of
    // this one (directories are kept, empty: see hidden_).
    if (st.st_dev != root_host_dev_ && !S_ISDIR(st.st_mode)) return -ENOENT;

    absl::MutexLock lock(&mu_);
    auto it = children_.find(name);
    if (it != children_.end()) {
      // Another thread may have opened the same file meanwhile: keep one
      // Inode per host file so that identity checks in the VFS hold.
      if (std::shared_ptr<HostInode> other = it->second.lock();
          other != nullptr && other->IsHostFile(st)) {
        *out = std::move(other);
        return 0;
      }
    }
    auto child = std::make_shared<HostInode>(
        std::move(fd), st, dev_, writable_,
        std::static_pointer_cast<HostInode>(shared_from_this()), name);
    children_[name] = child;
    SweepLocked();
    *out = std::move(child);
    return 0;
  }

  int ReadDir(std::vector<DirEntry>* out) override {
    if (type_ != S_IFDIR) return -ENOTDIR;
    if (hidden_) {
      out->clear();
      return 0;
    }
    // An O_PATH fd cannot be read; "." relative to it opens the same
    // directory (not a name lookup in the parent, so no race with renames).
    UniqueFd dir(RetryEintr([&] {
      return openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }));
    if (!dir.valid()) return -errno;

    std::vector<DirEntry> entries;
    // On the heap: task threads' stacks are small. (operator new's
    // alignment suffices for dirent64.)
    std::vector<char> buf(32768);
    for (;;) {
      long n = RetryEintr([&] {
        return syscall(SYS_getdents64, dir.get(), buf.data(), buf.size());
      });
      if (n < 0) return -errno;
      if (n == 0) break;
      for (long pos = 0; pos < n;) {
        auto* d = reinterpret_cast<struct dirent64*>(buf.data() + pos);
        pos += d->d_reclen;
        if (std::strcmp(d->d_name, ".") == 0 ||
            std::strcmp(d->d_name, "..") == 0) {
          continue;
        }
        DirEntry e;
        e.name = d->d_name;
        e.ino = d->d_ino;
        e.type = d->d_type;
        if (e.type == DT_UNKNOWN) {
          // Some host filesystems do not fill d_type; ask (and leave it
          // unknown if the entry vanished since, as Linux would).
          struct stat st;
          if (fstatat(dir.get(), d->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            e.type = IFTODT(st.st_mode);
          }
        }
        entries.push_back(std::move(e));
      }
    }
    // Host order depends on the host filesystem's hashing; sorting makes
    // listings (and tests, and snapshots) deterministic.
    std::sort(entries.begin(), entries.end(),
              [](const DirEntry& a, const DirEntry& b) {
                return a.name < b.name;
              });
    *out = std::move(entries);
    return 0;
  }

  // Mutations. A read-only hostfs (the rootfs, under the overlay that
  // takes its writes; a read-only bind mount) refuses them with EROFS; a
  // writable one (a bind mount asked rw) makes them on the host, each one
  // host call relative to the directory's own fd with a single name. New
  // files belong to the Sentry's host uid and gid (as runsc's gofer makes
  // them): the request's owner is the sandbox's, which the host does not
  // know. Directory operations on a non-directory fail with ENOTDIR, as
  // the interface promises.
  int Create(const std::string& name, const CreateRequest& req,
             std::shared_ptr<Inode>* out) override {
    if (type_ != S_IFDIR) return -ENOTDIR;
    if (!writable_) return -EROFS;
    if (int r = CheckName(name); r < 0) return r;
    const mode_t perm = HostMode(req.type, req.mode);
    int r = 0;
    // A new regular file keeps the descriptor it was made with for its
    // I/O (O_RDWR whatever its mode, as open(2) gives the creator): a
    // program that unlinks what it made still reads and writes it.
    UniqueFd io;
    switch (req.type) {
      case S_IFREG: {
        io = UniqueFd(RetryEintr([&] {
          return openat(fd_.get(), name.c_str(),
                        O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC |
                            O_NOCTTY,
                        perm);
        }));
        if (!io.valid()) r = -errno;
        break;
      }
      case S_IFDIR:
        if (mkdirat(fd_.get(), name.c_str(), perm) < 0) {
          r = -errno;
          break;
        }
        // Kept open, for the mode below.
        io = UniqueFd(RetryEintr([&] {
          return openat(fd_.get(), name.c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }));
        if (!io.valid()) r = -errno;
        break;
      case S_IFLNK:
        // The target is stored raw; the VFS resolves it inside the sandbox.
        if (symlinkat(req.target.c_str(), fd_.get(), name.c_str()) < 0) {
          r = -errno;
        }
        break;
      case S_IFIFO:
      case S_IFSOCK:
        // Host fifos and sockets are not opened for I/O (Open: ENXIO),
        // but the node itself is an ordinary name on the host.
        if (mknodat(fd_.get(), name.c_str(), req.type | perm, 0) < 0) {
          r = -errno;
        }
        break;
      default:
        // Device nodes on the host would be the host's devices.
        return -EPERM;
    }
    if (r < 0) return r;
    UniqueFd fd(RetryEintr([&] {
      return openat(fd_.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }));
    if (!fd.valid()) return -errno;
    if (int a = Adopt(name, std::move(fd), out); a < 0) return a;
    if (io.valid()) {
      struct stat st;
      if (fstat(io.get(), &st) < 0) return -errno;
      // The mode asked for, exactly: the host applied the Sentry's own
      // umask (the sandbox's was applied to the request already). A
      // directory keeps the set-group-ID bit it inherited on the host, as
      // mkdir(2) gives it. (Fifos and sockets keep the host's umask: they
      // have no descriptor to fchmod without following a name again.)
      const mode_t want =
          req.type == S_IFDIR ? (perm & 01777) | (st.st_mode & S_ISGID) : perm;
      if ((st.st_mode & 07777) != want && fchmod(io.get(), want) < 0) {
        return -errno;
      }
      auto* child = static_cast<HostInode*>(out->get());
      // The name may already lead elsewhere (the host raced us): then the
      // descriptor is not this inode's.
      if (req.type == S_IFREG && child->IsHostFile(st)) {
        child->SetIoFd(std::move(io));
      }
    }
    return 0;
  }
  int Link(const std::string& name,
           const std::shared_ptr<Inode>& target) override {
    if (type_ != S_IFDIR) return -ENOTDIR;
    if (!writable_) return -EROFS;
    if (int r = CheckName(name); r < 0) return r;
    auto* t = dynamic_cast<HostInode*>(target.get());
    if (t == nullptr || t->fs_root_ != fs_root_) return -EXDEV;
    // linkat of the target by its name in its directory (AT_EMPTY_PATH
    // would need CAP_DAC_READ_SEARCH on the host), then a check that the
    // new name is the file meant: if the old name was replaced on the
    // host meanwhile, the link is undone.
    std::shared_ptr<HostInode> tparent;
    std::string tname;
    t->Name(&tparent, &tname);
    if (tparent == nullptr) return -EXDEV;  // a single-file bind mount
    if (linkat(tparent->fd_.get(), tname.c_str(), fd_.get(), name.c_str(), 0) <
        0) {
      return -errno;
    }
    struct stat st;
    if (fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !t->IsHostFile(st)) {
      unlinkat(fd_.get(), name.c_str(), 0);
      return -ESTALE;
    }
    return 0;
  }
  // The root's record of owners the sandbox gave files by chown, by host
  // identity (device, inode); kept while the host file has a link.
  void OwnerOf(const struct stat& st, uint32_t* uid, uint32_t* gid) const {
    absl::MutexLock l(&owners_mu_);
    auto it = owners_.find({st.st_dev, st.st_ino});
    if (it == owners_.end()) return;
    *uid = it->second.first;
    *gid = it->second.second;
  }
  void SetOwner(const struct stat& st, uid_t uid, gid_t gid) const {
    absl::MutexLock l(&owners_mu_);
    auto [it, fresh] =
        owners_.try_emplace({st.st_dev, st.st_ino}, st.st_uid, st.st_gid);
    if (uid != static_cast<uid_t>(-1)) it->second.first = uid;
    if (gid != static_cast<gid_t>(-1)) it->second.second = gid;
  }
  std::vector<OwnerRecord> Owners() const {
    absl::MutexLock l(&owners_mu_);
    std::vector<OwnerRecord> out;
    out.reserve(owners_.size());
    for (const auto& [key, owner] : owners_) {
      out.push_back({static_cast<uint64_t>(key.first),
                     static_cast<uint64_t>(key.second), owner.first,
                     owner.second});
    }
    std::sort(out.begin(), out.end(),
              [](const OwnerRecord& a, const OwnerRecord& b) {
                return std::tie(a.dev, a.ino) < std::tie(b.dev, b.ino);
              });
    return out;
  }
  void AddOwners(const std::vector<OwnerRecord>& records) const {
    absl::MutexLock l(&owners_mu_);
    for (const OwnerRecord& r : records) {
      owners_[{static_cast<dev_t>(r.dev), static_cast<ino_t>(r.ino)}] = {
          r.uid, r.gid};
    }
  }
  // A host file's last link is gone: its inode number may be reused.
  void ForgetOwner(const struct stat& st) const {
    if (st.st_nlink > 1 && !S_ISDIR(st.st_mode)) return;
    absl::MutexLock l(&owners_mu_);
    owners_.erase({st.st_dev, st.st_ino});
  }

  int Unlink(const std::string& name, bool dir) override {
    if (type_ != S_IFDIR) return -ENOTDIR;
    if (!writable_) return -EROFS;
    if (int r = CheckName(name); r < 0) return r;
    struct stat gone;
    const bool known =
        fstatat(fd_.get(), name.c_str(), &gone, AT_SYMLINK_NOFOLLOW) == 0;
    if (unlinkat(fd_.get(), name.c_str(), dir ? AT_REMOVEDIR : 0) < 0) {
      return -errno;
    }
    if (known) fs_root_->ForgetOwner(gone);
    absl::MutexLock lock(&mu_);
    children_.erase(name);
    return 0;
  }
  int Rename(const std::string& old_name, Inode& new_dir,
             const std::string& new_name, unsigned flags) override {
    if (type_ != S_IFDIR) return -ENOTDIR;
    if (!writable_) return -EROFS;
    auto* nd = dynamic_cast<HostInode*>(&new_dir);
    if (nd == nullptr || nd->fs_root_ != fs_root_) return -EXDEV;
    if (nd->type_ != S_IFDIR) return -ENOTDIR;
    if (int r = CheckName(old_name); r < 0) return r;
    if (int r = CheckName(new_name); r < 0) return r;
    if (syscall(SYS_renameat2, fd_.get(), old_name.c_str(), nd->fd_.get(),
                new_name.c_str(), flags) < 0) {
      return -errno;
    }
    // The cached inodes follow their names: a moved file reopens for I/O
    // by its new name.
    std::shared_ptr<HostInode> moved = TakeChild(old_name);
    std::shared_ptr<HostInode> other = nd->TakeChild(new_name);
    auto self = std::static_pointer_cast<HostInode>(shared_from_this());
    auto target = std::static_pointer_cast<HostInode>(nd->shared_from_this());
    if (moved != nullptr) {
      moved->SetName(target, new_name);
      nd->PutChild(new_name, moved);
    }
    if (other != nullptr && (flags & RENAME_EXCHANGE)) {
      other->SetName(self, old_name);
      PutChild(old_name, other);
    }
    return 0;
  }
  int64_t Write(const void* buf, uint64_t n, uint64_t off) override {
    if (type_ == S_IFDIR) return -EISDIR;
    if (!writable_) return -EROFS;
    if (type_ != S_IFREG) return -EINVAL;
    if (off > static_cast<uint64_t>(INT64_MAX)) return -EINVAL;
    int fd = WriteFd();
    if (fd < 0) return fd;
    n = std::min<uint64_t>(n, SSIZE_MAX);
    if (HostPageCache* c = page_cache()) return c->Write(fd, buf, n, off);
    ssize_t r = RetryEintr(
        [&] { return pwrite(fd, buf, n, static_cast<off_t>(off)); });
    return r < 0 ? -errno : r;
  }
  int64_t Allocate(int mode, uint64_t off, uint64_t len) override {
    if (!writable_) return -EROFS;
    if (type_ != S_IFREG) return -ENODEV;
    int fd = WriteFd();
    if (fd < 0) return fd;
    if (RetryEintr([&] {
          return fallocate(fd, mode, static_cast<off_t>(off),
                           static_cast<off_t>(len));
        }) < 0) {
      return -errno;
    }
    if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
      if (HostPageCache* c = page_cache()) c->Zero(off, len);
    }
    return 0;
  }
  int Sync() override {
    if (type_ != S_IFREG || !writable_) return 0;
    if (HostPageCache* c = page_cache()) {
      if (int r = c->Writeback(); r < 0) return r;
    }
    int fd = WriteFd();
    if (fd < 0) return 0;  // nothing was written through this inode
    return fsync(fd) < 0 ? -errno : 0;
  }

  // close() writes what shared mappings wrote back to the host too.
  void DescriptionClosed() override {
    if (HostPageCache* c = page_cache()) c->Writeback();
  }

  int Readlink(std::string* target) override {
    if (type_ != S_IFLNK) return -EINVAL;
    // readlinkat with "" reads the link the O_PATH|O_NOFOLLOW fd refers to.
    // The target is returned raw; resolving it is the VFS's business.
    std::string buf(PATH_MAX, '\0');
    for (;;) {
      ssize_t n = readlinkat(fd_.get(), "", buf.data(), buf.size());
      if (n < 0) return -errno;
      if (static_cast<size_t>(n) < buf.size()) {
        buf.resize(static_cast<size_t>(n));
        *target = std::move(buf);
        return 0;
      }
      // Possibly truncated (some filesystems allow targets past PATH_MAX).
      buf.resize(buf.size() * 2);
    }
  }

  int64_t Read(void* buf, uint64_t n, uint64_t off) override {
    if (type_ == S_IFDIR) return -EISDIR;
    if (type_ != S_IFREG) return -EINVAL;
    if (off > static_cast<uint64_t>(INT64_MAX)) return -EINVAL;
    int fd = ReadFd();
    if (fd < 0) return fd;
    n = std::min<uint64_t>(n, SSIZE_MAX);
    if (HostPageCache* c = page_cache()) return c->Read(fd, buf, n, off);
    ssize_t r = RetryEintr(
        [&] { return pread(fd, buf, n, static_cast<off_t>(off)); });
    return r < 0 ? -errno : r;
  }

  // The page cache of shared mappings (made at the first, kept with the
  // inode); null until then.
  HostPageCache* page_cache() {
    absl::MutexLock l(&cache_mu_);
    return cache_.get();
  }
  std::shared_ptr<PageCache> MakePageCache(mm::MemoryFile* mf);
  // For HostPageCache: the host file's size, and its descriptors.
  int HostSize(uint64_t* size) {
    struct stat st;
    if (int r = StatFd(fd_.get(), &st); r < 0) return r;
    *size = static_cast<uint64_t>(st.st_size);
    return 0;
  }
  int HostReadFd() { return ReadFd(); }
  int HostWriteFd() { return WriteFd(); }

  // Devices, fifos and sockets found on the host are inodes of their type
  // (stat and readdir show them) but cannot be opened for I/O yet: the
  // sandbox's /dev is devfs, and host fifos/sockets would be channels out
  // of the sandbox. O_PATH opens need no I/O and take the generic path.
  //
  // A regular file's host descriptors are opened with the description,
  // not at its first read or write: a failure (the file replaced on the
  // host: ESTALE) is open's, and a file unlinked while open stays
  // readable and writable through them, as on Linux.
  int Open(int flags, std::shared_ptr<File>* out) override {
    if ((flags & O_PATH) == 0 && type_ != S_IFREG && type_ != S_IFDIR &&
        type_ != S_IFLNK) {
      return -ENXIO;
    }
    if ((flags & O_PATH) == 0 && type_ == S_IFREG) {
      const int acc = flags & O_ACCMODE;
      if (acc != O_WRONLY) {
        if (int r = ReadFd(); r < 0) return r;
      }
      if (acc != O_RDONLY && writable_) {
        if (int r = WriteFd(); r < 0) return r;
      }
    }
    return Inode::Open(flags, out);
  }

  bool ReadOnly() const override { return !writable_; }

  // A fifo of the rootfs (read-only, its label "") is the sandbox's own:
  // the image's, which nothing outside opens, so a pipe in the Sentry
  // shared by its openers is what Linux would give them. A bind mount's
  // fifo is the host's, and a channel to the host: not opened (ENXIO).
  // (The label is set once, before any lookup.)
  Fifo* GetFifo() override {
    return fs_root_->label_.empty() ? fifo_.get() : nullptr;
  }

  const HostInode* fs_root() const { return fs_root_; }

  // The path of this inode from its filesystem's root ("/" for the root)
  // and that root's label; false when a name on the way was removed.
  bool PathFromRoot(std::string* label, std::string* path) {
    std::vector<std::string> names;
    std::shared_ptr<HostInode> cur =
        std::static_pointer_cast<HostInode>(shared_from_this());
    for (;;) {
      std::shared_ptr<HostInode> parent;
      std::string name;
      cur->Name(&parent, &name);
      if (parent == nullptr) break;
      // Still the file that name leads to?
      struct stat st;
      if (fstatat(parent->fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) <
              0 ||
          !cur->IsHostFile(st)) {
        return false;
      }
      names.push_back(std::move(name));
      cur = std::move(parent);
    }
    *label = cur->label_;
    path->clear();
    for (auto it = names.rbegin(); it != names.rend(); ++it) {
      absl::StrAppend(path, "/", *it);
    }
    if (path->empty()) *path = "/";
    return true;
  }

  void set_label(std::string label) { label_ = std::move(label); }

  // `fd` is this regular file opened for reading (and writing when the
  // filesystem is writable): the root of a single-file bind mount, or a
  // file just made. Its I/O uses it (where no descriptor is kept yet).
  void SetIoFd(UniqueFd fd) ABSL_LOCKS_EXCLUDED(read_mu_) {
    absl::MutexLock lock(&read_mu_);
    if (writable_ && !write_fd_.valid()) {
      write_fd_ = UniqueFd(fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
    }
    if (!read_fd_.valid()) read_fd_ = std::move(fd);
  }

 private:
  static int CheckName(const std::string& name) {
    // Single components only (the VFS guarantees it; containment rests
    // on it, so it is checked again here).
    if (name.empty() || name == "." || name == ".." ||
        name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos) {
      return -EINVAL;
    }
    return 0;
  }

  void Name(std::shared_ptr<HostInode>* parent, std::string* name)
      ABSL_LOCKS_EXCLUDED(name_mu_) {
    absl::MutexLock lock(&name_mu_);
    *parent = parent_;
    *name = name_;
  }
  void SetName(std::shared_ptr<HostInode> parent, std::string name)
      ABSL_LOCKS_EXCLUDED(name_mu_) {
    absl::MutexLock lock(&name_mu_);
    parent_ = std::move(parent);
    name_ = std::move(name);
  }
  std::shared_ptr<HostInode> TakeChild(const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = children_.find(name);
    if (it == children_.end()) return nullptr;
    std::shared_ptr<HostInode> c = it->second.lock();
    children_.erase(it);
    return c;
  }
  void PutChild(const std::string& name, std::shared_ptr<HostInode> c)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    children_[name] = c;
  }

  // Whether `st` describes the host file this inode holds.
  bool IsHostFile(const struct stat& st) const {
    return st.st_dev == host_dev_ && st.st_ino == host_ino_;
  }

  // The live cached child named `name`, if it is still the host file `st`.
  std::shared_ptr<HostInode> Cached(const std::string& name,
                                    const struct stat& st)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = children_.find(name);
    if (it == children_.end()) return nullptr;
    std::shared_ptr<HostInode> child = it->second.lock();
    if (child == nullptr || !child->IsHostFile(st)) {
      return nullptr;
    }
    return child;
  }

  // Drops entries whose inodes died, once the map has doubled since the
  // last sweep: amortized O(1) per lookup, and no work in ~HostInode
  // (which may run with any lock held).
  void SweepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (children_.size() < sweep_at_) return;
    for (auto it = children_.begin(); it != children_.end();) {
      auto cur = it++;
      if (cur->second.expired()) children_.erase(cur);
    }
    sweep_at_ = std::max<size_t>(kMinSweep, 2 * children_.size());
  }

  // A readable fd of this regular file, opened on first use and kept.
  // Returns the fd or -errno.
  int ReadFd() ABSL_LOCKS_EXCLUDED(read_mu_) {
    absl::MutexLock lock(&read_mu_);
    if (read_fd_.valid()) return read_fd_.get();
    UniqueFd fd;
    if (int r = Reopen(O_RDONLY, &fd); r < 0) return r;
    read_fd_ = std::move(fd);
    return read_fd_.get();
  }

  // A writable fd of this regular file (writable hostfs only), kept.
  int WriteFd() ABSL_LOCKS_EXCLUDED(read_mu_) {
    absl::MutexLock lock(&read_mu_);
    if (write_fd_.valid()) return write_fd_.get();
    UniqueFd fd;
    if (int r = Reopen(O_WRONLY, &fd); r < 0) return r;
    write_fd_ = std::move(fd);
    return write_fd_.get();
  }

  // A descriptor that is not O_PATH, for fchmod and futimens: a
  // directory's own "." or a regular file's read (else write) fd.
  int IoFd() ABSL_LOCKS_EXCLUDED(read_mu_) {
    if (type_ == S_IFDIR) {
      absl::MutexLock lock(&read_mu_);
      if (!read_fd_.valid()) {
        read_fd_ = UniqueFd(RetryEintr([&] {
          return openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }));
        if (!read_fd_.valid()) return -errno;
      }
      return read_fd_.get();
    }
    int fd = ReadFd();
    return fd >= 0 ? fd : WriteFd();
  }

  // Opens this regular file again with `mode`. An O_PATH fd cannot be
  // read and cannot be reopened without /proc, so the file is opened
  // again by name in its parent; fstat proves the name still leads to
  // the same file, else the inode is stale (the host replaced the file
  // after our lookup; a new lookup finds the new one).
  int Reopen(int mode, UniqueFd* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_) {
    std::shared_ptr<HostInode> parent;
    std::string name;
    Name(&parent, &name);
    if (parent == nullptr) return -EISDIR;  // only the root has no parent
    // O_NONBLOCK and O_NOCTTY: if the name now leads to a fifo or a tty,
    // the open must neither hang nor take a controlling terminal before
    // the check below rejects it.
    UniqueFd fd(RetryEintr([&] {
      return openat(parent->fd_.get(), name.c_str(),
                    mode | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    }));
    if (!fd.valid()) {
      // Gone, or now a symlink (O_NOFOLLOW): the file we had is no longer
      // reachable by its name.
      return (errno == ENOENT || errno == ELOOP || errno == ENOTDIR)
                 ? -ESTALE
                 : -errno;
    }
    struct stat st;
    if (fstat(fd.get(), &st) < 0) return -errno;
    if (!IsHostFile(st)) return -ESTALE;
    // Regular files only: O_NONBLOCK means nothing for them, and writes
    // must not see it.
    if (fcntl(fd.get(), F_SETFL, mode) < 0) return -errno;
    *out = std::move(fd);
    return 0;
  }

  static constexpr size_t kMinSweep = 64;

  const UniqueFd fd_;  // O_PATH | O_NOFOLLOW
  const uint64_t dev_;
  const bool writable_;
  const uint32_t type_;
  // Identity of the host file, to tell whether a name still leads to it.
  const dev_t host_dev_;
  const ino_t host_ino_;
  const dev_t root_host_dev_;  // the rootfs's own host filesystem
  // This filesystem's root (kept alive by the parent chain): renames and
  // links stay within one hostfs, even between two mounts of one host
  // filesystem.
  const HostInode* const fs_root_;
  const bool hidden_;
  // How the file was found (null and "" for the root): used to reopen it
  // for I/O; a rename in a writable hostfs moves it.
  absl::Mutex name_mu_ ABSL_ACQUIRED_AFTER(read_mu_);
  std::shared_ptr<HostInode> parent_ ABSL_GUARDED_BY(name_mu_);
  std::string name_ ABSL_GUARDED_BY(name_mu_);
  // The root's: which mount this filesystem is (a bind mount's target),
  // what a checkpoint records a file of it by. "" for the rootfs.
  std::string label_;
  // The root's: owners the sandbox gave files by chown (OwnerOf).
  mutable absl::Mutex owners_mu_;
  mutable absl::flat_hash_map<std::pair<dev_t, ino_t>, std::pair<uid_t, gid_t>>
      owners_ ABSL_GUARDED_BY(owners_mu_);

  absl::Mutex mu_;
  // Children by name. weak_ptr: the cache gives the same Inode for the same
  // host file while someone holds it, and does not keep it alive.
  absl::flat_hash_map<std::string, std::weak_ptr<HostInode>> children_
      ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = kMinSweep;

  absl::Mutex cache_mu_;
  std::shared_ptr<HostPageCache> cache_ ABSL_GUARDED_BY(cache_mu_);

  absl::Mutex read_mu_;
  UniqueFd read_fd_ ABSL_GUARDED_BY(read_mu_);
  UniqueFd write_fd_ ABSL_GUARDED_BY(read_mu_);
  const std::unique_ptr<Fifo> fifo_;  // GetFifo
};

// Periodic writeback: what mappings write reaches the host files within
// kWritebackInterval, without msync, fsync, close or munmap (Linux's
// flusher threads do the same for its page cache; dirty pages older than
// 30 s by default). One thread per Sentry, started with the first page
// cache; it holds the inodes weakly and writes back only changed pages.
constexpr absl::Duration kWritebackInterval = absl::Seconds(5);

class Flusher {
 public:
  // Never destroyed: its thread runs until the Sentry exits.
  static Flusher& Get() {
    static Flusher* f = new Flusher;
    return *f;
  }
  void Add(const std::shared_ptr<HostInode>& inode) {
    absl::MutexLock l(&mu_);
    inodes_.erase(std::remove_if(inodes_.begin(), inodes_.end(),
                                 [](const auto& w) { return w.expired(); }),
                  inodes_.end());
    inodes_.push_back(inode);
    if (started_) return;
    // Without the thread, writeback still happens at msync, fsync, close,
    // munmap and exit.
    auto t = StartThread("the page-cache writeback thread", [this] {
      while (true) {
        absl::SleepFor(kWritebackInterval);
        WritebackAll();
      }
    });
    if (t.ok()) {
      t->detach();
      started_ = true;
    }
  }
  void WritebackAll() {
    std::vector<std::shared_ptr<HostInode>> live;
    {
      absl::MutexLock l(&mu_);
      for (const auto& w : inodes_) {
        if (auto i = w.lock()) live.push_back(std::move(i));
      }
    }
    for (const auto& i : live) {
      if (HostPageCache* c = i->page_cache()) c->Writeback();
    }
  }

 private:
  absl::Mutex mu_;
  std::vector<std::weak_ptr<HostInode>> inodes_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

std::shared_ptr<PageCache> HostInode::MakePageCache(mm::MemoryFile* mf) {
  if (type_ != S_IFREG || !writable_) return nullptr;
  std::shared_ptr<HostPageCache> c;
  {
    absl::MutexLock l(&cache_mu_);
    if (cache_ == nullptr) {
      cache_ = std::make_shared<HostPageCache>(this, mf);
      Flusher::Get().Add(std::static_pointer_cast<HostInode>(shared_from_this()));
    }
    c = cache_;
  }
  return c;
}

void HostPageCache::BeginMapping(bool may_write) {
  absl::MutexLock l(&mu_);
  mappings_++;
  if (may_write) may_be_written_ = true;
}

void HostPageCache::EndMapping() {
  absl::MutexLock l(&mu_);
  WritebackLocked();
  if (--mappings_ > 0) return;
  // A page still mapped (a PMA's reference) is freed when it is unmapped.
  for (const auto& [index, page] : pages_) mf_->DecRef(page.off, mm::kPageSize);
  pages_.clear();
  may_be_written_ = false;
}

void HostPageCache::FreeAll() {
  absl::MutexLock l(&mu_);
  WritebackLocked();
  for (const auto& [index, page] : pages_) mf_->DecRef(page.off, mm::kPageSize);
  pages_.clear();
}

int HostPageCache::GetPage(uint64_t index, uint64_t* memfile_off, bool ref) {
  absl::MutexLock l(&mu_);
  auto it = pages_.find(index);
  if (it != pages_.end()) {
    if (ref) mf_->IncRef(it->second.off, mm::kPageSize);
    *memfile_off = it->second.off;
    return 0;
  }
  auto off = mf_->Allocate(mm::kPageSize);
  if (!off.ok()) return -ENOMEM;
  uint8_t* page = mf_->Internal(*off);
  int fd = inode_->HostReadFd();
  if (fd < 0) {
    mf_->Free(*off, mm::kPageSize);
    return fd;
  }
  uint64_t done = 0;
  while (done < mm::kPageSize) {
    ssize_t r = RetryEintr([&] {
      return pread(fd, page + done, mm::kPageSize - done,
                   static_cast<off_t>(index * mm::kPageSize + done));
    });
    if (r < 0) {
      int err = errno;
      mf_->Free(*off, mm::kPageSize);
      return -err;
    }
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
  }
  std::memset(page + done, 0, mm::kPageSize - done);  // past EOF
  pages_.emplace(index, Page{*off, HashOf(*off)});
  if (ref) mf_->IncRef(*off, mm::kPageSize);
  *memfile_off = *off;
  return 0;
}

int HostPageCache::Writeback() {
  absl::MutexLock l(&mu_);
  return WritebackLocked();
}

int HostPageCache::WritebackLocked() {
  if (pages_.empty() || !may_be_written_) return 0;
  uint64_t size;
  if (int r = inode_->HostSize(&size); r < 0) return r;
  int fd = inode_->HostWriteFd();
  if (fd < 0) return fd;
  int err = 0;
  // Mapped writes leave no trace the Sentry sees: each page's bytes are
  // hashed again, and the changed ones written. The hash is taken before
  // the write, so a store racing with it is seen by the next writeback.
  // Only up to the file's size: a mapping never grows the file.
  for (auto& [index, page] : pages_) {
    const uint64_t at = index * mm::kPageSize;
    if (at >= size) break;
    const uint64_t hash = HashOf(page.off);
    if (hash == page.hash) continue;
    const uint64_t n = std::min<uint64_t>(mm::kPageSize, size - at);
    const uint8_t* bytes = mf_->Internal(page.off);
    uint64_t done = 0;
    while (done < n) {
      ssize_t r = RetryEintr([&] {
        return pwrite(fd, bytes + done, n - done, static_cast<off_t>(at + done));
      });
      if (r <= 0) {
        if (err == 0) err = r < 0 ? -errno : -EIO;
        break;
      }
      done += static_cast<uint64_t>(r);
    }
    if (done == n) page.hash = hash;  // else tried again next time
  }
  return err;
}

template <typename F>
void HostPageCache::ForEachCachedLocked(uint64_t off, uint64_t end,
                                        bool host_too, F f) {
  for (auto it = pages_.lower_bound(off / mm::kPageSize);
       it != pages_.end() && it->first * mm::kPageSize < end; ++it) {
    const uint64_t page_start = it->first * mm::kPageSize;
    const uint64_t from = std::max(off, page_start);
    const uint64_t to = std::min(end, page_start + mm::kPageSize);
    Page& page = it->second;
    const bool clean = host_too && HashOf(page.off) == page.hash;
    f(mf_->Internal(page.off) + (from - page_start), from - off, to - from);
    if (clean) page.hash = HashOf(page.off);
  }
}

int64_t HostPageCache::Read(int fd, void* buf, uint64_t n, uint64_t off) {
  absl::MutexLock l(&mu_);
  ssize_t r = RetryEintr(
      [&] { return pread(fd, buf, n, static_cast<off_t>(off)); });
  if (r < 0) return -errno;
  ForEachCachedLocked(off, off + static_cast<uint64_t>(r), false,
                      [&](uint8_t* page, uint64_t at, uint64_t len) {
                        std::memcpy(static_cast<uint8_t*>(buf) + at, page, len);
                      });
  return r;
}

int64_t HostPageCache::Write(int fd, const void* buf, uint64_t n, uint64_t off) {
  absl::MutexLock l(&mu_);
  ssize_t r = RetryEintr(
      [&] { return pwrite(fd, buf, n, static_cast<off_t>(off)); });
  if (r < 0) return -errno;
  ForEachCachedLocked(off, off + static_cast<uint64_t>(r), true,
                      [&](uint8_t* page, uint64_t at, uint64_t len) {
                        std::memcpy(page, static_cast<const uint8_t*>(buf) + at, len);
                      });
  return r;
}

void HostPageCache::Zero(uint64_t off, uint64_t len) {
  absl::MutexLock l(&mu_);
  const uint64_t end = len > UINT64_MAX - off ? UINT64_MAX : off + len;
  ForEachCachedLocked(off, end, true, [](uint8_t* page, uint64_t, uint64_t n) {
    std::memset(page, 0, n);
  });
}

}  // namespace

absl::StatusOr<std::shared_ptr<Inode>> NewRoot(UniqueFd dir_fd, uint64_t dev) {
  struct stat st;
  if (int r = StatFd(dir_fd.get(), &st); r < 0) {
    return ErrnoStatus("hostfs: stat of the root directory", -r);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        "hostfs: the root is not a directory");
  }
  return std::make_shared<HostInode>(std::move(dir_fd), st, dev,
                                     /*writable=*/false, nullptr, "");
}

absl::StatusOr<std::shared_ptr<Inode>> NewMountRoot(UniqueFd fd, uint64_t dev,
                                                    const MountOptions& o) {
  struct stat st;
  if (int r = StatFd(fd.get(), &st); r < 0) {
    return ErrnoStatus("hostfs: stat of the mount's source", -r);
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        "hostfs: a mount's source must be a directory or a regular file");
  }
  UniqueFd io;
  if (S_ISREG(st.st_mode)) {
    // A single file has no directory to reopen it from: its I/O goes
    // through the descriptor it came as, which must be open for it.
    int fl = fcntl(fd.get(), F_GETFL);
    if (fl < 0 || (fl & O_PATH) != 0 ||
        (o.writable && (fl & O_ACCMODE) != O_RDWR)) {
      return absl::InvalidArgumentError(
          "hostfs: a file mount's descriptor must be open for reading (and "
          "writing when the mount is)");
    }
    io = UniqueFd(fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
    if (!io.valid()) return ErrnoStatus("hostfs: dup", errno);
  }
  auto root = std::make_shared<HostInode>(std::move(fd), st, dev, o.writable,
                                          nullptr, "");
  root->set_label(o.label);
  if (io.valid()) root->SetIoFd(std::move(io));
  return root;
}

bool PathOf(Inode& inode, std::string* label, std::string* path) {
  auto* h = dynamic_cast<HostInode*>(&inode);
  return h != nullptr && h->PathFromRoot(label, path);
}

std::shared_ptr<PageCache> SharedPageCache(Inode& inode, mm::MemoryFile* mf) {
  auto* h = dynamic_cast<HostInode*>(&inode);
  return h != nullptr ? h->MakePageCache(mf) : nullptr;
}

std::vector<OwnerRecord> Owners(Inode& inode) {
  auto* h = dynamic_cast<HostInode*>(&inode);
  return h != nullptr ? h->fs_root()->Owners() : std::vector<OwnerRecord>{};
}

void AddOwners(Inode& inode, const std::vector<OwnerRecord>& records) {
  auto* h = dynamic_cast<HostInode*>(&inode);
  if (h != nullptr) h->fs_root()->AddOwners(records);
}

bool IsHostInode(const Inode& inode) {
  return dynamic_cast<const HostInode*>(&inode) != nullptr;
}

}  // namespace sandboxd::fs::hostfs
