// hostfs: a host directory as a read-only filesystem (the sandbox's rootfs,
// under the overlay that takes its writes).
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
// Locks: each inode has two leaf locks (its child cache, its lazily opened
// read fd); hostfs never holds two at once, nor one while calling out.
#ifndef SANDBOXD_SENTRY_FS_HOSTFS_H_
#define SANDBOXD_SENTRY_FS_HOSTFS_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "sentry/fs/inode.h"

namespace sandboxd::fs::hostfs {

// The root inode of a hostfs over `dir_fd`, a host directory (O_PATH is
// enough; OpenRootfs gives one). Every inode of this filesystem reports
// st_dev == `dev`. Fails if `dir_fd` is not a directory.
absl::StatusOr<std::shared_ptr<Inode>> NewRoot(UniqueFd dir_fd, uint64_t dev);

}  // namespace sandboxd::fs::hostfs

#endif  // SANDBOXD_SENTRY_FS_HOSTFS_H_
