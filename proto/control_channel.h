// One end of the control channel between sandboxd and a Sentry
// (proto/control.proto): a SOCK_SEQPACKET socket carrying messages framed
// as a 4-byte little-endian length and that many bytes of a serialized
// protobuf, with file descriptors in the first packet (SCM_RIGHTS). A
// message larger than one packet (kMaxPacketBytes) continues in packets
// of its bytes alone, sent back to back under the sender's lock. Both
// ends use this class.
#ifndef SANDBOXD_PROTO_CONTROL_CHANNEL_H_
#define SANDBOXD_PROTO_CONTROL_CHANNEL_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/unique_fd.h"
#include "google/protobuf/message_lite.h"

namespace sandboxd::control {

// Largest message either side sends: a spec with what execve accepts in
// argv and environment (2 MiB of strings and pointers) fits with room.
inline constexpr size_t kMaxMessageBytes = 8 << 20;
// Largest packet: one fits in a unix socket's default send buffer
// (wmem_default, 208 KiB).
inline constexpr size_t kMaxPacketBytes = 128 << 10;
// Most descriptors in one message (Start: rootfs + three stdio fds). A
// request that can have more to hand back asks in pieces: Reattach's
// response carries as many Exec'd processes' kept output as fit, and the
// daemon asks again for the rest (control.proto).
inline constexpr size_t kMaxFds = 64;

class Channel {
 public:
  explicit Channel(UniqueFd fd) : fd_(std::move(fd)) {}
  Channel(Channel&& o) noexcept : fd_(std::move(o.fd_)) {}

  // A connected pair (close-on-exec), for the daemon to keep one end and
  // hand the other to the Sentry it spawns.
  static absl::StatusOr<std::pair<Channel, Channel>> Pair();

  // Sends `m` and `fds` (which stay owned by the caller) in one packet.
  // Safe to call from several threads: packets never interleave.
  absl::Status Send(const google::protobuf::MessageLite& m,
                    absl::Span<const int> fds = {}) ABSL_LOCKS_EXCLUDED(send_mu_);

  // Receives one packet into `m`; descriptors that came with it are
  // appended to `fds` (close-on-exec), or closed when `fds` is null.
  // UnavailableError when the peer has closed its end; DataLossError for a
  // malformed packet (truncated, bad length, unparsable). One receiver at a
  // time.
  absl::Status Receive(google::protobuf::MessageLite* m,
                       std::vector<UniqueFd>* fds = nullptr);

  int fd() const { return fd_.get(); }
  UniqueFd release_fd() { return std::move(fd_); }

 private:
  UniqueFd fd_;
  // Held around sendmsg(2) on fd_, so that the packets of several senders
  // go out one after the other. It guards no field: fd_ changes only in
  // the move constructor and release_fd, which no sender overlaps.
  absl::Mutex send_mu_;
};

}  // namespace sandboxd::control

#endif  // SANDBOXD_PROTO_CONTROL_CHANNEL_H_
