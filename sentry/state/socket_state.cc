#include "sentry/state/socket_state.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::state {
namespace {

using socket::Credentials;
using socket::SendBuffer;
using socket::UnixEndpoint;
using socket::UnixMessage;

void SaveCreds(const Credentials& c, pb::UnixCredentials* r) {
  r->set_pid(c.pid);
  r->set_uid(c.uid);
  r->set_gid(c.gid);
}

Credentials LoadCreds(const pb::UnixCredentials& r) {
  return Credentials{r.pid(), r.uid(), r.gid()};
}

int64_t SaveTimeout(absl::Duration d) {
  return d == absl::InfiniteDuration() ? -1 : absl::ToInt64Nanoseconds(d);
}

absl::Duration LoadTimeout(int64_t ns) {
  return ns < 0 ? absl::InfiniteDuration() : absl::Nanoseconds(ns);
}

// The options of a hostinet socket that a restore sets again, before the
// bind: those a program sets to shape its socket's behaviour. Not the
// buffer sizes: reading SO_RCVBUF/SO_SNDBUF gives the kernel's choice,
// and setting it back would lock it (no more autotuning).
struct SavedOption {
  int level;
  int name;
};
constexpr SavedOption kSavedOptions[] = {
    {SOL_SOCKET, SO_REUSEADDR},   {SOL_SOCKET, SO_REUSEPORT},
    {SOL_SOCKET, SO_KEEPALIVE},   {SOL_SOCKET, SO_BROADCAST},
    {SOL_SOCKET, SO_OOBINLINE},   {SOL_SOCKET, SO_LINGER},
    {IPPROTO_TCP, TCP_NODELAY},   {IPPROTO_TCP, TCP_KEEPIDLE},
    {IPPROTO_TCP, TCP_KEEPINTVL}, {IPPROTO_TCP, TCP_KEEPCNT},
    {IPPROTO_IP, IP_TOS},         {IPPROTO_IPV6, IPV6_V6ONLY},
    {IPPROTO_IPV6, IPV6_TCLASS},
    // Those that make receives carry control messages.
    {SOL_SOCKET, SO_TIMESTAMP},   {SOL_SOCKET, SO_TIMESTAMPNS},
    {IPPROTO_IP, IP_PKTINFO},     {IPPROTO_IP, IP_RECVTOS},
    {IPPROTO_IP, IP_RECVTTL},     {IPPROTO_IP, IP_RECVERR},
    {IPPROTO_IPV6, IPV6_RECVPKTINFO}, {IPPROTO_IPV6, IPV6_RECVHOPLIMIT},
    {IPPROTO_IPV6, IPV6_RECVTCLASS},  {IPPROTO_IPV6, IPV6_RECVERR},
};

bool IsAnyAddress(const std::string& sa) {
  if (sa.size() >= sizeof(sockaddr_in) &&
      reinterpret_cast<const sockaddr*>(sa.data())->sa_family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, sa.data(), sizeof(in));
    return in.sin_port == 0 && in.sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (sa.size() >= sizeof(sockaddr_in6) &&
      reinterpret_cast<const sockaddr*>(sa.data())->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, sa.data(), sizeof(in6));
    return in6.sin6_port == 0 && IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr);
  }
  return true;
}

// What a message is, copied out under its endpoint's lock.
struct MessageCopy {
  std::string data;
  std::string from;
  Credentials creds;
  std::vector<std::shared_ptr<fs::File>> rights;
  std::shared_ptr<SendBuffer> charged_to;
  int64_t charge;
};

}  // namespace

// ---------------------------------------------------------------------------
// Save

absl::StatusOr<uint64_t> SocketState::SaveSendBuffer(
    Saver& s, const std::shared_ptr<SendBuffer>& b) {
  SBX_SAVED_SIZE(socket::SendBuffer, 24);
  // Its owner, if any, sets `endpoint` (SaveEndpoint): a message may be
  // saved before the endpoint that sent it.
  return s.Save<SendBuffer, pb::SendBuffer>(
      b.get(), s.state().mutable_send_buffers(),
      [](pb::SendBuffer*) { return absl::OkStatus(); });
}

absl::StatusOr<uint64_t> SocketState::SaveEndpoint(
    Saver& s, const fs::Vfs& vfs, const std::shared_ptr<UnixEndpoint>& ep) {
  SBX_SAVED_SIZE(socket::UnixEndpoint, 488);
  SBX_SAVED_SIZE(socket::UnixMessage, 128);
  SBX_SAVED_SIZE(socket::Credentials, 12);
  auto* table = s.state().mutable_unix_endpoints();
  return s.Save<UnixEndpoint, pb::UnixEndpoint>(
      ep.get(), table, [&](pb::UnixEndpoint* r) -> absl::Status {
        std::shared_ptr<UnixEndpoint> peer;
        std::shared_ptr<fs::Inode> bound_inode;
        std::vector<MessageCopy> queue;
        std::vector<std::shared_ptr<UnixEndpoint>> accept_queue;
        {
          absl::MutexLock l(&ep->mu_);
          r->set_type(ep->type_);
          r->set_state(static_cast<int>(ep->state_));
          r->set_shutdown(ep->shutdown_);
          r->set_error(ep->error_);
          peer = ep->peer_;
          SaveCreds(ep->peer_creds_, r->mutable_peer_creds());
          r->set_peer_creds_set(ep->has_peer_creds_);
          SaveCreds(ep->listen_creds_, r->mutable_listen_creds());
          r->set_local(ep->local_.name);
          r->set_bound(ep->ns_ != nullptr);
          bound_inode = ep->bound_inode_;
          for (const auto& m : ep->queue_) {
            MessageCopy c;
            c.data.assign(reinterpret_cast<const char*>(m->data.data()) +
                              m->consumed,
                          m->unread());
            c.from = m->from.name;
            c.creds = m->creds;
            c.rights = m->rights;
            c.charged_to = m->charged_to;
            c.charge = m->charge;
            queue.push_back(std::move(c));
          }
          accept_queue.assign(ep->accept_queue_.begin(), ep->accept_queue_.end());
          r->set_backlog(ep->backlog_);
          r->set_passcred(ep->passcred_);
          r->set_sndbuf(ep->sndbuf_);
          r->set_rcvbuf(ep->rcvbuf_);
          r->set_rcvtimeo_ns(SaveTimeout(ep->rcvtimeo_));
          r->set_sndtimeo_ns(SaveTimeout(ep->sndtimeo_));
        }
        // What it refers to, without its lock (files in flight may be
        // sockets whose endpoints take their own).
        const uint64_t self = s.IdOf(table, ep.get());
        ASSIGN_OR_RETURN(uint64_t buf, SaveSendBuffer(s, ep->send_));
        s.state().mutable_send_buffers(static_cast<int>(buf) - 1)->set_endpoint(self);
        r->set_send_buffer(buf);
        if (peer != nullptr) {
          ASSIGN_OR_RETURN(uint64_t id, SaveEndpoint(s, vfs, peer));
          r->set_peer(id);
        }
        if (bound_inode != nullptr) {
          ASSIGN_OR_RETURN(uint64_t id, FsState::SaveInode(s, bound_inode));
          r->set_bound_inode(id);
        }
        for (const auto& c : accept_queue) {
          ASSIGN_OR_RETURN(uint64_t id, SaveEndpoint(s, vfs, c));
          r->add_accept_queue(id);
        }
        for (const MessageCopy& c : queue) {
          pb::UnixMessage* m = r->add_queue();
          m->set_data(c.data);
          m->set_from(c.from);
          SaveCreds(c.creds, m->mutable_creds());
          for (const auto& f : c.rights) {
            ASSIGN_OR_RETURN(uint64_t id, FsState::SaveFile(s, vfs, f));
            m->add_rights(id);
          }
          if (c.charged_to != nullptr) {
            ASSIGN_OR_RETURN(uint64_t id, SaveSendBuffer(s, c.charged_to));
            m->set_charged_to(id);
          }
          m->set_charge(c.charge);
        }
        return absl::OkStatus();
      });
}

absl::Status SocketState::SaveUnixSocket(Saver& s, const fs::Vfs& vfs,
                                         socket::UnixSocket& sock,
                                         pb::UnixSocketFile* r) {
  SBX_SAVED_SIZE(socket::UnixSocket, 80);
  ASSIGN_OR_RETURN(uint64_t ep, SaveEndpoint(s, vfs, sock.ep_));
  r->set_endpoint(ep);
  r->set_nonblock(sock.nonblocking());
  SaveCreds(sock.creator_, r->mutable_creator());
  r->set_reuseaddr(sock.reuseaddr_.load());
  return absl::OkStatus();
}

absl::Status SocketState::SaveHostSocket(socket::HostSocket& sock,
                                         pb::HostSocketFile* r) {
  SBX_SAVED_SIZE(socket::HostSocket, 128);
  r->set_family(sock.family_);
  r->set_type(sock.type_);
  r->set_protocol(sock.protocol_);
  r->set_nonblock(sock.nonblock_.load());
  {
    absl::MutexLock l(&sock.mu_);
    r->mutable_timeouts()->set_rcvtimeo_ns(SaveTimeout(sock.rcvtimeo_));
    r->mutable_timeouts()->set_sndtimeo_ns(SaveTimeout(sock.sndtimeo_));
  }
  // fd_ is the host's socket, whose state is read here through it;
  // queue_, watch_mu_ and watch_handle_ are waiters (pollers register
  // again); ino_ is a new number at load, as every socket file's.
  if (sock.family_ == AF_NETLINK) {
    r->set_restore(pb::HOST_SOCKET_FRESH);
    return absl::OkStatus();
  }
  socket::SocketContext ctx;
  for (const SavedOption& o : kSavedOptions) {
    std::vector<uint8_t> v(sizeof(struct linger));
    // Options the socket's family or protocol does not take are skipped.
    if (sock.GetSockOpt(ctx, o.level, o.name, &v) != 0) continue;
    pb::HostSocketOption* opt = r->add_options();
    opt->set_level(o.level);
    opt->set_name(o.name);
    opt->set_value(std::string(v.begin(), v.end()));
  }
  std::string local, peer;
  if (int64_t e = sock.GetSockName(&local); e < 0) {
    return absl::InternalError(
        absl::StrCat("save: getsockname of ", sock.Describe(), ": errno ", -e));
  }
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (getsockopt(sock.fd_.get(), SOL_SOCKET, SO_ACCEPTCONN, &listening,
                 &len) != 0) {
    return absl::InternalError(absl::StrCat(
        "save: SO_ACCEPTCONN of ", sock.Describe(), ": errno ", errno));
  }
  if (listening) {
    r->set_restore(pb::HOST_SOCKET_LISTENING);
    r->set_local(local);
    r->set_backlog(sock.backlog_.load());
  } else if (sock.type_ == SOCK_STREAM && sock.connected_.load()) {
    r->set_restore(pb::HOST_SOCKET_RESET);
  } else if (!IsAnyAddress(local)) {
    r->set_restore(pb::HOST_SOCKET_BOUND);
    r->set_local(local);
    if (sock.type_ == SOCK_DGRAM && sock.GetPeerName(&peer) == 0) {
      r->set_peer(peer);
    }
  } else {
    r->set_restore(pb::HOST_SOCKET_FRESH);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Load

absl::StatusOr<std::shared_ptr<SendBuffer>> SocketState::LoadSendBuffer(
    Loader& l, fs::Vfs& vfs, uint64_t id) {
  const auto& table = l.state().send_buffers();
  if (id == 0 || id > static_cast<uint64_t>(table.size())) {
    return absl::InvalidArgumentError(absl::StrCat("send buffer ", id));
  }
  // An endpoint's own buffer is the one its constructor made.
  if (uint64_t owner = table.Get(id - 1).endpoint(); owner != 0) {
    ASSIGN_OR_RETURN(std::shared_ptr<UnixEndpoint> ep,
                     LoadEndpoint(l, vfs, owner));
    if (ep == nullptr) return absl::InvalidArgumentError("no endpoint");
    return ep->send_;
  }
  // A closed sender's: nobody waits on it any more.
  return l.Load<SendBuffer, pb::SendBuffer>(
      id, table, "send buffer",
      [](const pb::SendBuffer&) -> absl::StatusOr<std::shared_ptr<SendBuffer>> {
        return std::make_shared<SendBuffer>(std::make_shared<waiter::WaitQueue>());
      });
}

absl::StatusOr<std::shared_ptr<UnixEndpoint>> SocketState::LoadEndpoint(
    Loader& l, fs::Vfs& vfs, uint64_t id) {
  const auto& table = l.state().unix_endpoints();
  return l.Load<UnixEndpoint, pb::UnixEndpoint>(
      id, table, "unix endpoint",
      [&](const pb::UnixEndpoint& r)
          -> absl::StatusOr<std::shared_ptr<UnixEndpoint>> {
        if ((r.type() != SOCK_STREAM && r.type() != SOCK_DGRAM &&
             r.type() != SOCK_SEQPACKET) ||
            r.state() < 0 ||
            r.state() > static_cast<int>(UnixEndpoint::State::kClosed) ||
            r.shutdown() < 0 || r.shutdown() > 3 || r.error() < 0 ||
            r.sndbuf() < 0 || r.rcvbuf() < 0 ||
            r.backlog() > static_cast<uint64_t>(socket::kSoMaxConn)) {
          return absl::InvalidArgumentError("bad endpoint record");
        }
        auto ep = std::make_shared<UnixEndpoint>(r.type());
        // Peers, connections and messages may lead back to it.
        l.Register(id, table, ep);
        std::shared_ptr<UnixEndpoint> peer;
        if (r.peer() != 0) {
          ASSIGN_OR_RETURN(peer, LoadEndpoint(l, vfs, r.peer()));
        }
        std::deque<std::shared_ptr<UnixEndpoint>> accept_queue;
        for (uint64_t c : r.accept_queue()) {
          ASSIGN_OR_RETURN(auto conn, LoadEndpoint(l, vfs, c));
          if (conn == nullptr) return absl::InvalidArgumentError("no connection");
          accept_queue.push_back(std::move(conn));
        }
        std::deque<socket::UnixMessagePtr> queue;
        int64_t queued_bytes = 0;
        for (const pb::UnixMessage& mr : r.queue()) {
          auto m = std::make_unique<UnixMessage>();
          m->data.assign(mr.data().begin(), mr.data().end());
          m->from.name = mr.from();
          m->creds = LoadCreds(mr.creds());
          for (uint64_t f : mr.rights()) {
            if (l.DeferFile(f)) {
              // A procfs file: opened again once every process is loaded
              // (Loader::DeferredUse), into its place among the rights.
              // The message stays where the load puts it (in its
              // endpoint's queue) until then: nothing runs meanwhile.
              const size_t slot = m->rights.size();
              m->rights.push_back(nullptr);
              l.deferred_uses().push_back(Loader::DeferredUse{
                  f, "a file in flight (SCM_RIGHTS)",
                  [msg = m.get(), slot](std::shared_ptr<fs::File> file) {
                    msg->rights[slot] = std::move(file);
                    return absl::OkStatus();
                  }});
              continue;
            }
            ASSIGN_OR_RETURN(std::shared_ptr<fs::File> file,
                             FsState::LoadFile(l, vfs, f));
            if (file == nullptr) return absl::InvalidArgumentError("no file");
            m->rights.push_back(std::move(file));
          }
          if (mr.charged_to() != 0) {
            if (mr.charge() < 0) return absl::InvalidArgumentError("bad charge");
            ASSIGN_OR_RETURN(m->charged_to,
                             LoadSendBuffer(l, vfs, mr.charged_to()));
            m->charge = mr.charge();
            m->charged_to->Charge(m->charge);
          }
          queued_bytes += static_cast<int64_t>(m->data.size());
          queue.push_back(std::move(m));
        }
        std::shared_ptr<fs::Inode> bound_inode;
        if (r.bound_inode() != 0) {
          ASSIGN_OR_RETURN(bound_inode, FsState::LoadInode(l, r.bound_inode()));
          if (bound_inode == nullptr || bound_inode->Type() != S_IFSOCK) {
            return absl::InvalidArgumentError("bound to a non-socket inode");
          }
        }
        // The name goes back into the namespace, without the endpoint's
        // lock (a leaf).
        socket::UnixNamespace* ns = nullptr;
        if (r.bound()) {
          ns = l.unix_namespace();
          if (ns == nullptr) {
            return absl::FailedPreconditionError(
                "no AF_UNIX namespace to load bound sockets into");
          }
          if (bound_inode != nullptr) {
            ns->BindInode(bound_inode.get(), ep);
          } else if (!r.local().empty() && r.local()[0] == '\0') {
            int err = ns->BindAbstract(r.type(), r.local(), ep);
            if (err < 0) {
              return absl::FailedPreconditionError(absl::StrCat(
                  "abstract name taken in the loading namespace: errno ", -err));
            }
          } else {
            return absl::InvalidArgumentError("bound without a name");
          }
        }
        absl::MutexLock lock(&ep->mu_);
        ep->state_ = static_cast<UnixEndpoint::State>(r.state());
        ep->shutdown_ = r.shutdown();
        ep->error_ = r.error();
        ep->peer_ = std::move(peer);
        ep->peer_creds_ = LoadCreds(r.peer_creds());
        ep->has_peer_creds_ = r.peer_creds_set();
        ep->listen_creds_ = LoadCreds(r.listen_creds());
        ep->local_.name = r.local();
        ep->bound_inode_ = std::move(bound_inode);
        ep->ns_ = ns;
        ep->queue_ = std::move(queue);
        ep->queued_bytes_ = queued_bytes;
        ep->accept_queue_ = std::move(accept_queue);
        ep->backlog_ = r.backlog();
        ep->passcred_ = r.passcred();
        ep->sndbuf_ = r.sndbuf();
        ep->rcvbuf_ = r.rcvbuf();
        ep->rcvtimeo_ = LoadTimeout(r.rcvtimeo_ns());
        ep->sndtimeo_ = LoadTimeout(r.sndtimeo_ns());
        return ep;
      });
}

absl::StatusOr<std::shared_ptr<fs::File>> SocketState::LoadUnixSocket(
    Loader& l, fs::Vfs& vfs, const pb::UnixSocketFile& r) {
  socket::UnixNamespace* ns = l.unix_namespace();
  if (ns == nullptr) {
    return absl::FailedPreconditionError(
        "no AF_UNIX namespace to load sockets into");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<UnixEndpoint> ep,
                   LoadEndpoint(l, vfs, r.endpoint()));
  if (ep == nullptr) return absl::InvalidArgumentError("socket without endpoint");
  auto sock = std::make_shared<socket::UnixSocket>(ns, std::move(ep),
                                                   r.nonblock(),
                                                   LoadCreds(r.creator()));
  sock->reuseaddr_.store(r.reuseaddr());
  return std::static_pointer_cast<fs::File>(sock);
}

absl::StatusOr<std::shared_ptr<fs::File>> SocketState::LoadHostSocket(
    const pb::HostSocketFile& r) {
  if (!socket::HostSocket::Serves(r.family()) ||
      r.local().size() > sizeof(sockaddr_storage) ||
      r.peer().size() > sizeof(sockaddr_storage) || r.backlog() < 0 ||
      r.options_size() > 64) {
    return absl::InvalidArgumentError("bad hostinet socket record");
  }
  std::shared_ptr<socket::HostSocket> sock;
  int64_t err;
  if (r.restore() == pb::HOST_SOCKET_RESET) {
    if (r.type() != SOCK_STREAM) {
      return absl::InvalidArgumentError("a reset socket that is not TCP");
    }
    err = socket::HostSocket::NewReset(r.family(), r.protocol(), r.nonblock(),
                                       &sock);
  } else {
    err = socket::HostSocket::New(r.family(), r.type(), r.protocol(),
                                  r.nonblock(), &sock);
  }
  if (err < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a hostinet socket (family ", r.family(), ", type ", r.type(),
        ") cannot be made again: errno ", -err));
  }
  socket::SocketContext ctx;
  for (const pb::HostSocketOption& o : r.options()) {
    if (o.value().size() > sizeof(struct linger)) {
      return absl::InvalidArgumentError("bad hostinet socket option");
    }
    std::vector<uint8_t> v(o.value().begin(), o.value().end());
    int64_t e = sock->SetSockOpt(ctx, o.level(), o.name(), v);
    // A reset socket is connected already: IPV6_V6ONLY is EINVAL there,
    // and no option changes what it does any more.
    if (e < 0 && r.restore() != pb::HOST_SOCKET_RESET) {
      return absl::FailedPreconditionError(
          absl::StrCat("setting option ", o.level(), "/", o.name(), " of ",
                       sock->Describe(), " again: errno ", -e));
    }
  }
  {
    absl::MutexLock l(&sock->mu_);
    sock->rcvtimeo_ = LoadTimeout(r.timeouts().rcvtimeo_ns());
    sock->sndtimeo_ = LoadTimeout(r.timeouts().sndtimeo_ns());
  }
  if (r.restore() == pb::HOST_SOCKET_BOUND ||
      r.restore() == pb::HOST_SOCKET_LISTENING) {
    if (int64_t e = sock->Bind(ctx, r.local()); e < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "binding ", sock->Describe(), " again: errno ", -e));
    }
  }
  if (r.restore() == pb::HOST_SOCKET_LISTENING) {
    if (int64_t e = sock->Listen(ctx, r.backlog()); e < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "listening on ", sock->Describe(), " again: errno ", -e));
    }
  }
  if (r.restore() == pb::HOST_SOCKET_BOUND && !r.peer().empty()) {
    if (int64_t e = sock->Connect(ctx, r.peer()); e < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "connecting ", sock->Describe(), " again: errno ", -e));
    }
  }
  return std::static_pointer_cast<fs::File>(sock);
}

}  // namespace sandboxd::state
