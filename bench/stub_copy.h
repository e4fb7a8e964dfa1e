/* The systrap stub's copy loop (platforms/systrap/stub/stub.cc Copy()), for
 * the benchmarks that stand in for the stub and the Sentry.
 *
 * The stub is built with -mgeneral-regs-only and
 * -fno-tree-loop-distribute-patterns, so its loop is plain 8-byte moves:
 * neither vectorized nor turned into a memcpy call. The attributes give this
 * copy the same code without special flags in either build lane. */
#ifndef SANDBOXD_BENCH_STUB_COPY_H_
#define SANDBOXD_BENCH_STUB_COPY_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__clang__)
#define BENCH_STUB_COPY_ATTRS noinline, target("general-regs-only"), no_builtin("memcpy")
#else
#define BENCH_STUB_COPY_ATTRS \
  noinline, target("general-regs-only"), optimize("no-tree-loop-distribute-patterns")
#endif

/* Copies n bytes (a multiple of 8; the remainder is dropped, as in the
 * stub) from src to dst. */
__attribute__((BENCH_STUB_COPY_ATTRS)) static void stub_copy(void *dst, const void *src,
                                                            size_t n) {
  uint64_t *d = dst;
  const uint64_t *s = src;
  for (size_t i = 0; i < n / 8; i++) d[i] = s[i];
}

#endif /* SANDBOXD_BENCH_STUB_COPY_H_ */
