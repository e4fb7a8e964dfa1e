/* Assorted identity and resource syscalls. Prints relations, never values
 * that differ between hosts/sandboxes (pids, hostnames, kernel versions). */
#define _GNU_SOURCE
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <termios.h>
#include <unistd.h>

#include "common.h"

#ifndef GRND_NONBLOCK
#define GRND_NONBLOCK 1
#endif
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

static long sys_getrandom(void *buf, size_t n, unsigned flags) { return syscall(SYS_getrandom, buf, n, flags); }

static const char *ftype(mode_t m) {
  if (S_ISREG(m)) return "regular file";
  if (S_ISCHR(m)) return "character device";
  if (S_ISFIFO(m)) return "fifo";
  if (S_ISSOCK(m)) return "socket";
  if (S_ISDIR(m)) return "directory";
  return "other";
}

int main(void) {
  struct utsname u;
  CHECK("uname succeeds", uname(&u) == 0);
  printf("sysname: %s\n", u.sysname);
  printf("machine: %s\n", u.machine);
  CHECK("nodename present", u.nodename[0] != 0);
  CHECK("release present", u.release[0] != 0);
  CHECK("version present", u.version[0] != 0);

  /* Identity: relations only. */
  CHECK("getpid > 0", getpid() > 0);
  CHECK("getpid == gettid in the main thread", getpid() == syscall(SYS_gettid));
  CHECK("getpid stable", getpid() == getpid());
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  CHECK("getresuid succeeds", getresuid(&ru, &eu, &su) == 0);
  CHECK("getresgid succeeds", getresgid(&rg, &eg, &sg) == 0);
  CHECK("getuid == real uid", getuid() == ru);
  CHECK("geteuid == effective uid", geteuid() == eu);
  CHECK("getgid == real gid", getgid() == rg);
  CHECK("getegid == effective gid", getegid() == eg);
  CHECK("uid == euid == suid", ru == eu && eu == su);
  CHECK("gid == egid == sgid", rg == eg && eg == sg);

  /* Resource limits via prlimit64. */
  struct rlimit rl;
  CHECK("getrlimit(RLIMIT_STACK)", getrlimit(RLIMIT_STACK, &rl) == 0);
  CHECK("stack limit sane (>= 128 KiB, cur <= max)",
        rl.rlim_cur >= 128 * 1024 && (rl.rlim_max == RLIM_INFINITY || rl.rlim_cur <= rl.rlim_max));
  CHECK("getrlimit(RLIMIT_NOFILE)", getrlimit(RLIMIT_NOFILE, &rl) == 0);
  CHECK("nofile limit sane (>= 64, cur <= max)", rl.rlim_cur >= 64 && rl.rlim_cur <= rl.rlim_max);
  struct rlimit old;
  CHECK("prlimit(0, RLIMIT_NOFILE) query", prlimit(0, RLIMIT_NOFILE, NULL, &old) == 0 && old.rlim_cur == rl.rlim_cur);
  struct rlimit lower = {64, old.rlim_max};
  CHECK("setrlimit lowers RLIMIT_NOFILE", setrlimit(RLIMIT_NOFILE, &lower) == 0);
  CHECK("lowered limit reads back", getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur == 64);
  CHECK("restore RLIMIT_NOFILE", setrlimit(RLIMIT_NOFILE, &old) == 0);
  struct rlimit inverted = {old.rlim_max == RLIM_INFINITY ? 100 : old.rlim_max, 10};
  CHECK_ERRNO("setrlimit cur > max -> EINVAL", setrlimit(RLIMIT_NOFILE, &inverted), EINVAL);
  CHECK_ERRNO("getrlimit bad resource -> EINVAL", getrlimit(999, &rl), EINVAL);

  /* getrandom. */
  unsigned char r1[64], r2[64];
  memset(r1, 0, sizeof r1);
  memset(r2, 0, sizeof r2);
  CHECK("getrandom fills 64 bytes", sys_getrandom(r1, sizeof r1, 0) == 64);
  CHECK("getrandom GRND_NONBLOCK fills 64 bytes", sys_getrandom(r2, sizeof r2, GRND_NONBLOCK) == 64);
  CHECK("two getrandom results differ", memcmp(r1, r2, sizeof r1) != 0);
  int nz = 0;
  for (int i = 0; i < 64; i++) nz += r1[i] != 0;
  CHECK("getrandom bytes not all zero", nz > 0);
  CHECK_ERRNO("getrandom bad flags -> EINVAL", sys_getrandom(r1, 8, 0xff00), EINVAL);
  CHECK_ERRNO("getrandom bad pointer -> EFAULT", sys_getrandom((void *)8, 8, 0), EFAULT);
  static unsigned char bigr[1 << 20];
  long got = sys_getrandom(bigr, sizeof bigr, 0);
  CHECK("getrandom 1 MiB returns > 0", got > 0);

  /* Scheduling. */
  cpu_set_t set;
  CPU_ZERO(&set);
  CHECK("sched_getaffinity succeeds", sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK("at least one CPU in affinity mask", CPU_COUNT(&set) >= 1);
  CHECK("sched_yield returns 0", sched_yield() == 0);
  long raw = syscall(SYS_sched_getaffinity, 0, sizeof set, &set);
  CHECK("raw sched_getaffinity returns a size multiple of 8", raw > 0 && raw % 8 == 0);

  /* stdio: compare.sh gives stdin=/dev/null, stdout and stderr regular files
   * (or pipes); both are "not a tty", so this output is deterministic. */
  errno = 0;
  int tty0 = isatty(0);
  int e0 = errno;
  printf("isatty(0): %d%s\n", tty0, (!tty0 && e0 == ENOTTY) ? " (ENOTTY)" : "");
  errno = 0;
  int tty1 = isatty(1);
  int e1 = errno;
  printf("isatty(1): %d%s\n", tty1, (!tty1 && e1 == ENOTTY) ? " (ENOTTY)" : "");
  struct termios tio;
  CHECK_ERRNO("TCGETS on stdin (/dev/null) -> ENOTTY", tcgetattr(0, &tio), ENOTTY);
  struct stat st0, st1, st1b;
  CHECK("fstat(0)", fstat(0, &st0) == 0);
  printf("stdin is a %s\n", ftype(st0.st_mode));
  CHECK("fstat(1)", fstat(1, &st1) == 0);
  CHECK("newfstatat(1, \"\", AT_EMPTY_PATH)", fstatat(1, "", &st1b, AT_EMPTY_PATH) == 0);
  CHECK("fstat and newfstatat agree", st1.st_ino == st1b.st_ino && st1.st_dev == st1b.st_dev &&
                                         st1.st_mode == st1b.st_mode);
  CHECK("stdout is a regular file or a pipe", S_ISREG(st1.st_mode) || S_ISFIFO(st1.st_mode));
  CHECK_ERRNO("fstat of a bad fd -> EBADF", fstat(77, &st0), EBADF);
  CHECK("getpagesize() == 4096", getpagesize() == 4096);
  return finish();
}
