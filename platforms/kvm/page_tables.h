// x86-64 4-level page tables, written by the host for a guest.
//
// PageTables owns one tree (one application address space, or the stub's
// own space). Table pages come from a TableAllocator, which hands out pages
// of guest-physical memory that the host can also write (a KVM memory slot
// over a host mapping). Map writes the largest entries the alignment
// allows (1 GiB, 2 MiB, 4 KiB), directly at the level they belong to:
// mapping 1 GiB of aligned memory writes one PDPT entry, not 262144 PTEs.
// Unmap clears whole entries where it can and splits a large page only
// where a range cuts through it.
//
// Thread-safety: none; the owner (one address space) serializes calls.
#ifndef SANDBOXD_PLATFORMS_KVM_PAGE_TABLES_H_
#define SANDBOXD_PLATFORMS_KVM_PAGE_TABLES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sandboxd::kvm {

// Page-table entry bits (Intel SDM vol. 3, 4.5).
inline constexpr uint64_t kPtePresent = 1ull << 0;
inline constexpr uint64_t kPteWrite = 1ull << 1;
inline constexpr uint64_t kPteUser = 1ull << 2;
inline constexpr uint64_t kPteAccessed = 1ull << 5;
inline constexpr uint64_t kPteDirty = 1ull << 6;
inline constexpr uint64_t kPteHuge = 1ull << 7;  // PS, in PDPT and PD entries
inline constexpr uint64_t kPteGlobal = 1ull << 8;
inline constexpr uint64_t kPteNoExec = 1ull << 63;
inline constexpr uint64_t kPteAddrMask = 0x000ffffffffff000ull;

inline constexpr uint64_t k4K = 1ull << 12;
inline constexpr uint64_t k2M = 1ull << 21;
inline constexpr uint64_t k1G = 1ull << 30;
// One PML4 entry covers 512 GiB; the lower half has 256 of them.
inline constexpr uint64_t kLowerHalfEnd = 1ull << 47;

// A page of guest-physical memory that the host can write.
struct TablePage {
  uint64_t* host = nullptr;  // 512 entries
  uint64_t phys = 0;         // its guest-physical address
};

// Where table pages come from. Pages are returned zeroed.
class TableAllocator {
 public:
  virtual ~TableAllocator() = default;
  virtual absl::StatusOr<TablePage> AllocTable() = 0;
  virtual void FreeTable(TablePage page) = 0;
  // The host view of a table page from its guest-physical address.
  virtual uint64_t* HostOf(uint64_t phys) = 0;
};

// Access rights of a mapping, as the application asked for them.
struct PteAccess {
  bool write = false;
  bool exec = false;
  bool user = true;
  uint64_t Bits() const {
    uint64_t b = kPtePresent | kPteAccessed;
    if (write) b |= kPteWrite | kPteDirty;
    if (!exec) b |= kPteNoExec;
    if (user) b |= kPteUser;
    return b;
  }
};

// What a walk found for one virtual address.
struct Translation {
  uint64_t phys = 0;       // the physical address of `va` itself
  uint64_t page_size = 0;  // k4K, k2M or k1G
  uint64_t flags = 0;      // the leaf entry's bits other than the address
};

class PageTables {
 public:
  // Allocates the root (PML4) from `alloc`, which must outlive this object.
  static absl::StatusOr<PageTables> Create(TableAllocator* alloc);
  PageTables(PageTables&& o) noexcept;
  PageTables& operator=(PageTables&& o) noexcept;
  PageTables(const PageTables&) = delete;
  PageTables& operator=(const PageTables&) = delete;
  // Frees every table page, the root included.
  ~PageTables();

  // The value for CR3 (the root's guest-physical address).
  uint64_t root() const { return root_.phys; }

  // Maps [va, va+len) to [pa, pa+len), replacing what was there. va, pa
  // and len are 4 KiB aligned; va+len is at most kLowerHalfEnd.
  absl::Status Map(uint64_t va, uint64_t pa, uint64_t len, PteAccess access);
  // Removes every mapping in [va, va+len) (4 KiB aligned). Table pages that
  // become empty are freed.
  absl::Status Unmap(uint64_t va, uint64_t len);

  // Walks the tables for `va` (as the MMU would, ignoring permissions).
  std::optional<Translation> Lookup(uint64_t va) const;

  // Table pages in use, the root included (for tests and metrics).
  size_t table_pages() const { return table_pages_; }

  // Counts changes that a cached translation could contradict: a present
  // entry overwritten or cleared, a table page freed. A shadow MMU (PVM)
  // or a TLB must be flushed when this moves; adding a mapping where there
  // was none does not move it.
  uint64_t invalidations() const { return invalidations_; }

  // What a shadow MMU must drop after the changes so far, finer than
  // invalidations(): the physical 4 KiB pages that a changed or cleared
  // 4 KiB entry pointed to (a translation cached for them may be stale),
  // and a count of large-page entries changed, cleared or split (a shadow
  // of a large page can be shared by every space mapping it, so its
  // stale links need a full flush). TakeStalePages empties the list.
  std::vector<uint64_t> TakeStalePages() { return std::move(stale_pages_); }
  uint64_t large_invalidations() const { return large_invalidations_; }

 private:
  PageTables(TableAllocator* alloc, TablePage root)
      : alloc_(alloc), root_(root), table_pages_(1) {}

  // Maps or unmaps within the table `table` at `level` (4 = PML4 ... 1 =
  // PT), whose entries each cover 1 << Shift(level) bytes.
  absl::Status MapIn(uint64_t* table, int level, uint64_t va, uint64_t pa,
                     uint64_t len, uint64_t bits);
  absl::Status UnmapIn(uint64_t* table, int level, uint64_t va, uint64_t len);
  // Returns the next-level table behind entry `e`, creating it (or
  // splitting a large page into it) when needed.
  absl::StatusOr<uint64_t*> Descend(uint64_t* e, int level);
  // Frees every table below `table` (not `table` itself), recording the
  // leaves found there as stale.
  void FreeTree(uint64_t* table, int level);
  // Records that the leaf entry `e` at `level` no longer stands.
  void Stale(uint64_t e, int level);
  // Frees the table page that the non-leaf entry `entry` points to.
  void FreeTableAt(uint64_t entry);
  static bool Empty(const uint64_t* table);

  TableAllocator* alloc_ = nullptr;
  TablePage root_;
  size_t table_pages_ = 0;
  uint64_t invalidations_ = 0;
  uint64_t large_invalidations_ = 0;
  std::vector<uint64_t> stale_pages_;
  bool dying_ = false;  // the destructor frees without recording
};

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_PAGE_TABLES_H_
