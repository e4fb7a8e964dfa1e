/* Processes: fork, exit statuses through wait4/waitpid/waitid, signals
 * killing children, execve with argv/envp, getppid relations, process
 * groups and sessions, WNOHANG, SIGCHLD, vfork and posix_spawn, orphans
 * reparented away from their dead parent. Never prints a pid. */
#define _GNU_SOURCE
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

extern char **environ;
static volatile sig_atomic_t got_chld;
static void on_chld(int sig) { (void)sig; got_chld++; }

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "child-exec") == 0) {
    /* Re-executed: report what we got through the exit status. */
    const char *v = getenv("SBX_EXEC_VAR");
    int ok = argc == 4 && strcmp(argv[2], "a b") == 0 &&
             strcmp(argv[3], "c") == 0 && v != NULL && strcmp(v, "yes") == 0;
    _exit(ok ? 42 : 1);
  }

  /* 1. fork + exit code. */
  pid_t me = getpid();
  pid_t c = fork();
  if (c == 0) _exit(getppid() == me ? 7 : 99);
  int st = 0;
  CHECK("fork returns a pid", c > 0);
  CHECK("waitpid returns the child", waitpid(c, &st, 0) == c);
  CHECK("child saw its parent in getppid", WIFEXITED(st) && WEXITSTATUS(st) == 7);
  CHECK("no more children: ECHILD", waitpid(-1, &st, 0) == -1 && errno == ECHILD);

  /* 2. killed by a signal. */
  c = fork();
  if (c == 0) {
    raise(SIGTERM);
    _exit(0);
  }
  waitpid(c, &st, 0);
  CHECK("child killed by SIGTERM", WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
  c = fork();
  if (c == 0) {
    for (;;) pause();
  }
  kill(c, SIGKILL);
  waitpid(c, &st, 0);
  CHECK("kill(child, SIGKILL)", WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

  /* 3. memory is copied, not shared. */
  static int shared_value = 1;
  c = fork();
  if (c == 0) {
    shared_value = 2;
    _exit(shared_value);
  }
  waitpid(c, &st, 0);
  CHECK("child's writes are its own", WEXITSTATUS(st) == 2 && shared_value == 1);

  /* 4. execve with argv and envp. */
  c = fork();
  if (c == 0) {
    char *args[] = {argv[0], "child-exec", "a b", "c", NULL};
    char *envs[] = {"SBX_EXEC_VAR=yes", NULL};
    execve("/proc/self/exe", args, envs);
    execve(argv[0], args, envs);
    _exit(3);
  }
  waitpid(c, &st, 0);
  CHECK("execve passed argv and envp", WIFEXITED(st) && WEXITSTATUS(st) == 42);
  CHECK("execve of a missing file: ENOENT",
        execve("/nonexistent/prog", argv, environ) == -1 && errno == ENOENT);

  /* 5. WNOHANG and waitid. */
  int fds[2];
  c = fork();
  if (c == 0) {
    usleep(100000);
    _exit(5);
  }
  CHECK("WNOHANG with a running child returns 0", waitpid(c, &st, WNOHANG) == 0);
  siginfo_t si;
  memset(&si, 0, sizeof si);
  CHECK("waitid(P_PID, WEXITED)", waitid(P_PID, c, &si, WEXITED) == 0);
  CHECK("waitid siginfo", si.si_signo == SIGCHLD && si.si_code == CLD_EXITED &&
                              si.si_status == 5 && si.si_pid == c);
  (void)fds;

  /* 6. SIGCHLD handler. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_chld;
  sigaction(SIGCHLD, &sa, NULL);
  c = fork();
  if (c == 0) _exit(0);
  waitpid(c, &st, 0);
  for (int i = 0; i < 100 && !got_chld; i++) usleep(1000);
  CHECK("SIGCHLD delivered", got_chld >= 1);
  signal(SIGCHLD, SIG_DFL);

  /* 7. Process groups and sessions. */
  c = fork();
  if (c == 0) {
    int ok = setpgid(0, 0) == 0 && getpgrp() == getpid();
    pid_t s = setsid();
    ok = ok && s == -1 && errno == EPERM; /* already a group leader */
    _exit(ok ? 0 : 1);
  }
  waitpid(c, &st, 0);
  CHECK("setpgid(0,0) makes a group; setsid then fails", WEXITSTATUS(st) == 0);
  c = fork();
  if (c == 0) {
    pid_t s = setsid();
    int ok = s == getpid() && getsid(0) == getpid() && getpgrp() == getpid();
    _exit(ok ? 0 : 1);
  }
  waitpid(c, &st, 0);
  CHECK("setsid in a child", WEXITSTATUS(st) == 0);
  CHECK("getpgid(0) == getpgrp()", getpgid(0) == getpgrp());
  CHECK("getpgid of a missing pid: ESRCH", getpgid(999999) == -1 && errno == ESRCH);

  /* 8. vfork and posix_spawn. */
  c = vfork();
  if (c == 0) _exit(9);
  waitpid(c, &st, 0);
  CHECK("vfork child exit", WEXITSTATUS(st) == 9);
  char *sargs[] = {argv[0], "child-exec", "a b", "c", NULL};
  char *senv[] = {"SBX_EXEC_VAR=yes", NULL};
  pid_t sp;
  CHECK("posix_spawn", posix_spawn(&sp, argv[0], NULL, NULL, sargs, senv) == 0);
  waitpid(sp, &st, 0);
  CHECK("posix_spawn child got argv/envp", WIFEXITED(st) && WEXITSTATUS(st) == 42);

  /* 9. An orphan gets a new parent. */
  c = fork();
  if (c == 0) {
    pid_t parent = getpid();
    pid_t g = fork();
    if (g == 0) {
      for (int i = 0; i < 500 && getppid() == parent; i++) usleep(2000);
      _exit(getppid() != parent ? 0 : 1);
    }
    _exit(0);
  }
  waitpid(c, &st, 0);
  CHECK("middle process exited", WIFEXITED(st));
  usleep(300000);

  /* 10. Reaping one child leaves its siblings alone (kill and wait still
     find the second child after the first, older one is reaped). */
  pid_t first = fork();
  if (first == 0) _exit(1);
  pid_t second = fork();
  if (second == 0) {
    for (;;) pause();
  }
  CHECK("reap the first child", waitpid(first, &st, 0) == first);
  CHECK("kill(second sibling) after reaping the first", kill(second, SIGTERM) == 0);
  CHECK("wait for the second sibling",
        waitpid(second, &st, 0) == second && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
  return finish();
}
