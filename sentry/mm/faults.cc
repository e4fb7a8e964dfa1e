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

void MM::FaultBlock(VmaMap::const_iterator vit, uintptr_t addr,
                    uintptr_t* start, uintptr_t* end) const {
  // Fault around: back and map the aligned block around the page, within
  // the VMA, so that sequential access faults once per block.
  const Vma& vma = vit->second;
  const bool file_text =
      vma.mappable != nullptr && vma.is_private && !vma.prot.write;
  const uint64_t kBlock =
      (file_text ? kFileFaultAroundPages : kFaultAroundPages) * kPageSize;
  const uintptr_t block = PageRoundDown(addr) & ~(kBlock - 1);
  *start = std::max(vit->first, block);
  *end = vma.end - block > kBlock ? block + kBlock : vma.end;
}

bool MM::HandleFault(uintptr_t addr, bool write, bool exec, int* signo,
                     int* si_code) {
  MemoryFile::TakeRefusedOnThisThread();
  const bool ok = HandleFaultOnce(addr, write, exec, signo, si_code);
  // A backing the limit refused (a fault-around block that then fitted
  // as one page is no failure).
  if (MemoryFile::TakeRefusedOnThisThread() && !ok && *signo == SIGBUS) {
    *signo = 0;
  }
  return ok;
}

bool MM::HandleFaultOnce(uintptr_t addr, bool write, bool exec, int* signo,
                         int* si_code) {
  *signo = SIGSEGV;
  *si_code = SEGV_MAPERR;
  if (addr < min_addr_ || addr >= max_addr_) return false;
  const AsyncLoader* ld = mf_->async_loader();
  if (ld != nullptr && !ld->settled() &&
      ld->options().wait == RestoreWait::kShared) {
    switch (HandleFaultShared(addr, write, exec, signo, si_code)) {
      case SharedFault::kMapped:
        return true;
      case SharedFault::kSignal:
        return false;
      case SharedFault::kContinue:
        break;
    }
  }
  while (true) {
    uint64_t wait_off = 0, wait_len = 0;
    SharedFault r;
    {
      absl::MutexLock l(&mu_);
      r = HandleFaultLocked(addr, write, exec, signo, si_code, &wait_off,
                            &wait_len);
    }
    if (r != SharedFault::kContinue) return r == SharedFault::kMapped;
    // A restored range this fault maps, found under the writer lock (the
    // pages of a shared source backed just now): wait for it without the
    // lock, then fault again.
    if (mf_->WaitLoaded(wait_off, wait_len) < 0) {
      *signo = SIGBUS;
      *si_code = BUS_ADRERR;
      return false;
    }
  }
}

MM::SharedFault MM::HandleFaultShared(uintptr_t addr, bool write, bool exec,
                                      int* signo, int* si_code) {
  const uintptr_t page = PageRoundDown(addr);
  bool page_only = false;
  while (true) {
    uint64_t wait_off, wait_len;
    {
      absl::ReaderMutexLock l(&mu_);
      auto vit = FindVma(addr);
      if (vit == vmas_.end()) return SharedFault::kContinue;
      const Vma& vma = vit->second;
      const Access access =
          write ? Access::kWrite : (exec ? Access::kExec : Access::kRead);
      if (!Allows(vma.prot, access)) return SharedFault::kContinue;
      uintptr_t start, end;
      FaultBlock(vit, addr, &start, &end);
      if (page_only) {
        start = page;
        end = page + kPageSize;
      }
      if (!UnloadedIn(start, end, &wait_off, &wait_len)) {
        // Restored pages (PMAs made by the load, not mapped yet) are
        // mapped here, under the reader lock, when nothing needs
        // allocating or copying.
        auto pit = FindPma(start);
        uintptr_t cur = start;
        for (; pit != pmas_.end() && pit->first <= cur && cur < end; ++pit) {
          if (write && pit->second.needs_copy) return SharedFault::kContinue;
          cur = pit->second.end;
        }
        if (cur < end || !MapBacked(vma, start, end)) {
          return SharedFault::kContinue;
        }
        return SharedFault::kMapped;
      }
    }
    // Not loaded yet: wait for that range (moved to the front of the
    // queue) holding no lock of this MM, then look again.
    if (mf_->WaitLoaded(wait_off, wait_len) < 0) {
      // A failed load in the block; the page itself may be fine.
      if (page_only) {
        *signo = SIGBUS;
        *si_code = BUS_ADRERR;
        return SharedFault::kSignal;
      }
      page_only = true;
    }
  }
}

MM::SharedFault MM::HandleFaultLocked(uintptr_t addr, bool write, bool exec,
                                      int* signo, int* si_code,
                                      uint64_t* wait_off,
                                      uint64_t* wait_len) {
  auto vit = FindVma(addr);
  if (vit == vmas_.end()) vit = GrowStackTo(addr);
  if (vit == vmas_.end()) return SharedFault::kSignal;
  const Vma& vma = vit->second;
  const Access access =
      write ? Access::kWrite : (exec ? Access::kExec : Access::kRead);
  if (!Allows(vma.prot, access)) {
    *si_code = SEGV_ACCERR;
    return SharedFault::kSignal;
  }
  const AsyncLoader* ld = mf_->async_loader();
  const bool exclusive_wait =
      ld != nullptr && ld->options().wait == RestoreWait::kExclusive;
  auto bus = [&] {
    *signo = SIGBUS;
    *si_code = BUS_ADRERR;
    return SharedFault::kSignal;
  };
  // Restored pages of [s, e) not loaded yet: waited for here with
  // RestoreWait::kExclusive (every other thread of this MM waits too),
  // else handed to the caller to wait for without the lock. True if the
  // fault goes on.
  SharedFault unloaded = SharedFault::kMapped;
  auto loaded = [&](uintptr_t s, uintptr_t e) {
    mu_.AssertHeld();  // for the analysis: the lambda runs under it
    if (ld == nullptr || ld->settled()) return true;
    if (exclusive_wait) {
      if (WaitBackedLocked(s, e) == 0) return true;
      unloaded = bus();
      return false;
    }
    if (!UnloadedIn(s, e, wait_off, wait_len)) return true;
    unloaded = SharedFault::kContinue;
    return false;
  };

  uintptr_t start, end;
  FaultBlock(vit, addr, &start, &end);
  const uintptr_t page = PageRoundDown(addr);
  bool no_room;
  uintptr_t backed = EnsureBacked(vit, start, end, &no_room);
  if (backed <= page) {
    // Past the end of a shared object, or out of memory for the page
    // itself (try just the page before giving up).
    if (!no_room || EnsureBacked(vit, page, page + kPageSize, &no_room) <= page) {
      return bus();
    }
    backed = page + kPageSize;
    if (!loaded(page, backed)) return unloaded;
    if ((write && !BreakCow(page, backed, /*unmap_copied=*/false)) ||
        !MapBacked(vma, page, backed)) {
      return bus();
    }
    return SharedFault::kMapped;
  }
  if (!loaded(start, backed)) return unloaded;
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
  if (!MapBacked(vma, start, backed) || !writable) return bus();
  return SharedFault::kMapped;
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
