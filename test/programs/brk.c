/* The program break: raw brk(2) (musl's sbrk() only supports sbrk(0), so the
 * raw syscall is used for both libcs).  All brk manipulation happens before
 * any output (the libc may use brk for its own heap) and the break is put back
 * where it was before printing. */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"

#define PG 4096ul

static uintptr_t sys_brk(uintptr_t addr) { return (uintptr_t)syscall(SYS_brk, addr); }
static uintptr_t page_up(uintptr_t a) { return (a + PG - 1) & ~(PG - 1); }

int main(void) {
  int r[16] = {0};
  const uintptr_t b0 = sys_brk(0);
  r[0] = b0 != 0 && b0 != (uintptr_t)-1;
  r[1] = sys_brk(0) == b0; /* idempotent */

  /* Grow 1 MiB: new memory is zero and writable. */
  const uintptr_t big = b0 + (1ul << 20);
  r[2] = sys_brk(big) == big;
  unsigned char *base = (unsigned char *)b0;
  int zero = 1;
  for (uintptr_t p = page_up(b0); p < big; p += 512) zero &= *(unsigned char *)p == 0;
  r[3] = zero;
  for (uintptr_t i = 0; i < (1ul << 20); i += 256) base[i] = (unsigned char)(i >> 8);
  int ok = 1;
  for (uintptr_t i = 0; i < (1ul << 20); i += 256) ok &= base[i] == (unsigned char)(i >> 8);
  r[4] = ok;

  /* Shrink to 64 KiB: data below stays, the break moves down. */
  const uintptr_t small = b0 + (64ul << 10);
  r[5] = sys_brk(small) == small;
  ok = 1;
  for (uintptr_t i = 0; i < (64ul << 10); i += 256) ok &= base[i] == (unsigned char)(i >> 8);
  r[6] = ok;
  r[7] = sys_brk(0) == small;

  /* Grow again: pages released by the shrink come back zero. */
  r[8] = sys_brk(big) == big;
  zero = 1;
  for (uintptr_t p = page_up(small); p < big; p += 256) zero &= *(unsigned char *)p == 0;
  r[9] = zero;

  /* Impossible requests leave the break unchanged. */
  r[10] = sys_brk(big + (1ul << 46)) == big; /* far too large */
  r[11] = sys_brk(4096) == big;              /* below the start of the heap */
  r[12] = sys_brk(0) == big;

  /* Many small steps up and down. */
  ok = 1;
  for (int i = 1; i <= 256 && ok; i++) {
    uintptr_t want = b0 + (uintptr_t)i * 1000;
    ok = sys_brk(want) == want;
    if (ok) ((unsigned char *)want)[-1] = (unsigned char)i;
  }
  for (int i = 255; i >= 1 && ok; i--) {
    uintptr_t want = b0 + (uintptr_t)i * 1000;
    ok = sys_brk(want) == want && ((unsigned char *)want)[-1] == (unsigned char)i;
  }
  r[13] = ok;

  /* Back to where the libc left it. */
  r[14] = sys_brk(b0) == b0;

  CHECK("brk(0) returns the current break", r[0]);
  CHECK("brk(0) is idempotent", r[1]);
  CHECK("grow by 1 MiB", r[2]);
  CHECK("grown memory is zero", r[3]);
  CHECK("grown memory is writable", r[4]);
  CHECK("shrink to 64 KiB", r[5]);
  CHECK("data below the shrunk break intact", r[6]);
  CHECK("brk(0) after shrink", r[7]);
  CHECK("grow again", r[8]);
  CHECK("re-grown pages are zero", r[9]);
  CHECK("huge brk fails (break unchanged)", r[10]);
  CHECK("brk below heap start fails (break unchanged)", r[11]);
  CHECK("break unchanged after failures", r[12]);
  CHECK("small steps up and down", r[13]);
  CHECK("restore original break", r[14]);
  return finish();
}
