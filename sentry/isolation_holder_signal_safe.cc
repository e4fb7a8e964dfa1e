// Runs in a forked child: system calls only, no allocation, no locks.
#include <errno.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sentry/isolation_holder.h"

namespace sandboxd::isolation {

void RunHolder(int fd) {
  // Dies with the Sentry; had it died before this line, the socket below
  // reads EOF.
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // Nothing of the Sentry's but the socket (and stderr, for a crash).
  if (fd != 3) {
    if (dup2(fd, 3) < 0) _exit(1);
    fd = 3;
  }
  syscall(SYS_close_range, 0, 1, 0);
  syscall(SYS_close_range, 4, ~0U, 0);
  char name[kMaxHostname];
  for (;;) {
    ssize_t n = recv(fd, name, sizeof(name), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the Sentry is gone
    int err = sethostname(name, static_cast<size_t>(n)) == 0 ? 0 : errno;
    send(fd, &err, sizeof(err), MSG_NOSIGNAL);
  }
}

}  // namespace sandboxd::isolation
