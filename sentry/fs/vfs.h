// The VFS: the tree of names (Dentry), mounts, and path resolution.
//
//   Location = (Mount, Dentry): a name in the sandbox's mount tree.
//   Dentry   = one name of an inode within one filesystem's tree; knows its
//              parent, so that ".." and getcwd need no help from the
//              filesystem. Children are cached as they are looked up.
//   Mount    = a filesystem's root dentry attached at a mountpoint of its
//              parent mount.
//   Vfs      = the sandbox's mount namespace.
//   FsContext= a process's root, working directory and umask (shared by
//              CLONE_FS).
//
// Path resolution is done here, component by component, with the
// filesystem's Lookup: symlinks are followed inside the sandbox's tree (at
// most 40), ".." stops at the process root and crosses mountpoints, and no
// filesystem ever sees a path.
//
// Lock order: Vfs::mu_ (the tree: children, names, parents, mounts) is
// never held while calling into an Inode.
#ifndef SANDBOXD_SENTRY_FS_VFS_H_
#define SANDBOXD_SENTRY_FS_VFS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/inode.h"

namespace sandboxd::fs {

class Vfs;

class Dentry {
 public:
  Dentry(std::shared_ptr<Inode> inode, std::string name,
         std::shared_ptr<Dentry> parent)
      : inode_(std::move(inode)), name_(std::move(name)),
        parent_(std::move(parent)) {}
  const std::shared_ptr<Inode>& inode() const { return inode_; }

 private:
  friend class Vfs;
  friend struct ::sandboxd::state::FsState;
  const std::shared_ptr<Inode> inode_;
  // Guarded by the owning Vfs's mu_.
  std::string name_;
  std::shared_ptr<Dentry> parent_;  // null at a filesystem's root
  std::map<std::string, std::shared_ptr<Dentry>> children_;
  bool deleted_ = false;
  int mounts_here_ = 0;
};

class Mount {
 public:
  std::shared_ptr<Dentry> root;
  std::shared_ptr<Mount> parent;        // null for the namespace's root
  std::shared_ptr<Dentry> mountpoint;   // in parent
  std::string fstype;
  std::string source;
  bool read_only = false;
  bool expire_mark = false;  // umount2(MNT_EXPIRE) was called once
  uint64_t id = 0;
};

struct Location {
  std::shared_ptr<Mount> mount;
  std::shared_ptr<Dentry> dentry;
  Inode& inode() const { return *dentry->inode(); }
  bool valid() const { return mount != nullptr && dentry != nullptr; }
  bool operator==(const Location& o) const {
    return mount == o.mount && dentry == o.dentry;
  }
};

class FsContext {
 public:
  FsContext(Location root, Location cwd, uint32_t umask = 022)
      : root_(root), cwd_(cwd), umask_(umask & 0777) {}
  Location root() const {
    absl::MutexLock l(&mu_);
    return root_;
  }
  Location cwd() const {
    absl::MutexLock l(&mu_);
    return cwd_;
  }
  void set_cwd(Location l) {
    absl::MutexLock lock(&mu_);
    cwd_ = std::move(l);
  }
  void set_root(Location l) {
    absl::MutexLock lock(&mu_);
    root_ = std::move(l);
  }
  uint32_t umask() const {
    absl::MutexLock l(&mu_);
    return umask_;
  }
  uint32_t exchange_umask(uint32_t m) {
    absl::MutexLock l(&mu_);
    uint32_t old = umask_;
    umask_ = m & 0777;
    return old;
  }
  std::shared_ptr<FsContext> Fork() const {
    absl::MutexLock l(&mu_);
    return std::make_shared<FsContext>(root_, cwd_, umask_);
  }

 private:
  mutable absl::Mutex mu_;
  Location root_ ABSL_GUARDED_BY(mu_);
  Location cwd_ ABSL_GUARDED_BY(mu_);
  uint32_t umask_ ABSL_GUARDED_BY(mu_) = 022;
};

class Vfs {
 public:
  Vfs(std::shared_ptr<Inode> root, std::string fstype, std::string source,
      bool read_only);

  Location Root() const;

  // Mounts a filesystem whose root is `fs_root` on the directory `where`
  // (or a single file on a non-directory).
  int MountAt(const Location& where, std::shared_ptr<Inode> fs_root,
              std::string fstype, std::string source, bool read_only);

  // Detaches the mount whose root is `where` (umount2). -EINVAL if `where`
  // is not a mount's root, -EBUSY for the root mount, for a mount with
  // mounts below it or one still in use (open files, working directories:
  // anything holding its Location) unless `detach` (MNT_DETACH: lazy, the
  // users keep what they hold; mounts below go too). `where` is taken by
  // value and must be the caller's only reference to the mount.
  int Unmount(Location where, bool detach);

  // Resolves `path` relative to `start` (absolute paths start at
  // ctx.root()). follow_last: follow a symlink in the last component.
  // A trailing '/' requires a directory (and follows the last symlink).
  int Resolve(const FsContext& ctx, const Location& start,
              const std::string& path, bool follow_last, Location* out);

  // Resolves all but the last component. *name is the last component
  // ("" for "/" itself, "." or ".." are returned as such and callers
  // reject them as Linux does); *trailing_slash tells whether the path
  // ended in '/'.
  int ResolveParent(const FsContext& ctx, const Location& start,
                    const std::string& path, Location* parent,
                    std::string* name, bool* trailing_slash);

  // The child `name` of directory `dir` (not following it).
  int Lookup(const Location& dir, const std::string& name, Location* out);

  // Mutations through the tree, which keep the dentry cache right.
  int Create(const Location& dir, const std::string& name,
             const CreateRequest& req, Location* out);
  int Unlink(const Location& dir, const std::string& name, bool is_dir);
  int Rename(const Location& old_dir, const std::string& old_name,
             const Location& new_dir, const std::string& new_name,
             unsigned flags);
  int Link(const Location& target, const Location& dir,
           const std::string& name);

  // The path of `loc` as seen from `root` ("/" based); when `loc` is not
  // below `root` or was deleted, *reachable is false and the path is what
  // Linux shows in that case.
  std::string PathOf(const Location& root, const Location& loc,
                     bool* reachable = nullptr) const;

  // A name in no mount tree, for files that have no path but a name
  // (memfd_create's): PathOf shows it as "/NAME (deleted)", as Linux's
  // /proc/PID/fd and /proc/PID/maps show "/memfd:NAME (deleted)".
  static Location Detached(std::shared_ptr<Inode> inode,
                           const std::string& name, const std::string& fstype);

  // The directory `loc` was reached through and its name there (for
  // inotify's events on a directory's children); *unlinked when that name
  // was removed since. False for a mount's root or a detached name.
  bool ParentOf(const Location& loc, std::shared_ptr<Inode>* dir,
                std::string* name, bool* unlinked) const;

  // /proc/self/mounts-like listing.
  std::string MountsText(const Location& root) const;
  // /proc/self/mountinfo: ids, parents, devices and mountpoints.
  std::string MountInfoText(const Location& root) const;
  // Every mount by id, with where it is mounted as seen from `root`.
  std::vector<std::pair<std::shared_ptr<Mount>, std::string>> MountsInOrder(
      const Location& root) const;

 private:
  friend struct ::sandboxd::state::FsState;
  // Steps from a directory to its child or parent; crosses mounts.
  int Step(const Location& root, const Location& cur, const std::string& name,
           Location* out);
  Location MountedOn(const Location& loc) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops the cached dentries nobody uses: held by the cache alone, their
  // inode by nothing else, without children or mounts. A host file's
  // descriptors go with its inode (hostfs keeps one per file looked up),
  // so a lookup that meets the host's descriptor limit calls this and
  // tries again. Returns how many went.
  size_t PruneUnusedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int Walk(const FsContext& ctx, Location cur, const std::string& path,
           bool follow_last, int* symlinks, Location* out);

  mutable absl::Mutex mu_;
  std::shared_ptr<Mount> root_mount_;
  std::map<std::pair<const Mount*, const Dentry*>, std::shared_ptr<Mount>>
      mounts_ ABSL_GUARDED_BY(mu_);
  uint64_t next_mount_id_ ABSL_GUARDED_BY(mu_) = 1;
};

// Linux's limits on names and paths.
inline constexpr size_t kNameMax = 255;
inline constexpr size_t kPathMax = 4096;
inline constexpr int kMaxSymlinks = 40;

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_VFS_H_
