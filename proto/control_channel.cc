#include "proto/control_channel.h"

#include <errno.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace sandboxd::control {
namespace {

absl::Status Errno(const char* what, int err) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat("control channel: ", what, ": ", strerror(err)));
}

}  // namespace

absl::StatusOr<std::pair<Channel, Channel>> Channel::Pair() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return Errno("socketpair", errno);
  }
  return std::make_pair(Channel(UniqueFd(sv[0])), Channel(UniqueFd(sv[1])));
}

absl::Status Channel::Send(const google::protobuf::MessageLite& m,
                           absl::Span<const int> fds) {
  if (fds.size() > kMaxFds) {
    return absl::InvalidArgumentError(
        absl::StrCat("control channel: ", fds.size(), " fds in one message (at most ",
                     kMaxFds, ")"));
  }
  std::string buf(4, '\0');
  if (!m.AppendToString(&buf)) {
    return absl::InvalidArgumentError("control channel: cannot serialize message");
  }
  const size_t len = buf.size() - 4;
  if (len > kMaxMessageBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("control channel: message of ", len, " bytes is too large"));
  }
  for (int i = 0; i < 4; i++) buf[i] = static_cast<char>((len >> (8 * i)) & 0xff);

  const size_t first = std::min(buf.size(), kMaxPacketBytes);
  iovec iov{buf.data(), first};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    const size_t n = sizeof(int) * fds.size();
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(n);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n);
    memcpy(CMSG_DATA(c), fds.data(), n);
  }
  absl::MutexLock l(&send_mu_);
  // The first packet carries the header and the fds, the others the rest.
  for (size_t off = 0; off < buf.size();) {
    iov.iov_base = buf.data() + off;
    iov.iov_len = std::min(buf.size() - off, kMaxPacketBytes);
    ssize_t r = sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) {
      pollfd p{fd_.get(), POLLOUT, 0};
      poll(&p, 1, -1);
      continue;
    }
    if (r < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return absl::UnavailableError("control channel: peer closed");
    }
    if (r < 0) return Errno("sendmsg", errno);
    off += iov.iov_len;
    msg.msg_control = nullptr;
    msg.msg_controllen = 0;
  }
  return absl::OkStatus();
}

absl::Status Channel::Receive(google::protobuf::MessageLite* m,
                              std::vector<UniqueFd>* fds) {
  // The packet's size first (MSG_PEEK|MSG_TRUNC gives the whole length of
  // a unix seqpacket), so that the buffer is as large as this message and
  // not as large as the largest one. A packet larger than any valid message
  // is read into a buffer one byte short of it and reported as truncated.
  ssize_t size;
  do {
    size = recv(fd_.get(), nullptr, 0, MSG_PEEK | MSG_TRUNC);
  } while (size < 0 && errno == EINTR);
  if (size < 0) {
    if (errno == ECONNRESET) return absl::UnavailableError("control channel: peer closed");
    return Errno("recv", errno);
  }
  if (size == 0) return absl::UnavailableError("control channel: peer closed");
  std::string buf(std::min<size_t>(size, kMaxPacketBytes), '\0');
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r;
  do {
    r = recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    if (errno == ECONNRESET) return absl::UnavailableError("control channel: peer closed");
    return Errno("recvmsg", errno);
  }

  // Take ownership of every descriptor first, so that none leaks whatever
  // is wrong with the rest of the packet.
  std::vector<UniqueFd> got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      got.emplace_back(fd);
    }
  }
  if (r == 0) return absl::UnavailableError("control channel: peer closed");
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    return absl::DataLossError("control channel: packet or its fds truncated");
  }
  if (r < 4) return absl::DataLossError("control channel: packet shorter than its header");
  uint32_t len = 0;
  for (int i = 0; i < 4; i++) len |= static_cast<uint32_t>(static_cast<uint8_t>(buf[i])) << (8 * i);
  if (len > kMaxMessageBytes) {
    return absl::DataLossError(absl::StrCat(
        "control channel: header says ", len, " bytes, more than any message"));
  }
  const size_t want = 4 + static_cast<size_t>(len);
  // A message in one packet fills it; a larger one fills every packet but
  // its last.
  if (want <= kMaxPacketBytes ? static_cast<size_t>(r) != want
                              : static_cast<size_t>(r) != kMaxPacketBytes) {
    return absl::DataLossError(absl::StrCat("control channel: header says ", len,
                                            " bytes, packet has ", r - 4));
  }
  buf.resize(want);
  for (size_t have = static_cast<size_t>(r); have < want;) {
    ssize_t c = recv(fd_.get(), buf.data() + have,
                     std::min(want - have, kMaxPacketBytes), 0);
    if (c < 0 && errno == EINTR) continue;
    if (c < 0 && errno == EAGAIN) {
      pollfd p{fd_.get(), POLLIN, 0};
      poll(&p, 1, -1);
      continue;
    }
    if (c < 0) return Errno("recv", errno);
    if (c == 0) return absl::UnavailableError("control channel: peer closed");
    have += static_cast<size_t>(c);
  }
  if (!m->ParseFromArray(buf.data() + 4, static_cast<int>(len))) {
    return absl::DataLossError("control channel: unparsable message");
  }
  if (fds != nullptr) {
    for (UniqueFd& f : got) fds->push_back(std::move(f));
  }
  return absl::OkStatus();
}

}  // namespace sandboxd::control
