// The daemon backend: a container's sandbox taken from sandboxd's warm
// pool over its gRPC API (client/client.h) instead of a Sentry of the
// runtime's own. Chosen by --sandboxd-socket=PATH or SANDBOXD_OCI_SOCKET.
//
// The init proxy (`sandboxd-oci daemon-proxy`, exec'd by create's child)
// creates the sandbox (named by the container's id) during `create`, waits
// on exec.fifo, then attaches to its init (Exec with attach and remove:
// the daemon destroys the sandbox when the call ends), relaying its stdio
// to the proxy's own (the shim's pipes, or the console pty set raw, whose
// line discipline is the sandbox's own), and exits with its status. Its
// signals go to the init with Signal. `exec` forks an exec proxy that runs
// the process with Exec and exits with its status; `kill --all` is Signal
// with all.
#ifndef SANDBOXD_CLIENT_OCI_DAEMON_PROXY_H_
#define SANDBOXD_CLIENT_OCI_DAEMON_PROXY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/oci/spec.h"
#include "proto/sandbox.pb.h"

namespace sandboxd::oci {

struct DaemonProxyOptions {
  std::string socket;
  std::string root;
  std::string id;
  LaunchSpec spec;
  int report_fd = -1;  // create's pipe: errors before the fifo wait, as text
};

// Never returns.
[[noreturn]] void RunDaemonInitProxy(const DaemonProxyOptions& o);

// exec's child (forked by a process that has not started gRPC): runs
// `process` in sandbox `id`, writes "0" to `report_fd` once it runs (else
// the error), and exits with its status. Never returns.
[[noreturn]] void RunDaemonExecProxy(const std::string& socket, const std::string& id,
                                     const LaunchSpec& process, int report_fd);

// Signal, or with `all` every process of the sandbox.
absl::Status DaemonSignal(const std::string& socket, const std::string& id, int sig,
                          bool all);
// Update: sandbox `id`'s limits (0 fields keep theirs, `lifted` ones are
// removed).
absl::Status DaemonUpdate(const std::string& socket, const std::string& id,
                          const v1::Limits& limits, const v1::LimitsLifted& lifted);
// Pause (`pause`) or Resume: every process of sandbox `id`.
absl::Status DaemonPause(const std::string& socket, const std::string& id, bool pause);
// Checkpoint: sandbox `id` into `image_dir` (absolute; the daemon makes
// it), then stopped unless `leave_running`.
absl::Status DaemonCheckpoint(const std::string& socket, const std::string& id,
                              const std::string& image_dir, bool leave_running);
// Sandbox `id` as the daemon describes it (its usage, its limits).
absl::StatusOr<v1::SandboxInfo> DaemonGet(const std::string& socket, const std::string& id);
// Destroys sandbox `id` (delete --force); NOT_FOUND when it is gone.
absl::Status DaemonDestroy(const std::string& socket, const std::string& id);

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_DAEMON_PROXY_H_
