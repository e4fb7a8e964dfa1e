/* Raw `mov $nr, %eax; syscall` sites, called thousands of times so that the
 * sentry's syscall patching (sentry run --systrap-patch=on) rewrites them,
 * must behave exactly as the instruction does on Linux: the result in rax,
 * rcx = the next instruction, r11 = rflags, every other register, the
 * flags, the 128-byte red zone below rsp and the vector registers kept.
 * Also: signals delivered to a thread spinning in such syscalls (their
 * handlers return through glibc's rt_sigreturn site, patched too), fork
 * after patching (the child runs the patched text), and execve (the new
 * image starts without the old patch table).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

struct probe {
  uint64_t seed;        /* 0: in */
  uint64_t pid;         /* 8: out, from here on */
  uint64_t rcx, r11;    /* 16, 24 */
  uint8_t cf, sf, zf, pad[5];  /* 32 */
  uint64_t want_rcx;    /* 40: the address after `syscall` */
  uint64_t regs[12];    /* 48: rbx rdx rsi rbp r8 r9 r10 r12 r13 r14 r15 rdi */
  uint64_t red[16];     /* 144: the red zone words */
  uint64_t xmm0, xmm15; /* 272, 280 */
};

void patch_probe(struct probe* p);

/* A leaf function in assembly, so its red zone is its own: it fills the red
 * zone and the registers with values derived from the seed, sets CF and SF,
 * makes the raw syscall, and stores what it finds after it. */
__asm__(
    ".text\n"
    ".globl patch_probe\n"
    ".type patch_probe,@function\n"
    "patch_probe:\n\t"
    "push %rbx\n\tpush %rbp\n\tpush %r12\n\tpush %r13\n\tpush %r14\n\t"
    "push %r15\n\t"
    "mov (%rdi), %rax\n\t"
    ".irp i,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n\t"
    "mov %rax, -8-8*\\i(%rsp)\n\t"
    "inc %rax\n\t"
    ".endr\n\t"
    "mov (%rdi), %rbx\n\t"
    "lea 1(%rbx), %rdx\n\tlea 2(%rbx), %rsi\n\tlea 3(%rbx), %rbp\n\t"
    "lea 4(%rbx), %r8\n\tlea 5(%rbx), %r9\n\tlea 6(%rbx), %r10\n\t"
    "lea 7(%rbx), %r12\n\tlea 8(%rbx), %r13\n\tlea 9(%rbx), %r14\n\t"
    "lea 10(%rbx), %r15\n\t"
    "movq %rbx, %xmm0\n\t"
    "movq %rdx, %xmm15\n\t"
    "mov $1, %eax\n\t"
    "cmp $2, %eax\n\t" /* CF=1, SF=1, ZF=0 */
    "mov $39, %eax\n\t" /* getpid */
    "syscall\n"
    "1:\n\t"
    "mov %rax, 8(%rdi)\n\t"
    "mov %rcx, 16(%rdi)\n\t"
    "mov %r11, 24(%rdi)\n\t"
    "setc 32(%rdi)\n\t"
    "sets 33(%rdi)\n\t"
    "setz 34(%rdi)\n\t"
    "lea 1b(%rip), %rax\n\t"
    "mov %rax, 40(%rdi)\n\t"
    "mov %rbx, 48(%rdi)\n\tmov %rdx, 56(%rdi)\n\tmov %rsi, 64(%rdi)\n\t"
    "mov %rbp, 72(%rdi)\n\tmov %r8, 80(%rdi)\n\tmov %r9, 88(%rdi)\n\t"
    "mov %r10, 96(%rdi)\n\tmov %r12, 104(%rdi)\n\tmov %r13, 112(%rdi)\n\t"
    "mov %r14, 120(%rdi)\n\tmov %r15, 128(%rdi)\n\tmov %rdi, 136(%rdi)\n\t"
    ".irp i,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15\n\t"
    "mov -8-8*\\i(%rsp), %rax\n\t"
    "mov %rax, 144+8*\\i(%rdi)\n\t"
    ".endr\n\t"
    "movq %xmm0, %rax\n\tmov %rax, 272(%rdi)\n\t"
    "movq %xmm15, %rax\n\tmov %rax, 280(%rdi)\n\t"
    "pop %r15\n\tpop %r14\n\tpop %r13\n\tpop %r12\n\tpop %rbp\n\tpop %rbx\n\t"
    "ret\n"
    ".size patch_probe, .-patch_probe\n");

/* What was not kept across one probe: a bit per kind, 0 if all is well. */
enum {
  kErrPid = 1,
  kErrFlags = 2,
  kErrRegs = 4,
  kErrRedZone = 8,
  kErrRcx = 16,
  kErrR11 = 32,
  kErrXmm = 64,
};

static unsigned probe_once(uint64_t seed, uint64_t pid) {
  struct probe p;
  memset(&p, 0, sizeof(p));
  p.seed = seed;
  patch_probe(&p);
  unsigned err = 0;
  if (p.pid != pid) err |= kErrPid;
  if (p.cf != 1 || p.sf != 1 || p.zf != 0) err |= kErrFlags;
  for (int i = 0; i < 11; i++) {
    if (p.regs[i] != seed + (uint64_t)i) err |= kErrRegs;
  }
  if (p.regs[11] != (uint64_t)(uintptr_t)&p) err |= kErrRegs;
  for (int i = 0; i < 16; i++) {
    if (p.red[i] != seed + (uint64_t)i) err |= kErrRedZone;
  }
  if (p.rcx != p.want_rcx) err |= kErrRcx;
  /* r11 = rflags at the syscall: CF (bit 0) and SF (bit 7) set, ZF (6)
   * clear, and the always-one bit 1. */
  if ((p.r11 & 0xc3) != 0x83) err |= kErrR11;
  if (p.xmm0 != seed || p.xmm15 != seed + 1) err |= kErrXmm;
  return err;
}

/* Runs n probes; returns the OR of their errors. */
static unsigned probe_loop(int n, uint64_t seed) {
  uint64_t pid = (uint64_t)getpid();
  unsigned err = 0;
  for (int i = 0; i < n; i++) err |= probe_once(seed + (uint64_t)i * 97, pid);
  return err;
}

static void report(const char* what, unsigned err) {
  char name[128];
  snprintf(name, sizeof(name), "%s: pid", what);
  CHECK(name, (err & kErrPid) == 0);
  snprintf(name, sizeof(name), "%s: flags kept", what);
  CHECK(name, (err & kErrFlags) == 0);
  snprintf(name, sizeof(name), "%s: registers kept", what);
  CHECK(name, (err & kErrRegs) == 0);
  snprintf(name, sizeof(name), "%s: red zone kept", what);
  CHECK(name, (err & kErrRedZone) == 0);
  snprintf(name, sizeof(name), "%s: rcx = next instruction", what);
  CHECK(name, (err & kErrRcx) == 0);
  snprintf(name, sizeof(name), "%s: r11 = rflags", what);
  CHECK(name, (err & kErrR11) == 0);
  snprintf(name, sizeof(name), "%s: xmm kept", what);
  CHECK(name, (err & kErrXmm) == 0);
}

/* Signals to a thread spinning in raw syscalls. */
static volatile sig_atomic_t g_handled;
static volatile int g_stop;
static volatile pid_t g_spinner_tid;

static void on_usr1(int sig) {
  (void)sig;
  /* Some work with registers and the FPU in the handler. */
  volatile double d = 1.5;
  d = d * 3.0;
  if (d == 4.5) g_handled++;
}

static void* spinner(void* arg) {
  unsigned* err = arg;
  g_spinner_tid = (pid_t)syscall(SYS_gettid);
  uint64_t seed = 1u << 20;
  while (!g_stop) *err |= probe_loop(10, seed += 1000);
  return NULL;
}

/* Short-lived threads: their exits (glibc's `mov $60,%eax; syscall`) get
 * patched too, and a new thread may take the stub slot of one that left
 * from inside the patched path. */
static void* short_lived(void* arg) {
  unsigned* err = arg;
  *err |= probe_loop(20, 4242);
  return NULL;
}

static int exec_child(void) {
  /* A fresh image: no patch table left from the old one. */
  FILE* f = fopen("/proc/self/maps", "r");
  int found = 0;
  if (f != NULL) {
    char line[512];
    while (fgets(line, sizeof(line), f) != NULL) {
      if (strstr(line, "[sbx-patch]") != NULL) found = 1;
    }
    fclose(f);
  }
  CHECK("execve: no patch table in the new image", !found);
  report("execve: new image", probe_loop(3000, 77));
  return finish();
}

/* The probe's site as another reader sees it: /proc/self/mem gives the
 * program's own `mov $39,%eax; syscall` even where the sandbox patched it
 * (the program's own loads may see the patch: README "Reading patched
 * code"). */
static void check_site_through_proc_mem(void) {
  struct probe p;
  memset(&p, 0, sizeof(p));
  patch_probe(&p);
  const uint8_t want[7] = {0xb8, 39, 0, 0, 0, 0x0f, 0x05};
  uint8_t got[7] = {0};
  int fd = open("/proc/self/mem", O_RDONLY);
  CHECK("/proc/self/mem: opens", fd >= 0);
  ssize_t n = pread(fd, got, sizeof(got), (off_t)(p.want_rcx - sizeof(got)));
  CHECK("/proc/self/mem: reads the site", n == (ssize_t)sizeof(got));
  CHECK("/proc/self/mem: the site's original bytes",
        memcmp(got, want, sizeof(want)) == 0);
  /* Part of it, from inside. */
  n = pread(fd, got, 3, (off_t)(p.want_rcx - 4));
  CHECK("/proc/self/mem: part of the site",
        n == 3 && memcmp(got, want + 3, 3) == 0);
  if (fd >= 0) close(fd);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "exec-child") == 0) return exec_child();

  /* Many traps at one site: it gets patched early in the loop. */
  report("hot loop", probe_loop(5000, 1000));
  check_site_through_proc_mem();

  /* Signals to a thread spinning in the (patched) site. */
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  unsigned spin_err = 0;
  pthread_t t;
  pthread_create(&t, NULL, spinner, &spin_err);
  while (g_spinner_tid == 0) sched_yield();
  int sent = 0;
  for (int i = 0; i < 300; i++) {
    if (syscall(SYS_tgkill, getpid(), g_spinner_tid, SIGUSR1) == 0) sent++;
    while (g_handled < sent) sched_yield();
  }
  g_stop = 1;
  pthread_join(t, NULL);
  CHECK("signals: every one handled", g_handled == 300 && sent == 300);
  report("signals: spinning thread", spin_err);

  unsigned churn_err = 0;
  int joined = 0;
  for (int i = 0; i < 100; i++) {
    pthread_t c;
    if (pthread_create(&c, NULL, short_lived, &churn_err) != 0) break;
    if (pthread_join(c, NULL) == 0) joined++;
  }
  CHECK("threads: 100 short-lived threads joined", joined == 100);
  report("threads: short-lived", churn_err);

  /* Fork after patching: the child runs the patched text. */
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) _exit(probe_loop(3000, 5000) == 0 ? 0 : 1);
  int status = 0;
  waitpid(child, &status, 0);
  CHECK("fork: child's probes", WIFEXITED(status) && WEXITSTATUS(status) == 0);
  report("fork: parent after", probe_loop(1000, 9000));

  /* execve from a patched process. */
  fflush(stdout);
  child = fork();
  if (child == 0) {
    char* args[] = {argv[0], "exec-child", NULL};
    execv(argv[0], args);
    _exit(127);
  }
  waitpid(child, &status, 0);
  CHECK("execve: child passed", WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return finish();
}
