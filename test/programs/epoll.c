/* epoll(7) on pipes, eventfds and procfs files: level- and edge-triggered
 * reporting,
 * EPOLLONESHOT and re-arming, the data field, errors of epoll_ctl and
 * epoll_wait, interests dropped when the last descriptor of a file closes,
 * nested epoll files and ELOOP, blocking waits woken by another thread. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int add(int ep, int fd, uint32_t events, uint64_t data) {
  struct epoll_event ev = {0};
  ev.events = events;
  ev.data.u64 = data;
  return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}
static int mod(int ep, int fd, uint32_t events, uint64_t data) {
  struct epoll_event ev = {0};
  ev.events = events;
  ev.data.u64 = data;
  return epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
}

/* Waits with timeout `ms`; returns the count and the first event. */
static int wait1(int ep, int ms, struct epoll_event *first) {
  struct epoll_event evs[8];
  memset(evs, 0, sizeof evs);
  int n = epoll_wait(ep, evs, 8, ms);
  if (first != NULL) *first = evs[0];
  return n;
}

static volatile sig_atomic_t usr1s;
static void on_usr1(int s) { (void)s; usr1s++; }

struct writer {
  int fd;
  int delay_ms;
};
static void *delayed_write(void *arg) {
  struct writer *w = arg;
  sleep_ms(w->delay_ms);
  uint64_t one = 1;
  (void)!write(w->fd, &one, sizeof one);
  return NULL;
}

static void test_errors(void) {
  /* Raw: musl's epoll_create does not pass the size on. */
  CHECK_ERRNO("epoll_create_zero", syscall(SYS_epoll_create, 0), EINVAL);
  CHECK_ERRNO("epoll_create1_flags", epoll_create1(1), EINVAL);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  CHECK("epoll_create1_cloexec", ep >= 0 && fcntl(ep, F_GETFD) == FD_CLOEXEC);
  int p[2];
  pipe(p);
  CHECK_ERRNO("epoll_ctl_self", add(ep, ep, EPOLLIN, 0), EINVAL);
  CHECK_ERRNO("epoll_ctl_not_epoll", add(p[0], p[1], EPOLLIN, 0), EINVAL);
  CHECK_ERRNO("epoll_ctl_bad_fd", add(ep, 999, EPOLLIN, 0), EBADF);
  int dir = open("/", O_RDONLY | O_DIRECTORY);
  CHECK_ERRNO("epoll_ctl_directory", add(ep, dir, EPOLLIN, 0), EPERM);
  close(dir);
  CHECK_ERRNO("epoll_ctl_mod_missing", mod(ep, p[0], EPOLLIN, 0), ENOENT);
  CHECK_ERRNO("epoll_ctl_del_missing", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL), ENOENT);
  CHECK("epoll_ctl_add", add(ep, p[0], EPOLLIN, 1) == 0);
  CHECK_ERRNO("epoll_ctl_add_twice", add(ep, p[0], EPOLLIN, 1), EEXIST);
  CHECK_ERRNO("epoll_ctl_bad_op", epoll_ctl(ep, 99, p[0], &(struct epoll_event){0}), EINVAL);
  CHECK_ERRNO("epoll_ctl_exclusive_mod", mod(ep, p[0], EPOLLIN | EPOLLEXCLUSIVE, 0), EINVAL);
  CHECK_ERRNO("epoll_ctl_exclusive_oneshot",
              add(ep, p[1], EPOLLOUT | EPOLLEXCLUSIVE | EPOLLONESHOT, 0), EINVAL);
  CHECK("epoll_ctl_exclusive_add", add(ep, p[1], EPOLLOUT | EPOLLEXCLUSIVE, 2) == 0);
  CHECK("epoll_ctl_del", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL) == 0);
  struct epoll_event evs[1];
  CHECK_ERRNO("epoll_wait_zero_max", epoll_wait(ep, evs, 0, 0), EINVAL);
  CHECK_ERRNO("epoll_wait_not_epoll", epoll_wait(p[0], evs, 1, 0), EINVAL);
  CHECK_ERRNO("epoll_wait_bad_fd", epoll_wait(999, evs, 1, 0), EBADF);
  char c;
  CHECK_ERRNO("epoll_read", read(ep, &c, 1), EINVAL);
  close(p[0]);
  close(p[1]);
  close(ep);
}

/* procfs files, as Linux's f_op->poll decides: the files of /proc itself
 * and /proc/sys are always ready both ways (DEFAULT_POLLMASK), a process's
 * mounts and mountinfo ready to read, its other files (seq_file's
 * single_open) have no poll: EPERM. */
static void test_procfs(void) {
  static const struct {
    const char *name, *path;
    uint32_t want; /* 0: EPERM */
  } files[] = {
      {"uptime", "/proc/uptime", EPOLLIN | EPOLLOUT},
      {"meminfo", "/proc/meminfo", EPOLLIN | EPOLLOUT},
      {"sys_hostname", "/proc/sys/kernel/hostname", EPOLLIN | EPOLLOUT},
      {"self_mountinfo", "/proc/self/mountinfo", EPOLLIN},
      {"self_mounts", "/proc/self/mounts", EPOLLIN},
      {"self_status", "/proc/self/status", 0},
      {"self_stat", "/proc/self/stat", 0},
      {"self_maps", "/proc/self/maps", 0},
      {"self_cmdline", "/proc/self/cmdline", 0},
  };
  int ep = epoll_create1(0);
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char name[64];
    int fd = open(files[i].path, O_RDONLY);
    snprintf(name, sizeof name, "epoll_procfs_%s_open", files[i].name);
    CHECK(name, fd >= 0);
    snprintf(name, sizeof name, "epoll_procfs_%s", files[i].name);
    if (files[i].want == 0) {
      CHECK_ERRNO(name, add(ep, fd, EPOLLIN | EPOLLOUT, i), EPERM);
    } else {
      CHECK(name, add(ep, fd, EPOLLIN | EPOLLOUT, i) == 0);
      struct epoll_event ev;
      int n = wait1(ep, 0, &ev);
      snprintf(name, sizeof name, "epoll_procfs_%s_ready", files[i].name);
      CHECK(name, n == 1 && ev.data.u64 == i && ev.events == files[i].want);
      epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    }
    close(fd);
  }
  close(ep);
}

static void test_level_edge(void) {
  int ep = epoll_create1(0);
  int p[2];
  pipe(p);
  const uint64_t tag = 0xdeadbeefcafef00dull;
  add(ep, p[0], EPOLLIN, tag);
  struct epoll_event ev;
  CHECK("epoll_lt_empty", wait1(ep, 0, NULL) == 0);
  write(p[1], "ab", 2);
  CHECK("epoll_lt_ready", wait1(ep, 0, &ev) == 1 && ev.events == EPOLLIN && ev.data.u64 == tag);
  CHECK("epoll_lt_again", wait1(ep, 0, &ev) == 1 && ev.data.u64 == tag);
  char buf[4];
  read(p[0], buf, 2);
  CHECK("epoll_lt_drained", wait1(ep, 0, NULL) == 0);

  mod(ep, p[0], EPOLLIN | EPOLLET, 7);
  write(p[1], "a", 1);
  CHECK("epoll_et_first", wait1(ep, 0, &ev) == 1 && ev.data.u64 == 7);
  CHECK("epoll_et_not_again", wait1(ep, 0, NULL) == 0);
  write(p[1], "b", 1);
  CHECK("epoll_et_new_edge", wait1(ep, 0, &ev) == 1 && ev.events == EPOLLIN);
  CHECK("epoll_et_quiet", wait1(ep, 0, NULL) == 0);
  read(p[0], buf, 2);

  mod(ep, p[0], EPOLLIN | EPOLLONESHOT, 9);
  write(p[1], "a", 1);
  CHECK("epoll_oneshot_first", wait1(ep, 0, &ev) == 1 && ev.data.u64 == 9);
  write(p[1], "b", 1);
  CHECK("epoll_oneshot_disabled", wait1(ep, 0, NULL) == 0);
  mod(ep, p[0], EPOLLIN | EPOLLONESHOT, 10);
  CHECK("epoll_oneshot_rearmed", wait1(ep, 0, &ev) == 1 && ev.data.u64 == 10);
  read(p[0], buf, 2);

  /* Write end: POLLOUT, then EPOLLERR once the reader is gone. */
  add(ep, p[1], EPOLLOUT, 11);
  epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL);
  CHECK("epoll_write_end", wait1(ep, 0, &ev) == 1 && ev.events == EPOLLOUT && ev.data.u64 == 11);
  close(p[0]);
  CHECK("epoll_write_end_err", wait1(ep, 0, &ev) == 1 && ev.events == (EPOLLOUT | EPOLLERR));
  close(p[1]);
  close(ep);
}

static void test_hup_and_close(void) {
  int ep = epoll_create1(0);
  int p[2];
  pipe(p);
  add(ep, p[0], EPOLLIN | EPOLLRDHUP, 1);
  close(p[1]);
  struct epoll_event ev;
  CHECK("epoll_hup", wait1(ep, 0, &ev) == 1 && ev.events == EPOLLHUP);
  close(p[0]);

  /* The interest belongs to the open file description: it lives while a
   * dup of the fd does, and goes with the last one. */
  pipe(p);
  add(ep, p[0], EPOLLIN, 2);
  int d = dup(p[0]);
  close(p[0]);
  write(p[1], "x", 1);
  CHECK("epoll_survives_dup", wait1(ep, 0, &ev) == 1 && ev.data.u64 == 2);
  close(d);
  CHECK("epoll_dropped_at_last_close", wait1(ep, 0, NULL) == 0);
  close(p[1]);

  /* Many interests with LT: every one is reported, each once per wait. */
  int fds[16][2];
  for (int i = 0; i < 16; i++) {
    pipe(fds[i]);
    add(ep, fds[i][0], EPOLLIN, 100 + i);
    write(fds[i][1], "x", 1);
  }
  struct epoll_event evs[32];
  int n = epoll_wait(ep, evs, 32, 0);
  uint32_t seen = 0;
  for (int i = 0; i < n; i++) seen |= 1u << (evs[i].data.u64 - 100);
  CHECK("epoll_many", n == 16 && seen == 0xffff);
  n = epoll_wait(ep, evs, 5, 0);
  CHECK("epoll_maxevents_respected", n == 5);
  /* The rest are not starved: 16 reported over 4 rounds of 5. */
  seen = 0;
  for (int i = 0; i < 4; i++) {
    n = epoll_wait(ep, evs, 5, 0);
    for (int k = 0; k < n; k++) seen |= 1u << (evs[k].data.u64 - 100);
  }
  CHECK("epoll_round_robin", seen == 0xffff);
  for (int i = 0; i < 16; i++) {
    close(fds[i][0]);
    close(fds[i][1]);
  }
  CHECK("epoll_all_closed", wait1(ep, 0, NULL) == 0);
  close(ep);
}

static void test_nested_and_blocking(void) {
  int inner = epoll_create1(0), outer = epoll_create1(0);
  int efd = eventfd(0, EFD_NONBLOCK);
  add(inner, efd, EPOLLIN, 1);
  CHECK("epoll_nest_add", add(outer, inner, EPOLLIN, 2) == 0);
  CHECK_ERRNO("epoll_nest_loop", add(inner, outer, EPOLLIN, 3), ELOOP);
  struct epoll_event ev;
  CHECK("epoll_nest_idle", wait1(outer, 0, NULL) == 0);
  struct pollfd pf = {inner, POLLIN, 0};
  CHECK("epoll_poll_idle", poll(&pf, 1, 0) == 0);
  uint64_t one = 1;
  write(efd, &one, sizeof one);
  CHECK("epoll_nest_ready", wait1(outer, 0, &ev) == 1 && ev.events == EPOLLIN && ev.data.u64 == 2);
  CHECK("epoll_poll_ready", poll(&pf, 1, 0) == 1 && pf.revents == POLLIN);
  uint64_t v;
  read(efd, &v, sizeof v);
  CHECK("epoll_nest_drained", wait1(outer, 0, NULL) == 0);

  CHECK("epoll_wait_timeout", wait1(inner, 30, NULL) == 0);
  struct writer w = {efd, 50};
  pthread_t t;
  pthread_create(&t, NULL, delayed_write, &w);
  CHECK("epoll_wait_woken", wait1(inner, 5000, &ev) == 1 && ev.data.u64 == 1);
  pthread_join(t, NULL);
  read(efd, &v, sizeof v);

  pthread_create(&t, NULL, delayed_write, &w);
  CHECK("epoll_nested_wait_woken", wait1(outer, 5000, &ev) == 1 && ev.data.u64 == 2);
  pthread_join(t, NULL);
  read(efd, &v, sizeof v);

  pthread_create(&t, NULL, delayed_write, &w);
  sigset_t none;
  sigemptyset(&none);
  struct epoll_event evs[2];
  CHECK("epoll_pwait_woken", epoll_pwait(inner, evs, 2, 5000, &none) == 1);
  pthread_join(t, NULL);
  read(efd, &v, sizeof v);

  /* epoll_pwait unblocking a pending signal: EINTR, handler, old mask. */
  struct sigaction sa = {0};
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  sigset_t usr1, old, now;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, &old);
  raise(SIGUSR1);
  CHECK_ERRNO("epoll_pwait_sigmask_eintr", epoll_pwait(inner, evs, 2, 5000, &none), EINTR);
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  CHECK("epoll_pwait_sigmask_handler_ran", usr1s == 1 && sigismember(&now, SIGUSR1));
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  signal(SIGUSR1, SIG_DFL);

  /* Edge-triggered eventfd: each write is an edge. */
  mod(inner, efd, EPOLLIN | EPOLLET, 4);
  write(efd, &one, sizeof one);
  CHECK("epoll_eventfd_et", wait1(inner, 0, &ev) == 1 && ev.data.u64 == 4);
  CHECK("epoll_eventfd_et_once", wait1(inner, 0, NULL) == 0);
  write(efd, &one, sizeof one);
  CHECK("epoll_eventfd_et_again", wait1(inner, 0, &ev) == 1);
  close(efd);
  close(outer);
  close(inner);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_errors();
  test_procfs();
  test_level_edge();
  test_hup_and_close();
  test_nested_and_blocking();
  return finish();
}
