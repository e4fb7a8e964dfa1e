// MM's side of syscall patching (platform::CodePatcher): the platform
// (systrap) decides what to write; the MM makes sure it is written only
// into memory that is this process's own, through the internal mapping,
// and keeps the record that lets munmap, mremap and MAP_FIXED undo it.
// Design: platforms/systrap/README.md, "Syscall patching".
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sentry/mm/mm.h"

namespace sandboxd::mm {

bool MM::ReadCode(uintptr_t addr, void* dst, size_t n) {
  if (n == 0 || !InBounds(addr, n)) return false;
  absl::MutexLock l(&mu_);
  uint8_t* d = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < n) {
    const uintptr_t cur = addr + done;
    auto vit = FindVma(cur);
    if (vit == vmas_.end()) return false;
    const uintptr_t seg_end = std::min<uintptr_t>(vit->second.end, addr + n);
    auto pit = FindPma(cur);
    if (pit == pmas_.end()) {
      bool bus;
      if (EnsureBacked(vit, PageRoundDown(cur), PageRoundUp(seg_end), &bus) <=
          cur) {
        return false;
      }
      continue;
    }
    const size_t len = std::min<uintptr_t>(pit->second.end, seg_end) - cur;
    const uint64_t off = pit->second.file_offset + (cur - pit->first);
    // Code the program ran is loaded; a restore may still be loading the
    // rest (rare: under the writer lock).
    if (mf_->WaitLoaded(off, len) < 0) return false;
    std::memcpy(d + done, mf_->Internal(off), len);
    done += len;
  }
  return true;
}

uint8_t* MM::PrivateCodeLocked(uintptr_t addr, size_t n) {
  if (n == 0 || !InBounds(addr, n)) return nullptr;
  const uintptr_t page = PageRoundDown(addr);
  if (PageRoundDown(addr + n - 1) != page) return nullptr;
  auto vit = FindVma(addr);
  if (vit == vmas_.end()) return nullptr;
  const Vma& vma = vit->second;
  // Never a shared mapping: the change would reach the file or the other
  // processes that map it.
  if (!vma.is_private || vma.shared_anon) return nullptr;
  bool bus;
  if (EnsureBacked(vit, page, page + kPageSize, &bus) < page + kPageSize) {
    return nullptr;
  }
  auto pit = FindPma(addr);
  if (pit == pmas_.end() || !pit->second.owned) return nullptr;
  if (pit->second.needs_copy) {
    // The page may be shared with a fork's other side: copy it first. The
    // AddressSpace still maps the old page, read-only: it is unmapped, and
    // the next fetch faults the new one in.
    if (!BreakCow(page, page + kPageSize, /*unmap_copied=*/true)) {
      return nullptr;
    }
    pit = FindPma(addr);
    if (pit == pmas_.end() || !pit->second.owned) return nullptr;
  }
  // A restored page is written only once its saved data is in (before
  // the loader runs, a restore's RestorePatchedSitesLocked reads it here).
  const uint64_t off = pit->second.file_offset + (page - pit->first);
  if (mf_->WaitLoaded(off, kPageSize) < 0) return nullptr;
  return mf_->Internal(pit->second.file_offset + (addr - pit->first));
}

bool MM::PatchCode(
    uintptr_t site, size_t len, uintptr_t table, size_t table_len,
    const std::function<bool(uint8_t* site, uint8_t* table)>& patch,
    std::function<void(uint8_t* site)> unpatch) {
  if (!IsPageAligned(table) || table_len == 0 || table_len % kPageSize != 0 ||
      !InBounds(table, table_len)) {
    return false;
  }
  absl::MutexLock l(&mu_);
  if (patched_.count(site) != 0) return false;
  if (patch_table_ == 0) {
    // The table: private anonymous memory, r-x, where the program has
    // nothing (it is mapped on the first patch only, so a program that
    // maps there first just runs unpatched).
    if (!IsFree(table, table + table_len)) return false;
    Vma v;
    v.end = table + table_len;
    v.prot = platform::Prot{true, false, true};
    v.max_prot = v.prot;
    v.name = "[sbx-patch]";
    InsertVma(table, std::move(v));
    patch_table_ = table;
    patch_table_len_ = table_len;
  } else if (patch_table_ != table || patch_table_len_ != table_len) {
    return false;
  }
  // The table, backed and this MM's own (after a fork it is shared
  // copy-on-write), in one piece of the memory file so that the platform
  // gets one contiguous view of it.
  auto tvit = FindVma(table);
  if (tvit == vmas_.end()) return false;
  bool bus;
  if (EnsureBacked(tvit, table, table + table_len, &bus) < table + table_len ||
      !BreakCow(table, table + table_len, /*unmap_copied=*/true)) {
    return false;
  }
  auto pit = FindPma(table);
  if (pit == pmas_.end() || !pit->second.owned ||
      pit->second.end < table + table_len) {
    return false;
  }
  const uint64_t toff = pit->second.file_offset + (table - pit->first);
  if (mf_->WaitLoaded(toff, table_len) < 0) return false;
  uint8_t* t = mf_->Internal(toff);
  uint8_t* s = PrivateCodeLocked(site, len);
  if (s == nullptr) return false;
  // What a checkpoint saves to give the program its code back on restore.
  std::string original(reinterpret_cast<const char*>(s), len);
  if (!patch(s, t)) return false;
  patched_.emplace(site, PatchedSite{std::move(original), std::move(unpatch)});
  return true;
}

void MM::UnpatchRangeLocked(uintptr_t start, uintptr_t end, bool restore) {
  const bool table_goes = start < patch_table_ + patch_table_len_ &&
                          patch_table_ < end;
  for (auto it = patched_.begin(); it != patched_.end();) {
    const uintptr_t site = it->first;
    const size_t len = it->second.original.size();
    const bool inside = site < end && start < site + len;
    if (!inside && !table_goes) {
      ++it;
      continue;
    }
    // A site whose bytes go with the range needs nothing; one that moves,
    // or that stays while its table goes, gets its instructions back.
    if (restore || !inside) {
      uint8_t* p = PrivateCodeLocked(site, len);
      if (p != nullptr) it->second.unpatch(p);
    }
    it = patched_.erase(it);
    unpatch_gen_++;
  }
  if (table_goes) {
    patch_table_ = 0;
    patch_table_len_ = 0;
  }
}

absl::Status MM::RestorePatchedSitesLocked(
    uintptr_t table, size_t table_len,
    const std::map<uintptr_t, std::string>& sites) {
  if (table != 0) {
    auto vit = FindVma(table);
    if (!IsPageAligned(table) || table_len == 0 ||
        table_len % kPageSize != 0 || vit == vmas_.end() ||
        vit->first != table || vit->second.end != table + table_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "patch table ", absl::Hex(table), "+", table_len,
          " is not one of the VMAs"));
    }
  } else if (!sites.empty()) {
    return absl::InvalidArgumentError("patched sites without a patch table");
  }
  for (const auto& [site, original] : sites) {
    // No thread runs yet: a plain copy is atomic enough. PrivateCodeLocked
    // breaks copy-on-write, so an MM that shares the page (a fork's other
    // side, which has the same record) is left to its own record.
    uint8_t* p = PrivateCodeLocked(site, original.size());
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "patched site ", absl::Hex(site), "+", original.size(),
          " is not in private memory of one page"));
    }
    std::memcpy(p, original.data(), original.size());
  }
  patch_table_ = table;
  patch_table_len_ = table == 0 ? 0 : table_len;
  patched_.clear();
  unpatch_gen_++;
  return absl::OkStatus();
}

int64_t MM::CopyInOriginal(uintptr_t addr, void* dst, uint64_t n) {
  // Longest site the record can hold (pb::PatchedSite's bound).
  constexpr uint64_t kMaxSite = 16;
  for (int attempt = 0;; attempt++) {
    uint64_t gen;
    {
      absl::ReaderMutexLock l(&mu_);
      gen = unpatch_gen_;
    }
    const int64_t r = CopyIn(addr, dst, n);
    if (r <= 0) return r;
    absl::ReaderMutexLock l(&mu_);
    // A site unpatched since the copy may have been copied patched: again.
    // (One patched since is covered by the record below.)
    if (unpatch_gen_ != gen && attempt < 3) continue;
    const uintptr_t end = addr + static_cast<uint64_t>(r);
    auto it = patched_.lower_bound(addr > kMaxSite ? addr - kMaxSite : 0);
    for (; it != patched_.end() && it->first < end; ++it) {
      const std::string& orig = it->second.original;
      for (size_t i = 0; i < orig.size(); i++) {
        const uintptr_t a = it->first + i;
        if (a >= addr && a < end) {
          static_cast<char*>(dst)[a - addr] = orig[i];
        }
      }
    }
    return r;
  }
}

size_t MM::NumPatchedSites() const {
  absl::MutexLock l(&mu_);
  return patched_.size();
}

}  // namespace sandboxd::mm
