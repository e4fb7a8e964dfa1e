#include "daemon/spawn_signal_safe.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace sandboxd {
namespace daemon {

void RunSpawnChild(const SpawnChildArgs& a) {
  setpgid(0, 0);
  // The daemon ignores SIGPIPE and its threads may block signals; the
  // Sentry starts from the defaults.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  char go;
  ssize_t r;
  do {
    r = read(a.sync_fd, &go, 1);
  } while (r < 0 && errno == EINTR);
  if (r != 1) _exit(127);  // the parent gave up on this child

  if (a.stdin_fd >= 0 && dup2(a.stdin_fd, 0) < 0) _exit(127);
  if (a.control_fd == 3) {
    if (fcntl(3, F_SETFD, 0) < 0) _exit(127);
  } else if (dup2(a.control_fd, 3) < 0) {
    _exit(127);
  }
  execve(a.path, a.argv, a.envp);
  _exit(127);
}

}  // namespace daemon
}  // namespace sandboxd
