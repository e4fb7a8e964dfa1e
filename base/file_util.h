// Small helpers for host files.
#ifndef SANDBOXD_BASE_FILE_UTIL_H_
#define SANDBOXD_BASE_FILE_UTIL_H_

#include <string>

#include "absl/status/statusor.h"

namespace sandboxd {

// The whole content of the host file at `path` (read() until EOF, so that
// /proc, /sys and cgroupfs files, whose size says nothing, read whole).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace sandboxd

#endif  // SANDBOXD_BASE_FILE_UTIL_H_
