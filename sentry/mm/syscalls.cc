// MM's memory syscalls: mmap, munmap, mprotect, mremap, brk, madvise and
// prctl(PR_SET_VMA_ANON_NAME).
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>

#include "sentry/mm/address_range.h"
#include "sentry/mm/mm.h"

namespace sandboxd::mm {

// The largest private writable allocation Linux's heuristic overcommit
// (vm.overcommit_memory=0) lets through at once: RAM plus swap.
static uint64_t OvercommitLimit() {
  static const uint64_t limit = []() -> uint64_t {
    struct sysinfo si;
    if (sysinfo(&si) != 0) return ~0ull;
    return (static_cast<uint64_t>(si.totalram) + si.totalswap) * si.mem_unit;
  }();
  return limit;
}

namespace {

// PROT_SEM (asm-generic/mman-common.h; glibc lacks it): accepted, no effect.
constexpr int kProtSem = 0x8;

// Rounds len up to pages; false if that overflows.
bool RoundLen(uint64_t len, uint64_t* out) {
  if (len > UINT64_MAX - kPageSize + 1) return false;
  *out = PageRoundUp(len);
  return true;
}

}  // namespace

bool MM::MayExpandLocked(uint64_t bytes, bool data, uintptr_t replace_start,
                         uintptr_t replace_end) const {
  const uint64_t as_limit = as_limit_.load(std::memory_order_relaxed);
  const uint64_t data_limit = data_limit_.load(std::memory_order_relaxed);
  constexpr uint64_t kNone = ~uint64_t{0};
  if (as_limit == kNone && (!data || data_limit == kNone)) return true;
  uint64_t total = 0, data_total = 0;
  for (const auto& [start, v] : vmas_) {
    // The part a MAP_FIXED replaces is not counted twice.
    const uintptr_t s = std::max(start, replace_start);
    const uintptr_t e = std::min(v.end, replace_end);
    const uint64_t len = (v.end - start) - (s < e ? e - s : 0);
    total += len;
    if (v.is_private && v.prot.write && !v.growsdown && v.name != "[stack]") {
      data_total += len;
    }
  }
  if (as_limit != kNone && (bytes > as_limit || total > as_limit - bytes)) {
    return false;
  }
  if (data && data_limit != kNone &&
      (bytes > data_limit || data_total > data_limit - bytes)) {
    return false;
  }
  return true;
}

int64_t MM::Mmap(uintptr_t addr, uint64_t len, int prot, int flags) {
  if (!(flags & MAP_ANONYMOUS)) return -ENODEV;  // files: MmapFile
  return MmapInternal(addr, len, prot, flags, nullptr, 0,
                      platform::Prot{true, true, true});
}

int64_t MM::MmapFile(uintptr_t addr, uint64_t len, int prot, int flags,
                     std::shared_ptr<Mappable> file, uint64_t offset,
                     platform::Prot max_prot) {
  if (file == nullptr || (flags & MAP_ANONYMOUS)) return -EINVAL;
  if (offset % kPageSize != 0) return -EINVAL;
  uint64_t rounded;
  if (len == 0) return -EINVAL;
  if (!RoundLen(len, &rounded) || offset + rounded < offset) return -EOVERFLOW;
  return MmapInternal(addr, len, prot, flags, std::move(file), offset,
                      max_prot);
}

int64_t MM::MmapInternal(uintptr_t addr, uint64_t len, int prot, int flags,
                         std::shared_ptr<Mappable> file, uint64_t offset,
                         platform::Prot max_prot) {
  if (len == 0) return -EINVAL;
  if (!RoundLen(len, &len) || len > max_addr_ - min_addr_) return -ENOMEM;
  // Linux's heuristic overcommit (mode 0) refuses a private writable
  // mapping larger than all of RAM and swap unless MAP_NORESERVE.
  if ((flags & MAP_PRIVATE) && (prot & PROT_WRITE) &&
      !(flags & MAP_NORESERVE) && len > OvercommitLimit()) {
    return -ENOMEM;
  }

  bool shared;
  switch (flags & MAP_TYPE) {
    case MAP_SHARED:
      shared = true;
      break;
    case MAP_PRIVATE:
      shared = false;
      break;
    default:  // including MAP_SHARED_VALIDATE, which Linux rejects for anon
      return -EINVAL;
  }
  if (shared && (flags & MAP_GROWSDOWN)) return -EINVAL;
  // Files without pages of their own (SupportsShared) are copied into the
  // mapping when first touched, so a shared mapping of one can only be
  // offered while nobody can write through it.
  if (file != nullptr && shared && !file->SupportsShared()) {
    if (prot & PROT_WRITE) return -ENODEV;
    max_prot.write = false;
  }
  platform::Prot want = platform::Prot::FromHost(prot);
  if ((want.read && !max_prot.read) || (want.write && !max_prot.write) ||
      (want.exec && !max_prot.exec)) {
    return -EACCES;
  }

  Vma vma;
  vma.end = 0;  // set below
  vma.prot = want;
  vma.max_prot = max_prot;
  vma.is_private = !shared;
  vma.growsdown = (flags & MAP_GROWSDOWN) != 0;
  if (file != nullptr) {
    vma.mappable = std::move(file);
    vma.offset = offset;
    vma.name = vma.mappable->Name();
  }

  absl::MutexLock l(&mu_);
  const bool fixed = (flags & (MAP_FIXED | MAP_FIXED_NOREPLACE)) != 0;
  if (fixed) {
    AddressRange r;
    if (int e = CheckRange(RangeCall::kMmapFixed, addr, len, max_addr_, &r)) {
      return e;
    }
    if (addr < min_addr_) return -EPERM;  // as for mmap_min_addr
    if ((flags & MAP_FIXED_NOREPLACE) && !IsFree(addr, addr + len)) {
      return -EEXIST;
    }
  } else {
    addr = FindPlacement(addr, len, (flags & MAP_32BIT) != 0);
    if (addr == 0) return -ENOMEM;
  }
  if (!MayExpandLocked(len, !shared && want.write && !vma.growsdown,
                       fixed ? addr : 0, fixed ? addr + len : 0)) {
    return -ENOMEM;
  }

  // Allocate before replacing anything, so that failure changes nothing.
  if (shared && vma.mappable == nullptr) {
    auto off = mf_->Allocate(len);
    if (!off.ok()) {
      // The whole object is allocated here, not at its faults: its
      // refusal is this call's ENOMEM, not a reason to kill anyone.
      MemoryFile::TakeRefusedOnThisThread();
      return -ENOMEM;
    }
    vma.shared_anon = std::make_shared<SharedAnon>(mf_, *off, len);
    vma.name = "/dev/zero (deleted)";  // what Linux shows for shared anon
  }
  if (fixed) UnmapLocked(addr, addr + len);
  vma.end = addr + len;
  auto it = InsertVma(addr, std::move(vma));

  if ((flags & MAP_POPULATE) && !(flags & MAP_NONBLOCK)) {
    bool bus;
    uintptr_t backed = EnsureBacked(it, addr, addr + len, &bus);
    // Like Linux, populating is best effort: failure leaves pages to fault.
    if (Allows(it->second.prot, Access::kRead)) {
      MapBacked(it->second, addr, backed);
    }
  }
  return static_cast<int64_t>(addr);
}

int64_t MM::Munmap(uintptr_t addr, uint64_t len) {
  AddressRange r;
  if (int e = CheckRange(RangeCall::kMunmap, addr, len, max_addr_, &r)) {
    return e;
  }
  absl::MutexLock l(&mu_);
  UnmapLocked(r.start, r.end);
  return 0;
}

int64_t MM::Mprotect(uintptr_t addr, uint64_t len, int prot) {
  // Linux's order: the flags, the range, len 0, the protection.
  const int grows = prot & (PROT_GROWSDOWN | PROT_GROWSUP);
  prot &= ~grows;
  if (grows == (PROT_GROWSDOWN | PROT_GROWSUP)) return -EINVAL;
  AddressRange r;
  if (int e = CheckRange(RangeCall::kMprotect, addr, len, max_addr_, &r)) {
    return e;
  }
  if (len == 0) return 0;
  if (prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC | kProtSem)) return -EINVAL;
  if (r.start == r.end) return -ENOMEM;  // all of it past the top
  uintptr_t start = r.start, end = r.end;
  const platform::Prot new_prot = platform::Prot::FromHost(prot);

  absl::MutexLock l(&mu_);
  if (grows != 0) {
    // PROT_GROWSDOWN extends the change down to the start of a growsdown
    // VMA; x86-64 has no growsup VMAs.
    auto vit = FindVma(start);
    if (vit == vmas_.end() || grows == PROT_GROWSUP ||
        !vit->second.growsdown) {
      return -EINVAL;
    }
    start = vit->first;
  }
  // As Linux: VMAs before the first hole keep the new protection and the
  // call fails with ENOMEM.
  int64_t ret = 0;
  bool reduced = false;
  auto it = IsolateVmas(start, end);
  uintptr_t cur = start;
  while (cur < end) {
    if (it == vmas_.end() || it->first != cur) {
      ret = -ENOMEM;
      break;
    }
    Vma& vma = it->second;
    const platform::Prot& m = vma.max_prot;
    if ((new_prot.read && !m.read) || (new_prot.write && !m.write) ||
        (new_prot.exec && !m.exec)) {
      ret = -EACCES;
      break;
    }
    reduced |= (vma.prot.read && !new_prot.read) ||
               (vma.prot.write && !new_prot.write) ||
               (vma.prot.exec && !new_prot.exec);
    vma.prot = new_prot;
    cur = vma.end;
    ++it;
  }
  // Host mappings that now allow too much are replaced by ones with the
  // new protection (the backed pages: nothing else can be mapped), in one
  // request, as unmapping them would be: a program that makes memory
  // read-only reads it again soon (ld.so's RELRO), and each page unmapped
  // here would fault then. PROT_NONE just unmaps. Raising protection needs
  // nothing: the access faults and HandleFault remaps.
  if (reduced && cur > start) {
    std::vector<platform::AddressSpace::FileRange> ranges;
    if (new_prot.read || new_prot.write || new_prot.exec) {
      for (auto v = FindVma(start); v != vmas_.end() && v->first < cur; ++v) {
        BackedRanges(v->second, std::max(start, v->first),
                     std::min(cur, v->second.end), &ranges);
      }
    }
    if (!(new_prot.read || new_prot.write || new_prot.exec) ||
        (!ranges.empty() && !as_->MapFiles(mf_->fd(), ranges).ok())) {
      as_->Unmap(start, cur - start);
    }
  }
  MergeVmasIn(start, end);
  if (ret == 0 && r.cut_at_top) ret = -ENOMEM;  // nothing is mapped there
  return ret;
}

int64_t MM::Mremap(uintptr_t old_addr, uint64_t old_len, uint64_t new_len,
                   int flags, uintptr_t new_addr) {
  if (flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP)) {
    return -EINVAL;
  }
  const bool may_move = flags & MREMAP_MAYMOVE;
  const bool fixed = flags & MREMAP_FIXED;
  const bool dontunmap = flags & MREMAP_DONTUNMAP;
  if (fixed && !may_move) return -EINVAL;
  if (dontunmap && (!may_move || old_len != new_len)) return -EINVAL;
  if (!IsPageAligned(old_addr)) return -EINVAL;
  // Rounded as Linux's PAGE_ALIGN: a length that wraps becomes 0.
  old_len = RoundLen(old_len, &old_len) ? old_len : 0;
  if (!RoundLen(new_len, &new_len) || new_len == 0) return -EINVAL;
  if (old_addr + old_len < old_addr) return -EINVAL;  // the old range wraps

  absl::MutexLock l(&mu_);
  auto vit = FindVma(old_addr);
  if (vit == vmas_.end()) return -EFAULT;
  // old_len 0 duplicates a shared mapping (an old DOS-emulator trick);
  // private memory cannot be duplicated that way.
  if (old_len == 0 && vit->second.is_private) return -EINVAL;
  // What a shrink unmaps is checked as munmap checks its range (the old
  // range may run past the top, where the stub lives).
  AddressRange tail;
  if (old_len > new_len) {
    if (int e = CheckRange(RangeCall::kMunmap, old_addr + new_len,
                           old_len - new_len, max_addr_, &tail)) {
      return e;
    }
  }

  // Moves [old_addr, old_addr + old_len) to [to, to + new_len) without
  // copying: the PMAs are re-keyed. Preconditions: the old range is within
  // the VMA at vit, the new range is free.
  auto move = [&](uintptr_t to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Patched sites would move away from their table entries' return
    // addresses: restore them first.
    if (patch_table_ != 0 && old_len != 0) {
      UnpatchRangeLocked(old_addr, old_addr + old_len, /*restore=*/true);
      vit = FindVma(old_addr);
    }
    Vma nv = vit->second;
    nv.offset += old_addr - vit->first;
    nv.end = to + new_len;
    if (old_len != 0) MovePmas(old_addr, old_addr + old_len, to);
    if (dontunmap) {
      // The old VMA stays; its pages are gone (private anon reads zeros).
      as_->Unmap(old_addr, old_len);
    } else if (old_len != 0) {
      UnmapLocked(old_addr, old_addr + old_len);
    }
    InsertVma(to, std::move(nv));
    return static_cast<int64_t>(to);
  };

  if (fixed || dontunmap) {
    if (fixed) {
      AddressRange to;
      if (int e = CheckRange(RangeCall::kMremapTarget, new_addr, new_len,
                             max_addr_, &to)) {
        return e;
      }
      if (new_addr < min_addr_) return -EPERM;
    }
    if (fixed && old_addr < new_addr + new_len && new_addr < old_addr + old_len) {
      return -EINVAL;  // the ranges must not overlap
    }
    if (old_len > vit->second.end - old_addr) return -EFAULT;
    if (fixed) {
      UnmapLocked(new_addr, new_addr + new_len);
    }
    if (old_len > new_len) {
      UnmapLocked(tail.start, tail.end);
      old_len = new_len;
    }
    vit = FindVma(old_addr);  // UnmapLocked may have split it
    if (!fixed) {
      new_addr = FindPlacement(new_addr, new_len, false);
      if (new_addr == 0) return -ENOMEM;
    }
    return move(new_addr);
  }

  if (old_len >= new_len) {
    // Shrinking just unmaps the tail (checked above).
    if (old_len > new_len) UnmapLocked(tail.start, tail.end);
    return static_cast<int64_t>(old_addr);
  }
  if (old_len > vit->second.end - old_addr) return -EFAULT;

  // Grow in place if the range ends the VMA and the space after it is free.
  const uintptr_t old_end = old_addr + old_len;
  const uint64_t delta = new_len - old_len;
  {
    const Vma& v = vit->second;
    if (!MayExpandLocked(old_len == 0 ? new_len : delta,
                         v.is_private && v.prot.write && !v.growsdown)) {
      return -ENOMEM;
    }
  }
  if (old_len != 0 && old_end == vit->second.end && old_end <= max_addr_ &&
      delta <= max_addr_ - old_end && IsFree(old_end, old_end + delta)) {
    vit->second.end = old_end + delta;
    MergeVmaAround(vit);
    return static_cast<int64_t>(old_addr);
  }
  if (!may_move) return -ENOMEM;
  uintptr_t to = FindPlacement(0, new_len, false);
  if (to == 0) return -ENOMEM;
  return move(to);
}

int64_t MM::Brk(uintptr_t addr) {
  absl::MutexLock l(&mu_);
  // brk(0) and anything below the start are queries, as in Linux. Before
  // the loader has set the start there is no heap.
  if (brk_start_ == 0 || addr < brk_start_ || addr > max_addr_) {
    return static_cast<int64_t>(brk_);
  }
  const uintptr_t old_end = PageRoundUp(brk_);
  const uintptr_t new_end = PageRoundUp(addr);
  if (new_end < old_end) {
    UnmapLocked(new_end, old_end);
  } else if (new_end > old_end) {
    // Linux keeps a guard page between the heap and the next mapping. On
    // failure brk returns the old break, not an error.
    uintptr_t check_end = std::min<uintptr_t>(max_addr_, new_end + kPageSize);
    if (new_end > max_addr_ || new_end - old_end > OvercommitLimit() ||
        !IsFree(old_end, check_end) ||
        !MayExpandLocked(new_end - old_end, /*data=*/true)) {
      return static_cast<int64_t>(brk_);
    }
    Vma heap;
    heap.end = new_end;
    heap.prot = platform::Prot{true, true, false};
    heap.max_prot = platform::Prot{true, true, true};
    heap.name = "[heap]";
    InsertVma(old_end, std::move(heap));
  }
  brk_ = addr;
  return static_cast<int64_t>(brk_);
}

void MM::SetBrkStart(uintptr_t addr) {
  absl::MutexLock l(&mu_);
  brk_start_ = brk_ = PageRoundUp(addr);
}

int64_t MM::Madvise(uintptr_t addr, uint64_t len, int advice) {
  switch (advice) {
    case MADV_NORMAL:
    case MADV_RANDOM:
    case MADV_SEQUENTIAL:
    case MADV_WILLNEED:
    case MADV_DONTNEED:
    case MADV_FREE:
    case MADV_REMOVE:
    case MADV_DONTFORK:
    case MADV_DOFORK:
    case MADV_MERGEABLE:
    case MADV_UNMERGEABLE:
    case MADV_HUGEPAGE:
    case MADV_NOHUGEPAGE:
    case MADV_DONTDUMP:
    case MADV_DODUMP:
    case MADV_WIPEONFORK:
    case MADV_KEEPONFORK:
    case MADV_COLD:
    case MADV_PAGEOUT:
      break;
    default:
      return -EINVAL;
  }
  AddressRange r;
  if (int e = CheckRange(RangeCall::kMadvise, addr, len, max_addr_, &r)) {
    return e;
  }
  if (len == 0) return 0;
  if (r.start == r.end) return -ENOMEM;  // all of it past the top
  const uintptr_t start = r.start, end = r.end;

  absl::MutexLock l(&mu_);
  const bool sets_flag = advice == MADV_DONTFORK || advice == MADV_DOFORK ||
                         advice == MADV_WIPEONFORK ||
                         advice == MADV_KEEPONFORK;
  // Linux applies the advice to the mapped parts and reports holes with
  // ENOMEM; a VMA that does not accept the advice stops the walk.
  auto it = sets_flag ? IsolateVmas(start, end) : vmas_.lower_bound(start);
  if (!sets_flag && it != vmas_.begin() && std::prev(it)->second.end > start) {
    --it;
  }
  int64_t ret = 0;
  uintptr_t cur = start;
  for (; it != vmas_.end() && it->first < end; ++it) {
    if (it->first > cur) ret = -ENOMEM;
    Vma& vma = it->second;
    const uintptr_t s = std::max(start, it->first);
    const uintptr_t e = std::min(end, vma.end);
    cur = e;
    switch (advice) {
      case MADV_FREE:
        if (!vma.is_private || vma.shared_anon || vma.mappable) {
          MergeVmasIn(start, end);
          return -EINVAL;
        }
        [[fallthrough]];
      case MADV_DONTNEED:
        // Drop the pages: private anonymous memory reads zeros afterwards;
        // shared memory keeps its data in the object and faults back in.
        RemovePmas(s, e);
        as_->Unmap(s, e - s);
        break;
      case MADV_REMOVE:
        if (!vma.shared_anon) return -EINVAL;
        if (!vma.prot.write) return -EACCES;
        {
          // Punch the object's pages: every mapping of it sees zeros.
          uint64_t obj_off = vma.offset + (s - it->first);
          uint64_t size = vma.shared_anon->size();
          if (obj_off < size) {
            mf_->Decommit(vma.shared_anon->file_offset() + obj_off,
                          std::min<uint64_t>(e - s, size - obj_off));
          }
        }
        RemovePmas(s, e);
        as_->Unmap(s, e - s);
        break;
      case MADV_DONTFORK:
        vma.dontfork = true;
        break;
      case MADV_DOFORK:
        vma.dontfork = false;
        break;
      case MADV_WIPEONFORK:
        if (!vma.is_private || vma.mappable) {
          MergeVmasIn(start, end);
          return -EINVAL;
        }
        vma.wipeonfork = true;
        break;
      case MADV_KEEPONFORK:
        vma.wipeonfork = false;
        break;
      default:
        break;  // hints we have no use for
    }
  }
  if (cur < end || r.cut_at_top) ret = -ENOMEM;
  if (sets_flag) MergeVmasIn(start, end);
  return ret;
}

namespace {

// Whether the VMAs of `vmas` cover [start, end) without a hole.
template <typename VmaMap>
bool Covered(const VmaMap& vmas, uintptr_t start, uintptr_t end) {
  auto it = vmas.upper_bound(start);
  if (it == vmas.begin()) return start >= end;
  --it;
  uintptr_t cur = start;
  for (; it != vmas.end() && cur < end; ++it) {
    if (it->first > cur || it->second.end <= cur) return false;
    cur = it->second.end;
  }
  return cur >= end;
}

}  // namespace

int64_t MM::Msync(uintptr_t addr, uint64_t len, int flags) {
  if (flags & ~(MS_ASYNC | MS_INVALIDATE | MS_SYNC)) return -EINVAL;
  if (!IsPageAligned(addr)) return -EINVAL;
  if ((flags & MS_ASYNC) && (flags & MS_SYNC)) return -EINVAL;
  AddressRange r;
  if (int e = CheckRange(RangeCall::kMsync, addr, len, max_addr_, &r)) {
    return e;
  }
  if (r.start == r.end && !r.cut_at_top) return 0;
  std::vector<std::shared_ptr<Mappable>> files;
  {
    absl::MutexLock l(&mu_);
    if (r.cut_at_top || !Covered(vmas_, r.start, r.end)) return -ENOMEM;
    // Shared file mappings in the range: their pages go back to the file
    // (MS_ASYNC too, at once), outside the lock.
    for (auto it = FindVma(r.start); it != vmas_.end() && it->first < r.end;
         ++it) {
      if (it->second.mappable != nullptr && !it->second.is_private) {
        files.push_back(it->second.mappable);
      }
    }
  }
  for (const auto& f : files) {
    if (f->Sync() < 0) return -EIO;
  }
  return 0;
}

void MM::SyncSharedFiles() {
  std::vector<std::shared_ptr<Mappable>> files;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [start, vma] : vmas_) {
      if (vma.mappable != nullptr && !vma.is_private) {
        if (files.empty() || files.back() != vma.mappable) {
          files.push_back(vma.mappable);
        }
      }
    }
  }
  for (const auto& f : files) f->Sync();
}

int64_t MM::Mlock(uintptr_t addr, uint64_t len) {
  AddressRange r;
  if (int e = CheckRange(RangeCall::kMlock, addr, len, max_addr_, &r)) {
    return e;
  }
  if (r.start == r.end && !r.cut_at_top) return 0;
  absl::MutexLock l(&mu_);
  return !r.cut_at_top && Covered(vmas_, r.start, r.end) ? 0 : -ENOMEM;
}

int64_t MM::Mincore(uintptr_t addr, uint64_t len, std::vector<uint8_t>* vec) {
  AddressRange r;
  if (int e = CheckRange(RangeCall::kMincore, addr, len, max_addr_, &r)) {
    return e;
  }
  vec->clear();
  absl::MutexLock l(&mu_);
  for (uintptr_t p = r.start; p < r.end; p += kPageSize) {
    auto v = FindVma(p);
    if (v == vmas_.end()) return -ENOMEM;
    vec->push_back(FindPma(p) != pmas_.end() ? 1 : 0);
  }
  return 0;
}

int64_t MM::SetName(uintptr_t addr, uint64_t len, const std::string& name) {
  uint64_t rlen;
  if (!IsPageAligned(addr) || !RoundLen(len, &rlen) || addr + rlen < addr) {
    return -EINVAL;
  }
  if (rlen == 0) return 0;
  const uintptr_t end = addr + rlen;
  absl::MutexLock l(&mu_);
  int64_t ret = 0;
  uintptr_t cur = addr;
  for (auto it = IsolateVmas(addr, end); it != vmas_.end() && it->first < end;
       ++it) {
    if (it->first > cur) ret = -ENOMEM;
    it->second.name = name;
    cur = it->second.end;
  }
  if (cur < end) ret = -ENOMEM;
  MergeVmasIn(addr, end);
  return ret;
}

}  // namespace sandboxd::mm
