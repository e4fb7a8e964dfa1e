// Who may talk to the daemon: where it listens and with which credentials.
//
//   unix socket  insecure gRPC credentials; access is the file's permissions:
//                0660, group `sandboxd` when that group exists (root and the
//                group's members may connect). A socket file left by a dead
//                daemon is removed; one that still answers is an error.
//                The daemon accepts on it itself (gRPC serves each
//                connection it hands over): at most max_connections at
//                once, max_connections_per_client per peer uid; more are
//                closed at once. Out of descriptors (EMFILE, ENFILE), the
//                loop drops the pending connection with a spare descriptor
//                kept for that, backs off and goes on accepting.
//   TCP          only with TLS (certificate and key files) and a bearer token
//                (a token file): every call must carry
//                `authorization: Bearer <token>`, or it fails UNAUTHENTICATED.
//                The same accept loop takes TCP connections (the same limits,
//                per peer address), and the daemon terminates their TLS
//                itself (tls_relay.h), handing gRPC the plaintext through a
//                socketpair.
//
// Both kinds reach gRPC as insecure channels from a descriptor, so the
// token is checked here, not by gRPC's credentials: CheckCall is true
// without a token only for a call whose connection is one the unix
// socket's loop handed over (its descriptor and inode in the table);
// everything else must carry the token. Prepare installs an interceptor
// that fails such calls with UNAUTHENTICATED before any handler runs for
// every service (health, reflection), and the sandboxd service also asks
// CheckCall itself, because an interceptor cannot keep a handler from
// running.
//
// Server side: Listener::Prepare before grpc::ServerBuilder::BuildAndStart,
// Listener::AfterStart(server) right after it, Listener::Stop before
// server->Shutdown. Client side: ClientCredentials.
#ifndef SANDBOXD_DAEMON_AUTH_H_
#define SANDBOXD_DAEMON_AUTH_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/support/string_ref.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"
#include "daemon/tls_relay.h"

namespace grpc {
class ChannelCredentials;
class Server;
class ServerBuilder;
class Status;
}  // namespace grpc

namespace sandboxd {
namespace daemon {

struct ListenOptions {
  // Path of the unix socket; "" for none.
  std::string unix_socket;
  // Group given the socket (chgrp) when it exists on the host.
  std::string socket_group = "sandboxd";
  // "host:port" to listen on with TLS ("127.0.0.1:0" picks a free port);
  // "" for none. Requires all three files below.
  std::string tcp_address;
  std::string tls_cert_file;  // PEM certificate chain
  std::string tls_key_file;   // PEM private key
  std::string token_file;     // the bearer token (surrounding whitespace ignored)
  // Connections held at once, in all and per client: a peer uid on the
  // unix socket, a peer address on TCP.
  int max_connections = 1024;
  int max_connections_per_client = 128;
  // A TCP connection whose TLS handshake is not done by then is closed.
  int handshake_timeout_ms = 10000;
};

// What the accept loop has done (for tests and logs).
struct ListenerStats {
  int connections = 0;       // held now (as of the last count)
  int tcp_connections = 0;   // of which TCP (handshaking or relayed)
  uint64_t accepted = 0;     // handed to gRPC
  uint64_t refused = 0;      // closed at once: over a limit
  uint64_t dropped_no_fd = 0;  // closed at once: EMFILE/ENFILE
};

// The listening side of one server. Keep it alive as long as the server.
class Listener {
 public:
  // Checks the options, removes a stale unix socket (or fails when a live
  // daemon owns it), reads the TLS files and the token, and adds the ports
  // to `builder`. INVALID_ARGUMENT for unusable options (TCP without TLS or
  // token, no address at all, an empty or world-readable token file),
  // FAILED_PRECONDITION when the socket is in use by a live process.
  static absl::StatusOr<std::unique_ptr<Listener>> Prepare(
      const ListenOptions& options, grpc::ServerBuilder* builder);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // After BuildAndStart: checks that every port was bound, sets the unix
  // socket's mode (0660) and group, and starts accepting on it for
  // `server`. Fails naming the address that did not bind.
  absl::Status AfterStart(grpc::Server* server);

  // Stops accepting (before the server shuts down); idempotent.
  void Stop();

  ListenerStats stats();

  // OK when a call may go on: it came on a unix socket connection, or it
  // carries the bearer token. `peer` is grpc::ServerContext::peer()
  // ("fd:N" for connections handed over from a descriptor).
  grpc::Status CheckCall(
      const std::string& peer,
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

  // The bound TCP port (the real one when 0 was asked for); 0 before
  // AfterStart or without TCP.
  int tcp_port() const { return tcp_port_; }
  const std::string& unix_socket() const { return options_.unix_socket; }

 private:
  // One connection held: its descriptor (a unix one's is gRPC's, which
  // closes it; a TCP one's is the relay's), the socket's inode (to tell
  // whether that descriptor is still it), the client ("uid N" or the
  // peer address) and whether it came over TCP.
  struct Conn {
    ino_t ino;
    std::string client;
    bool tcp;
  };

  explicit Listener(ListenOptions options);
  absl::Status PrepareTcp();
  absl::Status OpenWake();
  absl::Status BindUnix();
  void AcceptLoop(grpc::Server* server);
  // Accepts one pending connection on `lfd` (the unix or the TCP socket).
  void AcceptOn(int lfd, bool tcp, grpc::Server* server);
  // Whether a connection of `client` fits; forgets the closed ones first
  // when it would not.
  bool Admit(const std::string& client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Sweep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits up to `ms` unless Stop is called; false once stopping.
  bool Pause(int ms);

  ListenOptions options_;
  UniqueFd listen_fd_;  // the unix socket
  UniqueFd tcp_fd_;
  std::unique_ptr<TlsRelay> relay_;
  std::string token_;  // the bearer token; "" without TCP
  // Written by Stop to wake the accept loop.
  UniqueFd wake_read_, wake_write_;
  // Kept open to be closed when the descriptors run out (EMFILE), so that
  // a pending connection can be accepted and dropped.
  UniqueFd spare_;
  std::thread accept_thread_;
  absl::Mutex mu_;
  std::map<int, Conn> conns_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> per_client_ ABSL_GUARDED_BY(mu_);
  ListenerStats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t last_log_ ABSL_GUARDED_BY(mu_) = 0;
  int tcp_port_ = 0;
};

// Client side of a TCP connection: TLS that trusts the PEM certificates in
// `ca_cert_file` (the server's own certificate when self-signed; "" for the
// system roots), with `authorization: Bearer <token>` on every call.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const std::string& ca_cert_file, const std::string& token);

// Reads a token file as Listener does: trimmed, non-empty, and not readable
// by others. For clients that take --token-file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_AUTH_H_
