#include "sentry/fs/rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace sandboxd::fs {

absl::StatusOr<UniqueFd> OpenRootfs(const std::string& host_dir) {
  UniqueFd fd(open(host_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    return ErrnoStatus(absl::StrCat("opening rootfs ", host_dir), errno);
  }
  return fd;
}

int64_t OpenInRoot(int root_fd, const std::string& path, int flags) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC) & ~uint64_t{O_CREAT};
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  std::string rel = path;
  while (!rel.empty() && rel[0] == '/') rel.erase(0, 1);
  if (rel.empty()) rel = ".";
  long fd;
  do {
    fd = syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof(how));
  } while (fd < 0 && errno == EAGAIN);
  return fd < 0 ? -errno : fd;
}

}  // namespace sandboxd::fs
