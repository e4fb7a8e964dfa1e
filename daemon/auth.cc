#include "daemon/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include <grpc/grpc.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_posix.h>
#include <grpcpp/support/server_interceptor.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/thread.h"
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

// Fails, for every service, each call that Listener::CheckCall refuses,
// before its handler runs: the call is cancelled with UNAUTHENTICATED.
// (The handler still runs and sees a cancelled call, so handlers that act
// ask CheckCall themselves.)
class CheckCallInterceptor : public grpc::experimental::Interceptor {
 public:
  CheckCallInterceptor(Listener* listener, grpc::experimental::ServerRpcInfo* info)
      : listener_(listener), info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      grpc::ServerContextBase* ctx = info_->server_context();
      grpc::Status st =
          listener_->CheckCall(ctx->peer(), *methods->GetRecvInitialMetadata());
      if (!st.ok()) {
        grpc_call_cancel_with_status(ctx->c_call(), GRPC_STATUS_UNAUTHENTICATED,
                                     st.error_message().c_str(), nullptr);
      }
    }
    methods->Proceed();
  }

 private:
  Listener* const listener_;
  grpc::experimental::ServerRpcInfo* const info_;
};

class CheckCallInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CheckCallInterceptorFactory(Listener* listener) : listener_(listener) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new CheckCallInterceptor(listener_, info);
  }

 private:
  Listener* const listener_;
};

// "HOST:PORT" or "[V6]:PORT" to a bound, listening, non-blocking socket.
absl::StatusOr<UniqueFd> ListenTcp(const std::string& address, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TCP address \"", address, "\": want HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  std::string service = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int err = getaddrinfo(host.empty() || host == "*" ? nullptr : host.c_str(),
                        service.c_str(), &hints, &res);
  if (err != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TCP address \"", address, "\": ", gai_strerror(err)));
  }
  absl::Status last = absl::UnavailableError("no address");
  UniqueFd fd;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = UniqueFd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         a->ai_protocol));
    if (!fd.valid()) {
      last = ErrnoStatus("socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last = ErrnoStatus(absl::StrCat("bind ", address), errno);
      fd.reset();
      continue;
    }
    if (listen(fd.get(), kBacklog) != 0) {
      last = ErrnoStatus(absl::StrCat("listen ", address), errno);
      fd.reset();
      continue;
    }
    break;
  }
  freeaddrinfo(res);
  if (!fd.valid()) return last;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return ErrnoStatus("getsockname", errno);
  }
  *port = ss.ss_family == AF_INET6
              ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
              : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

// The client a TCP peer counts as: its address, without the port.
std::string PeerAddress(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof(host),
                  nullptr, 0, NI_NUMERICHOST) != 0) {
    return "tcp ?";
  }
  return absl::StrCat("tcp ", host);
}

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
    if (--per_client_[it->second.client] == 0) per_client_.erase(it->second.client);
    it = conns_.erase(it);
  }
  stats_.connections = static_cast<int>(conns_.size());
}

bool Listener::Admit(const std::string& client) {
  auto fits = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto u = per_client_.find(client);
    int mine = u == per_client_.end() ? 0 : u->second;
    return static_cast<int>(conns_.size()) < options_.max_connections &&
           mine < options_.max_connections_per_client;
  };
  if (fits()) return true;
  Sweep();
  return fits();
}

void Listener::AcceptOn(int lfd, bool tcp, grpc::Server* server) {
  const std::string& where = tcp ? options_.tcp_address : options_.unix_socket;
  sockaddr_storage peer{};
  socklen_t peer_len = sizeof(peer);
  // gRPC's endpoints, and the relay, want non-blocking sockets.
  int c = accept4(lfd, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                  SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (c < 0) {
    int err = errno;
    if (err == EAGAIN || err == EINTR || err == ECONNABORTED) return;
    bool no_fd = err == EMFILE || err == ENFILE;
    if (no_fd && spare_.valid()) {
      // Take the pending connection off the queue and close it, or
      // poll would report it again at once.
      spare_.reset();
      int d = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (d >= 0) close(d);
      spare_ = UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
    }
    {
      absl::MutexLock l(&mu_);
      if (no_fd) stats_.dropped_no_fd++;
      if (NowMs() - last_log_ >= 1000) {
        last_log_ = NowMs();
        Log("accept on ", where, ": ", strerror(err),
            no_fd ? " (connection dropped; accepting on)" : "");
      }
    }
    Pause(kBackoffMs);
    return;
  }
  std::string client;
  if (tcp) {
    client = PeerAddress(peer, peer_len);
  } else {
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(c);
      return;
    }
    client = absl::StrCat("uid ", cred.uid);
  }
  struct stat st;
  if (fstat(c, &st) != 0) {
    close(c);
    return;
  }
  {
    absl::MutexLock l(&mu_);
    // A descriptor the kernel gave again was closed by gRPC or the relay.
    if (auto old = conns_.find(c); old != conns_.end()) {
      if (--per_client_[old->second.client] == 0) per_client_.erase(old->second.client);
      conns_.erase(old);
    }
    if (!Admit(client)) {
      close(c);
      stats_.refused++;
      if (NowMs() - last_log_ >= 1000) {
        last_log_ = NowMs();
        Log("refusing connections of ", client, " on ", where, ": ",
            per_client_[client], " held (at most ",
            options_.max_connections_per_client, " per client, ",
            options_.max_connections, " in all)");
      }
      return;
    }
    conns_[c] = Conn{st.st_ino, client, tcp};
    per_client_[client]++;
    stats_.accepted++;
    stats_.connections = static_cast<int>(conns_.size());
  }
  if (tcp) {
    relay_->Add(UniqueFd(c));
  } else {
    grpc::AddInsecureChannelFromFd(server, c);
  }
}

void Listener::AcceptLoop(grpc::Server* server) {
  std::vector<pollfd> fds;
  std::vector<bool> is_tcp;
  if (listen_fd_.valid()) {
    fds.push_back({listen_fd_.get(), POLLIN, 0});
    is_tcp.push_back(false);
  }
  if (tcp_fd_.valid()) {
    fds.push_back({tcp_fd_.get(), POLLIN, 0});
    is_tcp.push_back(true);
  }
  fds.push_back({wake_read_.get(), POLLIN, 0});
  const size_t wake = fds.size() - 1;
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
      if (!Pause(kBackoffMs)) return;
      continue;
    }
    if (fds[wake].revents != 0) return;
    for (size_t i = 0; i < wake; i++) {
      if (fds[i].revents != 0) AcceptOn(fds[i].fd, is_tcp[i], server);
    }
  }
}

void Listener::Stop() {
  if (accept_thread_.joinable()) {
    char b = 0;
    (void)!write(wake_write_.get(), &b, 1);
    accept_thread_.join();
  }
  if (relay_ != nullptr) relay_->Stop();
}

ListenerStats Listener::stats() {
  absl::MutexLock l(&mu_);
  Sweep();
  stats_.tcp_connections = 0;
  for (const auto& [fd, conn] : conns_) stats_.tcp_connections += conn.tcp ? 1 : 0;
  return stats_;
}

grpc::Status Listener::CheckCall(
    const std::string& peer,
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  if (token_.empty()) return grpc::Status::OK;  // no TCP: every call is local
  // A connection the unix socket's loop handed over: "fd:N", N still the
  // socket recorded for it. Anything else (a relayed TCP connection's
  // socketpair, a descriptor number reused since) must carry the token.
  absl::string_view p(peer);
  int fd = -1;
  if (absl::ConsumePrefix(&p, "fd:") && absl::SimpleAtoi(p, &fd)) {
    struct stat st;
    absl::MutexLock l(&mu_);
    auto it = conns_.find(fd);
    if (it != conns_.end() && !it->second.tcp && fstat(fd, &st) == 0 &&
        st.st_ino == it->second.ino) {
      return grpc::Status::OK;
    }
  }
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "sandboxd: this port needs \"authorization: Bearer <token>\"");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, kBearer) || !ConstantTimeEquals(value, token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "sandboxd: wrong bearer token");
  }
  return grpc::Status::OK;
}

absl::Status Listener::PrepareTcp() {
  if (options_.tls_cert_file.empty() || options_.tls_key_file.empty() ||
      options_.token_file.empty()) {
    return absl::InvalidArgumentError(
        "TCP needs TLS (a certificate and a key file) and a bearer token file");
  }
  RETURN_IF_ERROR(ReadPem(options_.tls_cert_file, "certificate").status());
  RETURN_IF_ERROR(ReadPem(options_.tls_key_file, "key").status());
  ASSIGN_OR_RETURN(token_, ReadTokenFile(options_.token_file));
  ASSIGN_OR_RETURN(relay_, TlsRelay::Create(options_.tls_cert_file, options_.tls_key_file,
                                            options_.handshake_timeout_ms));
  ASSIGN_OR_RETURN(tcp_fd_, ListenTcp(options_.tcp_address, &tcp_port_));
  return absl::OkStatus();
}

absl::Status Listener::OpenWake() {
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return ErrnoStatus("pipe2", errno);
  wake_read_ = UniqueFd(p[0]);
  wake_write_ = UniqueFd(p[1]);
  spare_ = UniqueFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Listener>> Listener::Prepare(
    const ListenOptions& options, grpc::ServerBuilder* builder) {
  if (options.unix_socket.empty() && options.tcp_address.empty()) {
    return absl::InvalidArgumentError("listen: neither a unix socket nor a TCP address");
  }
  if (options.max_connections < 1 || options.max_connections_per_client < 1) {
    return absl::InvalidArgumentError("listen: the connection limits must be at least 1");
  }
  std::unique_ptr<Listener> l(new Listener(options));
  RETURN_IF_ERROR(l->OpenWake());

  // TCP first: its options are checked before the socket file is touched.
  if (!options.tcp_address.empty()) {
    RETURN_IF_ERROR(Annotate(l->PrepareTcp(),
                             absl::StrCat("listen on TCP ", options.tcp_address)));
  }

  if (!options.unix_socket.empty()) {
    auto annotate = [&](absl::Status s) {
      return Annotate(s, absl::StrCat("listen on unix socket ", options.unix_socket));
    };
    RETURN_IF_ERROR(annotate(UnixAddress(options.unix_socket).status()));
    RETURN_IF_ERROR(annotate(ClaimSocketPath(options.unix_socket)));
    // Who may connect is decided by the socket file's permissions. The
    // accept loop (AfterStart) hands each connection to gRPC.
    RETURN_IF_ERROR(annotate(l->BindUnix()));
  }
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<CheckCallInterceptorFactory>(l.get()));
  builder->experimental().SetInterceptorCreators(std::move(interceptors));
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
  if (relay_ != nullptr) {
    RETURN_IF_ERROR(relay_->Start(
        [server](int fd) { grpc::AddInsecureChannelFromFd(server, fd); }));
  }
  if (!accept_thread_.joinable()) {
    ASSIGN_OR_RETURN(accept_thread_,
                     StartThread("the accept loop", [this, server] { AcceptLoop(server); }));
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
