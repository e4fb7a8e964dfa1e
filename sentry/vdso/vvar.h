// The vvar page: the time parameters the Sentry publishes and the vDSO
// reads. This header is the one definition of that layout; it is included
// by the vDSO (freestanding, no libc: only compiler builtins here) and by
// the Sentry's writer (params.cc) and tests.
//
// One writer (the Sentry's updater thread) and any number of readers (every
// application thread, in its own process) meet through a sequence count:
// the writer makes `seq` odd, writes, makes it even; a reader retries when
// it saw an odd count or the count changed while it read.
//
// Time of clock c at TSC value t:
//   ns(c) = base_sec[c] * 1e9 + base_nsec[c] + (((t - base_tsc) * mult) >> shift)
#ifndef SANDBOXD_SENTRY_VDSO_VVAR_H_
#define SANDBOXD_SENTRY_VDSO_VVAR_H_

#include <stdint.h>

namespace sandboxd::vdso {

// The clocks the vDSO serves from the TSC; index into Vvar::base_*.
enum VvarClock : uint32_t {
  kVvarRealtime = 0,
  kVvarMonotonic = 1,
  kVvarBoottime = 2,
  kVvarNumClocks = 3,
};

// Vvar::mode.
enum VvarMode : uint32_t {
  // Not calibrated yet, or the TSC cannot be trusted: every call makes the
  // real system call (which traps to the Sentry).
  kVvarModeSyscall = 0,
  kVvarModeTsc = 1,
};

inline constexpr uint32_t kVvarShift = 32;

struct alignas(64) Vvar {
  uint32_t seq;   // odd while the writer is changing the fields below
  uint32_t mode;  // VvarMode
  uint64_t base_tsc;
  uint64_t mult;  // nanoseconds per TSC cycle, times 2^shift
  uint32_t shift;
  // Resolution that clock_getres reports for the *_COARSE clocks; they are
  // served as the precise time rounded down to it.
  uint32_t coarse_res_nsec;
  int64_t base_sec[kVvarNumClocks];
  int64_t base_nsec[kVvarNumClocks];  // in [0, 1e9)
};
static_assert(sizeof(Vvar) <= 4096, "the vvar data fits in one page");
static_assert(__builtin_offsetof(Vvar, seq) == 0, "seq first");
static_assert(__builtin_offsetof(Vvar, base_tsc) == 8, "layout");
static_assert(__builtin_offsetof(Vvar, base_sec) == 32, "layout");
static_assert(__builtin_offsetof(Vvar, base_nsec) == 56, "layout");

inline uint64_t VvarRdtsc() {
  uint32_t lo, hi;
  // lfence: the TSC is read after earlier loads (the sequence count), as
  // Linux's rdtsc_ordered.
  __asm__ __volatile__("lfence; rdtsc" : "=a"(lo), "=d"(hi)::"memory");
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

template <typename T>
inline T VvarLoad(const T* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}

// What the writer publishes in one go.
struct VvarParams {
  uint32_t mode;
  uint64_t base_tsc;
  uint64_t mult;
  int64_t base_sec[kVvarNumClocks];
  int64_t base_nsec[kVvarNumClocks];
};

// The seqcount writer: odd, fields, even. Preconditions: one writer at a
// time (the Timekeeper serialises its updates).
inline void VvarWrite(Vvar* v, const VvarParams& p) {
  uint32_t seq = __atomic_load_n(&v->seq, __ATOMIC_RELAXED);
  __atomic_store_n(&v->seq, seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  __atomic_store_n(&v->base_tsc, p.base_tsc, __ATOMIC_RELAXED);
  __atomic_store_n(&v->mult, p.mult, __ATOMIC_RELAXED);
  __atomic_store_n(&v->shift, kVvarShift, __ATOMIC_RELAXED);
  for (uint32_t c = 0; c < kVvarNumClocks; c++) {
    __atomic_store_n(&v->base_sec[c], p.base_sec[c], __ATOMIC_RELAXED);
    __atomic_store_n(&v->base_nsec[c], p.base_nsec[c], __ATOMIC_RELAXED);
  }
  __atomic_store_n(&v->mode, p.mode, __ATOMIC_RELAXED);
  __atomic_store_n(&v->seq, seq + 2, __ATOMIC_RELEASE);
}

// Reads clock `c` at the current TSC. Returns false when the vvar says the
// TSC is not to be used (the caller makes the system call).
inline bool VvarRead(const Vvar* v, uint32_t c, int64_t* sec, int64_t* nsec) {
  for (;;) {
    uint32_t seq = __atomic_load_n(&v->seq, __ATOMIC_ACQUIRE);
    if (seq & 1) {
      __builtin_ia32_pause();
      continue;
    }
    if (VvarLoad(&v->mode) != kVvarModeTsc) return false;
    uint64_t base_tsc = VvarLoad(&v->base_tsc);
    uint64_t mult = VvarLoad(&v->mult);
    uint32_t shift = VvarLoad(&v->shift);
    int64_t s = VvarLoad(&v->base_sec[c]);
    uint64_t ns = static_cast<uint64_t>(VvarLoad(&v->base_nsec[c]));
    uint64_t tsc = VvarRdtsc();
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&v->seq, __ATOMIC_RELAXED) != seq) continue;
    // A TSC a little behind base_tsc (read on another CPU just before the
    // update) counts as no time at all, never as a huge unsigned delta.
    uint64_t delta = tsc > base_tsc ? tsc - base_tsc : 0;
    ns += static_cast<uint64_t>(
        (static_cast<unsigned __int128>(delta) * mult) >> shift);
    // The bases are refreshed about every second: a loop beats a division.
    if (ns >= 4000000000ull) {
      s += static_cast<int64_t>(ns / 1000000000ull);
      ns %= 1000000000ull;
    }
    while (ns >= 1000000000ull) {
      ns -= 1000000000ull;
      s++;
    }
    *sec = s;
    *nsec = static_cast<int64_t>(ns);
    return true;
  }
}

}  // namespace sandboxd::vdso

#endif  // SANDBOXD_SENTRY_VDSO_VVAR_H_
