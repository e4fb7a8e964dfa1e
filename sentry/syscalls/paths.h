// Path arguments of syscalls: reading them from user memory and resolving
// them relative to a directory fd, as every *at() syscall does.
#ifndef SANDBOXD_SENTRY_SYSCALLS_PATHS_H_
#define SANDBOXD_SENTRY_SYSCALLS_PATHS_H_

#include <string>

#include "sentry/fs/vfs.h"
#include "sentry/kernel/task.h"
#include "sentry/syscalls/args.h"

namespace sandboxd::syscalls {

// Copies in a NUL-terminated path (at most PATH_MAX); -EFAULT,
// -ENAMETOOLONG.
int64_t ReadPath(kernel::Task& t, uint64_t addr, std::string* path);
inline SysResult<std::string> ReadPath(kernel::Task& t, uint64_t addr) {
  std::string path;
  RETURN_IF_ERRNO(ReadPath(t, addr, &path));
  return path;
}

// The directory a *at() call starts from: the root for absolute paths,
// the cwd for AT_FDCWD, else the directory fd's location (-EBADF,
// -ENOTDIR).
int64_t StartDir(kernel::Task& t, int64_t dirfd, const std::string& path,
                 fs::Location* out);

// Resolves (dirfd, path); with empty_path, "" names dirfd itself.
int64_t ResolveAt(kernel::Task& t, int64_t dirfd, const std::string& path,
                  bool follow, bool empty_path, fs::Location* out);

// Resolves all but the last component of (dirfd, path).
int64_t ResolveParentAt(kernel::Task& t, int64_t dirfd,
                        const std::string& path, fs::Location* parent,
                        std::string* name, bool* trailing);

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_PATHS_H_
