/* Anonymous memory management: mmap, munmap, mprotect, mremap, madvise.
 * Data checks after every transformation, and the errno of invalid calls. */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MREMAP_MAYMOVE
#define MREMAP_MAYMOVE 1
#endif
#ifndef MREMAP_FIXED
#define MREMAP_FIXED 2
#endif
#ifndef MADV_DONTNEED
#define MADV_DONTNEED 4
#endif

#define PG 4096ul

static void *anon(void *addr, size_t len, int prot, int extra) {
  return mmap(addr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
}

static void pattern(unsigned char *p, size_t len, unsigned salt) {
  for (size_t i = 0; i < len; i += 512) p[i] = (unsigned char)(i / 512 + salt);
}
static int pattern_ok(const unsigned char *p, size_t len, unsigned salt) {
  for (size_t i = 0; i < len; i += 512)
    if (p[i] != (unsigned char)(i / 512 + salt)) return 0;
  return 1;
}
static int all_zero(const unsigned char *p, size_t len) {
  for (size_t i = 0; i < len; i += 64)
    if (p[i]) return 0;
  return 1;
}

/* A page-aligned address range that is certainly not mapped. */
static unsigned char *hole(size_t len) {
  unsigned char *p = anon(NULL, len, PROT_NONE, 0);
  munmap(p, len);
  return p;
}

int main(void) {
  CHECK("page size is 4096", sysconf(_SC_PAGESIZE) == 4096);

  /* Fresh anonymous memory is zero and writable. */
  unsigned char *a = anon(NULL, 64 * PG, PROT_READ | PROT_WRITE, 0);
  CHECK("mmap 64 pages", a != MAP_FAILED);
  CHECK("mmap result page aligned", ((uintptr_t)a & (PG - 1)) == 0);
  CHECK("fresh anonymous memory is zero", all_zero(a, 64 * PG));
  pattern(a, 64 * PG, 1);
  CHECK("pattern written", pattern_ok(a, 64 * PG, 1));

  /* munmap in the middle splits the mapping; both sides keep their data. */
  CHECK("munmap middle 8 pages", munmap(a + 16 * PG, 8 * PG) == 0);
  CHECK("low part intact", pattern_ok(a, 16 * PG, 1));
  CHECK("high part intact", pattern_ok(a + 24 * PG, 40 * PG, 1 + 24 * PG / 512));
  /* Remap the hole with MAP_FIXED: zero again. */
  unsigned char *f = anon(a + 16 * PG, 8 * PG, PROT_READ | PROT_WRITE, MAP_FIXED);
  CHECK("MAP_FIXED into the hole", f == a + 16 * PG);
  CHECK("MAP_FIXED pages are zero", all_zero(f, 8 * PG));
  /* MAP_FIXED over existing data replaces it. */
  f = anon(a, 4 * PG, PROT_READ | PROT_WRITE, MAP_FIXED);
  CHECK("MAP_FIXED over data", f == a);
  CHECK("MAP_FIXED over data gives zero pages", all_zero(a, 4 * PG));
  CHECK("neighbouring pages untouched", a[4 * PG] == (unsigned char)(4 * PG / 512 + 1));
  /* MAP_FIXED_NOREPLACE over an existing mapping. */
  errno = 0;
  void *r = anon(a + 2 * PG, PG, PROT_READ, MAP_FIXED_NOREPLACE);
  CHECK_ERRNO("MAP_FIXED_NOREPLACE over mapping -> EEXIST", r == MAP_FAILED ? -1 : (long)0, EEXIST);
  unsigned char *h = hole(4 * PG);
  r = anon(h, 4 * PG, PROT_READ | PROT_WRITE, MAP_FIXED_NOREPLACE);
  CHECK("MAP_FIXED_NOREPLACE into a hole", r == h);
  if (r != MAP_FAILED) munmap(r, 4 * PG);
  CHECK("munmap whole region", munmap(a, 64 * PG) == 0);
  CHECK("munmap of unmapped range succeeds", munmap(a, 64 * PG) == 0);

  /* Invalid arguments. */
  CHECK_ERRNO("munmap unaligned -> EINVAL", munmap((char *)h + 1, PG), EINVAL);
  CHECK_ERRNO("munmap length 0 -> EINVAL", munmap(h, 0), EINVAL);
  CHECK_ERRNO("mmap length 0 -> EINVAL", anon(NULL, 0, PROT_READ, 0) == MAP_FAILED ? -1 : 0, EINVAL);
  CHECK_ERRNO("mmap MAP_FIXED unaligned -> EINVAL",
              anon((char *)h + 7, PG, PROT_READ, MAP_FIXED) == MAP_FAILED ? -1 : 0, EINVAL);
  CHECK_ERRNO("mmap neither private nor shared -> EINVAL",
              mmap(NULL, PG, PROT_READ, MAP_ANONYMOUS, -1, 0) == MAP_FAILED ? -1 : 0, EINVAL);
  CHECK_ERRNO("mmap of a bad fd -> EBADF",
              mmap(NULL, PG, PROT_READ, MAP_PRIVATE, 99, 0) == MAP_FAILED ? -1 : 0, EBADF);
  CHECK_ERRNO("mprotect of unmapped -> ENOMEM", mprotect(h, PG, PROT_READ), ENOMEM);
  CHECK_ERRNO("mprotect unaligned -> EINVAL", syscall(SYS_mprotect, (char *)h + 1, PG, PROT_READ), EINVAL);
  CHECK_ERRNO("mmap huge -> ENOMEM", anon(NULL, 1ul << 50, PROT_READ, 0) == MAP_FAILED ? -1 : 0, ENOMEM);

  /* mprotect: PROT_NONE reservation, then open parts of it up. */
  unsigned char *b = anon(NULL, 16 * PG, PROT_NONE, 0);
  CHECK("mmap PROT_NONE reservation", b != MAP_FAILED);
  CHECK("mprotect part RW", mprotect(b + 4 * PG, 4 * PG, PROT_READ | PROT_WRITE) == 0);
  pattern(b + 4 * PG, 4 * PG, 7);
  CHECK("RW part usable", pattern_ok(b + 4 * PG, 4 * PG, 7));
  CHECK("mprotect RW part read-only", mprotect(b + 4 * PG, 4 * PG, PROT_READ) == 0);
  CHECK("read-only part still readable", pattern_ok(b + 4 * PG, 4 * PG, 7));
  CHECK("mprotect back to RW", mprotect(b + 4 * PG, 4 * PG, PROT_READ | PROT_WRITE) == 0);
  b[4 * PG] = 99;
  CHECK("write after re-enabling", b[4 * PG] == 99);
  CHECK("munmap reservation", munmap(b, 16 * PG) == 0);
  /* mprotect over a range with a hole in it fails with ENOMEM. */
  b = anon(NULL, 3 * PG, PROT_READ | PROT_WRITE, 0);
  munmap(b + PG, PG);
  CHECK_ERRNO("mprotect across a hole -> ENOMEM", mprotect(b, 3 * PG, PROT_READ), ENOMEM);
  munmap(b, 3 * PG);

  /* mremap: grow in place or move, shrink, move to a fixed address. */
  unsigned char *c = anon(NULL, 8 * PG, PROT_READ | PROT_WRITE, 0);
  pattern(c, 8 * PG, 3);
  unsigned char *c2 = mremap(c, 8 * PG, 64 * PG, MREMAP_MAYMOVE);
  CHECK("mremap grow MAYMOVE", c2 != MAP_FAILED);
  CHECK("mremap grow keeps data", pattern_ok(c2, 8 * PG, 3));
  CHECK("mremap grown tail is zero", all_zero(c2 + 8 * PG, 56 * PG));
  pattern(c2, 64 * PG, 5);
  unsigned char *c3 = mremap(c2, 64 * PG, 4 * PG, 0);
  CHECK("mremap shrink in place", c3 == c2);
  CHECK("mremap shrink keeps data", pattern_ok(c3, 4 * PG, 5));
  unsigned char *dst = hole(4 * PG);
  unsigned char *c4 = mremap(c3, 4 * PG, 4 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
  CHECK("mremap MREMAP_FIXED moves", c4 == dst);
  CHECK("mremap MREMAP_FIXED keeps data", c4 != MAP_FAILED && pattern_ok(c4, 4 * PG, 5));
  CHECK_ERRNO("mremap of old address after move -> EFAULT",
              mremap(c3, 4 * PG, 8 * PG, MREMAP_MAYMOVE) == MAP_FAILED ? -1 : 0, EFAULT);
  CHECK_ERRNO("mremap to size 0 -> EINVAL", mremap(c4, 4 * PG, 0, MREMAP_MAYMOVE) == MAP_FAILED ? -1 : 0, EINVAL);
  CHECK_ERRNO("mremap unaligned -> EINVAL", mremap(c4 + 1, PG, 2 * PG, MREMAP_MAYMOVE) == MAP_FAILED ? -1 : 0, EINVAL);
  CHECK_ERRNO("mremap FIXED without MAYMOVE -> EINVAL",
              mremap(c4, 4 * PG, 4 * PG, MREMAP_FIXED, dst + 64 * PG) == MAP_FAILED ? -1 : 0, EINVAL);
  /* Growing without MAYMOVE when the next page is taken fails with ENOMEM. */
  unsigned char *blk = anon(NULL, 2 * PG, PROT_READ | PROT_WRITE, 0);
  CHECK_ERRNO("mremap grow in place blocked -> ENOMEM", mremap(blk, PG, 2 * PG, 0) == MAP_FAILED ? -1 : 0, ENOMEM);
  munmap(blk, 2 * PG);
  munmap(c4, 4 * PG);

  /* madvise(MADV_DONTNEED): private anonymous pages read back as zero;
   * shared anonymous pages keep their contents. */
  unsigned char *d = anon(NULL, 16 * PG, PROT_READ | PROT_WRITE, 0);
  pattern(d, 16 * PG, 9);
  CHECK("madvise DONTNEED private", madvise(d + 4 * PG, 8 * PG, MADV_DONTNEED) == 0);
  CHECK("private DONTNEED pages are zero", all_zero(d + 4 * PG, 8 * PG));
  CHECK("pages outside DONTNEED intact", pattern_ok(d, 4 * PG, 9) && d[12 * PG] == (unsigned char)(12 * PG / 512 + 9));
  d[5 * PG] = 1;
  CHECK("DONTNEED pages writable again", d[5 * PG] == 1);
  CHECK_ERRNO("madvise unaligned -> EINVAL", madvise(d + 1, PG, MADV_DONTNEED), EINVAL);
  munmap(d, 16 * PG);
  unsigned char *s = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK("mmap shared anonymous", s != MAP_FAILED);
  CHECK("shared anonymous is zero", all_zero(s, 16 * PG));
  pattern(s, 16 * PG, 11);
  CHECK("madvise DONTNEED shared", madvise(s, 16 * PG, MADV_DONTNEED) == 0);
  CHECK("shared DONTNEED keeps data", pattern_ok(s, 16 * PG, 11));
  /* mremap of a shared mapping keeps sharing the same pages. */
  unsigned char *s2 = mremap(s, 16 * PG, 32 * PG, MREMAP_MAYMOVE);
  CHECK("mremap shared grow", s2 != MAP_FAILED && pattern_ok(s2, 16 * PG, 11));
  munmap(s2, 32 * PG);

  /* Many small mappings, then unmap every other one. */
  enum { N = 512 };
  static unsigned char *m[N];
  int okc = 1;
  for (int i = 0; i < N; i++) {
    m[i] = anon(NULL, 2 * PG, PROT_READ | PROT_WRITE, 0);
    if (m[i] == MAP_FAILED) { okc = 0; break; }
    m[i][0] = (unsigned char)i;
    m[i][PG + 17] = (unsigned char)(i * 3);
  }
  CHECK("512 small mappings", okc);
  for (int i = 0; okc && i < N; i += 2) okc = munmap(m[i], 2 * PG) == 0;
  for (int i = 1; okc && i < N; i += 2) okc = m[i][0] == (unsigned char)i && m[i][PG + 17] == (unsigned char)(i * 3);
  CHECK("unmap every other mapping, rest intact", okc);
  for (int i = 1; i < N; i += 2) munmap(m[i], 2 * PG);

  /* A large sparse mapping: only touched pages matter. */
  unsigned char *big = anon(NULL, 1ul << 30, PROT_READ | PROT_WRITE, MAP_NORESERVE);
  CHECK("1 GiB MAP_NORESERVE", big != MAP_FAILED);
  if (big != MAP_FAILED) {
    for (size_t off = 0; off < (1ul << 30); off += 64ul << 20) big[off] = 0xab;
    int sparse_ok = 1;
    for (size_t off = 0; off < (1ul << 30); off += 64ul << 20) sparse_ok &= big[off] == 0xab && big[off + PG] == 0;
    CHECK("sparse touches", sparse_ok);
    munmap(big, 1ul << 30);
  }
  return finish();
}
