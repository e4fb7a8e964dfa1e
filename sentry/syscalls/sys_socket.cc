// Socket syscalls: decode sockaddrs, msghdrs, iovecs and control messages
// from application memory, call the socket (sentry/socket/socket.h), and
// encode the results back. AF_UNIX is the one family served; the others
// fail with Linux's "not supported" answers and are counted.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sentry/socket/socket.h"
#include "sentry/socket/unix_endpoint.h"
#include "sentry/socket/unix_socket.h"
#include "sentry/syscalls/args.h"
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

// Options Linux answers with ENOPROTOOPT too: not worth counting.
bool LinuxRejectsToo(int level, int name, bool set) {
  if (level != SOL_SOCKET) return true;
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
  if (r == -ENOPROTOOPT && !LinuxRejectsToo(level, name, false)) {
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
  if (r == -ENOPROTOOPT && !LinuxRejectsToo(level, name, true)) {
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

// Control messages of a sendmsg: SCM_RIGHTS and SCM_CREDENTIALS.
int64_t ParseControl(Task& t, const std::vector<uint8_t>& control,
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

int64_t SysSendmsg(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  struct msghdr m;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &m));
  std::vector<iovec> iov;
  RETURN_IF_ERRNO(
      ReadIovecs(t, reinterpret_cast<uint64_t>(m.msg_iov), m.msg_iovlen, &iov));
  socket::SendRequest req;
  req.flags = static_cast<int>(a.a[2]);
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
    RETURN_IF_ERRNO(ParseControl(t, control, &req));
  }
  UserSource src(t, std::move(iov));
  req.data = &src;
  return DoSend(t, *s, req);
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

int64_t SysRecvmsg(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<Socket> s, SocketFor(t, a.a[0]));
  struct msghdr m;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &m));
  std::vector<iovec> iov;
  RETURN_IF_ERRNO(
      ReadIovecs(t, reinterpret_cast<uint64_t>(m.msg_iov), m.msg_iovlen, &iov));
  const int flags = static_cast<int>(a.a[2]);
  UserSink sink(t, std::move(iov));
  socket::RecvRequest req;
  req.data = &sink;
  req.flags = flags & ~MSG_CMSG_CLOEXEC;
  req.want_address = m.msg_name != nullptr;
  const int64_t r = s->RecvMsg(Context(t), req);
  if (r < 0) return r;

  ControlWriter cw(t, reinterpret_cast<uint64_t>(m.msg_control),
                   m.msg_controllen);
  // Credentials come before files, as in Linux's scm_recv.
  if (req.creds.has_value()) {
    struct ucred uc = {req.creds->pid, req.creds->uid, req.creds->gid};
    RETURN_IF_ERRNO(cw.Put(SOL_SOCKET, SCM_CREDENTIALS, &uc, sizeof(uc)));
  }
  RETURN_IF_ERRNO(cw.PutRights(&req.rights, (flags & MSG_CMSG_CLOEXEC) != 0));

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
  RETURN_IF_ERRNO(CopyOutObj(t, a.a[1], out));
  return r;
}

}  // namespace

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
}

}  // namespace sandboxd::syscalls
