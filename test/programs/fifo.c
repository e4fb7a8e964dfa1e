/* Named pipes (fifo(7), pipe(7)) made with mkfifo under /tmp and on the
 * root filesystem (/var/tmp): opens that wait for the other side, the
 * O_NONBLOCK cases (ENXIO for a writer without readers), O_RDWR, one pipe
 * shared by every opener of the inode (and a new one once all closed),
 * data, EOF, EPIPE, poll readiness (no POLLHUP for a reader that has seen
 * no writer yet), F_GETPIPE_SZ/F_SETPIPE_SZ, FIONREAD, fstat, and an open
 * interrupted by a signal with and without SA_RESTART; a FIFO's
 * /proc/self/fd link (its path, " (deleted)" once unlinked), fchmod through
 * its descriptor, and the inotify events of its opens, reads, writes and
 * closes (the FIFO's own watch and its directory's). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static short poll_one(int fd, short events) {
  struct pollfd p = {fd, events, 0};
  int r = poll(&p, 1, 0);
  return r < 0 ? -1 : p.revents;
}

/* Exit status of a child, or -1. */
static int wait_child(pid_t pid) {
  int st;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

/* Whether `pid` is still running after `ms` (blocked in an open). */
static int still_running(pid_t pid, int ms) {
  sleep_ms(ms);
  int st;
  return waitpid(pid, &st, WNOHANG) == 0;
}

static volatile sig_atomic_t g_alarms;
static void on_alarm(int sig) { g_alarms++; }

static void set_alarm_handler(int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
}

static void arm_timer_ms(int ms) {
  struct itimerval it = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
  setitimer(ITIMER_REAL, &it, NULL);
}

static void basic(const char *dir) {
  char path[256];
  snprintf(path, sizeof(path), "%s/f1", dir);
  CHECK("mkfifo", mkfifo(path, 0600) == 0);
  struct stat st;
  CHECK("stat is fifo", stat(path, &st) == 0 && S_ISFIFO(st.st_mode) &&
                            (st.st_mode & 0777) == 0600);

  /* O_NONBLOCK: a reader opens at once; a writer without readers is
   * ENXIO; with a reader it opens. */
  int r = open(path, O_RDONLY | O_NONBLOCK);
  CHECK("nonblock reader opens", r >= 0);
  struct stat fst;
  CHECK("fstat is the fifo", fstat(r, &fst) == 0 && S_ISFIFO(fst.st_mode) &&
                                 fst.st_ino == st.st_ino &&
                                 fst.st_dev == st.st_dev);
  char buf[64];
  CHECK("read without writer is EOF", read(r, buf, sizeof(buf)) == 0);
  CHECK("no POLLHUP before a writer", poll_one(r, POLLIN) == 0);
  int w = open(path, O_WRONLY | O_NONBLOCK);
  CHECK("nonblock writer with reader opens", w >= 0);
  CHECK("empty: read EAGAIN",
        read(r, buf, sizeof(buf)) == -1 && errno == EAGAIN);
  CHECK("writer POLLOUT", poll_one(w, POLLOUT) == POLLOUT);
  CHECK("write", write(w, "hello", 5) == 5);
  int n = -1;
  CHECK("FIONREAD", ioctl(r, FIONREAD, &n) == 0 && n == 5);
  CHECK("reader POLLIN", poll_one(r, POLLIN) == POLLIN);
  CHECK("F_GETPIPE_SZ", fcntl(r, F_GETPIPE_SZ) == 65536);
  CHECK("F_SETPIPE_SZ", fcntl(w, F_SETPIPE_SZ, 131072) == 131072);
  CHECK("size shared", fcntl(r, F_GETPIPE_SZ) == 131072);
  CHECK("read data", read(r, buf, sizeof(buf)) == 5 &&
                         memcmp(buf, "hello", 5) == 0);
  close(w);
  CHECK("POLLHUP after the writer left", poll_one(r, POLLIN) == POLLHUP);
  CHECK("EOF after the writer left", read(r, buf, sizeof(buf)) == 0);

  /* Writers without readers: EPIPE (SIGPIPE ignored), POLLERR. */
  w = open(path, O_WRONLY | O_NONBLOCK);
  CHECK("second writer opens", w >= 0);
  close(r);
  CHECK("writer POLLERR", (poll_one(w, POLLOUT) & POLLERR) != 0);
  signal(SIGPIPE, SIG_IGN);
  CHECK_ERRNO("write without reader", write(w, "x", 1), EPIPE);
  signal(SIGPIPE, SIG_DFL);
  close(w);
  CHECK_ERRNO("nonblock writer, no reader",
              open(path, O_WRONLY | O_NONBLOCK), ENXIO);

  /* O_RDWR never waits; every opener shares its pipe. */
  int rw = open(path, O_RDWR);
  CHECK("O_RDWR opens", rw >= 0);
  CHECK("O_RDWR F_GETFL", (fcntl(rw, F_GETFL) & O_ACCMODE) == O_RDWR);
  CHECK("O_RDWR write", write(rw, "abc", 3) == 3);
  r = open(path, O_RDONLY);  /* a writer (rw) exists: no wait */
  CHECK("reader opens with O_RDWR present", r >= 0);
  CHECK("shared data", read(r, buf, sizeof(buf)) == 3 &&
                           memcmp(buf, "abc", 3) == 0);
  w = open(path, O_WRONLY);
  CHECK("writer opens with reader present", w >= 0);
  CHECK("write through second open", write(w, "de", 2) == 2);
  CHECK("O_RDWR reads it", read(rw, buf, sizeof(buf)) == 2 &&
                               memcmp(buf, "de", 2) == 0);
  CHECK("O_RDWR writer POLLOUT",
        poll_one(rw, POLLIN | POLLOUT) == POLLOUT);
  close(w);
  close(r);
  CHECK("O_RDWR write alone", write(rw, "zz", 2) == 2);
  close(rw);
  /* All closed: the data left goes with the pipe. */
  rw = open(path, O_RDWR | O_NONBLOCK);
  n = -1;
  CHECK("new pipe after last close", ioctl(rw, FIONREAD, &n) == 0 && n == 0);
  CHECK("new pipe default size", fcntl(rw, F_GETPIPE_SZ) == 65536);
  close(rw);
  unlink(path);
}

static void blocking(const char *dir) {
  char path[256];
  snprintf(path, sizeof(path), "%s/f2", dir);
  CHECK("mkfifo 2", mkfifo(path, 0644) == 0);
  char buf[64];

  /* A reader waits for a writer. */
  pid_t pid = fork();
  if (pid == 0) {
    int r = open(path, O_RDONLY);
    if (r < 0) _exit(1);
    char b[64];
    ssize_t k = read(r, b, sizeof(b));
    if (k != 10 || memcmp(b, "hello fifo", 10) != 0) _exit(2);
    if (read(r, b, sizeof(b)) != 0) _exit(3); /* EOF: the writer closed */
    _exit(0);
  }
  CHECK("reader open waits", still_running(pid, 150));
  int w = open(path, O_WRONLY);
  CHECK("writer opens for the waiting reader", w >= 0);
  CHECK("write to reader", write(w, "hello fifo", 10) == 10);
  sleep_ms(50);
  close(w);
  CHECK("reader got data then EOF", wait_child(pid) == 0);

  /* A writer waits for a reader. */
  pid = fork();
  if (pid == 0) {
    int w2 = open(path, O_WRONLY);
    if (w2 < 0) _exit(1);
    if (write(w2, "from child", 10) != 10) _exit(2);
    _exit(0);
  }
  CHECK("writer open waits", still_running(pid, 150));
  int r = open(path, O_RDONLY);
  CHECK("reader opens for the waiting writer", r >= 0);
  CHECK("writer child done", wait_child(pid) == 0);
  CHECK("read from child", read(r, buf, sizeof(buf)) == 10 &&
                               memcmp(buf, "from child", 10) == 0);
  CHECK("EOF after child exit", read(r, buf, sizeof(buf)) == 0);
  close(r);

  /* An O_RDWR opener is the partner a waiting reader wants. */
  pid = fork();
  if (pid == 0) {
    int r2 = open(path, O_RDONLY);
    _exit(r2 >= 0 ? 0 : 1);
  }
  CHECK("reader waits (rdwr)", still_running(pid, 150));
  int rw = open(path, O_RDWR);
  CHECK("reader released by O_RDWR", wait_child(pid) == 0);
  close(rw);

  /* Interrupted: without SA_RESTART, EINTR; with it, the open goes on. */
  g_alarms = 0;
  set_alarm_handler(0);
  arm_timer_ms(100);
  CHECK_ERRNO("open interrupted", open(path, O_RDONLY), EINTR);
  CHECK("handler ran", g_alarms == 1);
  arm_timer_ms(100);
  CHECK_ERRNO("writer open interrupted", open(path, O_WRONLY), EINTR);
  /* The interrupted opener is gone: a writer still has no reader. */
  CHECK_ERRNO("interrupted reader left no reader",
              open(path, O_WRONLY | O_NONBLOCK), ENXIO);

  g_alarms = 0;
  set_alarm_handler(SA_RESTART);
  pid = fork();
  if (pid == 0) {
    sleep_ms(300);
    int w2 = open(path, O_WRONLY);
    if (w2 < 0) _exit(1);
    if (write(w2, "R", 1) != 1) _exit(2);
    _exit(0);
  }
  arm_timer_ms(100);
  r = open(path, O_RDONLY);
  CHECK("SA_RESTART open completes", r >= 0);
  CHECK("SA_RESTART handler ran", g_alarms == 1);
  CHECK("restarted open's data", read(r, buf, 1) == 1 && buf[0] == 'R');
  CHECK("restart writer child", wait_child(pid) == 0);
  close(r);
  signal(SIGALRM, SIG_DFL);

  /* poll on a blocking pair across processes. */
  pid = fork();
  if (pid == 0) {
    int w2 = open(path, O_WRONLY);
    if (w2 < 0) _exit(1);
    sleep_ms(200);
    if (write(w2, "p", 1) != 1) _exit(2);
    sleep_ms(100);
    _exit(0);
  }
  r = open(path, O_RDONLY);
  CHECK("poll reader opens", r >= 0);
  struct pollfd p = {r, POLLIN, 0};
  CHECK("poll waits for data", poll(&p, 1, 2000) == 1 && p.revents == POLLIN);
  CHECK("poll data", read(r, buf, 1) == 1 && buf[0] == 'p');
  p.revents = 0;
  CHECK("poll sees hangup", poll(&p, 1, 2000) == 1 && p.revents == POLLHUP);
  CHECK("poll writer child", wait_child(pid) == 0);
  close(r);
  unlink(path);
}

/* A FIFO on the root filesystem (the overlay in the sandbox). */
static void rootfs(void) {
  char path[] = "/var/tmp/sbx_fifo_XXXXXX";
  if (mkdtemp(path) == NULL) {
    printf("rootfs mkdtemp: errno %d\n", errno);
    return;
  }
  char f[300];
  snprintf(f, sizeof(f), "%s/f", path);
  CHECK("rootfs mkfifo", mkfifo(f, 0600) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    int w = open(f, O_WRONLY);
    if (w < 0) _exit(1);
    _exit(write(w, "root", 4) == 4 ? 0 : 2);
  }
  int r = open(f, O_RDONLY);
  char buf[8];
  CHECK("rootfs fifo opens", r >= 0);
  CHECK("rootfs fifo data", read(r, buf, 4) == 4 && memcmp(buf, "root", 4) == 0);
  CHECK("rootfs writer child", wait_child(pid) == 0);
  CHECK("rootfs fifo EOF", read(r, buf, 4) == 0);
  close(r);
  unlink(f);
  rmdir(path);
}

/* The queued inotify events, "wd1 0x20/n wd2 0x20", or "none". */
static void print_events(int in, const char *step) {
  char buf[4096] __attribute__((aligned(8)));
  char line[1024] = "";
  size_t len = 0;
  ssize_t n = read(in, buf, sizeof(buf));
  for (char *p = buf; n > 0 && p < buf + n;) {
    struct inotify_event *e = (struct inotify_event *)p;
    len += snprintf(line + len, sizeof(line) - len, " wd%d 0x%x%s%s", e->wd, e->mask,
                    e->len ? "/" : "", e->len ? e->name : "");
    if (len >= sizeof(line)) break;
    p += sizeof(*e) + e->len;
  }
  printf("named inotify %s:%s\n", step, len ? line : " none");
}

static void named(const char *dir) {
  char f[300], link[64], target[400];
  snprintf(f, sizeof(f), "%s/n", dir);
  CHECK("named mkfifo", mkfifo(f, 0644) == 0);
  int in = inotify_init1(IN_NONBLOCK);
  CHECK("named inotify_init1", in >= 0);
  /* wd1 the directory, wd2 the FIFO. */
  CHECK("named watch dir", inotify_add_watch(in, dir, IN_ALL_EVENTS) == 1);
  CHECK("named watch fifo", inotify_add_watch(in, f, IN_ALL_EVENTS) == 2);
  int rw = open(f, O_RDWR);
  CHECK("named open O_RDWR", rw >= 0);
  print_events(in, "open O_RDWR");
  CHECK("named write", write(rw, "ab", 2) == 2);
  print_events(in, "write");
  char buf[4];
  CHECK("named read", read(rw, buf, 2) == 2);
  print_events(in, "read");
  int ro = open(f, O_RDONLY | O_NONBLOCK);
  CHECK("named open O_RDONLY|O_NONBLOCK", ro >= 0);
  CHECK("named empty read", read(ro, buf, 1) == -1 && errno == EAGAIN);
  close(ro);
  print_events(in, "open O_RDONLY|O_NONBLOCK, read nothing, close");
  int w = open(f, O_WRONLY);
  CHECK("named open O_WRONLY", w >= 0);
  print_events(in, "open O_WRONLY");
  CHECK("named write O_WRONLY", write(w, "c", 1) == 1);
  print_events(in, "write O_WRONLY");
  close(w);
  print_events(in, "close O_WRONLY");
  snprintf(link, sizeof(link), "/proc/self/fd/%d", rw);
  ssize_t n = readlink(link, target, sizeof(target) - 1);
  target[n > 0 ? n : 0] = 0;
  CHECK("named /proc/self/fd link: the path", strcmp(target, f) == 0);
  /* Opening the link opens the FIFO again (fifo_open): one more reader
   * of the same pipe. */
  int again = open(link, O_RDONLY);
  CHECK("named reopen through /proc/self/fd", again >= 0);
  /* "c" is still in the pipe, from the O_WRONLY writer. */
  CHECK("named reopen: the same pipe",
        write(rw, "d", 1) == 1 && read(again, buf, 2) == 2 && memcmp(buf, "cd", 2) == 0);
  close(again);
  print_events(in, "reopen through /proc/self/fd, write, read, close");
  CHECK("named fchmod", fchmod(rw, 0600) == 0);
  print_events(in, "fchmod");
  struct stat st;
  CHECK("named fchmod: the mode", fstat(rw, &st) == 0 && (st.st_mode & 07777) == 0600);
  close(rw);
  print_events(in, "close O_RDWR");
  close(in);
  /* Unlinked while open: the link says so. */
  int r = open(f, O_RDWR);
  unlink(f);
  snprintf(link, sizeof(link), "/proc/self/fd/%d", r);
  n = readlink(link, target, sizeof(target) - 1);
  target[n > 0 ? n : 0] = 0;
  char want[400];
  snprintf(want, sizeof(want), "%s (deleted)", f);
  CHECK("named /proc/self/fd link once unlinked", strcmp(target, want) == 0);
  close(r);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  char dir[] = "/tmp/sbx_fifo_XXXXXX";
  if (mkdtemp(dir) == NULL) {
    printf("mkdtemp: FAIL (errno %d)\n", errno);
    return 1;
  }
  basic(dir);
  blocking(dir);
  named(dir);
  rmdir(dir);
  rootfs();
  return finish();
}
