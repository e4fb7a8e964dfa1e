#include "platforms/kvm/page_tables.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace sandboxd::kvm {
namespace {

// Bytes covered by one entry of a table at `level` (4 = PML4 ... 1 = PT).
constexpr int Shift(int level) { return 12 + 9 * (level - 1); }
constexpr uint64_t EntrySize(int level) { return 1ull << Shift(level); }
constexpr size_t Index(uint64_t va, int level) {
  return (va >> Shift(level)) & 511;
}

// Bits of a non-leaf entry: rights are decided at the leaf, so every
// intermediate level allows everything.
constexpr uint64_t kTableBits = kPtePresent | kPteWrite | kPteUser | kPteAccessed;

bool Present(uint64_t e) { return (e & kPtePresent) != 0; }
// A leaf above level 1 (a 1 GiB or 2 MiB page).
bool Huge(uint64_t e, int level) { return level > 1 && (e & kPteHuge) != 0; }

}  // namespace

absl::StatusOr<PageTables> PageTables::Create(TableAllocator* alloc) {
  ASSIGN_OR_RETURN(TablePage root, alloc->AllocTable());
  return PageTables(alloc, root);
}

PageTables::PageTables(PageTables&& o) noexcept
    : alloc_(std::exchange(o.alloc_, nullptr)),
      root_(std::exchange(o.root_, TablePage{})),
      table_pages_(std::exchange(o.table_pages_, 0)),
      invalidations_(o.invalidations_),
      large_invalidations_(o.large_invalidations_),
      stale_pages_(std::move(o.stale_pages_)) {}

PageTables& PageTables::operator=(PageTables&& o) noexcept {
  if (this != &o) {
    this->~PageTables();
    alloc_ = std::exchange(o.alloc_, nullptr);
    root_ = std::exchange(o.root_, TablePage{});
    table_pages_ = std::exchange(o.table_pages_, 0);
    invalidations_ = o.invalidations_;
    large_invalidations_ = o.large_invalidations_;
    stale_pages_ = std::move(o.stale_pages_);
    dying_ = false;
  }
  return *this;
}

PageTables::~PageTables() {
  if (alloc_ == nullptr || root_.host == nullptr) return;
  dying_ = true;
  FreeTree(root_.host, 4);
  alloc_->FreeTable(root_);
  root_ = TablePage{};
}

absl::Status PageTables::Map(uint64_t va, uint64_t pa, uint64_t len,
                             PteAccess access) {
  if ((va | pa | len) & (k4K - 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page tables: map va=%#x pa=%#x len=%#x is not 4 KiB aligned", va, pa,
        len));
  }
  if (len == 0) return absl::OkStatus();
  if (va >= kLowerHalfEnd || len > kLowerHalfEnd - va) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page tables: map va=%#x len=%#x leaves the lower half", va, len));
  }
  return MapIn(root_.host, 4, va, pa, len, access.Bits());
}

absl::Status PageTables::Unmap(uint64_t va, uint64_t len) {
  if ((va | len) & (k4K - 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "page tables: unmap va=%#x len=%#x is not 4 KiB aligned", va, len));
  }
  if (va >= kLowerHalfEnd) return absl::OkStatus();
  len = std::min(len, kLowerHalfEnd - va);
  if (len == 0) return absl::OkStatus();
  return UnmapIn(root_.host, 4, va, len);
}

absl::Status PageTables::MapIn(uint64_t* table, int level, uint64_t va,
                               uint64_t pa, uint64_t len, uint64_t bits) {
  const uint64_t size = EntrySize(level);
  while (len > 0) {
    const uint64_t entry_end = (va & ~(size - 1)) + size;
    const uint64_t chunk = std::min(len, entry_end - va);
    uint64_t* e = &table[Index(va, level)];
    if (level == 1) {
      if (Present(*e) && *e != (pa | bits)) {
        ++invalidations_;
        Stale(*e, 1);
      }
      *e = pa | bits;
    } else if (level <= 3 && chunk == size && (va & (size - 1)) == 0 &&
               (pa & (size - 1)) == 0) {
      // A whole aligned entry: one large page, dropping any table below.
      if (Present(*e) && !Huge(*e, level)) {
        FreeTree(alloc_->HostOf(*e & kPteAddrMask), level - 1);
        FreeTableAt(*e);
      }
      if (Present(*e) && *e != (pa | bits | kPteHuge)) {
        ++invalidations_;
        if (Huge(*e, level)) Stale(*e, level);
      }
      *e = pa | bits | kPteHuge;
    } else {
      ASSIGN_OR_RETURN(uint64_t * next, Descend(e, level));
      RETURN_IF_ERROR(MapIn(next, level - 1, va, pa, chunk, bits));
    }
    va += chunk;
    pa += chunk;
    len -= chunk;
  }
  return absl::OkStatus();
}

absl::Status PageTables::UnmapIn(uint64_t* table, int level, uint64_t va,
                                 uint64_t len) {
  const uint64_t size = EntrySize(level);
  while (len > 0) {
    const uint64_t entry_end = (va & ~(size - 1)) + size;
    const uint64_t chunk = std::min(len, entry_end - va);
    uint64_t* e = &table[Index(va, level)];
    if (Present(*e)) {
      if (chunk == size) {
        if (level > 1 && !Huge(*e, level)) {
          FreeTree(alloc_->HostOf(*e & kPteAddrMask), level - 1);
          FreeTableAt(*e);
        } else {
          Stale(*e, level);
        }
        *e = 0;
        ++invalidations_;
      } else {
        // Part of the entry: split a large page, then clear inside it.
        ASSIGN_OR_RETURN(uint64_t * next, Descend(e, level));
        RETURN_IF_ERROR(UnmapIn(next, level - 1, va, chunk));
        if (Empty(next)) {
          FreeTableAt(*e);
          *e = 0;
        }
      }
    }
    va += chunk;
    len -= chunk;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t*> PageTables::Descend(uint64_t* e, int level) {
  if (Present(*e) && !Huge(*e, level)) return alloc_->HostOf(*e & kPteAddrMask);
  ASSIGN_OR_RETURN(TablePage next, alloc_->AllocTable());
  ++table_pages_;
  if (Present(*e)) {
    ++invalidations_;  // the large page is replaced by a table
    ++large_invalidations_;
    // Split a large page into 512 entries one level down, with the same
    // rights. PS stays set above level 1; in a PTE bit 7 is PAT, so clear.
    const uint64_t base = *e & kPteAddrMask & ~(EntrySize(level) - 1);
    uint64_t flags = *e & ~kPteAddrMask;
    if (level - 1 == 1) flags &= ~kPteHuge;
    const uint64_t child = EntrySize(level - 1);
    for (int i = 0; i < 512; ++i) next.host[i] = (base + i * child) | flags;
  }
  *e = next.phys | kTableBits;
  return next.host;
}

void PageTables::FreeTableAt(uint64_t entry) {
  ++invalidations_;
  const uint64_t phys = entry & kPteAddrMask;
  alloc_->FreeTable(TablePage{alloc_->HostOf(phys), phys});
  --table_pages_;
}

void PageTables::Stale(uint64_t e, int level) {
  if (dying_) return;
  if (level > 1) {
    ++large_invalidations_;
    return;
  }
  stale_pages_.push_back(e & kPteAddrMask);
}

void PageTables::FreeTree(uint64_t* table, int level) {
  if (level == 1 && dying_) return;  // nothing to free or record below
  for (int i = 0; i < 512; ++i) {
    const uint64_t e = table[i];
    if (!Present(e)) continue;
    if (level == 1 || Huge(e, level)) {
      Stale(e, level);
      continue;
    }
    FreeTree(alloc_->HostOf(e & kPteAddrMask), level - 1);
    FreeTableAt(e);
  }
}

bool PageTables::Empty(const uint64_t* table) {
  for (int i = 0; i < 512; ++i) {
    if (Present(table[i])) return false;
  }
  return true;
}

std::optional<Translation> PageTables::Lookup(uint64_t va) const {
  if (va >= kLowerHalfEnd || root_.host == nullptr) return std::nullopt;
  const uint64_t* table = root_.host;
  for (int level = 4; level >= 1; --level) {
    const uint64_t e = table[Index(va, level)];
    if (!Present(e)) return std::nullopt;
    if (level == 1 || Huge(e, level)) {
      const uint64_t size = EntrySize(level);
      uint64_t flags = e & ~kPteAddrMask;
      if (level > 1) flags &= ~kPteHuge;
      return Translation{(e & kPteAddrMask & ~(size - 1)) | (va & (size - 1)),
                         size, flags};
    }
    table = alloc_->HostOf(e & kPteAddrMask);
  }
  return std::nullopt;
}

}  // namespace sandboxd::kvm
