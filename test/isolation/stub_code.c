/* Code in the systrap stub is not a key: the program finds a `syscall`
 * instruction inside the stub's own code (at its fixed address,
 * platforms/systrap/layout.h; /proc/self/maps does not show it) and jumps
 * there with registers of its choosing, once per attack, each in a child
 * of its own. A call the stub's filter allows from there must be harmless;
 * every other one ends the child (the Sentry sees its stub process die).
 * FAIL when an attack's call returns with success, or when a child that
 * blocked its host signals with a forged rt_sigreturn is not ended by
 * SIGKILL within 5 s. On another platform (no stub code) it says so and
 * passes. stub_code_test.sh checks afterwards that no host process of the
 * sandbox is left. With the argument "spin" it only blocks its host
 * signals and spins (sandboxctl_test.sh kills that through sandboxd). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "raw.h"

#define STUB_BASE 0x7e0000000000ul
#define STUB_CODE_SIZE (1ul << 20)
#define STUB_SHARED (STUB_BASE + STUB_CODE_SIZE)
#define STUB_STACKS (STUB_SHARED + (32ul << 20))

/* The stub's sa_restorer: mov $15,%eax; syscall; ud2. */
static const unsigned char kRestorer[] = {0xb8, 0x0f, 0x00, 0x00, 0x00,
                                          0x0f, 0x05, 0x0f, 0x0b};
static uintptr_t g_syscall; /* its `syscall`: ud2 follows */
static sigjmp_buf g_jmp;
static volatile long g_result;

static void on_sigill(int sig, siginfo_t *si, void *ucv) {
  ucontext_t *uc = ucv;
  g_result = uc->uc_mcontext.gregs[REG_RAX];
  siglongjmp(g_jmp, 1);
}

/* Finds the restorer by reading the stub's code (readable from the
 * application: that is the point). A fault means no stub there. */
static sigjmp_buf g_probe;
static void on_sigsegv(int sig) { siglongjmp(g_probe, 1); }

static int find_stub(void) {
  struct sigaction sa = {0};
  sa.sa_handler = on_sigsegv;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  int found = 0;
  if (sigsetjmp(g_probe, 1) == 0) {
    const unsigned char *p = (const unsigned char *)STUB_BASE;
    for (size_t i = 0; i + sizeof(kRestorer) < STUB_CODE_SIZE; i++) {
      if (memcmp(p + i, kRestorer, sizeof(kRestorer)) == 0) {
        g_syscall = STUB_BASE + i + 5;
        found = 1;
        break;
      }
    }
  }
  sa.sa_handler = SIG_DFL;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
  return found;
}

/* The call `nr` with args made by the stub's `syscall` instruction;
 * returns its result (back through the ud2 after it). */
static long stub_call(long nr, long a1, long a2, long a3, long a4, long a5,
                      long a6) {
  struct sigaction sa = {0};
  sa.sa_sigaction = on_sigill;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGILL, &sa, NULL);
  if (sigsetjmp(g_jmp, 1) == 0) {
    register long r10 __asm__("r10") = a4;
    register long r8 __asm__("r8") = a5;
    register long r9 __asm__("r9") = a6;
    __asm__ volatile("jmp *%[target]"
                     :
                     : [target] "m"(g_syscall), "a"(nr), "D"(a1), "S"(a2),
                       "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                     : "memory");
  }
  return g_result;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Waits up to `secs` for the child; returns its status or -1. */
static int wait_for(pid_t pid, double secs) {
  double end = now() + secs;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    if (now() > end) return -1;
    usleep(2000);
  }
}

/* One attack in a child: the child prints "RETURNED <ret>" and exits 0 if
 * the call came back; ok(ret) says whether that result is harmless. */
static const char *g_only; /* only=WORD: the attacks whose name has it */

static void attack(const char *what, long nr, long a1, long a2, long a3,
                   long a4, long a5, long a6, int (*ok)(long)) {
  if (g_only != NULL && strstr(what, g_only) == NULL) return;
  int fds[2];
  if (pipe(fds) != 0) abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    long r = stub_call(nr, a1, a2, a3, a4, a5, a6);
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%ld", r);
    raw3(NR_write, fds[1], buf, n); /* raw: libc may be unusable now */
    raw1(NR_exit_group, 0);
  }
  close(fds[1]);
  int st = wait_for(pid, 20);
  char buf[64] = {0};
  ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  if (st < 0) {
    kill(pid, SIGKILL);
    report(0, what, -1);
    waitpid(pid, NULL, 0);
    return;
  }
  if (n > 0) {
    long r = strtol(buf, NULL, 10);
    report(ok(r), what, r);
  } else {
    /* Ended by the filter (the stub process was killed). */
    report(1, what, WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st));
  }
}

static int is_error(long r) { return r < 0 && r > -4096; }
static int never(long r) { return 0; }

/* The forged rt_sigreturn: a frame whose mask blocks every signal and
 * whose rip is a loop without system calls. */
static char g_spin_stack[16384] __attribute__((aligned(16)));
static void spin(void) {
  for (;;) __asm__ volatile("pause");
}

static void forged_sigreturn(void) {
  static ucontext_t uc __attribute__((aligned(64)));
  memset(&uc, 0, sizeof(uc));
  unsigned short cs, ss;
  __asm__ volatile("mov %%cs, %0" : "=r"(cs));
  __asm__ volatile("mov %%ss, %0" : "=r"(ss));
  uc.uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)spin;
  uc.uc_mcontext.gregs[REG_RSP] =
      (greg_t)(uintptr_t)(g_spin_stack + sizeof(g_spin_stack) - 8);
  uc.uc_mcontext.gregs[REG_EFL] = 0x202;
  uc.uc_mcontext.gregs[REG_CSGSFS] = (greg_t)cs | ((greg_t)ss << 48);
  uc.uc_mcontext.fpregs = NULL;
  memset(&uc.uc_sigmask, 0xff, 8);
  /* rt_sigreturn reads the frame at rsp (the restorer runs after the
   * handler's `ret` popped the return address). */
  __asm__ volatile("mov %0, %%rsp\n\tmov $15, %%eax\n\tjmp *%1"
                   :
                   : "r"(&uc), "m"(g_syscall)
                   : "memory");
}

static void sigreturn_attack(void) {
  pid_t pid = fork();
  if (pid == 0) {
    forged_sigreturn();
    raw1(NR_exit_group, 0);
  }
  usleep(300 * 1000); /* let it block its signals and spin */
  double t0 = now();
  kill(pid, SIGKILL);
  int st = wait_for(pid, 5);
  double took = now() - t0;
  if (st < 0) {
    report(0, "SIGKILL ends a child that forged rt_sigreturn (within 5 s)",
           -1);
    return;
  }
  printf("killed in %.0f ms\n", took * 1000);
  report(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
         "SIGKILL ends a child that forged rt_sigreturn (within 5 s)",
         WIFSIGNALED(st) ? WTERMSIG(st) : -1);
}

int main(int argc, char **argv) {
  g_only = arg_value(argc, argv, "only");
  if (!find_stub()) {
    printf("PASS: no systrap stub code at 0x%lx (another platform)\n",
           STUB_BASE);
    return 0;
  }
  printf("stub restorer syscall at 0x%lx\n", (unsigned long)g_syscall);
  fflush(stdout);
  /* spin: become the forged-rt_sigreturn spinner (sandboxctl_test.sh
   * kills such a sandbox through sandboxd). */
  if (argc > 1 && strcmp(argv[argc - 1], "spin") == 0) forged_sigreturn();
  /* A process outside the Sentry's tracking, its child. */
  attack("clone(CLONE_PARENT|SIGCHLD) from stub code", 56, 0x8000 | 17, 0,
         0, 0, 0, 0, never);
  attack("fork-like clone(SIGCHLD) from stub code", 56, 17, 0, 0, 0, 0, 0,
         never);
  attack("clone(CLONE_VM|CLONE_VFORK) from stub code", 56, 0x4100 | 17, 0,
         0, 0, 0, 0, never);
  /* Host signals and pids. */
  attack("kill(1, SIGKILL) from stub code", NR_kill, 1, 9, 0, 0, 0, 0,
         is_error);
  attack("tgkill(1, 1, SIGKILL) from stub code", NR_tgkill, 1, 1, 9, 0, 0,
         0, is_error);
  attack("getppid from stub code", NR_getppid, 0, 0, 0, 0, 0, 0, never);
  attack("prctl(PR_SET_PDEATHSIG, SIGKILL) from stub code", 157, 1, 9, 0,
         0, 0, 0, never);
  attack("close(4) from stub code", NR_close, 4, 0, 0, 0, 0, 0, never);
  attack("seccomp(SET_MODE_FILTER) from stub code", 317, 1, 0, 0, 0, 0, 0,
         never);
  /* Memory: over the stub, anonymous, of another fd. */
  attack("mmap(MAP_SHARED|MAP_FIXED of fd 3) over the stub's code",
         NR_mmap, STUB_BASE + STUB_CODE_SIZE - 4096, 4096, 7, 0x11, 3, 0,
         never);
  attack("mmap(MAP_SHARED|MAP_FIXED of fd 3) over the stub's stacks",
         NR_mmap, STUB_STACKS, 4096, 3, 0x11, 3, 0, never);
  attack("mmap(MAP_SHARED|MAP_FIXED) across kStubBase", NR_mmap,
         STUB_BASE - 4096, 8192, 3, 0x11, 3, 0, never);
  attack("mmap anonymous from stub code", NR_mmap, 0, 4096, 3, 0x22, -1, 0,
         never);
  attack("munmap of the stub's stacks", NR_munmap, STUB_STACKS, 4096, 0, 0,
         0, 0, never);
  attack("futex(FUTEX_LOCK_PI) from stub code", NR_futex, STUB_SHARED, 6, 0,
         0, 0, 0, never);
  attack("arch_prctl(ARCH_SET_CPUID) from stub code", 158, 0x1012, 0, 0, 0,
         0, 0, never);
  if (g_only == NULL || strstr("rt_sigreturn", g_only) != NULL) {
    sigreturn_attack();
  }
  return done();
}
