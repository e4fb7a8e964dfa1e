// Small helpers for host files.
#ifndef SANDBOXD_BASE_FILE_UTIL_H_
#define SANDBOXD_BASE_FILE_UTIL_H_

#include <string>

#include "absl/status/statusor.h"

namespace sandboxd {

// Everything left to read from `fd` (read() until EOF, retrying EINTR);
// `path` names the file in the error.
absl::StatusOr<std::string> ReadAll(int fd, const std::string& path);

// The whole content of the host file at `path` (read() until EOF, so that
// /proc, /sys and cgroupfs files, whose size says nothing, read whole).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace sandboxd

#endif  // SANDBOXD_BASE_FILE_UTIL_H_
