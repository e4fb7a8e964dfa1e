// The command-line spellings of SandboxSpec.mounts, shared by sandboxctl
// and `sentry run` (docker's syntax):
//   -v HOST:DIR[:ro|rw]                     a bind mount, writable unless :ro
//   --mount type=bind,source=HOST,target=DIR[,readonly|ro]
//   --mount type=tmpfs,target=DIR[,tmpfs-size=BYTES][,tmpfs-mode=OCTAL]
//   --tmpfs DIR[:OPTIONS]                   OPTIONS as mount(2)'s: size=64m,mode=1777
#ifndef SANDBOXD_PROTO_MOUNT_SPEC_H_
#define SANDBOXD_PROTO_MOUNT_SPEC_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"
#include "proto/sandbox.pb.h"

namespace sandboxd {

absl::StatusOr<v1::Mount> ParseVolumeFlag(absl::string_view v);
absl::StatusOr<v1::Mount> ParseMountFlag(absl::string_view v);
absl::StatusOr<v1::Mount> ParseTmpfsFlag(absl::string_view v);

// Opens a bind mount's host source as the Sentry takes it: a directory
// O_PATH|O_DIRECTORY, a regular file O_RDONLY (O_RDWR when writable);
// symlinks, the last component's too, are followed on the host now, as
// docker does at create. Errors name `field`.
absl::StatusOr<UniqueFd> OpenBindSource(const v1::Mount& m,
                                        absl::string_view field);

}  // namespace sandboxd

#endif  // SANDBOXD_PROTO_MOUNT_SPEC_H_
