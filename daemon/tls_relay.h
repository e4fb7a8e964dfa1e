// The TCP port's TLS, terminated in the daemon: each accepted TCP
// connection is handshaken with OpenSSL (TLS 1.2 or later, the daemon's
// certificate and key, ALPN "h2"), then its plaintext is relayed to gRPC
// through a socketpair whose other end gRPC serves as an insecure channel
// (grpc::AddInsecureChannelFromFd: the only way gRPC 1.51 takes an
// accepted descriptor). Which descriptors gRPC got from here is known to
// the Listener, so calls on them are made to carry the bearer token.
//
// One thread relays every connection (epoll; all descriptors
// non-blocking): connections are few (at most --max-connections) and a
// thread per connection would be one more host resource to be refused
// under exhaustion. A connection ends, all its descriptors closed, when
// either side closes or fails, or when its handshake is not done within
// the handshake timeout. Thread-safe: Add may be called from any thread.
// OpenSSL writes to the TCP socket with write(2): the process must ignore
// SIGPIPE (sandboxd does), or a client gone mid-write would kill it.
#ifndef SANDBOXD_DAEMON_TLS_RELAY_H_
#define SANDBOXD_DAEMON_TLS_RELAY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace sandboxd {
namespace daemon {

class TlsRelay {
 public:
  // Called on the relay thread with the plaintext descriptor that gRPC
  // is to serve (its owner from then on), once a handshake is done.
  using HandOff = std::function<void(int fd)>;

  // Reads and checks the PEM certificate chain and key. INVALID_ARGUMENT
  // naming the file when OpenSSL refuses one.
  static absl::StatusOr<std::unique_ptr<TlsRelay>> Create(
      const std::string& cert_file, const std::string& key_file,
      int handshake_timeout_ms);
  ~TlsRelay();  // Stop()
  TlsRelay(const TlsRelay&) = delete;
  TlsRelay& operator=(const TlsRelay&) = delete;

  // Starts the relay thread. Fails when the host refuses it.
  absl::Status Start(HandOff hand_off);
  // Takes an accepted, non-blocking TCP connection. Closed at once when
  // the relay is not running.
  void Add(UniqueFd tcp);
  // Ends every connection and the thread; idempotent.
  void Stop();
  // Connections being handshaken or relayed.
  int connections();

 private:
  struct Conn;
  explicit TlsRelay(int handshake_timeout_ms);
  void Loop();
  // Moves what it can in both directions; false when the connection is
  // over (closed by either side, or failed).
  bool Pump(Conn* c);
  void Watch(Conn* c);
  void Close(Conn* c);

  const int handshake_timeout_ms_;
  SSL_CTX* ctx_ = nullptr;
  HandOff hand_off_;
  UniqueFd epoll_, wake_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<UniqueFd> incoming_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
  // Owned by the relay thread.
  std::vector<std::unique_ptr<Conn>> conns_;
  uint64_t last_log_ms_ = 0;
};

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_TLS_RELAY_H_
