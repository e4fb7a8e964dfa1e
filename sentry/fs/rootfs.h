// The sandbox's root filesystem: a host directory, opened once, into which
// every lookup is confined by openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
// — absolute symlinks and ".." resolve inside it, never to the host. No
// host path string is ever built from an application path.
#ifndef SANDBOXD_SENTRY_FS_ROOTFS_H_
#define SANDBOXD_SENTRY_FS_ROOTFS_H_

#include <string>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace sandboxd::fs {

// Opens the rootfs directory itself (O_PATH).
absl::StatusOr<UniqueFd> OpenRootfs(const std::string& host_dir);

// Opens `path` (relative to the root, or absolute meaning the same) inside
// `root_fd` read-only. Returns the fd or -errno.
int64_t OpenInRoot(int root_fd, const std::string& path, int flags);

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_ROOTFS_H_
