// Sockets: the family-neutral interface the socket syscalls call.
//
// A Socket is a File (read, write, poll, fstat, close work on it like on
// any descriptor) with the socket operations added. The syscall layer
// (sentry/syscalls/sys_socket.cc) decodes application memory into the
// plain values below and encodes results back; a socket family never sees
// a Task. AF_UNIX is unix_socket.h; host-backed AF_INET comes later
// behind the same interface.
#ifndef SANDBOXD_SENTRY_SOCKET_SOCKET_H_
#define SANDBOXD_SENTRY_SOCKET_SOCKET_H_

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "sentry/fs/file.h"
#include "sentry/fs/vfs.h"

namespace sandboxd::socket {

class UnixNamespace;

// Process credentials as SCM_CREDENTIALS and SO_PEERCRED carry them.
struct Credentials {
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool operator==(const Credentials& o) const {
    return pid == o.pid && uid == o.uid && gid == o.gid;
  }
  bool operator!=(const Credentials& o) const { return !(*this == o); }
};

// What a socket operation needs from the task calling it.
struct SocketContext {
  fs::IoContext io;      // blocking (io.blocker must be set)
  Credentials creds;     // the caller's, for SCM_CREDENTIALS and SO_PEERCRED
  // Path names (AF_UNIX bind and connect) resolve in this mount namespace
  // from this process's root and working directory.
  fs::Vfs* vfs = nullptr;
  const fs::FsContext* fs = nullptr;
  // The AF_UNIX names (abstract names, bound inodes) of the socket's
  // sandbox; the socket fills this in from its own (as Linux looks names
  // up in the socket's network namespace, not the caller's).
  UnixNamespace* unix_ns = nullptr;
};

// A sequence of bytes in application memory (or a Sentry buffer) that a
// send reads from or a receive writes to, consumed front to back. Sockets
// pull from it a piece at a time, so that a large send never needs a
// Sentry copy of the whole thing.
class IoSource {
 public:
  virtual ~IoSource() = default;
  virtual size_t remaining() const = 0;
  // Copies the next n bytes (n <= remaining()) into dst: n, or -EFAULT
  // when none could be read (a short count when part could).
  virtual int64_t Read(uint8_t* dst, size_t n) = 0;
};

class IoSink {
 public:
  virtual ~IoSink() = default;
  virtual size_t remaining() const = 0;
  // Copies n bytes (n <= remaining()) from src: n, a short count, or
  // -EFAULT when nothing could be written.
  virtual int64_t Write(const uint8_t* src, size_t n) = 0;
};

// A contiguous Sentry buffer as a source or sink (read(2)/write(2) and
// tests).
class BufferSource : public IoSource {
 public:
  BufferSource(const void* p, size_t n)
      : p_(static_cast<const uint8_t*>(p)), n_(n) {}
  size_t remaining() const override { return n_; }
  int64_t Read(uint8_t* dst, size_t n) override;

 private:
  const uint8_t* p_;
  size_t n_;
};

class BufferSink : public IoSink {
 public:
  BufferSink(void* p, size_t n) : p_(static_cast<uint8_t*>(p)), n_(n) {}
  size_t remaining() const override { return n_; }
  int64_t Write(const uint8_t* src, size_t n) override;
  size_t written() const { return written_; }

 private:
  uint8_t* p_;
  size_t n_;
  size_t written_ = 0;
};

// sendmsg(2), decoded. The socket reads the data from `data`.
struct SendRequest {
  IoSource* data = nullptr;
  int flags = 0;             // MSG_*
  std::string address;       // raw sockaddr bytes; empty: none given
  // SCM_RIGHTS, already looked up in the sender's descriptor table.
  std::vector<std::shared_ptr<fs::File>> rights;
  // SCM_CREDENTIALS, when the sender passed it.
  std::optional<Credentials> creds;
  // hostinet: the IPPROTO_IP/IPPROTO_IPV6 control messages for the host
  // (IP_PKTINFO, IPV6_HOPLIMIT, ...), checked by the syscall layer against
  // the list a HostSocket passes on, as a cmsg buffer.
  std::vector<uint8_t> control;
};

// recvmsg(2), decoded; the socket writes the data to `data` and fills in
// the rest.
struct RecvRequest {
  IoSink* data = nullptr;
  int flags = 0;             // MSG_* from the caller
  bool want_address = false; // msg_name given
  bool want_control = false; // recvmsg: control messages are wanted
  // Results.
  std::string address;       // the sender's sockaddr (raw bytes), may be empty
  int msg_flags = 0;         // MSG_TRUNC, ... (MSG_CTRUNC is the caller's)
  std::vector<std::shared_ptr<fs::File>> rights;
  std::optional<Credentials> creds;  // when SO_PASSCRED is on
  // hostinet: the control messages the host socket gave (the options that
  // enable them: IP_PKTINFO, SO_TIMESTAMP, IP_RECVERR, ...), as a cmsg
  // buffer; the syscall layer copies them out one by one.
  std::vector<uint8_t> control;
};

class Socket : public fs::File {
 public:
  // sock_fasync: POLL_IN when data or a connection arrives (and at EOF),
  // POLL_PRI for urgent data, POLL_ERR for an error. Linux's POLL_OUT
  // (only after a send found the buffer full) is not sent.
  waiter::EventMask AsyncEvents() override {
    return POLLIN | POLLRDNORM | POLLPRI | POLLERR;
  }
  virtual int family() const = 0;
  virtual int type() const = 0;      // SOCK_STREAM, SOCK_DGRAM, ...
  virtual int protocol() const = 0;

  // Each returns 0 (or a count) or -errno, as the syscalls do. Addresses
  // are raw sockaddr bytes as the application passed them or will see
  // them.
  virtual int64_t Bind(const SocketContext& ctx, const std::string& addr) = 0;
  virtual int64_t Listen(const SocketContext& ctx, int backlog) = 0;
  // Blocks (unless this socket is O_NONBLOCK) for a connection; the new
  // socket is O_NONBLOCK if `new_nonblocking`. *peer gets the connecting
  // socket's address.
  virtual int64_t Accept(const SocketContext& ctx, bool new_nonblocking,
                         std::shared_ptr<Socket>* out, std::string* peer) = 0;
  virtual int64_t Connect(const SocketContext& ctx,
                          const std::string& addr) = 0;
  virtual int64_t GetSockName(std::string* addr) = 0;
  virtual int64_t GetPeerName(std::string* addr) = 0;
  virtual int64_t Shutdown(int how) = 0;
  // `val` holds the caller's buffer size on entry (getsockopt copies at
  // most that much); the option's value on return.
  virtual int64_t GetSockOpt(const SocketContext& ctx, int level, int name,
                             std::vector<uint8_t>* val) = 0;
  virtual int64_t SetSockOpt(const SocketContext& ctx, int level, int name,
                             const std::vector<uint8_t>& val) = 0;
  // Bytes sent, or -errno. *raise_sigpipe is set when the failure is a
  // broken connection that Linux answers with SIGPIPE (not with
  // MSG_NOSIGNAL, not for every socket type).
  virtual int64_t SendMsg(const SocketContext& ctx, SendRequest& req,
                          bool* raise_sigpipe) = 0;
  virtual int64_t RecvMsg(const SocketContext& ctx, RecvRequest& req) = 0;
};

}  // namespace sandboxd::socket

#endif  // SANDBOXD_SENTRY_SOCKET_SOCKET_H_
