#include "daemon/spawn_signal_safe.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sandboxd {
namespace daemon {
namespace {

// Closes every descriptor but 0-2 and the ones the child still needs.
// The child may wait a while for its go and its exec (a pool refill runs
// at the lowest priority), and the copies it got of the daemon's other
// descriptors must not live that long: a sandbox's output pipe, say,
// would not reach its end until this child had exec'd.
void CloseOthers(const SpawnChildArgs& a) {
  int keep[4] = {a.stdin_fd, a.control_fd, a.sync_fd, a.netns_fd};
  for (int i = 0; i < 4; i++) {
    for (int j = i + 1; j < 4; j++) {
      if (keep[j] < keep[i]) {
        const int t = keep[i];
        keep[i] = keep[j];
        keep[j] = t;
      }
    }
  }
  unsigned int next = 3;
  for (int k : keep) {
    if (k < static_cast<int>(next)) continue;
    if (static_cast<unsigned int>(k) > next) syscall(SYS_close_range, next, k - 1, 0);
    next = static_cast<unsigned int>(k) + 1;
  }
  syscall(SYS_close_range, next, ~0u, 0);
}

}  // namespace

void RunSpawnChild(const SpawnChildArgs& a) {
  CloseOthers(a);
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

  if (a.netns_fd >= 0 && setns(a.netns_fd, CLONE_NEWNET) != 0) _exit(kSpawnSetnsFailed);
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
