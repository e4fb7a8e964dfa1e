// hostfs: a host directory as a filesystem: read-only for the sandbox's
// rootfs (under the overlay that takes its writes) and read-only bind
// mounts; writable, straight to the host, for bind mounts asked rw. A bind
// mount may also be a single host file.
//
// Every inode owns an O_PATH|O_NOFOLLOW fd of its host file, and a lookup
// opens exactly one component relative to its directory's fd — never a
// path string, never "..", never following a symlink. The VFS walks ".."
// and symlinks itself, inside the sandbox's tree, so nothing the
// application names can reach a host file outside the rootfs.
//
// The host's device numbers are hidden: every inode reports the `dev` the
// filesystem was created with. Inode numbers are the host's. (A rootfs
// spanning several host filesystems could show two files with one inode
// number; the rootfs is expected to be one filesystem.)
//
// Writes (a writable filesystem only) are each one host call relative to
// a directory's fd with one name (openat O_CREAT|O_EXCL|O_NOFOLLOW,
// mkdirat, symlinkat, unlinkat, renameat2, linkat); new files are owned
// by the Sentry's host uid and gid, as runsc's gofer makes them, and a
// regular file never gets a set-user-ID or set-group-ID bit there. Renames
// and links between two hostfs filesystems are EXDEV (the VFS already
// refuses them across mounts).
//
// Locks: each inode has a child-cache lock, an I/O-descriptor lock and a
// name lock (its parent and name, which a rename changes); the name lock
// may be taken under the I/O one (reopening by name), otherwise hostfs
// never holds two at once, nor one while calling out.
#ifndef SANDBOXD_SENTRY_FS_HOSTFS_H_
#define SANDBOXD_SENTRY_FS_HOSTFS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "sentry/fs/inode.h"

namespace sandboxd::mm {
class MemoryFile;
}  // namespace sandboxd::mm

namespace sandboxd::fs::hostfs {

// The root inode of a hostfs over `dir_fd`, a host directory (O_PATH is
// enough; OpenRootfs gives one). Every inode of this filesystem reports
// st_dev == `dev`. Fails if `dir_fd` is not a directory.
absl::StatusOr<std::shared_ptr<Inode>> NewRoot(UniqueFd dir_fd, uint64_t dev);

struct MountOptions {
  bool writable = false;
  // Names the mount in a checkpoint (its target in the sandbox): a file
  // of it is saved as (label, path from the root) and found again under
  // the root the restore hands in with the same label.
  std::string label;
};

// The root of a bind mount: `fd` is a host directory (O_PATH is enough)
// or a regular file, then opened O_RDONLY, or O_RDWR for a writable mount
// (its I/O goes through it: a lone file has no directory to reopen it
// from).
absl::StatusOr<std::shared_ptr<Inode>> NewMountRoot(UniqueFd fd, uint64_t dev,
                                                    const MountOptions& o);

// Whether `inode` is a hostfs inode.
bool IsHostInode(const Inode& inode);
// For a hostfs inode: its root's label and its path from that root ("/"
// for the root). False for other inodes and for a file whose name on the
// host no longer leads to it.
bool PathOf(Inode& inode, std::string* label, std::string* path);

// The pages of a regular file of a writable hostfs that MAP_SHARED
// mappings use: page `index` of the file is one memory-file page, read
// from the host when first asked for, so that every shared mapping in the
// sandbox maps the same page. read() and write() of the file go to the
// host and see (and update) these pages; they are written back to the
// host (up to its current size: mappings never grow a file) by Writeback
// (msync, fsync, close, a checkpoint, every 5 s from a writeback thread),
// at the end of each mapping (munmap) and before a process's exit is
// reported, and freed when the last mapping ends. Writeback writes only
// the pages whose bytes changed since they were read or last written back
// (a hash per page), so a change the host makes meanwhile to a page the
// sandbox did not write is not overwritten (though the sandbox keeps
// seeing its cached copy of it). One per inode.
class PageCache {
 public:
  virtual ~PageCache() = default;
  // A mapping begins (counted until EndMapping). Until the pages are
  // freed, Writeback writes only if some mapping `may_write`.
  virtual void BeginMapping(bool may_write) = 0;
  // A mapping ended: writes back; the last one frees the pages.
  virtual void EndMapping() = 0;
  // The memory-file offset of page `index`, read from the host the first
  // time. -errno (-ENOMEM: the memory file is full). `ref`: one memory-
  // file reference is added for the caller (mm::Mappable::SharedPage).
  virtual int GetPage(uint64_t index, uint64_t* memfile_off, bool ref) = 0;
  // Writes every page back to the host file; -errno of the first failure.
  virtual int Writeback() = 0;
};

// The page cache of `inode`, a regular file of a writable hostfs, with
// its pages in `mf` (the sandbox's memory file, the same for every call);
// null for other inodes.
std::shared_ptr<PageCache> SharedPageCache(Inode& inode, mm::MemoryFile* mf);

// The owners the sandbox gave host files by chown in a writable hostfs
// (README.md, "Owners in a writable bind mount"), by host identity. What
// a checkpoint saves with the mount's root and a restore adds back.
struct OwnerRecord {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
};
// The record of the filesystem `inode` is in, sorted by (dev, ino); empty
// for other inodes.
std::vector<OwnerRecord> Owners(Inode& inode);
// Adds `records` to the record of the filesystem `inode` is in (nothing
// for other inodes).
void AddOwners(Inode& inode, const std::vector<OwnerRecord>& records);

}  // namespace sandboxd::fs::hostfs

#endif  // SANDBOXD_SENTRY_FS_HOSTFS_H_
