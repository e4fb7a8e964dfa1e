#include "daemon/tls_relay.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/thread.h"
#include "daemon/log.h"

namespace sandboxd {
namespace daemon {

namespace {

// Bytes buffered per direction before the relay stops reading that side
// (HTTP/2's flow control keeps real use far below).
constexpr size_t kBufferBytes = 64 * 1024;
constexpr size_t kChunk = 16 * 1024;

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

// gRPC clients insist on ALPN "h2".
int SelectAlpn(SSL*, const unsigned char** out, unsigned char* outlen,
               const unsigned char* in, unsigned int inlen, void*) {
  static const unsigned char kH2[] = {2, 'h', '2'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kH2, sizeof(kH2), in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

// One TCP connection: its TLS session and, once handshaken, the daemon's
// end of the socketpair whose other end gRPC serves.
struct TlsRelay::Conn {
  UniqueFd tcp;
  UniqueFd plain;
  SSL* ssl = nullptr;
  uint64_t started_ms = 0;
  bool handshaken = false;
  // Bytes read from one side, not yet written to the other.
  std::string to_plain, to_tls;
  bool tls_eof = false, plain_eof = false;
  // OpenSSL asked to wait until the TCP socket is writable.
  bool tls_wants_write = false;
  uint32_t tcp_events = 0, plain_events = 0;
};

TlsRelay::TlsRelay(int handshake_timeout_ms)
    : handshake_timeout_ms_(handshake_timeout_ms) {}

absl::StatusOr<std::unique_ptr<TlsRelay>> TlsRelay::Create(
    const std::string& cert_file, const std::string& key_file,
    int handshake_timeout_ms) {
  std::unique_ptr<TlsRelay> r(new TlsRelay(handshake_timeout_ms));
  r->ctx_ = SSL_CTX_new(TLS_server_method());
  if (r->ctx_ == nullptr) {
    return absl::InternalError(absl::StrCat("SSL_CTX_new: ", OpenSslError()));
  }
  SSL_CTX_set_min_proto_version(r->ctx_, TLS1_2_VERSION);
  SSL_CTX_set_options(r->ctx_, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(r->ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_alpn_select_cb(r->ctx_, SelectAlpn, nullptr);
  if (SSL_CTX_use_certificate_chain_file(r->ctx_, cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS certificate ", cert_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(r->ctx_, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS key ", key_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_check_private_key(r->ctx_) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS key ", key_file, " does not match certificate ", cert_file, ": ",
        OpenSslError()));
  }
  return r;
}

TlsRelay::~TlsRelay() {
  Stop();
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
}

absl::Status TlsRelay::Start(HandOff hand_off) {
  hand_off_ = std::move(hand_off);
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return ErrnoStatus("TLS relay: epoll_create1", errno);
  wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) return ErrnoStatus("TLS relay: eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
    return ErrnoStatus("TLS relay: epoll_ctl", errno);
  }
  {
    absl::MutexLock l(&mu_);
    running_ = true;
  }
  absl::StatusOr<std::thread> t = StartThread("the TLS relay", [this] { Loop(); });
  if (!t.ok()) {
    absl::MutexLock l(&mu_);
    running_ = false;
    return t.status();
  }
  thread_ = std::move(*t);
  return absl::OkStatus();
}

void TlsRelay::Add(UniqueFd tcp) {
  {
    absl::MutexLock l(&mu_);
    if (!running_) return;  // `tcp` closes
    incoming_.push_back(std::move(tcp));
    count_++;
  }
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
}

void TlsRelay::Stop() {
  {
    absl::MutexLock l(&mu_);
    if (!running_) return;
    running_ = false;
  }
  uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

int TlsRelay::connections() {
  absl::MutexLock l(&mu_);
  return count_;
}

void TlsRelay::Watch(Conn* c) {
  uint32_t tcp_events = 0, plain_events = 0;
  if (!c->tls_eof && c->to_plain.size() < kBufferBytes) tcp_events |= EPOLLIN;
  if (c->tls_wants_write) tcp_events |= EPOLLOUT;
  if (c->plain.valid()) {
    if (!c->plain_eof && c->to_tls.size() < kBufferBytes) plain_events |= EPOLLIN;
    if (!c->to_plain.empty()) plain_events |= EPOLLOUT;
  }
  auto set = [&](int fd, uint32_t* have, uint32_t want) {
    if (*have == want) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = c;
    epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
    *have = want;
  };
  set(c->tcp.get(), &c->tcp_events, tcp_events);
  if (c->plain.valid()) set(c->plain.get(), &c->plain_events, plain_events);
}

bool TlsRelay::Pump(Conn* c) {
  if (!c->handshaken) {
    int r = SSL_accept(c->ssl);
    if (r != 1) {
      int e = SSL_get_error(c->ssl, r);
      c->tls_wants_write = e == SSL_ERROR_WANT_WRITE;
      ERR_clear_error();
      return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
    }
    c->handshaken = true;
    c->tls_wants_write = false;
    int sv[2];
    // gRPC's endpoints want non-blocking sockets.
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
      // Out of descriptors: the client is dropped.
      if (NowMs() - last_log_ms_ >= 1000) {
        last_log_ms_ = NowMs();
        Log("TLS relay: socketpair: ", strerror(errno), " (connection dropped)");
      }
      return false;
    }
    c->plain = UniqueFd(sv[0]);
    epoll_event ev{};
    ev.events = 0;
    ev.data.ptr = c;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->plain.get(), &ev) != 0) {
      close(sv[1]);
      return false;
    }
    hand_off_(sv[1]);
  }
  char buf[kChunk];
  for (bool progress = true; progress;) {
    progress = false;
    // TLS to gRPC.
    while (!c->tls_eof && c->to_plain.size() < kBufferBytes) {
      int n = SSL_read(c->ssl, buf, sizeof(buf));
      if (n > 0) {
        c->to_plain.append(buf, static_cast<size_t>(n));
        progress = true;
        continue;
      }
      int e = SSL_get_error(c->ssl, n);
      ERR_clear_error();
      if (e == SSL_ERROR_WANT_READ) break;
      if (e == SSL_ERROR_WANT_WRITE) {
        c->tls_wants_write = true;
        break;
      }
      c->tls_eof = true;  // closed, reset or a TLS error
    }
    if (!c->to_plain.empty()) {
      ssize_t w = send(c->plain.get(), c->to_plain.data(), c->to_plain.size(), MSG_NOSIGNAL);
      if (w > 0) {
        c->to_plain.erase(0, static_cast<size_t>(w));
        progress = true;
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        return false;
      }
    }
    // gRPC to TLS.
    while (!c->plain_eof && c->to_tls.size() < kBufferBytes) {
      ssize_t n = read(c->plain.get(), buf, sizeof(buf));
      if (n > 0) {
        c->to_tls.append(buf, static_cast<size_t>(n));
        progress = true;
      } else if (n == 0) {
        c->plain_eof = true;
      } else {
        if (errno == EAGAIN || errno == EINTR) break;
        c->plain_eof = true;
      }
    }
    if (!c->to_tls.empty()) {
      c->tls_wants_write = false;
      int n = SSL_write(c->ssl, c->to_tls.data(),
                        static_cast<int>(std::min(c->to_tls.size(), kBufferBytes)));
      if (n > 0) {
        c->to_tls.erase(0, static_cast<size_t>(n));
        progress = true;
      } else {
        int e = SSL_get_error(c->ssl, n);
        ERR_clear_error();
        if (e == SSL_ERROR_WANT_WRITE) {
          c->tls_wants_write = true;
        } else if (e != SSL_ERROR_WANT_READ) {
          return false;
        }
      }
    }
  }
  // The client is gone and what it sent was handed on: gRPC sees EOF when
  // the socketpair closes.
  if (c->tls_eof && c->to_plain.empty()) return false;
  // gRPC closed (GOAWAY after the idle timeout, shutdown) and its last
  // bytes went out.
  if (c->plain_eof && c->to_tls.empty()) {
    SSL_shutdown(c->ssl);
    ERR_clear_error();
    return false;
  }
  return true;
}

void TlsRelay::Close(Conn* c) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->tcp.get(), nullptr);
  if (c->plain.valid()) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->plain.get(), nullptr);
  SSL_free(c->ssl);
  c->ssl = nullptr;
  auto it = std::find_if(conns_.begin(), conns_.end(),
                         [c](const std::unique_ptr<Conn>& p) { return p.get() == c; });
  if (it != conns_.end()) {
    std::swap(*it, conns_.back());
    conns_.pop_back();  // closes its descriptors
  }
  absl::MutexLock l(&mu_);
  count_--;
}

void TlsRelay::Loop() {
  epoll_event events[64];
  for (;;) {
    int n = epoll_wait(epoll_.get(), events, 64, 1000);
    std::vector<UniqueFd> incoming;
    {
      absl::MutexLock l(&mu_);
      if (!running_) break;
      incoming.swap(incoming_);
    }
    for (UniqueFd& fd : incoming) {
      // As gRPC does with its own sockets: a small HTTP/2 frame (a call's
      // headers, a WINDOW_UPDATE) goes out at once, not after the peer's
      // delayed ACK.
      int one = 1;
      setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>();
      c->tcp = std::move(fd);
      c->started_ms = NowMs();
      c->ssl = SSL_new(ctx_);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = c.get();
      if (c->ssl == nullptr || SSL_set_fd(c->ssl, c->tcp.get()) != 1 ||
          epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->tcp.get(), &ev) != 0) {
        if (c->ssl != nullptr) SSL_free(c->ssl);
        ERR_clear_error();
        absl::MutexLock l(&mu_);
        count_--;
        continue;
      }
      c->tcp_events = EPOLLIN;
      conns_.push_back(std::move(c));
    }
    for (int i = 0; i < n; i++) {
      if (events[i].data.ptr == nullptr) {
        uint64_t v;
        (void)!read(wake_.get(), &v, sizeof(v));
        continue;
      }
      Conn* c = static_cast<Conn*>(events[i].data.ptr);
      // Closed earlier in this batch?
      bool live = std::any_of(conns_.begin(), conns_.end(),
                              [c](const std::unique_ptr<Conn>& p) { return p.get() == c; });
      if (!live) continue;
      if (Pump(c)) {
        Watch(c);
      } else {
        Close(c);
      }
    }
    // Handshakes that take too long (a client that connects and sends
    // nothing holds a place otherwise).
    const uint64_t now = NowMs();
    for (size_t i = 0; i < conns_.size();) {
      Conn* c = conns_[i].get();
      if (!c->handshaken &&
          now - c->started_ms >= static_cast<uint64_t>(handshake_timeout_ms_)) {
        Close(c);  // moves the last one to i
        continue;
      }
      i++;
    }
  }
  while (!conns_.empty()) Close(conns_.back().get());
}

}  // namespace daemon
}  // namespace sandboxd
