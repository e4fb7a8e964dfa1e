/* Pipes (man 7 pipe) between threads, and poll/ppoll/select/pselect on
 * them: capacity, PIPE_BUF atomicity, EOF, EPIPE/SIGPIPE, FIONREAD,
 * O_NONBLOCK, blocking reads and writes woken by another thread, signals
 * interrupting a blocked read, readiness bits. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

/* An unmapped address the compiler cannot see through. */
static int *volatile bad_ptr = (int *)8;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* A thread that waits `delay_ms` then runs one action on a fd. */
enum action { WRITE_ONE, CLOSE_FD, READ_SOME, KILL_MAIN };
struct job {
  int fd;
  enum action what;
  int delay_ms;
  long result;
  pthread_t main;
};
static void *run_job(void *arg) {
  struct job *j = arg;
  sleep_ms(j->delay_ms);
  switch (j->what) {
    case WRITE_ONE: j->result = write(j->fd, "z", 1); break;
    case CLOSE_FD: j->result = close(j->fd); break;
    case READ_SOME: {
      char buf[8192];
      j->result = read(j->fd, buf, sizeof buf);
      break;
    }
    case KILL_MAIN: j->result = pthread_kill(j->main, SIGUSR1); break;
  }
  return NULL;
}
static pthread_t start(struct job *j) {
  pthread_t t;
  pthread_create(&t, NULL, run_job, j);
  return t;
}

static volatile sig_atomic_t sigpipes, usr1s;
static void on_sigpipe(int s) { (void)s; sigpipes++; }
static void on_usr1(int s) { (void)s; usr1s++; }

/* Streams 1 MiB through a pipe in odd-sized writes; the reader checks the
 * byte sequence. */
#define STREAM_BYTES (1 << 20)
static void *stream_writer(void *arg) {
  int fd = *(int *)arg;
  static unsigned char buf[10007];
  long sent = 0;
  int step = 1;
  while (sent < STREAM_BYTES) {
    long n = (step * 7919) % (long)sizeof buf + 1;
    if (n > STREAM_BYTES - sent) n = STREAM_BYTES - sent;
    for (long i = 0; i < n; i++) buf[i] = (unsigned char)((sent + i) * 31 + 7);
    long w = write(fd, buf, n);
    if (w <= 0) break;
    sent += w;
    step++;
  }
  close(fd);
  return (void *)sent;
}

static void test_basic(void) {
  int p[2];
  CHECK("pipe", pipe(p) == 0);
  CHECK("pipe_write", write(p[1], "hello", 5) == 5);
  int avail = -1;
  CHECK("pipe_fionread", ioctl(p[0], FIONREAD, &avail) == 0 && avail == 5);
  char buf[16] = {0};
  CHECK("pipe_read_partial", read(p[0], buf, 3) == 3 && memcmp(buf, "hel", 3) == 0);
  CHECK("pipe_read_rest", read(p[0], buf, sizeof buf) == 2 && memcmp(buf, "lo", 2) == 0);
  CHECK("pipe_zero_read", read(p[0], buf, 0) == 0);
  CHECK("pipe_zero_write", write(p[1], buf, 0) == 0);
  struct stat st;
  CHECK("pipe_fstat_fifo", fstat(p[0], &st) == 0 && S_ISFIFO(st.st_mode));
  CHECK("pipe_ends_same_inode", ({
          struct stat st2;
          fstat(p[1], &st2) == 0 && st2.st_ino == st.st_ino;
        }));
  CHECK_ERRNO("pipe_lseek", lseek(p[0], 0, SEEK_CUR), ESPIPE);
  CHECK_ERRNO("pipe_pread", pread(p[0], buf, 1, 0), ESPIPE);
  CHECK_ERRNO("pipe_read_write_end", read(p[1], buf, 1), EBADF);
  CHECK_ERRNO("pipe_write_read_end", write(p[0], "x", 1), EBADF);
  CHECK("pipe_flags", (fcntl(p[0], F_GETFL) & O_ACCMODE) == O_RDONLY &&
                          (fcntl(p[1], F_GETFL) & O_ACCMODE) == O_WRONLY);
  CHECK("pipe_no_cloexec", fcntl(p[0], F_GETFD) == 0);
  close(p[1]);
  CHECK("pipe_eof", read(p[0], buf, sizeof buf) == 0);
  close(p[0]);
}

static void test_pipe2_flags(void) {
  int p[2];
  CHECK("pipe2_nonblock", pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
  CHECK("pipe2_nonblock_flag", (fcntl(p[0], F_GETFL) & O_NONBLOCK) != 0 &&
                                   (fcntl(p[1], F_GETFL) & O_NONBLOCK) != 0);
  CHECK("pipe2_cloexec", fcntl(p[0], F_GETFD) == FD_CLOEXEC &&
                             fcntl(p[1], F_GETFD) == FD_CLOEXEC);
  char c;
  CHECK_ERRNO("pipe_nonblock_empty_read", read(p[0], &c, 1), EAGAIN);
  CHECK("pipe_clear_nonblock", fcntl(p[0], F_SETFL, 0) == 0 &&
                                   (fcntl(p[0], F_GETFL) & O_NONBLOCK) == 0);
  close(p[0]);
  close(p[1]);
  CHECK_ERRNO("pipe2_bad_flags", pipe2(p, O_APPEND), EINVAL);
  CHECK_ERRNO("pipe_efault", pipe(bad_ptr), EFAULT);
}

static void test_capacity(void) {
  int p[2];
  pipe2(p, O_NONBLOCK);
  static char buf[100000];
  memset(buf, 'a', sizeof buf);
  long total = 0, w;
  while ((w = write(p[1], buf, 4096)) > 0) total += w;
  CHECK("pipe_capacity_64k", total == 65536 && errno == EAGAIN);
  CHECK_ERRNO("pipe_full_small_write", write(p[1], buf, 1), EAGAIN);
  int avail = 0;
  ioctl(p[0], FIONREAD, &avail);
  CHECK("pipe_fionread_full", avail == 65536);
  /* Drain, then a big non-blocking write is cut at the capacity. */
  while (read(p[0], buf, sizeof buf) > 0) {
  }
  CHECK("pipe_nonblock_partial_write", write(p[1], buf, sizeof buf) == 65536);
  while (read(p[0], buf, 4096) > 0) {
  }
  /* A read bigger than what is buffered returns what there is, even past
   * the Sentry's internal copy chunk. */
  while (write(p[1], buf, 4096) > 0) {
  }
  alarm(10); /* a hang here would otherwise stall the test */
  CHECK("pipe_big_read_returns_available", read(p[0], buf, sizeof buf) == 65536);
  alarm(0);
  /* PIPE_BUF atomicity: with 100 bytes free, a 50-byte write fits but a
   * 200-byte one (<= PIPE_BUF) must not be split. */
  CHECK("pipe_fill_but_100", write(p[1], buf, 65536 - 100) == 65436);
  CHECK("pipe_small_write_fits", write(p[1], buf, 50) == 50);
  CHECK_ERRNO("pipe_atomic_write_no_split", write(p[1], buf, 200), EAGAIN);
  close(p[0]);
  close(p[1]);

  /* F_GETPIPE_SZ / F_SETPIPE_SZ: powers of two pages, not below the data. */
  pipe(p);
  CHECK("pipe_getpipe_sz", fcntl(p[0], F_GETPIPE_SZ) == 65536);
  CHECK("pipe_setpipe_sz_rounds", fcntl(p[1], F_SETPIPE_SZ, 100000) == 131072 &&
                                      fcntl(p[0], F_GETPIPE_SZ) == 131072);
  CHECK("pipe_setpipe_sz_min", fcntl(p[1], F_SETPIPE_SZ, 1) == 4096);
  CHECK("pipe_setpipe_sz_8k", fcntl(p[1], F_SETPIPE_SZ, 8192) == 8192);
  write(p[1], buf, 4096);
  write(p[1], buf, 1);
  CHECK_ERRNO("pipe_setpipe_sz_busy", fcntl(p[1], F_SETPIPE_SZ, 4096), EBUSY);
  close(p[0]);
  close(p[1]);
  int dir = open("/", O_RDONLY | O_DIRECTORY);
  CHECK_ERRNO("pipe_getpipe_sz_not_pipe", fcntl(dir, F_GETPIPE_SZ), EBADF);
  close(dir);
}

static void test_epipe(void) {
  int p[2];
  pipe(p);
  close(p[0]);
  signal(SIGPIPE, SIG_IGN);
  CHECK_ERRNO("pipe_epipe_ignored", write(p[1], "x", 1), EPIPE);
  struct sigaction sa = {0};
  sa.sa_handler = on_sigpipe;
  sigaction(SIGPIPE, &sa, NULL);
  CHECK_ERRNO("pipe_epipe_handler", write(p[1], "x", 1), EPIPE);
  CHECK("pipe_sigpipe_delivered", sigpipes == 1);
  signal(SIGPIPE, SIG_DFL);
  close(p[1]);
}

static void test_blocking(void) {
  int p[2];
  pipe(p);
  char buf[8192];
  struct job j = {p[1], WRITE_ONE, 50, 0, 0};
  pthread_t t = start(&j);
  CHECK("pipe_blocking_read_woken", read(p[0], buf, sizeof buf) == 1 && buf[0] == 'z');
  pthread_join(t, NULL);

  struct job c = {p[1], CLOSE_FD, 50, 0, 0};
  t = start(&c);
  CHECK("pipe_blocking_read_eof", read(p[0], buf, sizeof buf) == 0);
  pthread_join(t, NULL);
  close(p[0]);

  /* A writer blocked on a full pipe resumes when a reader drains it. */
  pipe(p);
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  while (write(p[1], buf, 4096) > 0) {
  }
  fcntl(p[1], F_SETFL, 0);
  struct job r = {p[0], READ_SOME, 50, 0, 0};
  t = start(&r);
  CHECK("pipe_blocking_write_woken", write(p[1], buf, 4096) == 4096);
  pthread_join(t, NULL);
  CHECK("pipe_reader_got_data", r.result == 8192);

  /* A writer blocked on a full pipe gets EPIPE when the reader goes. */
  struct job cr = {p[0], CLOSE_FD, 50, 0, 0};
  while (1) {
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    if (write(p[1], buf, 4096) < 0) break;
  }
  fcntl(p[1], F_SETFL, 0);
  signal(SIGPIPE, SIG_IGN);
  t = start(&cr);
  CHECK_ERRNO("pipe_blocked_writer_epipe", write(p[1], buf, 4096), EPIPE);
  pthread_join(t, NULL);
  signal(SIGPIPE, SIG_DFL);
  close(p[1]);
}

static void test_interrupt(void) {
  int p[2];
  pipe(p);
  struct sigaction sa = {0};
  sa.sa_handler = on_usr1; /* no SA_RESTART */
  sigaction(SIGUSR1, &sa, NULL);
  struct job k = {0, KILL_MAIN, 50, 0, pthread_self()};
  pthread_t t = start(&k);
  char c;
  CHECK_ERRNO("pipe_read_interrupted", read(p[0], &c, 1), EINTR);
  pthread_join(t, NULL);
  CHECK("pipe_read_interrupt_handler_ran", usr1s == 1);

  k.delay_ms = 50;
  t = start(&k);
  struct pollfd pf = {p[0], POLLIN, 0};
  CHECK_ERRNO("poll_interrupted", poll(&pf, 1, -1), EINTR);
  pthread_join(t, NULL);

  /* The race-free pattern: SIGUSR1 blocked and pending, ppoll/pselect with
   * a mask that unblocks it: EINTR, the handler runs, and the old mask is
   * back afterwards. If fds are ready the call succeeds and the signal
   * stays pending under the restored mask. */
  sigset_t usr1, old, none, now;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  sigemptyset(&none);
  pthread_sigmask(SIG_BLOCK, &usr1, &old);
  usr1s = 0;
  raise(SIGUSR1);
  CHECK_ERRNO("ppoll_sigmask_eintr", ppoll(&pf, 1, NULL, &none), EINTR);
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  CHECK("ppoll_sigmask_handler_ran", usr1s == 1 && sigismember(&now, SIGUSR1));
  raise(SIGUSR1);
  fd_set r;
  FD_ZERO(&r);
  FD_SET(p[0], &r);
  CHECK_ERRNO("pselect_sigmask_eintr", pselect(p[0] + 1, &r, NULL, NULL, NULL, &none), EINTR);
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  CHECK("pselect_sigmask_handler_ran", usr1s == 2 && sigismember(&now, SIGUSR1));
  raise(SIGUSR1);
  write(p[1], "r", 1);
  CHECK("ppoll_sigmask_ready_wins", ppoll(&pf, 1, NULL, &none) == 1 && usr1s == 2);
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  CHECK("ppoll_sigmask_restored_after_success", sigismember(&now, SIGUSR1));
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  CHECK("ppoll_pending_delivered_on_unblock", usr1s == 3);
  read(p[0], &c, 1);

  signal(SIGUSR1, SIG_DFL);
  close(p[0]);
  close(p[1]);
}

static void test_stream(void) {
  int p[2];
  pipe(p);
  pthread_t t;
  pthread_create(&t, NULL, stream_writer, &p[1]);
  static unsigned char buf[9001];
  long got = 0;
  int ok = 1;
  long n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) {
    for (long i = 0; i < n; i++) {
      if (buf[i] != (unsigned char)((got + i) * 31 + 7)) ok = 0;
    }
    got += n;
  }
  void *sent;
  pthread_join(t, &sent);
  CHECK("pipe_stream_1mib", ok && got == STREAM_BYTES && (long)sent == STREAM_BYTES);
  close(p[0]);
}

static void test_poll(void) {
  int p[2];
  pipe(p);
  struct pollfd pf[2] = {{p[0], POLLIN | POLLOUT, 0}, {p[1], POLLIN | POLLOUT, 0}};
  CHECK("poll_empty_pipe", poll(pf, 2, 0) == 1 && pf[0].revents == 0 &&
                               pf[1].revents == POLLOUT);
  write(p[1], "ab", 2);
  CHECK("poll_data", poll(pf, 2, 0) == 2 && pf[0].revents == POLLIN &&
                         pf[1].revents == POLLOUT);
  struct pollfd rd = {p[0], POLLRDNORM, 0};
  CHECK("poll_rdnorm", poll(&rd, 1, 0) == 1 && rd.revents == POLLRDNORM);
  char buf[4];
  read(p[0], buf, 2);
  CHECK("poll_timeout", poll(pf, 1, 30) == 0 && pf[0].revents == 0);

  struct job j = {p[1], WRITE_ONE, 50, 0, 0};
  pthread_t t = start(&j);
  CHECK("poll_woken", poll(pf, 1, 5000) == 1 && pf[0].revents == POLLIN);
  pthread_join(t, NULL);
  read(p[0], buf, 1);

  struct timespec ts = {0, 20 * 1000000};
  CHECK("ppoll_timeout", ppoll(pf, 1, &ts, NULL) == 0);
  sigset_t none;
  sigemptyset(&none);
  write(p[1], "q", 1);
  CHECK("ppoll_sigmask_ready", ppoll(pf, 1, NULL, &none) == 1 && pf[0].revents == POLLIN);
  read(p[0], buf, 1);
  struct timespec bad = {0, 1000000000};
  CHECK_ERRNO("ppoll_bad_timespec", ppoll(pf, 1, &bad, NULL), EINVAL);

  struct pollfd odd[3] = {{-1, POLLIN, 0}, {999, POLLIN, 0}, {p[1], POLLOUT, 0}};
  CHECK("poll_negative_and_bad_fd", poll(odd, 3, 0) == 2 && odd[0].revents == 0 &&
                                         odd[1].revents == POLLNVAL &&
                                         odd[2].revents == POLLOUT);
  CHECK_ERRNO("poll_efault", poll((struct pollfd *)bad_ptr, 1, 0), EFAULT);

  close(p[1]);
  CHECK("poll_hup", poll(pf, 1, 0) == 1 && pf[0].revents == POLLHUP);
  write(p[1], "x", 0);
  close(p[0]);

  pipe(p);
  write(p[1], "x", 1);
  close(p[1]);
  pf[0].fd = p[0];
  CHECK("poll_data_and_hup", poll(pf, 1, 0) == 1 && pf[0].revents == (POLLIN | POLLHUP));
  close(p[0]);

  pipe(p);
  close(p[0]);
  struct pollfd wr = {p[1], POLLOUT, 0};
  CHECK("poll_write_end_err", poll(&wr, 1, 0) == 1 && wr.revents == (POLLOUT | POLLERR));
  wr.events = 0;
  CHECK("poll_err_unrequested", poll(&wr, 1, 0) == 1 && wr.revents == POLLERR);
  close(p[1]);

  /* A pipe woken by its writer closing, while poll sleeps. */
  pipe(p);
  struct job c = {p[1], CLOSE_FD, 50, 0, 0};
  t = start(&c);
  pf[0].fd = p[0];
  pf[0].events = POLLIN;
  CHECK("poll_woken_by_close", poll(pf, 1, 5000) == 1 && pf[0].revents == POLLHUP);
  pthread_join(t, NULL);
  close(p[0]);

  struct pollfd out = {1, POLLOUT, 0};
  CHECK("poll_stdout_writable", poll(&out, 1, 0) == 1 && (out.revents & POLLOUT));
}

static void test_select(void) {
  int p[2], q[2];
  pipe(p);
  pipe(q);
  fd_set r, w;
  FD_ZERO(&r);
  FD_ZERO(&w);
  FD_SET(p[0], &r);
  FD_SET(q[0], &r);
  FD_SET(p[1], &w);
  int n = (p[0] > q[0] ? p[0] : q[0]);
  if (p[1] > n) n = p[1];
  struct timeval tv = {0, 0};
  CHECK("select_only_writable", select(n + 1, &r, &w, NULL, &tv) == 1 &&
                                    !FD_ISSET(p[0], &r) && !FD_ISSET(q[0], &r) &&
                                    FD_ISSET(p[1], &w));
  write(q[1], "x", 1);
  FD_ZERO(&r);
  FD_SET(p[0], &r);
  FD_SET(q[0], &r);
  FD_ZERO(&w);
  FD_SET(p[1], &w);
  tv.tv_sec = 0;
  tv.tv_usec = 0;
  CHECK("select_read_and_write", select(n + 1, &r, &w, NULL, &tv) == 2 &&
                                     !FD_ISSET(p[0], &r) && FD_ISSET(q[0], &r) &&
                                     FD_ISSET(p[1], &w));
  char c;
  read(q[0], &c, 1);
  FD_ZERO(&r);
  FD_SET(p[0], &r);
  tv.tv_sec = 0;
  tv.tv_usec = 20000;
  CHECK("select_timeout", select(n + 1, &r, NULL, NULL, &tv) == 0 && !FD_ISSET(p[0], &r));
  /* Linux writes the time left back (raw: musl's select goes through
   * pselect6 on a copy). */
  FD_ZERO(&r);
  FD_SET(p[0], &r);
  tv.tv_sec = 0;
  tv.tv_usec = 20000;
  CHECK("select_timeout_left_zero", syscall(SYS_select, n + 1, &r, NULL, NULL, &tv) == 0 &&
                                        tv.tv_sec == 0 && tv.tv_usec == 0);

  struct job j = {p[1], WRITE_ONE, 50, 0, 0};
  pthread_t t = start(&j);
  FD_ZERO(&r);
  FD_SET(p[0], &r);
  CHECK("select_woken", select(n + 1, &r, NULL, NULL, NULL) == 1 && FD_ISSET(p[0], &r));
  pthread_join(t, NULL);
  read(p[0], &c, 1);

  FD_ZERO(&r);
  FD_SET(p[0], &r);
  struct timespec ts = {0, 10000000};
  sigset_t none;
  sigemptyset(&none);
  CHECK("pselect_timeout", pselect(n + 1, &r, NULL, NULL, &ts, &none) == 0);

  /* A closed fd below 64 (Linux ignores fds beyond its fd table's size,
   * which depends on how many the process ever had). */
  int closed = dup(0);
  close(closed);
  FD_ZERO(&r);
  FD_SET(closed, &r);
  tv.tv_sec = 0;
  tv.tv_usec = 0;
  CHECK_ERRNO("select_bad_fd", select(closed + 1, &r, NULL, NULL, &tv), EBADF);
  tv.tv_usec = -1;
  CHECK_ERRNO("select_bad_timeout", select(1, NULL, NULL, NULL, &tv), EINVAL);
  /* Linux carries whole seconds out of tv_usec rather than failing. */
  tv.tv_usec = 1000000;
  FD_ZERO(&w);
  FD_SET(p[1], &w);
  CHECK("select_usec_carry", select(n + 1, NULL, &w, NULL, &tv) == 1);
  CHECK_ERRNO("select_negative_n", select(-1, NULL, NULL, NULL, NULL), EINVAL);

  close(p[1]);
  FD_ZERO(&r);
  FD_SET(p[0], &r);
  tv.tv_usec = 0;
  CHECK("select_hup_is_readable", select(n + 1, &r, NULL, NULL, &tv) == 1 && FD_ISSET(p[0], &r));
  close(p[0]);
  close(q[0]);
  close(q[1]);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_basic();
  test_pipe2_flags();
  test_capacity();
  test_epipe();
  test_blocking();
  test_interrupt();
  test_stream();
  test_poll();
  test_select();
  return finish();
}
