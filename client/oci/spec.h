// An OCI bundle's config.json as the Sentry runs it. ParseConfig takes the
// runtime-spec JSON and returns what `sentry run` needs (LaunchSpec), or an
// InvalidArgument error that names the first field the Sentry cannot honour
// ("linux.namespaces[2].path: ..."). Nothing the spec asks for is dropped
// silently: every field is either carried over, enforced by the sandbox's
// own design (README.md lists which), or refused.
#ifndef SANDBOXD_CLIENT_OCI_SPEC_H_
#define SANDBOXD_CLIENT_OCI_SPEC_H_

#include <sys/resource.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sandboxd::oci {

struct LaunchSpec {
  std::string rootfs;  // absolute host path
  bool read_only_root = false;
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::string cwd = "/";
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  bool terminal = false;
  std::string hostname;
  // The mounts as `sentry run` flags (-v HOST:DIR:ro|rw, --tmpfs DIR:OPTS),
  // in the spec's order.
  std::vector<std::string> mount_flags;
  // linux.resources: as the sandbox sees and enforces them (0: none).
  uint64_t memory_bytes = 0;
  uint64_t cpus = 0;  // whole CPUs, the quota rounded up
  uint64_t pids = 0;
  // -1 (unlimited) given for memory.limit, cpu.quota, pids.limit: none at
  // create; an update lifts that limit, as runc's.
  bool memory_unlimited = false;
  bool cpu_unlimited = false;
  bool pids_unlimited = false;
  // linux.namespaces' network: none given = the host's (as runc), one
  // without a path = the sandbox's own, loopback only; a path = joined.
  enum class Network { kHost, kOwn, kJoin };
  Network network = Network::kHost;
  std::string netns_path;
  // process.rlimits the init proxy sets on itself before the Sentry starts.
  std::vector<std::pair<int, rlimit>> rlimits;
  std::map<std::string, std::string> annotations;
  // linux.namespaces' uts path (a pod's): the host name is read from it
  // when `hostname` is empty.
  std::string utsns_path;
  // linux.cgroupsPath: where the container's accounting cgroup goes
  // (cgroup.h); "" none.
  std::string cgroups_path;
  // `restore --image-path`: the checkpoint image the sandbox is restored
  // from instead of starting process.args (not from config.json).
  std::string restore_image;
  // Fields accepted but not applied, each naming the field and why: create
  // logs them as warnings (README.md lists them).
  std::vector<std::string> notes;
};

// `bundle` is the absolute bundle directory (root.path is relative to it).
absl::StatusOr<LaunchSpec> ParseConfig(absl::string_view json,
                                       const std::string& bundle);

// For a served Sentry (sentry serve, sandboxd), which writes the
// sandbox's /etc/hostname itself from spec.hostname: a bind mount at
// /etc/hostname (podman's) whose file holds that name is dropped (the
// sandbox has the same file); one with another name is an error.
absl::Status ForServedSentry(LaunchSpec* spec);

// The process of `exec --process=FILE` (a runtime-spec "process" object).
absl::StatusOr<LaunchSpec> ParseProcess(absl::string_view json);

// `update --resources=FILE` (a runtime-spec "linux.resources" object), by
// config.json's rules: memory_bytes, cpus, pids (0: not given) and notes.
absl::StatusOr<LaunchSpec> ParseResourcesUpdate(absl::string_view json);

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_SPEC_H_
