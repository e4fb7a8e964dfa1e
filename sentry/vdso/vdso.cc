// The Sentry's vDSO: the code mapped into every application process so that
// clock_gettime, gettimeofday, time, clock_getres and getcpu need no system
// call (a system call traps to the Sentry, microseconds each).
//
// Freestanding: built with its own flags into a position-independent shared
// object with no relocations (see CMakeLists.txt, vdso.lds); no libc, no
// calls out. Clocks it cannot serve make the real system call, as Linux's
// vDSO does; under the Sentry that call traps and the Sentry answers it.
#include <stdint.h>

#include "sentry/vdso/vvar.h"

namespace sandboxd::vdso {
namespace {

// Linux's clock ids (uapi/linux/time.h).
constexpr int kClockRealtime = 0;
constexpr int kClockMonotonic = 1;
constexpr int kClockRealtimeCoarse = 5;
constexpr int kClockMonotonicCoarse = 6;
constexpr int kClockBoottime = 7;

constexpr long kSysGettimeofday = 96;
constexpr long kSysTime = 201;
constexpr long kSysClockGettime = 228;
constexpr long kSysClockGetres = 229;
constexpr long kSysGetcpu = 309;

// The x86-64 kernel's struct timespec, timeval and timezone.
struct KernelTimespec {
  int64_t tv_sec;
  int64_t tv_nsec;
};
struct KernelTimeval {
  int64_t tv_sec;
  int64_t tv_usec;
};
struct KernelTimezone {
  int32_t tz_minuteswest;
  int32_t tz_dsttime;
};

// The page the Sentry maps just below this image (vdso.lds).
extern "C" const Vvar vvar_page __attribute__((visibility("hidden")));

long Syscall2(long nr, long a0, long a1) {
  long ret;
  __asm__ __volatile__("syscall"
                       : "=a"(ret)
                       : "a"(nr), "D"(a0), "S"(a1)
                       : "rcx", "r11", "memory");
  return ret;
}

long Syscall3(long nr, long a0, long a1, long a2) {
  long ret;
  __asm__ __volatile__("syscall"
                       : "=a"(ret)
                       : "a"(nr), "D"(a0), "S"(a1), "d"(a2)
                       : "rcx", "r11", "memory");
  return ret;
}

// Which vvar clock serves `clk`, and whether it is a coarse one; false
// for clocks left to the system call (CPU-time clocks, MONOTONIC_RAW, TAI,
// the alarm clocks, unknown ids).
bool Served(int clk, uint32_t* index, bool* coarse) {
  *coarse = false;
  switch (clk) {
    case kClockRealtime:
      *index = kVvarRealtime;
      return true;
    case kClockMonotonic:
      *index = kVvarMonotonic;
      return true;
    case kClockBoottime:
      *index = kVvarBoottime;
      return true;
    case kClockRealtimeCoarse:
      *index = kVvarRealtime;
      *coarse = true;
      return true;
    case kClockMonotonicCoarse:
      *index = kVvarMonotonic;
      *coarse = true;
      return true;
    default:
      return false;
  }
}

// A coarse clock is the precise one rounded down to its resolution: it
// never runs ahead of the precise clock and lags it by less than a tick,
// as Linux's (which is the time of the last tick).
void RoundToCoarse(int64_t* nsec) {
  uint32_t res = VvarLoad(&vvar_page.coarse_res_nsec);
  if (res > 1) *nsec -= *nsec % res;
}

}  // namespace

extern "C" {

int __vdso_clock_gettime(int clk, KernelTimespec* ts) {
  uint32_t index;
  bool coarse;
  int64_t sec, nsec;
  if (!Served(clk, &index, &coarse) ||
      !VvarRead(&vvar_page, index, &sec, &nsec)) {
    return static_cast<int>(Syscall2(kSysClockGettime, clk,
                                     reinterpret_cast<long>(ts)));
  }
  if (coarse) RoundToCoarse(&nsec);
  ts->tv_sec = sec;
  ts->tv_nsec = nsec;
  return 0;
}

int __vdso_gettimeofday(KernelTimeval* tv, KernelTimezone* tz) {
  int64_t sec, nsec;
  if (!VvarRead(&vvar_page, kVvarRealtime, &sec, &nsec)) {
    return static_cast<int>(Syscall2(kSysGettimeofday,
                                     reinterpret_cast<long>(tv),
                                     reinterpret_cast<long>(tz)));
  }
  if (tv != nullptr) {
    tv->tv_sec = sec;
    tv->tv_usec = nsec / 1000;
  }
  if (tz != nullptr) {
    // The sandbox's timezone is UTC, as its gettimeofday system call says.
    tz->tz_minuteswest = 0;
    tz->tz_dsttime = 0;
  }
  return 0;
}

// Linux's time() is the coarse realtime clock's seconds, which are the
// precise clock's (a coarse clock only rounds the nanoseconds down).
long __vdso_time(long* t) {
  int64_t sec, nsec;
  if (!VvarRead(&vvar_page, kVvarRealtime, &sec, &nsec)) {
    return Syscall2(kSysTime, reinterpret_cast<long>(t), 0);
  }
  if (t != nullptr) *t = sec;
  return sec;
}

int __vdso_clock_getres(int clk, KernelTimespec* res) {
  uint32_t index;
  bool coarse;
  if (!Served(clk, &index, &coarse) ||
      VvarLoad(&vvar_page.mode) != kVvarModeTsc) {
    return static_cast<int>(Syscall2(kSysClockGetres, clk,
                                     reinterpret_cast<long>(res)));
  }
  if (res != nullptr) {
    res->tv_sec = 0;
    res->tv_nsec = coarse ? VvarLoad(&vvar_page.coarse_res_nsec) : 1;
  }
  return 0;
}

// The host CPU this thread runs on, from the per-CPU segment limit Linux
// sets up for its own vDSO (GDT_ENTRY_CPUNODE: (node << 12) | cpu), which
// is the CPU the application thread really runs on.
long __vdso_getcpu(unsigned* cpu, unsigned* node, void* unused_cache) {
  constexpr unsigned kCpunodeSelector = 15 * 8 + 3;
  unsigned p;
  bool ok;
  __asm__("lsl %[seg], %[p]"
          : [p] "=r"(p), "=@ccz"(ok)
          : [seg] "r"(kCpunodeSelector));
  if (!ok) {
    return Syscall3(kSysGetcpu, reinterpret_cast<long>(cpu),
                    reinterpret_cast<long>(node),
                    reinterpret_cast<long>(unused_cache));
  }
  if (cpu != nullptr) *cpu = p & 0xfff;
  if (node != nullptr) *node = p >> 12;
  return 0;
}

// The unprefixed names, as Linux's vDSO exports them too.
int clock_gettime(int, KernelTimespec*)
    __attribute__((weak, alias("__vdso_clock_gettime")));
int gettimeofday(KernelTimeval*, KernelTimezone*)
    __attribute__((weak, alias("__vdso_gettimeofday")));
long time(long*) __attribute__((weak, alias("__vdso_time")));
int clock_getres(int, KernelTimespec*)
    __attribute__((weak, alias("__vdso_clock_getres")));
long getcpu(unsigned*, unsigned*, void*)
    __attribute__((weak, alias("__vdso_getcpu")));

}  // extern "C"

// The "Linux" note Linux's vDSO carries (its version code; glibc reads it
// as the kernel version). 6.1.0, as the sandbox's uname says.
struct LinuxNote {
  uint32_t namesz = 6;
  uint32_t descsz = 4;
  uint32_t type = 0;
  char name[8] = "Linux";
  uint32_t version = (6 << 16) | (1 << 8) | 0;
};
__attribute__((used, section(".note.Linux"), aligned(4)))
const LinuxNote kLinuxNote;

}  // namespace sandboxd::vdso
