#include "daemon/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_posix.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "daemon/log.h"

namespace sandboxd {
namespace daemon {

namespace {

constexpr mode_t kSocketMode = 0660;
constexpr absl::string_view kBearer = "Bearer ";
// Pending connections the kernel queues for the accept loop.
constexpr int kBacklog = 1024;
// The accept loop's pause after a failed accept (no descriptors, no
// memory): long enough not to spin, short enough to recover at once.
constexpr int kBackoffMs = 20;

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  absl::StatusOr<std::string> pem = ReadWholeFile(path);
  if (!pem.ok()) return Annotate(pem.status(), absl::StrCat("TLS ", what));
  if (!absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS ", what, " ", path, ": not a PEM file"));
  }
  return pem;
}

// Compares without an early exit, so that the time taken does not tell an
// attacker how much of a guessed token was right.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

// Refuses every call that does not carry `authorization: Bearer <token>`.
class BearerTokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenProcessor(std::string token) : token_(std::move(token)) {}

  // A string comparison: run it inline on gRPC's own thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext*,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata*) override {
    auto it = auth_metadata.find("authorization");
    if (it == auth_metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "sandboxd: this port needs \"authorization: Bearer <token>\"");
    }
    absl::string_view value(it->second.data(), it->second.size());
    if (!absl::ConsumePrefix(&value, kBearer) || !ConstantTimeEquals(value, token_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "sandboxd: wrong bearer token");
    }
    // Keep the token out of the metadata the service handlers see.
    consumed_auth_metadata->insert(
        {std::string(it->first.data(), it->first.size()),
         std::string(it->second.data(), it->second.size())});
    return grpc::Status::OK;
  }

 private:
  const std::string token_;
};

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unix socket path \"", path, "\": must be 1 to ", sizeof(addr.sun_path) - 1,
        " bytes"));
  }
  memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

// A socket file at `path` is either a live daemon's (something accepts a
// connection: refuse to start) or a dead one's (connection refused: remove
// it, as gRPC would anyway, but only after the check).
absl::Status ClaimSocketPath(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(absl::StrCat("stat ", path), errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; not removing it"));
  }
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus("socket(AF_UNIX)", errno);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "another process (a running sandboxd?) is listening on ", path));
  }
  if (errno != ECONNREFUSED) {
    return ErrnoStatus(absl::StrCat("checking whether ", path, " is in use: connect"),
                       errno);
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(absl::StrCat("removing stale socket ", path), errno);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto annotate = [&](absl::Status s) { return Annotate(s, "token file"); };
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return annotate(ErrnoStatus(absl::StrCat("stat ", path), errno));
  }
  if (st.st_mode & S_IROTH) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file ", path, " is readable by every user; chmod o-r it"));
  }
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return annotate(text.status());
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  }
  for (char c : token) {
    // It travels in an HTTP/2 header value.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token file ", path, ": the token must be printable ASCII without spaces"));
    }
  }
  return token;
}

Listener::Listener(ListenOptions options) : options_(std::move(options)) {}

Listener::~Listener() { Stop(); }

absl::Status Listener::BindUnix() {
  const std::string& path = options_.unix_socket;
  ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  listen_fd_ = UniqueFd(
      socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listen_fd_.valid()) return ErrnoStatus("socket(AF_UNIX)", errno);
  if (bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&addr),
           sizeof(addr)) != 0) {
    return ErrnoStatus(absl::StrCat("bind ", path), errno);
  }
  if (listen(listen_fd_.get(), kBacklog) != 0) {
    return ErrnoStatus(absl::StrCat("listen ", path), errno);
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus("pipe2", errno);
  wake_read_ = UniqueFd(p[0]);
  wake_write_ = UniqueFd(p[1]);
  spare_ = UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  return absl::OkStatus();
}

bool Listener::Pause(int ms) {
  pollfd p{wake_read_.get(), POLLIN, 0};
  return poll(&p, 1, ms) == 0;
}

void Listener::Sweep() {
  char link[64], buf[64];
  for (auto it = conns_.begin(); it != conns_.end();) {
    snprintf(link, sizeof(link), "/proc/self/fd/%d", it->first);
    ssize_t n = readlink(link, buf, sizeof(buf) - 1);
    std::string want = absl::StrCat("socket:[", it->second.ino, "]");
    if (n > 0 && absl::string_view(buf, static_cast<size_t>(n)) == want) {
      ++it;
      continue;
    }
    if (--per_uid_[it->second.uid] == 0) per_uid_.erase(it->second.uid);
    it = conns_.erase(it);
  }
  stats_.connections = static_cast<int>(conns_.size());
}

bool Listener::Admit(uid_t uid) {
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto u = per_uid_.find(uid);
    int mine = u == per_uid_.end() ? 0 : u->second;
    return static_cast<int>(conns_.size()) < options_.max_connections &&
           mine < options_.max_connections_per_client;
  };
  if (fits()) return true;
  Sweep();
  return fits();
}

void Listener::AcceptLoop(grpc::Server* server) {
  pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0},
                    {wake_read_.get(), POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) {
      if (!Pause(kBackoffMs)) return;
      continue;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    // gRPC's endpoints want non-blocking sockets.
    int c = accept4(listen_fd_.get(), nullptr, nullptr,
                    SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) {
      int err = errno;
      if (err == EAGAIN || err == EINTR || err == ECONNABORTED) continue;
      bool no_fd = err == EMFILE || err == ENFILE;
      if (no_fd && spare_.valid()) {
        // Take the pending connection off the queue and close it, or
        // poll would report it again at once.
        spare_.reset();
        int d = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (d >= 0) close(d);
        spare_ = UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
      }
      {
        absl::MutexLock l(&mu_);
        if (no_fd) stats_.dropped_no_fd++;
        if (NowMs() - last_log_ >= 1000) {
          last_log_ = NowMs();
          Log("accept on ", options_.unix_socket, ": ", strerror(err),
              no_fd ? " (connection dropped; accepting on)" : "");
        }
      }
      if (!Pause(kBackoffMs)) return;
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    struct stat st;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        fstat(c, &st) != 0) {
      close(c);
      continue;
    }
    {
      absl::MutexLock l(&mu_);
      // A descriptor the kernel gave again was closed by gRPC.
      if (auto old = conns_.find(c); old != conns_.end()) {
        if (--per_uid_[old->second.uid] == 0) per_uid_.erase(old->second.uid);
        conns_.erase(old);
      }
      if (!Admit(cred.uid)) {
        close(c);
        stats_.refused++;
        if (NowMs() - last_log_ >= 1000) {
          last_log_ = NowMs();
          Log("refusing connections of uid ", cred.uid, " on ",
              options_.unix_socket, ": ", per_uid_[cred.uid], " held (at most ",
              options_.max_connections_per_client, " per client, ",
              options_.max_connections, " in all)");
        }
        continue;
      }
      conns_[c] = Conn{st.st_ino, cred.uid};
      per_uid_[cred.uid]++;
      stats_.accepted++;
      stats_.connections = static_cast<int>(conns_.size());
    }
    grpc::AddInsecureChannelFromFd(server, c);
  }
}

void Listener::Stop() {
  if (!accept_thread_.joinable()) return;
  char b = 0;
  (void)!write(wake_write_.get(), &b, 1);
  accept_thread_.join();
}

ListenerStats Listener::stats() {
  absl::MutexLock l(&mu_);
  Sweep();
  return stats_;
}

absl::Status Listener::AddTcpPort(grpc::ServerBuilder* builder) {
  if (options_.tls_cert_file.empty() || options_.tls_key_file.empty() ||
      options_.token_file.empty()) {
    return absl::InvalidArgumentError(
        "TCP needs TLS (a certificate and a key file) and a bearer token file");
  }
  ASSIGN_OR_RETURN(std::string cert, ReadPem(options_.tls_cert_file, "certificate"));
  ASSIGN_OR_RETURN(std::string key, ReadPem(options_.tls_key_file, "key"));
  ASSIGN_OR_RETURN(std::string token, ReadTokenFile(options_.token_file));
  grpc::SslServerCredentialsOptions tls;
  tls.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(tls);
  creds->SetAuthMetadataProcessor(
      std::make_shared<BearerTokenProcessor>(std::move(token)));
  builder->AddListeningPort(options_.tcp_address, creds, &tcp_selected_port_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::Prepare(
    const ListenOptions& options, grpc::ServerBuilder* builder) {
  if (options.unix_socket.empty() && options.tcp_address.empty()) {
    return absl::InvalidArgumentError("listen: neither a unix socket nor a TCP address");
  }
  std::unique_ptr<Listener> l(new Listener(options));

  // TCP first: its options are checked before the socket file is touched.
  if (!options.tcp_address.empty()) {
    RETURN_IF_ERROR(Annotate(l->AddTcpPort(builder),
                             absl::StrCat("listen on TCP ", options.tcp_address)));
  }

  if (!options.unix_socket.empty()) {
    auto annotate = [&](absl::Status s) {
      return Annotate(s, absl::StrCat("listen on unix socket ", options.unix_socket));
    };
    RETURN_IF_ERROR(annotate(UnixAddress(options.unix_socket).status()));
    RETURN_IF_ERROR(annotate(ClaimSocketPath(options.unix_socket)));
    if (options.max_connections < 1 || options.max_connections_per_client < 1) {
      return absl::InvalidArgumentError(
          "listen: the connection limits must be at least 1");
    }
    // Who may connect is decided by the socket file's permissions. The
    // accept loop (AfterStart) hands each connection to gRPC.
    RETURN_IF_ERROR(annotate(l->BindUnix()));
  }
  return l;
}

absl::Status Listener::AfterStart(grpc::Server* server) {
  if (!options_.unix_socket.empty()) {
    const std::string& path = options_.unix_socket;
    if (chmod(path.c_str(), kSocketMode) != 0) {
      return ErrnoStatus(absl::StrCat("chmod ", path), errno);
    }
    if (!options_.socket_group.empty()) {
      struct group grp;
      struct group* found = nullptr;
      std::vector<char> buf(16384);
      int err = getgrnam_r(options_.socket_group.c_str(), &grp, buf.data(), buf.size(),
                           &found);
      if (err != 0) {
        return ErrnoStatus(absl::StrCat("looking up group ", options_.socket_group), err);
      }
      // No such group: the socket stays root's (mode 0660: root only).
      if (found != nullptr && chown(path.c_str(), -1, grp.gr_gid) != 0) {
        return ErrnoStatus(
            absl::StrCat("chgrp ", options_.socket_group, " ", path), errno);
      }
    }
  }
  if (!options_.tcp_address.empty()) {
    if (tcp_selected_port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("could not listen on TCP ", options_.tcp_address));
    }
    tcp_port_ = tcp_selected_port_;
  }
  if (listen_fd_.valid() && !accept_thread_.joinable()) {
    accept_thread_ = std::thread([this, server] { AcceptLoop(server); });
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(
    const std::string& ca_cert_file, const std::string& token) {
  grpc::SslCredentialsOptions tls;
  if (!ca_cert_file.empty()) {
    ASSIGN_OR_RETURN(tls.pem_root_certs, ReadPem(ca_cert_file, "CA certificate"));
  }
  if (token.empty()) return absl::InvalidArgumentError("empty bearer token");
  // AccessTokenCredentials sends "authorization: Bearer <token>", and only
  // over a secure channel.
  return grpc::CompositeChannelCredentials(grpc::SslCredentials(tls),
                                           grpc::AccessTokenCredentials(token));
}

}  // namespace daemon
}  // namespace sandboxd
