// The processes the shim waits for when the sandbox runs in a served
// Sentry (`sentry serve`, the control channel of proto/control.proto).
//
// The init proxy (`sandboxd-oci init-proxy`, exec'd by create's child)
// spawns the container's Sentry and waits for its Hello (during `create`),
// listens on ROOT/ID/proxy.sock, waits on exec.fifo for `start`, sends
// Start with the rootfs, the stdio it was given and the bind mounts, then
// relays: its own signals (what `kill` sends it) become Signal requests
// for the sandbox's init, and the requests of the runtime's other commands
// (exec, kill --all) that come on proxy.sock are forwarded to the Sentry
// with their descriptors, the responses sent back. It exits with the
// init's status (128+N for signal N); its exit (SIGKILL included) closes
// the channel, and the Sentry then kills the sandbox and exits.
//
// The exec proxy (`sandboxd-oci exec-proxy`, forked by `exec` once the
// process runs) waits for it (WaitPid) over its own proxy.sock connection,
// forwards its signals to it, and exits with its status.
#ifndef SANDBOXD_CLIENT_OCI_PROXY_H_
#define SANDBOXD_CLIENT_OCI_PROXY_H_

#include <string>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "client/oci/spec.h"
#include "proto/control.pb.h"

namespace sandboxd::oci {

struct InitProxyOptions {
  std::string root;
  std::string id;
  std::string sentry;
  LaunchSpec spec;
  int report_fd = -1;  // create's pipe: errors before the fifo wait, as text
};

// Never returns.
[[noreturn]] void RunInitProxy(const InitProxyOptions& o);

// A connection to the init proxy of container `id`.
absl::StatusOr<UniqueFd> ConnectProxy(const std::string& root, const std::string& id);
// One request and its response over such a connection.
absl::StatusOr<control::Response> ProxyCall(int fd, const control::Request& req,
                                            absl::Span<const int> fds = {});

// Never returns: waits for `pid` (in the sandbox) over `fd`.
[[noreturn]] void RunExecProxy(int fd, int pid);

// The ProcessSpec of a LaunchSpec's process.
v1::ProcessSpec ProcessSpecOf(const LaunchSpec& s);

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_PROXY_H_
