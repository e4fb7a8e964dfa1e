/* Syscalls real tools hit that are easy to get subtly wrong: close_range
 * (closing, CLOSE_RANGE_CLOEXEC, CLOSE_RANGE_UNSHARE after a CLONE_FILES
 * clone, bad arguments), the xattr calls on a missing path or a bad fd
 * (ENOENT/ENOTDIR/EBADF before anything about attributes), epoll_wait
 * returning more than 4096 events in one call when asked, and statfs's
 * counts being consistent. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define CLOSE_RANGE_UNSHARE_ (1U << 1)
#define CLOSE_RANGE_CLOEXEC_ (1U << 2)

static long close_range_(unsigned first, unsigned last, unsigned flags) {
  return syscall(SYS_close_range, first, last, flags);
}

static int is_open(int fd) { return fcntl(fd, F_GETFD) >= 0; }

/* Three descriptors at fd, fd+1, fd+2 (above the standard ones). */
static int three_fds(void) {
  int base = fcntl(0, F_DUPFD, 100);
  if (base < 0 || dup2(base, base + 1) < 0 || dup2(base, base + 2) < 0) return -1;
  return base;
}

static char clone_stack[64 * 1024];
static int g_shared_fd;
static int child_unshare(void* arg) {
  /* Shares the parent's table (CLONE_FILES): UNSHARE first, then close. */
  if (close_range_(g_shared_fd, g_shared_fd, CLOSE_RANGE_UNSHARE_) != 0) return 2;
  return is_open(g_shared_fd) ? 3 : 0;
}

static void test_close_range(void) {
  int b = three_fds();
  CHECK("close_range: setup", b >= 0);
  CHECK("close_range: middle one", close_range_(b + 1, b + 1, 0) == 0);
  CHECK("close_range: others stay", is_open(b) && !is_open(b + 1) && is_open(b + 2));
  CHECK("close_range: cloexec", close_range_(b, b + 2, CLOSE_RANGE_CLOEXEC_) == 0);
  CHECK("close_range: cloexec keeps them open", is_open(b) && is_open(b + 2));
  CHECK("close_range: cloexec set", fcntl(b, F_GETFD) == FD_CLOEXEC &&
                                        fcntl(b + 2, F_GETFD) == FD_CLOEXEC);
  CHECK("close_range: to ~0", close_range_(b, ~0U, 0) == 0);
  CHECK("close_range: all closed", !is_open(b) && !is_open(b + 2));
  CHECK("close_range: nothing open in range is fine", close_range_(b, b + 10, 0) == 0);
  CHECK_ERRNO("close_range: first > last", close_range_(5, 4, 0), EINVAL);
  CHECK_ERRNO("close_range: unknown flag", close_range_(b, b, 1U << 5), EINVAL);

  /* UNSHARE in a CLONE_FILES child: the parent's descriptor stays open. */
  g_shared_fd = fcntl(0, F_DUPFD, 200);
  pid_t pid = clone(child_unshare, clone_stack + sizeof clone_stack,
                    CLONE_FILES | SIGCHLD, NULL);
  int st = -1;
  CHECK("close_range unshare: clone", pid > 0 && waitpid(pid, &st, 0) == pid);
  CHECK("close_range unshare: the child closed its own copy",
        WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK("close_range unshare: the parent's stays open", is_open(g_shared_fd));
  close(g_shared_fd);
}

static void test_xattr(void) {
  char buf[256];
  CHECK_ERRNO("listxattr: missing path", listxattr("/no/such/path", buf, sizeof buf), ENOENT);
  CHECK_ERRNO("llistxattr: missing path", llistxattr("/no/such/path", buf, sizeof buf), ENOENT);
  CHECK_ERRNO("getxattr: missing path", getxattr("/no/such/path", "user.x", buf, sizeof buf), ENOENT);
  CHECK_ERRNO("lgetxattr: missing path", lgetxattr("/no/such", "user.x", buf, sizeof buf), ENOENT);
  CHECK_ERRNO("setxattr: missing path", setxattr("/no/such", "user.x", "v", 1, 0), ENOENT);
  CHECK_ERRNO("removexattr: missing path", removexattr("/no/such", "user.x"), ENOENT);
  CHECK_ERRNO("getxattr: a file as a directory",
              getxattr("/proc/self/exe/x", "user.x", buf, sizeof buf), ENOTDIR);
  CHECK_ERRNO("flistxattr: bad fd", flistxattr(999, buf, sizeof buf), EBADF);
  CHECK_ERRNO("fgetxattr: bad fd", fgetxattr(999, "user.x", buf, sizeof buf), EBADF);
  CHECK_ERRNO("fsetxattr: bad fd", fsetxattr(999, "user.x", "v", 1, 0), EBADF);
  CHECK_ERRNO("fremovexattr: bad fd", fremovexattr(999, "user.x"), EBADF);
  CHECK_ERRNO("getxattr: no such attribute on /",
              getxattr("/", "user.sbx-test-none", buf, sizeof buf), ENODATA);
}

static void test_epoll_many(void) {
  enum { kFds = 5000 };
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < kFds + 64) {
    rl.rlim_cur = rl.rlim_max < kFds + 64 ? rl.rlim_max : kFds + 64;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < kFds + 64) {
    printf("epoll 5000: skipped (RLIMIT_NOFILE)\n");
    return;
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int ok = ep >= 0;
  static int fds[kFds];
  for (int i = 0; ok && i < kFds; i++) {
    fds[i] = eventfd(1, EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    ok = fds[i] >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) == 0;
  }
  CHECK("epoll 5000: registered", ok);
  static struct epoll_event evs[kFds + 100];
  int n = epoll_wait(ep, evs, kFds + 100, 0);
  CHECK("epoll 5000: one call returns all 5000", n == kFds);
  static unsigned char seen[kFds];
  int dup = 0;
  for (int i = 0; i < n; i++) {
    uint32_t k = evs[i].data.u32;
    if (k >= kFds || seen[k]++) dup = 1;
  }
  CHECK("epoll 5000: each once", !dup);
  n = epoll_wait(ep, evs, 4500, 0);
  CHECK("epoll 5000: capped by maxevents", n == 4500);
  for (int i = 0; i < kFds; i++) close(fds[i]);
  close(ep);
}

static void test_statfs(void) {
  struct statfs s;
  CHECK("statfs /", statfs("/", &s) == 0);
  CHECK("statfs /: block size", s.f_bsize > 0);
  CHECK("statfs /: free <= blocks", s.f_bfree <= s.f_blocks && s.f_bavail <= s.f_bfree);
  CHECK("statfs /: something in use", s.f_blocks > s.f_bfree);
  CHECK("statfs /: inodes in use", s.f_files > s.f_ffree);
}

int main(void) {
  test_close_range();
  test_xattr();
  test_epoll_many();
  test_statfs();
  return finish();
}
