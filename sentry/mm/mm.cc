// MM's life (construction, fork, teardown), its small predicates, and
// introspection. The rest of MM is in vma_set.cc, backing.cc, syscalls.cc,
// faults.cc, copy.cc and code_patch.cc.
#include "sentry/mm/mm.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace sandboxd::mm {

namespace {

// Room left above mmap_base for the main stack to grow into (Linux uses the
// stack rlimit, at least 128 MiB).
constexpr uint64_t kStackGap = 128ull << 20;

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
  if (auto* p = as_ ? as_->Feature<platform::PatchingAddressSpace>() : nullptr) {
    p->SetCodePatcher(this);
  }
}

MM::~MM() {
  if (auto* p = as_ ? as_->Feature<platform::PatchingAddressSpace>() : nullptr) {
    p->SetCodePatcher(nullptr);
  }
  absl::MutexLock l(&mu_);
  for (auto& [start, pma] : pmas_) {
    if (pma.owned || pma.pinned) mf_->DecRef(pma.file_offset, pma.end - start);
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
        if (pma.pinned) mf_->IncRef(src, e - s);  // the child's own pin
        child->InsertPma(s, Pma{e, src, /*owned=*/false, /*needs_copy=*/false,
                                pma.pinned});
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
