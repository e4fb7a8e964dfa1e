#include "sentry/socket/unix_socket.h"

#include "sentry/socket/host_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>

namespace sandboxd::socket {
namespace {

// The timeval option names of both ABIs (asm-generic/socket.h); on x86-64
// both take a 16-byte {seconds, microseconds}.
constexpr int kSoRcvTimeoOld = 20;
constexpr int kSoSndTimeoOld = 21;
constexpr int kSoRcvTimeoNew = 66;
constexpr int kSoSndTimeoNew = 67;

// Socket files live on no filesystem; fstat shows this device (Linux's
// sockfs is an anonymous device too).
constexpr uint64_t kSockfsDev = 0x8;

std::vector<uint8_t> IntOption(int v) {
  std::vector<uint8_t> out(sizeof(int));
  std::memcpy(out.data(), &v, sizeof(int));
  return out;
}

std::vector<uint8_t> TimeoutOption(absl::Duration d) {
  struct timeval tv = {};
  if (d != absl::InfiniteDuration()) {
    tv = absl::ToTimeval(d);
  }
  std::vector<uint8_t> out(sizeof(tv));
  std::memcpy(out.data(), &tv, sizeof(tv));
  return out;
}

// Linux's sock_set_timeout.
int64_t ParseTimeout(const std::vector<uint8_t>& val, absl::Duration* out) {
  struct timeval tv;
  if (val.size() < sizeof(tv)) return -EINVAL;
  std::memcpy(&tv, val.data(), sizeof(tv));
  if (tv.tv_usec < 0 || tv.tv_usec >= 1000000) return -EDOM;
  if (tv.tv_sec < 0) {
    *out = absl::ZeroDuration();  // Linux: fail at once
  } else if (tv.tv_sec == 0 && tv.tv_usec == 0) {
    *out = absl::InfiniteDuration();
  } else {
    *out = absl::Seconds(tv.tv_sec) + absl::Microseconds(tv.tv_usec);
  }
  return 0;
}

}  // namespace

int64_t UnixSocket::New(UnixNamespace* ns, int type, int protocol,
                        bool nonblocking, const Credentials& creator,
                        std::shared_ptr<UnixSocket>* out) {
  if (protocol != 0 && protocol != PF_UNIX) return -EPROTONOSUPPORT;
  switch (type) {
    case SOCK_RAW:
      type = SOCK_DGRAM;  // Linux accepts SOCK_RAW as SOCK_DGRAM
      break;
    case SOCK_STREAM:
    case SOCK_DGRAM:
    case SOCK_SEQPACKET:
      break;
    default:
      return -ESOCKTNOSUPPORT;
  }
  *out = std::make_shared<UnixSocket>(
      ns, std::make_shared<UnixEndpoint>(type), nonblocking, creator);
  return 0;
}

int64_t UnixSocket::NewPair(UnixNamespace* ns, int type, int protocol,
                            bool nonblocking, const Credentials& creator,
                            std::shared_ptr<UnixSocket>* a,
                            std::shared_ptr<UnixSocket>* b) {
  if (protocol != 0 && protocol != PF_UNIX) return -EPROTONOSUPPORT;
  if (type == SOCK_RAW) type = SOCK_DGRAM;
  if (type != SOCK_STREAM && type != SOCK_DGRAM && type != SOCK_SEQPACKET) {
    return -ESOCKTNOSUPPORT;
  }
  auto [ea, eb] = UnixEndpoint::NewPair(type, creator);
  *a = std::make_shared<UnixSocket>(ns, ea, nonblocking, creator);
  *b = std::make_shared<UnixSocket>(ns, eb, nonblocking, creator);
  return 0;
}

UnixSocket::UnixSocket(UnixNamespace* ns, std::shared_ptr<UnixEndpoint> ep,
                       bool nonblocking, const Credentials& creator)
    : ns_(ns),
      ep_(std::move(ep)),
      creator_(creator),
      ino_(fs::NextInodeNumber()),
      nonblock_(nonblocking) {}

UnixSocket::~UnixSocket() { ep_->Close(); }

// ---------------------------------------------------------------------------
// fs::File

int64_t UnixSocket::Read(void* buf, uint64_t n, int64_t offset,
                         const fs::IoContext& io) {
  SocketContext ctx;
  ctx.io = io;
  ctx.creds = creator_;
  ctx.unix_ns = ns_;
  BufferSink sink(buf, n);
  RecvRequest req;
  req.data = &sink;
  // Files that arrive with read(2) are dropped (closed), as on Linux.
  return ep_->Recv(ctx, req, nonblocking());
}

int64_t UnixSocket::Write(const void* buf, uint64_t n, int64_t offset,
                          const fs::IoContext& io) {
  SocketContext ctx;
  ctx.io = io;
  ctx.creds = creator_;
  ctx.unix_ns = ns_;
  BufferSource src(buf, n);
  SendRequest req;
  req.data = &src;
  bool sigpipe;  // write(2)'s caller raises SIGPIPE for EPIPE itself
  return ep_->Send(ctx, req, nullptr, nonblocking(), &sigpipe);
}

int64_t UnixSocket::Stat(struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_dev = kSockfsDev;
  st->st_ino = ino_;
  st->st_mode = S_IFSOCK | 0777;
  st->st_nlink = 1;
  st->st_blksize = 4096;
  return 0;
}

int64_t UnixSocket::Ioctl(uint64_t request, void* buf) {
  switch (request) {
    case FIONREAD: {
      int64_t n = ep_->QueuedBytes();
      if (n < 0) return n;
      int v = static_cast<int>(std::min<int64_t>(n, INT32_MAX));
      std::memcpy(buf, &v, sizeof(v));
      return 0;
    }
    default:
      // glibc's if_nametoindex asks an AF_UNIX socket first.
      return InterfaceIoctl(AF_UNIX, request, buf);
  }
}

int UnixSocket::StatusFlags() const {
  return O_RDWR | (nonblocking() ? O_NONBLOCK : 0);
}

int64_t UnixSocket::SetStatusFlags(int flags) {
  nonblock_.store((flags & O_NONBLOCK) != 0, std::memory_order_relaxed);
  return 0;
}

// ---------------------------------------------------------------------------
// Socket

int64_t UnixSocket::Bind(const SocketContext& ctx, const std::string& raw) {
  UnixAddress addr;
  bool autobind;
  int r = ParseUnixAddress(raw, &addr, &autobind);
  if (r < 0) return r;
  return ep_->Bind(WithNamespace(ctx), addr, autobind);
}

int64_t UnixSocket::Listen(const SocketContext& ctx, int backlog) {
  return ep_->Listen(WithNamespace(ctx), backlog);
}

int64_t UnixSocket::Accept(const SocketContext& ctx, bool new_nonblocking,
                           std::shared_ptr<Socket>* out, std::string* peer) {
  std::shared_ptr<UnixEndpoint> conn;
  int64_t r = ep_->Accept(WithNamespace(ctx), nonblocking(), &conn);
  if (r < 0) return r;
  UnixAddress peer_addr;
  if (conn->PeerAddress(&peer_addr) < 0) peer_addr = UnixAddress{};
  *peer = peer_addr.ToSockaddr();
  *out = std::make_shared<UnixSocket>(ns_, std::move(conn), new_nonblocking,
                                      creator_);
  return 0;
}

int64_t UnixSocket::Connect(const SocketContext& ctx, const std::string& raw) {
  if (type() == SOCK_DGRAM) {
    if (raw.size() < sizeof(sa_family_t)) return -EINVAL;
    sa_family_t family;
    std::memcpy(&family, raw.data(), sizeof(family));
    if (family == AF_UNSPEC) return ep_->Disconnect();
  }
  UnixAddress addr;
  bool autobind;
  int r = ParseUnixAddress(raw, &addr, &autobind);
  if (r < 0) return r;
  if (autobind) return -EINVAL;  // a bare family names nothing to connect to
  return ep_->Connect(WithNamespace(ctx), addr, nonblocking());
}

int64_t UnixSocket::GetSockName(std::string* addr) {
  *addr = ep_->LocalAddress().ToSockaddr();
  return 0;
}

int64_t UnixSocket::GetPeerName(std::string* addr) {
  UnixAddress peer;
  int64_t r = ep_->PeerAddress(&peer);
  if (r < 0) return r;
  *addr = peer.ToSockaddr();
  return 0;
}

int64_t UnixSocket::GetSockOpt(const SocketContext& ctx, int level, int name,
                               std::vector<uint8_t>* val) {
  // AF_UNIX has no options of its own: other levels are not supported.
  if (level != SOL_SOCKET) return -EOPNOTSUPP;
  const size_t room = val->size();
  std::vector<uint8_t> out;
  switch (name) {
    case SO_TYPE:
      out = IntOption(type());
      break;
    case SO_DOMAIN:
      out = IntOption(AF_UNIX);
      break;
    case SO_PROTOCOL:
      out = IntOption(protocol());
      break;
    case SO_ERROR:
      out = IntOption(ep_->TakeError());
      break;
    case SO_SNDBUF:
      out = IntOption(static_cast<int>(ep_->sndbuf()));
      break;
    case SO_RCVBUF:
      out = IntOption(static_cast<int>(ep_->rcvbuf()));
      break;
    case SO_PASSCRED:
      out = IntOption(ep_->passcred() ? 1 : 0);
      break;
    case SO_ACCEPTCONN:
      out = IntOption(ep_->listening() ? 1 : 0);
      break;
    case SO_REUSEADDR:
      out = IntOption(reuseaddr_.load() ? 1 : 0);
      break;
    case SO_PEERCRED: {
      Credentials c = ep_->PeerCredentials();
      struct ucred uc = {c.pid, c.uid, c.gid};
      out.resize(sizeof(uc));
      std::memcpy(out.data(), &uc, sizeof(uc));
      break;
    }
    case kSoRcvTimeoOld:
    case kSoRcvTimeoNew:
      out = TimeoutOption(ep_->rcvtimeo());
      break;
    case kSoSndTimeoOld:
    case kSoSndTimeoNew:
      out = TimeoutOption(ep_->sndtimeo());
      break;
    default:
      return -ENOPROTOOPT;
  }
  // Linux copies at most what the caller has room for.
  out.resize(std::min(out.size(), room));
  *val = std::move(out);
  return 0;
}

int64_t UnixSocket::SetSockOpt(const SocketContext& ctx, int level, int name,
                               const std::vector<uint8_t>& val) {
  if (level != SOL_SOCKET) return -EOPNOTSUPP;
  if (val.size() < sizeof(int)) return -EINVAL;
  int v;
  std::memcpy(&v, val.data(), sizeof(v));
  switch (name) {
    case SO_SNDBUF: {
      // Linux doubles the request (for its bookkeeping) within its limits.
      int64_t want = std::min<uint64_t>(static_cast<uint32_t>(v), kMaxSocketBuffer);
      ep_->set_sndbuf(std::max<int64_t>(want * 2, kMinSndBuf));
      return 0;
    }
    case SO_RCVBUF: {
      int64_t want = std::min<uint64_t>(static_cast<uint32_t>(v), kMaxSocketBuffer);
      ep_->set_rcvbuf(std::max<int64_t>(want * 2, kMinRcvBuf));
      return 0;
    }
    case SO_PASSCRED:
      ep_->set_passcred(v != 0);
      return 0;
    case SO_REUSEADDR:
      reuseaddr_.store(v != 0);
      return 0;
    case kSoRcvTimeoOld:
    case kSoRcvTimeoNew:
    case kSoSndTimeoOld:
    case kSoSndTimeoNew: {
      absl::Duration d;
      int64_t r = ParseTimeout(val, &d);
      if (r < 0) return r;
      if (name == kSoRcvTimeoOld || name == kSoRcvTimeoNew) {
        ep_->set_rcvtimeo(d);
      } else {
        ep_->set_sndtimeo(d);
      }
      return 0;
    }
    default:
      // Read-only options (SO_TYPE, SO_PEERCRED...) and the ones not
      // implemented.
      return -ENOPROTOOPT;
  }
}

int64_t UnixSocket::SendMsg(const SocketContext& ctx, SendRequest& req,
                            bool* raise_sigpipe) {
  *raise_sigpipe = false;
  const bool nonblock = nonblocking() || (req.flags & MSG_DONTWAIT);
  UnixAddress to;
  const UnixAddress* top = nullptr;
  if (!req.address.empty()) {
    if (type() == SOCK_DGRAM) {
      bool autobind;
      int r = ParseUnixAddress(req.address, &to, &autobind);
      if (r < 0) return r;
      if (autobind) return -EINVAL;
      top = &to;
    } else if (type() == SOCK_STREAM) {
      top = &to;  // only its presence matters: EISCONN / EOPNOTSUPP
    }
    // SOCK_SEQPACKET ignores the address.
  }
  bool sigpipe = false;
  int64_t r = ep_->Send(WithNamespace(ctx), req, top, nonblock, &sigpipe);
  *raise_sigpipe = sigpipe && (req.flags & MSG_NOSIGNAL) == 0;
  return r;
}

int64_t UnixSocket::RecvMsg(const SocketContext& ctx, RecvRequest& req) {
  const bool nonblock = nonblocking() || (req.flags & MSG_DONTWAIT);
  return ep_->Recv(WithNamespace(ctx), req, nonblock);
}

}  // namespace sandboxd::socket
