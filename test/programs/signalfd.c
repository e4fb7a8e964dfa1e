/* signalfd: reading blocked signals as records instead of having them
 * delivered; poll/epoll readiness; non-blocking EAGAIN; several records per
 * read; re-masking; SIGCHLD's ssi_status; sigqueue's value in ssi_int;
 * rt_sigqueueinfo's permission rule; a blocking read woken by a signal from
 * another process. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static int readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static volatile sig_atomic_t g_handled;
static void on_usr2(int sig) { g_handled = sig; }

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR1);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGRTMIN);
  sigprocmask(SIG_BLOCK, &mask, NULL);

  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  int fd = signalfd(-1, &usr1, SFD_NONBLOCK | SFD_CLOEXEC);
  CHECK("signalfd4", fd >= 0);
  CHECK("SFD_CLOEXEC", fcntl(fd, F_GETFD) == FD_CLOEXEC);
  CHECK("SFD_NONBLOCK", (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
  struct signalfd_siginfo si[4];
  CHECK_ERRNO("empty: EAGAIN", read(fd, si, sizeof(si)), EAGAIN);
  CHECK("empty: not readable", !readable(fd));
  CHECK_ERRNO("short buffer: EINVAL", read(fd, si, sizeof(si[0]) - 1), EINVAL);

  CHECK("kill self", kill(getpid(), SIGUSR1) == 0);
  CHECK("pending: readable", readable(fd));
  memset(si, 0, sizeof(si));
  CHECK("read one record", read(fd, si, sizeof(si)) == sizeof(si[0]));
  CHECK("ssi_signo", si[0].ssi_signo == SIGUSR1);
  CHECK("ssi_code SI_USER", si[0].ssi_code == SI_USER);
  CHECK("ssi_pid", si[0].ssi_pid == (uint32_t)getpid());
  CHECK("ssi_uid", si[0].ssi_uid == (uint32_t)getuid());
  sigset_t pend;
  sigpending(&pend);
  CHECK("taken, not pending any more", !sigismember(&pend, SIGUSR1));
  CHECK("not readable after the read", !readable(fd));

  /* sigqueue: the value comes through; two signals, one read. */
  union sigval v;
  v.sival_int = 4242;
  CHECK("re-mask with signalfd(fd)", signalfd(fd, &mask, 0) == fd);
  CHECK("sigqueue SIGRTMIN", sigqueue(getpid(), SIGRTMIN, v) == 0);
  CHECK("kill SIGUSR1", kill(getpid(), SIGUSR1) == 0);
  memset(si, 0, sizeof(si));
  CHECK("two records in one read", read(fd, si, sizeof(si)) == 2 * sizeof(si[0]));
  CHECK("lowest first: SIGUSR1", si[0].ssi_signo == SIGUSR1);
  CHECK("then SIGRTMIN", si[1].ssi_signo == (uint32_t)SIGRTMIN);
  CHECK("SI_QUEUE", si[1].ssi_code == SI_QUEUE);
  CHECK("ssi_int", si[1].ssi_int == 4242);
  CHECK("sigqueue ssi_pid", si[1].ssi_pid == (uint32_t)getpid());

  /* A signal outside the mask is not read. */
  CHECK("re-mask to SIGUSR1 only", signalfd(fd, &usr1, 0) == fd);
  sigqueue(getpid(), SIGRTMIN, v);
  CHECK("outside the mask: not readable", !readable(fd));
  CHECK_ERRNO("outside the mask: EAGAIN", read(fd, si, sizeof(si)), EAGAIN);
  CHECK("re-mask back", signalfd(fd, &mask, 0) == fd);
  CHECK("now readable", readable(fd));
  CHECK("read it", read(fd, si, sizeof(si)) == sizeof(si[0]) &&
                       si[0].ssi_signo == (uint32_t)SIGRTMIN);
  CHECK_ERRNO("signalfd on a non-signalfd: EINVAL", signalfd(1, &mask, 0), EINVAL);
  CHECK_ERRNO("bad flags: EINVAL", signalfd(-1, &mask, O_APPEND), EINVAL);

  /* rt_sigqueueinfo: si_code >= 0 only to oneself. */
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  siginfo_t info;
  memset(&info, 0, sizeof(info));
  info.si_code = SI_USER;
  info.si_pid = getpid();
  CHECK_ERRNO("rt_sigqueueinfo SI_USER to another: EPERM",
              syscall(SYS_rt_sigqueueinfo, child, SIGUSR1, &info), EPERM);
  info.si_code = SI_QUEUE;
  info.si_value.sival_int = 7;
  CHECK("rt_sigqueueinfo SI_QUEUE to self",
        syscall(SYS_rt_sigqueueinfo, getpid(), SIGUSR1, &info) == 0);
  info.si_code = SI_TKILL;
  CHECK("rt_tgsigqueueinfo SI_TKILL to self",
        syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), SIGRTMIN, &info) == 0);
  memset(si, 0, sizeof(si));
  CHECK("read both", read(fd, si, sizeof(si)) == 2 * sizeof(si[0]));
  /* The thread's own signals come before the process's (Linux's
   * dequeue_signal), whatever their numbers. */
  CHECK("thread-directed first: tgsigqueueinfo info kept",
        si[0].ssi_signo == (uint32_t)SIGRTMIN && si[0].ssi_code == SI_TKILL);
  CHECK("then process-directed: queued info kept",
        si[1].ssi_signo == SIGUSR1 && si[1].ssi_code == SI_QUEUE &&
            si[1].ssi_int == 7);

  /* SIGCHLD through the signalfd, with ssi_status; epoll readiness. */
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 99};
  CHECK("epoll_ctl add", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
  struct epoll_event out;
  CHECK("epoll: nothing yet", epoll_wait(ep, &out, 1, 0) == 0);
  kill(child, SIGTERM);
  CHECK("epoll: SIGCHLD makes it ready",
        epoll_wait(ep, &out, 1, 10000) == 1 && out.data.u64 == 99 &&
            (out.events & EPOLLIN));
  memset(si, 0, sizeof(si));
  CHECK("read SIGCHLD", read(fd, si, sizeof(si)) == sizeof(si[0]));
  CHECK("SIGCHLD ssi_signo", si[0].ssi_signo == SIGCHLD);
  CHECK("SIGCHLD ssi_code CLD_KILLED", si[0].ssi_code == CLD_KILLED);
  CHECK("SIGCHLD ssi_status SIGTERM", si[0].ssi_status == SIGTERM);
  CHECK("SIGCHLD ssi_pid", si[0].ssi_pid == (uint32_t)child);
  int st;
  CHECK("reap", waitpid(child, &st, 0) == child);
  CHECK("epoll: drained", epoll_wait(ep, &out, 1, 0) == 0);

  child = fork();
  if (child == 0) _exit(33);
  CHECK("epoll: exit SIGCHLD",
        epoll_wait(ep, &out, 1, 10000) == 1 && out.data.u64 == 99);
  CHECK("read exit SIGCHLD", read(fd, si, sizeof(si)) == sizeof(si[0]) &&
                                 si[0].ssi_code == CLD_EXITED &&
                                 si[0].ssi_status == 33);
  waitpid(child, &st, 0);

  /* A blocking read, woken by a signal another process sends. */
  int bfd = signalfd(-1, &usr1, 0);
  CHECK("blocking signalfd", bfd >= 0 && (fcntl(bfd, F_GETFL) & O_NONBLOCK) == 0);
  pid_t parent = getpid();
  child = fork();
  if (child == 0) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    kill(parent, SIGUSR1);
    _exit(0);
  }
  memset(si, 0, sizeof(si));
  CHECK("blocking read returns the signal",
        read(bfd, si, sizeof(si)) == sizeof(si[0]) && si[0].ssi_signo == SIGUSR1 &&
            si[0].ssi_pid == (uint32_t)child);
  waitpid(child, &st, 0);
  read(fd, si, sizeof(si));  /* that child's SIGCHLD */

  /* A signal read through the fd is not delivered; an unblocked one with
   * a handler interrupts a blocking read (EINTR). */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_usr2;  /* no SA_RESTART */
  sigaction(SIGUSR2, &sa, NULL);
  child = fork();
  if (child == 0) {
    /* Again and again: one that comes before the read only runs the
     * handler. */
    for (;;) {
      struct timespec ts = {0, 50 * 1000 * 1000};
      nanosleep(&ts, NULL);
      kill(parent, SIGUSR2);
    }
  }
  CHECK_ERRNO("blocking read interrupted by a handled signal",
              read(bfd, si, sizeof(si)), EINTR);
  CHECK("the handler ran", g_handled == SIGUSR2);
  kill(child, SIGKILL);
  waitpid(child, &st, 0);

  close(bfd);
  close(ep);
  close(fd);
  return finish();
}
