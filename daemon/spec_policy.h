// What a Create may ask for, decided before anything is allocated: which
// host directory becomes the root (the daemon's default image when the
// spec names none; --allowed-roots restricts the others), the daemon-wide
// default limits, and the accepted range of every limit and of the labels.
// Each refusal is INVALID_ARGUMENT (or FAILED_PRECONDITION for a default
// image that is missing) naming the field and what is accepted.
#ifndef SANDBOXD_DAEMON_SPEC_POLICY_H_
#define SANDBOXD_DAEMON_SPEC_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "proto/sandbox.pb.h"

namespace sandboxd {
namespace daemon {

// The host's ranges for the limits (HostRanges::Read() measures them).
struct HostRanges {
  // The Sentry itself (threads, memory file, a stub) is charged to the
  // sandbox's cgroup: `sh -c ls` peaked at 11 MiB; below this minimum a
  // sandbox would be OOM-killed at its start.
  uint64_t min_memory_bytes = 16ull << 20;
  uint64_t max_memory_bytes = 0;  // MemTotal + SwapTotal
  // cpu.max / cfs_quota_us: the kernel's minimum quota is 1 ms per period
  // (100 ms here), i.e. 10 milli-CPUs.
  uint64_t min_cpu_millis = 10;
  uint64_t max_cpu_millis = 0;  // online CPUs * 1000
  uint64_t min_pids = 1;
  uint64_t max_pids = 0;  // min(kernel.pid_max, kernel.threads-max)

  // The running host's figures (from /proc).
  static HostRanges Read();
};

// Labels: at most this many, keys 1..kMaxLabelKey bytes of printable
// ASCII without '=', values up to kMaxLabelValue bytes without NUL.
inline constexpr size_t kMaxLabels = 64;
inline constexpr size_t kMaxLabelKey = 128;
inline constexpr size_t kMaxLabelValue = 1024;

struct SpecPolicy {
  // The root of a spec that names none: the image setup builds (""
  // for none: such a spec is refused).
  std::string default_rootfs;
  // Host directories (and everything below them) that a spec may name
  // as its root; empty: any. The default image is always allowed.
  std::vector<std::string> allowed_roots;
  // Host directories (and everything below them) where checkpoint images
  // may be written: spec.checkpoint_dir and Checkpoint's image_dir
  // (sandboxd --checkpoint-roots); empty: anywhere.
  std::vector<std::string> checkpoint_roots;
  // Limits applied when the spec's is 0 (0 here: none).
  uint64_t default_memory_bytes = 0;
  uint64_t default_cpu_millis = 0;
  uint64_t default_pids = 0;
  HostRanges ranges;
};

// Checks `limits` against `ranges`; `field` prefixes the messages
// ("spec.limits"). 0 is "no limit" and always accepted.
absl::Status ValidateLimits(const v1::Limits& limits, const HostRanges& ranges,
                            const std::string& field);

// Checks the labels' count and sizes.
absl::Status ValidateLabels(const v1::SandboxSpec& spec);

// Fills the limits the spec leaves at 0 with the policy's defaults.
void ApplyDefaultLimits(const SpecPolicy& policy, v1::Limits* limits);

// Checks spec.mounts and opens each bind mount's source (proto/
// mount_spec.h OpenBindSource: a directory O_PATH, a file O_RDONLY or
// O_RDWR), in order: an absolute host path that exists and, with
// allowed_roots, is one of them or below one (checked on what was opened;
// PERMISSION_DENIED naming spec.mounts[N].source).
absl::StatusOr<std::vector<UniqueFd>> OpenBindMounts(const SpecPolicy& policy,
                                                     const v1::SandboxSpec& spec);

// Opens the spec's root (O_PATH|O_DIRECTORY): the default image when
// spec->rootfs() is empty (and then sets it, so that Get shows it), else
// the named host directory, which must be absolute and, with
// allowed_roots, be one of them or below one (checked on what was opened,
// after symlinks and "..", not on the string).
absl::StatusOr<UniqueFd> OpenRootfs(const SpecPolicy& policy,
                                    v1::SandboxSpec* spec);

// The spec's checkpoint_dir (self-checkpoints), opened O_PATH|O_DIRECTORY
// for the Sentry: absolute, made when missing (not its parents), and with
// checkpoint_roots one of them or below one (PERMISSION_DENIED). An
// invalid fd when the spec names none (and then checkpoint_limit must be
// 0). INVALID_ARGUMENT naming the field otherwise.
absl::StatusOr<UniqueFd> OpenCheckpointDir(const SpecPolicy& policy,
                                           const v1::SandboxSpec& spec);

// The spec's network_namespace, opened for setns(2): an absolute path of
// an nsfs file whose namespace is a network one; its network must be NONE
// or UNSPECIFIED and it must publish no ports. An invalid fd when the spec
// names none. INVALID_ARGUMENT naming the field otherwise.
absl::StatusOr<UniqueFd> OpenNetworkNamespace(const v1::SandboxSpec& spec);

// PERMISSION_DENIED unless the directory `fd` (named `path` by `field`)
// is under one of policy.checkpoint_roots (or there are none).
absl::Status CheckCheckpointRoot(const SpecPolicy& policy, int fd,
                                 const std::string& field,
                                 const std::string& path);

// The same for a directory `path` that may not exist yet (to be made in
// its parent), before anything is made.
absl::Status CheckCheckpointTarget(const SpecPolicy& policy, const std::string& field,
                                   const std::string& path);

// Whether `process` can start in the rootfs `rootfs` (OpenRootfs's
// descriptor), as far as that is known at create, when the sandbox's
// overlay is still empty: its cwd exists there and is a directory
// (FAILED_PRECONDITION naming `field`.cwd), and argv[0] (a path, or a
// name searched in the process's PATH, else the default PATH, as the
// Sentry does) is there: NOT_FOUND when it is nowhere, FAILED_PRECONDITION
// when it is not an executable file, both naming `field`.argv[0] (clients
// exit 127 and 126 for them, as for a start that fails so). Paths resolve
// inside the rootfs (openat2 RESOLVE_IN_ROOT, no magic links). What the
// Sentry mounts itself (/proc, /dev, /sys) and a failure other than a
// missing file are left for the start to judge.
absl::Status CheckProcessInRootfs(int rootfs, const v1::ProcessSpec& process,
                                  const std::string& field);

// "4k", "256m", "2g", "1048576" -> bytes.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& s);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_SPEC_POLICY_H_
