// The one rule by which every memory syscall checks its address range
// against the top of the application's address space (`top`: Linux's
// TASK_SIZE, here the platform's MaxUserAddress), with the errno each
// call gives on Linux (x86-64, 6.x) for an unaligned start, a length of
// zero, a length that overflows when rounded to pages, and a range that
// crosses or lies beyond the top. What lies above the top (on systrap the
// stub processes' code and shared memory) is never in a VMA, and no call
// may reach it: every range a call acts on comes out of CheckRange.
#ifndef SANDBOXD_SENTRY_MM_ADDRESS_RANGE_H_
#define SANDBOXD_SENTRY_MM_ADDRESS_RANGE_H_

#include <cerrno>
#include <cstdint>

namespace sandboxd::mm {

enum class RangeCall {
  // mmap with MAP_FIXED or MAP_FIXED_NOREPLACE (get_unmapped_area):
  // len 0 EINVAL; overflow or past the top ENOMEM; unaligned EINVAL.
  kMmapFixed,
  // munmap, and the tail a shrinking mremap unmaps (do_vmi_munmap):
  // unaligned, past the top, len 0 or overflow: EINVAL.
  kMunmap,
  // mremap's MREMAP_FIXED target (mremap_to): unaligned or past the top
  // EINVAL.
  kMremapTarget,
  // mprotect: unaligned EINVAL; len 0 succeeds; overflow ENOMEM; a range
  // past the top acts on the VMAs below it, then ENOMEM (nothing mapped).
  kMprotect,
  // madvise: unaligned, overflow EINVAL; len 0 succeeds; past the top as
  // mprotect.
  kMadvise,
  // msync: unaligned EINVAL; a length whose rounding wraps to 0 is a
  // length of 0 and succeeds; a range that wraps ENOMEM; past the top as
  // mprotect.
  kMsync,
  // mlock, munlock: the start rounded down (no alignment needed), the
  // length rounded up over it (wrapping to 0: success, as msync); a range
  // that wraps EINVAL; past the top as mprotect.
  kMlock,
  // mincore: unaligned EINVAL; a range that wraps or passes the top
  // ENOMEM (access_ok); len 0 succeeds.
  kMincore,
};

struct AddressRange {
  uintptr_t start = 0;
  uintptr_t end = 0;  // page-aligned, start <= end <= top
  // The asked-for range went past the top and was cut there: the call
  // acts on what lies below and then fails with ENOMEM (kMprotect,
  // kMadvise, kMsync, kMlock).
  bool cut_at_top = false;
};

inline constexpr uint64_t kRangePage = 4096;

// [addr, addr + len) (no overflow) cut at `top`.
inline int CutAtTop(uintptr_t addr, uint64_t len, uintptr_t top,
                    AddressRange* out) {
  out->start = addr;
  if (addr >= top) {
    out->end = addr;
    out->cut_at_top = len != 0;
  } else if (len > top - addr) {
    out->end = top;
    out->cut_at_top = true;
  } else {
    out->end = addr + len;
  }
  return 0;
}

// Checks [addr, addr + len) as `call` does on Linux, against `top` (page-
// aligned). Returns 0 with *out set, or -errno. A range with start == end
// in *out means "nothing to do" (the call returns 0).
inline int CheckRange(RangeCall call, uintptr_t addr, uint64_t len,
                      uintptr_t top, AddressRange* out) {
  const bool aligned = (addr & (kRangePage - 1)) == 0;
  const bool round_overflows = len > UINT64_MAX - kRangePage + 1;
  const uint64_t rlen =
      round_overflows ? 0 : (len + kRangePage - 1) & ~(kRangePage - 1);
  *out = AddressRange{addr, addr, false};
  switch (call) {
    case RangeCall::kMmapFixed:
      if (len == 0) return -EINVAL;
      if (round_overflows || rlen > top || addr > top - rlen) return -ENOMEM;
      if (!aligned) return -EINVAL;
      out->end = addr + rlen;
      return 0;
    case RangeCall::kMunmap:
      if (!aligned || addr > top || len > top - addr) return -EINVAL;
      if (rlen == 0) return -EINVAL;
      out->end = addr + rlen;
      return 0;
    case RangeCall::kMremapTarget:
      if (!aligned) return -EINVAL;
      if (round_overflows || rlen > top || addr > top - rlen) return -EINVAL;
      out->end = addr + rlen;
      return 0;
    case RangeCall::kMincore:
      if (!aligned) return -EINVAL;
      if (addr + len < addr || addr + len > top) return -ENOMEM;
      out->end = addr + rlen;
      return 0;
    case RangeCall::kMlock: {
      const uint64_t off = addr & (kRangePage - 1);
      addr -= off;
      *out = AddressRange{addr, addr, false};
      // Unsigned wrap-around, as Linux's PAGE_ALIGN(len + offset).
      const uint64_t l = (len + off + kRangePage - 1) & ~(kRangePage - 1);
      if (addr + l < addr) return -EINVAL;
      return CutAtTop(addr, l, top, out);
    }
    case RangeCall::kMsync: {
      if (!aligned) return -EINVAL;
      const uint64_t l = (len + kRangePage - 1) & ~(kRangePage - 1);
      if (addr + l < addr) return -ENOMEM;
      return CutAtTop(addr, l, top, out);
    }
    case RangeCall::kMprotect:
    case RangeCall::kMadvise: {
      if (!aligned) return -EINVAL;
      const int overflow = call == RangeCall::kMadvise ? -EINVAL : -ENOMEM;
      // A length whose rounding overflows (or wraps to 0) is an error.
      if (len != 0 && (round_overflows || rlen == 0)) return overflow;
      if (addr + rlen < addr) return overflow;
      return CutAtTop(addr, rlen, top, out);
    }
  }
  return -EINVAL;
}

}  // namespace sandboxd::mm

#endif  // SANDBOXD_SENTRY_MM_ADDRESS_RANGE_H_
