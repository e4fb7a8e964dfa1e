// AsyncLoader: memory-file ranges whose data is still being read (a restore
// that lets the program run before its memory has arrived).
//
// A restore allocates the pages of every saved object as usual and, instead
// of filling them, registers each range (Add) with where its data is in the
// image. Start() then has a pool of threads read the ranges into the memory
// file through the internal mapping, in large reads that follow memory-file
// order. Any Sentry access to a range that is not loaded yet waits for that
// range only (Wait): the range goes to the front of the queue, read in
// pieces of at most `wait_chunk_bytes`, round-robin with the other awaited
// ranges, so that one large wait cannot starve a small one. A range is
// loaded, pending (queued or being read) or failed; a failure is sticky:
// Wait returns -EIO for the range for good, never zeros.
//
// MemoryFile holds the loader (MemoryFile::SetAsyncLoader); MM and tmpfs
// call MemoryFile::WaitLoaded before touching restored pages, and map them
// into the application only once they are loaded. A freed range is
// cancelled (Cancel), so that no late read lands in reused pages.
//
// Lock order: callers' locks (MM::mu_, a tmpfs file's data_mu_) come
// before AsyncLoader::mu_, which is a leaf; the reading threads take no
// other lock while they read (the rate limiter's own lock, a leaf, only
// to book their time).
//
// Thread-safety: all methods may be called concurrently, except Add (only
// before Start, by the restoring thread).
#ifndef SANDBOXD_SENTRY_MM_ASYNC_LOADER_H_
#define SANDBOXD_SENTRY_MM_ASYNC_LOADER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sandboxd::mm {

class MemoryFile;

// How an access that meets a pending range waits: with MM::mu_ held for
// reading (other threads' faults and copies go on), or for writing (every
// other thread of the address space stops until the range arrives: only
// for the A/B benchmark, `--restore-wait=exclusive`).
enum class RestoreWait { kShared, kExclusive };
// "shared" or "exclusive".
absl::StatusOr<RestoreWait> ParseRestoreWait(absl::string_view name);
const char* RestoreWaitName(RestoreWait wait);

struct AsyncLoadOptions {
  // Reading threads.
  int threads = 2;
  // Background reads: up to this many bytes of one registered range (or
  // of ranges that touch both in the memory file and in the image).
  uint64_t chunk_bytes = 8ull << 20;
  // An awaited range is read in pieces of at most this.
  uint64_t wait_chunk_bytes = 256ull << 10;
  // Bytes per second for all threads together; 0: no limit. For
  // benchmarks that model a network disk. With a limit, background reads
  // are at most ~10 ms of it each, so that an awaited piece is not queued
  // behind much.
  uint64_t rate_limit = 0;
  RestoreWait wait = RestoreWait::kShared;
};

// Where the registered ranges' data is. ReadPages may be called from
// several threads at once.
class PageSource {
 public:
  virtual ~PageSource() = default;
  // Reads the `len` bytes saved at `src_off` (the image's own offsets)
  // into `dst`, whose memory is zero-filled (it may skip zeros).
  virtual absl::Status ReadPages(uint64_t src_off, uint64_t len,
                                 uint8_t* dst) = 0;
  // For errors and logs ("pages.img").
  virtual std::string Name() const = 0;
};

// Counters (AsyncLoader::Stats). Wait times are in power-of-two buckets
// of microseconds: wait_hist[0] < 2 us, wait_hist[i] in [2^i, 2^(i+1)).
struct AsyncLoadStats {
  static constexpr int kBuckets = 32;
  uint64_t bytes_total = 0;      // registered
  uint64_t bytes_loaded = 0;
  uint64_t pages_loaded = 0;
  uint64_t bytes_failed = 0;
  uint64_t bytes_cancelled = 0;  // freed before they were loaded
  uint64_t reads = 0;            // ReadPages calls
  uint64_t waits = 0;            // Wait calls that had to block
  uint64_t waiting = 0;          // blocked now
  uint64_t wait_ns_total = 0;
  uint64_t load_ns = 0;          // Start to the last read (so far)
  bool started = false;
  bool done = false;             // nothing pending (failed ranges may stay)
  std::array<uint64_t, kBuckets> wait_hist{};
};

class AsyncLoader {
 public:
  // Preconditions: `mf` outlives this object (MemoryFile owns it).
  AsyncLoader(MemoryFile* mf, std::shared_ptr<PageSource> source,
              AsyncLoadOptions options);
  ~AsyncLoader();  // stops the threads (a read under way finishes first)
  AsyncLoader(const AsyncLoader&) = delete;
  AsyncLoader& operator=(const AsyncLoader&) = delete;

  const AsyncLoadOptions& options() const { return options_; }

  // Registers [dst_off, dst_off + len) of the memory file (allocated,
  // zero-filled, page-aligned) as pending, its data at `src_off` of the
  // source. Before Start only (FailedPrecondition after it).
  absl::Status Add(uint64_t dst_off, uint64_t len, uint64_t src_off);
  // Starts the reading threads. Accesses may Wait before it (they wait
  // until the threads run). An error when the host gave no thread.
  absl::Status Start();

  // True once nothing is pending and nothing failed: every access may go
  // ahead without a lock (the fast path of every caller).
  bool settled() const { return settled_.load(std::memory_order_acquire); }

  // Waits until [off, off + len) is loaded, moving it to the front of the
  // queue. 0, or -EIO if a read of part of it failed.
  int Wait(uint64_t off, uint64_t len) ABSL_LOCKS_EXCLUDED(mu_);
  // The first part of [off, off + len) that is not loaded (pending or
  // failed): true with its bounds, false if all is loaded. Does not wait.
  bool FirstUnloaded(uint64_t off, uint64_t len, uint64_t* start,
                     uint64_t* end) const ABSL_LOCKS_EXCLUDED(mu_);
  // [off, off + len) is being freed: nothing will be read into it (a read
  // under way is waited for) and it no longer counts as failed.
  void Cancel(uint64_t off, uint64_t len) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until nothing is pending (a checkpoint of a restored sandbox):
  // OK, or the first read error.
  absl::Status WaitAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until nothing is pending or a read has failed (`wait
  // --restored`: a failed load is its answer, whatever is left to read):
  // OK, or the first read error.
  absl::Status WaitAllOrError() ABSL_LOCKS_EXCLUDED(mu_);
  // The first read error (OK if none).
  absl::Status error() const ABSL_LOCKS_EXCLUDED(mu_);

  AsyncLoadStats Stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Range {
    uint64_t end;
    uint64_t src_off;
  };
  struct Chunk {
    uint64_t start = 0, end = 0, src_off = 0;
  };
  using RangeMap = std::map<uint64_t, Range>;  // start -> {end, src}

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // The next read: a piece of the oldest awaited range that is still
  // pending, else background work from the cursor. Moves it from pending_
  // to in_flight_. False if nothing is pending.
  bool ClaimLocked(Chunk* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes [start, end) (inside the pending range at `it`) out of pending_.
  Chunk TakeLocked(RangeMap::iterator it, uint64_t start, uint64_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first entry of `m` that ends after `off`.
  static RangeMap::const_iterator FirstAfter(const RangeMap& m, uint64_t off);
  static RangeMap::iterator FirstAfter(RangeMap& m, uint64_t off);
  // Removes [start, end) from `m`, splitting entries; returns bytes removed.
  static uint64_t Erase(RangeMap& m, uint64_t start, uint64_t end);
  // Whether [start, end) meets an entry of `m` (and the first such part).
  static bool Meets(const RangeMap& m, uint64_t start, uint64_t end,
                    uint64_t* s, uint64_t* e);
  // Reads the claimed chunk `c` (mu_ released meanwhile) and records the
  // outcome.
  void ReadLocked(const Chunk& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateSettledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Books `len` bytes of the rate limit and sleeps until they may be read.
  void Throttle(uint64_t len) ABSL_LOCKS_EXCLUDED(mu_, rate_mu_);
  static uint64_t NowNs();

  MemoryFile* const mf_;
  const std::shared_ptr<PageSource> source_;
  const AsyncLoadOptions options_;
  std::atomic<bool> settled_{true};

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;  // pending work or stop
  absl::CondVar done_cv_;  // a read finished
  RangeMap pending_ ABSL_GUARDED_BY(mu_);    // not read yet
  RangeMap in_flight_ ABSL_GUARDED_BY(mu_);  // being read
  RangeMap failed_ ABSL_GUARDED_BY(mu_);     // read failed (src unused)
  // Awaited ranges, oldest last: a new wait goes to the front; a range
  // served in part goes to the back with what is left.
  std::deque<std::pair<uint64_t, uint64_t>> urgent_ ABSL_GUARDED_BY(mu_);
  uint64_t cursor_ ABSL_GUARDED_BY(mu_) = 0;  // background reads go on here
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  AsyncLoadStats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t start_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;  // touched by Start and ~ only

  absl::Mutex rate_mu_;
  uint64_t rate_next_ns_ ABSL_GUARDED_BY(rate_mu_) = 0;
};

}  // namespace sandboxd::mm

#endif  // SANDBOXD_SENTRY_MM_ASYNC_LOADER_H_
