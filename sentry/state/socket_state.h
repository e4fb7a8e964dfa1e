// Save and load of AF_UNIX sockets: the socket files (State.files), their
// endpoints (State.unix_endpoints: state, peer, names, queued messages with
// their boundaries, credentials and files in flight, accept queues,
// options) and the senders' buffers their messages are charged to.
//
// As FsState, one struct of static functions befriended by the classes
// whose state is private (socket::UnixEndpoint, socket::UnixSocket); FsState
// calls it for the files it meets. Endpoints are shared (a connected pair
// names each other; a listener holds connections not accepted yet; a
// message holds the files it carries), so each is saved once and
// referenced by id.
//
// hostinet sockets (socket::HostSocket) are saved as what they are made
// into again at load (SaveHostSocket).
//
// At load, names go into the Loader's UnixNamespace (the Sentry's): an
// abstract name is bound again, a path binding binds its loaded socket
// inode. Not saved: waiters (a blocked call restarts; pollers register
// again), the namespace's autobind counter.
#ifndef SANDBOXD_SENTRY_STATE_SOCKET_STATE_H_
#define SANDBOXD_SENTRY_STATE_SOCKET_STATE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sentry/fs/file.h"
#include "sentry/fs/vfs.h"
#include "sentry/socket/host_socket.h"
#include "sentry/socket/unix_endpoint.h"
#include "sentry/socket/unix_socket.h"
#include "sentry/state/loader.h"
#include "sentry/state/saver.h"

namespace sandboxd::state {

struct SocketState {
  // The record of a UnixSocket file (FsState::SaveFile's, for sockets).
  static absl::Status SaveUnixSocket(Saver& s, const fs::Vfs& vfs,
                                     socket::UnixSocket& sock,
                                     pb::UnixSocketFile* r);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadUnixSocket(
      Loader& l, fs::Vfs& vfs, const pb::UnixSocketFile& r);
  // A hostinet socket: what it is made into again at load (its connection
  // is the host's and is not saved): a listener listens again on its
  // address, a bound socket is bound again (a connected UDP socket
  // connected again), a TCP socket that had a connection is reset, the
  // rest (and every NETLINK_ROUTE socket) is a new socket. Options of
  // kSavedOptions and the timeouts come back.
  static absl::Status SaveHostSocket(socket::HostSocket& sock,
                                     pb::HostSocketFile* r);
  static absl::StatusOr<std::shared_ptr<fs::File>> LoadHostSocket(
      const pb::HostSocketFile& r);

 private:
  static absl::StatusOr<uint64_t> SaveEndpoint(
      Saver& s, const fs::Vfs& vfs,
      const std::shared_ptr<socket::UnixEndpoint>& ep);
  static absl::StatusOr<uint64_t> SaveSendBuffer(
      Saver& s, const std::shared_ptr<socket::SendBuffer>& b);
  static absl::StatusOr<std::shared_ptr<socket::UnixEndpoint>> LoadEndpoint(
      Loader& l, fs::Vfs& vfs, uint64_t id);
  static absl::StatusOr<std::shared_ptr<socket::SendBuffer>> LoadSendBuffer(
      Loader& l, fs::Vfs& vfs, uint64_t id);
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_SOCKET_STATE_H_
