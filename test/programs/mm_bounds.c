/* Every memory syscall across the top of the address space (Linux's
 * TASK_SIZE; a sandbox's top may be lower). The program finds the top
 * itself (the lowest page that mmap(MAP_FIXED_NOREPLACE) refuses with
 * ENOMEM) and prints each call's result for ranges relative to it: ending
 * at the top, crossing it, beyond it, wrapping around, of length 0,
 * unaligned and of a length that overflows when rounded. Results are
 * printed as "ok" or the errno's name, never addresses, so that a native
 * run and a sandboxed one print the same lines. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define P 4096ul

static uintptr_t top;
static unsigned char vec[1 << 16];

static const char* Name(long r) {
  if (r >= 0) return "ok";
  switch (-r) {
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EFAULT: return "EFAULT";
    case EEXIST: return "EEXIST";
    case EPERM: return "EPERM";
    case EAGAIN: return "EAGAIN";
    case ENOSYS: return "ENOSYS";
    default: return strerror(-r);
  }
}

static long Sys(long nr, long a, long b, long c, long d, long e) {
  long r = syscall(nr, a, b, c, d, e, 0L);
  return r == -1 ? -errno : r;
}

/* Whether a page at `a` can be mapped (not beyond the top). */
static int Mappable(uintptr_t a) {
  long r = Sys(SYS_mmap, (long)a, P, PROT_NONE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1);
  if (r >= 0) munmap((void*)r, P);
  return r != -ENOMEM;
}

/* The page just below the top, ours to play with: mapped afresh before
 * every case. */
static int Guard(void) {
  munmap((void*)(top - P), P);
  long r = Sys(SYS_mmap, (long)(top - P), P, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1);
  return r == (long)(top - P);
}

struct Case {
  const char* name;
  uintptr_t addr;
  uint64_t len;
};

int main(void) {
  /* Binary search for the top between 4 GiB and 2^57. */
  /* 2^57: past a 5-level top too (where a fixed mapping above 2^47 makes
   * the larger address space available). */
  uintptr_t lo = 1ul << 32, hi = 1ul << 57;  /* Mappable(lo), !Mappable(hi) */
  if (!Mappable(lo) || Mappable(hi)) {
    printf("cannot find the top\n");
    return 1;
  }
  while (hi - lo > P) {
    uintptr_t mid = (lo + (hi - lo) / 2) & ~(P - 1);
    if (Mappable(mid)) lo = mid; else hi = mid;
  }
  top = hi;
  CHECK("top found", top > (1ul << 32) && Guard());

  const struct Case cases[] = {
      {"at top", top - P, P},
      {"crossing", top - P, 2 * P},
      {"beyond", top, P},
      {"far beyond", top + 16 * P, P},
      {"wrapping", top - P, (uint64_t)0 - (top - P) + P},
      {"len 0 below", top - P, 0},
      {"len 0 beyond", top + P, 0},
      {"unaligned", top - P + 1, P},
      {"len overflows", top - P, UINT64_MAX},
      /* Over a sandbox's own memory above its top (systrap's stub). */
      {"over 1 GiB", top - P, 1ul << 30},
  };
  const int n = sizeof(cases) / sizeof(cases[0]);
  for (int i = 0; i < n; i++) {
    const struct Case* c = &cases[i];
    long a = (long)c->addr, l = (long)c->len;
    long r;
#define RUN(call, expr)                                     \
  do {                                                      \
    Guard();                                                \
    r = (expr);                                             \
    printf("%-22s %-13s %s\n", call, c->name, Name(r));     \
  } while (0)
    RUN("mmap MAP_FIXED", Sys(SYS_mmap, a, l, PROT_READ,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1));
    munmap((void*)(top - P), P);
    r = Sys(SYS_mmap, a, l, PROT_READ,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1);
    printf("%-22s %-13s %s\n", "mmap FIXED_NOREPLACE", c->name, Name(r));
    if (r >= 0) munmap((void*)r, c->len);
    RUN("munmap", Sys(SYS_munmap, a, l, 0, 0, 0));
    RUN("mprotect", Sys(SYS_mprotect, a, l, PROT_READ, 0, 0));
    RUN("madvise DONTNEED", Sys(SYS_madvise, a, l, MADV_DONTNEED, 0, 0));
    RUN("madvise NORMAL", Sys(SYS_madvise, a, l, MADV_NORMAL, 0, 0));
    RUN("msync", Sys(SYS_msync, a, l, MS_SYNC, 0, 0));
    /* Linux checks RLIMIT_MEMLOCK (unless CAP_IPC_LOCK) before the range:
     * a longer range's result depends on who runs the test. */
    struct rlimit ml;
    getrlimit(RLIMIT_MEMLOCK, &ml);
    if (ml.rlim_cur == RLIM_INFINITY || c->len + P <= ml.rlim_cur) {
      RUN("mlock", Sys(SYS_mlock, a, l, 0, 0, 0));
    } else {
      printf("%-22s %-13s %s\n", "mlock", c->name, "(over RLIMIT_MEMLOCK)");
    }
    RUN("munlock", Sys(SYS_munlock, a, l, 0, 0, 0));
    RUN("mincore", Sys(SYS_mincore, a, l, (long)vec, 0, 0));
    /* mremap of this range, shrunk to its first page: the tail is what
     * munmap would unmap. */
    RUN("mremap shrink", Sys(SYS_mremap, a, l, P, 0, 0));
    RUN("mremap grow", Sys(SYS_mremap, a, l, l + P, 0, 0));
    RUN("mremap MAYMOVE grow", Sys(SYS_mremap, a, l, l + P, MREMAP_MAYMOVE, 0));
    /* A page of ours moved to this range. */
    void* src = mmap(NULL, P, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    RUN("mremap FIXED to", Sys(SYS_mremap, (long)src, P, l,
                                MREMAP_MAYMOVE | MREMAP_FIXED, a));
    if (r < 0) munmap(src, P);
    else munmap((void*)r, c->len);
  }
  /* A shrinking mremap whose old range runs 1 GiB past the top is
   * refused, and the process still runs (the memory above a sandbox's top
   * is its stub's: code, stacks, the shared areas syscalls go through). */
  Guard();
  long shrink = Sys(SYS_mremap, (long)(top - P), 1l << 30, P, 0, 0);
  CHECK("mremap shrink past the top is refused", shrink == -EINVAL);
  int alive = 1;
  for (int i = 0; i < 100; i++) alive &= getppid() >= 0;
  CHECK("syscalls still work after it", alive);
  /* brk beyond the top leaves the break where it was. */
  long cur = Sys(SYS_brk, 0, 0, 0, 0, 0);
  long past = Sys(SYS_brk, (long)(top + P), 0, 0, 0, 0);
  CHECK("brk past the top keeps the break", past == cur);
  CHECK("the guard page is still ours", Guard());
  return finish();
}
