// The host's half of the `sandbox` network mode (NETWORK_MODE_SANDBOX,
// `--network=sandbox`): pasta (Debian's passt package) gives a sandbox's
// own network namespace an interface with the host's address, a default
// route and outbound access through host sockets, maps the gateway address
// to the host's loopback, and forwards published ports (-p) into it. See
// README.md, "The sandbox mode", for why pasta and not veth + NAT.
//
// Whoever made the namespace starts pasta for it (sentry run: a helper
// process forked before the namespace; sandboxd: the daemon, for a warm
// Sentry's namespace) and owns the `Pasta` handle: destroying it ends
// pasta, the only thing on the host this mode sets up. Nothing of the
// host's own network configuration is changed.
#ifndef SANDBOXD_SENTRY_SOCKET_SANDBOX_NET_H_
#define SANDBOXD_SENTRY_SOCKET_SANDBOX_NET_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "proto/sandbox.pb.h"

namespace sandboxd::sandbox_net {

using Ports = std::vector<v1::PortMapping>;

// FAILED_PRECONDITION naming the first published port that a socket on
// the host holds already ("127.0.0.1:8080:80/tcp: port 8080 on 127.0.0.1
// is already in use"); INVALID_ARGUMENT for a port given twice.
absl::Status CheckPortsFree(const Ports& ports);

// The arguments pasta is run with (without argv[0]) for a namespace
// reached as /proc/self/fd/`netns_fd` (and `userns_fd`, -1 when pasta
// needs not join a user namespace), writing its pid to `pid_path`.
std::vector<std::string> PastaArgs(const Ports& ports, int netns_fd,
                                   int userns_fd, const std::string& pid_path);

// A running pasta. Move-only; destroying it (or Stop) ends pasta: SIGTERM,
// then SIGKILL if it has not gone within a second.
class Pasta {
 public:
  Pasta() = default;
  Pasta(Pasta&& o) noexcept
      : pid_(std::exchange(o.pid_, -1)), pidfd_(std::move(o.pidfd_)) {}
  Pasta& operator=(Pasta&& o) noexcept {
    if (this != &o) {
      Stop();
      pid_ = std::exchange(o.pid_, -1);
      pidfd_ = std::move(o.pidfd_);
    }
    return *this;
  }
  Pasta(const Pasta&) = delete;
  Pasta& operator=(const Pasta&) = delete;
  ~Pasta() { Stop(); }

  // Starts pasta for the network namespace of host process `pid` and
  // waits until it has configured the namespace and bound the published
  // ports. The user namespace of `pid` is joined too when it is not the
  // caller's. FAILED_PRECONDITION if `pid` is in the caller's network
  // namespace; other errors carry pasta's own message.
  static absl::StatusOr<Pasta> StartForPid(pid_t pid, const Ports& ports);
  // The same for namespaces held as fds (userns -1: the caller's).
  static absl::StatusOr<Pasta> Start(int netns, int userns, const Ports& ports);
  // The running pasta `pid` that an earlier daemon started (a restarted
  // sandboxd's re-adopted sandbox): Stop ends it as if started here. The
  // caller has checked that `pid` is still that process (its start time).
  static absl::StatusOr<Pasta> Adopt(pid_t pid);

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  void Stop();

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
};

// /etc/hosts and /etc/resolv.conf of a network mode, written over the
// rootfs's (sentry run, and sandboxd's Start):
//   none (and UNSPECIFIED): localhost, `hostname` on 127.0.1.1 (as
//     Debian's installer writes it), no name server (none is reachable);
//   sandbox: the same hosts, and the host's resolv.conf without loopback
//     name servers (the sandbox cannot reach those), Google's public
//     servers if none is left: what docker writes for its bridge;
//   host: the host's own files (one the host lacks is left out).
std::vector<std::pair<std::string, std::string>> EtcFilesFor(
    v1::NetworkMode mode, const std::string& hostname);

}  // namespace sandboxd::sandbox_net

#endif  // SANDBOXD_SENTRY_SOCKET_SANDBOX_NET_H_
