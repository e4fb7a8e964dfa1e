// AF_UNIX sockets as files: socket(2), socketpair(2) and everything an fd
// of them does. The transport (queues, connections, names) is
// unix_endpoint.h; this layer decodes addresses and socket options and
// owns the endpoint for the life of the file.
#ifndef SANDBOXD_SENTRY_SOCKET_UNIX_SOCKET_H_
#define SANDBOXD_SENTRY_SOCKET_UNIX_SOCKET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sentry/socket/socket.h"
#include "sentry/socket/unix_endpoint.h"

namespace sandboxd::state {
struct SocketState;
}  // namespace sandboxd::state

namespace sandboxd::socket {

// An EventSource: epoll can watch it. Waiters a datagram socket registers
// on its peer's peer_wait_ are removed by UnixEndpoint::Close when the file
// is released, so only the endpoint's own queue can still hold them after.
class UnixSocket : public Socket, public waiter::EventSource {
 public:
  // socket(AF_UNIX, type, protocol): type without SOCK_NONBLOCK/CLOEXEC.
  // -ESOCKTNOSUPPORT / -EPROTONOSUPPORT as Linux. `creator` is used for
  // data written with write(2), whose IoContext names no process.
  static int64_t New(UnixNamespace* ns, int type, int protocol,
                     bool nonblocking, const Credentials& creator,
                     std::shared_ptr<UnixSocket>* out);
  static int64_t NewPair(UnixNamespace* ns, int type, int protocol,
                         bool nonblocking, const Credentials& creator,
                         std::shared_ptr<UnixSocket>* a,
                         std::shared_ptr<UnixSocket>* b);

  UnixSocket(UnixNamespace* ns, std::shared_ptr<UnixEndpoint> ep,
             bool nonblocking, const Credentials& creator);
  // The last reference to the open file: the socket is released.
  ~UnixSocket() override;

  UnixEndpoint& endpoint() { return *ep_; }

  // fs::File
  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const fs::IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const fs::IoContext& io) override;
  int64_t Seek(int64_t offset, int whence) override { return -ESPIPE; }
  int64_t Stat(struct stat* st) override;
  int64_t Ioctl(uint64_t request, void* buf) override;
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  waiter::EventMask Readiness(waiter::EventMask mask) override {
    return ep_->Readiness(mask);
  }
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override {
    ep_->EventRegister(w, mask);
  }
  void EventUnregister(waiter::Waiter* w) override { ep_->EventUnregister(w); }
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return ep_->queue(); }

  // Socket
  int family() const override { return AF_UNIX; }
  int type() const override { return ep_->type(); }
  // Linux reports 0 whatever socket(2) was given (0 or PF_UNIX).
  int protocol() const override { return 0; }
  int64_t Bind(const SocketContext& ctx, const std::string& addr) override;
  int64_t Listen(const SocketContext& ctx, int backlog) override;
  int64_t Accept(const SocketContext& ctx, bool new_nonblocking,
                 std::shared_ptr<Socket>* out, std::string* peer) override;
  int64_t Connect(const SocketContext& ctx, const std::string& addr) override;
  int64_t GetSockName(std::string* addr) override;
  int64_t GetPeerName(std::string* addr) override;
  int64_t Shutdown(int how) override { return ep_->Shutdown(how); }
  int64_t GetSockOpt(const SocketContext& ctx, int level, int name,
                     std::vector<uint8_t>* val) override;
  int64_t SetSockOpt(const SocketContext& ctx, int level, int name,
                     const std::vector<uint8_t>& val) override;
  int64_t SendMsg(const SocketContext& ctx, SendRequest& req,
                  bool* raise_sigpipe) override;
  int64_t RecvMsg(const SocketContext& ctx, RecvRequest& req) override;

 private:
  friend struct ::sandboxd::state::SocketState;  // checkpoint save and load
  // The caller's context with this socket's namespace.
  SocketContext WithNamespace(const SocketContext& ctx) const {
    SocketContext c = ctx;
    c.unix_ns = ns_;
    return c;
  }
  bool nonblocking() const { return nonblock_.load(std::memory_order_relaxed); }

  UnixNamespace* const ns_;
  const std::shared_ptr<UnixEndpoint> ep_;
  const Credentials creator_;
  const uint64_t ino_;
  std::atomic<bool> nonblock_;
  // SO_REUSEADDR: stored and reported; AF_UNIX ignores it, as Linux does.
  std::atomic<bool> reuseaddr_{false};
};

}  // namespace sandboxd::socket

#endif  // SANDBOXD_SENTRY_SOCKET_UNIX_SOCKET_H_
