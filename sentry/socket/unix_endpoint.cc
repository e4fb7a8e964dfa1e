#include "sentry/socket/unix_endpoint.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>

#include "absl/time/clock.h"

namespace sandboxd::socket {
namespace {

constexpr size_t kSunPathOffset = offsetof(struct sockaddr_un, sun_path);
// The largest piece a stream send queues at once (Linux: about half the
// send buffer, and at most what one skb holds).
constexpr size_t kMaxStreamPiece = 64 * 1024;

absl::Time Deadline(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return absl::InfiniteFuture();
  return absl::Now() + timeout;
}

// Blocks the caller on `q` until ready(). A timeout (SO_RCVTIMEO,
// SO_SNDTIMEO) is EAGAIN, as on Linux.
int64_t Wait(const SocketContext& ctx, waiter::WaitQueue& q, waiter::EventMask mask,
             absl::Time deadline, const std::function<bool()>& ready) {
  if (ctx.io.blocker == nullptr) return -EAGAIN;
  int r = ctx.io.blocker->Wait(q, mask, ready, deadline);
  return r == -ETIMEDOUT ? -EAGAIN : r;
}

constexpr waiter::EventMask kReadEvents = POLLIN | POLLRDNORM;
constexpr waiter::EventMask kWriteEvents = POLLOUT | POLLWRNORM | POLLWRBAND;
constexpr waiter::EventMask kHangupEvents =
    POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM | POLLHUP | POLLRDHUP;

}  // namespace

std::string UnixAddress::ToSockaddr() const {
  std::string s(kSunPathOffset, '\0');
  sa_family_t family = AF_UNIX;
  std::memcpy(&s[0], &family, sizeof(family));
  s += name;
  if (!unnamed() && !abstract()) s.push_back('\0');
  return s;
}

int ParseUnixAddress(const std::string& raw, UnixAddress* out, bool* autobind) {
  *autobind = false;
  out->name.clear();
  if (raw.size() < kSunPathOffset) return -EINVAL;
  sa_family_t family;
  std::memcpy(&family, raw.data(), sizeof(family));
  if (raw.size() == kSunPathOffset && family == AF_UNIX) {
    *autobind = true;
    return 0;
  }
  if (raw.size() <= kSunPathOffset || raw.size() > sizeof(struct sockaddr_un) ||
      family != AF_UNIX) {
    return -EINVAL;
  }
  std::string path = raw.substr(kSunPathOffset);
  if (path[0] != '\0') {
    // A path ends at its first NUL (or at the address length).
    path.resize(strnlen(path.data(), path.size()));
  }
  out->name = std::move(path);
  return 0;
}

// ---------------------------------------------------------------------------
// UnixNamespace

UnixNamespace::UnixNamespace() {
  std::random_device rd;
  next_autobind_ = rd() & 0xfffff;
}

int UnixNamespace::BindAbstract(int type, const std::string& name,
                                const std::shared_ptr<UnixEndpoint>& ep) {
  absl::MutexLock l(&mu_);
  auto it = abstract_.find({type, name});
  if (it != abstract_.end() && !it->second.expired()) return -EADDRINUSE;
  abstract_[{type, name}] = ep;
  return 0;
}

int UnixNamespace::Autobind(int type, const std::shared_ptr<UnixEndpoint>& ep,
                            std::string* name) {
  absl::MutexLock l(&mu_);
  for (uint32_t tries = 0; tries <= 0xfffff; tries++) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "%05x", next_autobind_);
    next_autobind_ = (next_autobind_ + 1) & 0xfffff;
    std::string candidate = std::string(1, '\0') + buf;
    auto it = abstract_.find({type, candidate});
    if (it == abstract_.end() || it->second.expired()) {
      abstract_[{type, candidate}] = ep;
      *name = std::move(candidate);
      return 0;
    }
  }
  return -ENOSPC;
}

void UnixNamespace::UnbindAbstract(int type, const std::string& name,
                                   const UnixEndpoint* ep) {
  absl::MutexLock l(&mu_);
  auto it = abstract_.find({type, name});
  if (it == abstract_.end()) return;
  auto cur = it->second.lock();
  if (cur == nullptr || cur.get() == ep) abstract_.erase(it);
}

std::shared_ptr<UnixEndpoint> UnixNamespace::FindAbstract(
    int type, const std::string& name) {
  absl::MutexLock l(&mu_);
  auto it = abstract_.find({type, name});
  return it == abstract_.end() ? nullptr : it->second.lock();
}

void UnixNamespace::BindInode(const fs::Inode* inode,
                              const std::shared_ptr<UnixEndpoint>& ep) {
  absl::MutexLock l(&mu_);
  inodes_[inode] = ep;
}

void UnixNamespace::UnbindInode(const fs::Inode* inode, const UnixEndpoint* ep) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(inode);
  if (it == inodes_.end()) return;
  auto cur = it->second.lock();
  if (cur == nullptr || cur.get() == ep) inodes_.erase(it);
}

std::shared_ptr<UnixEndpoint> UnixNamespace::FindInode(const fs::Inode* inode) {
  absl::MutexLock l(&mu_);
  auto it = inodes_.find(inode);
  return it == inodes_.end() ? nullptr : it->second.lock();
}

// ---------------------------------------------------------------------------
// UnixEndpoint: setup, names, connections

UnixEndpoint::UnixEndpoint(int type)
    : type_(type),
      wq_(std::make_shared<waiter::WaitQueue>()),
      send_(std::make_shared<SendBuffer>(wq_)) {}

UnixEndpoint::~UnixEndpoint() = default;

std::pair<std::shared_ptr<UnixEndpoint>, std::shared_ptr<UnixEndpoint>>
UnixEndpoint::NewPair(int type, const Credentials& creds) {
  auto a = std::make_shared<UnixEndpoint>(type);
  auto b = std::make_shared<UnixEndpoint>(type);
  for (auto [self, other] : {std::pair{a, b}, std::pair{b, a}}) {
    absl::MutexLock l(&self->mu_);
    self->peer_ = other;
    self->state_ = State::kConnected;
    self->peer_creds_ = creds;
    self->has_peer_creds_ = true;
  }
  return {a, b};
}

int64_t UnixEndpoint::Bind(const SocketContext& ctx, const UnixAddress& addr,
                           bool autobind) {
  absl::MutexLock bind_lock(&bind_mu_);
  auto bound = [this] {
    absl::MutexLock l(&mu_);
    return !local_.unnamed();
  };
  UnixNamespace* ns = ctx.unix_ns;
  if (ns == nullptr) return -EINVAL;
  auto self = shared_from_this();
  if (autobind || addr.abstract()) {
    // Binding twice is an error; autobinding a bound socket is a no-op.
    if (bound()) return autobind ? 0 : -EINVAL;
    std::string name = addr.name;
    int r = autobind ? ns->Autobind(type_, self, &name)
                     : ns->BindAbstract(type_, name, self);
    if (r < 0) return r;
    absl::MutexLock l(&mu_);
    local_.name = std::move(name);
    ns_ = ns;
    return 0;
  }

  // A path: a socket inode created through the VFS, as mknod(S_IFSOCK).
  // Linux looks at the name before at the socket: an existing name is
  // EADDRINUSE even for a bound socket.
  if (ctx.vfs == nullptr || ctx.fs == nullptr) return -ENOENT;
  fs::Location start = addr.name[0] == '/' ? ctx.fs->root() : ctx.fs->cwd();
  fs::Location parent;
  std::string name;
  bool trailing = false;
  int r = ctx.vfs->ResolveParent(*ctx.fs, start, addr.name, &parent, &name,
                                 &trailing);
  if (r < 0) return r;
  if (name.empty() || name == "." || name == "..") return -EADDRINUSE;
  fs::Location existing;
  if (ctx.vfs->Lookup(parent, name, &existing) == 0) return -EADDRINUSE;
  if (trailing) return -ENOENT;
  if (bound()) return -EINVAL;
  fs::CreateRequest req;
  req.type = S_IFSOCK;
  req.mode = 0777 & ~ctx.fs->umask();
  fs::Location loc;
  r = ctx.vfs->Create(parent, name, req, &loc);
  if (r == -EEXIST) return -EADDRINUSE;
  if (r < 0) return r;
  std::shared_ptr<fs::Inode> inode = loc.dentry->inode();
  ns->BindInode(inode.get(), self);
  absl::MutexLock l(&mu_);
  local_ = addr;
  bound_inode_ = std::move(inode);
  ns_ = ns;
  return 0;
}

int64_t UnixEndpoint::MaybeAutobind(const SocketContext& ctx) {
  {
    absl::MutexLock l(&mu_);
    if (!passcred_ || !local_.unnamed()) return 0;
  }
  return Bind(ctx, UnixAddress{}, /*autobind=*/true);
}

int64_t UnixEndpoint::FindPeer(const SocketContext& ctx, const UnixAddress& addr,
                               std::shared_ptr<UnixEndpoint>* out) {
  UnixNamespace* ns = ctx.unix_ns;
  if (ns == nullptr || addr.unnamed()) return -ECONNREFUSED;
  std::shared_ptr<UnixEndpoint> ep;
  if (addr.abstract()) {
    ep = ns->FindAbstract(type_, addr.name);
  } else {
    if (ctx.vfs == nullptr || ctx.fs == nullptr) return -ENOENT;
    fs::Location start = addr.name[0] == '/' ? ctx.fs->root() : ctx.fs->cwd();
    fs::Location loc;
    int r = ctx.vfs->Resolve(*ctx.fs, start, addr.name, /*follow_last=*/true,
                             &loc);
    if (r < 0) return r;
    if (loc.inode().Type() != S_IFSOCK) return -ECONNREFUSED;
    ep = ns->FindInode(loc.dentry->inode().get());
  }
  if (ep == nullptr) return -ECONNREFUSED;
  if (ep->type_ != type_) return -EPROTOTYPE;
  *out = std::move(ep);
  return 0;
}

int64_t UnixEndpoint::Listen(const SocketContext& ctx, int backlog) {
  if (!connection_oriented()) return -EOPNOTSUPP;
  if (static_cast<unsigned>(backlog) > static_cast<unsigned>(kSoMaxConn)) {
    backlog = kSoMaxConn;
  }
  bool grew = false;
  {
    absl::MutexLock l(&mu_);
    if (local_.unnamed()) return -EINVAL;
    if (state_ == State::kListening) {
      grew = static_cast<size_t>(backlog) > backlog_;
    } else if (state_ != State::kUnconnected) {
      return -EINVAL;
    } else {
      state_ = State::kListening;
      listen_creds_ = ctx.creds;
    }
    backlog_ = backlog;
  }
  if (grew) peer_wait_.Notify(kWriteEvents);
  return 0;
}

int64_t UnixEndpoint::Accept(const SocketContext& ctx, bool nonblocking,
                             std::shared_ptr<UnixEndpoint>* out) {
  if (!connection_oriented()) return -EOPNOTSUPP;
  absl::Time deadline = Deadline(rcvtimeo());
  std::shared_ptr<UnixEndpoint> conn;
  bool passcred = false;
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (state_ != State::kListening) return -EINVAL;
      if (!accept_queue_.empty()) {
        conn = std::move(accept_queue_.front());
        accept_queue_.pop_front();
        passcred = passcred_;
        break;
      }
    }
    if (nonblocking) return -EAGAIN;
    int64_t r = Wait(ctx, *wq_, kReadEvents, deadline, [this] {
      absl::MutexLock l(&mu_);
      return state_ != State::kListening || !accept_queue_.empty();
    });
    if (r < 0) return r;
  }
  // The accepted socket inherits SO_PASSCRED from the listener.
  {
    absl::MutexLock l(&conn->mu_);
    conn->passcred_ = passcred;
  }
  peer_wait_.Notify(kWriteEvents);  // room in the backlog
  *out = std::move(conn);
  return 0;
}

int64_t UnixEndpoint::Connect(const SocketContext& ctx, const UnixAddress& addr,
                              bool nonblocking) {
  return connection_oriented() ? ConnectStream(ctx, addr, nonblocking)
                               : ConnectDatagram(ctx, addr);
}

int64_t UnixEndpoint::ConnectStream(const SocketContext& ctx,
                                    const UnixAddress& addr, bool nonblocking) {
  int64_t r = MaybeAutobind(ctx);
  if (r < 0) return r;
  std::shared_ptr<UnixEndpoint> listener;
  r = FindPeer(ctx, addr, &listener);
  if (r < 0) return r;
  absl::Time deadline = Deadline(sndtimeo());
  auto room = [&listener] {
    absl::MutexLock l(&listener->mu_);
    return listener->state_ != State::kListening ||
           (listener->shutdown_ & kRcvShutdown) != 0 ||
           listener->accept_queue_.size() <= listener->backlog_;
  };
  for (;;) {
    UnixAddress server_name;
    bool full = false;
    // Linux checks the listener before this socket's own state.
    {
      absl::MutexLock l(&listener->mu_);
      if (listener->state_ != State::kListening ||
          (listener->shutdown_ & kRcvShutdown) != 0) {
        return -ECONNREFUSED;
      }
      // Linux's unix_recvq_full: more than `backlog` waiting is full.
      full = listener->accept_queue_.size() > listener->backlog_;
      server_name = listener->local_;
    }
    if (full) {
      if (nonblocking) return -EAGAIN;
      r = Wait(ctx, listener->peer_wait_, kWriteEvents, deadline, room);
      if (r < 0) return r;
      continue;
    }
    {
      absl::MutexLock l(&mu_);
      if (state_ == State::kConnected) return -EISCONN;
      if (state_ != State::kUnconnected) return -EINVAL;
      state_ = State::kConnecting;
    }
    // The server side, connected to us before anyone can see it. It takes
    // the listener's name, and our credentials as its peer's.
    auto server = std::make_shared<UnixEndpoint>(type_);
    {
      absl::MutexLock l(&server->mu_);
      server->peer_ = shared_from_this();
      server->state_ = State::kConnected;
      server->peer_creds_ = ctx.creds;
      server->has_peer_creds_ = true;
      server->local_ = server_name;
    }
    Credentials listener_creds;
    int64_t err = 0;
    {
      absl::MutexLock l(&listener->mu_);
      if (listener->state_ != State::kListening ||
          (listener->shutdown_ & kRcvShutdown) != 0) {
        err = -ECONNREFUSED;
      } else if (listener->accept_queue_.size() > listener->backlog_) {
        err = -EAGAIN;  // lost a race for the last slot
      } else {
        listener->accept_queue_.push_back(server);
        listener_creds = listener->listen_creds_;
      }
    }
    if (err < 0) {
      {
        absl::MutexLock l(&mu_);
        state_ = State::kUnconnected;
      }
      {
        absl::MutexLock l(&server->mu_);
        server->peer_.reset();
        server->state_ = State::kClosed;
      }
      if (err == -EAGAIN && !nonblocking) continue;
      return err;
    }
    listener->wq_->Notify(kReadEvents);
    {
      absl::MutexLock l(&mu_);
      peer_ = std::move(server);
      state_ = State::kConnected;
      peer_creds_ = listener_creds;
      has_peer_creds_ = true;
    }
    wq_->Notify(kWriteEvents);
    return 0;
  }
}

int64_t UnixEndpoint::ConnectDatagram(const SocketContext& ctx,
                                      const UnixAddress& addr) {
  int64_t r = MaybeAutobind(ctx);
  if (r < 0) return r;
  std::shared_ptr<UnixEndpoint> target;
  r = FindPeer(ctx, addr, &target);
  if (r < 0) return r;
  {
    absl::MutexLock l(&target->mu_);
    if (target->state_ == State::kClosed) return -ECONNREFUSED;
    // A socket connected elsewhere takes datagrams only from its peer.
    if (target->peer_ != nullptr && target->peer_.get() != this) return -EPERM;
  }
  std::shared_ptr<UnixEndpoint> old;
  {
    absl::MutexLock l(&mu_);
    old = std::move(peer_);
    peer_ = target;
    state_ = State::kConnected;
  }
  std::deque<UnixMessagePtr> dropped;
  if (old != nullptr && old != target) DatagramDisconnected(old, &dropped);
  wq_->Notify(kWriteEvents);
  return 0;
}

int64_t UnixEndpoint::Disconnect() {
  std::shared_ptr<UnixEndpoint> old;
  {
    absl::MutexLock l(&mu_);
    old = std::move(peer_);
    state_ = State::kUnconnected;
  }
  std::deque<UnixMessagePtr> dropped;
  if (old != nullptr) DatagramDisconnected(old, &dropped);
  return 0;
}

void UnixEndpoint::DatagramDisconnected(const std::shared_ptr<UnixEndpoint>& old,
                                        std::deque<UnixMessagePtr>* dropped) {
  {
    absl::MutexLock io(&io_mu_);
    absl::MutexLock l(&mu_);
    if (queue_.empty()) return;
    dropped->swap(queue_);
    queued_bytes_ = 0;
  }
  peer_wait_.Notify(kWriteEvents);
  bool told = false;
  {
    absl::MutexLock l(&old->mu_);
    if (old->state_ != State::kClosed && old->peer_.get() == this) {
      old->error_ = ECONNRESET;
      told = true;
    }
  }
  if (told) old->wq_->Notify(POLLERR);
}

int64_t UnixEndpoint::Shutdown(int how) {
  if (how < SHUT_RD || how > SHUT_RDWR) return -EINVAL;
  // SHUT_RD, SHUT_WR, SHUT_RDWR are 0, 1, 2: +1 gives the mask.
  const int mode = how + 1;
  std::shared_ptr<UnixEndpoint> peer;
  {
    absl::MutexLock l(&mu_);
    shutdown_ |= mode;
    peer = peer_;
  }
  wq_->Notify(kHangupEvents);
  if (peer != nullptr && connection_oriented()) {
    int peer_mode = 0;
    if (mode & kRcvShutdown) peer_mode |= kSendShutdown;
    if (mode & kSendShutdown) peer_mode |= kRcvShutdown;
    {
      absl::MutexLock l(&peer->mu_);
      peer->shutdown_ |= peer_mode;
    }
    peer->wq_->Notify(kHangupEvents);
  }
  return 0;
}

void UnixEndpoint::Close(bool embryo) {
  std::shared_ptr<UnixEndpoint> peer;
  std::deque<UnixMessagePtr> dropped;
  std::deque<std::shared_ptr<UnixEndpoint>> pending;
  std::shared_ptr<fs::Inode> inode;
  UnixNamespace* ns = nullptr;
  UnixAddress local;
  std::vector<std::pair<waiter::Waiter*, std::shared_ptr<UnixEndpoint>>> waiters;
  {
    absl::MutexLock io(&io_mu_);
    absl::MutexLock l(&mu_);
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    shutdown_ = kRcvShutdown | kSendShutdown;
    peer = std::move(peer_);
    dropped.swap(queue_);
    queued_bytes_ = 0;
    pending.swap(accept_queue_);
    inode = std::move(bound_inode_);
    ns = ns_;
    ns_ = nullptr;
    local = local_;
    waiters.swap(peer_waiters_);
  }
  for (auto& [w, p] : waiters) p->peer_wait_.Remove(w);
  if (ns != nullptr) {
    if (inode != nullptr) {
      ns->UnbindInode(inode.get(), this);
    } else if (local.abstract()) {
      ns->UnbindAbstract(type_, local.name, this);
    }
  }
  if (peer != nullptr && connection_oriented()) {
    // The peer can neither read more nor write; if it had sent data we
    // never read (or never accepted the connection), it is reset.
    bool reset = !dropped.empty() || embryo;
    {
      absl::MutexLock l(&peer->mu_);
      peer->shutdown_ = kRcvShutdown | kSendShutdown;
      if (reset) peer->error_ = ECONNRESET;
    }
    peer->wq_->Notify(kHangupEvents | (reset ? POLLERR : 0));
  }
  wq_->Notify(kHangupEvents);
  peer_wait_.Notify(kWriteEvents | POLLHUP);
  for (auto& conn : pending) conn->Close(/*embryo=*/true);
  // `dropped` (and any files it carries) and `peer` go here, unlocked.
}

UnixAddress UnixEndpoint::LocalAddress() {
  absl::MutexLock l(&mu_);
  return local_;
}

int64_t UnixEndpoint::PeerAddress(UnixAddress* out) {
  std::shared_ptr<UnixEndpoint> peer;
  {
    absl::MutexLock l(&mu_);
    if (peer_ == nullptr || state_ == State::kConnecting) return -ENOTCONN;
    peer = peer_;
  }
  *out = peer->LocalAddress();
  return 0;
}

Credentials UnixEndpoint::PeerCredentials() {
  absl::MutexLock l(&mu_);
  if (!has_peer_creds_) return Credentials{0, ~0u, ~0u};
  return peer_creds_;
}

int UnixEndpoint::TakeError() {
  absl::MutexLock l(&mu_);
  int e = error_;
  error_ = 0;
  return e;
}

bool UnixEndpoint::listening() {
  absl::MutexLock l(&mu_);
  return state_ == State::kListening;
}

int64_t UnixEndpoint::QueuedBytes() {
  absl::MutexLock l(&mu_);
  if (state_ == State::kListening) return -EINVAL;
  if (type_ == SOCK_DGRAM) {
    return queue_.empty() ? 0 : static_cast<int64_t>(queue_.front()->data.size());
  }
  return queued_bytes_;
}

bool UnixEndpoint::passcred() {
  absl::MutexLock l(&mu_);
  return passcred_;
}
void UnixEndpoint::set_passcred(bool on) {
  absl::MutexLock l(&mu_);
  passcred_ = on;
}
int64_t UnixEndpoint::sndbuf() {
  absl::MutexLock l(&mu_);
  return sndbuf_;
}
void UnixEndpoint::set_sndbuf(int64_t v) {
  {
    absl::MutexLock l(&mu_);
    sndbuf_ = v;
  }
  wq_->Notify(kWriteEvents);  // a larger buffer may unblock writers
}
int64_t UnixEndpoint::rcvbuf() {
  absl::MutexLock l(&mu_);
  return rcvbuf_;
}
void UnixEndpoint::set_rcvbuf(int64_t v) {
  absl::MutexLock l(&mu_);
  rcvbuf_ = v;
}
absl::Duration UnixEndpoint::rcvtimeo() {
  absl::MutexLock l(&mu_);
  return rcvtimeo_;
}
void UnixEndpoint::set_rcvtimeo(absl::Duration d) {
  absl::MutexLock l(&mu_);
  rcvtimeo_ = d;
}
absl::Duration UnixEndpoint::sndtimeo() {
  absl::MutexLock l(&mu_);
  return sndtimeo_;
}
void UnixEndpoint::set_sndtimeo(absl::Duration d) {
  absl::MutexLock l(&mu_);
  sndtimeo_ = d;
}

// ---------------------------------------------------------------------------
// Data

int64_t UnixEndpoint::Send(const SocketContext& ctx, SendRequest& req,
                           const UnixAddress* to, bool nonblocking,
                           bool* sigpipe) {
  *sigpipe = false;
  if (type_ == SOCK_STREAM) {
    if (to != nullptr) {
      absl::MutexLock l(&mu_);
      return state_ == State::kConnected ? -EISCONN : -EOPNOTSUPP;
    }
    return SendStream(ctx, req, nonblocking, sigpipe);
  }
  return SendDatagram(ctx, req, to, nonblocking);
}

int64_t UnixEndpoint::WaitSendBuffer(const SocketContext& ctx, bool nonblocking,
                                     absl::Time deadline) {
  auto check = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> int64_t {
    if (error_ != 0) {
      int e = error_;
      error_ = 0;
      return -e;
    }
    if (shutdown_ & kSendShutdown) return -EPIPE;
    return send_->used() < sndbuf_ ? 0 : 1;
  };
  for (;;) {
    int64_t r;
    {
      absl::MutexLock l(&mu_);
      r = check();
    }
    if (r <= 0) return r;
    if (nonblocking) return -EAGAIN;
    r = Wait(ctx, *wq_, kWriteEvents, deadline, [this] {
      absl::MutexLock l(&mu_);
      return error_ != 0 || (shutdown_ & kSendShutdown) != 0 ||
             send_->used() < sndbuf_;
    });
    if (r < 0) return r;
  }
}

int64_t UnixEndpoint::BuildMessage(const SocketContext& ctx, IoSource* src,
                                   size_t n, UnixMessagePtr* out) {
  auto m = std::make_unique<UnixMessage>();
  m->data.resize(n);
  if (n > 0) {
    int64_t r = src->Read(m->data.data(), n);
    if (r != static_cast<int64_t>(n)) return -EFAULT;
  }
  m->creds = ctx.creds;
  {
    absl::MutexLock l(&mu_);
    m->from = local_;
  }
  m->charge = static_cast<int64_t>(n) + kMessageOverhead;
  m->charged_to = send_;
  send_->Charge(m->charge);
  *out = std::move(m);
  return 0;
}

int64_t UnixEndpoint::SendStream(const SocketContext& ctx, SendRequest& req,
                                 bool nonblocking, bool* sigpipe) {
  if (req.flags & MSG_OOB) return -EOPNOTSUPP;
  std::shared_ptr<UnixEndpoint> peer;
  {
    absl::MutexLock l(&mu_);
    if (state_ != State::kConnected || peer_ == nullptr) return -ENOTCONN;
    if (shutdown_ & kSendShutdown) {
      *sigpipe = true;
      return -EPIPE;
    }
    peer = peer_;
  }
  const size_t total = req.data->remaining();
  const absl::Time deadline = Deadline(sndtimeo());
  size_t sent = 0;
  int64_t err = 0;
  // Linux sends nothing (not even the files) for an empty stream write.
  while (sent < total) {
    // Part of the write is queued: a stop ends the wait with a short
    // write, never a second copy of that part.
    if (sent > 0 && ctx.io.blocker != nullptr) ctx.io.blocker->MarkProgress();
    err = WaitSendBuffer(ctx, nonblocking, deadline);
    if (err < 0) break;
    size_t piece = std::min<size_t>(total - sent, kMaxStreamPiece);
    piece = std::min<size_t>(
        piece, std::max<int64_t>(sndbuf() / 2 - 64, kMessageOverhead));
    UnixMessagePtr m;
    err = BuildMessage(ctx, req.data, piece, &m);
    if (err < 0) break;
    if (sent == 0) m->rights = std::move(req.rights);  // on the first piece
    if (req.creds.has_value()) m->creds = *req.creds;
    bool queued = false;
    {
      absl::MutexLock l(&peer->mu_);
      if (peer->state_ != State::kClosed &&
          (peer->shutdown_ & kRcvShutdown) == 0) {
        peer->queued_bytes_ += piece;
        peer->queue_.push_back(std::move(m));
        queued = true;
      }
    }
    if (!queued) {
      err = -EPIPE;
      break;  // `m` is dropped here, unlocked
    }
    peer->wq_->Notify(kReadEvents);
    sent += piece;
  }
  if (sent > 0) return sent;
  if (err == -EPIPE) *sigpipe = true;
  return err;
}

int64_t UnixEndpoint::SendDatagram(const SocketContext& ctx, SendRequest& req,
                                   const UnixAddress* to, bool nonblocking) {
  if (req.flags & MSG_OOB) return -EOPNOTSUPP;
  std::shared_ptr<UnixEndpoint> target;
  {
    absl::MutexLock l(&mu_);
    if (type_ == SOCK_SEQPACKET) {
      if (error_ != 0) {
        int e = error_;
        error_ = 0;
        return -e;
      }
      if (state_ != State::kConnected) return -ENOTCONN;
      to = nullptr;  // a seqpacket socket ignores the address
    }
    if (to == nullptr) {
      target = peer_;
      if (target == nullptr) return -ENOTCONN;
    }
  }
  const bool via_peer = to == nullptr;
  int64_t r = MaybeAutobind(ctx);
  if (r < 0) return r;
  const size_t len = req.data->remaining();
  if (static_cast<int64_t>(len) > sndbuf() - 32) return -EMSGSIZE;
  const absl::Time deadline = Deadline(sndtimeo());
  r = WaitSendBuffer(ctx, nonblocking, deadline);
  if (r < 0) return r;
  UnixMessagePtr m;
  r = BuildMessage(ctx, req.data, len, &m);
  if (r < 0) return r;
  m->rights = std::move(req.rights);
  if (req.creds.has_value()) m->creds = *req.creds;
  if (!via_peer) {
    r = FindPeer(ctx, *to, &target);
    if (r < 0) return r;
  }
  for (;;) {
    enum class Outcome { kQueued, kDead, kNotPeer, kShutdown, kFull } outcome;
    {
      absl::MutexLock l(&target->mu_);
      if (target->state_ == State::kClosed) {
        outcome = Outcome::kDead;
      } else if (target->peer_ != nullptr && target->peer_.get() != this) {
        outcome = Outcome::kNotPeer;
      } else if (target->shutdown_ & kRcvShutdown) {
        outcome = Outcome::kShutdown;
      } else if (target.get() != this && target->peer_.get() != this &&
                 target->queue_.size() > kMaxDgramQlen) {
        outcome = Outcome::kFull;
      } else {
        target->queued_bytes_ += len;
        target->queue_.push_back(std::move(m));
        outcome = Outcome::kQueued;
      }
    }
    switch (outcome) {
      case Outcome::kQueued:
        target->wq_->Notify(kReadEvents);
        return len;
      case Outcome::kNotPeer:
        return -EPERM;
      case Outcome::kShutdown:
        return -EPIPE;
      case Outcome::kDead: {
        if (type_ == SOCK_SEQPACKET) return -EPIPE;
        if (via_peer) {
          // The default peer is gone: forget it (the next send without an
          // address is ENOTCONN), as Linux does on discovering it.
          bool was_peer = false;
          {
            absl::MutexLock l(&mu_);
            if (peer_ == target) {
              peer_.reset();
              state_ = State::kUnconnected;
              was_peer = true;
            }
          }
          std::deque<UnixMessagePtr> dropped;
          if (was_peer) DatagramDisconnected(target, &dropped);
        }
        return -ECONNREFUSED;
      }
      case Outcome::kFull: {
        if (nonblocking) return -EAGAIN;
        r = Wait(ctx, target->peer_wait_, kWriteEvents, deadline, [&] {
          absl::MutexLock l(&target->mu_);
          return target->state_ == State::kClosed ||
                 target->peer_.get() == this ||
                 (target->shutdown_ & kRcvShutdown) != 0 ||
                 target->queue_.size() <= kMaxDgramQlen;
        });
        if (r < 0) return r;
        break;
      }
    }
  }
}

int64_t UnixEndpoint::Recv(const SocketContext& ctx, RecvRequest& req,
                           bool nonblocking) {
  if (req.flags & MSG_OOB) return -EOPNOTSUPP;
  {
    absl::MutexLock l(&mu_);
    if (type_ == SOCK_STREAM && state_ != State::kConnected) return -EINVAL;
    if (type_ == SOCK_SEQPACKET && state_ != State::kConnected) return -ENOTCONN;
  }
  return type_ == SOCK_STREAM ? RecvStream(ctx, req, nonblocking)
                              : RecvDatagram(ctx, req, nonblocking);
}

int64_t UnixEndpoint::RecvStream(const SocketContext& ctx, RecvRequest& req,
                                 bool nonblocking) {
  const bool peek = (req.flags & MSG_PEEK) != 0;
  const size_t len = req.data->remaining();
  // sock_rcvlowat: wait for everything with MSG_WAITALL, else for a byte.
  const size_t target = (req.flags & MSG_WAITALL) ? std::max<size_t>(len, 1) : 1;
  const absl::Time deadline = Deadline(rcvtimeo());
  size_t copied = 0;
  size_t skip = 0;  // MSG_PEEK: bytes already looked at
  bool check_creds = false;
  bool have_address = false;
  Credentials creds;
  int64_t err = 0;
  std::deque<UnixMessagePtr> consumed;  // destroyed after unlocking

  io_mu_.Lock();
  for (;;) {
    UnixMessage* m = nullptr;
    size_t m_skip = 0;
    bool passcred = false;
    bool wait = false;
    {
      absl::MutexLock l(&mu_);
      passcred = passcred_;
      size_t s = skip;
      for (auto& mp : queue_) {
        if (s < mp->unread()) {
          m = mp.get();
          m_skip = s;
          break;
        }
        s -= mp->unread();
      }
      if (m == nullptr) {
        if (copied >= target) break;
        // POSIX's order: a pending error, then end of file.
        if (error_ != 0) {
          err = -error_;
          error_ = 0;
          break;
        }
        if (shutdown_ & kRcvShutdown) break;
        if (nonblocking) {
          err = -EAGAIN;
          break;
        }
        wait = true;
      }
    }
    if (wait) {
      io_mu_.Unlock();
      // MSG_WAITALL with part of the data consumed: a stop ends the wait
      // with a short read, never a read that skips that part.
      if (copied > 0 && !peek && ctx.io.blocker != nullptr) {
        ctx.io.blocker->MarkProgress();
      }
      const size_t seen = skip;
      int64_t r = Wait(ctx, *wq_, kReadEvents, deadline, [this, seen] {
        absl::MutexLock l(&mu_);
        return queued_bytes_ > static_cast<int64_t>(seen) || error_ != 0 ||
               (shutdown_ & kRcvShutdown) != 0;
      });
      io_mu_.Lock();
      if (r < 0) {
        err = r;
        break;
      }
      continue;
    }
    // With SO_PASSCRED, data from different writers is never merged.
    if (check_creds) {
      if (m->creds != creds) break;
    } else if (passcred) {
      creds = m->creds;
      check_creds = true;
    }
    if (req.want_address && !have_address) {
      have_address = true;
      if (!m->from.unnamed()) req.address = m->from.ToSockaddr();
    }
    // Only this reader (io_mu_) consumes, so `m` stays put unlocked.
    size_t chunk = std::min(m->unread() - m_skip, len - copied);
    bool short_copy = false;
    if (chunk > 0) {
      int64_t w = req.data->Write(m->data.data() + m->consumed + m_skip, chunk);
      if (w < 0) {
        if (copied == 0) err = w;
        break;
      }
      short_copy = static_cast<size_t>(w) < chunk;
      chunk = w;
    }
    copied += chunk;
    const bool has_rights = !m->rights.empty();
    if (peek) {
      // Peeked files are installed too (Linux dups them).
      if (has_rights) {
        req.rights = m->rights;
        break;
      }
      skip += chunk;
    } else {
      absl::MutexLock l(&mu_);
      m->consumed += chunk;
      queued_bytes_ -= chunk;
      if (has_rights) req.rights = std::move(m->rights);
      if (m->unread() > 0) break;  // the caller's buffer is full
      consumed.push_back(std::move(queue_.front()));
      queue_.pop_front();
      // Files end a read: they belong with the bytes they came with.
      if (has_rights) break;
    }
    if (short_copy || copied >= len) break;
  }
  io_mu_.Unlock();
  if (check_creds) req.creds = creds;
  consumed.clear();  // gives the writers their buffer space back
  return copied > 0 ? static_cast<int64_t>(copied) : err;
}

int64_t UnixEndpoint::RecvDatagram(const SocketContext& ctx, RecvRequest& req,
                                   bool nonblocking) {
  const bool peek = (req.flags & MSG_PEEK) != 0;
  const size_t len = req.data->remaining();
  const absl::Time deadline = Deadline(rcvtimeo());
  UnixMessage* m = nullptr;
  bool passcred = false;
  int64_t err = 0;

  io_mu_.Lock();
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      passcred = passcred_;
      // Linux looks at the pending error before the queue here.
      if (error_ != 0) {
        err = -error_;
        error_ = 0;
        break;
      }
      if (!queue_.empty()) {
        m = queue_.front().get();
        break;
      }
      if (shutdown_ & kRcvShutdown) {
        // End of file, except that a non-blocking datagram socket says
        // EAGAIN.
        err = (nonblocking && type_ == SOCK_DGRAM) ? -EAGAIN : 0;
        break;
      }
      if (nonblocking) {
        err = -EAGAIN;
        break;
      }
    }
    io_mu_.Unlock();
    int64_t r = Wait(ctx, *wq_, kReadEvents, deadline, [this] {
      absl::MutexLock l(&mu_);
      return !queue_.empty() || error_ != 0 || (shutdown_ & kRcvShutdown) != 0;
    });
    io_mu_.Lock();
    if (r < 0) {
      err = r;
      break;
    }
  }
  if (m == nullptr) {
    io_mu_.Unlock();
    return err;
  }
  const size_t size = m->data.size();
  const size_t n = std::min(len, size);
  if (n > 0) {
    int64_t w = req.data->Write(m->data.data(), n);
    if (w < 0) {
      io_mu_.Unlock();
      return w;  // the datagram stays queued
    }
  }
  if (size > len) req.msg_flags |= MSG_TRUNC;
  if (req.want_address && !m->from.unnamed()) req.address = m->from.ToSockaddr();
  if (passcred) req.creds = m->creds;
  UnixMessagePtr taken;
  if (peek) {
    req.rights = m->rights;
  } else {
    absl::MutexLock l(&mu_);
    taken = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= size;
    req.rights = std::move(taken->rights);
  }
  io_mu_.Unlock();
  if (!peek) peer_wait_.Notify(kWriteEvents);  // room for blocked senders
  taken.reset();
  return (req.flags & MSG_TRUNC) ? static_cast<int64_t>(size)
                                 : static_cast<int64_t>(n);
}

// ---------------------------------------------------------------------------
// Readiness

waiter::EventMask UnixEndpoint::ReadinessLocked() {
  waiter::EventMask m = 0;
  if (error_ != 0) m |= POLLERR;
  if (shutdown_ == (kRcvShutdown | kSendShutdown)) m |= POLLHUP;
  if (shutdown_ & kRcvShutdown) m |= POLLRDHUP | kReadEvents;
  if (!queue_.empty() || !accept_queue_.empty()) m |= kReadEvents;
  // A connection-oriented socket that is not connected has hung up.
  if (connection_oriented() && state_ != State::kConnected &&
      state_ != State::kListening) {
    m |= POLLHUP;
  }
  // Writable also once the other side is gone, so that writers find out.
  if (writable_locked()) m |= kWriteEvents;
  return m;
}

waiter::EventMask UnixEndpoint::Readiness(waiter::EventMask mask) {
  waiter::EventMask m;
  std::shared_ptr<UnixEndpoint> peer;
  {
    absl::MutexLock l(&mu_);
    m = ReadinessLocked();
    if (type_ == SOCK_DGRAM) peer = peer_;
  }
  // A datagram socket is not writable while its peer's queue is full
  // (unless the peer is connected back to it).
  if ((m & kWriteEvents) && (mask & kWriteEvents) && peer != nullptr &&
      peer.get() != this) {
    absl::MutexLock l(&peer->mu_);
    if (peer->state_ != State::kClosed && peer->peer_.get() != this &&
        peer->queue_.size() > kMaxDgramQlen) {
      m &= ~kWriteEvents;
    }
  }
  return m & (mask | POLLERR | POLLHUP);
}

void UnixEndpoint::EventRegister(waiter::Waiter* w, waiter::EventMask mask) {
  wq_->Add(w, mask);
  if (type_ != SOCK_DGRAM || (mask & kWriteEvents) == 0) return;
  // Room in a datagram peer's queue is announced on its peer_wait_. The
  // registration follows the peer at the time of registering.
  std::shared_ptr<UnixEndpoint> peer;
  {
    absl::MutexLock l(&mu_);
    if (peer_ == nullptr || peer_.get() == this) return;
    peer = peer_;
    peer_waiters_.emplace_back(w, peer);
  }
  peer->peer_wait_.Add(w, kWriteEvents);
}

void UnixEndpoint::EventUnregister(waiter::Waiter* w) {
  wq_->Remove(w);
  std::vector<std::shared_ptr<UnixEndpoint>> peers;
  {
    absl::MutexLock l(&mu_);
    for (auto it = peer_waiters_.begin(); it != peer_waiters_.end();) {
      if (it->first == w) {
        peers.push_back(std::move(it->second));
        it = peer_waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& p : peers) p->peer_wait_.Remove(w);
}

}  // namespace sandboxd::socket
