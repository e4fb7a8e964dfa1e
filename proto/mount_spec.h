// The command-line spellings of SandboxSpec.mounts and .ports, shared by
// sandboxctl and `sentry run` (docker's syntax):
//   -v HOST:DIR[:ro|rw]                     a bind mount, writable unless :ro
//   --mount type=bind,source=HOST,target=DIR[,readonly|ro]
//   --mount type=tmpfs,target=DIR[,tmpfs-size=BYTES][,tmpfs-mode=OCTAL]
//   --tmpfs DIR[:OPTIONS]                   OPTIONS as mount(2)'s: size=64m,mode=1777
//   -p [IP:]HOSTPORT:PORT[/tcp|/udp]        a published port; IP defaults to
//                                           127.0.0.1 (docker's is 0.0.0.0);
//                                           an IPv6 IP in brackets: [::1]:8080:80
#ifndef SANDBOXD_PROTO_MOUNT_SPEC_H_
#define SANDBOXD_PROTO_MOUNT_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"
#include "proto/sandbox.pb.h"

namespace sandboxd {

absl::StatusOr<v1::Mount> ParseVolumeFlag(absl::string_view v);
absl::StatusOr<v1::Mount> ParseMountFlag(absl::string_view v);
absl::StatusOr<v1::Mount> ParseTmpfsFlag(absl::string_view v);
absl::StatusOr<v1::PortMapping> ParsePublishFlag(absl::string_view v);

// A published port as the user wrote it: "127.0.0.1:8080:80/tcp".
std::string PortMappingString(const v1::PortMapping& p);

// Opens a bind mount's host source as the Sentry takes it: a directory
// O_PATH|O_DIRECTORY, a regular file O_RDONLY (O_RDWR when writable);
// symlinks, the last component's too, are followed on the host now, as
// docker does at create. Errors name `field`.
absl::StatusOr<UniqueFd> OpenBindSource(const v1::Mount& m,
                                        absl::string_view field);

}  // namespace sandboxd

#endif  // SANDBOXD_PROTO_MOUNT_SPEC_H_
