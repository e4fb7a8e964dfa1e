// hostinet: AF_INET and AF_INET6 sockets (and NETLINK_ROUTE) served by host
// sockets that the Sentry owns in the sandbox's own network namespace.
//
// The host socket is always O_NONBLOCK on the host: a HostSocket never
// makes a host call that blocks. What would block waits in the Sentry, in a
// host poll of the socket together with the task's interrupt eventfd (as
// fs::HostFile does), so a signal or a group exit interrupts it, and
// SO_RCVTIMEO/SO_SNDTIMEO are deadlines of that wait. poll, select and
// epoll see the socket's readiness through the Sentry's HostPoller, which
// watches the host fd while some waiter is registered.
//
// Data goes through a Sentry buffer: a send copies a piece of the
// application's memory in and hands it to the host; a receive takes what
// the host has and copies it out. Options are on an allow-list
// (SetSockOpt/GetSockOpt); the rest fail with ENOPROTOOPT.
//
// NETLINK_ROUTE sockets pass only requests that read (RTM_GET* with
// NLM_F_REQUEST) to the host; anything that would change the namespace is
// refused with EPERM before it reaches the host (the Sentry holds no
// capability there anyway).
#ifndef SANDBOXD_SENTRY_SOCKET_HOST_SOCKET_H_
#define SANDBOXD_SENTRY_SOCKET_HOST_SOCKET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "sentry/socket/socket.h"
#include "sentry/waiter/event_source.h"

namespace sandboxd::state {
struct SocketState;
}  // namespace sandboxd::state

namespace sandboxd::socket {

// The interface ioctls sockets answer, read-only SIOCGIF* requests on a
// struct ifreq, answered by the host in the sandbox's network namespace:
// SIOCGIFINDEX, SIOCGIFNAME, SIOCGIFFLAGS, SIOCGIFMTU, SIOCGIFHWADDR,
// SIOCGIFMETRIC, SIOCGIFTXQLEN for every family (Linux's sock_ioctl hands
// them to dev_ioctl), and the IPv4 ones SIOCGIFADDR, SIOCGIFNETMASK,
// SIOCGIFBRDADDR, SIOCGIFDSTADDR on AF_INET sockets only (inet_ioctl;
// ENOTTY on other families, as Linux). -ENOTTY for other requests.
bool IsInterfaceIoctl(uint64_t request);
int64_t InterfaceIoctl(int family, uint64_t request, void* ifreq);
// SIOCGIFCONF (Linux's dev_ifconf, also for every family): the namespace's
// IPv4 addresses as struct ifreq entries written into `buf` (`len` bytes;
// only whole entries), or, when `buf` is null, the bytes all of them need.
// The byte count written or needed, or -errno.
int64_t InterfaceConf(void* buf, int len);

// Whether a sendmsg control message of `level`/`type` on an AF_INET or
// AF_INET6 socket is passed on to the host (SendRequest::control):
// IP_PKTINFO, IP_TTL, IP_TOS; IPV6_PKTINFO, IPV6_HOPLIMIT, IPV6_TCLASS,
// IPV6_DONTFRAG (AF_INET6 only; an AF_INET6 socket takes the IP ones too,
// as Linux's udpv6 for a v4-mapped destination).
bool PassesControl(int family, int level, int type);

class HostSocket : public Socket, public waiter::EventSource {
 public:
  // socket(2) for the families hostinet serves: AF_INET and AF_INET6
  // (SOCK_STREAM, SOCK_DGRAM: UDP, and ICMP echo with IPPROTO_ICMP or
  // IPPROTO_ICMPV6 where the namespace's ping_group_range allows), AF_NETLINK with NETLINK_ROUTE (SOCK_RAW,
  // SOCK_DGRAM). -errno as socket(2) for the rest of those families.
  static int64_t New(int family, int type, int protocol, bool nonblock,
                     std::shared_ptr<HostSocket>* out);
  // Whether New serves `family` at all.
  static bool Serves(int family);
  // A TCP socket of `family` (AF_INET, AF_INET6) whose connection was
  // reset, as a restored connection is (sentry/state/README.md): the host
  // socket connects to a listener of its own on the namespace's loopback,
  // whose side then closes with SO_LINGER 0. Its first read or write
  // fails with ECONNRESET, later reads give 0 and writes EPIPE; poll sees
  // POLLERR|POLLHUP. -errno if the namespace's loopback cannot do that.
  static int64_t NewReset(int family, int protocol, bool nonblock,
                          std::shared_ptr<HostSocket>* out);

  ~HostSocket() override;

  // File.
  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const fs::IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const fs::IoContext& io) override;
  int64_t Seek(int64_t offset, int whence) override { return -ESPIPE; }
  int64_t Stat(struct stat* st) override;
  // FIONREAD (SIOCINQ), SIOCOUTQ, SIOCATMARK, SIOCGSTAMP(NS) and the
  // interface requests, answered by the host socket.
  int64_t Ioctl(uint64_t request, void* buf) override;
  int StatusFlags() const override;
  int64_t SetStatusFlags(int flags) override;
  // A zero-timeout host poll.
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override;
  void EventUnregister(waiter::Waiter* w) override;
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return queue_; }

  // Socket.
  int family() const override { return family_; }
  int type() const override { return type_; }
  int protocol() const override { return protocol_; }
  int64_t Bind(const SocketContext& ctx, const std::string& addr) override;
  int64_t Listen(const SocketContext& ctx, int backlog) override;
  int64_t Accept(const SocketContext& ctx, bool new_nonblocking,
                 std::shared_ptr<Socket>* out, std::string* peer) override;
  int64_t Connect(const SocketContext& ctx, const std::string& addr) override;
  int64_t GetSockName(std::string* addr) override;
  int64_t GetPeerName(std::string* addr) override;
  int64_t Shutdown(int how) override;
  int64_t GetSockOpt(const SocketContext& ctx, int level, int name,
                     std::vector<uint8_t>* val) override;
  int64_t SetSockOpt(const SocketContext& ctx, int level, int name,
                     const std::vector<uint8_t>& val) override;
  int64_t SendMsg(const SocketContext& ctx, SendRequest& req,
                  bool* raise_sigpipe) override;
  int64_t RecvMsg(const SocketContext& ctx, RecvRequest& req) override;

  // For a checkpoint's refusal: "AF_INET SOCK_STREAM socket bound to
  // 127.0.0.1:8080", from the host socket's own names.
  std::string Describe();

 private:
  friend struct ::sandboxd::state::SocketState;  // checkpoint save and load

  HostSocket(UniqueFd fd, int family, int type, int protocol, bool nonblock);

  // Waits until the host socket has one of `events` (or an error or a
  // hang-up), the task is interrupted (-EINTR) or `timeout` passes
  // (-EAGAIN). Preconditions: the caller may block.
  int64_t WaitFor(short events, const fs::IoContext& io,
                  absl::Duration timeout);
  int64_t SendStream(const SocketContext& ctx, SendRequest& req, bool block,
                     const struct sockaddr* to, socklen_t tolen);
  int64_t SendDgram(const SocketContext& ctx, SendRequest& req, bool block,
                    const struct sockaddr* to, socklen_t tolen);
  // One non-blocking host send: sendto, or sendmsg with the request's
  // control messages.
  ssize_t HostSend(const SendRequest& req, const void* p, size_t n,
                   int flags, const struct sockaddr* to, socklen_t tolen);
  // NETLINK_ROUTE: the messages of a send, checked to be requests that
  // only read.
  static bool NetlinkReadOnly(const uint8_t* p, size_t n);

  const UniqueFd fd_;
  const int family_;
  const int type_;
  const int protocol_;
  const uint64_t ino_;
  std::atomic<bool> nonblock_;
  // Set once connect(2) started a connection (returned 0, EINPROGRESS or
  // was interrupted) or accept(2) made the socket: a restore resets it.
  std::atomic<bool> connected_{false};
  // listen(2)'s backlog: a restored listener listens with it again.
  std::atomic<int> backlog_{0};
  // SO_RCVTIMEO, SO_SNDTIMEO: kept here, since the host socket never
  // blocks. InfiniteDuration: none.
  absl::Mutex mu_;
  absl::Duration rcvtimeo_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();
  absl::Duration sndtimeo_ ABSL_GUARDED_BY(mu_) = absl::InfiniteDuration();

  const std::shared_ptr<waiter::WaitQueue> queue_ =
      std::make_shared<waiter::WaitQueue>();
  absl::Mutex watch_mu_;
  // HostPoller handle while some waiter is registered; 0 otherwise.
  uint64_t watch_handle_ ABSL_GUARDED_BY(watch_mu_) = 0;
};

}  // namespace sandboxd::socket

#endif  // SANDBOXD_SENTRY_SOCKET_HOST_SOCKET_H_
