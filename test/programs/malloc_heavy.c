/* Allocator stress: many malloc/calloc/realloc/free of mixed sizes (small,
 * medium, and large ones served by mmap), contents verified and checksummed.
 * Sizes and contents come from a fixed PRNG, so the output is identical
 * everywhere (and independent of the libc). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

#define SLOTS 2048
static struct {
  unsigned char *p;
  size_t n;
  uint64_t seed;
} slot[SLOTS];

static size_t stride_for(size_t n) { return n <= 65536 ? 1 : 61; }
static unsigned char byte_at(uint64_t seed, size_t i) {
  return (unsigned char)((seed >> (i % 56)) ^ (i * 131) ^ (seed & 0xff));
}
static void fill(unsigned char *p, size_t n, uint64_t seed) {
  size_t s = stride_for(n);
  for (size_t i = 0; i < n; i += s) p[i] = byte_at(seed, i);
  if (n) p[n - 1] = byte_at(seed, n - 1);
}
static uint64_t checksum;
static long bad_bytes;
/* Verifies the first n bytes of a block filled for size `filled`. */
static void verify(const unsigned char *p, size_t n, size_t filled, uint64_t seed) {
  size_t s = stride_for(filled);
  for (size_t i = 0; i < n; i += s) {
    if (p[i] != byte_at(seed, i)) bad_bytes++;
    checksum = checksum * 1099511628211ull + p[i];
  }
}

static size_t pick_size(void) {
  uint64_t r = next() % 1000;
  if (r < 700) return 1 + next() % 256;
  if (r < 960) return 257 + next() % 65536;
  if (r < 990) return 65536 + next() % (512 * 1024);
  return (1u << 20) + next() % (7u << 20); /* 1..8 MiB: mmap territory */
}

int main(void) {
  long n_malloc = 0, n_free = 0, n_realloc = 0, n_calloc = 0, calloc_dirty = 0, align_bad = 0;
  for (int op = 0; op < 30000; op++) {
    int k = (int)(next() % SLOTS);
    uint64_t r = next() % 100;
    if (!slot[k].p) {
      size_t n = pick_size();
      uint64_t seed = next();
      unsigned char *p;
      if (r < 15) {
        p = calloc(1, n);
        n_calloc++;
        if (p) for (size_t i = 0; i < n; i += stride_for(n)) calloc_dirty += p[i] != 0;
      } else {
        p = malloc(n);
        n_malloc++;
      }
      if (!p) { printf("allocation of %zu failed\n", n); return 1; }
      if ((uintptr_t)p % 16) align_bad++;
      fill(p, n, seed);
      slot[k].p = p; slot[k].n = n; slot[k].seed = seed;
    } else if (r < 25) {
      size_t n = pick_size();
      size_t keep = n < slot[k].n ? n : slot[k].n;
      unsigned char *p = realloc(slot[k].p, n);
      n_realloc++;
      if (!p) { printf("realloc to %zu failed\n", n); return 1; }
      if ((uintptr_t)p % 16) align_bad++;
      verify(p, keep, slot[k].n, slot[k].seed);
      uint64_t seed = next();
      fill(p, n, seed);
      slot[k].p = p; slot[k].n = n; slot[k].seed = seed;
    } else {
      verify(slot[k].p, slot[k].n, slot[k].n, slot[k].seed);
      free(slot[k].p);
      n_free++;
      slot[k].p = NULL;
    }
  }
  for (int k = 0; k < SLOTS; k++) {
    if (slot[k].p) {
      verify(slot[k].p, slot[k].n, slot[k].n, slot[k].seed);
      free(slot[k].p);
      n_free++;
    }
  }
  /* Aligned allocations. */
  for (size_t al = 16; al <= 65536; al *= 4) {
    void *p = NULL;
    int rc = posix_memalign(&p, al, 3 * al + 5);
    if (rc || ((uintptr_t)p % al)) align_bad++;
    if (p) { memset(p, 0x5a, 3 * al + 5); free(p); }
  }
  /* Big calloc: must come back zeroed (fresh anonymous memory). */
  unsigned char *z = calloc(64, 1 << 20);
  long zdirty = 0;
  if (z) for (size_t i = 0; i < (64u << 20); i += 4096) zdirty += z[i] != 0;
  CHECK("64 MiB calloc succeeded", z != NULL);
  free(z);

  printf("mallocs: %ld callocs: %ld reallocs: %ld frees: %ld\n", n_malloc, n_calloc, n_realloc, n_free);
  printf("checksum: %016llx\n", (unsigned long long)checksum);
  CHECK("contents preserved", bad_bytes == 0);
  CHECK("calloc memory zeroed", calloc_dirty == 0 && zdirty == 0);
  CHECK("alignment", align_bad == 0);
  return finish();
}
