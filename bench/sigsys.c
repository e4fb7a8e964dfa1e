/* bench_sigsys: the signal floor of the systrap platform.
 *
 *   bench_sigsys trap|copy [N]     (default N = 100000)
 *
 * Every application syscall under systrap is a seccomp SECCOMP_RET_TRAP,
 * i.e. a SIGSYS delivered to the stub's handler, and ends with rt_sigreturn.
 * This program takes that path without any Sentry: it installs a seccomp
 * filter that traps getpid (and allows everything else) and a SIGSYS handler
 * that answers in place, then times N raw getpid calls (after N/10 warm-up
 * calls) and prints
 *   ns_per_call <float>
 *   xsave_bytes <int>        (copy mode: bytes of xsave image copied)
 *
 * trap  the handler only sets rax: signal delivery + sigreturn, the part
 *       of every systrap syscall that no hand-over design removes.
 * copy  the handler also does what the stub's handler does around the
 *       hand-over (platforms/systrap/stub/stub.cc): copies the 23 mcontext
 *       registers and the signal frame's xsave image (extended_size bytes,
 *       ~2.7 KB with AVX-512) into a MAP_SHARED slot laid out like
 *       ThreadSlot, reads the FS/GS bases, and copies registers and image
 *       back. copy - trap is the stub's own copy cost with a warm cache;
 *       when the Sentry on another core wrote the slot last, the cache-line
 *       transfers come on top (they show up in bench_pingpong's payload
 *       mode, not here).
 *
 * Like the stub, the handler runs on a sigaltstack with SA_SIGINFO |
 * SA_ONSTACK, and its copy loop uses general registers only. Static, C11. */
#define _GNU_SOURCE 1
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>

#include "stub_copy.h"

#ifndef HWCAP2_FSGSBASE
#define HWCAP2_FSGSBASE (1 << 1)
#endif

enum { kNumGregs = 23, kMaxFpSize = 4096 };
/* What the handler returns for getpid: not a real pid, so that the loop can
 * check that every call really went through the handler. */
enum { kFakePid = 0x5b5 };

/* The part of systrap's ThreadSlot (layout.h) that the stub's handler
 * writes and reads back, with the same alignment. */
struct slot {
  alignas(64) uint64_t gregs[kNumGregs];
  uint32_t fp_size;
  alignas(64) uint8_t fp[kMaxFpSize];
  uint64_t stub_fs_base, stub_gs_base;
};

static struct slot *g_slot;
static int g_fsgsbase;

static inline long raw_getpid(void) {
  long ret;
  __asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_getpid) : "rcx", "r11", "memory");
  return ret;
}

/* The stub's FpFrameSize(): the kernel's software bytes at offset 464 of
 * the fxsave area give the signal frame's xsave size (extended_size,
 * including the trailing FP_XSTATE_MAGIC2); 512 if only fxsave is there. */
static uint32_t fp_frame_size(const uint8_t *fp) {
  uint32_t sw[2];
  memcpy(sw, fp + 464, sizeof(sw));
  if (sw[0] != 0x46505853u /* FP_XSTATE_MAGIC1 */) return 512;
  if (sw[1] < 512 || sw[1] > kMaxFpSize) return 0;
  return sw[1] & ~7u;
}

static uint64_t read_fs_base(void) {
  uint64_t v = 0;
  if (g_fsgsbase)
    __asm__ volatile("rdfsbase %0" : "=r"(v));
  else
    syscall(SYS_arch_prctl, 0x1003 /* ARCH_GET_FS */, &v);
  return v;
}

static uint64_t read_gs_base(void) {
  uint64_t v = 0;
  if (g_fsgsbase)
    __asm__ volatile("rdgsbase %0" : "=r"(v));
  else
    syscall(SYS_arch_prctl, 0x1004 /* ARCH_GET_GS */, &v);
  return v;
}

static void trap_handler(int signo, siginfo_t *info, void *ucv) {
  (void)signo;
  (void)info;
  ucontext_t *uc = ucv;
  uc->uc_mcontext.gregs[REG_RAX] = kFakePid;
}

static void copy_handler(int signo, siginfo_t *info, void *ucv) {
  (void)signo;
  (void)info;
  ucontext_t *uc = ucv;
  struct slot *s = g_slot;
  greg_t *gregs = uc->uc_mcontext.gregs;
  uint8_t *fp = (uint8_t *)uc->uc_mcontext.fpregs;

  /* Out, as before the stub hands the slot to the Sentry. */
  for (int i = 0; i < kNumGregs; i++) s->gregs[i] = (uint64_t)gregs[i];
  uint32_t fp_size = fp != NULL ? fp_frame_size(fp) : 0;
  s->fp_size = fp_size;
  if (fp_size != 0) stub_copy(s->fp, fp, fp_size);
  s->stub_fs_base = read_fs_base();
  s->stub_gs_base = read_gs_base();

  /* Stands for the hand-over: the Sentry may have rewritten the whole slot,
   * so the compiler must not fold the copies back into nothing. */
  s->gregs[REG_RAX] = kFakePid;
  __asm__ volatile("" ::: "memory");

  /* Back, as after the Sentry hands the slot back: the registers the Sentry
   * may change (up to EFL) and the xsave image. */
  for (int i = 0; i <= REG_EFL; i++) gregs[i] = (greg_t)s->gregs[i];
  if (fp_size != 0 && s->fp_size == fp_size) stub_copy(fp, s->fp, fp_size);
}

static int install_filter(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getpid, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    perror("PR_SET_NO_NEW_PRIVS");
    return -1;
  }
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
    perror("seccomp");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  int copy = argc > 1 && strcmp(argv[1], "copy") == 0;
  if (argc < 2 || (!copy && strcmp(argv[1], "trap") != 0)) {
    fprintf(stderr, "usage: %s trap|copy [N>0]\n", argv[0]);
    return 2;
  }
  long n = argc > 2 ? atol(argv[2]) : 100000;
  if (n <= 0) {
    fprintf(stderr, "usage: %s trap|copy [N>0]\n", argv[0]);
    return 2;
  }

  g_fsgsbase = (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE) != 0;
  /* MAP_SHARED like the stub's slot (a memfd shared with the Sentry). */
  g_slot = mmap(NULL, sizeof(struct slot), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_slot == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  static alignas(64) uint8_t altstack[64 * 1024];
  stack_t ss = {.ss_sp = altstack, .ss_size = sizeof(altstack), .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) {
    perror("sigaltstack");
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = copy ? copy_handler : trap_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSYS, &sa, NULL) != 0) {
    perror("sigaction");
    return 1;
  }
  if (install_filter() != 0) return 1;

  long bad = 0;
  for (long i = 0; i < n / 10; i++) bad += raw_getpid() != kFakePid;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) bad += raw_getpid() != kFakePid;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (bad != 0) {
    fprintf(stderr, "%ld getpid calls did not go through the SIGSYS handler\n", bad);
    return 1;
  }
  double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
  printf("ns_per_call %.1f\n", ns / (double)n);
  if (copy) printf("xsave_bytes %u\n", g_slot->fp_size);
  return 0;
}
