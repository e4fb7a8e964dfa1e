/* inotify: the events of file and directory operations, in order, printed
 * one per line (watch descriptors and cookies as small relative numbers),
 * plus the flags, limits and error cases. Works in a fresh directory under
 * /tmp. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static char dir[64];
static char path_buf[4][128];

static const char* P(int slot, const char* name) {
  snprintf(path_buf[slot], sizeof(path_buf[slot]), "%s/%s", dir, name);
  return path_buf[slot];
}

static void mask_names(uint32_t m, char* out, size_t n) {
  static const struct {
    uint32_t bit;
    const char* name;
  } names[] = {
      {IN_ACCESS, "ACCESS"},         {IN_MODIFY, "MODIFY"},
      {IN_ATTRIB, "ATTRIB"},         {IN_CLOSE_WRITE, "CLOSE_WRITE"},
      {IN_CLOSE_NOWRITE, "CLOSE_NOWRITE"}, {IN_OPEN, "OPEN"},
      {IN_MOVED_FROM, "MOVED_FROM"}, {IN_MOVED_TO, "MOVED_TO"},
      {IN_CREATE, "CREATE"},         {IN_DELETE, "DELETE"},
      {IN_DELETE_SELF, "DELETE_SELF"}, {IN_MOVE_SELF, "MOVE_SELF"},
      {IN_UNMOUNT, "UNMOUNT"},       {IN_Q_OVERFLOW, "Q_OVERFLOW"},
      {IN_IGNORED, "IGNORED"},       {IN_ISDIR, "ISDIR"},
  };
  out[0] = 0;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (m & names[i].bit) {
      if (out[0]) strncat(out, "|", n - strlen(out) - 1);
      strncat(out, names[i].name, n - strlen(out) - 1);
      m &= ~names[i].bit;
    }
  }
  if (m) snprintf(out + strlen(out), n - strlen(out), "|0x%x", m);
}

/* Cookies are printed as the order in which they were first seen. */
static uint32_t cookies[64];
static int ncookies;

static int cookie_id(uint32_t c) {
  if (c == 0) return 0;
  for (int i = 0; i < ncookies; i++)
    if (cookies[i] == c) return i + 1;
  if (ncookies < 64) cookies[ncookies++] = c;
  return ncookies;
}

/* Prints (with a label) every event queued now; returns how many. */
static int drain(int fd, const char* label) {
  char buf[4096] __attribute__((aligned(8)));
  int count = 0;
  printf("-- %s\n", label);
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    for (char* p = buf; p < buf + n;) {
      struct inotify_event* e = (struct inotify_event*)p;
      char m[256];
      mask_names(e->mask, m, sizeof(m));
      printf("  wd=%d %s cookie=%d name=%s\n", e->wd, m, cookie_id(e->cookie),
             e->len ? e->name : "-");
      p += sizeof(*e) + e->len;
      count++;
    }
  }
  return count;
}

static void write_file(const char* path, const char* data) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  write(fd, data, strlen(data));
  close(fd);
}

/* Which mask bits inotify_add_watch takes: Linux's ALL_INOTIFY_BITS,
 * event-only bits included; any other bit is EINVAL. */
static void mask_bits(void) {
  int in = inotify_init1(IN_CLOEXEC);
  CHECK_ERRNO("an unknown bit (0x100000)",
              inotify_add_watch(in, dir, IN_MODIFY | 0x00100000u), EINVAL);
  CHECK_ERRNO("an unknown bit (0x10000)",
              inotify_add_watch(in, dir, IN_MODIFY | 0x00010000u), EINVAL);
  CHECK_ERRNO("a bad fd with an unknown bit", inotify_add_watch(-1, dir, 0x00100000u),
              EINVAL);
  CHECK_ERRNO("a bad fd", inotify_add_watch(-1, dir, IN_MODIFY), EBADF);
  CHECK("IN_ISDIR alone: a watch of no events",
        inotify_add_watch(in, dir, IN_ISDIR) == 1);
  CHECK("IN_IGNORED alone: the same watch", inotify_add_watch(in, dir, IN_IGNORED) == 1);
  CHECK("IN_UNMOUNT alone: the same watch", inotify_add_watch(in, dir, IN_UNMOUNT) == 1);
  CHECK("IN_ONESHOT alone: the same watch", inotify_add_watch(in, dir, IN_ONESHOT) == 1);
  close(in);
}

static void basics(void) {
  CHECK_ERRNO("inotify_init1 bad flags", inotify_init1(0x1), EINVAL);
  int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  CHECK("inotify_init1", in >= 0);
  CHECK("IN_CLOEXEC", fcntl(in, F_GETFD) == FD_CLOEXEC);
  CHECK("IN_NONBLOCK", (fcntl(in, F_GETFL) & O_NONBLOCK) != 0);
  char buf[256];
  CHECK_ERRNO("read with no events", read(in, buf, sizeof(buf)), EAGAIN);
  int plain = inotify_init();
  CHECK("inotify_init", plain >= 0 && fcntl(plain, F_GETFD) == 0);
  close(plain);

  int wd = inotify_add_watch(in, dir, IN_ALL_EVENTS);
  CHECK("add_watch dir", wd == 1);
  int fd = open(P(0, "a"), O_WRONLY | O_CREAT, 0644);
  write(fd, "x", 1);
  close(fd);
  drain(in, "create, write, close");
  fd = open(P(0, "a"), O_RDONLY);
  read(fd, buf, sizeof(buf));
  close(fd);
  drain(in, "open, read, close");
  chmod(P(0, "a"), 0600);
  truncate(P(0, "a"), 0);
  drain(in, "chmod, truncate");
  fd = open(P(0, "a"), O_WRONLY);
  fallocate(fd, 0, 0, 10);
  close(fd);
  drain(in, "fallocate");
  mkdir(P(0, "sub"), 0755);
  rename(P(0, "a"), P(1, "b"));
  link(P(1, "b"), P(2, "c"));
  unlink(P(2, "c"));
  unlink(P(1, "b"));
  rmdir(P(0, "sub"));
  drain(in, "mkdir, rename, link, unlink, rmdir");
  int d = open(dir, O_RDONLY | O_DIRECTORY);
  syscall(SYS_getdents64, d, buf, sizeof(buf));
  close(d);
  drain(in, "readdir of the watched directory");

  /* A watched file and its directory. */
  write_file(P(0, "f"), "1");
  drain(in, "make f");
  int wf = inotify_add_watch(in, P(0, "f"), IN_ALL_EVENTS);
  CHECK("add_watch file", wf == 2);
  write_file(P(0, "f"), "2");
  drain(in, "rewrite f (both watches)");
  unlink(P(0, "f"));
  drain(in, "unlink f");

  /* Coalescing of identical consecutive events. */
  fd = open(P(0, "g"), O_WRONLY | O_CREAT, 0644);
  write(fd, "1", 1);
  write(fd, "2", 1);
  write(fd, "3", 1);
  close(fd);
  CHECK("identical events merged", drain(in, "three writes") == 4);
  unlink(P(0, "g"));
  drain(in, "unlink g");

  /* FIONREAD and reads into small buffers. */
  write_file(P(0, "h"), "h");
  int avail = -1;
  ioctl(in, FIONREAD, &avail);
  /* CREATE h, OPEN h, MODIFY h, CLOSE_WRITE h: 4 x (16 + 16). */
  CHECK("FIONREAD", avail == 4 * 32);
  CHECK_ERRNO("read buffer too small", read(in, buf, 20), EINVAL);
  CHECK("read exactly one event", read(in, buf, 40) == 32);
  ioctl(in, FIONREAD, &avail);
  CHECK("FIONREAD after a read", avail == 3 * 32);
  drain(in, "rest after a partial read");
  unlink(P(0, "h"));
  drain(in, "unlink h");

  /* rm_watch. */
  CHECK("rm_watch", inotify_rm_watch(in, wd) == 0);
  drain(in, "rm_watch");
  CHECK_ERRNO("rm_watch again", inotify_rm_watch(in, wd), EINVAL);
  CHECK_ERRNO("rm_watch not inotify", inotify_rm_watch(1, 1), EINVAL);
  CHECK_ERRNO("rm_watch bad fd", inotify_rm_watch(99, 1), EBADF);
  write_file(P(0, "after"), "x");
  CHECK("no events after rm_watch", drain(in, "after rm_watch") == 0);
  unlink(P(0, "after"));
  close(in);
}

static void flags(void) {
  int in = inotify_init1(IN_NONBLOCK);
  write_file(P(0, "f"), "x");
  CHECK_ERRNO("add_watch mask 0", inotify_add_watch(in, P(0, "f"), 0), EINVAL);
  CHECK_ERRNO("IN_MASK_ADD with IN_MASK_CREATE",
              inotify_add_watch(in, P(0, "f"),
                                IN_OPEN | IN_MASK_ADD | IN_MASK_CREATE),
              EINVAL);
  CHECK_ERRNO("add_watch missing path",
              inotify_add_watch(in, P(1, "nope"), IN_OPEN), ENOENT);
  CHECK_ERRNO("add_watch not inotify", inotify_add_watch(1, dir, IN_OPEN),
              EINVAL);
  CHECK_ERRNO("add_watch bad fd", inotify_add_watch(99, dir, IN_OPEN), EBADF);
  CHECK_ERRNO("IN_ONLYDIR on a file",
              inotify_add_watch(in, P(0, "f"), IN_OPEN | IN_ONLYDIR), ENOTDIR);
  int wd = inotify_add_watch(in, P(0, "f"), IN_OPEN);
  CHECK("IN_MASK_ADD keeps the wd",
        inotify_add_watch(in, P(0, "f"), IN_CLOSE_NOWRITE | IN_MASK_ADD) == wd);
  CHECK_ERRNO("IN_MASK_CREATE on a watched inode",
              inotify_add_watch(in, P(0, "f"), IN_OPEN | IN_MASK_CREATE),
              EEXIST);
  close(open(P(0, "f"), O_RDONLY));
  drain(in, "open+close with IN_OPEN|IN_MASK_ADD IN_CLOSE_NOWRITE");
  CHECK("replacing the mask keeps the wd",
        inotify_add_watch(in, P(0, "f"), IN_CLOSE_NOWRITE) == wd);
  close(open(P(0, "f"), O_RDONLY));
  drain(in, "open+close with IN_CLOSE_NOWRITE only");

  symlink("f", P(1, "link"));
  CHECK("following a symlink finds the same watch",
        inotify_add_watch(in, P(1, "link"), IN_CLOSE_NOWRITE) == wd);
  int lwd = inotify_add_watch(in, P(1, "link"), IN_ATTRIB | IN_DONT_FOLLOW);
  CHECK("IN_DONT_FOLLOW watches the link itself", lwd > wd);
  inotify_rm_watch(in, lwd);
  unlink(P(1, "link"));
  drain(in, "rm_watch of the symlink's watch, unlink");

  /* IN_ONESHOT. */
  int ow = inotify_add_watch(in, P(0, "f"), IN_MODIFY | IN_ONESHOT);
  int fd = open(P(0, "f"), O_WRONLY);
  write(fd, "1", 1);
  close(fd);
  fd = open(P(0, "f"), O_WRONLY);
  write(fd, "2", 1);
  close(fd);
  CHECK("oneshot replaced the old watch", ow == wd);
  drain(in, "two writes with IN_ONESHOT");

  /* IN_EXCL_UNLINK: no events for an unlinked child. */
  int dw = inotify_add_watch(in, dir, IN_MODIFY | IN_EXCL_UNLINK);
  fd = open(P(0, "f"), O_WRONLY);
  unlink(P(0, "f"));
  write(fd, "3", 1);
  close(fd);
  CHECK("IN_EXCL_UNLINK", drain(in, "write after unlink, IN_EXCL_UNLINK") == 0);
  inotify_rm_watch(in, dw);
  drain(in, "rm_watch");
  close(in);
}

static void self_events(void) {
  int in = inotify_init1(IN_NONBLOCK);
  mkdir(P(0, "d1"), 0755);
  int wd = inotify_add_watch(in, P(0, "d1"), IN_ALL_EVENTS);
  int top = inotify_add_watch(in, dir, IN_MOVED_FROM | IN_MOVED_TO);
  CHECK("two watches", wd == 1 && top == 2);
  rename(P(0, "d1"), P(1, "d2"));
  drain(in, "rename a watched directory");
  write_file(P(0, "d2/x"), "x");
  unlink(P(0, "d2/x"));
  rmdir(P(0, "d2"));
  drain(in, "rmdir a watched directory");
  /* Replacing a watched file by rename. */
  write_file(P(0, "r1"), "1");
  write_file(P(1, "r2"), "2");
  int rw = inotify_add_watch(in, P(1, "r2"), IN_ALL_EVENTS);
  CHECK("watch r2", rw == 3);
  rename(P(0, "r1"), P(1, "r2"));
  drain(in, "rename over a watched file");
  unlink(P(1, "r2"));
  close(in);
}

static void readiness(void) {
  int in = inotify_init1(0);
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN};
  CHECK("epoll_ctl on inotify", epoll_ctl(ep, EPOLL_CTL_ADD, in, &ev) == 0);
  inotify_add_watch(in, dir, IN_CREATE);
  struct pollfd p = {.fd = in, .events = POLLIN};
  CHECK("not ready", poll(&p, 1, 0) == 0 && epoll_wait(ep, &ev, 1, 0) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    usleep(50000);
    write_file(P(0, "from_child"), "c");
    _exit(0);
  }
  char buf[256];
  /* A blocking read waits for the child's event. */
  ssize_t n = read(in, buf, sizeof(buf));
  struct inotify_event* e = (struct inotify_event*)buf;
  CHECK("blocking read woken", n == 32 && (e->mask & IN_CREATE) &&
                                   strcmp(e->name, "from_child") == 0);
  waitpid(pid, NULL, 0);
  unlink(P(0, "from_child"));
  write_file(P(0, "again"), "c");
  CHECK("poll ready", poll(&p, 1, 0) == 1 && p.revents == POLLIN);
  CHECK("epoll ready", epoll_wait(ep, &ev, 1, 0) == 1 && ev.events == EPOLLIN);
  unlink(P(0, "again"));
  close(ep);
  close(in);
}

static void overflow(void) {
  int in = inotify_init1(IN_NONBLOCK);
  write_file(P(0, "o"), "x");
  inotify_add_watch(in, P(0, "o"), IN_OPEN | IN_CLOSE_NOWRITE);
  /* Alternating events are never merged: 2 per round. */
  for (int i = 0; i < 8200; i++) close(open(P(0, "o"), O_RDONLY));
  char buf[4096] __attribute__((aligned(8)));
  int count = 0, overflows = 0, last_overflow = 0;
  for (;;) {
    ssize_t n = read(in, buf, sizeof(buf));
    if (n <= 0) break;
    for (char* p = buf; p < buf + n;) {
      struct inotify_event* e = (struct inotify_event*)p;
      count++;
      last_overflow = e->mask == IN_Q_OVERFLOW && e->wd == -1;
      overflows += last_overflow;
      p += sizeof(*e) + e->len;
    }
  }
  printf("overflow: %d events, %d overflow, last is overflow: %d\n", count,
         overflows, last_overflow);
  CHECK("queue limit and one IN_Q_OVERFLOW",
        count == 16385 && overflows == 1 && last_overflow);
  unlink(P(0, "o"));
  close(in);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  strcpy(dir, "/tmp/sbx_inotify_XXXXXX");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  mask_bits();
  basics();
  flags();
  self_events();
  readiness();
  overflow();
  rmdir(dir);
  return finish();
}
