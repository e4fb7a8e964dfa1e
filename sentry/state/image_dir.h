// A whole image directory: saving a stopped sandbox into one and checking
// one before a load.
//
//   manifest.pb  header ("SBXMANIF") + Manifest (state.proto): format
//                version, the Sentry's build id, platform, spec, memory in
//                use, the host clocks at the save, and every other file's
//                size and CRC-32C
//   state.pb     header + State
//   pages.img    non-zero memory-file pages, page-aligned
//   pages.idx    header + page records
//
// The directory is written under a temporary name beside the final one
// (DIR.tmp.PID) and renamed into place when complete: a crash leaves no
// half image under DIR. An existing DIR is replaced.
//
// CheckImage refuses, with an error that names the file or the field, a
// missing file, a truncated or damaged one (size or checksum against the
// manifest; the framed files' own headers are checked again when read),
// a foreign manifest, another format version, another build, another
// platform and a smaller memory limit than the image needs. Another boot's
// image is fine: the sandbox's CLOCK_MONOTONIC goes on from its saved
// value on any host (KernelState::LoadClocks).
#ifndef SANDBOXD_SENTRY_STATE_IMAGE_DIR_H_
#define SANDBOXD_SENTRY_STATE_IMAGE_DIR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/stage_clock.h"
#include "sentry/fs/inode.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/kernel.h"
#include "sentry/state/image.h"
#include "sentry/state/state.pb.h"

namespace sandboxd::state {

namespace pb = ::sandboxd::state::v1;

inline constexpr char kManifestMagic[8] = {'S', 'B', 'X', 'M',
                                           'A', 'N', 'I', 'F'};

// The running Sentry binary's ELF build id, hex ("none" without one).
const std::string& SentryBuildId();

struct SaveOptions {
  std::string platform;  // Platform::Name()
  std::string spec;      // serialized control Spec, or empty
  // fsync every file before the rename. Off by default: a crash that
  // leaves a file short or stale is found by the manifest's checksums,
  // and a sync costs tens of milliseconds on a busy disk.
  bool sync = false;
};

struct SaveResult {
  uint64_t state_bytes = 0;
  uint64_t pages_bytes = 0;  // pages.img
  uint64_t pages = 0;        // non-zero pages stored
  uint64_t memory_bytes = 0;
  // Nanoseconds: objects into the State (with the pages copied into
  // pages.img), the files written and synced, the directory renamed.
  int64_t save_ns = 0, write_ns = 0;
};

// Saves `k` (stopped: Kernel::StopTheWorld), its mount tree `vfs` and the
// Sentry's locks into the image directory `dir`. `rootfs` is the hostfs
// root under the overlay, which a restore reopens. An object that cannot
// be saved fails it, naming the object; nothing is left at `dir` then.
// `clock` (may be null) gets checkpoint.save and checkpoint.write.
absl::StatusOr<SaveResult> SaveImage(const std::string& dir, kernel::Kernel& k,
                                     const fs::Vfs& vfs, const void* rootfs,
                                     const SaveOptions& opts,
                                     StageClock* clock = nullptr);

// As SaveImage, into the existing directory `dir_fd` (O_PATH|O_DIRECTORY
// is enough), named `name` in errors: what a warm Sentry, whose root is
// empty, is sent by the daemon. The directory must hold no image
// (manifest.pb); every file is written as NAME.tmp and renamed, the
// manifest last, so that a directory without manifest.pb is never taken
// for an image. A failed save removes what it wrote.
absl::StatusOr<SaveResult> SaveImageInto(int dir_fd, const std::string& name,
                                         kernel::Kernel& k, const fs::Vfs& vfs,
                                         const void* rootfs,
                                         const SaveOptions& opts,
                                         StageClock* clock = nullptr);

struct CheckOptions {
  std::string platform;       // the loading Sentry's
  uint64_t memory_limit = 0;  // 0: none
};

// Reads manifest.pb and checks the image against it and `opts`. `dir` is
// a path or a directory descriptor (image.h).
absl::StatusOr<pb::Manifest> CheckImage(const ImageDir& dir,
                                        const CheckOptions& opts);

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_IMAGE_DIR_H_
