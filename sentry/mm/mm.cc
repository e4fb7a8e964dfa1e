#include "sentry/mm/mm.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

// Room left above mmap_base for the main stack to grow into (Linux uses the
// stack rlimit, at least 128 MiB).
constexpr uint64_t kStackGap = 128ull << 20;

// MAP_32BIT on x86-64 places mappings in [1 GiB, 2 GiB), as Linux does.
constexpr uintptr_t k32BitLow = 0x40000000;
constexpr uintptr_t k32BitHigh = 0x80000000;

// PROT_SEM (asm-generic/mman-common.h; glibc lacks it): accepted, no effect.
constexpr int kProtSem = 0x8;

// Rounds len up to pages; false if that overflows.
bool RoundLen(uint64_t len, uint64_t* out) {
  if (len > UINT64_MAX - kPageSize + 1) return false;
  *out = PageRoundUp(len);
  return true;
}

bool SameSource(const Vma& a, const Vma& b) {
  return a.shared_anon == b.shared_anon && a.mappable == b.mappable;
}

// Whether `a` (starting at a_start) and the VMA after it can be one VMA.
bool CanMerge(uintptr_t a_start, const Vma& a, uintptr_t b_start,
              const Vma& b) {
  if (a.end != b_start) return false;
  if (!(a.prot == b.prot) || !(a.max_prot == b.max_prot) ||
      a.is_private != b.is_private || a.growsdown != b.growsdown ||
      a.dontfork != b.dontfork || a.wipeonfork != b.wipeonfork ||
      !SameSource(a, b) || a.name != b.name) {
    return false;
  }
  // A source is addressed by offset: the pieces must be contiguous in it.
  if (a.shared_anon || a.mappable) {
    return a.offset + (a.end - a_start) == b.offset;
  }
  return true;
}

}  // namespace

MM::MM(MemoryFile* mf, std::unique_ptr<platform::AddressSpace> as,
       uintptr_t min_addr, uintptr_t max_addr)
    : mf_(mf),
      as_(std::move(as)),
      min_addr_(min_addr),
      max_addr_(max_addr),
      // Small test address spaces get no stack gap.
      mmap_base_(max_addr - min_addr > 2 * kStackGap ? max_addr - kStackGap
                                                     : max_addr) {
  if (as_ != nullptr) as_->SetCodePatcher(this);
}

MM::~MM() {
  if (as_ != nullptr) as_->SetCodePatcher(nullptr);
  absl::MutexLock l(&mu_);
  for (auto& [start, pma] : pmas_) {
    if (pma.owned) mf_->DecRef(pma.file_offset, pma.end - start);
  }
  pmas_.clear();
  vmas_.clear();  // drops references to shared objects
}

absl::StatusOr<std::unique_ptr<MM>> MM::Fork(
    std::unique_ptr<platform::AddressSpace> as) {
  auto child = std::make_unique<MM>(mf_, std::move(as), min_addr_, max_addr_);
  // Exclusive: this MM's PMAs change (needs_copy), and no copy or fault of
  // another thread may run while pages become shared.
  absl::MutexLock l(&mu_);
  absl::MutexLock cl(&child->mu_);
  child->brk_start_ = brk_start_;
  child->brk_ = brk_;
  child->membarrier_.store(membarrier_.load());
  // The patched text and the table are copied with the rest.
  child->patch_table_ = patch_table_;
  child->patch_table_len_ = patch_table_len_;
  child->patched_ = patched_;
  // Ranges this MM's threads may currently write through the AddressSpace
  // and that are now shared: they must fault from now on.
  std::vector<std::pair<uintptr_t, uintptr_t>> protect;
  for (const auto& [start, vma] : vmas_) {
    if (vma.dontfork) continue;
    child->vmas_.emplace(start, vma);
    if (vma.wipeonfork && vma.is_private && !vma.shared_anon && !vma.mappable) {
      continue;  // the child sees fresh zero pages
    }
    // PMAs inside this VMA: the source's pages are shared as they are;
    // owned (private) pages are shared copy-on-write, one more reference
    // each. A PMA may span VMAs (InsertPma merges across them): only the
    // part inside this VMA goes to the child.
    auto pit = pmas_.upper_bound(start);
    if (pit != pmas_.begin() && std::prev(pit)->second.end > start) --pit;
    for (; pit != pmas_.end() && pit->first < vma.end; ++pit) {
      uintptr_t s = std::max(start, pit->first);
      uintptr_t e = std::min(vma.end, pit->second.end);
      Pma& pma = pit->second;
      uint64_t src = pma.file_offset + (s - pit->first);
      if (!pma.owned) {
        child->InsertPma(s, Pma{e, src, /*owned=*/false});
        continue;
      }
      mf_->IncRef(src, e - s);
      // The whole PMA is marked, also parts outside this VMA; those stay
      // exclusive and BreakCow just takes them back.
      pma.needs_copy = true;
      child->InsertPma(s, Pma{e, src, /*owned=*/true, /*needs_copy=*/true});
      if (vma.prot.write) {
        if (!protect.empty() && protect.back().second == s) {
          protect.back().second = e;
        } else {
          protect.emplace_back(s, e);
        }
      }
    }
  }
  // Before the child exists (and with mu_ held, so no fault remaps them),
  // the parent's threads lose write access to the shared pages.
  for (const auto& [s, e] : protect) as_->Unmap(s, e - s);
  return child;
}

bool MM::IsSharedMapping(uintptr_t addr) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = FindVma(addr);
  return it != vmas_.end() && !it->second.is_private;
}

bool MM::Allows(const platform::Prot& prot, Access access) {
  switch (access) {
    case Access::kRead:
      // x86 pages cannot be write- or execute-only.
      return prot.read || prot.write || prot.exec;
    case Access::kWrite:
      return prot.write;
    case Access::kExec:
      return prot.exec;
  }
  return false;
}

bool MM::InBounds(uintptr_t addr, uint64_t n) const {
  return n != 0 && addr >= min_addr_ && addr <= max_addr_ &&
         n <= max_addr_ - addr;
}

// ---------------------------------------------------------------------------
// VMA and PMA set helpers.

MM::VmaMap::iterator MM::FindVma(uintptr_t addr) {
  auto it = vmas_.upper_bound(addr);
  if (it == vmas_.begin()) return vmas_.end();
  --it;
  return addr < it->second.end ? it : vmas_.end();
}

MM::VmaMap::const_iterator MM::FindVma(uintptr_t addr) const {
  auto it = vmas_.upper_bound(addr);
  if (it == vmas_.begin()) return vmas_.end();
  --it;
  return addr < it->second.end ? it : vmas_.end();
}

MM::PmaMap::const_iterator MM::FindPma(uintptr_t addr) const {
  auto it = pmas_.upper_bound(addr);
  if (it == pmas_.begin()) return pmas_.end();
  --it;
  return addr < it->second.end ? it : pmas_.end();
}

bool MM::IsFree(uintptr_t start, uintptr_t end) const {
  auto it = vmas_.lower_bound(start);
  if (it != vmas_.end() && it->first < end) return false;
  if (it != vmas_.begin() && std::prev(it)->second.end > start) return false;
  return true;
}

uintptr_t MM::FindGapTopDown(uint64_t len, uintptr_t lo, uintptr_t hi) const {
  if (hi <= lo || hi - lo < len) return 0;
  uintptr_t gap_end = hi;
  auto it = vmas_.lower_bound(hi);  // VMAs before `it` start below hi
  while (true) {
    uintptr_t gap_start = lo;
    if (it != vmas_.begin()) {
      const auto& [pstart, pvma] = *std::prev(it);
      if (pvma.end > gap_end) {  // straddles hi
        gap_end = pstart;
        --it;
        if (gap_end < lo || gap_end - lo < len) return 0;
        continue;
      }
      gap_start = std::max(lo, pvma.end);
    }
    if (gap_end >= gap_start && gap_end - gap_start >= len) {
      return gap_end - len;
    }
    if (it == vmas_.begin()) return 0;
    --it;
    gap_end = it->first;
    if (gap_end < lo || gap_end - lo < len) return 0;
  }
}

uintptr_t MM::FindPlacement(uintptr_t hint, uint64_t len,
                            bool below_2g) const {
  if (below_2g) {
    return FindGapTopDown(len, std::max(min_addr_, k32BitLow),
                          std::min(max_addr_, k32BitHigh));
  }
  // As Linux's round_hint_to_min: a hint below the minimum means "as low as
  // allowed".
  hint = PageRoundDown(hint);
  if (hint != 0 && hint < min_addr_) hint = min_addr_;
  if (hint != 0 && hint <= max_addr_ && len <= max_addr_ - hint &&
      IsFree(hint, hint + len)) {
    return hint;
  }
  if (uintptr_t a = FindGapTopDown(len, min_addr_, mmap_base_)) return a;
  // Below mmap_base is full: use the stack gap too, as Linux falls back to
  // a bottom-up search of the whole address space.
  return FindGapTopDown(len, min_addr_, max_addr_);
}

MM::VmaMap::iterator MM::SplitVma(uintptr_t addr) {
  auto it = vmas_.upper_bound(addr);
  if (it != vmas_.begin()) {
    auto prev = std::prev(it);
    if (prev->first < addr && addr < prev->second.end) {
      Vma right = prev->second;
      right.offset += addr - prev->first;
      prev->second.end = addr;
      return vmas_.emplace_hint(it, addr, std::move(right));
    }
  }
  return vmas_.lower_bound(addr);
}

MM::VmaMap::iterator MM::IsolateVmas(uintptr_t start, uintptr_t end) {
  SplitVma(end);
  return SplitVma(start);
}

void MM::MergeVmaAround(VmaMap::iterator it) {
  if (it != vmas_.begin()) {
    auto prev = std::prev(it);
    if (CanMerge(prev->first, prev->second, it->first, it->second)) {
      prev->second.end = it->second.end;
      vmas_.erase(it);
      it = prev;
    }
  }
  auto next = std::next(it);
  if (next != vmas_.end() &&
      CanMerge(it->first, it->second, next->first, next->second)) {
    it->second.end = next->second.end;
    vmas_.erase(next);
  }
}

void MM::MergeVmasIn(uintptr_t start, uintptr_t end) {
  auto it = vmas_.lower_bound(start);
  if (it != vmas_.begin()) --it;
  while (it != vmas_.end() && it->first <= end) {
    auto next = std::next(it);
    if (next != vmas_.end() &&
        CanMerge(it->first, it->second, next->first, next->second)) {
      it->second.end = next->second.end;
      vmas_.erase(next);
    } else {
      it = next;
    }
  }
}

MM::VmaMap::iterator MM::InsertVma(uintptr_t start, Vma vma) {
  auto it = vmas_.emplace(start, std::move(vma)).first;
  MergeVmaAround(it);
  return FindVma(start);
}

MM::PmaMap::iterator MM::SplitPma(uintptr_t addr) {
  auto it = pmas_.upper_bound(addr);
  if (it != pmas_.begin()) {
    auto prev = std::prev(it);
    if (prev->first < addr && addr < prev->second.end) {
      Pma right = prev->second;
      right.file_offset += addr - prev->first;
      prev->second.end = addr;
      return pmas_.emplace_hint(it, addr, right);
    }
  }
  return pmas_.lower_bound(addr);
}

void MM::RemovePmas(uintptr_t start, uintptr_t end) {
  SplitPma(end);
  auto it = SplitPma(start);
  while (it != pmas_.end() && it->first < end) {
    if (it->second.owned) {
      mf_->DecRef(it->second.file_offset, it->second.end - it->first);
    }
    it = pmas_.erase(it);
  }
}

void MM::InsertPma(uintptr_t start, Pma pma) {
  auto it = pmas_.emplace(start, pma).first;
  // Merging file-contiguous neighbours keeps the set small and lets one
  // MapFile call cover what the allocator handed out in sequence.
  auto contiguous = [](uintptr_t a_start, const Pma& a, uintptr_t b_start,
                       const Pma& b) {
    return a.end == b_start && a.owned == b.owned &&
           a.needs_copy == b.needs_copy && a.file_offset + (a.end - a_start) == b.file_offset;
  };
  if (it != pmas_.begin()) {
    auto prev = std::prev(it);
    if (contiguous(prev->first, prev->second, it->first, it->second)) {
      prev->second.end = it->second.end;
      pmas_.erase(it);
      it = prev;
    }
  }
  auto next = std::next(it);
  if (next != pmas_.end() &&
      contiguous(it->first, it->second, next->first, next->second)) {
    it->second.end = next->second.end;
    pmas_.erase(next);
  }
}

void MM::MovePmas(uintptr_t start, uintptr_t end, uintptr_t new_start) {
  SplitPma(end);
  auto it = SplitPma(start);
  std::vector<std::pair<uintptr_t, Pma>> moved;
  while (it != pmas_.end() && it->first < end) {
    moved.push_back(*it);
    it = pmas_.erase(it);
  }
  for (auto& [s, pma] : moved) {
    uintptr_t ns = s - start + new_start;
    pma.end = pma.end - start + new_start;
    InsertPma(ns, pma);
  }
}

void MM::UnmapLocked(uintptr_t start, uintptr_t end) {
  if (patch_table_ != 0) UnpatchRangeLocked(start, end, /*restore=*/false);
  auto it = IsolateVmas(start, end);
  bool any = false;
  while (it != vmas_.end() && it->first < end) {
    it = vmas_.erase(it);
    any = true;
  }
  if (!any) return;  // nothing mapped: no PMAs, nothing in the AddressSpace
  RemovePmas(start, end);
  as_->Unmap(start, end - start);
}

bool MM::CanGrowStackTo(uintptr_t addr) const {
  if (addr < min_addr_) return false;
  auto next = vmas_.upper_bound(addr);
  if (next == vmas_.end()) return false;
  const Vma& stack = next->second;
  // Only private anonymous stacks: a shared object has no pages below
  // offset 0 to grow into.
  if (!stack.growsdown || !stack.is_private || stack.shared_anon ||
      stack.mappable) {
    return false;
  }
  if (next != vmas_.begin()) {
    const Vma& prev = std::prev(next)->second;
    if (addr < prev.end) return false;
    // Keep Linux's guard gap to the mapping below.
    if (!prev.growsdown && PageRoundDown(addr) - prev.end < kStackGuardGap) {
      return false;
    }
  }
  return true;
}

MM::VmaMap::iterator MM::GrowStackTo(uintptr_t addr) {
  if (!CanGrowStackTo(addr)) return vmas_.end();
  auto next = vmas_.upper_bound(addr);
  Vma grown = std::move(next->second);
  vmas_.erase(next);
  return vmas_.emplace(PageRoundDown(addr), std::move(grown)).first;
}

// ---------------------------------------------------------------------------
// Backing.

// A fault the program will see as SIGBUS because the Sentry failed (no
// memory left in the memory file, a host read error, the platform refusing
// a mapping), not because the program touched memory it has no right to:
// say so on the Sentry's stderr, at most a few times per address space.
void MM::LogBackingFailure(uintptr_t addr, const std::string& why) {
  if (backing_failures_logged_ >= 8) return;
  backing_failures_logged_++;
  fprintf(stderr, "sentry: mm: cannot back 0x%lx: %s\n",
          static_cast<unsigned long>(addr), why.c_str());
}

uintptr_t MM::EnsureBacked(VmaMap::const_iterator vit, uintptr_t start,
                           uintptr_t end, bool* bus) {
  *bus = false;
  const uintptr_t vma_start = vit->first;
  const Vma& vma = vit->second;
  uintptr_t cur = start;
  while (cur < end) {
    // The first PMA ending after cur.
    auto pit = pmas_.upper_bound(cur);
    if (pit != pmas_.begin() && std::prev(pit)->second.end > cur) --pit;
    if (pit != pmas_.end() && pit->first <= cur) {
      cur = pit->second.end;
      continue;
    }
    uintptr_t gap_end = end;
    if (pit != pmas_.end()) gap_end = std::min(gap_end, pit->first);
    uint64_t len = gap_end - cur;
    if (vma.shared_anon) {
      uint64_t obj_off = vma.offset + (cur - vma_start);
      uint64_t size = vma.shared_anon->size();
      if (obj_off >= size) {
        *bus = true;
        return cur;
      }
      len = std::min(len, size - obj_off);
      InsertPma(cur, Pma{cur + len, vma.shared_anon->file_offset() + obj_off,
                         /*owned=*/false});
      cur += len;
      if (cur < gap_end) {
        *bus = true;
        return cur;
      }
    } else if (vma.mappable && vma.mappable->SupportsShared() &&
               (!vma.is_private || !vma.max_prot.write)) {
      // The file's own pages, page by page (they need not be contiguous
      // in the memory file). Past the end of the file: SIGBUS. A private
      // mapping that can never be written (max_prot) has nothing to copy
      // on write, so it uses them too (the vDSO's [vvar] page).
      uint64_t obj_off = vma.offset + (cur - vma_start);
      uint64_t file_end = PageRoundUp(vma.mappable->Size());
      if (obj_off >= file_end) {
        *bus = true;
        return cur;
      }
      uint64_t page;
      if (vma.mappable->SharedPage(obj_off / kPageSize, &page) < 0) {
        *bus = true;
        return cur;
      }
      InsertPma(cur, Pma{cur + kPageSize, page, /*owned=*/false});
      cur += kPageSize;
    } else if (vma.mappable) {
      // A private copy of the file's pages, read when first touched. Pages
      // wholly past the end of the file give SIGBUS, as on Linux; the tail
      // of the last page reads as zeros.
      uint64_t obj_off = vma.offset + (cur - vma_start);
      uint64_t size = vma.mappable->Size();
      uint64_t file_end = PageRoundUp(size);
      if (obj_off >= file_end) {
        *bus = true;
        return cur;
      }
      len = std::min(len, file_end - obj_off);
      auto off = mf_->Allocate(len);
      if (!off.ok()) {
        LogBackingFailure(cur, off.status().ToString());
        *bus = true;
        return cur;
      }
      uint64_t want = std::min<uint64_t>(len, size - obj_off);
      int64_t n = vma.mappable->ReadAt(mf_->Internal(*off), want, obj_off);
      if (n < 0) {
        LogBackingFailure(cur, absl::StrCat("reading ", vma.mappable->Name(),
                                            " at ", obj_off, ": errno ", -n));
        mf_->Free(*off, len);
        *bus = true;
        return cur;
      }
      InsertPma(cur, Pma{cur + len, *off, /*owned=*/true});
      cur += len;
      if (cur < gap_end) {
        *bus = true;
        return cur;
      }
    } else {
      auto off = mf_->Allocate(len);
      if (!off.ok()) {
        LogBackingFailure(cur, off.status().ToString());
        *bus = true;
        return cur;
      }
      InsertPma(cur, Pma{gap_end, *off, /*owned=*/true});
      cur = gap_end;
    }
  }
  return end;
}

bool MM::BreakCow(uintptr_t start, uintptr_t end, bool unmap_copied,
                  bool reclaim_only) {
  auto it = pmas_.upper_bound(start);
  if (it != pmas_.begin() && std::prev(it)->second.end > start) --it;
  while (it != pmas_.end() && it->first < end) {
    if (!it->second.needs_copy) {
      ++it;
      continue;
    }
    if (it->first < start) it = SplitPma(start);
    if (it->second.end > end) SplitPma(end);  // `it` stays valid
    const uintptr_t s = it->first;
    Pma pma = it->second;
    const uint64_t len = pma.end - s;
    const bool exclusive = mf_->IsExclusive(pma.file_offset, len);
    if (!exclusive && reclaim_only) {
      it = pmas_.lower_bound(pma.end);
      continue;
    }
    if (!exclusive) {
      auto off = mf_->Allocate(len);
      if (!off.ok()) {
        LogBackingFailure(s, off.status().ToString());
        return false;
      }
      // No one writes pages with several references (every owner maps them
      // read-only), so this copy is consistent.
      std::memcpy(mf_->Internal(*off), mf_->Internal(pma.file_offset), len);
      mf_->DecRef(pma.file_offset, len);
      pma.file_offset = *off;
      if (unmap_copied) as_->Unmap(s, len);
    }
    // else: the other owners are gone; the pages are ours again, as
    // Linux's do_wp_page reuses a page whose other mappers went away.
    pma.needs_copy = false;
    pmas_.erase(it);
    InsertPma(s, pma);
    // A PMA merged into the one just inserted is not copy-on-write, so
    // going on from its end skips nothing.
    it = pmas_.lower_bound(pma.end);
  }
  return true;
}

void MM::BackedRanges(const Vma& vma, uintptr_t start, uintptr_t end,
                      std::vector<platform::AddressSpace::FileRange>* out) {
  auto pit = pmas_.upper_bound(start);
  if (pit != pmas_.begin() && std::prev(pit)->second.end > start) --pit;
  for (; pit != pmas_.end() && pit->first < end; ++pit) {
    uintptr_t s = std::max(start, pit->first);
    uintptr_t e = std::min(end, pit->second.end);
    platform::Prot prot = vma.prot;
    if (pit->second.needs_copy) prot.write = false;  // the write faults
    out->push_back(platform::AddressSpace::FileRange{
        s, static_cast<off_t>(pit->second.file_offset + (s - pit->first)),
        e - s, prot});
  }
}

bool MM::MapBacked(const Vma& vma, uintptr_t start, uintptr_t end) {
  std::vector<platform::AddressSpace::FileRange> ranges;
  BackedRanges(vma, start, end, &ranges);
  if (ranges.empty()) return true;
  absl::Status st = as_->MapFiles(mf_->fd(), ranges);
  if (!st.ok()) {
    LogBackingFailure(start, st.ToString());
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// Syscalls.

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
  // File pages are copied into the mapping when first touched, so a shared
  // file mapping can only be offered while nobody can write through it.
  // Writable shared file mappings need the page cache (a later issue).
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
    if (!IsPageAligned(addr)) return -EINVAL;
    if (addr > max_addr_ || len > max_addr_ - addr) return -ENOMEM;
    if (addr < min_addr_) return -EPERM;  // as for mmap_min_addr
    if ((flags & MAP_FIXED_NOREPLACE) && !IsFree(addr, addr + len)) {
      return -EEXIST;
    }
  } else {
    addr = FindPlacement(addr, len, (flags & MAP_32BIT) != 0);
    if (addr == 0) return -ENOMEM;
  }

  // Allocate before replacing anything, so that failure changes nothing.
  if (shared && vma.mappable == nullptr) {
    auto off = mf_->Allocate(len);
    if (!off.ok()) return -ENOMEM;
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
  if (!IsPageAligned(addr) || len == 0) return -EINVAL;
  if (addr > max_addr_ || len > max_addr_ - addr) return -EINVAL;
  len = PageRoundUp(len);  // cannot pass max_addr_, which is aligned
  absl::MutexLock l(&mu_);
  UnmapLocked(addr, addr + len);
  return 0;
}

int64_t MM::Mprotect(uintptr_t addr, uint64_t len, int prot) {
  if (!IsPageAligned(addr)) return -EINVAL;
  const int grows = prot & (PROT_GROWSDOWN | PROT_GROWSUP);
  prot &= ~grows;
  if (grows == (PROT_GROWSDOWN | PROT_GROWSUP)) return -EINVAL;
  if (prot & ~(PROT_READ | PROT_WRITE | PROT_EXEC | kProtSem)) return -EINVAL;
  if (len == 0) return 0;
  if (!RoundLen(len, &len) || addr + len < addr) return -ENOMEM;
  uintptr_t start = addr, end = addr + len;
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
  if (!RoundLen(old_len, &old_len)) return -EFAULT;  // spans past any VMA
  if (!RoundLen(new_len, &new_len) || new_len == 0) return -EINVAL;

  absl::MutexLock l(&mu_);
  auto vit = FindVma(old_addr);
  if (vit == vmas_.end()) return -EFAULT;
  // old_len 0 duplicates a shared mapping (an old DOS-emulator trick);
  // private memory cannot be duplicated that way.
  if (old_len == 0 && vit->second.is_private) return -EINVAL;

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
      if (!IsPageAligned(new_addr)) return -EINVAL;
      if (new_addr > max_addr_ || new_len > max_addr_ - new_addr) {
        return -EINVAL;
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
      UnmapLocked(old_addr + new_len, old_addr + old_len);
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
    // Shrinking always succeeds: it just unmaps the tail.
    if (old_len > new_len) UnmapLocked(old_addr + new_len, old_addr + old_len);
    return static_cast<int64_t>(old_addr);
  }
  if (old_len > vit->second.end - old_addr) return -EFAULT;

  // Grow in place if the range ends the VMA and the space after it is free.
  const uintptr_t old_end = old_addr + old_len;
  const uint64_t delta = new_len - old_len;
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
        !IsFree(old_end, check_end)) {
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
  if (!IsPageAligned(addr)) return -EINVAL;
  uint64_t rlen;
  if (!RoundLen(len, &rlen) || addr + rlen < addr) return -EINVAL;
  if (rlen == 0) return 0;
  const uintptr_t start = addr, end = addr + rlen;

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
  if (cur < end) ret = -ENOMEM;
  if (sets_flag) MergeVmasIn(start, end);
  return ret;
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

// ---------------------------------------------------------------------------
// Faults and copies.

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

template <typename Fn>
uint64_t MM::Walk(uintptr_t addr, uint64_t n, Access access, bool allocate,
                  bool* need_backing, Fn&& fn) {
  *need_backing = false;
  uint64_t done = 0;
  while (done < n) {
    uintptr_t cur = addr + done;
    auto vit = FindVma(cur);
    if (vit == vmas_.end()) {
      // The kernel's own accesses grow stacks too (e.g. a signal frame
      // written below the lowest stack page).
      if (!CanGrowStackTo(cur)) return done;
      if (!allocate) {
        *need_backing = true;
        return done;
      }
      mu_.AssertHeld();
      // Exclusive when `allocate`: Walk declares only the shared hold.
      vit = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return GrowStackTo(cur); }();
    }
    if (!Allows(vit->second.prot, access)) return done;
    const uintptr_t seg_end = std::min<uintptr_t>(vit->second.end, addr + n);
    while (cur < seg_end) {
      auto pit = FindPma(cur);
      if (pit == pmas_.end()) {
        if (!allocate) {
          *need_backing = true;
          return done;
        }
        mu_.AssertHeld();
        bool bus;
        // Back only what this copy touches.
        const uintptr_t want = std::min<uintptr_t>(vit->second.end,
                                                   PageRoundUp(seg_end));
        // Exclusive when `allocate`: Walk declares only the shared hold.
        const uintptr_t backed = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return EnsureBacked(vit, PageRoundDown(cur), want, &bus);
        }();
        if (backed <= cur) return done;
        continue;
      }
      if (access == Access::kWrite && pit->second.needs_copy) {
        // The Sentry writes like the program: never into pages another MM
        // shares.
        if (!allocate) {
          *need_backing = true;
          return done;
        }
        mu_.AssertHeld();
        const uintptr_t want =
            std::min<uintptr_t>(pit->second.end, PageRoundUp(seg_end));
        // Exclusive when `allocate`: Walk declares only the shared hold.
        const bool copied = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return BreakCow(PageRoundDown(cur), want, /*unmap_copied=*/true);
        }();
        if (!copied) return done;
        continue;
      }
      const uint64_t len = std::min<uintptr_t>(pit->second.end, seg_end) - cur;
      fn(mf_->Internal(pit->second.file_offset + (cur - pit->first)), done,
         len);
      done += len;
      cur += len;
    }
  }
  return done;
}

template <typename Fn>
uint64_t MM::WalkWithBacking(uintptr_t addr, uint64_t n, Access access,
                             Fn&& fn) {
  bool need_backing;
  uint64_t done;
  {
    // The common case, pages already backed, shares the lock with other
    // copies and faults of backed pages.
    absl::ReaderMutexLock l(&mu_);
    done = Walk(addr, n, access, /*allocate=*/false, &need_backing, fn);
  }
  if (!need_backing) return done;
  absl::MutexLock l(&mu_);
  const uint64_t base = done;
  done += Walk(addr + base, n - base, access, /*allocate=*/true,
               &need_backing,
               [&fn, base](uint8_t* p, uint64_t off, uint64_t len) {
                 fn(p, base + off, len);
               });
  return done;
}

int64_t MM::CopyIn(uintptr_t addr, void* dst, uint64_t n) {
  if (n == 0) return 0;
  if (!InBounds(addr, n)) return -EFAULT;
  uint8_t* d = static_cast<uint8_t*>(dst);
  uint64_t done = WalkWithBacking(
      addr, n, Access::kRead,
      [d](uint8_t* p, uint64_t off, uint64_t len) { std::memcpy(d + off, p, len); });
  return done > 0 ? static_cast<int64_t>(done) : -EFAULT;
}

int64_t MM::CopyOut(uintptr_t addr, const void* src, uint64_t n) {
  if (n == 0) return 0;
  if (!InBounds(addr, n)) return -EFAULT;
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint64_t done = WalkWithBacking(
      addr, n, Access::kWrite,
      [s](uint8_t* p, uint64_t off, uint64_t len) { std::memcpy(p, s + off, len); });
  return done > 0 ? static_cast<int64_t>(done) : -EFAULT;
}

int64_t MM::CopyInString(uintptr_t addr, uint64_t max_len, std::string* out) {
  out->clear();
  // Look at up to max_len + 1 bytes: the string and its NUL.
  const uint64_t limit = max_len == UINT64_MAX ? max_len : max_len + 1;
  char buf[kPageSize];
  uintptr_t cur = addr;
  while (out->size() < limit) {
    // One page at a time, so that a string ending just before an unmapped
    // page is read without touching that page.
    uint64_t chunk = std::min<uint64_t>(kPageSize - (cur & (kPageSize - 1)),
                                        limit - out->size());
    int64_t r = CopyIn(cur, buf, chunk);
    if (r <= 0) return -EFAULT;
    if (const void* nul = std::memchr(buf, 0, static_cast<size_t>(r))) {
      out->append(buf, static_cast<const char*>(nul) - buf);
      return 0;
    }
    out->append(buf, static_cast<size_t>(r));
    if (static_cast<uint64_t>(r) < chunk) return -EFAULT;
    cur += static_cast<uint64_t>(r);
  }
  return -ENAMETOOLONG;
}

int64_t MM::AtomicWord(uintptr_t addr, bool write,
                       std::atomic<uint32_t>** out) {
  static_assert(sizeof(std::atomic<uint32_t>) == 4 &&
                    std::atomic<uint32_t>::is_always_lock_free,
                "futex words are plain 4-byte words in shared memory");
  if (addr & 3) return -EINVAL;
  if (!InBounds(addr, 4)) return -EFAULT;
  uint8_t* word = nullptr;
  auto take = [&word](uint8_t* p, uint64_t off, uint64_t len) {
    if (off == 0) word = p;
  };
  // Futex waiters compare through the pointer after mu_ is released. In a
  // writable private mapping, a page still shared copy-on-write would be
  // replaced by the first write of another thread, and the waiter would
  // compare a stale page and miss the wake: break COW here, as for a write.
  bool writable = write;
  if (!write) {
    absl::ReaderMutexLock l(&mu_);
    auto vit = FindVma(addr);
    writable = vit != vmas_.end() && vit->second.is_private &&
               vit->second.prot.write;
  }
  // An aligned word never crosses a page, so the walk yields one piece.
  uint64_t done = WalkWithBacking(
      addr, 4, writable ? Access::kWrite : Access::kRead, take);
  if (done != 4 && writable && !write) {
    // The mapping lost PROT_WRITE meanwhile: reading is all that is asked.
    done = WalkWithBacking(addr, 4, Access::kRead, take);
  }
  if (done != 4 || word == nullptr) return -EFAULT;
  *out = reinterpret_cast<std::atomic<uint32_t>*>(word);
  return 0;
}

int64_t MM::UpdateWord(
    uintptr_t addr, const std::function<void(std::atomic<uint32_t>*)>& fn) {
  while (true) {
    std::atomic<uint32_t>* word;
    int64_t r = AtomicWord(addr, /*write=*/true, &word);
    if (r < 0) return r;
    absl::ReaderMutexLock l(&mu_);
    // Between AtomicWord and here the page may have been shared by a fork
    // or moved; then look it up again.
    auto vit = FindVma(addr);
    auto pit = FindPma(addr);
    if (vit == vmas_.end() || !vit->second.prot.write ||
        pit == pmas_.end() || pit->second.needs_copy ||
        mf_->Internal(pit->second.file_offset + (addr - pit->first)) !=
            reinterpret_cast<uint8_t*>(word)) {
      continue;
    }
    fn(word);
    return 0;
  }
}

// ---------------------------------------------------------------------------
// Introspection.

std::string MM::DebugString() const {
  absl::ReaderMutexLock l(&mu_);
  std::string s;
  for (const auto& [start, vma] : vmas_) {
    const bool has_source = vma.shared_anon || vma.mappable;
    std::string line = absl::StrFormat(
        "%08x-%08x %c%c%c%c %08x 00:00 0", start, vma.end,
        vma.prot.read ? 'r' : '-', vma.prot.write ? 'w' : '-',
        vma.prot.exec ? 'x' : '-', vma.is_private ? 'p' : 's',
        has_source ? vma.offset : 0);
    if (!vma.name.empty()) {
      // Linux pads the name to a fixed column.
      constexpr size_t kNameColumn = 73;
      if (line.size() < kNameColumn) line.resize(kNameColumn, ' ');
      else line += ' ';
      line += vma.name;
    }
    s += line;
    s += '\n';
  }
  return s;
}

std::vector<VmaInfo> MM::Vmas() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<VmaInfo> out;
  out.reserve(vmas_.size());
  for (const auto& [start, vma] : vmas_) {
    VmaInfo v;
    v.start = start;
    v.end = vma.end;
    v.prot = vma.prot;
    v.is_private = vma.is_private;
    v.growsdown = vma.growsdown;
    v.offset = (vma.shared_anon || vma.mappable) ? vma.offset : 0;
    v.name = vma.name;
    v.mappable = vma.mappable;
    v.shared_anon = vma.shared_anon != nullptr;
    out.push_back(std::move(v));
  }
  return out;
}

size_t MM::NumVmas() const {
  absl::ReaderMutexLock l(&mu_);
  return vmas_.size();
}

size_t MM::NumPmas() const {
  absl::ReaderMutexLock l(&mu_);
  return pmas_.size();
}

uint64_t MM::BackedBytes() const {
  absl::ReaderMutexLock l(&mu_);
  uint64_t n = 0;
  for (const auto& [start, pma] : pmas_) n += pma.end - start;
  return n;
}

uintptr_t MM::brk() const {
  absl::ReaderMutexLock l(&mu_);
  return brk_;
}

}  // namespace sandboxd::mm
