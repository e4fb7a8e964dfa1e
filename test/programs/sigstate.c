/* Signal bookkeeping without delivery: rt_sigaction and rt_sigprocmask
 * store and report state; SIGKILL/SIGSTOP cannot be changed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

static void handler(int sig) { (void)sig; }

static void *thread_mask(void *arg) {
  sigset_t cur;
  pthread_sigmask(SIG_SETMASK, NULL, &cur);
  return (void *)(long)(sigismember(&cur, SIGUSR1) == 1 && sigismember(&cur, SIGUSR2) == 0);
}

int main(void) {
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR2);
  CHECK("initial SIGUSR1 disposition is SIG_DFL", sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == SIG_DFL);
  CHECK("install SIGUSR1 handler", sigaction(SIGUSR1, &sa, NULL) == 0);
  memset(&old, 0, sizeof old);
  CHECK("read back SIGUSR1 handler", sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == handler);
  CHECK("read back SA_RESTART", (old.sa_flags & SA_RESTART) != 0);
  CHECK("read back sa_mask", sigismember(&old.sa_mask, SIGUSR2) == 1 && sigismember(&old.sa_mask, SIGINT) == 0);
  sa.sa_handler = SIG_IGN;
  CHECK("set SIGUSR1 to SIG_IGN, old is handler", sigaction(SIGUSR1, &sa, &old) == 0 && old.sa_handler == handler);
  CHECK("read back SIG_IGN", sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == SIG_IGN);
  sa.sa_handler = handler;
  CHECK_ERRNO("sigaction(SIGKILL) -> EINVAL", sigaction(SIGKILL, &sa, NULL), EINVAL);
  CHECK_ERRNO("sigaction(SIGSTOP) -> EINVAL", sigaction(SIGSTOP, &sa, NULL), EINVAL);
  CHECK("sigaction(SIGKILL) query allowed", sigaction(SIGKILL, NULL, &old) == 0);
  CHECK_ERRNO("raw rt_sigaction signal 0 -> EINVAL", syscall(SYS_rt_sigaction, 0, NULL, &old, 8), EINVAL);
  CHECK_ERRNO("raw rt_sigaction signal 65 -> EINVAL", syscall(SYS_rt_sigaction, 65, NULL, &old, 8), EINVAL);
  CHECK_ERRNO("raw rt_sigaction bad sigsetsize -> EINVAL", syscall(SYS_rt_sigaction, SIGUSR1, NULL, &old, 4), EINVAL);

  sigset_t set, cur;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGKILL);
  sigaddset(&set, SIGSTOP);
  CHECK("block SIGUSR1 (+KILL, STOP)", sigprocmask(SIG_BLOCK, &set, NULL) == 0);
  CHECK("read back mask", sigprocmask(SIG_SETMASK, NULL, &cur) == 0);
  CHECK("SIGUSR1 blocked", sigismember(&cur, SIGUSR1) == 1);
  CHECK("SIGKILL and SIGSTOP silently not blocked", sigismember(&cur, SIGKILL) == 0 && sigismember(&cur, SIGSTOP) == 0);
  pthread_t t;
  void *ret;
  pthread_create(&t, NULL, thread_mask, NULL);
  pthread_join(t, &ret);
  CHECK("new thread inherits the mask", ret == (void *)1);
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  CHECK("unblock SIGUSR1", sigprocmask(SIG_UNBLOCK, &set, NULL) == 0);
  sigprocmask(SIG_SETMASK, NULL, &cur);
  CHECK("SIGUSR1 unblocked", sigismember(&cur, SIGUSR1) == 0);
  CHECK_ERRNO("sigprocmask bad how -> EINVAL", syscall(SYS_rt_sigprocmask, 99, &set, NULL, 8), EINVAL);
  CHECK_ERRNO("rt_sigprocmask bad sigsetsize -> EINVAL", syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, NULL, 16), EINVAL);
  CHECK("SIGUSR1 raised while ignored is discarded", (signal(SIGUSR1, SIG_IGN), raise(SIGUSR1)) == 0);
  return finish();
}
