// The AF_UNIX transport: endpoints, their message queues, and the
// sandbox's names (Linux net/unix/af_unix.c; gVisor's transport/unix).
//
// An endpoint is one socket's state. Data goes into the *receiver's*
// queue and is charged to the *sender's* send buffer until it is read,
// which is how Linux bounds a unix socket (sk_wmem_alloc against
// sk_sndbuf): a writer blocks when it has too much unread data out.
//
//   stream/seqpacket  connect() to a listening endpoint creates a server
//                     endpoint already connected to the client and queues
//                     it on the listener (the client's connect returns
//                     then; accept() takes it later).
//   dgram             every send names (or defaults to) a receiver; a
//                     receiver that is not connected back to the sender
//                     holds at most kMaxDgramQlen + 1 messages from others.
//
// Locks (see README.md): bind_mu_ > (VFS) > UnixNamespace::mu_ ;
// io_mu_ > mu_. An endpoint's mu_ is a leaf: never held while taking
// another endpoint's lock, calling into the VFS, or dropping a message
// (whose files' release can close other sockets). WaitQueues are notified
// with no endpoint lock held.
#ifndef SANDBOXD_SENTRY_SOCKET_UNIX_ENDPOINT_H_
#define SANDBOXD_SENTRY_SOCKET_UNIX_ENDPOINT_H_

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "sentry/fs/file.h"
#include "sentry/fs/inode.h"
#include "sentry/socket/socket.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::state {
struct SocketState;
}  // namespace sandboxd::state

namespace sandboxd::socket {

class UnixEndpoint;

// An AF_UNIX name: the bytes of sun_path that count.
//   ""          unnamed
//   "/a/b", "x" a filesystem path (without the terminating NUL)
//   "\0name"    abstract: every byte up to the address length counts
struct UnixAddress {
  std::string name;
  bool unnamed() const { return name.empty(); }
  bool abstract() const { return !name.empty() && name[0] == '\0'; }
  // The sockaddr_un as getsockname/getpeername/accept/recvfrom return it:
  // sun_family alone for unnamed sockets, the path with its NUL, or the
  // abstract bytes.
  std::string ToSockaddr() const;
};

// Parses the sockaddr that bind/connect/sendto got (addrlen bytes).
// -EINVAL for a short address, another family or an empty path.
// *autobind is set for a bare sun_family (bind's "pick a name").
int ParseUnixAddress(const std::string& raw, UnixAddress* out, bool* autobind);

inline constexpr int64_t kDefaultSocketBuffer = 212992;  // wmem/rmem_default
inline constexpr int64_t kMaxSocketBuffer = 212992;      // wmem/rmem_max
inline constexpr int64_t kMinSndBuf = 4608;              // SOCK_MIN_SNDBUF
inline constexpr int64_t kMinRcvBuf = 2304;              // SOCK_MIN_RCVBUF
inline constexpr size_t kMaxDgramQlen = 10;   // net.unix.max_dgram_qlen
inline constexpr int kSoMaxConn = 4096;       // net.core.somaxconn
// What every message costs its sender on top of its bytes (Linux charges
// an skb's truesize), so that empty datagrams are bounded too.
inline constexpr int64_t kMessageOverhead = 512;

// Bytes a socket has sent that nobody has read yet (sk_wmem_alloc). Shared
// by the endpoint and its in-flight messages, which outlive it if need be.
class SendBuffer {
 public:
  explicit SendBuffer(std::shared_ptr<waiter::WaitQueue> wq) : wq_(std::move(wq)) {}
  int64_t used() const { return used_.load(std::memory_order_acquire); }
  void Charge(int64_t n) { used_.fetch_add(n, std::memory_order_acq_rel); }
  // A message was read or dropped: the sender may be writable again.
  void Release(int64_t n) {
    used_.fetch_sub(n, std::memory_order_acq_rel);
    wq_->Notify(POLLOUT | POLLWRNORM | POLLWRBAND);
  }

 private:
  std::atomic<int64_t> used_{0};
  const std::shared_ptr<waiter::WaitQueue> wq_;
};

// One queued message (dgram, seqpacket) or one piece of a stream.
// Destroying it gives its charge back to the sender and drops its files:
// never destroy one with an endpoint lock held.
struct UnixMessage {
  UnixMessage() = default;
  UnixMessage(const UnixMessage&) = delete;
  UnixMessage& operator=(const UnixMessage&) = delete;
  ~UnixMessage() {
    if (charged_to != nullptr) charged_to->Release(charge);
  }
  size_t unread() const { return data.size() - consumed; }

  std::vector<uint8_t> data;
  size_t consumed = 0;  // stream: bytes already read from the front
  UnixAddress from;     // the sender's name when it sent
  Credentials creds;    // always recorded, as Linux does
  std::vector<std::shared_ptr<fs::File>> rights;
  std::shared_ptr<SendBuffer> charged_to;
  int64_t charge = 0;
};
using UnixMessagePtr = std::unique_ptr<UnixMessage>;

// The sandbox's AF_UNIX names: abstract names, and the endpoints bound to
// socket inodes of its filesystems (keyed by Inode*: a bound endpoint
// holds its inode, so the key stays unique while the entry exists).
// Abstract names are per socket type, as in Linux (whose hash of an
// abstract name includes the type): a stream and a datagram socket may
// hold the same name, and each finds only its own kind. Thread-safe.
class UnixNamespace {
 public:
  UnixNamespace();
  // -EADDRINUSE if the name is taken by a live endpoint.
  int BindAbstract(int type, const std::string& name,
                   const std::shared_ptr<UnixEndpoint>& ep);
  // Picks an unused abstract name "\0xxxxx" (five hex digits, as Linux).
  int Autobind(int type, const std::shared_ptr<UnixEndpoint>& ep,
               std::string* name);
  void UnbindAbstract(int type, const std::string& name, const UnixEndpoint* ep);
  std::shared_ptr<UnixEndpoint> FindAbstract(int type, const std::string& name);

  void BindInode(const fs::Inode* inode, const std::shared_ptr<UnixEndpoint>& ep);
  void UnbindInode(const fs::Inode* inode, const UnixEndpoint* ep);
  std::shared_ptr<UnixEndpoint> FindInode(const fs::Inode* inode);

 private:
  absl::Mutex mu_;
  std::map<std::pair<int, std::string>, std::weak_ptr<UnixEndpoint>> abstract_
      ABSL_GUARDED_BY(mu_);
  std::map<const fs::Inode*, std::weak_ptr<UnixEndpoint>> inodes_
      ABSL_GUARDED_BY(mu_);
  uint32_t next_autobind_ ABSL_GUARDED_BY(mu_);
};

class UnixEndpoint : public std::enable_shared_from_this<UnixEndpoint> {
 public:
  explicit UnixEndpoint(int type);
  ~UnixEndpoint();
  // socketpair(2): two endpoints connected to each other, each with the
  // creator's credentials as its peer's.
  static std::pair<std::shared_ptr<UnixEndpoint>, std::shared_ptr<UnixEndpoint>>
  NewPair(int type, const Credentials& creds);

  int type() const { return type_; }
  bool connection_oriented() const { return type_ != SOCK_DGRAM; }

  // Each returns 0 or a count, or -errno, with Linux's errors.
  int64_t Bind(const SocketContext& ctx, const UnixAddress& addr,
               bool autobind);
  int64_t Listen(const SocketContext& ctx, int backlog);
  int64_t Accept(const SocketContext& ctx, bool nonblocking,
                 std::shared_ptr<UnixEndpoint>* out);
  int64_t Connect(const SocketContext& ctx, const UnixAddress& addr,
                  bool nonblocking);
  // connect(AF_UNSPEC) on a datagram socket: forget the default peer.
  int64_t Disconnect();
  int64_t Shutdown(int how);
  // `to` is null when no address was given.
  int64_t Send(const SocketContext& ctx, SendRequest& req,
               const UnixAddress* to, bool nonblocking, bool* sigpipe);
  int64_t Recv(const SocketContext& ctx, RecvRequest& req, bool nonblocking);
  // The socket's file is gone (or a never-accepted connection is dropped:
  // `embryo`). Idempotent.
  void Close(bool embryo = false);

  UnixAddress LocalAddress();
  int64_t PeerAddress(UnixAddress* out);
  // SO_PEERCRED: pid 0, uid/gid -1 when there is no peer.
  Credentials PeerCredentials();
  // SO_ERROR: the pending error, cleared.
  int TakeError();
  bool listening();
  // FIONREAD: unread bytes (stream, seqpacket) or the next datagram's size.
  int64_t QueuedBytes();

  bool passcred();
  void set_passcred(bool on);
  int64_t sndbuf();
  void set_sndbuf(int64_t v);
  int64_t rcvbuf();
  void set_rcvbuf(int64_t v);
  // SO_RCVTIMEO / SO_SNDTIMEO: how long blocking calls wait
  // (InfiniteDuration: forever).
  absl::Duration rcvtimeo();
  void set_rcvtimeo(absl::Duration d);
  absl::Duration sndtimeo();
  void set_sndtimeo(absl::Duration d);

  waiter::EventMask Readiness(waiter::EventMask mask);
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask);
  void EventUnregister(waiter::Waiter* w);
  // The queue every readiness change of this endpoint is notified on
  // (epoll watches it; see waiter/event_source.h).
  const std::shared_ptr<waiter::WaitQueue>& queue() const { return wq_; }

 private:
  friend struct ::sandboxd::state::SocketState;  // checkpoint save and load
  enum class State { kUnconnected, kConnecting, kConnected, kListening, kClosed };
  static constexpr int kRcvShutdown = 1;
  static constexpr int kSendShutdown = 2;

  int64_t SendStream(const SocketContext& ctx, SendRequest& req,
                     bool nonblocking, bool* sigpipe);
  int64_t SendDatagram(const SocketContext& ctx, SendRequest& req,
                       const UnixAddress* to, bool nonblocking);
  int64_t RecvStream(const SocketContext& ctx, RecvRequest& req,
                     bool nonblocking);
  int64_t RecvDatagram(const SocketContext& ctx, RecvRequest& req,
                       bool nonblocking);
  int64_t ConnectStream(const SocketContext& ctx, const UnixAddress& addr,
                        bool nonblocking);
  int64_t ConnectDatagram(const SocketContext& ctx, const UnixAddress& addr);
  // The endpoint bound to `addr` and of this endpoint's type.
  int64_t FindPeer(const SocketContext& ctx, const UnixAddress& addr,
                   std::shared_ptr<UnixEndpoint>* out);
  // Binds an abstract name if SO_PASSCRED asks for one (Linux autobinds a
  // sender or connector that passes credentials).
  int64_t MaybeAutobind(const SocketContext& ctx);
  // Blocks until the send buffer has room: 0, -EAGAIN, -EPIPE, -EINTR or
  // the pending error.
  int64_t WaitSendBuffer(const SocketContext& ctx, bool nonblocking,
                         absl::Time deadline);
  // A new message carrying `n` bytes from `src`, charged to this endpoint.
  int64_t BuildMessage(const SocketContext& ctx, IoSource* src, size_t n,
                       UnixMessagePtr* out);
  // Datagram: the default peer went away or changed; Linux drops what was
  // queued here and tells the old peer if it was connected back.
  void DatagramDisconnected(const std::shared_ptr<UnixEndpoint>& old,
                            std::deque<UnixMessagePtr>* dropped);
  waiter::EventMask ReadinessLocked() ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool writable_locked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return state_ != State::kListening && send_->used() * 4 <= sndbuf_;
  }

  const int type_;
  // Readers and writers of this socket wait here.
  const std::shared_ptr<waiter::WaitQueue> wq_;
  // Others wait here for this endpoint: connectors for backlog room,
  // datagram senders for queue room (Linux's peer_wait).
  waiter::WaitQueue peer_wait_;
  const std::shared_ptr<SendBuffer> send_;

  // Serializes bind and autobind, which call into the VFS.
  absl::Mutex bind_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Serializes readers (Linux's iolock): a reader may copy out of the
  // messages at the queue's front without mu_, since only io_mu_'s holder
  // consumes them.
  absl::Mutex io_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kUnconnected;
  int shutdown_ ABSL_GUARDED_BY(mu_) = 0;
  int error_ ABSL_GUARDED_BY(mu_) = 0;
  // Connected peer (stream, seqpacket) or default destination (dgram).
  // A strong reference, as Linux's sock_hold: a closed peer is seen as
  // closed rather than gone. Close() drops it, which breaks the cycle.
  std::shared_ptr<UnixEndpoint> peer_ ABSL_GUARDED_BY(mu_);
  Credentials peer_creds_ ABSL_GUARDED_BY(mu_);
  bool has_peer_creds_ ABSL_GUARDED_BY(mu_) = false;
  // listen()'s caller, which connecting clients see as their peer.
  Credentials listen_creds_ ABSL_GUARDED_BY(mu_);
  UnixAddress local_ ABSL_GUARDED_BY(mu_);
  // What keeps the name: the socket inode of a path binding, or the
  // namespace of any binding.
  std::shared_ptr<fs::Inode> bound_inode_ ABSL_GUARDED_BY(mu_);
  UnixNamespace* ns_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::deque<UnixMessagePtr> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Listening: connections not yet accepted, and how many may wait.
  std::deque<std::shared_ptr<UnixEndpoint>> accept_queue_ ABSL_GUARDED_BY(mu_);
  size_t backlog_ ABSL_GUARDED_BY(mu_) = 0;
  // Waiters registered (for POLLOUT) on a datagram peer's peer_wait_.
  std::vector<std::pair<waiter::Waiter*, std::shared_ptr<UnixEndpoint>>>
      peer_waiters_ ABSL_GUARDED_BY(mu_);
  bool passcred_ ABSL_GUARDED_BY(mu_) = false;
  int64_t sndbuf_ ABSL_GUARDED_BY(mu_) = kDefaultSocketBuffer;
  int64_t rcvbuf_ ABSL_GUARDED_BY(mu_) = kDefaultSocketBuffer;
  absl::Duration rcvtimeo_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();
  absl::Duration sndtimeo_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();
};

}  // namespace sandboxd::socket

#endif  // SANDBOXD_SENTRY_SOCKET_UNIX_ENDPOINT_H_
