// MM's copies between the Sentry and application memory (CopyIn,
// CopyOut, CopyInString) and the futex words (AtomicWord, UpdateWord).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

#include "sentry/mm/mm.h"

namespace sandboxd::mm {

template <typename Fn>
uint64_t MM::Walk(uintptr_t addr, uint64_t n, Access access, bool allocate,
                  WalkStop* stop, Fn&& fn) {
  *stop = WalkStop{};
  AsyncLoader* ld = mf_->async_loader();
  const bool exclusive_wait =
      ld != nullptr && ld->options().wait == RestoreWait::kExclusive;
  uint64_t done = 0;
  while (done < n) {
    uintptr_t cur = addr + done;
    auto vit = FindVma(cur);
    if (vit == vmas_.end()) {
      // The kernel's own accesses grow stacks too (e.g. a signal frame
      // written below the lowest stack page).
      if (!CanGrowStackTo(cur)) return done;
      if (!allocate) {
        stop->need_backing = true;
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
          stop->need_backing = true;
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
      const uint64_t len = std::min<uintptr_t>(pit->second.end, seg_end) - cur;
      const uint64_t off = pit->second.file_offset + (cur - pit->first);
      const bool cow = access == Access::kWrite && pit->second.needs_copy;
      uint64_t us, ue;
      // Restored pages not loaded yet (a copy-on-write break reads the
      // whole PMA piece it copies).
      const uint64_t woff = cow ? PageRoundDown(off) : off;
      const uint64_t wlen =
          cow ? std::min<uintptr_t>(pit->second.end, PageRoundUp(seg_end)) -
                    PageRoundDown(cur)
              : len;
      if (ld != nullptr && ld->FirstUnloaded(woff, wlen, &us, &ue)) {
        if (!exclusive_wait) {
          // The caller waits for this piece only, without the lock.
          stop->wait_off = woff;
          stop->wait_len = wlen;
          return done;
        }
        if (!allocate) {
          stop->need_backing = true;  // to wait under the writer lock
          return done;
        }
        if (ld->Wait(woff, wlen) < 0) {
          stop->io_error = true;
          return done;
        }
      }
      if (cow) {
        // The Sentry writes like the program: never into pages another MM
        // shares.
        if (!allocate) {
          stop->need_backing = true;
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
      fn(mf_->Internal(off), done, len);
      done += len;
      cur += len;
    }
  }
  return done;
}

template <typename Fn>
uint64_t MM::WalkWithBacking(uintptr_t addr, uint64_t n, Access access,
                             bool* io_error, Fn&& fn) {
  *io_error = false;
  uint64_t done = 0;
  bool allocate = false;
  while (done < n) {
    WalkStop stop;
    const uint64_t base = done;
    auto step = [&fn, base](uint8_t* p, uint64_t off, uint64_t len) {
      fn(p, base + off, len);
    };
    if (!allocate) {
      // The common case, pages already backed, shares the lock with other
      // copies and faults of backed pages.
      absl::ReaderMutexLock l(&mu_);
      done += Walk(addr + base, n - base, access, /*allocate=*/false, &stop,
                   step);
    } else {
      absl::MutexLock l(&mu_);
      done += Walk(addr + base, n - base, access, /*allocate=*/true, &stop,
                   step);
    }
    if (stop.io_error) {
      *io_error = true;
      return done;
    }
    if (stop.wait_len != 0) {
      // A restore is loading the next piece: wait for it with no lock of
      // this MM held, so that no other thread's copy, fault or mmap waits
      // behind this one; then walk on from where this walk stopped (the
      // piece may have been unmapped or freed meanwhile: looked up again).
      if (mf_->WaitLoaded(stop.wait_off, stop.wait_len) < 0) {
        *io_error = true;
        return done;
      }
      allocate = false;
      continue;
    }
    if (!stop.need_backing) return done;
    if (allocate && done == base) return done;  // no progress: a bad page
    allocate = true;
  }
  return done;
}

int64_t MM::CopyIn(uintptr_t addr, void* dst, uint64_t n) {
  if (n == 0) return 0;
  if (!InBounds(addr, n)) return -EFAULT;
  uint8_t* d = static_cast<uint8_t*>(dst);
  bool io_error;
  uint64_t done = WalkWithBacking(
      addr, n, Access::kRead, &io_error,
      [d](uint8_t* p, uint64_t off, uint64_t len) { std::memcpy(d + off, p, len); });
  if (done > 0) return static_cast<int64_t>(done);
  return io_error ? -EIO : -EFAULT;
}

int64_t MM::CopyOut(uintptr_t addr, const void* src, uint64_t n) {
  if (n == 0) return 0;
  if (!InBounds(addr, n)) return -EFAULT;
  const uint8_t* s = static_cast<const uint8_t*>(src);
  bool io_error;
  uint64_t done = WalkWithBacking(
      addr, n, Access::kWrite, &io_error,
      [s](uint8_t* p, uint64_t off, uint64_t len) { std::memcpy(p, s + off, len); });
  if (done > 0) return static_cast<int64_t>(done);
  return io_error ? -EIO : -EFAULT;
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
  bool io_error;
  uint64_t done = WalkWithBacking(
      addr, 4, writable ? Access::kWrite : Access::kRead, &io_error, take);
  if (done != 4 && writable && !write && !io_error) {
    // The mapping lost PROT_WRITE meanwhile: reading is all that is asked.
    done = WalkWithBacking(addr, 4, Access::kRead, &io_error, take);
  }
  if (io_error) return -EIO;
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

}  // namespace sandboxd::mm
