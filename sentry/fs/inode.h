// Inodes: what a file is, independent of the names that lead to it.
//
// Every filesystem (hostfs, tmpfs, overlay, and later procfs, devfs, pipes)
// implements Inode. The VFS (vfs.h) walks names with Lookup, keeps the tree
// of names (Dentry) and mounts, and never sees host paths. Operations
// return 0 (or a count) on success and -errno on failure, as Linux's do,
// because their callers are syscalls.
//
// Concurrency: any method may be called from several task threads at once;
// each implementation locks what it owns. Lock order: a directory's lock
// before its children's; Rename locks both directories in address order.
#ifndef SANDBOXD_SENTRY_FS_INODE_H_
#define SANDBOXD_SENTRY_FS_INODE_H_

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sandboxd::state {
// Checkpoint/restore of the fs objects (sentry/state/fs_state.h): the
// classes that keep their state private befriend it.
struct FsState;
}  // namespace sandboxd::state

namespace sandboxd::fs {

class File;
class Fifo;
struct Location;

// FollowMagicLink's answer for an ordinary symlink.
inline constexpr int kNotMagicLink = 1;

// Metadata, as stat(2) reports it.
struct Attr {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint32_t mode = 0;  // S_IFMT type | permission bits
  uint32_t nlink = 1;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t rdev = 0;
  uint64_t size = 0;
  uint64_t blocks = 0;  // 512-byte units
  uint32_t blksize = 4096;
  struct timespec atime = {};
  struct timespec mtime = {};
  struct timespec ctime = {};
};

// chmod/chown/truncate/utimensat: which fields to change. Times are
// absolute (the caller resolves UTIME_NOW).
struct SetAttrRequest {
  bool set_mode = false;
  uint32_t mode = 0;  // permission bits only
  bool set_uid = false;
  uint32_t uid = 0;
  bool set_gid = false;
  uint32_t gid = 0;
  bool set_size = false;
  uint64_t size = 0;
  bool set_atime = false;
  struct timespec atime = {};
  bool set_mtime = false;
  struct timespec mtime = {};
};

// What to create in a directory.
struct CreateRequest {
  uint32_t type = S_IFREG;  // S_IFREG, S_IFDIR, S_IFLNK, S_IFIFO, S_IFCHR...
  uint32_t mode = 0644;     // permission bits, umask already applied
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t rdev = 0;        // devices
  std::string target;       // symlinks
};

struct DirEntry {
  std::string name;
  uint64_t ino = 0;
  uint8_t type = 0;  // DT_*
};

class Inode : public std::enable_shared_from_this<Inode> {
 public:
  virtual ~Inode() = default;

  // S_IFMT bits; constant for the inode's life.
  virtual uint32_t Type() const = 0;
  virtual int GetAttr(Attr* out) = 0;
  virtual int SetAttr(const SetAttrRequest& req) { return -EPERM; }
  virtual int StatFs(struct statfs* out);

  // Directories. Names are single components, never "." or "..", at most
  // NAME_MAX bytes, without '/' (the VFS checks).
  virtual int Lookup(const std::string& name, std::shared_ptr<Inode>* out) {
    return -ENOTDIR;
  }
  // All entries but "." and "..", in a stable order.
  virtual int ReadDir(std::vector<DirEntry>* out) { return -ENOTDIR; }
  virtual int Create(const std::string& name, const CreateRequest& req,
                     std::shared_ptr<Inode>* out) {
    return -ENOTDIR;
  }
  // A hard link to `target` (not a directory) named `name`.
  virtual int Link(const std::string& name,
                   const std::shared_ptr<Inode>& target) {
    return -ENOTDIR;
  }
  // unlink (dir=false) or rmdir (dir=true) of `name`.
  virtual int Unlink(const std::string& name, bool dir) { return -ENOTDIR; }
  // renameat2 within one filesystem; flags: RENAME_NOREPLACE, RENAME_EXCHANGE.
  virtual int Rename(const std::string& old_name, Inode& new_dir,
                     const std::string& new_name, unsigned flags) {
    return -ENOTDIR;
  }

  // Whether the VFS may cache what Lookup returns. Directories whose
  // entries appear and vanish without the VFS being told (devpts; procfs's
  // processes, threads and descriptors) say no: they are asked at every
  // lookup and stale dentries are replaced.
  virtual bool CacheLookups() const { return true; }

  // Symlinks.
  virtual int Readlink(std::string* target) { return -EINVAL; }
  // Magic links (procfs's /proc/[pid]/{exe,cwd,root,fd/N}) lead to an
  // object, not to a path: following one jumps to *out, whatever Readlink
  // says. Returns 0, -errno, or kNotMagicLink for ordinary symlinks, which
  // the VFS follows through Readlink.
  virtual int FollowMagicLink(Location* out) { return kNotMagicLink; }

  // Regular file data, pread/pwrite style.
  virtual int64_t Read(void* buf, uint64_t n, uint64_t off) { return -EINVAL; }
  virtual int64_t Write(const void* buf, uint64_t n, uint64_t off) {
    return -EINVAL;
  }
  virtual int64_t Allocate(int mode, uint64_t off, uint64_t len) {
    return -EOPNOTSUPP;
  }
  virtual int Sync() { return 0; }
  // An open description of this inode (not O_PATH) was closed for the
  // last time (InodeFile's end).
  virtual void DescriptionClosed() {}

  // Opens a description of this inode. The VFS has checked access and
  // O_DIRECTORY/O_NOFOLLOW; the default (regular files, directories,
  // symlinks with O_PATH) is a generic InodeFile. Devices, fifos and
  // sockets override.
  virtual int Open(int flags, std::shared_ptr<File>* out);

  // FIFOs whose pipe the Sentry keeps (tmpfs, the overlay over it, the
  // read-only rootfs): the pipe every opener shares. The open syscall
  // opens such an inode through it (opens may block, which Open cannot);
  // null (the default, and a bind mount's host fifo) leaves the
  // open to Open.
  virtual Fifo* GetFifo() { return nullptr; }

  // Whether writes may ever happen (a read-only filesystem says no, and
  // the VFS answers EROFS).
  virtual bool ReadOnly() const { return false; }
};

// DT_* for an S_IFMT type.
uint8_t DirentType(uint32_t mode);

// A process-wide source of inode numbers for filesystems that have none.
uint64_t NextInodeNumber();

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_INODE_H_
