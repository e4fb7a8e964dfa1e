#include "base/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"

namespace sandboxd {

absl::StatusOr<std::string> ReadAll(int fd, const std::string& path) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StrCat("reading ", path), errno);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("opening ", path), errno);
  return ReadAll(fd.get(), path);
}

}  // namespace sandboxd
