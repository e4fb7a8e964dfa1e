// MM: the memory manager of one application process (one address space).
//
// It keeps two ordered sets, as gVisor's mm does (see README.md):
//   - VMAs: what the program asked for (mmap, brk, mprotect, mremap, ...):
//     virtual ranges with protections, sharing and their source.
//   - PMAs: which memory-file ranges back which virtual ranges. Filled in
//     lazily, by page faults and by CopyIn/CopyOut.
// The platform AddressSpace mirrors a subset of the PMAs into the host
// address space the program runs in; it is a cache: anything may be
// unmapped from it at any time and the next fault maps it again.
//
// Lock order (outer first):
//   MM::mu_
//     platform::AddressSpace internals (called with mu_ held)
//     MemoryFile::mu_
//
// Thread-safety: every public method may be called concurrently from the
// host threads of the process's tasks.
#ifndef SANDBOXD_SENTRY_MM_MM_H_
#define SANDBOXD_SENTRY_MM_MM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "platforms/code_patcher.h"
#include "platforms/platform.h"
#include "sentry/mm/memory_file.h"

namespace sandboxd::state {
struct MmState;
}  // namespace sandboxd::state

namespace sandboxd::mm {

// A file-backed source of pages (regular files, tmpfs, memfd...). For now
// file mappings hold a private copy of the pages they touch, read through
// ReadAt; a shared page cache comes with writable shared mappings.
class Mappable {
 public:
  virtual ~Mappable() = default;
  // Current size of the file in bytes.
  virtual uint64_t Size() = 0;
  // Reads up to n bytes at `off` into `dst` (a Sentry pointer); returns the
  // bytes read (short at EOF) or -errno.
  virtual int64_t ReadAt(void* dst, uint64_t n, uint64_t off) = 0;
  // What /proc/self/maps shows for the mapping (the file's path).
  virtual std::string Name() = 0;
  // Files whose pages live in the memory file (tmpfs) can be mapped
  // shared: the mapping uses those very pages. SharedPage returns the
  // memory-file offset of page `index`, allocating it, with one memory-
  // file reference added for the caller (MemoryFile::IncRef, taken under
  // the file's own lock): the PMA that maps the page holds it, so a
  // truncate or hole punch that drops the file's reference cannot free a
  // page a process still maps (and hand it to someone else).
  virtual bool SupportsShared() { return false; }
  virtual int SharedPage(uint64_t index, uint64_t* memfile_off) {
    return -ENODEV;
  }
  // msync of a shared mapping: writes its pages back to where the file's
  // data lives (a hostfs file's page cache to the host). -errno.
  virtual int Sync() { return 0; }
};

// The memory-file range behind a MAP_SHARED|MAP_ANONYMOUS mapping. It lives
// as long as any VMA refers to it (VMAs split and moved by mremap, and after
// fork the child's VMAs, share one object); the pages are freed with it.
class SharedAnon {
 public:
  // Preconditions: `mf` outlives this object; [off, off+size) was allocated
  // from it and is now owned by this object.
  SharedAnon(MemoryFile* mf, uint64_t off, uint64_t size)
      : mf_(mf), off_(off), size_(size) {}
  ~SharedAnon() { mf_->Free(off_, size_); }
  SharedAnon(const SharedAnon&) = delete;
  SharedAnon& operator=(const SharedAnon&) = delete;

  uint64_t file_offset() const { return off_; }
  // Fixed at creation, as a shmem file's size is: a mapping grown by mremap
  // past it gets SIGBUS there, as on Linux.
  uint64_t size() const { return size_; }

 private:
  MemoryFile* const mf_;
  const uint64_t off_;
  const uint64_t size_;
};

// A virtual memory area: [start, end) with uniform attributes. `start` is the
// key in MM's map. Plain data (plus shared references) so that it can be
// checkpointed.
struct Vma {
  uintptr_t end = 0;
  platform::Prot prot;      // current protection
  platform::Prot max_prot;  // what mprotect may raise prot to
  bool is_private = true;   // MAP_PRIVATE (vs MAP_SHARED)
  bool growsdown = false;   // MAP_GROWSDOWN: faults just below extend it
  bool dontfork = false;    // MADV_DONTFORK: not in a fork's child
  bool wipeonfork = false;  // MADV_WIPEONFORK: zeros in a fork's child
  // Source of the pages; both null means private anonymous memory.
  std::shared_ptr<SharedAnon> shared_anon;  // MAP_SHARED|MAP_ANONYMOUS
  std::shared_ptr<Mappable> mappable;       // file-backed (later)
  // Offset into shared_anon/mappable that `start` corresponds to.
  uint64_t offset = 0;
  std::string name;  // "[heap]", "[stack]", ... for DebugString
};

// A platform mapping: [start, end) is backed by memory-file offsets
// [file_offset, file_offset + (end - start)). `start` is the key.
struct Pma {
  uintptr_t end = 0;
  uint64_t file_offset = 0;
  // The pages belong to this MM (private memory) and it holds one memory-
  // file reference on them (MemoryFile::IncRef/DecRef), dropped when the
  // PMA goes away; otherwise they belong to the VMA's source.
  bool owned = false;
  // Copy-on-write (owned pages only): since a fork the pages may be shared
  // with other MMs. They are mapped read-only, and before anything writes
  // them this MM copies them, or takes them back if it is the only owner
  // left (BreakCow).
  bool needs_copy = false;
  // A file's shared page (Mappable::SharedPage): this PMA holds one
  // memory-file reference on it, dropped when the PMA goes away, so that
  // the file freeing the page (truncate, hole punching) leaves it to the
  // mappings that still map it until they go. Not saved: a restore maps
  // the file's pages again.
  bool pinned = false;
};

// One VMA as /proc/[pid]/maps, smaps and status describe it: a copy taken
// under the MM's lock.
struct VmaInfo {
  uintptr_t start = 0;
  uintptr_t end = 0;
  platform::Prot prot;
  bool is_private = true;
  bool growsdown = false;
  uint64_t offset = 0;                 // into the file (0 for anonymous)
  std::string name;                    // "[stack]", "[heap]", or empty
  std::shared_ptr<Mappable> mappable;  // the file, if file-backed
  bool shared_anon = false;            // MAP_SHARED|MAP_ANONYMOUS
};

class MM : public platform::CodePatcher {
 public:
  // [min_addr, max_addr) is where application mappings may go.
  // Preconditions: `mf` outlives this MM; both bounds are page-aligned.
  MM(MemoryFile* mf, std::unique_ptr<platform::AddressSpace> as,
     uintptr_t min_addr, uintptr_t max_addr);
  ~MM() override;
  MM(const MM&) = delete;
  MM& operator=(const MM&) = delete;

  platform::AddressSpace& address_space() { return *as_; }

  // fork(2): a new MM in `as` with the same mappings; shared memory stays
  // shared, private memory is shared copy-on-write (MADV_DONTFORK areas are
  // left out, MADV_WIPEONFORK ones start zeroed). Before the child exists,
  // this MM's writable private pages are unmapped from its AddressSpace, so
  // that its threads' next writes fault and copy.
  absl::StatusOr<std::unique_ptr<MM>> Fork(
      std::unique_ptr<platform::AddressSpace> as);
  MemoryFile* memory_file() const { return mf_; }
  // membarrier(2) registrations (MEMBARRIER_CMD_REGISTER_* bits) of the
  // processes on this MM: fork keeps them, execve (a new MM) drops them.
  std::atomic<uint32_t>& membarrier_registrations() { return membarrier_; }
  uintptr_t min_addr() const { return min_addr_; }
  uintptr_t max_addr() const { return max_addr_; }
  // Top-down placement of mappings without a usable hint starts below this,
  // leaving a gap above it for the stack.
  uintptr_t mmap_base() const { return mmap_base_; }

  // The syscalls, with Linux semantics; each returns a result or -errno.
  // Only anonymous mappings for now: a request without MAP_ANONYMOUS
  // returns -ENODEV.
  int64_t Mmap(uintptr_t addr, uint64_t len, int prot, int flags);
  // RLIMIT_AS and RLIMIT_DATA (soft, bytes; RLIM_INFINITY: none), set by
  // the thread group that owns this MM. mmap, mremap and brk that would
  // take the mapped total (AS) or the private writable, non-stack total
  // (DATA, Linux's data_vm) past them fail with ENOMEM (brk: the old
  // break), as Linux's may_expand_vm.
  void SetRlimits(uint64_t as_bytes, uint64_t data_bytes) {
    as_limit_.store(as_bytes, std::memory_order_relaxed);
    data_limit_.store(data_bytes, std::memory_order_relaxed);
  }
  // mmap of a file: `max_prot` is what the file's open mode allows
  // (write only if opened for writing or the mapping is private).
  int64_t MmapFile(uintptr_t addr, uint64_t len, int prot, int flags,
                   std::shared_ptr<Mappable> file, uint64_t offset,
                   platform::Prot max_prot);
  int64_t Munmap(uintptr_t addr, uint64_t len);
  int64_t Mprotect(uintptr_t addr, uint64_t len, int prot);
  // Supports MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP, and old_len 0
  // (duplicating a shared mapping).
  int64_t Mremap(uintptr_t old_addr, uint64_t old_len, uint64_t new_len,
                 int flags, uintptr_t new_addr);
  // Returns the new (or unchanged) break, as Linux's brk syscall does.
  int64_t Brk(uintptr_t addr);
  // Called by the ELF loader: the end of the highest loaded segment. Resets
  // the break to it (page-rounded up).
  void SetBrkStart(uintptr_t addr);
  int64_t Madvise(uintptr_t addr, uint64_t len, int advice);
  // msync: the range checked (flags, address_range.h) and every page of
  // it mapped, else -ENOMEM; then the shared file mappings in it write
  // their pages back (Mappable::Sync: a bind-mounted file's page cache;
  // tmpfs pages are the file's own).
  int64_t Msync(uintptr_t addr, uint64_t len, int flags);
  // Every shared file mapping writes its pages back, errors ignored: a
  // process's exit does it before its parent can hear of the exit (as
  // Linux's exit_mm before exit_notify), while the address space itself
  // is torn down later, outside the tasklist lock.
  void SyncSharedFiles();
  // mlock, munlock (and mlock2's range): memory is never swapped out, so
  // locking checks that the range is mapped (-ENOMEM otherwise).
  int64_t Mlock(uintptr_t addr, uint64_t len);
  // mincore: one byte per page of the range in *vec, 1 for a page that has
  // memory (a PMA), 0 for one not touched yet; -ENOMEM at a hole, with
  // *vec holding the pages before it.
  int64_t Mincore(uintptr_t addr, uint64_t len, std::vector<uint8_t>* vec);

  // Names the VMAs in [addr, addr+len) for DebugString (e.g. "[stack]" by
  // the loader), splitting them as needed. Returns 0 or -ENOMEM on holes.
  int64_t SetName(uintptr_t addr, uint64_t len, const std::string& name);

  // A page fault from the application at `addr`. If a VMA allows the
  // access, backs the surrounding pages (up to kFaultAroundPages within the
  // VMA) with memory-file pages, maps them into the AddressSpace with the
  // VMA's protection and returns true. Otherwise returns false with
  // *si_code = SEGV_MAPERR (no VMA) or SEGV_ACCERR (protection).
  bool HandleFault(uintptr_t addr, bool write, bool exec, int* si_code);
  // As above, and also says which signal to deliver: SIGSEGV, or SIGBUS
  // (*si_code = BUS_ADRERR) for an access past the end of a shared object
  // or when the memory file is exhausted.
  bool HandleFault(uintptr_t addr, bool write, bool exec, int* signo,
                   int* si_code);
  // *signo == 0 on failure: the memory needed is beyond the sandbox's
  // memory limit (MemoryFile::limit): no signal for the program; the
  // kernel runs its OOM killer and the access is retried.

  // Maps ahead what a new program touches first, as read faults would:
  // every mapping of a file (or of the vDSO) of at most `max_file_bytes`,
  // whole (its pages backed), and, of anonymous memory, the pages already
  // backed (the stack the loader wrote). Each of those pages would
  // otherwise cost a fault: a trap, and a request to the platform to map
  // it (on systrap, a round trip to the stub's control thread); mapped
  // ahead, they cost one request per range, made back to back. Best
  // effort: what fails is left to fault. For exec, after the loader.
  void Prefault(uint64_t max_file_bytes);

  // Copies between application memory and Sentry buffers through the
  // internal mapping. CopyIn needs a readable VMA (on x86, any of PROT_READ,
  // PROT_WRITE, PROT_EXEC makes a page readable, as for Linux's own
  // copy_from_user), CopyOut a writable one. Return n on success, else the
  // number of bytes copied before the first bad address if > 0, else
  // -EFAULT.
  int64_t CopyIn(uintptr_t addr, void* dst, uint64_t n);
  int64_t CopyOut(uintptr_t addr, const void* src, uint64_t n);
  // Reads a NUL-terminated string of at most max_len bytes (excluding the
  // NUL) into *out: 0, -EFAULT, or -ENAMETOOLONG if no NUL within max_len.
  int64_t CopyInString(uintptr_t addr, uint64_t max_len, std::string* out);
  // For futex: the 4-byte word at `addr` in the internal mapping, with
  // backing allocated. Returns 0, -EINVAL if misaligned, or -EFAULT if not
  // mapped readable (writable when `write`). The pointer stays valid memory
  // for the memory file's lifetime, but names this address's page only
  // until it is next unmapped.
  int64_t AtomicWord(uintptr_t addr, bool write, std::atomic<uint32_t>** out);
  // Runs fn on the word at `addr` (backed and writable, as for
  // AtomicWord(addr, true, ...)) with mu_ held, so that no fork by another
  // thread can share the page while fn writes it (FUTEX_WAKE_OP). fn must
  // not call into this MM. Returns 0, -EINVAL or -EFAULT.
  int64_t UpdateWord(uintptr_t addr,
                     const std::function<void(std::atomic<uint32_t>*)>& fn);
  // Whether `addr` is in a MAP_SHARED mapping (whose futexes are keyed by
  // the memory, not the address, so that processes sharing it meet).
  bool IsSharedMapping(uintptr_t addr) const;

  // Text like /proc/self/maps.
  std::string DebugString() const;
  // Every VMA, in address order (for /proc).
  std::vector<VmaInfo> Vmas() const;

  // platform::CodePatcher (syscall patching; code_patch.cc).
  bool ReadCode(uintptr_t addr, void* dst, size_t n) override;
  bool PatchCode(
      uintptr_t site, size_t len, uintptr_t table, size_t table_len,
      const std::function<bool(uint8_t* site, uint8_t* table)>& patch,
      std::function<void(uint8_t* site)> unpatch) override;
  size_t NumPatchedSites() const;
  // CopyIn for the Sentry's own reads of a process's memory on behalf of
  // another reader (/proc/[pid]/mem): over patched syscall sites it gives
  // the bytes the program had before the platform rewrote them.
  int64_t CopyInOriginal(uintptr_t addr, void* dst, uint64_t n);

  // For tests and metrics.
  size_t NumVmas() const;
  size_t NumPmas() const;
  uint64_t BackedBytes() const;  // bytes of virtual memory with PMAs
  uintptr_t brk() const;

  // Pages mapped around a faulting page, in one aligned block (64 KiB).
  static constexpr uint64_t kFaultAroundPages = 16;
  // The same for a private file mapping that cannot be written (program
  // text and read-only data), in one aligned block of 512 KiB: its pages
  // are a copy from the file at ~0.4 us each, a fault costs a trap and a
  // mapping request (40-100 us on systrap), and code is touched sparsely
  // (a dynamic /bin/true faulted 13 times in libc's 1.3 MiB of text with
  // 64 KiB blocks, 3 times with these).
  static constexpr uint64_t kFileFaultAroundPages = 128;
  // Linux's default stack_guard_gap: a MAP_GROWSDOWN VMA does not grow to
  // within this distance of the VMA below it.
  static constexpr uint64_t kStackGuardGap = 256 * kPageSize;

 private:
  friend struct ::sandboxd::state::MmState;  // checkpoint save and load
  using VmaMap = std::map<uintptr_t, Vma>;
  using PmaMap = std::map<uintptr_t, Pma>;
  enum class Access { kRead, kWrite, kExec };

  // The VMA containing addr, or vmas_.end().
  int64_t MmapInternal(uintptr_t addr, uint64_t len, int prot, int flags,
                       std::shared_ptr<Mappable> file, uint64_t offset,
                       platform::Prot max_prot);
  VmaMap::iterator FindVma(uintptr_t addr) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  VmaMap::const_iterator FindVma(uintptr_t addr) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  PmaMap::const_iterator FindPma(uintptr_t addr) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // True if no VMA intersects [start, end).
  bool IsFree(uintptr_t start, uintptr_t end) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The highest page-aligned start of a free range of `len` bytes within
  // [lo, hi), or 0 if none.
  uintptr_t FindGapTopDown(uint64_t len, uintptr_t lo, uintptr_t hi) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Where a new mapping of `len` bytes goes: the hint if free, else
  // top-down below mmap_base_, else anywhere. 0 if there is no room.
  uintptr_t FindPlacement(uintptr_t hint, uint64_t len, bool below_2g) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Whether a fault at `addr` (in no VMA) would grow the MAP_GROWSDOWN VMA
  // above it, and GrowStackTo does it, returning the grown VMA or end().
  bool CanGrowStackTo(uintptr_t addr) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  VmaMap::iterator GrowStackTo(uintptr_t addr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Splits the VMA containing addr (if any, and addr is inside) in two.
  VmaMap::iterator SplitVma(uintptr_t addr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Splits VMAs at start and end; returns the first VMA at or after start.
  VmaMap::iterator IsolateVmas(uintptr_t start, uintptr_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges the VMA at `it` with its neighbours where compatible.
  void MergeVmaAround(VmaMap::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges all VMAs intersecting [start, end) and their neighbours.
  void MergeVmasIn(uintptr_t start, uintptr_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  VmaMap::iterator InsertVma(uintptr_t start, Vma vma)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Removes VMAs and PMAs in [start, end) (freeing owned pages) and unmaps
  // the range from the AddressSpace.
  void UnmapLocked(uintptr_t start, uintptr_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PmaMap::iterator SplitPma(uintptr_t addr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes PMAs in [start, end), freeing owned pages. Does not touch the
  // AddressSpace.
  void RemovePmas(uintptr_t start, uintptr_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts a PMA, merging it with file-contiguous neighbours.
  void InsertPma(uintptr_t start, Pma pma) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the PMAs in [start, end) to start at new_start.
  // Preconditions: no PMA intersects [new_start, new_start + end - start).
  void MovePmas(uintptr_t start, uintptr_t end, uintptr_t new_start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Gives every page of [start, end) (page-aligned, inside the VMA at
  // `vma`) a PMA, allocating zeroed pages for private anonymous memory.
  // Returns the end of the prefix of [start, end) that is backed: less than
  // `end` past the end of a shared object or when memory is exhausted
  // (*bus = true in both cases).
  uintptr_t EnsureBacked(VmaMap::const_iterator vma, uintptr_t start,
                         uintptr_t end, bool* bus)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes the owned PMAs in [start, end) (page-aligned) writable in place:
  // each copy-on-write piece is copied to new pages, or kept if this MM
  // holds the only reference. With `unmap_copied`, copied ranges are
  // removed from the AddressSpace (which still maps the old pages) for the
  // next fault to map the new ones. With `reclaim_only`, pieces still
  // shared are left as they are. Returns false if the memory file is full;
  // the pieces done so far stay done.
  bool BreakCow(uintptr_t start, uintptr_t end, bool unmap_copied,
                bool reclaim_only = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogBackingFailure(uintptr_t addr, const absl::Status& why)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void LogBackingFailure(uintptr_t addr, const std::string& why)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Maps the PMAs intersecting [start, end) into the AddressSpace with the
  // VMA's protection (without write for copy-on-write pages). Returns false
  // if the platform failed. Under the reader lock only on the restore fast
  // path (HandleFaultShared): the platform orders its own requests, and
  // nothing can unmap while the lock is held.
  bool MapBacked(const Vma& vma, uintptr_t start, uintptr_t end)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // MapBacked's ranges, appended to *out, for one MapFiles request.
  void BackedRanges(const Vma& vma, uintptr_t start, uintptr_t end,
                    std::vector<platform::AddressSpace::FileRange>* out)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Restore (async_loader.h). The first memory-file range behind the PMAs
  // in [start, end) that is not loaded yet: true with it, else false.
  bool UnloadedIn(uintptr_t start, uintptr_t end, uint64_t* off,
                  uint64_t* len) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits until every PMA in [start, end) is loaded: 0, or -EIO, holding
  // the caller's lock meanwhile (RestoreWait::kExclusive: the writer
  // lock).
  int WaitBackedLocked(uintptr_t start, uintptr_t end)
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The fault-around block around `addr` in the VMA at `vit`.
  void FaultBlock(VmaMap::const_iterator vit, uintptr_t addr,
                  uintptr_t* start, uintptr_t* end) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The part of a fault that needs only the reader lock while a restore is
  // loading: waits (without the lock) for the restored pages of the
  // fault-around block and, if the block is backed and needs no copy for
  // this access, maps it under the reader lock.
  enum class SharedFault { kMapped, kSignal, kContinue };
  bool HandleFaultOnce(uintptr_t addr, bool write, bool exec, int* signo,
                       int* si_code);
  SharedFault HandleFaultShared(uintptr_t addr, bool write, bool exec,
                                int* signo, int* si_code)
      ABSL_LOCKS_EXCLUDED(mu_);
  // HandleFault under the writer lock. With a pending range to map and
  // RestoreWait::kShared, returns kContinue and the range in *wait_off,
  // *wait_len for the caller to wait for without the writer lock.
  SharedFault HandleFaultLocked(uintptr_t addr, bool write, bool exec,
                                int* signo, int* si_code, uint64_t* wait_off,
                                uint64_t* wait_len)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One step of a copy: walks [addr, addr+n) calling fn(internal pointer,
  // offset into the copy, length) for each backed piece. Stops at the first
  // address that is not accessible (*need_backing = false) or, unless
  // `allocate`, at the first page without backing or, for writes, still
  // copy-on-write (*need_backing = true).
  // Returns the number of bytes done. Callers hold mu_ exclusively when
  // `allocate`, otherwise at least shared. A piece that a restore has not
  // loaded yet stops the walk with the piece in *stop for the caller to
  // wait for without the lock (RestoreWait::kShared); with
  // RestoreWait::kExclusive the walk waits for it under the writer lock
  // (asking for it first). A piece whose load failed: stop->io_error.
  struct WalkStop {
    bool need_backing = false;  // retry under the writer lock
    bool io_error = false;      // a restored piece failed to load
    // A restored piece to wait for (without the lock), then walk on.
    uint64_t wait_off = 0;
    uint64_t wait_len = 0;
  };
  template <typename Fn>
  uint64_t Walk(uintptr_t addr, uint64_t n, Access access, bool allocate,
                WalkStop* stop, Fn&& fn) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Runs Walk under the reader lock and, when pages need backing, goes on
  // under the writer lock; waits for restored pieces between the walks.
  // Returns the number of bytes done; *io_error as for Walk.
  template <typename Fn>
  uint64_t WalkWithBacking(uintptr_t addr, uint64_t n, Access access,
                           bool* io_error, Fn&& fn) ABSL_LOCKS_EXCLUDED(mu_);

  // Syscall patching (code_patch.cc). A Sentry pointer through which the
  // n bytes at addr (within one page of a private mapping whose pages are
  // this MM's) can be written: backed, copy-on-write broken. Null if not.
  uint8_t* PrivateCodeLocked(uintptr_t addr, size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before [start, end) is unmapped or moved: restores the patched sites in
  // it (`restore`; else just forgets them, their pages are going) and, if
  // the range touches the patch table, every site, and forgets the table.
  void UnpatchRangeLocked(uintptr_t start, uintptr_t end, bool restore)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoint load (MmState), before any thread runs: writes back the
  // original bytes of each saved patched site (site -> bytes) and keeps
  // [table, table + table_len) as the table, so that later patches go on
  // after its entries. The record starts empty: the sites are the
  // program's own code again. Fails, naming the site or the table, if a
  // site is not in private memory or the table is not one of the VMAs.
  absl::Status RestorePatchedSitesLocked(
      uintptr_t table, size_t table_len,
      const std::map<uintptr_t, std::string>& sites)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  static bool Allows(const platform::Prot& prot, Access access);
  // True if [addr, addr+n) is a nonempty range inside the application's
  // address bounds.
  bool InBounds(uintptr_t addr, uint64_t n) const;

  MemoryFile* const mf_;
  const std::unique_ptr<platform::AddressSpace> as_;
  const uintptr_t min_addr_;
  const uintptr_t max_addr_;
  // Not const: a checkpoint load sets the saved one before the MM is used.
  uintptr_t mmap_base_;

  mutable absl::Mutex mu_;
  // Atomic: MapBacked may log under the reader lock.
  std::atomic<int> backing_failures_logged_{0};
  VmaMap vmas_ ABSL_GUARDED_BY(mu_);
  PmaMap pmas_ ABSL_GUARDED_BY(mu_);
  // brk_start_ <= brk_; the heap VMA covers [brk_start_, PageRoundUp(brk_)).
  uintptr_t brk_start_ ABSL_GUARDED_BY(mu_) = 0;
  uintptr_t brk_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> as_limit_{~uint64_t{0}};
  std::atomic<uint64_t> data_limit_{~uint64_t{0}};
  // may_expand_vm: false if `bytes` more of mapping (`data`: private
  // writable, not a stack) would pass RLIMIT_AS or RLIMIT_DATA, counting
  // [replace_start, replace_end) (what a MAP_FIXED replaces) as gone.
  bool MayExpandLocked(uint64_t bytes, bool data, uintptr_t replace_start = 0,
                       uintptr_t replace_end = 0) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::atomic<uint32_t> membarrier_{0};  // see membarrier_registrations()
  // Syscall patching: the table's range (0 when not mapped), and each
  // patched site with the bytes it had and what restores it while threads
  // may run it. Copied by Fork; saved by a checkpoint (MmState).
  struct PatchedSite {
    std::string original;  // the site's bytes before the patch
    std::function<void(uint8_t*)> unpatch;
  };
  uintptr_t patch_table_ ABSL_GUARDED_BY(mu_) = 0;
  size_t patch_table_len_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uintptr_t, PatchedSite> patched_ ABSL_GUARDED_BY(mu_);
  // Bumped whenever a site is given back its bytes (CopyInOriginal retries
  // a copy that such a change may have overtaken).
  uint64_t unpatch_gen_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sandboxd::mm

#endif  // SANDBOXD_SENTRY_MM_MM_H_
