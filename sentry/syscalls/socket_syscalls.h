// readv/writev on sockets, which sys_file.cc's readv/writev hand over to
// sys_socket.cc.
#ifndef SANDBOXD_SENTRY_SYSCALLS_SOCKET_SYSCALLS_H_
#define SANDBOXD_SENTRY_SYSCALLS_SOCKET_SYSCALLS_H_

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "sentry/socket/socket.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {

// readv (write false) or writev (write true) of `iov` on `s`: one receive
// or send of all the vectors, as Linux's sock_read_iter/sock_write_iter,
// so that a writev is one datagram (and on TCP one send: one segment when
// it fits) and a readv takes one datagram across its vectors.
int64_t SocketVectorIo(Task& t, socket::Socket& s, std::vector<iovec> iov,
                       bool write);

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_SOCKET_SYSCALLS_H_
