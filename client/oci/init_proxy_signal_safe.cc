// Runs in the child between fork and exec: system calls only, no
// allocation, no locks.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

#include "client/oci/init_proxy.h"

namespace sandboxd::oci {
namespace {

void Put(int fd, const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

[[noreturn]] void Fail(const InitPlan& p, const char* what, int err) {
  Put(p.report, what);
  Put(p.report, ": ");
  Put(p.report, strerror(err));
  _exit(125);
}

}  // namespace

void RunInitChild(const InitPlan& p) {
  // No signal blocked (`run` blocks those it forwards): the init proxy and
  // the Sentry it spawns start as under runc's shim.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int i = 0; i < p.n_cgroup_procs; i++) {
    if (write(p.cgroup_procs[i], "0", 1) != 1) Fail(p, "joining linux.cgroupsPath", errno);
  }
  // Its own session: the shim's signals to the runtime's group do not
  // reach it, and a pty can become its controlling terminal.
  if (setsid() < 0) Fail(p, "setsid", errno);
  if (p.console >= 0) {
    // `sentry run` makes the host terminal its sandbox's console and needs
    // it as its controlling terminal; a served Sentry relays it into a
    // terminal of its own devpts, and as a background group of a
    // controlling terminal its tcsetattr would stop it (SIGTTOU).
    if (p.wait_fifo && ioctl(p.console, TIOCSCTTY, 0) != 0) Fail(p, "TIOCSCTTY", errno);
    for (int fd = 0; fd < 3; fd++) {
      if (dup2(p.console, fd) < 0) Fail(p, "dup2 of the console", errno);
    }
    if (p.console > 2) close(p.console);
  }
  if (p.netns >= 0 && setns(p.netns, CLONE_NEWNET) != 0) {
    Fail(p, "joining linux.namespaces' network path (setns)", errno);
  }
  for (int i = 0; i < p.n_rlimits; i++) {
    if (setrlimit(p.rlimit_resources[i], &p.rlimits[i]) != 0) {
      Fail(p, "setting process.rlimits (setrlimit)", errno);
    }
  }
  if (!p.wait_fifo) {
    if (fcntl(p.report, F_SETFD, 0) != 0) Fail(p, "fcntl", errno);
    execve(p.exe, p.argv, p.envp);
    Fail(p, "exec of the init proxy", errno);
  }
  // Everything that can fail at create has been done: EOF tells `create`.
  close(p.report);
  int fd;
  while ((fd = open(p.fifo, O_WRONLY | O_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (fd < 0) _exit(125);
  const char go = '0';
  if (write(fd, &go, 1) != 1) _exit(125);
  close(fd);
  execve(p.exe, p.argv, p.envp);
  Put(2, "sandboxd-oci: exec of the sentry failed: ");
  Put(2, strerror(errno));
  Put(2, "\n");
  _exit(127);
}

void RunExecChild(const char* exe, char* const* argv, char* const* envp,
                  int keep) {
  setsid();
  if (fcntl(keep, F_SETFD, 0) != 0) _exit(125);
  execve(exe, argv, envp);
  _exit(125);
}

}  // namespace sandboxd::oci
