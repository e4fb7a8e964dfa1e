// The container's host cgroup for accounting: the directories of
// linux.cgroupsPath in the hierarchies whose numbers containerd's shim
// reads for `ctr task metrics` (it loads the cgroups of the init proxy's
// pid): cpu, cpuacct, memory and pids on cgroup v1, the one directory on
// v2. The init proxy joins them before its exec, so that the Sentry and
// its stub processes (the sandbox's whole host footprint) are counted
// there. No limit is written: the Sentry enforces the spec's limits itself.
#ifndef SANDBOXD_CLIENT_OCI_CGROUP_H_
#define SANDBOXD_CLIENT_OCI_CGROUP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sandboxd::oci {

// Makes the directories of `path` (absolute, "/default/ID" as containerd
// gives it) under `mount` (/sys/fs/cgroup unless a test says otherwise)
// and returns them, deepest last per hierarchy. A systemd form
// ("slice:prefix:name") is InvalidArgument: the caller logs it.
absl::StatusOr<std::vector<std::string>> MakeAccountingCgroups(
    const std::string& path, const std::string& mount = "/sys/fs/cgroup");

// Removes what MakeAccountingCgroups made, once no process is left in
// them (retried for a short while: the last exits are being reaped).
void RemoveCgroups(const std::vector<std::string>& dirs);

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_CGROUP_H_
