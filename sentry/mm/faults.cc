// MM's page faults (with fault-around) and the prefault at exec.
#include <signal.h>

#include <algorithm>
#include <vector>

#include "sentry/mm/mm.h"

namespace sandboxd::mm {

bool MM::HandleFault(uintptr_t addr, bool write, bool exec, int* si_code) {
  int signo;
  return HandleFault(addr, write, exec, &signo, si_code);
}

bool MM::HandleFault(uintptr_t addr, bool write, bool exec, int* signo,
                     int* si_code) {
  *signo = SIGSEGV;
  *si_code = SEGV_MAPERR;
  if (addr < min_addr_ || addr >= max_addr_) return false;
  absl::MutexLock l(&mu_);
  auto vit = FindVma(addr);
  if (vit == vmas_.end()) vit = GrowStackTo(addr);
  if (vit == vmas_.end()) return false;
  const Vma& vma = vit->second;
  const Access access =
      write ? Access::kWrite : (exec ? Access::kExec : Access::kRead);
  if (!Allows(vma.prot, access)) {
    *si_code = SEGV_ACCERR;
    return false;
  }

  // Fault around: back and map the aligned block around the page, within
  // the VMA, so that sequential access faults once per block.
  const bool file_text =
      vma.mappable != nullptr && vma.is_private && !vma.prot.write;
  const uint64_t kBlock =
      (file_text ? kFileFaultAroundPages : kFaultAroundPages) * kPageSize;
  const uintptr_t page = PageRoundDown(addr);
  const uintptr_t block = page & ~(kBlock - 1);
  const uintptr_t start = std::max(vit->first, block);
  const uintptr_t end = vma.end - block > kBlock ? block + kBlock : vma.end;
  bool bus;
  uintptr_t backed = EnsureBacked(vit, start, end, &bus);
  if (backed <= page) {
    // Past the end of a shared object, or out of memory for the page
    // itself (try just the page before giving up).
    if (!bus || EnsureBacked(vit, page, page + kPageSize, &bus) <= page) {
      *signo = SIGBUS;
      *si_code = BUS_ADRERR;
      return false;
    }
    backed = page + kPageSize;
    if ((write && !BreakCow(page, backed, /*unmap_copied=*/false)) ||
        !MapBacked(vma, page, backed)) {
      *signo = SIGBUS;
      *si_code = BUS_ADRERR;
      return false;
    }
    return true;
  }
  // A write to copy-on-write pages copies the block mapped here, not just
  // the page: a fault costs more than copying 64 KiB, and writes to a page
  // are usually followed by writes to its neighbours. If memory is short,
  // the page alone will do. (Mapping replaces the old pages: no unmap.)
  const bool writable =
      !write || BreakCow(start, backed, /*unmap_copied=*/false) ||
      BreakCow(page, page + kPageSize, /*unmap_copied=*/false);
  // Copy-on-write pages whose other owners are gone (a forked child that
  // exited or exec'd) are taken back on any fault, so that the usual read
  // before a write (of the stack, say) costs one fault, not two.
  if (!write && vma.prot.write) {
    BreakCow(start, backed, /*unmap_copied=*/false, /*reclaim_only=*/true);
  }
  // Map even if that failed: pieces already copied must replace the old
  // pages in the AddressSpace.
  if (!MapBacked(vma, start, backed) || !writable) {
    *signo = SIGBUS;
    *si_code = BUS_ADRERR;
    return false;
  }
  return true;
}

void MM::Prefault(uint64_t max_file_bytes) {
  absl::MutexLock l(&mu_);
  // Back everything first, then map it all in one request.
  std::vector<platform::AddressSpace::FileRange> ranges;
  for (auto vit = vmas_.begin(); vit != vmas_.end(); ++vit) {
    const Vma& vma = vit->second;
    if (!Allows(vma.prot, Access::kRead)) continue;
    if (vma.mappable != nullptr) {
      if (vma.end - vit->first > max_file_bytes) continue;
      bool bus;
      const uintptr_t backed = EnsureBacked(vit, vit->first, vma.end, &bus);
      BackedRanges(vma, vit->first, backed, &ranges);
    } else if (vma.shared_anon == nullptr) {
      // Only what is backed already: zero pages made ahead would be
      // memory the program may never use.
      BackedRanges(vma, vit->first, vma.end, &ranges);
    }
  }
  if (ranges.empty()) return;
  // Best effort: a range that failed faults later, and maps then.
  absl::Status st = as_->MapFiles(mf_->fd(), ranges);
  if (!st.ok()) LogBackingFailure(ranges.front().addr, st.ToString());
}

}  // namespace sandboxd::mm
