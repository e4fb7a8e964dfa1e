// pasta's child side of fork(): runs between fork and exec, possibly in a
// multi-threaded daemon, so only async-signal-safe calls (no allocation,
// no locks). Everything it needs is prepared before fork.
#include "sentry/socket/sandbox_net_signal_safe.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace sandboxd::sandbox_net {

[[noreturn]] void RunPastaChild(const PastaChildArgs& a) {
  // The daemon blocks signals in its threads; pasta starts with none
  // blocked and default dispositions.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
  if (dup2(a.stdin_fd, 0) < 0 || dup2(a.stderr_fd, 1) < 0 ||
      dup2(a.stderr_fd, 2) < 0) {
    _exit(127);
  }
  // The namespaces and the pid file are named /proc/self/fd/N on pasta's
  // command line: they must survive the exec.
  for (int fd : a.keep_fds) {
    if (fd >= 0 && fcntl(fd, F_SETFD, 0) != 0) _exit(127);
  }
  execv(a.path, a.argv);
  _exit(127);
}

}  // namespace sandboxd::sandbox_net
