// What every file of the stub section shares: the section attributes and
// the freestanding primitives (raw system calls, atomics, the TSC, dying)
// that stub code uses instead of libc. Everything here is always inlined,
// so it adds nothing outside the section of the code that uses it. Include
// only from stub code (built with SBX_STUB_COPTS).
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_INLINE_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_INLINE_H_

#include <asm/unistd.h>
#include <stdint.h>

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

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_INLINE_H_
