// Path-based file syscalls over the VFS: open, stat, directories, links,
// permissions, times, sizes, the working directory.
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "sentry/fs/credentials.h"
#include "sentry/fs/pipe.h"
#include "sentry/fs/vfs.h"
#include "sentry/fs/inotify.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/paths.h"
#include "sentry/syscalls/syscalls.h"
#include "sentry/syscalls/tty.h"

namespace sandboxd::syscalls {

using fs::Location;

int64_t ReadPath(Task& t, uint64_t addr, std::string* path) {
  return t.mm().CopyInString(addr, fs::kPathMax - 1, path);
}

// The directory a *at() call starts from.
int64_t StartDir(Task& t, int64_t dirfd, const std::string& path,
                 Location* out) {
  if (!path.empty() && path[0] == '/') {
    *out = t.group().fs().root();
    return 0;
  }
  if (static_cast<int>(dirfd) == AT_FDCWD) {
    *out = t.group().fs().cwd();
    return 0;
  }
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(dirfd)));
  Location l = f->location();
  if (!l.valid()) return -ENOTDIR;
  if (l.inode().Type() != S_IFDIR) return -ENOTDIR;
  *out = l;
  return 0;
}

// Resolves (dirfd, path) to a location; AT_EMPTY_PATH with "" is the fd.
int64_t ResolveAt(Task& t, int64_t dirfd, const std::string& path,
                  bool follow, bool empty_path, Location* out) {
  if (path.empty()) {
    if (!empty_path) return -ENOENT;
    if (static_cast<int>(dirfd) == AT_FDCWD) {
      *out = t.group().fs().cwd();
      return 0;
    }
    ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(dirfd)));
    Location l = f->location();
    if (!l.valid()) return -EBADF;  // a host file: handled by fstat paths
    *out = l;
    return 0;
  }
  Location start;
  RETURN_IF_ERRNO(StartDir(t, dirfd, path, &start));
  return t.kernel().vfs().Resolve(t.group().fs(), start, path, follow, out);
}

int64_t ResolveParentAt(Task& t, int64_t dirfd, const std::string& path,
                        Location* parent, std::string* name, bool* trailing) {
  Location start;
  RETURN_IF_ERRNO(StartDir(t, dirfd, path, &start));
  return t.kernel().vfs().ResolveParent(t.group().fs(), start, path, parent,
                                        name, trailing);
}

namespace {

using fs::Inode;
using fs::Location;

bool ReadOnly(const Location& l) {
  return l.mount->read_only || l.inode().ReadOnly();
}

// Permission checks with the calling task's credentials
// (sentry/fs/credentials.h; Linux's fs/namei.c and fs/attr.c).
int64_t MayAccess(Task& t, fs::Inode& inode, int mask) {
  return fs::CheckInodePermission(t.own_creds(), inode, mask);
}

// may_create: write and search permission on the directory.
int64_t MayCreateIn(Task& t, const Location& dir) {
  return MayAccess(t, dir.inode(), fs::kMayWrite | fs::kMayExec);
}

// may_delete (and a rename's source and target): write and search on the
// directory, and in a sticky directory ownership of the file or the
// directory (or CAP_FOWNER).
int64_t MayDeleteFrom(Task& t, const Location& dir, const std::string& name) {
  RETURN_IF_ERRNO(MayCreateIn(t, dir));
  const fs::Credentials& c = t.own_creds();
  if (c.HasCap(CAP_FOWNER)) return 0;
  fs::Attr da;
  RETURN_IF_ERRNO(dir.inode().GetAttr(&da));
  if (!(da.mode & S_ISVTX)) return 0;
  Location victim;
  if (t.kernel().vfs().Lookup(dir, name, &victim) < 0) return 0;  // the call says
  fs::Attr va;
  RETURN_IF_ERRNO(victim.inode().GetAttr(&va));
  if (c.fsuid == va.uid || c.fsuid == da.uid) return 0;
  return -EPERM;
}

// inode_init_owner: a new file belongs to the fsuid, and to the fsgid or,
// in a set-group-ID directory, to the directory's group (a new directory
// there is set-group-ID too; a set-group-ID file made by a non-member
// loses the bit).
int64_t InitOwner(Task& t, const Location& dir, fs::CreateRequest* req) {
  const fs::Credentials& c = t.own_creds();
  req->uid = c.fsuid;
  req->gid = c.fsgid;
  fs::Attr da;
  RETURN_IF_ERRNO(dir.inode().GetAttr(&da));
  if (da.mode & S_ISGID) {
    req->gid = da.gid;
    if (req->type == S_IFDIR) {
      req->mode |= S_ISGID;
    } else if ((req->mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP) &&
               !c.InGroup(req->gid) && !c.HasCap(CAP_FSETID)) {
      req->mode &= ~S_ISGID;
    }
  }
  return 0;
}

int64_t DoOpen(Task& t, int64_t dirfd, const std::string& path, int flags,
               uint32_t mode, int depth) {
  if (depth > fs::kMaxSymlinks) return -ELOOP;
  if ((flags & __O_TMPFILE) == __O_TMPFILE) {
    t.kernel().CountUnimplemented(SYS_openat);
    return -EOPNOTSUPP;
  }
  if (flags & O_PATH) flags &= O_PATH | O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW;
  fs::Vfs& vfs = t.kernel().vfs();
  Location loc;
  bool created = false;
  if (flags & O_CREAT) {
    if (flags & O_DIRECTORY) return -EINVAL;
    Location parent;
    std::string name;
    bool trailing;
    RETURN_IF_ERRNO(ResolveParentAt(t, dirfd, path, &parent, &name, &trailing));
    if (name.empty() || name == "." || name == "..") return -EISDIR;
    RETURN_IF_ERRNO(MayAccess(t, parent.inode(), fs::kMayExec));
    int64_t r = vfs.Lookup(parent, name, &loc);
    if (r == 0) {
      if (flags & O_EXCL) return -EEXIST;
      if (loc.inode().Type() == S_IFLNK) {
        if (flags & O_NOFOLLOW) return -ELOOP;
        std::string target;
        RETURN_IF_ERRNO(loc.inode().Readlink(&target));
        // Creating through a symlink creates its target.
        Location base = parent;
        if (!target.empty() && target[0] == '/') base = t.group().fs().root();
        Location resolved;
        r = vfs.Resolve(t.group().fs(), base, target, true, &resolved);
        if (r == -ENOENT) {
          // Follow the symlink's path from its directory.
          fs::FsContext tmp(t.group().fs().root(), parent);
          Location p2;
          std::string n2;
          bool tr2;
          RETURN_IF_ERRNO(
              vfs.ResolveParent(tmp, parent, target, &p2, &n2, &tr2));
          if (n2.empty() || n2 == "." || n2 == "..") return -EISDIR;
          if (ReadOnly(p2)) return -EROFS;
          RETURN_IF_ERRNO(MayCreateIn(t, p2));
          fs::CreateRequest req;
          req.type = S_IFREG;
          req.mode = mode & ~t.group().fs().umask() & 07777;
          RETURN_IF_ERRNO(InitOwner(t, p2, &req));
          RETURN_IF_ERRNO(vfs.Create(p2, n2, req, &loc));
          created = true;
        } else if (r < 0) {
          return r;
        } else {
          loc = resolved;
        }
      } else if (trailing && loc.inode().Type() != S_IFDIR) {
        return -ENOTDIR;
      }
    } else if (r == -ENOENT) {
      if (trailing) return -EISDIR;
      if (ReadOnly(parent)) return -EROFS;
      RETURN_IF_ERRNO(MayCreateIn(t, parent));
      fs::CreateRequest req;
      req.type = S_IFREG;
      req.mode = mode & ~t.group().fs().umask() & 07777;
      RETURN_IF_ERRNO(InitOwner(t, parent, &req));
      RETURN_IF_ERRNO(vfs.Create(parent, name, req, &loc));
      created = true;
    } else {
      return r;
    }
  } else {
    RETURN_IF_ERRNO(
        ResolveAt(t, dirfd, path, (flags & O_NOFOLLOW) == 0, false, &loc));
    if (loc.inode().Type() == S_IFLNK && !(flags & O_PATH)) return -ELOOP;
  }
  uint32_t type = loc.inode().Type();
  int acc = flags & O_ACCMODE;
  bool writes = acc == O_WRONLY || acc == O_RDWR;
  if ((flags & O_DIRECTORY) && type != S_IFDIR) return -ENOTDIR;
  if (!(flags & O_PATH)) {
    if (type == S_IFDIR && (writes || (flags & O_TRUNC))) return -EISDIR;
    // A FIFO's data is not in its filesystem: a read-only mount's may be
    // opened for writing (Linux's sb_permission checks files,
    // directories and symlinks only).
    if ((writes || (flags & O_TRUNC)) && ReadOnly(loc) && type != S_IFIFO) {
      return -EROFS;
    }
    if (!created) {
      // may_open: what the access mode asks for (O_TRUNC writes).
      int mask = 0;
      if (acc == O_RDONLY || acc == O_RDWR) mask |= fs::kMayRead;
      if (writes || (flags & O_TRUNC)) mask |= fs::kMayWrite;
      if (acc == 3) mask |= fs::kMayRead | fs::kMayWrite;  // ioctl-only mode
      if (type != S_IFLNK) RETURN_IF_ERRNO(MayAccess(t, loc.inode(), mask));
    }
    if ((flags & O_TRUNC) && type == S_IFREG && !created) {
      fs::SetAttrRequest req;
      req.set_size = true;
      req.size = 0;
      RETURN_IF_ERRNO(loc.inode().SetAttr(req));
    }
  }
  std::shared_ptr<fs::File> file;
  fs::Fifo* fifo = type == S_IFIFO && !(flags & O_PATH)
                       ? loc.inode().GetFifo()
                       : nullptr;
  if (fifo != nullptr) {
    // fifo_open: may wait for the other side; an interrupted wait is
    // -EINTR, which SA_RESTART turns into a new open.
    RETURN_IF_ERRNO(fifo->Open(flags, t.io(), loc.inode().shared_from_this(),
                               &file));
    fs::SetFifoLocation(*file, loc, &vfs);
    fs::inotify::NotifyFile(&vfs, loc, IN_OPEN);
  } else {
    RETURN_IF_ERRNO(OpenInode(t, loc, flags, &file));
  }
  if (auto* inf = dynamic_cast<fs::InodeFile*>(file.get())) {
    inf->set_location(loc, &vfs);
    // fsnotify_open, then the truncate's IN_MODIFY (do_open truncates
    // after vfs_open). The close event comes from ~InodeFile.
    if (!(flags & O_PATH)) {
      fs::inotify::NotifyFile(&vfs, loc, IN_OPEN);
      if ((flags & O_TRUNC) && type == S_IFREG && !created) {
        fs::inotify::NotifyFile(&vfs, loc, IN_MODIFY);
      }
    }
  }
  return t.group().fds().Install(file, (flags & O_CLOEXEC) != 0);
}

int64_t SysOpen(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[0]));
  return DoOpen(t, AT_FDCWD, path, static_cast<int>(a.a[1]),
                static_cast<uint32_t>(a.a[2]), 0);
}

int64_t SysOpenat(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[1]));
  return DoOpen(t, static_cast<int64_t>(a.a[0]), path,
                static_cast<int>(a.a[2]), static_cast<uint32_t>(a.a[3]), 0);
}

int64_t SysCreat(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[0]));
  return DoOpen(t, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC,
                static_cast<uint32_t>(a.a[1]), 0);
}

int64_t SysOpenat2(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[1]));
  if (a.a[3] < sizeof(open_how)) return -EINVAL;
  open_how how;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &how));
  if (how.flags > 0xffffffffu || (how.mode & ~07777ull)) return -EINVAL;
  if (how.resolve != 0) {
    // RESOLVE_* restrictions on the walk are not offered yet.
    t.kernel().CountUnimplemented(SYS_openat2);
    return -EINVAL;
  }
  return DoOpen(t, static_cast<int64_t>(a.a[0]), path,
                static_cast<int>(how.flags), static_cast<uint32_t>(how.mode), 0);
}

int64_t StatLoc(Task& t, const Location& l, uint64_t addr) {
  fs::Attr attr;
  RETURN_IF_ERRNO(l.inode().GetAttr(&attr));
  struct stat st;
  fs::AttrToStat(attr, &st);
  return CopyOutObj(t, addr, st);
}

int64_t StatFd(Task& t, int64_t fd, uint64_t addr) {
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(fd)));
  struct stat st;
  RETURN_IF_ERRNO(f->Stat(&st));
  return CopyOutObj(t, addr, st);
}

int64_t SysStat(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[0]));
  Location l;
  RETURN_IF_ERRNO(ResolveAt(t, AT_FDCWD, path, true, false, &l));
  return StatLoc(t, l, a.a[1]);
}

int64_t SysLstat(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[0]));
  Location l;
  RETURN_IF_ERRNO(ResolveAt(t, AT_FDCWD, path, false, false, &l));
  return StatLoc(t, l, a.a[1]);
}

int64_t SysNewfstatat(Task& t, const SyscallArgs& a) {
  int flags = static_cast<int>(a.a[3]);
  if (flags & ~(AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT)) {
    return -EINVAL;
  }
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[1]));
  if (path.empty()) {
    if (!(flags & AT_EMPTY_PATH)) return -ENOENT;
    if (static_cast<int>(a.a[0]) != AT_FDCWD) return StatFd(t, a.a[0], a.a[2]);
  }
  Location l;
  RETURN_IF_ERRNO(ResolveAt(t, a.a[0], path, !(flags & AT_SYMLINK_NOFOLLOW),
                            (flags & AT_EMPTY_PATH) != 0, &l));
  return StatLoc(t, l, a.a[2]);
}

int64_t SysStatx(Task& t, const SyscallArgs& a) {
  int flags = static_cast<int>(a.a[2]);
  if (flags & ~(AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT |
                AT_STATX_SYNC_TYPE)) {
    return -EINVAL;
  }
  if ((flags & AT_STATX_SYNC_TYPE) == AT_STATX_SYNC_TYPE) return -EINVAL;
  if (a.a[3] & STATX__RESERVED) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[1]));
  struct stat st;
  if (path.empty() && (flags & AT_EMPTY_PATH) &&
      static_cast<int>(a.a[0]) != AT_FDCWD) {
    ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(a.a[0])));
    RETURN_IF_ERRNO(f->Stat(&st));
  } else {
    Location l;
    RETURN_IF_ERRNO(ResolveAt(t, a.a[0], path, !(flags & AT_SYMLINK_NOFOLLOW),
                              (flags & AT_EMPTY_PATH) != 0, &l));
    fs::Attr attr;
    RETURN_IF_ERRNO(l.inode().GetAttr(&attr));
    fs::AttrToStat(attr, &st);
  }
  struct statx sx;
  std::memset(&sx, 0, sizeof(sx));
  sx.stx_mask = STATX_BASIC_STATS;
  sx.stx_blksize = static_cast<uint32_t>(st.st_blksize);
  sx.stx_nlink = static_cast<uint32_t>(st.st_nlink);
  sx.stx_uid = st.st_uid;
  sx.stx_gid = st.st_gid;
  sx.stx_mode = static_cast<uint16_t>(st.st_mode);
  sx.stx_ino = st.st_ino;
  sx.stx_size = static_cast<uint64_t>(st.st_size);
  sx.stx_blocks = static_cast<uint64_t>(st.st_blocks);
  sx.stx_atime = {st.st_atim.tv_sec, static_cast<uint32_t>(st.st_atim.tv_nsec), 0};
  sx.stx_mtime = {st.st_mtim.tv_sec, static_cast<uint32_t>(st.st_mtim.tv_nsec), 0};
  sx.stx_ctime = {st.st_ctim.tv_sec, static_cast<uint32_t>(st.st_ctim.tv_nsec), 0};
  sx.stx_rdev_major = major(st.st_rdev);
  sx.stx_rdev_minor = minor(st.st_rdev);
  sx.stx_dev_major = major(st.st_dev);
  sx.stx_dev_minor = minor(st.st_dev);
  return CopyOutObj(t, a.a[4], sx);
}

int64_t DoAccess(Task& t, int64_t dirfd, uint64_t path_addr, int mode,
                 int flags) {
  if (mode & ~(R_OK | W_OK | X_OK)) return -EINVAL;
  if (flags & ~(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, path_addr));
  Location l;
  RETURN_IF_ERRNO(ResolveAt(t, dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW),
                            (flags & AT_EMPTY_PATH) != 0, &l));
  if ((mode & W_OK) && ReadOnly(l) && l.inode().Type() != S_IFCHR) return -EROFS;
  if (mode == F_OK) return 0;
  // access_override_creds: the real ids unless AT_EACCESS, and for a
  // non-root real uid no capabilities (SECBIT_NO_SETUID_FIXUP aside).
  const fs::Credentials& own = t.own_creds();
  fs::Credentials c = own;
  if (!(flags & AT_EACCESS)) {
    c.fsuid = own.ruid;
    c.fsgid = own.rgid;
    if (!own.Secure(fs::kSecbitNoSetuidFixup)) {
      c.cap_effective = own.ruid != 0 ? 0 : own.cap_permitted;
    }
  }
  int mask = 0;
  if (mode & R_OK) mask |= fs::kMayRead;
  if (mode & W_OK) mask |= fs::kMayWrite;
  if (mode & X_OK) mask |= fs::kMayExec;
  return fs::CheckInodePermission(c, l.inode(), mask);
}

int64_t SysAccess(Task& t, const SyscallArgs& a) {
  return DoAccess(t, AT_FDCWD, a.a[0], static_cast<int>(a.a[1]), 0);
}
int64_t SysFaccessat(Task& t, const SyscallArgs& a) {
  return DoAccess(t, a.a[0], a.a[1], static_cast<int>(a.a[2]), 0);
}
int64_t SysFaccessat2(Task& t, const SyscallArgs& a) {
  return DoAccess(t, a.a[0], a.a[1], static_cast<int>(a.a[2]),
                  static_cast<int>(a.a[3]));
}

int64_t DoReadlink(Task& t, int64_t dirfd, uint64_t path_addr, uint64_t buf,
                   int64_t size) {
  if (size <= 0) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, path_addr));
  Location l;
  RETURN_IF_ERRNO(ResolveAt(t, dirfd, path, false, true, &l));
  std::string target;
  RETURN_IF_ERRNO(l.inode().Readlink(&target));
  uint64_t n = std::min<uint64_t>(target.size(), static_cast<uint64_t>(size));
  RETURN_IF_ERRNO(CopyOutBytes(t, buf, target.data(), n));
  return static_cast<int64_t>(n);
}

int64_t SysReadlink(Task& t, const SyscallArgs& a) {
  return DoReadlink(t, AT_FDCWD, a.a[0], a.a[1], static_cast<int64_t>(a.a[2]));
}
int64_t SysReadlinkat(Task& t, const SyscallArgs& a) {
  return DoReadlink(t, a.a[0], a.a[1], a.a[2], static_cast<int64_t>(a.a[3]));
}

int64_t SysGetcwd(Task& t, const SyscallArgs& a) {
  bool reachable = true;
  std::string path = t.kernel().vfs().PathOf(t.group().fs().root(),
                                             t.group().fs().cwd(), &reachable);
  if (!reachable) {
    if (path.find(" (deleted)") != std::string::npos) return -ENOENT;
    path = "(unreachable)" + path;
  }
  if (path.size() + 1 > a.a[1]) return -ERANGE;
  RETURN_IF_ERRNO(CopyOutBytes(t, a.a[0], path.c_str(), path.size() + 1));
  return static_cast<int64_t>(path.size() + 1);
}

// The directory a chdir/chroot path argument names.
int64_t ResolveDirectory(Task& t, uint64_t path_addr, Location* out) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, path_addr));
  RETURN_IF_ERRNO(ResolveAt(t, AT_FDCWD, path, true, false, out));
  return out->inode().Type() == S_IFDIR ? 0 : -ENOTDIR;
}

int64_t SysChdir(Task& t, const SyscallArgs& a) {
  Location l;
  RETURN_IF_ERRNO(ResolveDirectory(t, a.a[0], &l));
  t.group().fs().set_cwd(l);
  return 0;
}

int64_t SysFchdir(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(a.a[0])));
  Location l = f->location();
  if (!l.valid() || l.inode().Type() != S_IFDIR) return -ENOTDIR;
  t.group().fs().set_cwd(l);
  return 0;
}

int64_t SysChroot(Task& t, const SyscallArgs& a) {
  Location l;
  RETURN_IF_ERRNO(ResolveDirectory(t, a.a[0], &l));
  t.group().fs().set_root(l);
  return 0;
}

int64_t MakeNode(Task& t, int64_t dirfd, uint64_t path_addr,
                 const fs::CreateRequest& base) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, path_addr));
  Location parent;
  std::string name;
  bool trailing;
  RETURN_IF_ERRNO(ResolveParentAt(t, dirfd, path, &parent, &name, &trailing));
  if (trailing && base.type != S_IFDIR) {
    Location existing;
    if (t.kernel().vfs().Lookup(parent, name, &existing) == 0) return -EEXIST;
    return -ENOENT;
  }
  fs::CreateRequest req = base;
  if (req.type != S_IFLNK) req.mode = base.mode & ~t.group().fs().umask() & 07777;
  Location existing;
  if (!name.empty() && name != "." && name != ".." &&
      t.kernel().vfs().Lookup(parent, name, &existing) == 0) {
    return -EEXIST;
  }
  if (ReadOnly(parent)) return -EROFS;
  RETURN_IF_ERRNO(MayCreateIn(t, parent));
  RETURN_IF_ERRNO(InitOwner(t, parent, &req));
  return t.kernel().vfs().Create(parent, name, req, nullptr);
}

int64_t SysMkdir(Task& t, const SyscallArgs& a) {
  fs::CreateRequest req;
  req.type = S_IFDIR;
  req.mode = static_cast<uint32_t>(a.a[1]);
  return MakeNode(t, AT_FDCWD, a.a[0], req);
}
int64_t SysMkdirat(Task& t, const SyscallArgs& a) {
  fs::CreateRequest req;
  req.type = S_IFDIR;
  req.mode = static_cast<uint32_t>(a.a[2]);
  return MakeNode(t, a.a[0], a.a[1], req);
}

int64_t DoMknod(Task& t, int64_t dirfd, uint64_t path, uint32_t mode,
                uint64_t dev) {
  fs::CreateRequest req;
  req.type = mode & S_IFMT;
  if (req.type == 0) req.type = S_IFREG;
  if (req.type == S_IFDIR) return -EPERM;
  if (req.type != S_IFREG && req.type != S_IFIFO && req.type != S_IFCHR &&
      req.type != S_IFBLK && req.type != S_IFSOCK) {
    return -EINVAL;
  }
  req.mode = mode & 07777;
  req.rdev = dev;
  return MakeNode(t, dirfd, path, req);
}

int64_t SysMknod(Task& t, const SyscallArgs& a) {
  return DoMknod(t, AT_FDCWD, a.a[0], static_cast<uint32_t>(a.a[1]), a.a[2]);
}
int64_t SysMknodat(Task& t, const SyscallArgs& a) {
  return DoMknod(t, a.a[0], a.a[1], static_cast<uint32_t>(a.a[2]), a.a[3]);
}

int64_t DoSymlink(Task& t, uint64_t target_addr, int64_t dirfd,
                  uint64_t path_addr) {
  ASSIGN_OR_RETURN_ERRNO(std::string target, ReadPath(t, target_addr));
  if (target.empty()) return -ENOENT;
  fs::CreateRequest req;
  req.type = S_IFLNK;
  req.mode = 0777;
  req.target = target;
  return MakeNode(t, dirfd, path_addr, req);
}

int64_t SysSymlink(Task& t, const SyscallArgs& a) {
  return DoSymlink(t, a.a[0], AT_FDCWD, a.a[1]);
}
int64_t SysSymlinkat(Task& t, const SyscallArgs& a) {
  return DoSymlink(t, a.a[0], a.a[1], a.a[2]);
}

int64_t DoUnlink(Task& t, int64_t dirfd, uint64_t path_addr, bool dir) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, path_addr));
  Location parent;
  std::string name;
  bool trailing;
  RETURN_IF_ERRNO(ResolveParentAt(t, dirfd, path, &parent, &name, &trailing));
  if (trailing && !dir) {
    Location c;
    RETURN_IF_ERRNO(t.kernel().vfs().Lookup(parent, name, &c));
    return c.inode().Type() == S_IFDIR ? -EISDIR : -ENOTDIR;
  }
  if (ReadOnly(parent)) return -EROFS;
  RETURN_IF_ERRNO(MayDeleteFrom(t, parent, name));
  return t.kernel().vfs().Unlink(parent, name, dir);
}

int64_t SysUnlink(Task& t, const SyscallArgs& a) {
  return DoUnlink(t, AT_FDCWD, a.a[0], false);
}
int64_t SysRmdir(Task& t, const SyscallArgs& a) {
  return DoUnlink(t, AT_FDCWD, a.a[0], true);
}
int64_t SysUnlinkat(Task& t, const SyscallArgs& a) {
  if (a.a[2] & ~static_cast<uint64_t>(AT_REMOVEDIR)) return -EINVAL;
  return DoUnlink(t, a.a[0], a.a[1], (a.a[2] & AT_REMOVEDIR) != 0);
}

int64_t DoRename(Task& t, int64_t olddir, uint64_t oldp, int64_t newdir,
                 uint64_t newp, unsigned flags) {
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT)) {
    return -EINVAL;
  }
  if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) return -EINVAL;
  if (flags & RENAME_WHITEOUT) return -EINVAL;
  std::string op, np;
  RETURN_IF_ERRNO(ReadPath(t, oldp, &op));
  RETURN_IF_ERRNO(ReadPath(t, newp, &np));
  Location od, nd;
  std::string on, nn;
  bool ot, nt;
  RETURN_IF_ERRNO(ResolveParentAt(t, olddir, op, &od, &on, &ot));
  RETURN_IF_ERRNO(ResolveParentAt(t, newdir, np, &nd, &nn, &nt));
  if (ot || nt) {
    Location src;
    RETURN_IF_ERRNO(t.kernel().vfs().Lookup(od, on, &src));
    if (src.inode().Type() != S_IFDIR) return -ENOTDIR;
  }
  if (ReadOnly(od) || ReadOnly(nd)) return -EROFS;
  RETURN_IF_ERRNO(MayDeleteFrom(t, od, on));
  RETURN_IF_ERRNO(MayDeleteFrom(t, nd, nn));
  return t.kernel().vfs().Rename(od, on, nd, nn, flags);
}

int64_t SysRename(Task& t, const SyscallArgs& a) {
  return DoRename(t, AT_FDCWD, a.a[0], AT_FDCWD, a.a[1], 0);
}
int64_t SysRenameat(Task& t, const SyscallArgs& a) {
  return DoRename(t, a.a[0], a.a[1], a.a[2], a.a[3], 0);
}
int64_t SysRenameat2(Task& t, const SyscallArgs& a) {
  return DoRename(t, a.a[0], a.a[1], a.a[2], a.a[3],
                  static_cast<unsigned>(a.a[4]));
}

int64_t DoLink(Task& t, int64_t olddir, uint64_t oldp, int64_t newdir,
               uint64_t newp, int flags) {
  if (flags & ~(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH)) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::string op, ReadPath(t, oldp));
  Location target;
  RETURN_IF_ERRNO(ResolveAt(t, olddir, op, (flags & AT_SYMLINK_FOLLOW) != 0,
                            (flags & AT_EMPTY_PATH) != 0, &target));
  ASSIGN_OR_RETURN_ERRNO(std::string np, ReadPath(t, newp));
  Location nd;
  std::string nn;
  bool nt;
  RETURN_IF_ERRNO(ResolveParentAt(t, newdir, np, &nd, &nn, &nt));
  if (nt) return target.inode().Type() == S_IFDIR ? -EPERM : -ENOENT;
  Location existing;
  if (t.kernel().vfs().Lookup(nd, nn, &existing) == 0) return -EEXIST;
  if (ReadOnly(nd)) return -EROFS;
  RETURN_IF_ERRNO(MayCreateIn(t, nd));
  return t.kernel().vfs().Link(target, nd, nn);
}

int64_t SysLink(Task& t, const SyscallArgs& a) {
  return DoLink(t, AT_FDCWD, a.a[0], AT_FDCWD, a.a[1], 0);
}
int64_t SysLinkat(Task& t, const SyscallArgs& a) {
  return DoLink(t, a.a[0], a.a[1], a.a[2], a.a[3], static_cast<int>(a.a[4]));
}

// setattr_prepare and chown_common: who may change the mode and the owner,
// and the set-user-ID and set-group-ID bits such changes clear.
int64_t CheckSetAttr(Task& t, const Location& l, fs::SetAttrRequest* req) {
  if (!req->set_mode && !req->set_uid && !req->set_gid) return 0;
  const fs::Credentials& c = t.own_creds();
  fs::Attr a;
  RETURN_IF_ERRNO(l.inode().GetAttr(&a));
  if (req->set_uid) {
    if (!((c.fsuid == a.uid && req->uid == a.uid) || c.HasCap(CAP_CHOWN))) {
      return -EPERM;
    }
  }
  if (req->set_gid) {
    if (!((c.fsuid == a.uid && (req->gid == a.gid || c.InGroup(req->gid))) ||
          c.HasCap(CAP_CHOWN))) {
      return -EPERM;
    }
  }
  if (req->set_mode) {
    if (!fs::OwnerOrCapable(c, a.uid)) return -EPERM;
    const uint32_t gid = req->set_gid ? req->gid : a.gid;
    if (!c.InGroup(gid) && !c.HasCap(CAP_FSETID)) req->mode &= ~S_ISGID;
  }
  if ((req->set_uid || req->set_gid) && !req->set_mode && !S_ISDIR(a.mode)) {
    // A chown of a non-directory drops set-user-ID, and set-group-ID where
    // it means "run as the group" (with group execute), even for root.
    uint32_t mode = a.mode & 07777;
    uint32_t kill = S_ISUID;
    if (mode & S_IXGRP) kill |= S_ISGID;
    if (mode & kill) {
      req->set_mode = true;
      req->mode = mode & ~kill;
    }
  }
  return 0;
}

int64_t SetAttrAt(Task& t, const Location& l, const fs::SetAttrRequest& request) {
  if (ReadOnly(l)) return -EROFS;
  fs::SetAttrRequest req = request;
  RETURN_IF_ERRNO(CheckSetAttr(t, l, &req));
  int r = l.inode().SetAttr(req);
  if (r == 0) {
    fs::inotify::NotifyFile(&t.kernel().vfs(), l, fs::inotify::SetAttrMask(req));
  }
  return r;
}

int64_t SetAttrFd(Task& t, int64_t fd, const fs::SetAttrRequest& req) {
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(fd)));
  Location l = f->location();
  if (!l.valid()) return -EPERM;  // host stdio: not the sandbox's to change
  return SetAttrAt(t, l, req);
}

int64_t DoChmod(Task& t, int64_t dirfd, uint64_t path_addr, uint32_t mode,
                int flags) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, path_addr));
  Location l;
  RETURN_IF_ERRNO(
      ResolveAt(t, dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW), false, &l));
  if (l.inode().Type() == S_IFLNK) return -EOPNOTSUPP;
  fs::SetAttrRequest req;
  req.set_mode = true;
  req.mode = mode & 07777;
  return SetAttrAt(t, l, req);
}

int64_t SysChmod(Task& t, const SyscallArgs& a) {
  return DoChmod(t, AT_FDCWD, a.a[0], static_cast<uint32_t>(a.a[1]), 0);
}
int64_t SysFchmodat(Task& t, const SyscallArgs& a) {
  return DoChmod(t, a.a[0], a.a[1], static_cast<uint32_t>(a.a[2]), 0);
}
int64_t SysFchmod(Task& t, const SyscallArgs& a) {
  fs::SetAttrRequest req;
  req.set_mode = true;
  req.mode = static_cast<uint32_t>(a.a[1]) & 07777;
  return SetAttrFd(t, a.a[0], req);
}

fs::SetAttrRequest OwnerRequest(uint64_t uid, uint64_t gid) {
  fs::SetAttrRequest req;
  if (static_cast<uint32_t>(uid) != 0xffffffffu) {
    req.set_uid = true;
    req.uid = static_cast<uint32_t>(uid);
  }
  if (static_cast<uint32_t>(gid) != 0xffffffffu) {
    req.set_gid = true;
    req.gid = static_cast<uint32_t>(gid);
  }
  return req;
}

int64_t DoChown(Task& t, int64_t dirfd, uint64_t path_addr, uint64_t uid,
                uint64_t gid, int flags) {
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, path_addr));
  Location l;
  RETURN_IF_ERRNO(ResolveAt(t, dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW),
                            (flags & AT_EMPTY_PATH) != 0, &l));
  return SetAttrAt(t, l, OwnerRequest(uid, gid));
}

int64_t SysChown(Task& t, const SyscallArgs& a) {
  return DoChown(t, AT_FDCWD, a.a[0], a.a[1], a.a[2], 0);
}
int64_t SysLchown(Task& t, const SyscallArgs& a) {
  return DoChown(t, AT_FDCWD, a.a[0], a.a[1], a.a[2], AT_SYMLINK_NOFOLLOW);
}
int64_t SysFchownat(Task& t, const SyscallArgs& a) {
  return DoChown(t, a.a[0], a.a[1], a.a[2], a.a[3], static_cast<int>(a.a[4]));
}
int64_t SysFchown(Task& t, const SyscallArgs& a) {
  return SetAttrFd(t, a.a[0], OwnerRequest(a.a[1], a.a[2]));
}

// vfs_utimes: the owner (or CAP_FOWNER) may set any times; others may set
// them to now if they may write the file.
int64_t MayChangeTimes(Task& t, const Location& l, bool explicit_time) {
  if (ReadOnly(l)) return -EROFS;
  fs::Attr a;
  RETURN_IF_ERRNO(l.inode().GetAttr(&a));
  if (fs::OwnerOrCapable(t.own_creds(), a.uid)) return 0;
  if (explicit_time) return -EPERM;
  return MayAccess(t, l.inode(), fs::kMayWrite);
}

int64_t SysUtimensat(Task& t, const SyscallArgs& a) {
  int flags = static_cast<int>(a.a[3]);
  if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH)) return -EINVAL;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  fs::SetAttrRequest req;
  bool explicit_time = false;  // a time other than "now"
  if (a.a[2] == 0) {
    req.set_atime = req.set_mtime = true;
    req.atime = req.mtime = now;
  } else {
    struct timespec ts[2];
    RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &ts));
    for (int i = 0; i < 2; i++) {
      if (ts[i].tv_nsec == UTIME_OMIT) continue;
      if (ts[i].tv_nsec != UTIME_NOW &&
          (ts[i].tv_nsec < 0 || ts[i].tv_nsec >= 1000000000)) {
        return -EINVAL;
      }
      if (ts[i].tv_nsec != UTIME_NOW) explicit_time = true;
      struct timespec v = ts[i].tv_nsec == UTIME_NOW ? now : ts[i];
      if (i == 0) {
        req.set_atime = true;
        req.atime = v;
      } else {
        req.set_mtime = true;
        req.mtime = v;
      }
    }
  }
  Location l;
  if (a.a[1] == 0) {
    // utimensat(fd, NULL, ...) is futimens.
    if (static_cast<int>(a.a[0]) == AT_FDCWD) return -EFAULT;
    if (!req.set_atime && !req.set_mtime) return 0;
    ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(a.a[0])));
    if (f->location().valid()) {
      RETURN_IF_ERRNO(MayChangeTimes(t, f->location(), explicit_time));
    }
    return SetAttrFd(t, a.a[0], req);
  }
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[1]));
  RETURN_IF_ERRNO(ResolveAt(t, a.a[0], path, !(flags & AT_SYMLINK_NOFOLLOW),
                            (flags & AT_EMPTY_PATH) != 0, &l));
  if (!req.set_atime && !req.set_mtime) return 0;
  RETURN_IF_ERRNO(MayChangeTimes(t, l, explicit_time));
  return SetAttrAt(t, l, req);
}

int64_t DoTruncateLoc(Task& t, const Location& l, int64_t len) {
  if (len < 0) return -EINVAL;
  if (l.inode().Type() == S_IFDIR) return -EISDIR;
  if (l.inode().Type() != S_IFREG) return -EINVAL;
  fs::SetAttrRequest req;
  req.set_size = true;
  req.size = static_cast<uint64_t>(len);
  return SetAttrAt(t, l, req);
}

int64_t SysTruncate(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[0]));
  Location l;
  RETURN_IF_ERRNO(ResolveAt(t, AT_FDCWD, path, true, false, &l));
  return DoTruncateLoc(t, l, static_cast<int64_t>(a.a[1]));
}

int64_t SysFtruncate(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(a.a[0])));
  if (static_cast<int64_t>(a.a[1]) < 0) return -EINVAL;
  int acc = f->StatusFlags() & O_ACCMODE;
  if (acc == O_RDONLY) return -EINVAL;
  Location l = f->location();
  if (!l.valid()) return -EINVAL;
  return DoTruncateLoc(t, l, static_cast<int64_t>(a.a[1]));
}

int64_t SysFallocate(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(a.a[0])));
  int64_t off = static_cast<int64_t>(a.a[2]), len = static_cast<int64_t>(a.a[3]);
  if (off < 0 || len <= 0) return -EINVAL;
  if ((f->StatusFlags() & O_ACCMODE) == O_RDONLY) return -EBADF;
  auto inode = f->inode();
  if (inode == nullptr) return -ENODEV;
  if (inode->Type() == S_IFDIR) return -EISDIR;
  if (inode->Type() != S_IFREG) return -ENODEV;
  int64_t r = inode->Allocate(static_cast<int>(a.a[1]),
                              static_cast<uint64_t>(off),
                              static_cast<uint64_t>(len));
  if (r == 0) fs::inotify::NotifyFile(&t.kernel().vfs(), f->location(), IN_MODIFY);
  return r;
}

int64_t SysFsync(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(a.a[0])));
  auto inode = f->inode();
  return inode != nullptr ? inode->Sync() : 0;
}

int64_t SysSync(Task&, const SyscallArgs&) { return 0; }

int64_t SysUmask(Task& t, const SyscallArgs& a) {
  return t.group().fs().exchange_umask(static_cast<uint32_t>(a.a[0]));
}

int64_t CopyStatfs(Task& t, Inode& inode, uint64_t addr) {
  struct statfs sfs;
  RETURN_IF_ERRNO(inode.StatFs(&sfs));
  return CopyOutObj(t, addr, sfs);
}

int64_t SysStatfs(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[0]));
  Location l;
  RETURN_IF_ERRNO(ResolveAt(t, AT_FDCWD, path, true, false, &l));
  return CopyStatfs(t, l.inode(), a.a[1]);
}

int64_t SysFstatfs(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(a.a[0])));
  auto inode = f->inode();
  if (inode == nullptr) {
    struct statfs sfs = {};
    sfs.f_type = 0x01021994;
    sfs.f_bsize = 4096;
    sfs.f_namelen = 255;
    return CopyOutObj(t, a.a[1], sfs);
  }
  return CopyStatfs(t, *inode, a.a[1]);
}

int64_t SysGetdents64(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, static_cast<uint32_t>(a.a[0])));
  uint64_t size = std::min<uint64_t>(a.a[2], 1 << 20);
  std::vector<uint8_t> buf(size);
  int64_t n = f->GetDents(buf.data(), size);
  if (n <= 0) return n;
  RETURN_IF_ERRNO(CopyOutBytes(t, a.a[1], buf.data(), n));
  return n;
}

// Extended attributes: no filesystem of the sandbox stores any yet. The
// file named is looked up first, as Linux does, so that a missing path is
// ENOENT (a bad fd EBADF), not "no attribute".
enum class XattrOf { kPath, kLinkPath, kFd };  // getxattr, lgetxattr, fgetxattr

template <XattrOf kOf>
int64_t XattrFile(Task& t, uint64_t arg) {
  if constexpr (kOf == XattrOf::kFd) {
    ASSIGN_OR_RETURN_ERRNO(auto f, FileFor(t, arg));
    return 0;
  } else {
    ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, arg));
    Location l;
    return ResolveAt(t, AT_FDCWD, path, kOf == XattrOf::kPath, false, &l);
  }
}

// The result once the file is found: `kNone` for every attribute.
template <XattrOf kOf, int64_t kNone>
int64_t SysXattr(Task& t, const SyscallArgs& a) {
  RETURN_IF_ERRNO(XattrFile<kOf>(t, a.a[0]));
  return kNone;
}

}  // namespace

void RegisterPath(Entry* table) {
  table[SYS_open] = {SysOpen, "open"};
  table[SYS_openat] = {SysOpenat, "openat"};
  table[SYS_openat2] = {SysOpenat2, "openat2"};
  table[SYS_creat] = {SysCreat, "creat"};
  table[SYS_stat] = {SysStat, "stat"};
  table[SYS_lstat] = {SysLstat, "lstat"};
  table[SYS_newfstatat] = {SysNewfstatat, "newfstatat"};
  table[SYS_statx] = {SysStatx, "statx"};
  table[SYS_access] = {SysAccess, "access"};
  table[SYS_faccessat] = {SysFaccessat, "faccessat"};
  table[SYS_faccessat2] = {SysFaccessat2, "faccessat2"};
  table[SYS_readlink] = {SysReadlink, "readlink"};
  table[SYS_readlinkat] = {SysReadlinkat, "readlinkat"};
  table[SYS_getcwd] = {SysGetcwd, "getcwd"};
  table[SYS_chdir] = {SysChdir, "chdir"};
  table[SYS_fchdir] = {SysFchdir, "fchdir"};
  table[SYS_chroot] = {SysChroot, "chroot"};
  table[SYS_mkdir] = {SysMkdir, "mkdir"};
  table[SYS_mkdirat] = {SysMkdirat, "mkdirat"};
  table[SYS_mknod] = {SysMknod, "mknod"};
  table[SYS_mknodat] = {SysMknodat, "mknodat"};
  table[SYS_symlink] = {SysSymlink, "symlink"};
  table[SYS_symlinkat] = {SysSymlinkat, "symlinkat"};
  table[SYS_unlink] = {SysUnlink, "unlink"};
  table[SYS_unlinkat] = {SysUnlinkat, "unlinkat"};
  table[SYS_rmdir] = {SysRmdir, "rmdir"};
  table[SYS_rename] = {SysRename, "rename"};
  table[SYS_renameat] = {SysRenameat, "renameat"};
  table[SYS_renameat2] = {SysRenameat2, "renameat2"};
  table[SYS_link] = {SysLink, "link"};
  table[SYS_linkat] = {SysLinkat, "linkat"};
  table[SYS_chmod] = {SysChmod, "chmod"};
  table[SYS_fchmod] = {SysFchmod, "fchmod"};
  table[SYS_fchmodat] = {SysFchmodat, "fchmodat"};
  table[SYS_chown] = {SysChown, "chown"};
  table[SYS_lchown] = {SysLchown, "lchown"};
  table[SYS_fchown] = {SysFchown, "fchown"};
  table[SYS_fchownat] = {SysFchownat, "fchownat"};
  table[SYS_utimensat] = {SysUtimensat, "utimensat"};
  table[SYS_truncate] = {SysTruncate, "truncate"};
  table[SYS_ftruncate] = {SysFtruncate, "ftruncate"};
  table[SYS_fallocate] = {SysFallocate, "fallocate"};
  table[SYS_fsync] = {SysFsync, "fsync"};
  table[SYS_fdatasync] = {SysFsync, "fdatasync"};
  table[SYS_sync] = {SysSync, "sync"};
  table[SYS_syncfs] = {SysFsync, "syncfs"};
  table[SYS_umask] = {SysUmask, "umask"};
  table[SYS_statfs] = {SysStatfs, "statfs"};
  table[SYS_fstatfs] = {SysFstatfs, "fstatfs"};
  table[SYS_getdents64] = {SysGetdents64, "getdents64"};
  // get: no such attribute; list: none; set: not supported; remove: none.
  table[SYS_getxattr] = {SysXattr<XattrOf::kPath, -ENODATA>, "getxattr"};
  table[SYS_lgetxattr] = {SysXattr<XattrOf::kLinkPath, -ENODATA>, "lgetxattr"};
  table[SYS_fgetxattr] = {SysXattr<XattrOf::kFd, -ENODATA>, "fgetxattr"};
  table[SYS_listxattr] = {SysXattr<XattrOf::kPath, 0>, "listxattr"};
  table[SYS_llistxattr] = {SysXattr<XattrOf::kLinkPath, 0>, "llistxattr"};
  table[SYS_flistxattr] = {SysXattr<XattrOf::kFd, 0>, "flistxattr"};
  table[SYS_setxattr] = {SysXattr<XattrOf::kPath, -ENOTSUP>, "setxattr"};
  table[SYS_lsetxattr] = {SysXattr<XattrOf::kLinkPath, -ENOTSUP>, "lsetxattr"};
  table[SYS_fsetxattr] = {SysXattr<XattrOf::kFd, -ENOTSUP>, "fsetxattr"};
  table[SYS_removexattr] = {SysXattr<XattrOf::kPath, -ENODATA>, "removexattr"};
  table[SYS_lremovexattr] = {SysXattr<XattrOf::kLinkPath, -ENODATA>, "lremovexattr"};
  table[SYS_fremovexattr] = {SysXattr<XattrOf::kFd, -ENODATA>, "fremovexattr"};
}

}  // namespace sandboxd::syscalls
