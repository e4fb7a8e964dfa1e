#include "sentry/mm/memory_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace sandboxd::mm {

namespace {

// Allocator invariants broken by a caller (double free, freeing what was
// never allocated) would silently corrupt other processes' memory; stop.
[[noreturn]] void Die(const char* what, uint64_t off, uint64_t len) {
  std::fprintf(stderr, "MemoryFile: %s [%#llx, +%#llx)\n", what,
               static_cast<unsigned long long>(off),
               static_cast<unsigned long long>(len));
  std::abort();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryFile>> MemoryFile::Create(
    uint64_t max_size) {
  if (max_size == 0 || !IsPageAligned(max_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory file: max size ", max_size,
                     " is not a positive page multiple"));
  }
  // Application code runs from these pages: ask for an executable memfd
  // explicitly, since hosts with vm.memfd_noexec=1 would otherwise seal it
  // non-executable. Kernels before 6.3 do not know MFD_EXEC (EINVAL).
  constexpr unsigned kMfdExec = 0x10;
  UniqueFd fd(::memfd_create("sandboxd-memory", MFD_CLOEXEC | kMfdExec));
  if (!fd.valid() && errno == EINVAL) {
    fd.reset(::memfd_create("sandboxd-memory", MFD_CLOEXEC));
  }
  if (!fd.valid()) return ErrnoStatus("memory file: memfd_create", errno);
  // Mapping beyond EOF is allowed; only accesses there fault (SIGBUS), and
  // Allocate grows the file before handing out a range.
  void* p = ::mmap(nullptr, max_size, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_NORESERVE, fd.get(), 0);
  if (p == MAP_FAILED) {
    return ErrnoStatus(
        absl::StrCat("memory file: mapping ", max_size, " bytes"), errno);
  }
  Mapping mapping(p, max_size);
  return std::unique_ptr<MemoryFile>(
      new MemoryFile(std::move(fd), std::move(mapping), max_size));
}

MemoryFile::~MemoryFile() {
  // Its threads write through the internal mapping.
  loader_.reset();
}

void MemoryFile::SetAsyncLoader(std::unique_ptr<AsyncLoader> loader) {
  loader_ = std::move(loader);
}

namespace {
// An Allocate of this thread was refused (the limit, a full file): the
// caller's kernel runs the OOM killer once it holds no lock.
thread_local bool refused_here = false;
}  // namespace

bool MemoryFile::TakeRefusedOnThisThread() {
  const bool r = refused_here;
  refused_here = false;
  return r;
}

absl::StatusOr<uint64_t> MemoryFile::Allocate(uint64_t len) {
  if (len == 0 || !IsPageAligned(len)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory file: allocation length ", len,
                     " is not a positive page multiple"));
  }
  absl::MutexLock l(&mu_);
  if (const uint64_t limit = limit_.load(std::memory_order_relaxed);
      limit != 0 && (len > limit || allocated_ > limit - len)) {
    refused_here = true;
    refusals_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(
        absl::StrCat("memory file: cannot allocate ", len, " bytes: ",
                     allocated_, " of the sandbox's limit of ", limit,
                     " in use"));
  }
  // First fit among freed ranges keeps the file compact (low offsets are
  // reused first), which keeps FileSize and page tables small.
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < len) continue;
    uint64_t off = it->first;
    uint64_t rest = it->second - len;
    free_.erase(it);
    if (rest != 0) free_.emplace(off + len, rest);
    allocated_ += len;
    return off;
  }
  if (len > max_size_ - end_) {
    refused_here = true;
    refusals_.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(
        absl::StrCat("memory file: cannot allocate ", len, " bytes: ",
                     allocated_, " of ", max_size_, " in use"));
  }
  uint64_t off = end_;
  if (off + len > file_size_) {
    uint64_t want = off + len;
    uint64_t size = std::min(max_size_, (want + kGrowStep - 1) / kGrowStep *
                                            kGrowStep);
    if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
      return ErrnoStatus(
          absl::StrCat("memory file: growing to ", size, " bytes"), errno);
    }
    file_size_ = size;
  }
  end_ = off + len;
  allocated_ += len;
  return off;
}

absl::Status MemoryFile::Populate(uint64_t bytes) {
  bytes = std::min(PageRoundUp(bytes), max_size_);
  if (bytes == 0) return absl::OkStatus();
  {
    absl::MutexLock l(&mu_);
    if (bytes > file_size_) {
      uint64_t size = std::min(max_size_, (bytes + kGrowStep - 1) / kGrowStep *
                                              kGrowStep);
      if (::ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
        return ErrnoStatus(
            absl::StrCat("memory file: growing to ", size, " bytes"), errno);
      }
      file_size_ = size;
    }
  }
  // MADV_POPULATE_WRITE (Linux 5.14): allocates and maps without writing.
  constexpr int kMadvPopulateWrite = 23;
  if (::madvise(Internal(0), bytes, kMadvPopulateWrite) != 0) {
    return ErrnoStatus(
        absl::StrCat("memory file: populating the first ", bytes, " bytes"),
        errno);
  }
  return absl::OkStatus();
}

void MemoryFile::PunchHole(uint64_t off, uint64_t len) {
  if (::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(off), static_cast<off_t>(len)) != 0) {
    // memfd (shmem) always supports hole punching; if it ever fails, zero
    // the pages by hand so reuse still sees zeros (memory stays committed).
    std::memset(Internal(off), 0, len);
  }
}

void MemoryFile::Free(uint64_t off, uint64_t len) {
  if (len == 0) return;
  if (!IsPageAligned(off) || !IsPageAligned(len) || off + len < off ||
      off + len > max_size_) {
    Die("Free of a bad range", off, len);
  }
  // No restore read may land in the range once it is reused.
  if (loader_ != nullptr) loader_->Cancel(off, len);
  // Punch before the range becomes allocatable again, outside the lock: no
  // one else can touch a range that is neither free nor theirs.
  PunchHole(off, len);

  absl::MutexLock l(&mu_);
  if (off + len > end_) Die("Free beyond the allocated end", off, len);
  uint64_t start = off, end = off + len;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first < end) {
    Die("Free of a range that is already free", off, len);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > start) {
      Die("Free of a range that is already free", off, len);
    }
    if (prev->first + prev->second == start) {  // coalesce left
      start = prev->first;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == end) {  // coalesce right
    end = next->first + next->second;
    free_.erase(next);
  }
  allocated_ -= len;
  if (end == end_) {
    end_ = start;  // give the tail back to the bump region
  } else {
    free_.emplace(start, end - start);
  }
}

void MemoryFile::SplitRefs(uint64_t off) {
  auto it = refs_.upper_bound(off);
  if (it == refs_.begin()) return;
  --it;
  if (it->first < off && off < it->second.end) {
    RefRange right = it->second;
    it->second.end = off;
    refs_.emplace_hint(std::next(it), off, right);
  }
}

void MemoryFile::MergeRefs(uint64_t start, uint64_t end) {
  auto it = refs_.lower_bound(start);
  if (it != refs_.begin()) --it;
  while (it != refs_.end() && it->first <= end) {
    auto next = std::next(it);
    if (next != refs_.end() && it->second.end == next->first &&
        it->second.refs == next->second.refs) {
      it->second.end = next->second.end;
      refs_.erase(next);
    } else {
      it = next;
    }
  }
}

void MemoryFile::IncRef(uint64_t off, uint64_t len) {
  if (len == 0) return;
  if (!IsPageAligned(off) || !IsPageAligned(len) || off + len < off ||
      off + len > max_size_) {
    Die("IncRef of a bad range", off, len);
  }
  const uint64_t end = off + len;
  absl::MutexLock l(&mu_);
  SplitRefs(off);
  SplitRefs(end);
  uint64_t cur = off;
  auto it = refs_.lower_bound(off);
  while (cur < end) {
    if (it != refs_.end() && it->first == cur) {
      it->second.refs++;
      cur = it->second.end;
      ++it;
      continue;
    }
    // Pages not recorded have one reference; now they have two.
    uint64_t gap_end =
        (it != refs_.end() && it->first < end) ? it->first : end;
    refs_.emplace_hint(it, cur, RefRange{gap_end, 2});
    cur = gap_end;
  }
  MergeRefs(off, end);
}

void MemoryFile::DecRef(uint64_t off, uint64_t len) {
  if (len == 0) return;
  if (!IsPageAligned(off) || !IsPageAligned(len) || off + len < off ||
      off + len > max_size_) {
    Die("DecRef of a bad range", off, len);
  }
  const uint64_t end = off + len;
  std::vector<std::pair<uint64_t, uint64_t>> to_free;
  {
    absl::MutexLock l(&mu_);
    SplitRefs(off);
    SplitRefs(end);
    uint64_t cur = off;
    auto it = refs_.lower_bound(off);
    while (cur < end) {
      if (it != refs_.end() && it->first == cur) {
        cur = it->second.end;
        if (--it->second.refs == 1) {
          it = refs_.erase(it);  // back to the implicit single reference
        } else {
          ++it;
        }
        continue;
      }
      uint64_t gap_end =
          (it != refs_.end() && it->first < end) ? it->first : end;
      to_free.emplace_back(cur, gap_end - cur);  // the last reference
      cur = gap_end;
    }
    MergeRefs(off, end);
  }
  // Free takes mu_ itself; the ranges are still allocated and referenced by
  // no one, so nobody can touch them in between.
  for (const auto& [o, n] : to_free) Free(o, n);
}

bool MemoryFile::IsExclusive(uint64_t off, uint64_t len) const {
  absl::MutexLock l(&mu_);
  auto it = refs_.upper_bound(off);
  if (it != refs_.begin() && std::prev(it)->second.end > off) return false;
  return it == refs_.end() || it->first >= off + len;
}

uint64_t MemoryFile::SharedBytes() const {
  absl::MutexLock l(&mu_);
  uint64_t n = 0;
  for (const auto& [start, r] : refs_) n += r.end - start;
  return n;
}

void MemoryFile::Decommit(uint64_t off, uint64_t len) {
  if (len == 0) return;
  if (loader_ != nullptr) loader_->Cancel(off, len);
  PunchHole(off, len);
}

uint64_t MemoryFile::AllocatedBytes() const {
  absl::MutexLock l(&mu_);
  return allocated_;
}

uint64_t MemoryFile::FileSize() const {
  absl::MutexLock l(&mu_);
  return file_size_;
}

}  // namespace sandboxd::mm
