// What every file of the stub section shares: the section attributes and
// the freestanding primitives (raw system calls, atomics, the TSC, dying)
// that stub code uses instead of libc. Everything here is always inlined,
// so it adds nothing outside the section of the code that uses it. Include
// only from stub code (built with SBX_STUB_COPTS).
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_INLINE_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_INLINE_H_

#include <asm/unistd.h>
#include <linux/futex.h>
#include <stdint.h>

#include "platforms/systrap/layout.h"

#define STUB __attribute__((section("sbx_stub"), used, noinline))
#define STUB_INLINE static inline __attribute__((always_inline))

namespace sandboxd::systrap {

STUB_INLINE long Syscall6(long nr, long a0, long a1, long a2, long a3, long a4,
                          long a5) {
  long ret;
  register long r10 __asm__("r10") = a3;
  register long r8 __asm__("r8") = a4;
  register long r9 __asm__("r9") = a5;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(nr), "D"(a0), "S"(a1), "d"(a2), "r"(r10), "r"(r8),
                     "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}
STUB_INLINE long Syscall3(long nr, long a0, long a1, long a2) {
  return Syscall6(nr, a0, a1, a2, 0, 0, 0);
}

STUB_INLINE uint32_t LoadAcquire(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
STUB_INLINE void StoreSeqCst(uint32_t* p, uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}
STUB_INLINE uint32_t LoadSeqCst(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

STUB_INLINE uint64_t Rdtsc() {
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Exits the whole stub process with `code` (a StubExit of layout.h).
STUB_INLINE void Die(int code) {
  for (;;) Syscall3(__NR_exit_group, code, 0, 0);
}

// Answers the control block's request with `result`: the result first,
// then the owner word (the publication), then a wakeup if the Sentry
// sleeps on it (it sets sentry_sleeping before it looks at the owner
// again, so one of the two sees the other).
STUB_INLINE void AnswerRequest(ControlBlock* cb, long result) {
  cb->result = result;
  StoreSeqCst(&cb->owner, kOwnerSentry);
  if (LoadSeqCst(&cb->sentry_sleeping) != 0) {
    Syscall6(__NR_futex, reinterpret_cast<long>(&cb->owner), FUTEX_WAKE, 1, 0,
             0, 0);
  }
}

// Maps `n` (at most kMaxMapBatch) requests in order, each MAP_SHARED |
// MAP_FIXED of the memory file: kOpMmapBatch on the control thread, and the
// maps a worker makes before it runs a context. Returns n, or the -errno of
// the first that failed.
STUB_INLINE long MapBatch(const MapRequest* m, uint64_t n) {
  if (n > kMaxMapBatch) n = kMaxMapBatch;
  for (uint64_t i = 0; i < n; i++) {
    long e = Syscall6(__NR_mmap, m[i].addr, m[i].len, m[i].prot,
                      0x01 /* MAP_SHARED */ | 0x10 /* MAP_FIXED */,
                      kStubMemFileFd, m[i].off);
    if (e < 0 && e > -4096) return e;
  }
  return static_cast<long>(n);
}

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_INLINE_H_
