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
                  bool* need_backing, Fn&& fn) {
  *need_backing = false;
  uint64_t done = 0;
  while (done < n) {
    uintptr_t cur = addr + done;
    auto vit = FindVma(cur);
    if (vit == vmas_.end()) {
      // The kernel's own accesses grow stacks too (e.g. a signal frame
      // written below the lowest stack page).
      if (!CanGrowStackTo(cur)) return done;
      if (!allocate) {
        *need_backing = true;
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
          *need_backing = true;
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
      if (access == Access::kWrite && pit->second.needs_copy) {
        // The Sentry writes like the program: never into pages another MM
        // shares.
        if (!allocate) {
          *need_backing = true;
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
      const uint64_t len = std::min<uintptr_t>(pit->second.end, seg_end) - cur;
      fn(mf_->Internal(pit->second.file_offset + (cur - pit->first)), done,
         len);
      done += len;
      cur += len;
    }
  }
  return done;
}

template <typename Fn>
uint64_t MM::WalkWithBacking(uintptr_t addr, uint64_t n, Access access,
                             Fn&& fn) {
  bool need_backing;
  uint64_t done;
  {
    // The common case, pages already backed, shares the lock with other
    // copies and faults of backed pages.
    absl::ReaderMutexLock l(&mu_);
    done = Walk(addr, n, access, /*allocate=*/false, &need_backing, fn);
  }
  if (!need_backing) return done;
  absl::MutexLock l(&mu_);
  const uint64_t base = done;
  done += Walk(addr + base, n - base, access, /*allocate=*/true,
               &need_backing,
               [&fn, base](uint8_t* p, uint64_t off, uint64_t len) {
                 fn(p, base + off, len);
               });
  return done;
}

int64_t MM::CopyIn(uintptr_t addr, void* dst, uint64_t n) {
  if (n == 0) return 0;
  if (!InBounds(addr, n)) return -EFAULT;
  uint8_t* d = static_cast<uint8_t*>(dst);
  uint64_t done = WalkWithBacking(
      addr, n, Access::kRead,
      [d](uint8_t* p, uint64_t off, uint64_t len) { std::memcpy(d + off, p, len); });
  return done > 0 ? static_cast<int64_t>(done) : -EFAULT;
}

int64_t MM::CopyOut(uintptr_t addr, const void* src, uint64_t n) {
  if (n == 0) return 0;
  if (!InBounds(addr, n)) return -EFAULT;
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint64_t done = WalkWithBacking(
      addr, n, Access::kWrite,
      [s](uint8_t* p, uint64_t off, uint64_t len) { std::memcpy(p, s + off, len); });
  return done > 0 ? static_cast<int64_t>(done) : -EFAULT;
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
  uint64_t done = WalkWithBacking(
      addr, 4, writable ? Access::kWrite : Access::kRead, take);
  if (done != 4 && writable && !write) {
    // The mapping lost PROT_WRITE meanwhile: reading is all that is asked.
    done = WalkWithBacking(addr, 4, Access::kRead, take);
  }
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
