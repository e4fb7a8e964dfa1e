// Socket syscalls: decode sockaddrs, msghdrs, iovecs and control messages
// from application memory, call the socket (sentry/socket/socket.h), and
// encode the results back. AF_UNIX is the Sentry's own (unix_socket.h);
// AF_INET, AF_INET6 and NETLINK_ROUTE are host sockets in the sandbox's
// network namespace (host_socket.h); the other families fail with Linux's
// "not supported" answers and are counted.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sentry/socket/host_socket.h"
#include "sentry/socket/socket.h"
#include "sentry/socket/unix_endpoint.h"
#include "sentry/socket/unix_socket.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/socket_syscalls.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {

// One Sentry process runs one sandbox, so the namespace is the process's;
// it moves into the kernel with network namespaces.
socket::UnixNamespace& SandboxUnixNamespace() {
  static auto* ns = new socket::UnixNamespace();
  return *ns;
}

namespace {

using socket::Socket;

constexpr uint64_t kMaxRw = 0x7ffff000;      // MAX_RW_COUNT
constexpr int kIovMax = 1024;                // UIO_MAXIOV
constexpr size_t kMaxSockaddr = sizeof(struct sockaddr_storage);
constexpr size_t kMaxControl = 64 * 1024;    // Linux: optmem_max-ish
constexpr size_t kMaxOptLen = 64 * 1024;
constexpr size_t kScmMaxFd = 253;            // SCM_MAX_FD
constexpr int kSockTypeMask = 0xf;
constexpr int kSockMax = 11;                 // SOCK_MAX


// SO_PEERCRED and SCM_CREDENTIALS carry the effective ids (cred_to_ucred).
socket::Credentials CallerCredentials(Task& t) {
  const fs::Credentials& c = t.own_creds();
  return socket::Credentials{t.group().tgid(), c.euid, c.egid};
}

socket::SocketContext Context(Task& t) {
  socket::SocketContext c;
  c.io = t.io();
  c.creds = CallerCredentials(t);
  c.vfs = &t.kernel().vfs();
  c.fs = &t.group().fs();
  c.unix_ns = &SandboxUnixNamespace();
  return c;
}

SysResult<std::shared_ptr<Socket>> SocketFor(Task& t, uint64_t fd) {
  return FileAs<Socket>(t, fd, -ENOTSOCK);
}

// move_addr_to_kernel.
int64_t ReadSockaddr(Task& t, uint64_t addr, uint64_t len, std::string* out) {
  if (static_cast<int32_t>(len) < 0 || len > kMaxSockaddr) return -EINVAL;
  out->resize(len);
  if (len == 0) return 0;
  return CopyInBytes(t, addr, out->data(), len);
}

// move_addr_to_user: copies what fits, stores the full length.
int64_t WriteSockaddr(Task& t, const std::string& sa, uint64_t addr,
                      uint64_t len_addr) {
  int32_t len;
  RETURN_IF_ERRNO(CopyInObj(t, len_addr, &len));
  if (len < 0) return -EINVAL;
  size_t n = std::min<size_t>(len, sa.size());
  if (n > 0) RETURN_IF_ERRNO(CopyOutBytes(t, addr, sa.data(), n));
  return CopyOutObj(t, len_addr, static_cast<int32_t>(sa.size()));
}

int64_t ReadIovecs(Task& t, uint64_t addr, uint64_t cnt,
                   std::vector<iovec>* out) {
  if (cnt > kIovMax) return -EMSGSIZE;
  out->resize(cnt);
  if (cnt == 0) return 0;
  RETURN_IF_ERRNO(CopyInBytes(t, addr, out->data(), cnt * sizeof(iovec)));
  uint64_t total = 0;
  for (iovec& v : *out) {
    if (v.iov_len > static_cast<uint64_t>(INT64_MAX) - total) return -EINVAL;
    // Linux truncates the total to MAX_RW_COUNT.
    v.iov_len = std::min<uint64_t>(v.iov_len, kMaxRw - std::min(total, kMaxRw));
    total += v.iov_len;
  }
  return 0;
}

// Application memory described by iovecs, front to back.
class UserIovecs {
 public:
  UserIovecs(Task& t, std::vector<iovec> iov) : t_(t), iov_(std::move(iov)) {
    for (const iovec& v : iov_) remaining_ += v.iov_len;
  }
  size_t remaining() const { return remaining_; }

  // Copies n bytes between `p` and the iovecs: the count, or -EFAULT when
  // nothing could be copied.
  int64_t Copy(uint8_t* p, size_t n, bool to_user) {
    size_t done = 0;
    while (done < n && idx_ < iov_.size()) {
      const iovec& v = iov_[idx_];
      size_t k = std::min(n - done, v.iov_len - off_);
      uintptr_t a = reinterpret_cast<uintptr_t>(v.iov_base) + off_;
      int64_t c = k == 0 ? 0
                  : to_user ? t_.mm().CopyOut(a, p + done, k)
                            : t_.mm().CopyIn(a, p + done, k);
      if (c < 0) break;
      done += c;
      off_ += c;
      remaining_ -= c;
      if (static_cast<size_t>(c) < k) break;
      if (off_ == v.iov_len) {
        idx_++;
        off_ = 0;
      }
    }
    if (done == 0 && n > 0) return -EFAULT;
    return done;
  }

 private:
  Task& t_;
  std::vector<iovec> iov_;
  size_t idx_ = 0;
  size_t off_ = 0;
  size_t remaining_ = 0;
};

class UserSource : public socket::IoSource {
 public:
  UserSource(Task& t, std::vector<iovec> iov) : io_(t, std::move(iov)) {}
  size_t remaining() const override { return io_.remaining(); }
  int64_t Read(uint8_t* dst, size_t n) override { return io_.Copy(dst, n, false); }

 private:
  UserIovecs io_;
};

class UserSink : public socket::IoSink {
 public:
  UserSink(Task& t, std::vector<iovec> iov) : io_(t, std::move(iov)) {}
  size_t remaining() const override { return io_.remaining(); }
  int64_t Write(const uint8_t* src, size_t n) override {
    return io_.Copy(const_cast<uint8_t*>(src), n, true);
  }

 private:
  UserIovecs io_;
};

std::vector<iovec> OneIovec(uint64_t base, uint64_t len) {
  return {iovec{reinterpret_cast<void*>(base),
                static_cast<size_t>(std::min<uint64_t>(len, kMaxRw))}};
}

// The SOCK_* flags socket(2), socketpair(2) and accept4(2) take.
int64_t SplitTypeFlags(uint64_t arg, int* type, bool* nonblock, bool* cloexec) {
  int v = static_cast<int>(arg);
  int flags = v & ~kSockTypeMask;
  if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) return -EINVAL;
  *type = v & kSockTypeMask;
  if (*type >= kSockMax) return -EINVAL;
  *nonblock = (flags & SOCK_NONBLOCK) != 0;
  *cloexec = (flags & SOCK_CLOEXEC) != 0;
  return 0;
}

// The families Linux has but the sandbox does not serve (yet).
int64_t UnsupportedFamily(Task& t, uint64_t nr, int domain) {
  t.kernel().CountUnimplemented(nr);
  return -EAFNOSUPPORT;
}

int64_t SysSocket(Task& t, const SyscallArgs& a) {
  int domain = static_cast<int>(a.a[0]);
  int type;
  bool nonblock, cloexec;
  RETURN_IF_ERRNO(SplitTypeFlags(a.a[1], &type, &nonblock, &cloexec));
  if (domain < 0 || domain >= AF_MAX) return -EAFNOSUPPORT;
  if (socket::HostSocket::Serves(domain)) {
    std::shared_ptr<socket::HostSocket> hs;
    int64_t r = socket::HostSocket::New(domain, type, static_cast<int>(a.a[2]),
                                        nonblock, &hs);
    // Types and protocols Linux has that hostinet does not serve (raw
    // sockets, netlink families other than NETLINK_ROUTE).
    if (r == -ESOCKTNOSUPPORT || r == -EPROTONOSUPPORT) {
      t.kernel().CountUnimplemented(SYS_socket);
    }
    if (r < 0) return r;
    return t.group().fds().Install(std::move(hs), cloexec);
  }
  if (domain != AF_UNIX) return UnsupportedFamily(t, SYS_socket, domain);
  std::shared_ptr<socket::UnixSocket> s;
  RETURN_IF_ERRNO(socket::UnixSocket::New(&SandboxUnixNamespace(), type,
                                          static_cast<int>(a.a[2]), nonblock,
                                          CallerCredentials(t), &s));
  return t.group().fds().Install(std::move(s), cloexec);
}

int64_t SysSocketpair(Task& t, const SyscallArgs& a) {
  int domain = static_cast<int>(a.a[0]);
  int type;
  bool nonblock, cloexec;
  RETURN_IF_ERRNO(SplitTypeFlags(a.a[1], &type, &nonblock, &cloexec));
  if (domain < 0 || domain >= AF_MAX) return -EAFNOSUPPORT;
  // Linux's inet families have no socketpair.
  if (domain == AF_INET || domain == AF_INET6) return -EOPNOTSUPP;
  if (domain != AF_UNIX) return UnsupportedFamily(t, SYS_socketpair, domain);
  std::shared_ptr<socket::UnixSocket> s0, s1;
  RETURN_IF_ERRNO(socket::UnixSocket::NewPair(
      &SandboxUnixNamespace(), type, static_cast<int>(a.a[2]), nonblock,
      CallerCredentials(t), &s0, &s1));
  return InstallFdPair(t, std::move(s0), std::move(s1), cloexec, a.a[3]);
}

int64_t SysBind(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  std::string addr;
  RETURN_IF_ERRNO(ReadSockaddr(t, a.a[1], a.a[2], &addr));
  // Ports below 1024 need CAP_NET_BIND_SERVICE (inet_bind): the sandbox's
  // capabilities are the Sentry's to check, the host's namespace lets the
  // Sentry bind them all.
  if ((s->family() == AF_INET || s->family() == AF_INET6) &&
      addr.size() >= sizeof(sa_family_t) + sizeof(in_port_t)) {
    sa_family_t fam;
    in_port_t port;
    std::memcpy(&fam, addr.data(), sizeof(fam));
    std::memcpy(&port, addr.data() + sizeof(fam), sizeof(port));
    const int p = ntohs(port);
    if ((fam == AF_INET || fam == AF_INET6) && p > 0 && p < 1024 &&
        !t.own_creds().HasCap(CAP_NET_BIND_SERVICE)) {
      return -EACCES;
    }
  }
  return s->Bind(Context(t), addr);
}

int64_t SysConnect(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  std::string addr;
  RETURN_IF_ERRNO(ReadSockaddr(t, a.a[1], a.a[2], &addr));
  return s->Connect(Context(t), addr);
}

int64_t SysListen(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  return s->Listen(Context(t), static_cast<int>(a.a[1]));
}

int64_t DoAccept(Task& t, uint64_t fd, uint64_t addr, uint64_t len_addr,
                 int flags) {
  if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, fd));
  std::shared_ptr<Socket> conn;
  std::string peer;
  RETURN_IF_ERRNO(
      s->Accept(Context(t), (flags & SOCK_NONBLOCK) != 0, &conn, &peer));
  // As Linux: on a fault the connection is dropped.
  if (addr != 0) RETURN_IF_ERRNO(WriteSockaddr(t, peer, addr, len_addr));
  return t.group().fds().Install(std::move(conn), (flags & SOCK_CLOEXEC) != 0);
}

int64_t SysAccept(Task& t, const SyscallArgs& a) {
  return DoAccept(t, a.a[0], a.a[1], a.a[2], 0);
}

int64_t SysAccept4(Task& t, const SyscallArgs& a) {
  return DoAccept(t, a.a[0], a.a[1], a.a[2], static_cast<int>(a.a[3]));
}

int64_t SysGetsockname(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  std::string addr;
  RETURN_IF_ERRNO(s->GetSockName(&addr));
  return WriteSockaddr(t, addr, a.a[1], a.a[2]);
}

int64_t SysGetpeername(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  std::string addr;
  RETURN_IF_ERRNO(s->GetPeerName(&addr));
  return WriteSockaddr(t, addr, a.a[1], a.a[2]);
}

int64_t SysShutdown(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  return s->Shutdown(static_cast<int>(a.a[1]));
}

// Options Linux answers with ENOPROTOOPT too: not worth counting. An
// AF_UNIX socket has no other level; the other families have theirs.
bool LinuxRejectsToo(int family, int level, int name, bool set) {
  if (level != SOL_SOCKET) return family == AF_UNIX;
  if (!set) return false;
  switch (name) {
    case SO_TYPE:
    case SO_DOMAIN:
    case SO_PROTOCOL:
    case SO_ERROR:
    case SO_ACCEPTCONN:
    case SO_PEERCRED:
      return true;
    default:
      return false;
  }
}

int64_t SysGetsockopt(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  int level = static_cast<int>(a.a[1]);
  int name = static_cast<int>(a.a[2]);
  int32_t len;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[4], &len));
  if (len < 0) return -EINVAL;
  std::vector<uint8_t> val(std::min<size_t>(len, kMaxOptLen));
  int64_t r = s->GetSockOpt(Context(t), level, name, &val);
  if (r == -ENOPROTOOPT && !LinuxRejectsToo(s->family(), level, name, false)) {
    t.kernel().CountUnimplemented(SYS_getsockopt);
  }
  if (r < 0) return r;
  if (!val.empty())
    RETURN_IF_ERRNO(CopyOutBytes(t, a.a[3], val.data(), val.size()));
  return CopyOutObj(t, a.a[4], static_cast<int32_t>(val.size()));
}

int64_t SysSetsockopt(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  int level = static_cast<int>(a.a[1]);
  int name = static_cast<int>(a.a[2]);
  int32_t len = static_cast<int32_t>(a.a[4]);
  if (len < 0) return -EINVAL;
  std::vector<uint8_t> val(std::min<size_t>(len, kMaxOptLen));
  if (!val.empty())
    RETURN_IF_ERRNO(CopyInBytes(t, a.a[3], val.data(), val.size()));
  int64_t r = s->SetSockOpt(Context(t), level, name, val);
  if (r == -ENOPROTOOPT && !LinuxRejectsToo(s->family(), level, name, true)) {
    t.kernel().CountUnimplemented(SYS_setsockopt);
  }
  return r;
}

// Sends `req` and raises SIGPIPE where Linux does.
int64_t DoSend(Task& t, Socket& s, socket::SendRequest& req) {
  bool sigpipe = false;
  int64_t r = s.SendMsg(Context(t), req, &sigpipe);
  if (sigpipe) t.SendSignal(SIGPIPE, t.group().tgid());
  return r;
}

int64_t SysSendto(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  // A send split by a checkpoint's stop: the rest of it.
  const uint64_t moved = std::min<uint64_t>(t.TakeResumedMoved(), a.a[2]);
  UserSource src(t, OneIovec(a.a[1] + moved, a.a[2] - moved));
  socket::SendRequest req;
  req.data = &src;
  req.flags = static_cast<int>(a.a[3]);
  if (a.a[4] != 0)
    RETURN_IF_ERRNO(ReadSockaddr(t, a.a[4], a.a[5], &req.address));
  return kernel::WithResumedMoved(moved, DoSend(t, *s, req));
}

// Control messages of a sendmsg: SCM_RIGHTS and SCM_CREDENTIALS; on
// AF_INET/AF_INET6 sockets also the IP-level ones hostinet passes on
// (socket::PassesControl), copied into req->control. Other IP-level ones
// are EINVAL, as Linux's ip_cmsg_send for a type it does not know, and
// counted as unimplemented.
int64_t ParseControl(Task& t, int family, const std::vector<uint8_t>& control,
                     socket::SendRequest* req) {
  size_t off = 0;
  while (off + sizeof(cmsghdr) <= control.size()) {
    cmsghdr h;
    std::memcpy(&h, control.data() + off, sizeof(h));
    if (h.cmsg_len < sizeof(cmsghdr) || h.cmsg_len > control.size() - off) {
      return -EINVAL;
    }
    const uint8_t* data = control.data() + off + CMSG_LEN(0);
    const size_t data_len = h.cmsg_len - CMSG_LEN(0);
    if ((family == AF_INET || family == AF_INET6) &&
        (h.cmsg_level == IPPROTO_IP || h.cmsg_level == IPPROTO_IPV6)) {
      if (!socket::PassesControl(family, h.cmsg_level, h.cmsg_type)) {
        t.kernel().CountUnimplemented(SYS_sendmsg);
        return -EINVAL;
      }
      const size_t at = req->control.size();
      req->control.resize(at + CMSG_SPACE(data_len));
      std::memcpy(req->control.data() + at, control.data() + off,
                  h.cmsg_len);
    }
    // Other levels are not for this layer (Linux skips them too).
    if (h.cmsg_level == SOL_SOCKET) {
      switch (h.cmsg_type) {
        case SCM_RIGHTS: {
          size_t n = data_len / sizeof(int);
          if (req->rights.size() + n > kScmMaxFd) return -EINVAL;
          for (size_t i = 0; i < n; i++) {
            int fd;
            std::memcpy(&fd, data + i * sizeof(int), sizeof(int));
            std::shared_ptr<fs::File> f =
                fd < 0 ? nullptr : t.group().fds().Get(fd);
            if (f == nullptr) return -EBADF;
            req->rights.push_back(std::move(f));
          }
          break;
        }
        case SCM_CREDENTIALS: {
          if (h.cmsg_len != CMSG_LEN(sizeof(struct ucred))) return -EINVAL;
          struct ucred uc;
          std::memcpy(&uc, data, sizeof(uc));
          // scm_check_creds: one's own pid, uids and gids, unless
          // CAP_SYS_ADMIN (pid), CAP_SETUID, CAP_SETGID; a pid that does
          // not exist is ESRCH.
          const fs::Credentials& c = t.own_creds();
          const uint32_t uid = uc.uid, gid = uc.gid;
          if (!((uc.pid == t.group().tgid() || c.HasCap(CAP_SYS_ADMIN)) &&
                (uid == c.ruid || uid == c.euid || uid == c.suid ||
                 c.HasCap(CAP_SETUID)) &&
                (gid == c.rgid || gid == c.egid || gid == c.sgid ||
                 c.HasCap(CAP_SETGID)))) {
            return -EPERM;
          }
          if (uc.pid != t.group().tgid() &&
              t.kernel().FindGroup(uc.pid) == nullptr) {
            return -ESRCH;
          }
          req->creds = socket::Credentials{uc.pid, uc.uid, uc.gid};
          break;
        }
        default:
          return -EINVAL;
      }
    }
    off += CMSG_ALIGN(h.cmsg_len);
  }
  return 0;
}

// One sendmsg(2) of the msghdr at `msg_addr`.
int64_t DoSendmsg(Task& t, Socket& s, uint64_t msg_addr, int flags) {
  struct msghdr m;
  RETURN_IF_ERRNO(CopyInObj(t, msg_addr, &m));
  std::vector<iovec> iov;
  RETURN_IF_ERRNO(
      ReadIovecs(t, reinterpret_cast<uint64_t>(m.msg_iov), m.msg_iovlen, &iov));
  socket::SendRequest req;
  req.flags = flags;
  if (m.msg_name != nullptr && m.msg_namelen != 0) {
    RETURN_IF_ERRNO(ReadSockaddr(
        t, reinterpret_cast<uint64_t>(m.msg_name),
        std::min<uint64_t>(m.msg_namelen, kMaxSockaddr), &req.address));
  }
  if (m.msg_controllen > 0) {
    if (m.msg_controllen > kMaxControl) return -ENOBUFS;
    std::vector<uint8_t> control(m.msg_controllen);
    RETURN_IF_ERRNO(CopyInBytes(t, reinterpret_cast<uint64_t>(m.msg_control),
                                control.data(), control.size()));
    RETURN_IF_ERRNO(ParseControl(t, s.family(), control, &req));
  }
  UserSource src(t, std::move(iov));
  req.data = &src;
  return DoSend(t, s, req);
}

int64_t SysSendmsg(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  return DoSendmsg(t, *s, a.a[1], static_cast<int>(a.a[2]));
}

// sendmmsg(2): messages are sent one by one; msg_len of each is written
// after it. An error after the first message ends the call with the count
// (Linux keeps the error for the next call on the socket; here it is
// found again by that call).
int64_t SysSendmmsg(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  const uint64_t vlen = std::min<uint64_t>(static_cast<uint32_t>(a.a[2]),
                                           kIovMax);  // UIO_MAXIOV
  const int flags = static_cast<int>(a.a[3]);
  uint64_t done = 0;
  for (; done < vlen; done++) {
    const uint64_t m = a.a[1] + done * sizeof(struct mmsghdr);
    int64_t r = DoSendmsg(t, *s, m, flags);
    if (r < 0) {
      if (done > 0) break;
      return r;
    }
    int64_t w = CopyOutObj(t, m + offsetof(struct mmsghdr, msg_len),
                           static_cast<uint32_t>(r));
    if (w < 0) return done > 0 ? static_cast<int64_t>(done) : w;
  }
  return done;
}

int64_t SysRecvfrom(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  // A recv(MSG_WAITALL) split by a checkpoint's stop: the rest of it.
  const uint64_t moved = std::min<uint64_t>(t.TakeResumedMoved(), a.a[2]);
  UserSink sink(t, OneIovec(a.a[1] + moved, a.a[2] - moved));
  socket::RecvRequest req;
  req.data = &sink;
  req.flags = static_cast<int>(a.a[3]) & ~MSG_CMSG_CLOEXEC;
  req.want_address = a.a[4] != 0;
  int64_t r = kernel::WithResumedMoved(moved, s->RecvMsg(Context(t), req));
  // Files that came without a control buffer to put them in are closed.
  if (r >= 0 && a.a[4] != 0) {
    RETURN_IF_ERRNO(WriteSockaddr(t, req.address, a.a[4], a.a[5]));
  }
  return r;
}

// Writes recvmsg's control messages into the application's buffer, as
// Linux's put_cmsg and scm_detach_fds: what does not fit is truncated
// (MSG_CTRUNC), and files that do not fit are closed.
class ControlWriter {
 public:
  ControlWriter(Task& t, uint64_t addr, uint64_t len)
      : t_(t), addr_(addr), len_(addr == 0 ? 0 : len) {}

  int64_t Put(int level, int type, const void* data, size_t n) {
    size_t room = len_ - used_;
    if (room < sizeof(cmsghdr)) {
      flags_ |= MSG_CTRUNC;
      return 0;
    }
    cmsghdr h = {};
    h.cmsg_len = CMSG_LEN(n);
    h.cmsg_level = level;
    h.cmsg_type = type;
    size_t cmlen = CMSG_LEN(n);
    if (room < cmlen) {
      flags_ |= MSG_CTRUNC;
      cmlen = room;
    }
    std::vector<uint8_t> buf(cmlen);
    std::memcpy(buf.data(), &h, sizeof(h));
    std::memcpy(buf.data() + CMSG_LEN(0), data, cmlen - CMSG_LEN(0));
    RETURN_IF_ERRNO(CopyOutBytes(t_, addr_ + used_, buf.data(), cmlen));
    used_ += std::min<size_t>(CMSG_SPACE(n), room);
    return 0;
  }

  int64_t PutRights(std::vector<std::shared_ptr<fs::File>>* files,
                    bool cloexec) {
    if (files->empty()) return 0;
    size_t room = len_ - used_;
    size_t fdmax = room > CMSG_LEN(0) ? (room - CMSG_LEN(0)) / sizeof(int) : 0;
    std::vector<int32_t> fds;
    for (size_t i = 0; i < files->size() && i < fdmax; i++) {
      int64_t fd = t_.group().fds().Install((*files)[i], cloexec);
      if (fd < 0) break;
      fds.push_back(static_cast<int32_t>(fd));
    }
    if (fds.size() < files->size()) flags_ |= MSG_CTRUNC;
    files->clear();  // the rest are closed
    if (fds.empty()) return 0;
    return Put(SOL_SOCKET, SCM_RIGHTS, fds.data(), fds.size() * sizeof(int32_t));
  }

  size_t used() const { return used_; }
  int flags() const { return flags_; }

 private:
  Task& t_;
  const uint64_t addr_;
  const size_t len_;
  size_t used_ = 0;
  int flags_ = 0;
};

// One recvmsg(2) into the msghdr at `msg_addr`.
int64_t DoRecvmsg(Task& t, Socket& s, uint64_t msg_addr, int flags) {
  struct msghdr m;
  RETURN_IF_ERRNO(CopyInObj(t, msg_addr, &m));
  std::vector<iovec> iov;
  RETURN_IF_ERRNO(
      ReadIovecs(t, reinterpret_cast<uint64_t>(m.msg_iov), m.msg_iovlen, &iov));
  UserSink sink(t, std::move(iov));
  socket::RecvRequest req;
  req.data = &sink;
  req.flags = flags & ~(MSG_CMSG_CLOEXEC | MSG_WAITFORONE);
  req.want_address = m.msg_name != nullptr;
  // Always: with no room for them, the host's messages still make
  // MSG_CTRUNC (put_cmsg).
  req.want_control = true;
  const int64_t r = s.RecvMsg(Context(t), req);
  if (r < 0) return r;

  ControlWriter cw(t, reinterpret_cast<uint64_t>(m.msg_control),
                   m.msg_controllen);
  // Credentials come before files, as in Linux's scm_recv.
  if (req.creds.has_value()) {
    struct ucred uc = {req.creds->pid, req.creds->uid, req.creds->gid};
    RETURN_IF_ERRNO(cw.Put(SOL_SOCKET, SCM_CREDENTIALS, &uc, sizeof(uc)));
  }
  RETURN_IF_ERRNO(cw.PutRights(&req.rights, (flags & MSG_CMSG_CLOEXEC) != 0));
  // hostinet's control messages, as the host gave them.
  for (size_t off = 0; off + sizeof(cmsghdr) <= req.control.size();) {
    cmsghdr h;
    std::memcpy(&h, req.control.data() + off, sizeof(h));
    if (h.cmsg_len < CMSG_LEN(0) || h.cmsg_len > req.control.size() - off) {
      break;
    }
    RETURN_IF_ERRNO(cw.Put(h.cmsg_level, h.cmsg_type,
                           req.control.data() + off + CMSG_LEN(0),
                           h.cmsg_len - CMSG_LEN(0)));
    off += CMSG_ALIGN(h.cmsg_len);
  }

  struct msghdr out = m;
  out.msg_controllen = cw.used();
  out.msg_flags = req.msg_flags | cw.flags();
  if (m.msg_name != nullptr) {
    size_t n = std::min<size_t>(m.msg_namelen, req.address.size());
    if (n > 0) {
      RETURN_IF_ERRNO(CopyOutBytes(t, reinterpret_cast<uint64_t>(m.msg_name),
                                   req.address.data(), n));
    }
    out.msg_namelen = static_cast<socklen_t>(req.address.size());
  }
  RETURN_IF_ERRNO(CopyOutObj(t, msg_addr, out));
  return r;
}

int64_t SysRecvmsg(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  return DoRecvmsg(t, *s, a.a[1], static_cast<int>(a.a[2]));
}

// recvmmsg(2): messages one by one; MSG_WAITFORONE makes every receive
// after the first non-blocking; the timeout, as Linux's, is checked after
// each message (it does not interrupt a wait). An error after the first
// message ends the call with the count.
int64_t SysRecvmmsg(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  const uint64_t vlen = std::min<uint64_t>(static_cast<uint32_t>(a.a[2]),
                                           kIovMax);
  int flags = static_cast<int>(a.a[3]);
  absl::Time deadline = absl::InfiniteFuture();
  if (a.a[4] != 0) {
    struct timespec ts;
    RETURN_IF_ERRNO(CopyInObj(t, a.a[4], &ts));
    if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000) {
      return -EINVAL;
    }
    deadline = absl::Now() + absl::DurationFromTimespec(ts);
  }
  uint64_t done = 0;
  for (; done < vlen; done++) {
    const uint64_t m = a.a[1] + done * sizeof(struct mmsghdr);
    int64_t r = DoRecvmsg(t, *s, m, flags);
    if (r < 0) {
      if (done > 0) break;
      return r;
    }
    int64_t w = CopyOutObj(t, m + offsetof(struct mmsghdr, msg_len),
                           static_cast<uint32_t>(r));
    if (w < 0) return done > 0 ? static_cast<int64_t>(done) : w;
    if (flags & MSG_WAITFORONE) flags |= MSG_DONTWAIT;
    if (absl::Now() >= deadline) {
      done++;
      break;
    }
  }
  if (a.a[4] != 0) {
    struct timespec left = absl::ToTimespec(
        std::max(deadline - absl::Now(), absl::ZeroDuration()));
    RETURN_IF_ERRNO(CopyOutObj(t, a.a[4], left));
  }
  return done;
}

}  // namespace

int64_t SocketVectorIo(Task& t, socket::Socket& s, std::vector<iovec> iov,
                       bool write) {
  // A readv/writev split by a checkpoint's stop: the rest of it.
  uint64_t moved = t.TakeResumedMoved();
  uint64_t skip = moved;
  while (skip > 0 && !iov.empty()) {
    const uint64_t k = std::min<uint64_t>(skip, iov.front().iov_len);
    skip -= k;
    if (k == iov.front().iov_len) {
      iov.erase(iov.begin());
    } else {
      iov.front().iov_base = static_cast<uint8_t*>(iov.front().iov_base) + k;
      iov.front().iov_len -= k;
    }
  }
  moved -= skip;
  // Linux truncates the total to MAX_RW_COUNT.
  uint64_t total = 0;
  for (iovec& v : iov) {
    v.iov_len = std::min<uint64_t>(v.iov_len, kMaxRw - std::min(total, kMaxRw));
    total += v.iov_len;
  }
  // vfs_readv/vfs_writev: nothing to move is 0, without the socket.
  if (total == 0) return kernel::WithResumedMoved(moved, 0);
  if (write) {
    UserSource src(t, std::move(iov));
    socket::SendRequest req;
    req.data = &src;
    bool sigpipe = false;  // SysWritev raises SIGPIPE for every file.
    return kernel::WithResumedMoved(moved,
                                    s.SendMsg(Context(t), req, &sigpipe));
  }
  UserSink sink(t, std::move(iov));
  socket::RecvRequest req;
  req.data = &sink;
  return kernel::WithResumedMoved(moved, s.RecvMsg(Context(t), req));
}

void RegisterSocket(Entry* table) {
  table[SYS_socket] = {SysSocket, "socket"};
  table[SYS_socketpair] = {SysSocketpair, "socketpair"};
  table[SYS_bind] = {SysBind, "bind"};
  table[SYS_connect] = {SysConnect, "connect"};
  table[SYS_listen] = {SysListen, "listen"};
  table[SYS_accept] = {SysAccept, "accept"};
  table[SYS_accept4] = {SysAccept4, "accept4"};
  table[SYS_getsockname] = {SysGetsockname, "getsockname"};
  table[SYS_getpeername] = {SysGetpeername, "getpeername"};
  table[SYS_shutdown] = {SysShutdown, "shutdown"};
  table[SYS_getsockopt] = {SysGetsockopt, "getsockopt"};
  table[SYS_setsockopt] = {SysSetsockopt, "setsockopt"};
  table[SYS_sendto] = {SysSendto, "sendto"};
  table[SYS_sendmsg] = {SysSendmsg, "sendmsg"};
  table[SYS_recvfrom] = {SysRecvfrom, "recvfrom"};
  table[SYS_recvmsg] = {SysRecvmsg, "recvmsg"};
  table[SYS_sendmmsg] = {SysSendmmsg, "sendmmsg"};
  table[SYS_recvmmsg] = {SysRecvmmsg, "recvmmsg"};
}

}  // namespace sandboxd::syscalls
