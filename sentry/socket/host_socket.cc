#include "sentry/socket/host_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sentry/fs/inode.h"
#include "sentry/waiter/host_poller.h"

namespace sandboxd::socket {
namespace {

// The timeval option names of both ABIs (asm-generic/socket.h); on x86-64
// both take a 16-byte {seconds, microseconds}.
constexpr int kSoRcvTimeoOld = 20;
constexpr int kSoSndTimeoOld = 21;
constexpr int kSoRcvTimeoNew = 66;
constexpr int kSoSndTimeoNew = 67;

// Socket files live on no filesystem (as unix_socket.cc).
constexpr uint64_t kSockfsDev = 0x8;

// How much of a send or receive goes through the Sentry's buffer at once.
// A datagram is sent whole: larger than this it cannot be (UDP's limit is
// 64 KiB), and a netlink request is small.
constexpr size_t kChunk = 256 * 1024;

// The MSG_* flags passed on to the host. MSG_DONTWAIT and MSG_NOSIGNAL are
// always added (the Sentry waits and raises SIGPIPE itself); MSG_WAITALL is
// done by the Sentry's loop.
constexpr int kSendFlags = MSG_OOB | MSG_DONTROUTE | MSG_EOR | MSG_MORE |
                           MSG_CONFIRM;
constexpr int kRecvFlags = MSG_OOB | MSG_PEEK | MSG_TRUNC | MSG_ERRQUEUE;

// How much room a receive gives the host for control messages: more than
// every option this file allows can produce at once.
constexpr size_t kControlRoom = 1024;

// SO_TIMESTAMP and SO_TIMESTAMPNS of both ABIs (asm-generic/socket.h).
constexpr int kSoTimestampOld = 29;
constexpr int kSoTimestampNsOld = 35;
constexpr int kSoTimestampNew = 63;
constexpr int kSoTimestampNsNew = 64;

// The options passed on to the host socket: each changes or reads only
// that socket. get_only: Linux refuses to set them (ENOPROTOOPT).
struct AllowedOption {
  int level;
  int name;
  bool get_only;
};
constexpr AllowedOption kAllowed[] = {
    {SOL_SOCKET, SO_REUSEADDR, false},
    {SOL_SOCKET, SO_REUSEPORT, false},
    {SOL_SOCKET, SO_KEEPALIVE, false},
    {SOL_SOCKET, SO_RCVBUF, false},
    {SOL_SOCKET, SO_SNDBUF, false},
    {SOL_SOCKET, SO_LINGER, false},
    {SOL_SOCKET, SO_BROADCAST, false},
    {SOL_SOCKET, SO_OOBINLINE, false},
    {SOL_SOCKET, SO_RCVLOWAT, false},
    {SOL_SOCKET, SO_DONTROUTE, false},
    {SOL_SOCKET, SO_ERROR, true},
    {SOL_SOCKET, SO_TYPE, true},
    {SOL_SOCKET, SO_DOMAIN, true},
    {SOL_SOCKET, SO_PROTOCOL, true},
    {SOL_SOCKET, SO_ACCEPTCONN, true},
    // Options that make a receive carry control messages (RecvMsg passes
    // them on); IP_RECVERR's queue is read with MSG_ERRQUEUE.
    {SOL_SOCKET, kSoTimestampOld, false},
    {SOL_SOCKET, kSoTimestampNsOld, false},
    {SOL_SOCKET, kSoTimestampNew, false},
    {SOL_SOCKET, kSoTimestampNsNew, false},
    {IPPROTO_IP, IP_PKTINFO, false},
    {IPPROTO_IP, IP_RECVTOS, false},
    {IPPROTO_IP, IP_RECVTTL, false},
    {IPPROTO_IP, IP_RECVERR, false},
    {IPPROTO_IPV6, IPV6_RECVPKTINFO, false},
    {IPPROTO_IPV6, IPV6_RECVHOPLIMIT, false},
    {IPPROTO_IPV6, IPV6_RECVTCLASS, false},
    {IPPROTO_IPV6, IPV6_RECVERR, false},
    {IPPROTO_IPV6, IPV6_DONTFRAG, false},
    {IPPROTO_TCP, TCP_NODELAY, false},
    {IPPROTO_TCP, TCP_MAXSEG, false},
    {IPPROTO_TCP, TCP_CORK, false},
    {IPPROTO_TCP, TCP_KEEPIDLE, false},
    {IPPROTO_TCP, TCP_KEEPINTVL, false},
    {IPPROTO_TCP, TCP_KEEPCNT, false},
    {IPPROTO_TCP, TCP_SYNCNT, false},
    {IPPROTO_TCP, TCP_LINGER2, false},
    {IPPROTO_TCP, TCP_DEFER_ACCEPT, false},
    {IPPROTO_TCP, TCP_WINDOW_CLAMP, false},
    {IPPROTO_TCP, TCP_QUICKACK, false},
    {IPPROTO_TCP, TCP_USER_TIMEOUT, false},
    {IPPROTO_TCP, TCP_NOTSENT_LOWAT, false},
    {IPPROTO_TCP, TCP_INFO, true},
    {IPPROTO_IP, IP_TOS, false},
    {IPPROTO_IP, IP_TTL, false},
    {IPPROTO_IP, IP_MTU_DISCOVER, false},
    {IPPROTO_IP, IP_FREEBIND, false},
    {IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, false},
    {IPPROTO_IP, IP_MTU, true},
    // IP options on this socket's packets (iputils' ping clears them).
    {IPPROTO_IP, IP_RETOPTS, false},
    {IPPROTO_IPV6, IPV6_V6ONLY, false},
    {IPPROTO_IPV6, IPV6_TCLASS, false},
    {IPPROTO_IPV6, IPV6_UNICAST_HOPS, false},
    {IPPROTO_IPV6, IPV6_MTU_DISCOVER, false},
    {IPPROTO_IPV6, IPV6_MTU, true},
    // What iproute2 and libmnl ask of a NETLINK_ROUTE socket.
    {SOL_NETLINK, NETLINK_EXT_ACK, false},
    {SOL_NETLINK, NETLINK_GET_STRICT_CHK, false},
    {SOL_NETLINK, NETLINK_CAP_ACK, false},
};

const AllowedOption* FindOption(int family, int level, int name) {
  // Each family's own levels only, as Linux routes them.
  if (family == AF_NETLINK &&
      !(level == SOL_SOCKET || level == SOL_NETLINK)) {
    return nullptr;
  }
  if (family != AF_NETLINK && level == SOL_NETLINK) return nullptr;
  for (const AllowedOption& o : kAllowed) {
    if (o.level == level && o.name == name) return &o;
  }
  return nullptr;
}

std::vector<uint8_t> TimeoutOption(absl::Duration d) {
  struct timeval tv = {};
  if (d != absl::InfiniteDuration()) tv = absl::ToTimeval(d);
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
    *out = absl::ZeroDuration();
  } else if (tv.tv_sec == 0 && tv.tv_usec == 0) {
    *out = absl::InfiniteDuration();
  } else {
    *out = absl::Seconds(tv.tv_sec) + absl::Microseconds(tv.tv_usec);
  }
  return 0;
}

std::string FormatAddress(const std::string& sa) {
  if (sa.size() >= sizeof(sockaddr_in) &&
      reinterpret_cast<const sockaddr*>(sa.data())->sa_family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, sa.data(), sizeof(in));
    char b[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &in.sin_addr, b, sizeof(b));
    return absl::StrCat(b, ":", ntohs(in.sin_port));
  }
  if (sa.size() >= sizeof(sockaddr_in6) &&
      reinterpret_cast<const sockaddr*>(sa.data())->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, sa.data(), sizeof(in6));
    char b[INET6_ADDRSTRLEN] = "";
    inet_ntop(AF_INET6, &in6.sin6_addr, b, sizeof(b));
    return absl::StrCat("[", b, "]:", ntohs(in6.sin6_port));
  }
  return "?";
}

}  // namespace

bool IsInterfaceIoctl(uint64_t request) {
  switch (request) {
    case SIOCGIFNAME: case SIOCGIFFLAGS: case SIOCGIFADDR:
    case SIOCGIFDSTADDR: case SIOCGIFBRDADDR: case SIOCGIFNETMASK:
    case SIOCGIFMETRIC: case SIOCGIFMTU: case SIOCGIFHWADDR:
    case SIOCGIFINDEX: case SIOCGIFTXQLEN:
      return true;
    default:
      return false;
  }
}

int64_t InterfaceIoctl(int family, uint64_t request, void* ifreq) {
  if (!IsInterfaceIoctl(request)) return -ENOTTY;
  // Asked of a host socket of the same kind: AF_INET's inet_ioctl answers
  // the IPv4 address requests (devinet_ioctl), every other family only
  // dev_ioctl's, as an AF_UNIX socket does (ENOTTY for SIOCGIFADDR, ...).
  UniqueFd s(::socket(family == AF_INET ? AF_INET : AF_UNIX,
                      SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return -errno;
  return ::ioctl(s.get(), request, ifreq) < 0 ? -errno : 0;
}

int64_t InterfaceConf(void* buf, int len) {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return -errno;
  struct ifconf ifc = {};
  ifc.ifc_len = len;
  ifc.ifc_buf = static_cast<char*>(buf);
  if (::ioctl(s.get(), SIOCGIFCONF, &ifc) < 0) return -errno;
  return ifc.ifc_len;
}

bool PassesControl(int family, int level, int type) {
  if (family != AF_INET && family != AF_INET6) return false;
  if (level == IPPROTO_IP) {
    return type == IP_PKTINFO || type == IP_TTL || type == IP_TOS;
  }
  if (level == IPPROTO_IPV6 && family == AF_INET6) {
    return type == IPV6_PKTINFO || type == IPV6_HOPLIMIT ||
           type == IPV6_TCLASS || type == IPV6_DONTFRAG;
  }
  return false;
}

bool HostSocket::Serves(int family) {
  return family == AF_INET || family == AF_INET6 || family == AF_NETLINK;
}

int64_t HostSocket::New(int family, int type, int protocol, bool nonblock,
                        std::shared_ptr<HostSocket>* out) {
  if (family == AF_NETLINK) {
    if (type != SOCK_RAW && type != SOCK_DGRAM) return -ESOCKTNOSUPPORT;
    if (protocol != NETLINK_ROUTE) return -EPROTONOSUPPORT;
  } else if (family == AF_INET || family == AF_INET6) {
    if (type != SOCK_STREAM && type != SOCK_DGRAM) return -ESOCKTNOSUPPORT;
  } else {
    return -EAFNOSUPPORT;
  }
  int fd = ::socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
  if (fd < 0) return -errno;
  out->reset(new HostSocket(UniqueFd(fd), family, type, protocol, nonblock));
  return 0;
}

int64_t HostSocket::NewReset(int family, int protocol, bool nonblock,
                             std::shared_ptr<HostSocket>* out) {
  if (family != AF_INET && family != AF_INET6) return -EAFNOSUPPORT;
  // A listener of our own on loopback, port 0.
  sockaddr_storage ss = {};
  socklen_t len;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    len = sizeof(*in6);
  }
  auto* sa = reinterpret_cast<sockaddr*>(&ss);
  UniqueFd lst(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!lst.valid()) return -errno;
  if (::bind(lst.get(), sa, len) != 0 || ::listen(lst.get(), 1) != 0 ||
      ::getsockname(lst.get(), sa, &len) != 0) {
    return -errno;
  }
  UniqueFd c(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      protocol));
  if (!c.valid()) return -errno;
  if (::connect(c.get(), sa, len) != 0 && errno != EINPROGRESS) return -errno;
  // Loopback completes the handshake at once; a second is generous.
  struct pollfd p = {lst.get(), POLLIN, 0};
  if (::poll(&p, 1, 1000) != 1) return -ETIMEDOUT;
  UniqueFd peer(::accept4(lst.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!peer.valid()) return -errno;
  // Closed with a zero linger: an RST instead of a FIN.
  struct linger lg = {1, 0};
  if (::setsockopt(peer.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) != 0) {
    return -errno;
  }
  peer.reset();
  p = {c.get(), POLLIN, 0};
  for (int i = 0; i < 100; i++) {
    if (::poll(&p, 1, 10) < 0 && errno != EINTR) return -errno;
    if (p.revents & POLLERR) break;
  }
  if (!(p.revents & POLLERR)) return -ETIMEDOUT;
  out->reset(new HostSocket(std::move(c), family, SOCK_STREAM, protocol,
                            nonblock));
  (*out)->connected_ = true;
  return 0;
}

HostSocket::HostSocket(UniqueFd fd, int family, int type, int protocol,
                       bool nonblock)
    : fd_(std::move(fd)),
      family_(family),
      type_(type),
      protocol_(protocol),
      ino_(fs::NextInodeNumber()),
      nonblock_(nonblock) {}

HostSocket::~HostSocket() {
  {
    absl::MutexLock l(&watch_mu_);
    if (watch_handle_ != 0) {
      waiter::HostPoller::Get()->Remove(fd_.get(), watch_handle_);
    }
  }
  // Epoll interests (which hold files weakly) learn that the file is gone.
  queue_->Notify(POLLHUP);
}

int64_t HostSocket::WaitFor(short events, const fs::IoContext& io,
                            absl::Duration timeout) {
  const bool forever = timeout == absl::InfiniteDuration();
  const absl::Time deadline = forever ? absl::InfiniteFuture()
                                      : absl::Now() + timeout;
  for (;;) {
    int ms = -1;
    if (!forever) {
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return -EAGAIN;
      ms = static_cast<int>(
          std::min<int64_t>(absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
                            INT32_MAX));
    }
    struct pollfd p[2] = {{fd_.get(), events, 0},
                          {io.interrupt_fd, POLLIN, 0}};
    if (io.blocker != nullptr) io.blocker->HostWaitBegin();
    int n = ::poll(p, io.interrupt_fd >= 0 ? 2 : 1, ms);
    if (io.blocker != nullptr) io.blocker->HostWaitEnd();
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (io.interrupt_fd >= 0 && (p[1].revents & POLLIN)) return -EINTR;
    if (p[0].revents != 0) return 0;
  }
}

int64_t HostSocket::Read(void* buf, uint64_t n, int64_t offset,
                         const fs::IoContext& io) {
  BufferSink sink(buf, std::min<uint64_t>(n, kChunk * 64));
  RecvRequest req;
  req.data = &sink;
  SocketContext ctx;
  ctx.io = io;
  return RecvMsg(ctx, req);
}

int64_t HostSocket::Write(const void* buf, uint64_t n, int64_t offset,
                          const fs::IoContext& io) {
  BufferSource src(buf, n);
  SendRequest req;
  req.data = &src;
  SocketContext ctx;
  ctx.io = io;
  bool sigpipe = false;  // write(2)'s caller raises it on EPIPE
  return SendMsg(ctx, req, &sigpipe);
}

int64_t HostSocket::Stat(struct stat* st) {
  std::memset(st, 0, sizeof(*st));
  st->st_dev = kSockfsDev;
  st->st_ino = ino_;
  st->st_mode = S_IFSOCK | 0777;
  st->st_nlink = 1;
  st->st_blksize = 4096;
  return 0;
}

int64_t HostSocket::Ioctl(uint64_t request, void* buf) {
  switch (request) {
    case FIONREAD:  // SIOCINQ
    case SIOCOUTQ:
    case SIOCATMARK:
    // The time of the last packet the host socket received (the Sentry's
    // receives are the application's), in the host's CLOCK_REALTIME, the
    // sandbox's clock: ENOENT before any, as sock_gettstamp.
    case SIOCGSTAMP_OLD:
    case SIOCGSTAMPNS_OLD:
    case SIOCGSTAMP_NEW:
    case SIOCGSTAMPNS_NEW:
      return ::ioctl(fd_.get(), request, buf) < 0 ? -errno : 0;
    default:
      return InterfaceIoctl(family_, request, buf);
  }
}

int HostSocket::StatusFlags() const {
  return O_RDWR | (nonblock_ ? O_NONBLOCK : 0);
}

int64_t HostSocket::SetStatusFlags(int flags) {
  nonblock_ = (flags & O_NONBLOCK) != 0;
  return 0;
}

waiter::EventMask HostSocket::Readiness(waiter::EventMask mask) {
  struct pollfd p = {fd_.get(), static_cast<short>(mask), 0};
  int n = ::poll(&p, 1, 0);
  if (n < 0) return POLLERR;
  return static_cast<uint16_t>(p.revents) & (mask | POLLERR | POLLHUP);
}

// The host fd is watched only while someone waits on it (fs::HostFile does
// the same): an idle socket costs the poller thread nothing.
void HostSocket::EventRegister(waiter::Waiter* w, waiter::EventMask mask) {
  queue_->Add(w, mask);
  if (w->NeedsPromptNotify()) waiter::HostPoller::NeedThread();
  absl::MutexLock l(&watch_mu_);
  if (watch_handle_ != 0) return;
  waiter::HostPoller* p = waiter::HostPoller::Get();
  if (p == nullptr) return;
  int64_t h = p->Add(fd_.get(), queue_);
  if (h > 0) watch_handle_ = static_cast<uint64_t>(h);
}

void HostSocket::EventUnregister(waiter::Waiter* w) {
  queue_->Remove(w);
  if (w->NeedsPromptNotify()) waiter::HostPoller::DoneWithThread();
  absl::MutexLock l(&watch_mu_);
  if (watch_handle_ != 0 && queue_->empty()) {
    waiter::HostPoller::Get()->Remove(fd_.get(), watch_handle_);
    watch_handle_ = 0;
  }
}

int64_t HostSocket::Bind(const SocketContext& ctx, const std::string& addr) {
  if (::bind(fd_.get(), reinterpret_cast<const sockaddr*>(addr.data()),
             addr.size()) != 0) {
    return -errno;
  }
  return 0;
}

int64_t HostSocket::Listen(const SocketContext& ctx, int backlog) {
  if (::listen(fd_.get(), backlog) != 0) return -errno;
  backlog_ = backlog;
  return 0;
}

int64_t HostSocket::Accept(const SocketContext& ctx, bool new_nonblocking,
                           std::shared_ptr<Socket>* out, std::string* peer) {
  absl::Duration timeout;
  {
    absl::MutexLock l(&mu_);
    timeout = rcvtimeo_;
  }
  for (;;) {
    sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int nfd = ::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                        SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (nfd >= 0) {
      peer->assign(reinterpret_cast<const char*>(&ss),
                   std::min<size_t>(len, sizeof(ss)));
      std::shared_ptr<HostSocket> conn(new HostSocket(
          UniqueFd(nfd), family_, type_, protocol_, new_nonblocking));
      conn->connected_ = true;
      *out = std::move(conn);
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return -errno;
    if (nonblock_) return -EAGAIN;
    if (int64_t w = WaitFor(POLLIN, ctx.io, timeout); w < 0) return w;
  }
}

int64_t HostSocket::Connect(const SocketContext& ctx, const std::string& addr) {
  if (::connect(fd_.get(), reinterpret_cast<const sockaddr*>(addr.data()),
                addr.size()) == 0) {
    connected_ = true;
    return 0;
  }
  const int e = errno;
  if (e == EINPROGRESS) connected_ = true;
  if (e != EINPROGRESS || nonblock_) return -e;
  absl::Duration timeout;
  {
    absl::MutexLock l(&mu_);
    timeout = sndtimeo_;
  }
  // As Linux's inet_wait_for_connect: a timeout leaves the connection in
  // progress (EINPROGRESS), a signal too (EINTR; connect again says
  // EALREADY).
  int64_t w = WaitFor(POLLOUT, ctx.io, timeout);
  if (w == -EAGAIN) return -EINPROGRESS;
  if (w < 0) return w;
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
    return -errno;
  }
  return -err;
}

int64_t HostSocket::GetSockName(std::string* addr) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return -errno;
  }
  addr->assign(reinterpret_cast<const char*>(&ss),
               std::min<size_t>(len, sizeof(ss)));
  return 0;
}

int64_t HostSocket::GetPeerName(std::string* addr) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (::getpeername(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return -errno;
  }
  addr->assign(reinterpret_cast<const char*>(&ss),
               std::min<size_t>(len, sizeof(ss)));
  return 0;
}

int64_t HostSocket::Shutdown(int how) {
  return ::shutdown(fd_.get(), how) != 0 ? -errno : 0;
}

int64_t HostSocket::GetSockOpt(const SocketContext& ctx, int level, int name,
                               std::vector<uint8_t>* val) {
  if (level == SOL_SOCKET &&
      (name == kSoRcvTimeoOld || name == kSoRcvTimeoNew ||
       name == kSoSndTimeoOld || name == kSoSndTimeoNew)) {
    absl::Duration d;
    {
      absl::MutexLock l(&mu_);
      d = (name == kSoRcvTimeoOld || name == kSoRcvTimeoNew) ? rcvtimeo_
                                                             : sndtimeo_;
    }
    std::vector<uint8_t> v = TimeoutOption(d);
    if (val->size() < v.size()) v.resize(val->size());
    *val = std::move(v);
    return 0;
  }
  if (FindOption(family_, level, name) == nullptr) return -ENOPROTOOPT;
  socklen_t len = val->size();
  if (::getsockopt(fd_.get(), level, name, val->data(), &len) != 0) {
    return -errno;
  }
  val->resize(std::min<size_t>(len, val->size()));
  return 0;
}

int64_t HostSocket::SetSockOpt(const SocketContext& ctx, int level, int name,
                               const std::vector<uint8_t>& val) {
  if (level == SOL_SOCKET &&
      (name == kSoRcvTimeoOld || name == kSoRcvTimeoNew ||
       name == kSoSndTimeoOld || name == kSoSndTimeoNew)) {
    absl::Duration d;
    if (int64_t r = ParseTimeout(val, &d); r < 0) return r;
    absl::MutexLock l(&mu_);
    ((name == kSoRcvTimeoOld || name == kSoRcvTimeoNew) ? rcvtimeo_
                                                        : sndtimeo_) = d;
    return 0;
  }
  const AllowedOption* o = FindOption(family_, level, name);
  if (o == nullptr || o->get_only) return -ENOPROTOOPT;
  if (::setsockopt(fd_.get(), level, name, val.data(), val.size()) != 0) {
    return -errno;
  }
  return 0;
}

ssize_t HostSocket::HostSend(const SendRequest& req, const void* p, size_t n,
                             int flags, const sockaddr* to, socklen_t tolen) {
  if (req.control.empty()) return ::sendto(fd_.get(), p, n, flags, to, tolen);
  iovec iov = {const_cast<void*>(p), n};
  msghdr m = {};
  m.msg_name = const_cast<sockaddr*>(to);
  m.msg_namelen = tolen;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = const_cast<uint8_t*>(req.control.data());
  m.msg_controllen = req.control.size();
  return ::sendmsg(fd_.get(), &m, flags);
}

bool HostSocket::NetlinkReadOnly(const uint8_t* p, size_t n) {
  size_t off = 0;
  while (off + sizeof(nlmsghdr) <= n) {
    nlmsghdr h;
    std::memcpy(&h, p + off, sizeof(h));
    if (h.nlmsg_len < sizeof(nlmsghdr) || h.nlmsg_len > n - off) break;
    // RTM_NEW*, RTM_DEL*, RTM_GET*, RTM_SET* come in fours from RTM_BASE.
    if (h.nlmsg_type < RTM_BASE || (h.nlmsg_type - RTM_BASE) % 4 != 2) {
      return false;
    }
    off += NLMSG_ALIGN(h.nlmsg_len);
  }
  return true;
}

int64_t HostSocket::SendStream(const SocketContext& ctx, SendRequest& req,
                               bool block, const sockaddr* to,
                               socklen_t tolen) {
  absl::Duration timeout;
  {
    absl::MutexLock l(&mu_);
    timeout = sndtimeo_;
  }
  const int flags = (req.flags & kSendFlags) | MSG_DONTWAIT | MSG_NOSIGNAL;
  std::vector<uint8_t> buf;
  size_t have = 0, off = 0;
  int64_t sent = 0;
  for (;;) {
    if (off == have) {
      const size_t want = std::min(req.data->remaining(), kChunk);
      if (want == 0) break;
      buf.resize(want);
      int64_t c = req.data->Read(buf.data(), want);
      if (c <= 0) return sent > 0 ? sent : (c < 0 ? c : 0);
      have = c;
      off = 0;
    }
    ssize_t r = HostSend(req, buf.data() + off, have - off, flags, to, tolen);
    if (r >= 0) {
      sent += r;
      off += r;
      continue;
    }
    const int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN) {
      if (!block) return sent > 0 ? sent : -EAGAIN;
      int64_t w = WaitFor(POLLOUT, ctx.io, timeout);
      if (w < 0) return sent > 0 ? sent : w;
      continue;
    }
    if (sent > 0) return sent;
    return -e;
  }
  return sent;
}

int64_t HostSocket::SendDgram(const SocketContext& ctx, SendRequest& req,
                              bool block, const sockaddr* to,
                              socklen_t tolen) {
  const size_t n = req.data->remaining();
  if (n > kChunk) return -EMSGSIZE;
  std::vector<uint8_t> buf(n);
  if (n > 0) {
    int64_t c = req.data->Read(buf.data(), n);
    if (c < 0) return c;
    if (static_cast<size_t>(c) < n) return -EFAULT;
  }
  if (family_ == AF_NETLINK && !NetlinkReadOnly(buf.data(), n)) return -EPERM;
  absl::Duration timeout;
  {
    absl::MutexLock l(&mu_);
    timeout = sndtimeo_;
  }
  const int flags = (req.flags & kSendFlags) | MSG_DONTWAIT | MSG_NOSIGNAL;
  for (;;) {
    ssize_t r = HostSend(req, buf.data(), n, flags, to, tolen);
    if (r >= 0) return r;
    const int e = errno;
    if (e == EINTR) continue;
    if (e != EAGAIN || !block) return -e;
    if (int64_t w = WaitFor(POLLOUT, ctx.io, timeout); w < 0) return w;
  }
}

int64_t HostSocket::SendMsg(const SocketContext& ctx, SendRequest& req,
                            bool* raise_sigpipe) {
  // Descriptors cross AF_UNIX sockets only (__scm_send: EINVAL);
  // SCM_CREDENTIALS is checked by the caller and carries nothing here.
  if (!req.rights.empty()) return -EINVAL;
  const bool block = !nonblock_ && (req.flags & MSG_DONTWAIT) == 0;
  const sockaddr* to = req.address.empty()
      ? nullptr : reinterpret_cast<const sockaddr*>(req.address.data());
  const socklen_t tolen = req.address.size();
  int64_t r = type_ == SOCK_STREAM ? SendStream(ctx, req, block, to, tolen)
                                   : SendDgram(ctx, req, block, to, tolen);
  if (r == -EPIPE && (req.flags & MSG_NOSIGNAL) == 0) *raise_sigpipe = true;
  return r;
}

int64_t HostSocket::RecvMsg(const SocketContext& ctx, RecvRequest& req) {
  // The error queue never blocks (sock_recv_errqueue: EAGAIN when empty).
  const bool block = !nonblock_ &&
                     (req.flags & (MSG_DONTWAIT | MSG_ERRQUEUE)) == 0;
  const bool waitall = type_ == SOCK_STREAM && (req.flags & MSG_WAITALL) &&
                       !(req.flags & (MSG_PEEK | MSG_TRUNC));
  const int flags = (req.flags & kRecvFlags) | MSG_DONTWAIT;
  absl::Duration timeout;
  {
    absl::MutexLock l(&mu_);
    timeout = rcvtimeo_;
  }
  std::vector<uint8_t> buf;
  int64_t got = 0;
  for (;;) {
    // A datagram is taken whole even into an empty buffer (it is dropped,
    // as Linux does): the buffer is never smaller than one byte.
    const size_t want = std::min(req.data->remaining(), kChunk);
    if (want == 0 && type_ == SOCK_STREAM && got > 0) return got;
    buf.resize(std::max<size_t>(want, 1));
    sockaddr_storage ss;
    iovec iov = {buf.data(), want};
    msghdr m = {};
    m.msg_name = req.want_address ? &ss : nullptr;
    m.msg_namelen = req.want_address ? sizeof(ss) : 0;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    alignas(cmsghdr) uint8_t control[kControlRoom];
    if (req.want_control && got == 0) {
      m.msg_control = control;
      m.msg_controllen = sizeof(control);
    }
    ssize_t r = ::recvmsg(fd_.get(), &m, flags);
    if (r < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN && block) {
        int64_t w = WaitFor(POLLIN, ctx.io, timeout);
        if (w < 0) return got > 0 ? got : w;
        continue;
      }
      return got > 0 ? got : -e;
    }
    // MSG_TRUNC asks for a datagram's real length, which may exceed what
    // was copied.
    const size_t copied = std::min<size_t>(r, want);
    if (copied > 0) {
      int64_t c = req.data->Write(buf.data(), copied);
      if (c < 0) return got > 0 ? got : c;
    }
    if (req.want_address && got == 0) {
      req.address.assign(reinterpret_cast<const char*>(&ss),
                         std::min<size_t>(m.msg_namelen, sizeof(ss)));
    }
    if (m.msg_controllen > 0) {
      req.control.assign(control, control + m.msg_controllen);
    }
    req.msg_flags |= m.msg_flags & (MSG_TRUNC | MSG_CTRUNC | MSG_OOB |
                                    MSG_EOR | MSG_ERRQUEUE);
    got += r;
    if (!waitall || r == 0 || req.data->remaining() == 0) return got;
  }
}

std::string HostSocket::Describe() {
  const char* fam = family_ == AF_INET    ? "AF_INET"
                    : family_ == AF_INET6 ? "AF_INET6"
                                          : "AF_NETLINK";
  const char* ty = type_ == SOCK_STREAM  ? "SOCK_STREAM"
                   : type_ == SOCK_DGRAM ? "SOCK_DGRAM"
                                         : "SOCK_RAW";
  std::string out = absl::StrCat("an ", fam, " ", ty, " socket");
  if (family_ == AF_NETLINK) return out;
  std::string name, peer;
  if (GetSockName(&name) == 0) absl::StrAppend(&out, " on ", FormatAddress(name));
  if (GetPeerName(&peer) == 0) {
    absl::StrAppend(&out, " connected to ", FormatAddress(peer));
  }
  return out;
}

}  // namespace sandboxd::socket
