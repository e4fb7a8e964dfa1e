// MM's backing: PMAs made for VMAs (anonymous zero pages, shared objects,
// pages read from a file), copy-on-write broken, and backed pages mapped
// into the platform AddressSpace.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sentry/mm/mm.h"

namespace sandboxd::mm {

// A fault the program will see as SIGBUS because the Sentry failed (no
// memory left in the memory file, a host read error, the platform refusing
// a mapping), not because the program touched memory it has no right to:
// say so on the Sentry's stderr, at most a few times per address space.
void MM::LogBackingFailure(uintptr_t addr, const absl::Status& why) {
  // The memory limit's refusals are the OOM killer's to report.
  if (absl::IsResourceExhausted(why)) return;
  LogBackingFailure(addr, why.ToString());
}

void MM::LogBackingFailure(uintptr_t addr, const std::string& why) {
  if (backing_failures_logged_.fetch_add(1, std::memory_order_relaxed) >= 8) {
    return;
  }
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
      InsertPma(cur, Pma{cur + kPageSize, page, /*owned=*/false,
                         /*needs_copy=*/false, /*pinned=*/true});
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
        LogBackingFailure(cur, off.status());
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
        LogBackingFailure(cur, off.status());
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
      // Restored pages are copied only once loaded. Callers waited for
      // them already (before taking the writer lock): this finds them
      // loaded, or failed.
      if (mf_->WaitLoaded(pma.file_offset, len) < 0) {
        LogBackingFailure(s, "its restored pages could not be loaded");
        return false;
      }
      auto off = mf_->Allocate(len);
      if (!off.ok()) {
        LogBackingFailure(s, off.status());
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
  const AsyncLoader* ld = mf_->async_loader();
  for (; pit != pmas_.end() && pit->first < end; ++pit) {
    uintptr_t s = std::max(start, pit->first);
    uintptr_t e = std::min(end, pit->second.end);
    uint64_t us, ue;
    // Never map what a restore has not loaded: the program would see
    // zeros. Its next fault waits for it.
    if (ld != nullptr &&
        ld->FirstUnloaded(pit->second.file_offset + (s - pit->first), e - s,
                          &us, &ue)) {
      continue;
    }
    platform::Prot prot = vma.prot;
    if (pit->second.needs_copy) prot.write = false;  // the write faults
    out->push_back(platform::AddressSpace::FileRange{
        s, static_cast<off_t>(pit->second.file_offset + (s - pit->first)),
        e - s, prot});
  }
}

bool MM::UnloadedIn(uintptr_t start, uintptr_t end, uint64_t* off,
                    uint64_t* len) const {
  const AsyncLoader* ld = mf_->async_loader();
  if (ld == nullptr || ld->settled()) return false;
  auto pit = pmas_.upper_bound(start);
  if (pit != pmas_.begin() && std::prev(pit)->second.end > start) --pit;
  for (; pit != pmas_.end() && pit->first < end; ++pit) {
    const uintptr_t s = std::max(start, pit->first);
    const uintptr_t e = std::min(end, pit->second.end);
    uint64_t us, ue;
    if (ld->FirstUnloaded(pit->second.file_offset + (s - pit->first), e - s,
                          &us, &ue)) {
      *off = us;
      *len = ue - us;
      return true;
    }
  }
  return false;
}

int MM::WaitBackedLocked(uintptr_t start, uintptr_t end) {
  AsyncLoader* ld = mf_->async_loader();
  if (ld == nullptr || ld->settled()) return 0;
  auto pit = pmas_.upper_bound(start);
  if (pit != pmas_.begin() && std::prev(pit)->second.end > start) --pit;
  for (; pit != pmas_.end() && pit->first < end; ++pit) {
    const uintptr_t s = std::max(start, pit->first);
    const uintptr_t e = std::min(end, pit->second.end);
    const int r = ld->Wait(pit->second.file_offset + (s - pit->first), e - s);
    if (r < 0) return r;
  }
  return 0;
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

}  // namespace sandboxd::mm
