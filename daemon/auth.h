// Who may talk to the daemon: where it listens and with which credentials.
//
//   unix socket  insecure gRPC credentials; access is the file's permissions:
//                0660, group `sandboxd` when that group exists (root and the
//                group's members may connect). A socket file left by a dead
//                daemon is removed; one that still answers is an error.
//   TCP          only with TLS (certificate and key files) and a bearer token
//                (a token file): every call must carry
//                `authorization: Bearer <token>`, or it fails UNAUTHENTICATED.
//
// Server side: Listener::Prepare before grpc::ServerBuilder::BuildAndStart,
// Listener::AfterStart right after it. Client side: ClientCredentials.
#ifndef SANDBOXD_DAEMON_AUTH_H_
#define SANDBOXD_DAEMON_AUTH_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
class ServerBuilder;
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

  // After BuildAndStart: checks that every port was bound, and sets the unix
  // socket's mode (0660) and group. Fails naming the address that did not bind.
  absl::Status AfterStart();

  // The bound TCP port (the real one when 0 was asked for); 0 before
  // AfterStart or without TCP.
  int tcp_port() const { return tcp_port_; }
  const std::string& unix_socket() const { return options_.unix_socket; }

 private:
  explicit Listener(ListenOptions options);
  absl::Status AddTcpPort(grpc::ServerBuilder* builder);

  ListenOptions options_;
  // Written by grpc::ServerBuilder at BuildAndStart (hence heap-stable).
  int unix_bound_port_ = 0;
  int tcp_selected_port_ = 0;
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
