/* membarrier(2): the commands and their errors, registrations kept across
 * fork and dropped by execve, and barriers used the way liburcu and
 * runtimes do (an asymmetric Dekker pair: the fast side has only a compiler
 * barrier, the slow side calls membarrier).
 *
 * QUERY is checked for the commands every kernel with membarrier has
 * (GLOBAL, the expedited ones and their registrations); the SYNC_CORE and
 * RSEQ bits depend on the kernel's configuration and are not printed. */
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define CMD_QUERY 0
#define CMD_GLOBAL (1 << 0)
#define CMD_GLOBAL_EXPEDITED (1 << 1)
#define CMD_REGISTER_GLOBAL_EXPEDITED (1 << 2)
#define CMD_PRIVATE_EXPEDITED (1 << 3)
#define CMD_REGISTER_PRIVATE_EXPEDITED (1 << 4)
#define CMD_GET_REGISTRATIONS (1 << 9)

static long membarrier(int cmd, unsigned flags) {
  return syscall(SYS_membarrier, cmd, flags, 0);
}

/* The Dekker pair: never may both sides read the other's flag as 0. */
static volatile int flag_a, flag_b, seen_by_a, seen_by_b;
static volatile int round_no, done_round;

static void* fast_side(void* arg) {
  (void)arg;
  for (int r = 1; r <= 200; r++) {
    while (round_no != r) {
    }
    flag_a = 1;
    __asm__ __volatile__("" ::: "memory");
    seen_by_a = flag_b;
    done_round = r;
  }
  return NULL;
}

static int exec_child(void) {
  /* execve gave this process a new mm: no registrations. */
  long regs = membarrier(CMD_GET_REGISTRATIONS, 0);
  CHECK("after execve: no registrations", regs == 0);
  CHECK_ERRNO("after execve: PRIVATE_EXPEDITED unregistered",
              membarrier(CMD_PRIVATE_EXPEDITED, 0), EPERM);
  return g_failures ? 1 : 0;  /* the parent prints the RESULT line */
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "exec-child") == 0) return exec_child();
  setvbuf(stdout, NULL, _IONBF, 0);

  long q = membarrier(CMD_QUERY, 0);
  const long basic = CMD_GLOBAL | CMD_GLOBAL_EXPEDITED |
                     CMD_REGISTER_GLOBAL_EXPEDITED | CMD_PRIVATE_EXPEDITED |
                     CMD_REGISTER_PRIVATE_EXPEDITED;
  CHECK("QUERY lists the basic commands", q >= 0 && (q & basic) == basic);
  CHECK_ERRNO("QUERY with flags", membarrier(CMD_QUERY, 1), EINVAL);
  CHECK_ERRNO("unknown command", membarrier(1 << 12, 0), EINVAL);
  CHECK_ERRNO("negative command", membarrier(-1, 0), EINVAL);

  CHECK_ERRNO("PRIVATE_EXPEDITED before registering",
              membarrier(CMD_PRIVATE_EXPEDITED, 0), EPERM);
  CHECK("no registrations yet", membarrier(CMD_GET_REGISTRATIONS, 0) == 0);
  CHECK("REGISTER_PRIVATE_EXPEDITED",
        membarrier(CMD_REGISTER_PRIVATE_EXPEDITED, 0) == 0);
  CHECK("REGISTER_GLOBAL_EXPEDITED",
        membarrier(CMD_REGISTER_GLOBAL_EXPEDITED, 0) == 0);
  CHECK("GET_REGISTRATIONS shows both",
        membarrier(CMD_GET_REGISTRATIONS, 0) ==
            (CMD_REGISTER_PRIVATE_EXPEDITED | CMD_REGISTER_GLOBAL_EXPEDITED));
  CHECK("PRIVATE_EXPEDITED", membarrier(CMD_PRIVATE_EXPEDITED, 0) == 0);
  CHECK_ERRNO("PRIVATE_EXPEDITED with flags",
              membarrier(CMD_PRIVATE_EXPEDITED, 1), EINVAL);
  CHECK("GLOBAL", membarrier(CMD_GLOBAL, 0) == 0);
  CHECK("GLOBAL_EXPEDITED", membarrier(CMD_GLOBAL_EXPEDITED, 0) == 0);

  /* fork keeps the registrations (the child's mm is a copy). */
  pid_t pid = fork();
  if (pid == 0) {
    int ok = membarrier(CMD_PRIVATE_EXPEDITED, 0) == 0 &&
             membarrier(CMD_GET_REGISTRATIONS, 0) ==
                 (CMD_REGISTER_PRIVATE_EXPEDITED |
                  CMD_REGISTER_GLOBAL_EXPEDITED);
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK("fork keeps the registrations", WIFEXITED(st) && WEXITSTATUS(st) == 0);

  /* The asymmetric Dekker pair. */
  pthread_t th;
  pthread_create(&th, NULL, fast_side, NULL);
  int both_zero = 0, failed = 0;
  for (int r = 1; r <= 200; r++) {
    flag_a = flag_b = 0;
    seen_by_a = seen_by_b = -1;
    __sync_synchronize();
    round_no = r;
    flag_b = 1;
    if (membarrier(CMD_PRIVATE_EXPEDITED, 0) != 0) failed++;
    seen_by_b = flag_a;
    while (done_round != r) {
    }
    if (seen_by_a == 0 && seen_by_b == 0) both_zero++;
  }
  pthread_join(th, NULL);
  CHECK("200 barriers succeed", failed == 0);
  CHECK("no round where both sides missed the other", both_zero == 0);

  /* execve drops them (checked by the new image). */
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "membarrier", "exec-child", (char*)NULL);
    _exit(127);
  }
  waitpid(pid, &st, 0);
  CHECK("the exec'd child's checks pass", WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return finish();
}
