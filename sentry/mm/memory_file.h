// MemoryFile: the one host file that backs all application memory of a
// sandbox (anonymous memory now; tmpfs data and page caches later).
//
// It is a memfd, sparse and grown on demand, that the Sentry maps once in
// full (the "internal mapping"), so that reading or writing application
// memory is a bounds check plus a memcpy. Platforms map ranges of the same fd
// into the address spaces the application runs in (AddressSpace::MapFile).
//
// Thread-safety: all methods may be called concurrently.
#ifndef SANDBOXD_SENTRY_MM_MEMORY_FILE_H_
#define SANDBOXD_SENTRY_MM_MEMORY_FILE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "sentry/mm/async_loader.h"
#include "base/mapping.h"
#include "base/unique_fd.h"

namespace sandboxd::mm {

inline constexpr uint64_t kPageSize = 4096;

inline constexpr uint64_t PageRoundDown(uint64_t x) {
  return x & ~(kPageSize - 1);
}
// Callers check for overflow (x > UINT64_MAX - kPageSize + 1) first.
inline constexpr uint64_t PageRoundUp(uint64_t x) {
  return (x + kPageSize - 1) & ~(kPageSize - 1);
}
inline constexpr bool IsPageAligned(uint64_t x) {
  return (x & (kPageSize - 1)) == 0;
}

// The part of a sandbox's memory limit (spec.limits.memory_bytes, the
// memory cgroup's limit the daemon sets) kept for the Sentry itself: its
// heap, thread stacks, the populated pages of the memory file not handed
// out, stub processes and page tables. The application's memory (what the
// memory file hands out: anonymous, tmpfs/shm, private copies of file
// pages) is limited to the rest, so that the application's OOM comes from
// the Sentry's OOM killer before the host's kills the Sentry. A quarter
// of the limit, at least kMinSentryReserve and at most kMaxSentryReserve;
// never more than half of it.
inline constexpr uint64_t kMinSentryReserve = 24ull << 20;
inline constexpr uint64_t kMaxSentryReserve = 128ull << 20;
inline constexpr uint64_t ApplicationMemoryLimit(uint64_t sandbox_limit) {
  if (sandbox_limit == 0) return 0;
  uint64_t reserve = sandbox_limit / 4;
  if (reserve < kMinSentryReserve) reserve = kMinSentryReserve;
  if (reserve > kMaxSentryReserve) reserve = kMaxSentryReserve;
  if (reserve > sandbox_limit / 2) reserve = sandbox_limit / 2;
  return PageRoundDown(sandbox_limit - reserve);
}

class MemoryFile {
 public:
  // The file is grown in steps of this size so that most Allocate calls need
  // no ftruncate.
  static constexpr uint64_t kGrowStep = 64ull << 20;

  // Creates the memfd and reserves `max_size` bytes of Sentry address space
  // for the internal mapping (MAP_NORESERVE: no memory is committed).
  static absl::StatusOr<std::unique_ptr<MemoryFile>> Create(
      uint64_t max_size = 64ull << 30);

  ~MemoryFile();
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // The memfd, for platforms to map ranges of into application address
  // spaces. Owned by this object.
  int fd() const { return fd_.get(); }
  uint64_t max_size() const { return max_size_; }

  // Returns the file offset of `len` bytes (a positive page multiple) of
  // zero-filled pages, or ResourceExhausted when the file is full or the
  // allocation would take AllocatedBytes() past limit(). Such a refusal is
  // remembered for the calling thread (TakeRefusedOnThisThread): the
  // kernel then runs its OOM killer with no lock of the caller held.
  absl::StatusOr<uint64_t> Allocate(uint64_t len);

  // The application's share of the sandbox's memory limit, in bytes (0:
  // none): what a memory cgroup's limit is to Linux's programs
  // (README.md, "The memory limit"). Set before the application runs.
  void SetLimit(uint64_t bytes) {
    limit_.store(bytes, std::memory_order_relaxed);
  }
  uint64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  // Allocations refused for the limit (or a full file), since creation.
  uint64_t limit_refusals() const {
    return refusals_.load(std::memory_order_relaxed);
  }
  // True once per refusal of an Allocate made by this thread since the
  // last call (clears it).
  static bool TakeRefusedOnThisThread();

  // Returns [off, off+len) (page-aligned, any subrange of earlier
  // allocations that is not already free) to the allocator. The pages are
  // punched out of the file, so host memory is released and a later
  // Allocate of the same range sees zeros.
  void Free(uint64_t off, uint64_t len);

  // Reference counts, for pages shared copy-on-write by several owners
  // (private memory after fork). An allocated page has one reference until
  // IncRef adds more; DecRef drops one from each page of [off, off+len) and
  // frees the pages that reach zero. Only pages with more than one
  // reference are recorded (refs_), so memory that is never shared costs
  // nothing. Preconditions: the ranges are page-aligned and allocated.
  void IncRef(uint64_t off, uint64_t len);
  void DecRef(uint64_t off, uint64_t len);
  // True if every page of [off, off+len) has exactly one reference: its
  // owner may write it in place instead of copying.
  bool IsExclusive(uint64_t off, uint64_t len) const;
  // Pages with more than one reference, in bytes (each counted once).
  uint64_t SharedBytes() const;

  // Releases the host memory of [off, off+len) but keeps it allocated: the
  // range reads as zeros afterwards (MADV_REMOVE on shared memory).
  void Decommit(uint64_t off, uint64_t len);

  // A pointer to file offset `off` in the internal mapping. Valid for the
  // lifetime of this object; accesses to unallocated ranges may SIGBUS.
  uint8_t* Internal(uint64_t off) const { return mapping_.bytes() + off; }

  // Makes the host allocate the file's first `bytes` (rounded up to
  // pages) now, and map them in the internal mapping, so that the first
  // allocations (which start at offset 0) get pages that exist already:
  // a fresh page costs ~2 us at its first touch on this project's VMs
  // (allocation, zeroing, the hypervisor's own fault), a populated one
  // only the copy. A warm Sentry does this while it waits in the pool.
  // The pages are the Sentry's memory from then on (its cgroup's).
  absl::Status Populate(uint64_t bytes);

  // Restore: the loader of the ranges whose data is still being read
  // (async_loader.h). Set once, before anything else uses the file;
  // owned by it from then on and stopped before the file goes.
  void SetAsyncLoader(std::unique_ptr<AsyncLoader> loader);
  // Null when nothing was ever loaded asynchronously.
  AsyncLoader* async_loader() const { return loader_.get(); }
  // Waits until [off, off+len) holds its data (at once unless a restore is
  // still loading it): 0, or -EIO if its load failed. Every Sentry access
  // to restored pages goes through here (or AsyncLoader::Wait) first.
  int WaitLoaded(uint64_t off, uint64_t len) const {
    AsyncLoader* l = loader_.get();
    return l == nullptr || l->settled() ? 0 : l->Wait(off, len);
  }

  // Bytes currently allocated (handed out and not freed).
  uint64_t AllocatedBytes() const;
  // Current size of the memfd (a high-water mark, rounded to kGrowStep).
  uint64_t FileSize() const;

 private:
  MemoryFile(UniqueFd fd, Mapping mapping, uint64_t max_size)
      : fd_(std::move(fd)), mapping_(std::move(mapping)), max_size_(max_size) {}

  // Punches [off, off+len) out of the file (hole reads as zeros).
  void PunchHole(uint64_t off, uint64_t len);
  // Splits the refs_ entry containing `off` (if any) at `off`.
  void SplitRefs(uint64_t off) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges refs_ entries with equal counts that touch, around [start, end).
  void MergeRefs(uint64_t start, uint64_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const UniqueFd fd_;
  const Mapping mapping_;
  const uint64_t max_size_;
  std::atomic<uint64_t> limit_{0};
  std::atomic<uint64_t> refusals_{0};
  // Set before the file is shared (SetAsyncLoader), then read only.
  std::unique_ptr<AsyncLoader> loader_;

  mutable absl::Mutex mu_;
  // Free ranges below end_: offset -> length. Never adjacent (coalesced) and
  // never touching end_ (such a range lowers end_ instead).
  std::map<uint64_t, uint64_t> free_ ABSL_GUARDED_BY(mu_);
  // Everything at or above end_ is free; allocation bumps it.
  uint64_t end_ ABSL_GUARDED_BY(mu_) = 0;
  // Current ftruncate'd size of the file; >= end_.
  uint64_t file_size_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
  // Shared ranges: start -> {end, refs}, refs >= 2, never overlapping. Plain
  // data, so that a checkpoint can save it with the allocator state.
  struct RefRange {
    uint64_t end;
    uint64_t refs;
  };
  std::map<uint64_t, RefRange> refs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sandboxd::mm

#endif  // SANDBOXD_SENTRY_MM_MEMORY_FILE_H_
