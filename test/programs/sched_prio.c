/* Scheduling priorities as a program sees them: nice values
 * (getpriority/setpriority for a thread, a process group, a user; the
 * RLIMIT_NICE rule for an unprivileged user), I/O priorities
 * (ioprio_get/set), scheduling policies (sched_setscheduler & co.,
 * sched_setattr/getattr) and their errors, and clock_settime and
 * settimeofday without CAP_SYS_TIME (EPERM).  Must run as root; the
 * unprivileged checks run in forked children that drop to uid 1000.
 */
#define _GNU_SOURCE
#include <grp.h>
#include <sched.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define IOPRIO(cls, data) (((cls) << 13) | (data))

struct sched_attr_v0 {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime, sched_deadline, sched_period;
};

struct cap_header {
  uint32_t version;
  int pid;
};
struct cap_data {
  uint32_t effective, permitted, inheritable;
};

/* Raw calls: musl's sched_setscheduler & co. are ENOSYS by design. */
static int set_sched(pid_t pid, int policy, const struct sched_param *p) {
  return (int)syscall(SYS_sched_setscheduler, pid, policy, p);
}
static int get_sched(pid_t pid) { return (int)syscall(SYS_sched_getscheduler, pid); }
static int get_param(pid_t pid, struct sched_param *p) {
  return (int)syscall(SYS_sched_getparam, pid, p);
}

static int child(void (*fn)(void)) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    fn();
    fflush(stdout);
    _exit(g_failures ? 1 : 0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void nice_as_root(void) {
  errno = 0;
  CHECK("getpriority self 0", getpriority(PRIO_PROCESS, 0) == 0 && errno == 0);
  CHECK("raw getpriority is 20-nice", syscall(SYS_getpriority, PRIO_PROCESS, 0) == 20);
  CHECK("setpriority 5", setpriority(PRIO_PROCESS, 0, 5) == 0);
  CHECK("getpriority 5", getpriority(PRIO_PROCESS, 0) == 5);
  {
    /* /proc/self/stat: priority (20 + nice) and nice, fields 18 and 19. */
    FILE *f = fopen("/proc/self/stat", "r");
    char buf[1024] = {0};
    if (f != NULL) {
      if (fgets(buf, sizeof(buf), f) == NULL) buf[0] = 0;
      fclose(f);
    }
    const char *p = strrchr(buf, ')');
    int field = 2, prio = -100, ni = -100;
    for (; p != NULL && *p; p++) {
      if (*p != ' ') continue;
      field++;
      if (field == 18) prio = atoi(p + 1);
      if (field == 19) ni = atoi(p + 1);
    }
    CHECK("/proc/self/stat priority and nice", prio == 25 && ni == 5);
  }
  CHECK("nice(2) adds", nice(2) == 7);
  CHECK("setpriority clamps 100", setpriority(PRIO_PROCESS, 0, 100) == 0 &&
                                      getpriority(PRIO_PROCESS, 0) == 19);
  CHECK("root lowers to -5", setpriority(PRIO_PROCESS, 0, -5) == 0 &&
                                 getpriority(PRIO_PROCESS, 0) == -5);
  CHECK_ERRNO("bad which", setpriority(99, 0, 0), EINVAL);
  CHECK_ERRNO("no such pid", setpriority(PRIO_PROCESS, 999999, 0), ESRCH);
  CHECK_ERRNO("getpriority no such pgrp", getpriority(PRIO_PGRP, 999999), ESRCH);
  /* A process group of its own: the group's value is its members'. */
  CHECK("setpgid", setpgid(0, 0) == 0);
  CHECK("setpriority pgrp", setpriority(PRIO_PGRP, 0, 3) == 0);
  CHECK("getpriority pgrp", getpriority(PRIO_PGRP, 0) == 3);
  CHECK("getpriority self after pgrp", getpriority(PRIO_PROCESS, 0) == 3);
  /* A child inherits the nice value. */
  pid_t c = fork();
  if (c == 0) _exit(getpriority(PRIO_PROCESS, 0) == 3 ? 0 : 1);
  int st;
  waitpid(c, &st, 0);
  CHECK("fork inherits nice", WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void nice_as_user(void) {
  struct rlimit zero = {0, 0};
  CHECK("RLIMIT_NICE 0", setrlimit(RLIMIT_NICE, &zero) == 0);
  CHECK("setgroups", setgroups(0, NULL) == 0);
  CHECK("setresgid 1000", setresgid(1000, 1000, 1000) == 0);
  CHECK("setresuid 1000", setresuid(1000, 1000, 1000) == 0);
  CHECK("user raises nice", setpriority(PRIO_PROCESS, 0, 10) == 0);
  CHECK_ERRNO("user lowers nice", setpriority(PRIO_PROCESS, 0, 5), EACCES);
  CHECK("setpriority PRIO_USER", setpriority(PRIO_USER, 1000, 12) == 0);
  CHECK("getpriority PRIO_USER", getpriority(PRIO_USER, 1000) == 12);
  CHECK_ERRNO("user sets root's", setpriority(PRIO_PROCESS, getppid(), 15), EPERM);
  CHECK_ERRNO("user ioprio RT", syscall(SYS_ioprio_set, 1, 0, IOPRIO(1, 0)), EPERM);
  CHECK("user ioprio BE", syscall(SYS_ioprio_set, 1, 0, IOPRIO(2, 6)) == 0);
  CHECK_ERRNO("user ioprio of root", syscall(SYS_ioprio_set, 1, getppid(), IOPRIO(2, 6)),
              EPERM);
  struct sched_param p = {0};
  CHECK("user SCHED_BATCH", set_sched(0, SCHED_BATCH, &p) == 0);
  p.sched_priority = 1;
  CHECK_ERRNO("user SCHED_FIFO", set_sched(0, SCHED_FIFO, &p), EPERM);
  p.sched_priority = 0;
  CHECK_ERRNO("user sets root's policy", set_sched(getppid(), SCHED_BATCH, &p),
              EPERM);
}

static void ioprio_as_root(void) {
  CHECK("ioprio_get default", syscall(SYS_ioprio_get, 1, 0) == 0);
  CHECK("ioprio_set BE 3", syscall(SYS_ioprio_set, 1, 0, IOPRIO(2, 3)) == 0);
  CHECK("ioprio_get BE 3", syscall(SYS_ioprio_get, 1, 0) == IOPRIO(2, 3));
  CHECK("ioprio_set IDLE", syscall(SYS_ioprio_set, 1, 0, IOPRIO(3, 0)) == 0);
  CHECK("ioprio_get IDLE", syscall(SYS_ioprio_get, 1, 0) == IOPRIO(3, 0));
  CHECK("ioprio_set RT 2 as root", syscall(SYS_ioprio_set, 1, 0, IOPRIO(1, 2)) == 0);
  CHECK("ioprio_get RT 2", syscall(SYS_ioprio_get, 1, 0) == IOPRIO(1, 2));
  CHECK_ERRNO("ioprio class 5", syscall(SYS_ioprio_set, 1, 0, IOPRIO(5, 0)), EINVAL);
  CHECK_ERRNO("ioprio NONE with data", syscall(SYS_ioprio_set, 1, 0, IOPRIO(0, 1)), EINVAL);
  CHECK_ERRNO("ioprio bad which", syscall(SYS_ioprio_get, 9, 0), EINVAL);
  CHECK_ERRNO("ioprio no such pid", syscall(SYS_ioprio_get, 1, 999999), ESRCH);
  CHECK("ioprio_set BE 1", syscall(SYS_ioprio_set, 1, 0, IOPRIO(2, 1)) == 0);
  pid_t c = fork();
  if (c == 0) _exit(syscall(SYS_ioprio_get, 1, 0) == IOPRIO(2, 1) ? 0 : 1);
  int st;
  waitpid(c, &st, 0);
  CHECK("fork inherits ioprio", WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void sched_calls(void) {
  struct sched_param p = {0};
  CHECK("getscheduler OTHER", get_sched(0) == SCHED_OTHER);
  CHECK("max FIFO", sched_get_priority_max(SCHED_FIFO) == 99);
  CHECK("min RR", sched_get_priority_min(SCHED_RR) == 1);
  CHECK("max OTHER", sched_get_priority_max(SCHED_OTHER) == 0);
  CHECK_ERRNO("max bad policy", sched_get_priority_max(42), EINVAL);
  CHECK("setscheduler BATCH", set_sched(0, SCHED_BATCH, &p) == 0);
  CHECK("getscheduler BATCH", get_sched(0) == SCHED_BATCH);
  CHECK("setscheduler IDLE|RESET_ON_FORK",
        set_sched(0, SCHED_IDLE | SCHED_RESET_ON_FORK, &p) == 0);
  CHECK("getscheduler shows RESET_ON_FORK",
        get_sched(0) == (SCHED_IDLE | SCHED_RESET_ON_FORK));
  CHECK("setscheduler OTHER", set_sched(0, SCHED_OTHER, &p) == 0);
  CHECK("getparam 0", get_param(0, &p) == 0 && p.sched_priority == 0);
  p.sched_priority = 5;
  CHECK_ERRNO("OTHER with priority 5", set_sched(0, SCHED_OTHER, &p), EINVAL);
  p.sched_priority = 0;
  CHECK_ERRNO("FIFO with priority 0", set_sched(0, SCHED_FIFO, &p), EINVAL);
  p.sched_priority = 100;
  CHECK_ERRNO("FIFO with priority 100", set_sched(0, SCHED_FIFO, &p), EINVAL);
  p.sched_priority = 0;
  CHECK_ERRNO("policy 42", set_sched(0, 42, &p), EINVAL);
  CHECK_ERRNO("pid -1", set_sched(-1, SCHED_OTHER, &p), EINVAL);
  CHECK_ERRNO("no such pid", set_sched(999999, SCHED_OTHER, &p), ESRCH);
  CHECK_ERRNO("getscheduler no such pid", get_sched(999999), ESRCH);
  CHECK_ERRNO("setparam null", syscall(SYS_sched_setparam, 0, NULL), EINVAL);
  CHECK_ERRNO("getparam null", syscall(SYS_sched_getparam, 0, NULL), EINVAL);

  struct sched_attr_v0 a = {0};
  a.size = sizeof(a);
  a.sched_policy = SCHED_OTHER;
  a.sched_nice = 4;
  CHECK("sched_setattr nice 4", syscall(SYS_sched_setattr, 0, &a, 0) == 0);
  CHECK("nice is 4", getpriority(PRIO_PROCESS, 0) == 4);
  struct sched_attr_v0 g = {0};
  CHECK("sched_getattr", syscall(SYS_sched_getattr, 0, &g, sizeof(g), 0) == 0);
  CHECK("getattr fields", g.size == sizeof(g) && g.sched_policy == SCHED_OTHER &&
                              g.sched_nice == 4 && g.sched_priority == 0);
  CHECK_ERRNO("getattr small size", syscall(SYS_sched_getattr, 0, &g, 8, 0), EINVAL);
  CHECK_ERRNO("getattr flags", syscall(SYS_sched_getattr, 0, &g, sizeof(g), 1), EINVAL);
  CHECK_ERRNO("setattr flags", syscall(SYS_sched_setattr, 0, &a, 1), EINVAL);
  a.size = 20;
  CHECK_ERRNO("setattr size 20", syscall(SYS_sched_setattr, 0, &a, 0), E2BIG);
  a.size = sizeof(a);
  a.sched_policy = 6; /* SCHED_DEADLINE with no runtime */
  CHECK_ERRNO("deadline without params", syscall(SYS_sched_setattr, 0, &a, 0), EINVAL);
  a.sched_policy = SCHED_OTHER;
  a.sched_nice = 0;
  CHECK("back to nice 0", syscall(SYS_sched_setattr, 0, &a, 0) == 0);
}

static void clocks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct timespec bad = {ts.tv_sec, 2000000000};
  CHECK_ERRNO("clock_settime bad nsec", clock_settime(CLOCK_REALTIME, &bad), EINVAL);
  CHECK_ERRNO("clock_settime MONOTONIC", clock_settime(CLOCK_MONOTONIC, &ts), EINVAL);
  CHECK_ERRNO("clock_settime bad clock", clock_settime(1234, &ts), EINVAL);
  /* Without CAP_SYS_TIME (as in any container): EPERM. */
  struct cap_header h = {0x20080522, 0};
  struct cap_data d[2];
  syscall(SYS_capget, &h, d);
  d[0].effective &= ~(1u << 25); /* CAP_SYS_TIME */
  CHECK("capset drops CAP_SYS_TIME", syscall(SYS_capset, &h, d) == 0);
  CHECK_ERRNO("clock_settime REALTIME", clock_settime(CLOCK_REALTIME, &ts), EPERM);
  struct timeval tv = {ts.tv_sec, 0};
  CHECK_ERRNO("settimeofday", settimeofday(&tv, NULL), EPERM);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (getuid() != 0) {
    printf("sched_prio: must run as root\nRESULT: FAIL\n");
    return 1;
  }
  CHECK("nice as root", child(nice_as_root));
  CHECK("nice as a user", child(nice_as_user));
  CHECK("ioprio", child(ioprio_as_root));
  CHECK("sched calls", child(sched_calls));
  CHECK("clocks", child(clocks));
  return finish();
}
