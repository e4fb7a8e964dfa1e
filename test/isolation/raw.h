/* Raw x86-64 system calls (the `syscall` instruction, no libc wrapper) and
 * PASS/FAIL reporting for the isolation tests.
 *
 * Every isolation program prints "PASS: ..." / "FAIL: ..." lines and exits 0
 * only when every check passed. They are meant to run inside the sandbox only
 * (test/isolation.sh); natively most of them FAIL, which shows that the
 * checks detect a real kernel. Arguments "canary=PID" and "secret=PATH" are
 * supplied by isolation.sh.
 */
#ifndef SBX_ISOLATION_RAW_H
#define SBX_ISOLATION_RAW_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline long raw6(long n, long a1, long a2, long a3, long a4, long a5, long a6) {
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}
#define raw0(n) raw6((n), 0, 0, 0, 0, 0, 0)
#define raw1(n, a) raw6((n), (long)(a), 0, 0, 0, 0, 0)
#define raw2(n, a, b) raw6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define raw3(n, a, b, c) raw6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define raw4(n, a, b, c, d) raw6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

/* x86-64 syscall numbers (kept here so that no kernel headers are needed). */
enum {
  NR_read = 0, NR_write = 1, NR_open = 2, NR_close = 3, NR_fstat = 5, NR_mmap = 9,
  NR_mprotect = 10, NR_munmap = 11, NR_brk = 12, NR_rt_sigprocmask = 14, NR_madvise = 28,
  NR_mremap = 25, NR_getpid = 39, NR_execve = 59, NR_kill = 62, NR_ptrace = 101,
  NR_getppid = 110, NR_modify_ldt = 154, NR_iopl = 172, NR_ioperm = 173, NR_gettid = 186,
  NR_futex = 202, NR_clock_gettime = 228, NR_exit_group = 231, NR_tgkill = 234,
  NR_openat = 257, NR_newfstatat = 262, NR_open_by_handle_at = 304,
  NR_process_vm_readv = 310, NR_process_vm_writev = 311, NR_openat2 = 437,
};

static int g_fails, g_passes;

static __attribute__((unused)) void report(int ok, const char *what, long ret) {
  if (ok) {
    g_passes++;
    printf("PASS: %s (ret=%ld)\n", what, ret);
  } else {
    g_fails++;
    printf("FAIL: %s (ret=%ld)\n", what, ret);
  }
  fflush(stdout);
}

/* Returns the value of "key=VALUE" among the arguments, or NULL. */
static __attribute__((unused)) const char *arg_value(int argc, char **argv, const char *key) {
  size_t k = strlen(key);
  for (int i = 1; i < argc; i++)
    if (strncmp(argv[i], key, k) == 0 && argv[i][k] == '=') return argv[i] + k + 1;
  return NULL;
}

static __attribute__((unused)) int done(void) {
  printf("%d passed, %d failed\n", g_passes, g_fails);
  fflush(stdout);
  return g_fails || !g_passes ? 1 : 0;
}

#define E_PERM 1
#define E_NOENT 2
#define E_SRCH 3
#define E_BADF 9
#define E_AGAIN 11
#define E_NOMEM 12
#define E_ACCES 13
#define E_FAULT 14
#define E_EXIST 17
#define E_INVAL 22
#define E_NOSYS 38

#endif
