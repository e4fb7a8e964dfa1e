/* prctl(2): names (PR_SET_NAME/PR_GET_NAME, /proc/self/comm), the parent-
 * death signal, child subreapers, dumpable, no_new_privs, keepcaps, the
 * capability bounding set; posix_fadvise's errors; get_mempolicy's default
 * policy on one node. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

/* linux/capability.h's ABI (musl has no linux/ headers). */
#define CAP_VERSION_3 0x20080522
struct cap_header { uint32_t version; int pid; };
struct cap_data { uint32_t effective, permitted, inheritable; };

static int comm_is(const char *want) {
  char buf[64] = {0};
  int fd = open("/proc/self/comm", O_RDONLY);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = 0;
  return strcmp(buf, want) == 0;
}

static char thread_name[16];
static void *thread_fn(void *arg) {
  (void)arg;
  prctl(PR_SET_NAME, "worker-thread", 0, 0, 0);
  prctl(PR_GET_NAME, thread_name, 0, 0, 0);
  return NULL;
}

static int death_pipe[2];
static void on_usr1(int sig) {
  (void)sig;
  (void)!write(death_pipe[1], "D", 1);
}

int main(void) {
  char name[16] = {0};
  CHECK("PR_SET_NAME", prctl(PR_SET_NAME, "sbx-name-is-long-enough", 0, 0, 0) == 0);
  CHECK("PR_GET_NAME: truncated to 15 bytes",
        prctl(PR_GET_NAME, name, 0, 0, 0) == 0 && strcmp(name, "sbx-name-is-lon") == 0);
  CHECK("/proc/self/comm shows it", comm_is("sbx-name-is-lon"));
  pthread_t th;
  pthread_create(&th, NULL, thread_fn, NULL);
  pthread_join(th, NULL);
  CHECK("a thread names itself", strcmp(thread_name, "worker-thread") == 0);
  CHECK("the process keeps its name", prctl(PR_GET_NAME, name, 0, 0, 0) == 0 &&
                                          strcmp(name, "sbx-name-is-lon") == 0);

  /* Parent-death signal: B (grandchild) asks for SIGUSR1 when A dies. */
  CHECK("pipe", pipe(death_pipe) == 0);
  signal(SIGUSR1, on_usr1);
  int ready[2];
  (void)!pipe(ready);
  pid_t a = fork();
  if (a == 0) {
    pid_t b = fork();
    if (b == 0) {
      prctl(PR_SET_PDEATHSIG, SIGUSR1, 0, 0, 0);
      int sig = 0;
      prctl(PR_GET_PDEATHSIG, &sig, 0, 0, 0);
      (void)!write(ready[1], sig == SIGUSR1 ? "Y" : "N", 1);
      for (int i = 0; i < 300; i++) usleep(10000);
      _exit(0);
    }
    char c;
    (void)!read(ready[0], &c, 1);
    _exit(c == 'Y' ? 0 : 1);
  }
  int st;
  waitpid(a, &st, 0);
  CHECK("PR_GET_PDEATHSIG reads it back", WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char d = 0;
  CHECK("the orphan got its death signal", read(death_pipe[0], &d, 1) == 1 && d == 'D');

  /* Child subreaper: orphans of our descendants come to us. */
  int v = -1;
  CHECK("PR_SET_CHILD_SUBREAPER", prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0);
  CHECK("PR_GET_CHILD_SUBREAPER", prctl(PR_GET_CHILD_SUBREAPER, &v, 0, 0, 0) == 0 && v == 1);
  pid_t me = getpid();
  int report[2];
  (void)!pipe(report);
  a = fork();
  if (a == 0) {
    pid_t b = fork();
    if (b == 0) {
      pid_t parent = getppid();
      for (int i = 0; i < 300 && getppid() == parent; i++) usleep(10000);
      (void)!write(report[1], getppid() == me ? "S" : "I", 1);
      _exit(0);
    }
    _exit(0);
  }
  waitpid(a, &st, 0);
  char r = 0;
  CHECK("an orphaned grandchild is reparented to the subreaper",
        read(report[0], &r, 1) == 1 && r == 'S');
  CHECK("and the subreaper can wait for it", waitpid(-1, &st, 0) > 0 && WIFEXITED(st));
  prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);

  CHECK("PR_GET_DUMPABLE is 1", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 1);
  CHECK("PR_SET_DUMPABLE 0", prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 &&
                                 prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0);
  CHECK_ERRNO("PR_SET_DUMPABLE 2: EINVAL", prctl(PR_SET_DUMPABLE, 2, 0, 0, 0), EINVAL);
  prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  CHECK("PR_GET_NO_NEW_PRIVS is 0", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 0);
  CHECK_ERRNO("PR_SET_NO_NEW_PRIVS 2: EINVAL", prctl(PR_SET_NO_NEW_PRIVS, 2, 0, 0, 0), EINVAL);
  CHECK("PR_SET_NO_NEW_PRIVS 1", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
                                     prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1);
  CHECK("PR_SET_KEEPCAPS", prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == 0 &&
                               prctl(PR_GET_KEEPCAPS, 0, 0, 0, 0) == 1);
  CHECK("PR_CAPBSET_READ CAP_CHOWN", prctl(PR_CAPBSET_READ, 0, 0, 0, 0) == 1);
  CHECK_ERRNO("PR_CAPBSET_READ 63: EINVAL", prctl(PR_CAPBSET_READ, 63, 0, 0, 0), EINVAL);
  CHECK("PR_CAPBSET_DROP CAP_CHOWN", prctl(PR_CAPBSET_DROP, 0, 0, 0, 0) == 0 &&
                                         prctl(PR_CAPBSET_READ, 0, 0, 0, 0) == 0);
  CHECK_ERRNO("an unknown option: EINVAL", prctl(0x7fff0000, 0, 0, 0, 0), EINVAL);

  int fd = open("/proc/self/comm", O_RDONLY);
  int p[2];
  (void)!pipe(p);
  CHECK("posix_fadvise on a file", posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL) == 0);
  CHECK("posix_fadvise on a pipe: ESPIPE", posix_fadvise(p[0], 0, 0, POSIX_FADV_NORMAL) == ESPIPE);
  CHECK("posix_fadvise bad advice: EINVAL", posix_fadvise(fd, 0, 0, 99) == EINVAL);
  CHECK("posix_fadvise bad fd: EBADF", posix_fadvise(999, 0, 0, POSIX_FADV_NORMAL) == EBADF);
  int mode = -1;
  unsigned long mask = 0;
  CHECK("get_mempolicy: MPOL_DEFAULT",
        syscall(SYS_get_mempolicy, &mode, &mask, 64, 0, 0) == 0 && mode == 0);
  struct cap_header hdr = {CAP_VERSION_3, 0};
  struct cap_data caps[2];
  memset(caps, 0, sizeof caps);
  CHECK("capget v3", syscall(SYS_capget, &hdr, caps) == 0);
  CHECK("capget: CAP_CHOWN effective and permitted",
        (caps[0].effective & 1) && (caps[0].permitted & 1));
  hdr.version = 0x12345678;
  CHECK_ERRNO("capget, unknown version: EINVAL", syscall(SYS_capget, &hdr, caps), EINVAL);
  CHECK("and the preferred version is written back", hdr.version == CAP_VERSION_3);
  return finish();
}
