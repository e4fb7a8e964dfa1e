// The checkpoint image's framing: every file of an image directory
// (state.pb, pages.idx) starts with a fixed header that names the file's
// kind, the format version and a CRC-32C of the payload, so that a loader
// refuses a foreign, newer or damaged file with a clear error instead of
// misreading it.
//
//   offset 0   char[8]  magic   ("SBXSTATE", "SBXPGIDX")
//          8   u32      format version (kFormatVersion)
//         12   u32      CRC-32C of the payload
//         16   u64      payload length in bytes
//         24   payload
//
// All integers little-endian (the Sentry runs on x86-64 only).
#ifndef SANDBOXD_SENTRY_STATE_IMAGE_H_
#define SANDBOXD_SENTRY_STATE_IMAGE_H_

#include <fcntl.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file_util.h"  // ReadWholeFile, for the image's readers
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "sentry/state/state.pb.h"

namespace sandboxd::state {

namespace pb = ::sandboxd::state::v1;

// Bumped whenever a loader could not read older images correctly.
inline constexpr uint32_t kFormatVersion = 1;

inline constexpr char kStateMagic[8] = {'S', 'B', 'X', 'S', 'T', 'A', 'T', 'E'};
inline constexpr char kPageIndexMagic[8] = {'S', 'B', 'X', 'P',
                                            'G', 'I', 'D', 'X'};
inline constexpr size_t kHeaderSize = 24;

// `payload` behind a header.
std::string Frame(const char (&magic)[8], absl::string_view payload);
// The payload of a framed file; errors name `what` (a file name) and
// the problem: wrong magic, unsupported version, truncation, checksum.
absl::StatusOr<std::string> Unframe(const char (&magic)[8],
                                    absl::string_view data,
                                    absl::string_view what);

// state.pb: the serialized State, framed.
absl::StatusOr<std::string> EncodeState(const pb::State& state);
absl::StatusOr<pb::State> DecodeState(absl::string_view data,
                                      absl::string_view what = "state.pb");

// An image directory: the descriptor its files are opened relative to
// (openat, O_PATH|O_DIRECTORY is enough) and the name errors give it. A
// path alone (AT_FDCWD) converts implicitly. A warm Sentry's root is
// empty: it reaches the daemon's image directory only through the
// descriptor it was sent.
struct ImageDir {
  ImageDir(const std::string& path) : name(path) {}  // NOLINT: implicit
  ImageDir(const char* path) : name(path) {}         // NOLINT: implicit
  ImageDir(int dir_fd, std::string dir_name)
      : fd(dir_fd), name(std::move(dir_name)) {}
  // What openat(2) takes for `file` relative to fd.
  std::string At(absl::string_view file) const {
    return fd == AT_FDCWD ? absl::StrCat(name, "/", file) : std::string(file);
  }
  // `file` in errors.
  std::string Path(absl::string_view file) const {
    return absl::StrCat(name, "/", file);
  }
  int fd = AT_FDCWD;
  std::string name;
};

// `file` of `dir`, opened with openat(2); -1 and errno on failure.
int OpenIn(const ImageDir& dir, absl::string_view file, int flags,
           mode_t mode = 0);
// The whole of `file` of `dir`; errors name dir/file.
absl::StatusOr<std::string> ReadFileIn(const ImageDir& dir,
                                       absl::string_view file);

// Whole files (written to a temporary name and renamed into place, so that
// a crash never leaves a half-written file under the final name). Without
// `sync` the data is not fsync'ed first: for an image directory, whose
// manifest checksums find a file a crash left short (image_dir.h).
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view data, bool sync = true);
// `file` of `dir`, by way of `file`.tmp.
absl::Status WriteFileIn(const ImageDir& dir, absl::string_view file,
                         absl::string_view data, bool sync = true);

// <dir>/state.pb.
absl::Status WriteStateFile(const ImageDir& dir, const pb::State& state,
                            bool sync = true);
absl::StatusOr<pb::State> ReadStateFile(const ImageDir& dir);

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_IMAGE_H_
