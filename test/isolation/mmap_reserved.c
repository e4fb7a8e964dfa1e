/* The top of the user address space, 0x7f0000000000..0x800000000000, is
 * reserved for the stub (systrap). The program must not be able to map,
 * unmap, protect, remap or read/write through syscalls anything there, and
 * must keep running after trying. Never run this natively: MAP_FIXED there
 * can clobber the native stack. */
#include "raw.h"

#define PROT_READ 1
#define PROT_WRITE 2
#define PROT_EXEC 4
#define MAP_PRIVATE 0x02
#define MAP_FIXED 0x10
#define MAP_ANONYMOUS 0x20
#define MAP_NORESERVE 0x4000
#define MAP_FIXED_NOREPLACE 0x100000
#define MREMAP_MAYMOVE 1
#define MREMAP_FIXED 2
#define MADV_DONTNEED 4
#define PG 4096ul
#define FUTEX_WAIT 0
#define CLOCK_MONOTONIC 1
#define SIG_BLOCK 0
#define SIG_SETMASK 2

static const unsigned long kLo = 0x7f0000000000ul, kHi = 0x800000000000ul;

static int refused(long r) { return r == -E_NOMEM || r == -E_INVAL || r == -E_EXIST || r == -E_PERM; }
static int in_reserved(unsigned long a, unsigned long len) { return a < kHi && a + len > kLo; }

static long mmap_anon(unsigned long addr, unsigned long len, int flags) {
  return raw6(NR_mmap, (long)addr, (long)len, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
}

int main(void) {
  const unsigned long addrs[] = {kLo, kLo + 0x8000000000ul, kHi - 0x100000000ul, kHi - PG};
  char what[128];
  for (unsigned i = 0; i < sizeof addrs / sizeof addrs[0]; i++) {
    long r = mmap_anon(addrs[i], PG, MAP_FIXED);
    snprintf(what, sizeof what, "mmap MAP_FIXED at %#lx refused", addrs[i]);
    report(refused(r), what, r);
    r = mmap_anon(addrs[i], PG, MAP_FIXED_NOREPLACE);
    snprintf(what, sizeof what, "mmap MAP_FIXED_NOREPLACE at %#lx refused", addrs[i]);
    report(refused(r), what, r);
  }
  long r = mmap_anon(kLo - 0x10000, 0x20000, MAP_FIXED);
  report(refused(r), "mmap MAP_FIXED straddling the reserved start refused", r);
  r = mmap_anon(kLo - PG, 0x100000000ul, MAP_FIXED | MAP_NORESERVE);
  report(refused(r), "mmap MAP_FIXED 4 GiB reaching into the reserved range refused", r);

  /* Hints into the range are moved out of it. */
  r = mmap_anon(kLo + 0x1000000, 16 * PG, 0);
  report(r > 0 && !in_reserved((unsigned long)r, 16 * PG), "mmap hint inside the range lands outside it", r);
  if (r > 0) {
    ((volatile char *)r)[0] = 1;
    raw2(NR_munmap, r, 16 * PG);
  }
  /* Big non-fixed mappings all land below the reserved range. */
  int below = 1;
  long maps[32];
  for (int i = 0; i < 32; i++) {
    maps[i] = mmap_anon(0, 1ul << 34, MAP_NORESERVE); /* 16 GiB each */
    if (maps[i] > 0 && in_reserved((unsigned long)maps[i], 1ul << 34)) below = 0;
  }
  report(below, "32 x 16 GiB NORESERVE mappings avoid the reserved range", 0);
  for (int i = 0; i < 32; i++)
    if (maps[i] > 0) raw2(NR_munmap, maps[i], 1ul << 34);

  /* munmap / mprotect / madvise on the reserved range: refused or no-op. */
  r = raw2(NR_munmap, kLo, kHi - kLo);
  report(r == 0 || refused(r), "munmap of the whole reserved range is refused or a no-op", r);
  r = raw3(NR_mprotect, kLo, kHi - kLo, PROT_READ | PROT_WRITE | PROT_EXEC);
  report(refused(r), "mprotect RWX on the reserved range refused", r);
  r = raw3(NR_mprotect, kHi - PG, PG, 0);
  report(refused(r), "mprotect PROT_NONE on the last page refused", r);
  r = raw3(NR_madvise, kLo, kHi - kLo, MADV_DONTNEED);
  report(r == 0 || refused(r), "madvise DONTNEED on the reserved range is refused or a no-op", r);

  /* mremap into the range. */
  long m = mmap_anon(0, 4 * PG, 0);
  r = raw6(NR_mremap, m, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, (long)kLo, 0);
  report(refused(r), "mremap MREMAP_FIXED into the reserved range refused", r);
  r = raw6(NR_mremap, m, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, (long)(kHi - 4 * PG), 0);
  report(refused(r), "mremap MREMAP_FIXED to the last pages refused", r);
  ((volatile char *)m)[0] = 7; /* the source mapping survived */
  raw2(NR_munmap, m, 4 * PG);

  /* brk into the range. */
  long cur = raw1(NR_brk, 0);
  r = raw1(NR_brk, kLo + PG);
  report(r == cur, "brk into the reserved range refused (break unchanged)", r);

  /* The Sentry must not read or write the stub's memory on the program's
   * behalf: syscalls with pointers into the range give EFAULT. Sampled: every
   * 1 GiB, plus every page of the first 16 MiB and of the last 64 MiB. */
  long bad_read = 0, bad_write = 0, probes = 0, first_bad = 0;
  struct { long s, ns; } tiny = {0, 1};
  for (unsigned long a = kLo; a < kHi; ) {
    long rr = raw6(NR_futex, (long)a, FUTEX_WAIT, 0x5a5a5a5a, (long)&tiny, 0, 0);
    if (rr != -E_FAULT) { bad_read++; if (!first_bad) first_bad = (long)a; }
    long rw = raw2(NR_clock_gettime, CLOCK_MONOTONIC, (long)a);
    if (rw != -E_FAULT) { bad_write++; if (!first_bad) first_bad = (long)a; }
    long rs = raw4(NR_rt_sigprocmask, SIG_BLOCK, (long)a, 0, 8);
    if (rs != -E_FAULT) { bad_read++; if (!first_bad) first_bad = (long)a; }
    probes++;
    if (a < kLo + (16ul << 20) || a >= kHi - (64ul << 20)) a += PG;
    else if (a < kHi - (64ul << 20) - (1ul << 30)) a += 1ul << 30;
    else a = kHi - (64ul << 20);
  }
  /* Undo whatever a broken rt_sigprocmask may have blocked. */
  unsigned long empty = 0;
  raw4(NR_rt_sigprocmask, SIG_SETMASK, (long)&empty, 0, 8);
  printf("probed %ld addresses; first non-EFAULT at %#lx\n", probes, (unsigned long)first_bad);
  report(bad_read == 0, "syscalls reading from the reserved range get EFAULT", bad_read);
  report(bad_write == 0, "syscalls writing to the reserved range get EFAULT", bad_write);
  r = raw3(NR_write, 1, kHi - PG, 1);
  report(r == -E_FAULT, "write(1, last reserved page) gets EFAULT", r);

  /* Still alive and working. */
  r = raw3(NR_write, 1, "still running\n", 14);
  report(r == 14, "the program keeps running", r);
  return done();
}
