// MM's VMA and PMA sets: lookup, placement, split, merge, insert and
// remove, and growing the stack down into a fault.
#include <algorithm>
#include <utility>

#include "sentry/mm/mm.h"

namespace sandboxd::mm {

namespace {

// MAP_32BIT on x86-64 places mappings in [1 GiB, 2 GiB), as Linux does.
constexpr uintptr_t k32BitLow = 0x40000000;
constexpr uintptr_t k32BitHigh = 0x80000000;

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
    if (it->second.owned || it->second.pinned) {
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
           a.needs_copy == b.needs_copy && a.pinned == b.pinned && a.file_offset + (a.end - a_start) == b.file_offset;
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

}  // namespace sandboxd::mm
