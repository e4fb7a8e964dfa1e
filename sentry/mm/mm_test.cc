#include "sentry/mm/mm.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sandboxd::mm {
namespace {

using ::testing::HasSubstr;

constexpr uintptr_t kMin = 0x10000;
constexpr uintptr_t kMax = 0x7ffffffff000;
constexpr uint64_t kPg = kPageSize;

// Records MapFile/Unmap calls and keeps a per-page model of what the
// application's address space would hold.
class FakeAddressSpace : public platform::AddressSpace {
 public:
  struct Page {
    off_t file_offset;
    platform::Prot prot;
  };

  absl::Status MapFiles(int fd, const std::vector<FileRange>& ranges) override {
    {
      absl::MutexLock l(&mu_);
      ++batches_;
    }
    return platform::AddressSpace::MapFiles(fd, ranges);
  }
  absl::Status MapFile(uintptr_t addr, int fd, off_t off, size_t len,
                       platform::Prot prot) override {
    absl::MutexLock l(&mu_);
    ++map_calls_;
    for (size_t i = 0; i < len; i += kPg) {
      pages_[addr + i] = Page{static_cast<off_t>(off + i), prot};
    }
    return absl::OkStatus();
  }
  void Unmap(uintptr_t addr, size_t len) override {
    absl::MutexLock l(&mu_);
    ++unmap_calls_;
    last_unmap_ = {addr, len};
    pages_.erase(pages_.lower_bound(addr), pages_.lower_bound(addr + len));
  }

  bool Mapped(uintptr_t addr, Page* page = nullptr) {
    absl::MutexLock l(&mu_);
    auto it = pages_.find(addr);
    if (it == pages_.end()) return false;
    if (page) *page = it->second;
    return true;
  }
  size_t NumMapped() {
    absl::MutexLock l(&mu_);
    return pages_.size();
  }
  int map_calls() {
    absl::MutexLock l(&mu_);
    return map_calls_;
  }
  // MapFiles calls: requests to the platform, however many ranges each.
  int batches() {
    absl::MutexLock l(&mu_);
    return batches_;
  }
  int unmap_calls() {
    absl::MutexLock l(&mu_);
    return unmap_calls_;
  }
  std::pair<uintptr_t, size_t> last_unmap() {
    absl::MutexLock l(&mu_);
    return last_unmap_;
  }

 private:
  absl::Mutex mu_;
  std::map<uintptr_t, Page> pages_ ABSL_GUARDED_BY(mu_);
  int map_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int batches_ ABSL_GUARDED_BY(mu_) = 0;
  int unmap_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::pair<uintptr_t, size_t> last_unmap_ ABSL_GUARDED_BY(mu_){0, 0};
};

class MMTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    mf_ = std::move(mf).value();
    auto as = std::make_unique<FakeAddressSpace>();
    as_ = as.get();
    mm_ = std::make_unique<MM>(mf_.get(), std::move(as), kMin, kMax);
  }

  uintptr_t MapAnon(uint64_t len, int prot = PROT_READ | PROT_WRITE,
                    int flags = MAP_PRIVATE, uintptr_t addr = 0) {
    int64_t r = mm_->Mmap(addr, len, prot, flags | MAP_ANONYMOUS);
    EXPECT_GT(r, 0) << "mmap failed: " << r;
    return static_cast<uintptr_t>(r);
  }
  // Pages of [start, end) the fake address space maps.
  size_t NumMappedIn(uintptr_t start, uintptr_t end) {
    size_t n = 0;
    for (uintptr_t a = start; a < end; a += kPg) n += as_->Mapped(a) ? 1 : 0;
    return n;
  }
  // The memory-file offset mapped at page `addr` (0 if none).
  uint64_t MappedAtOf(uintptr_t addr) {
    FakeAddressSpace::Page p{0, {}};
    EXPECT_TRUE(as_->Mapped(addr, &p));
    return static_cast<uint64_t>(p.file_offset);
  }
  void Fill(uintptr_t addr, uint64_t len, uint8_t v) {
    std::vector<uint8_t> buf(len, v);
    ASSERT_EQ(mm_->CopyOut(addr, buf.data(), len), static_cast<int64_t>(len));
  }
  // Reads [addr, addr+len) and checks every byte is v.
  bool AllAre(uintptr_t addr, uint64_t len, uint8_t v) {
    std::vector<uint8_t> buf(len, static_cast<uint8_t>(~v));
    if (mm_->CopyIn(addr, buf.data(), len) != static_cast<int64_t>(len)) {
      return false;
    }
    for (uint8_t b : buf) {
      if (b != v) return false;
    }
    return true;
  }
  uint8_t ByteAt(uintptr_t addr) {
    uint8_t b = 0xee;
    EXPECT_EQ(mm_->CopyIn(addr, &b, 1), 1);
    return b;
  }

  std::unique_ptr<MemoryFile> mf_;
  FakeAddressSpace* as_ = nullptr;
  std::unique_ptr<MM> mm_;
};

// --- mmap -----------------------------------------------------------------

TEST_F(MMTest, MmapPlacesTopDownBelowMmapBase) {
  uintptr_t a = MapAnon(3 * kPg);
  uintptr_t b = MapAnon(kPg);
  EXPECT_EQ(a, mm_->mmap_base() - 3 * kPg);
  EXPECT_EQ(b, a - kPg);
  EXPECT_LE(mm_->mmap_base(), kMax - (128ull << 20));
  // Adjacent compatible anonymous mappings merge, as in Linux.
  EXPECT_EQ(mm_->NumVmas(), 1u);
  // A hole left by munmap is reused first fit from the top.
  ASSERT_EQ(mm_->Munmap(a + kPg, kPg), 0);
  EXPECT_EQ(MapAnon(kPg), a + kPg);
}

TEST_F(MMTest, MmapRoundsLengthAndUsesFreeHint) {
  uintptr_t hint = 0x200000000;
  uintptr_t a = MapAnon(100, PROT_READ, MAP_PRIVATE, hint + 123);
  EXPECT_EQ(a, hint);  // hint rounded down to its page
  // Length rounded up to a page: the next page is free for another mapping.
  EXPECT_EQ(MapAnon(kPg, PROT_READ, MAP_PRIVATE, hint + kPg), hint + kPg);
  // A busy hint is not replaced: the mapping goes elsewhere.
  uintptr_t c = MapAnon(kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE, hint);
  EXPECT_NE(c, hint);
  EXPECT_EQ(ByteAt(hint), 0);
  // A hint below the minimum address means "as low as allowed".
  EXPECT_EQ(MapAnon(kPg, PROT_READ, MAP_PRIVATE, kPg), kMin);
}

TEST_F(MMTest, MmapArgumentErrors) {
  EXPECT_EQ(mm_->Mmap(0, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS), -EINVAL);
  EXPECT_EQ(mm_->Mmap(0x200001000 + 1, kPg, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            -EINVAL);
  EXPECT_EQ(mm_->Mmap(0, kPg, PROT_READ, MAP_PRIVATE), -ENODEV);
  EXPECT_EQ(mm_->Mmap(0, kPg, PROT_READ, MAP_ANONYMOUS), -EINVAL);
  EXPECT_EQ(mm_->Mmap(0, kPg, PROT_READ, MAP_SHARED_VALIDATE | MAP_ANONYMOUS),
            -EINVAL);
  EXPECT_EQ(mm_->Mmap(0, kPg, PROT_READ,
                      MAP_SHARED | MAP_GROWSDOWN | MAP_ANONYMOUS),
            -EINVAL);
  EXPECT_EQ(mm_->Mmap(0, UINT64_MAX - 10, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS),
            -ENOMEM);
  EXPECT_EQ(mm_->Mmap(kMax - kPg, 2 * kPg, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            -ENOMEM);
  EXPECT_EQ(mm_->Mmap(0x1000, kPg, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            -EPERM);
  EXPECT_EQ(mm_->NumVmas(), 0u);
}

TEST_F(MMTest, MmapAcceptsHarmlessFlags) {
  for (int f : {MAP_NORESERVE, MAP_STACK, MAP_GROWSDOWN, MAP_POPULATE}) {
    EXPECT_GT(mm_->Mmap(0, kPg, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | f),
              0)
        << f;
  }
}

TEST_F(MMTest, MapFixedReplacesAndFreesPages) {
  uintptr_t a = MapAnon(4 * kPg);
  Fill(a, 4 * kPg, 7);
  EXPECT_EQ(mf_->AllocatedBytes(), 4 * kPg);
  int code;
  ASSERT_TRUE(mm_->HandleFault(a, false, false, &code));
  int unmaps = as_->unmap_calls();
  ASSERT_EQ(mm_->Mmap(a + kPg, 2 * kPg, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(a + kPg));
  EXPECT_GT(as_->unmap_calls(), unmaps);
  EXPECT_FALSE(as_->Mapped(a + kPg));
  EXPECT_EQ(mf_->AllocatedBytes(), 2 * kPg);  // replaced pages were freed
  EXPECT_EQ(ByteAt(a), 7);
  EXPECT_EQ(ByteAt(a + kPg), 0);
  EXPECT_EQ(ByteAt(a + 2 * kPg), 0);
  EXPECT_EQ(ByteAt(a + 3 * kPg), 7);
  EXPECT_EQ(mm_->NumVmas(), 3u);
}

TEST_F(MMTest, MapFixedNoReplace) {
  uintptr_t a = MapAnon(2 * kPg);
  EXPECT_EQ(mm_->Mmap(a + kPg, 2 * kPg, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE),
            -EEXIST);
  EXPECT_EQ(mm_->Mmap(a + 1, kPg, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE),
            -EINVAL);
  EXPECT_EQ(mm_->Mmap(a + 2 * kPg, kPg, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE),
            static_cast<int64_t>(a + 2 * kPg));
}

TEST_F(MMTest, Map32BitPlacesBelow2G) {
  uintptr_t a = MapAnon(kPg, PROT_READ, MAP_PRIVATE | MAP_32BIT);
  EXPECT_GE(a, 0x40000000u);
  EXPECT_LT(a, 0x80000000u);
}

TEST_F(MMTest, MapPopulateMapsImmediately) {
  uintptr_t a = MapAnon(3 * kPg, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_POPULATE);
  EXPECT_TRUE(as_->Mapped(a));
  EXPECT_TRUE(as_->Mapped(a + 2 * kPg));
  EXPECT_EQ(mf_->AllocatedBytes(), 3 * kPg);
}

// --- munmap ---------------------------------------------------------------

TEST_F(MMTest, PartialMunmapSplitsAndFrees) {
  uintptr_t a = MapAnon(5 * kPg);
  Fill(a, 5 * kPg, 3);
  ASSERT_EQ(mm_->Munmap(a + kPg, 2 * kPg), 0);
  EXPECT_EQ(as_->last_unmap(), std::make_pair(a + kPg, size_t{2 * kPg}));
  EXPECT_EQ(mm_->NumVmas(), 2u);
  EXPECT_EQ(mf_->AllocatedBytes(), 3 * kPg);
  uint8_t b;
  EXPECT_EQ(mm_->CopyIn(a + kPg, &b, 1), -EFAULT);
  EXPECT_EQ(ByteAt(a), 3);
  EXPECT_EQ(ByteAt(a + 3 * kPg), 3);
  // Unmapping the head and the tail (length not page-rounded).
  ASSERT_EQ(mm_->Munmap(a, 1), 0);
  ASSERT_EQ(mm_->Munmap(a + 4 * kPg, 10), 0);
  EXPECT_EQ(mm_->NumVmas(), 1u);
  EXPECT_EQ(mf_->AllocatedBytes(), kPg);
  EXPECT_EQ(ByteAt(a + 3 * kPg), 3);
}

TEST_F(MMTest, MunmapErrorsAndNoops) {
  EXPECT_EQ(mm_->Munmap(0x200000001, kPg), -EINVAL);
  EXPECT_EQ(mm_->Munmap(0x200000000, 0), -EINVAL);
  EXPECT_EQ(mm_->Munmap(kMax - kPg, 2 * kPg), -EINVAL);
  EXPECT_EQ(mm_->Munmap(0x200000000, kPg), 0);  // nothing there: fine
  // Unmapping a range spanning several VMAs and holes.
  uintptr_t a = MapAnon(kPg, PROT_READ);
  uintptr_t b = MapAnon(kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE, a - 3 * kPg);
  ASSERT_EQ(b, a - 3 * kPg);
  EXPECT_EQ(mm_->Munmap(b, 4 * kPg), 0);
  EXPECT_EQ(mm_->NumVmas(), 0u);
}

// --- mprotect -------------------------------------------------------------

TEST_F(MMTest, MprotectSplitsAndMerges) {
  uintptr_t a = MapAnon(3 * kPg);
  Fill(a, 3 * kPg, 9);
  ASSERT_EQ(mm_->Mprotect(a + kPg, kPg, PROT_READ), 0);
  EXPECT_EQ(mm_->NumVmas(), 3u);
  // Writes into the read-only middle fail; a write spanning into it stops
  // at its start and reports the partial count.
  uint8_t buf[2 * kPg] = {};
  EXPECT_EQ(mm_->CopyOut(a + kPg, buf, 1), -EFAULT);
  EXPECT_EQ(mm_->CopyOut(a + kPg / 2, buf, kPg), static_cast<int64_t>(kPg / 2));
  EXPECT_EQ(ByteAt(a + kPg), 9);  // reads still work, data kept
  ASSERT_EQ(mm_->Mprotect(a + kPg, kPg, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(mm_->NumVmas(), 1u);
  EXPECT_EQ(mm_->CopyOut(a + kPg, buf, 1), 1);
}

TEST_F(MMTest, MprotectRemapsOnlyWhenReducing) {
  uintptr_t a = MapAnon(2 * kPg);
  int code;
  ASSERT_TRUE(mm_->HandleFault(a, true, false, &code));
  ASSERT_TRUE(as_->Mapped(a));
  // Removing write maps the backed pages again read-only, in one request
  // (a read right after, as ld.so's RELRO, does not fault), and unmaps
  // nothing.
  int unmaps = as_->unmap_calls();
  const int batches = as_->batches();
  ASSERT_EQ(mm_->Mprotect(a, 2 * kPg, PROT_READ), 0);
  EXPECT_EQ(as_->unmap_calls(), unmaps);
  EXPECT_EQ(as_->batches(), batches + 1);
  FakeAddressSpace::Page p;
  ASSERT_TRUE(as_->Mapped(a, &p));
  EXPECT_EQ(p.prot, (platform::Prot{true, false, false}));
  ASSERT_TRUE(as_->Mapped(a + kPg, &p));
  EXPECT_EQ(p.prot, (platform::Prot{true, false, false}));
  // PROT_NONE unmaps.
  ASSERT_EQ(mm_->Mprotect(a, kPg, PROT_NONE), 0);
  EXPECT_EQ(as_->unmap_calls(), unmaps + 1);
  EXPECT_FALSE(as_->Mapped(a));
  ASSERT_EQ(mm_->Mprotect(a, kPg, PROT_READ), 0);
  ASSERT_TRUE(mm_->HandleFault(a, false, false, &code));
  unmaps = as_->unmap_calls();
  ASSERT_EQ(mm_->Mprotect(a, 2 * kPg, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(as_->unmap_calls(), unmaps);
  // The next write fault remaps with the new protection.
  ASSERT_TRUE(mm_->HandleFault(a, true, false, &code));
  ASSERT_TRUE(as_->Mapped(a, &p));
  EXPECT_TRUE(p.prot.write);
}

TEST_F(MMTest, MprotectErrors) {
  uintptr_t a = MapAnon(3 * kPg);
  ASSERT_EQ(mm_->Munmap(a + kPg, kPg), 0);
  EXPECT_EQ(mm_->Mprotect(a + 1, kPg, PROT_READ), -EINVAL);
  EXPECT_EQ(mm_->Mprotect(a, kPg, PROT_READ | 0x100), -EINVAL);
  EXPECT_EQ(mm_->Mprotect(a, 0, PROT_READ), 0);
  // A hole: the part before it is changed, then ENOMEM (as Linux).
  EXPECT_EQ(mm_->Mprotect(a, 3 * kPg, PROT_READ), -ENOMEM);
  uint8_t b = 1;
  EXPECT_EQ(mm_->CopyOut(a, &b, 1), -EFAULT);
  EXPECT_EQ(mm_->CopyOut(a + 2 * kPg, &b, 1), 1);
  EXPECT_EQ(mm_->Mprotect(a + kPg, kPg, PROT_READ), -ENOMEM);
  // PROT_GROWSDOWN only applies to growsdown VMAs.
  EXPECT_EQ(mm_->Mprotect(a, kPg, PROT_READ | PROT_GROWSDOWN), -EINVAL);
}

TEST_F(MMTest, ProtNone) {
  uintptr_t a = MapAnon(kPg, PROT_NONE);
  int code;
  EXPECT_FALSE(mm_->HandleFault(a, false, false, &code));
  EXPECT_EQ(code, SEGV_ACCERR);
  uint8_t b;
  EXPECT_EQ(mm_->CopyIn(a, &b, 1), -EFAULT);
  EXPECT_EQ(mm_->CopyOut(a, &b, 1), -EFAULT);
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

// --- faults ---------------------------------------------------------------

TEST_F(MMTest, FaultChecksAccess) {
  int code = 0;
  EXPECT_FALSE(mm_->HandleFault(0x200000000, false, false, &code));
  EXPECT_EQ(code, SEGV_MAPERR);
  EXPECT_FALSE(mm_->HandleFault(0, false, false, &code));
  EXPECT_EQ(code, SEGV_MAPERR);

  uintptr_t ro = MapAnon(kPg, PROT_READ);
  EXPECT_FALSE(mm_->HandleFault(ro, true, false, &code));
  EXPECT_EQ(code, SEGV_ACCERR);
  EXPECT_FALSE(mm_->HandleFault(ro, false, true, &code));
  EXPECT_EQ(code, SEGV_ACCERR);
  EXPECT_TRUE(mm_->HandleFault(ro + 5, false, false, &code));

  // On x86 a write-only or exec-only page is readable.
  uintptr_t wo = MapAnon(kPg, PROT_WRITE);
  EXPECT_TRUE(mm_->HandleFault(wo, false, false, &code));
  uintptr_t x = MapAnon(kPg, PROT_READ | PROT_EXEC);
  EXPECT_TRUE(mm_->HandleFault(x, false, true, &code));
  FakeAddressSpace::Page p;
  ASSERT_TRUE(as_->Mapped(x, &p));
  EXPECT_EQ(p.prot, (platform::Prot{true, false, true}));
}

TEST_F(MMTest, FaultMapsBackingPagesAroundTheFault) {
  // 40 pages, aligned to the fault-around block.
  constexpr uint64_t kBlock = MM::kFaultAroundPages * kPg;
  uintptr_t a = MapAnon(40 * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                        0x300000000);
  ASSERT_EQ(a % kBlock, 0u);
  const uint32_t magic = 0xfeedf00d;
  ASSERT_EQ(mm_->CopyOut(a + 20 * kPg + 8, &magic, 4), 4);
  int code;
  ASSERT_TRUE(mm_->HandleFault(a + 20 * kPg + 8, true, false, &code));
  // The block [16, 32) is mapped, nothing outside it.
  EXPECT_TRUE(as_->Mapped(a + 16 * kPg));
  EXPECT_TRUE(as_->Mapped(a + 31 * kPg));
  EXPECT_FALSE(as_->Mapped(a + 15 * kPg));
  EXPECT_FALSE(as_->Mapped(a + 32 * kPg));
  EXPECT_EQ(as_->NumMapped(), MM::kFaultAroundPages);
  // The mapped page is the one CopyOut wrote.
  FakeAddressSpace::Page p;
  ASSERT_TRUE(as_->Mapped(a + 20 * kPg, &p));
  uint32_t seen;
  std::memcpy(&seen, mf_->Internal(p.file_offset) + 8, 4);
  EXPECT_EQ(seen, magic);
  EXPECT_EQ(p.prot, (platform::Prot{true, true, false}));
  // Fault-around stays inside the VMA.
  ASSERT_TRUE(mm_->HandleFault(a + 39 * kPg, false, false, &code));
  EXPECT_TRUE(as_->Mapped(a + 39 * kPg));
  EXPECT_FALSE(as_->Mapped(a + 40 * kPg));
  EXPECT_EQ(as_->NumMapped(), MM::kFaultAroundPages + 8);
}

TEST_F(MMTest, GrowsdownVmaGrowsOnFault) {
  uintptr_t top = 0x400000000;
  uintptr_t s = MapAnon(kPg, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_GROWSDOWN | MAP_FIXED, top);
  ASSERT_EQ(s, top);
  int code;
  ASSERT_TRUE(mm_->HandleFault(top - 3 * kPg + 4, true, false, &code));
  EXPECT_EQ(mm_->NumVmas(), 1u);
  EXPECT_EQ(mm_->CopyOut(top - 3 * kPg, "x", 1), 1);
  // The Sentry's own writes grow it too (a signal frame below the stack).
  EXPECT_EQ(mm_->CopyOut(top - 4 * kPg + 10, "y", 1), 1);
  EXPECT_EQ(ByteAt(top - 4 * kPg + 10), 'y');
  EXPECT_EQ(mm_->NumVmas(), 1u);
  // Not into the guard gap above another mapping.
  MapAnon(kPg, PROT_READ, MAP_PRIVATE | MAP_FIXED, top - 8 * kPg);
  EXPECT_FALSE(mm_->HandleFault(top - 5 * kPg, true, false, &code));
  EXPECT_EQ(code, SEGV_MAPERR);
}

// --- mremap ---------------------------------------------------------------

TEST_F(MMTest, MremapShrinkAndGrowInPlace) {
  uintptr_t a = MapAnon(4 * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                        0x500000000);
  Fill(a, 4 * kPg, 1);
  EXPECT_EQ(mm_->Mremap(a, 4 * kPg, 2 * kPg, 0, 0), static_cast<int64_t>(a));
  EXPECT_EQ(mf_->AllocatedBytes(), 2 * kPg);
  uint8_t b;
  EXPECT_EQ(mm_->CopyIn(a + 2 * kPg, &b, 1), -EFAULT);
  EXPECT_EQ(mm_->Mremap(a, 2 * kPg, 6 * kPg, 0, 0), static_cast<int64_t>(a));
  EXPECT_EQ(mm_->NumVmas(), 1u);
  EXPECT_EQ(ByteAt(a + kPg), 1);
  EXPECT_EQ(ByteAt(a + 5 * kPg), 0);  // the grown part is fresh zeros
  // Blocked by a neighbour: ENOMEM without MAYMOVE.
  MapAnon(kPg, PROT_READ, MAP_PRIVATE | MAP_FIXED, a + 6 * kPg);
  EXPECT_EQ(mm_->Mremap(a, 6 * kPg, 8 * kPg, 0, 0), -ENOMEM);
}

TEST_F(MMTest, MremapMovePreservesDataWithoutCopying) {
  uintptr_t a = MapAnon(4 * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                        0x500000000);
  MapAnon(kPg, PROT_READ, MAP_PRIVATE | MAP_FIXED, a + 4 * kPg);  // blocker
  std::vector<uint8_t> data(4 * kPg);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  ASSERT_EQ(mm_->CopyOut(a, data.data(), data.size()), 4 * 4096);
  const uint64_t allocated = mf_->AllocatedBytes();
  int code;
  ASSERT_TRUE(mm_->HandleFault(a, false, false, &code));

  int64_t r = mm_->Mremap(a, 4 * kPg, 8 * kPg, MREMAP_MAYMOVE, 0);
  ASSERT_GT(r, 0);
  uintptr_t b = static_cast<uintptr_t>(r);
  EXPECT_NE(b, a);
  EXPECT_EQ(mf_->AllocatedBytes(), allocated);  // PMAs moved, not copied
  EXPECT_FALSE(as_->Mapped(a));
  std::vector<uint8_t> back(4 * kPg);
  ASSERT_EQ(mm_->CopyIn(b, back.data(), back.size()), 4 * 4096);
  EXPECT_EQ(back, data);
  EXPECT_EQ(ByteAt(b + 7 * kPg), 0);
  uint8_t x;
  EXPECT_EQ(mm_->CopyIn(a, &x, 1), -EFAULT);
}

TEST_F(MMTest, MremapFixedAndPartial) {
  uintptr_t a = MapAnon(4 * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                        0x500000000);
  Fill(a, 4 * kPg, 5);
  uintptr_t dst = 0x600000000;
  MapAnon(kPg, PROT_READ, MAP_PRIVATE | MAP_FIXED, dst);  // gets replaced
  // Move the middle two pages.
  EXPECT_EQ(mm_->Mremap(a + kPg, 2 * kPg, 2 * kPg,
                        MREMAP_MAYMOVE | MREMAP_FIXED, dst),
            static_cast<int64_t>(dst));
  EXPECT_TRUE(AllAre(dst, 2 * kPg, 5));
  EXPECT_EQ(mm_->NumVmas(), 3u);
  EXPECT_EQ(mf_->AllocatedBytes(), 4 * kPg);
  // Errors.
  EXPECT_EQ(mm_->Mremap(a, kPg, kPg, MREMAP_FIXED, dst), -EINVAL);
  EXPECT_EQ(mm_->Mremap(a, kPg, 2 * kPg, MREMAP_MAYMOVE | MREMAP_FIXED, a),
            -EINVAL);  // overlap
  EXPECT_EQ(mm_->Mremap(a + 1, kPg, kPg, 0, 0), -EINVAL);
  EXPECT_EQ(mm_->Mremap(a, kPg, 0, 0, 0), -EINVAL);
  EXPECT_EQ(mm_->Mremap(a, kPg, kPg, 0x80, 0), -EINVAL);
  EXPECT_EQ(mm_->Mremap(a + kPg, kPg, 2 * kPg, MREMAP_MAYMOVE, 0), -EFAULT);
  EXPECT_EQ(mm_->Mremap(a, 2 * kPg, 3 * kPg, MREMAP_MAYMOVE, 0), -EFAULT);
  EXPECT_EQ(mm_->Mremap(a, 0, kPg, MREMAP_MAYMOVE, 0), -EINVAL);  // private
}

TEST_F(MMTest, MremapDontUnmap) {
  uintptr_t a = MapAnon(2 * kPg);
  Fill(a, 2 * kPg, 6);
  EXPECT_EQ(mm_->Mremap(a, 2 * kPg, kPg, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, 0),
            -EINVAL);
  int64_t r = mm_->Mremap(a, 2 * kPg, 2 * kPg,
                          MREMAP_MAYMOVE | MREMAP_DONTUNMAP, 0);
  ASSERT_GT(r, 0);
  EXPECT_TRUE(AllAre(static_cast<uintptr_t>(r), 2 * kPg, 6));
  EXPECT_TRUE(AllAre(a, 2 * kPg, 0));  // old range still mapped, now empty
}

TEST_F(MMTest, SharedAnonymousMemory) {
  uintptr_t a = MapAnon(4 * kPg, PROT_READ | PROT_WRITE, MAP_SHARED);
  EXPECT_EQ(mf_->AllocatedBytes(), 4 * kPg);  // one object, allocated upfront
  Fill(a, 4 * kPg, 4);
  // old_len 0 duplicates the mapping: both see the same bytes.
  int64_t r = mm_->Mremap(a, 0, 4 * kPg, MREMAP_MAYMOVE, 0);
  ASSERT_GT(r, 0);
  uintptr_t dup = static_cast<uintptr_t>(r);
  EXPECT_TRUE(AllAre(dup, 4 * kPg, 4));
  Fill(dup + kPg, 1, 8);
  EXPECT_EQ(ByteAt(a + kPg), 8);
  // DONTNEED keeps shared data.
  ASSERT_EQ(mm_->Madvise(a, 4 * kPg, MADV_DONTNEED), 0);
  EXPECT_EQ(ByteAt(a + kPg), 8);
  // The object lives while any VMA refers to it.
  ASSERT_EQ(mm_->Munmap(a, 4 * kPg), 0);
  EXPECT_EQ(mf_->AllocatedBytes(), 4 * kPg);
  ASSERT_EQ(mm_->Munmap(dup, kPg), 0);
  EXPECT_EQ(ByteAt(dup + kPg), 8);
  ASSERT_EQ(mm_->Munmap(dup + kPg, 3 * kPg), 0);
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

TEST_F(MMTest, SharedAnonGrownPastObjectIsSigbus) {
  uintptr_t a = MapAnon(kPg, PROT_READ | PROT_WRITE, MAP_SHARED);
  int64_t r = mm_->Mremap(a, kPg, 2 * kPg, MREMAP_MAYMOVE, 0);
  ASSERT_GT(r, 0);
  uintptr_t b = static_cast<uintptr_t>(r);
  int signo, code;
  EXPECT_TRUE(mm_->HandleFault(b, true, false, &signo, &code));
  EXPECT_FALSE(mm_->HandleFault(b + kPg, true, false, &signo, &code));
  EXPECT_EQ(signo, SIGBUS);
  EXPECT_EQ(code, BUS_ADRERR);
  uint8_t buf[2 * kPg];
  EXPECT_EQ(mm_->CopyIn(b, buf, sizeof(buf)), static_cast<int64_t>(kPg));
}

// --- madvise --------------------------------------------------------------

TEST_F(MMTest, MadviseDontneedZeroesPrivate) {
  uintptr_t a = MapAnon(4 * kPg);
  Fill(a, 4 * kPg, 2);
  int code;
  ASSERT_TRUE(mm_->HandleFault(a, true, false, &code));
  ASSERT_EQ(mm_->Madvise(a + kPg, 2 * kPg, MADV_DONTNEED), 0);
  EXPECT_FALSE(as_->Mapped(a + kPg));
  EXPECT_TRUE(as_->Mapped(a));
  EXPECT_EQ(mf_->AllocatedBytes(), 2 * kPg);
  EXPECT_EQ(ByteAt(a), 2);
  EXPECT_TRUE(AllAre(a + kPg, 2 * kPg, 0));
  EXPECT_EQ(ByteAt(a + 3 * kPg), 2);
  // MADV_FREE behaves the same for private memory.
  Fill(a, kPg, 3);
  ASSERT_EQ(mm_->Madvise(a, kPg, MADV_FREE), 0);
  EXPECT_EQ(ByteAt(a), 0);
}

TEST_F(MMTest, MadviseErrors) {
  uintptr_t a = MapAnon(3 * kPg);
  ASSERT_EQ(mm_->Munmap(a + kPg, kPg), 0);
  EXPECT_EQ(mm_->Madvise(a, kPg, 12345), -EINVAL);
  EXPECT_EQ(mm_->Madvise(a, 0, 12345), -EINVAL);
  EXPECT_EQ(mm_->Madvise(a + 1, kPg, MADV_NORMAL), -EINVAL);
  EXPECT_EQ(mm_->Madvise(a, 0, MADV_DONTNEED), 0);
  Fill(a, kPg, 1);
  EXPECT_EQ(mm_->Madvise(a, 3 * kPg, MADV_DONTNEED), -ENOMEM);
  EXPECT_EQ(ByteAt(a), 0);  // applied to the mapped part anyway
  EXPECT_EQ(mm_->Madvise(a + kPg, kPg, MADV_WILLNEED), -ENOMEM);
  for (int adv : {MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED,
                  MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_DONTFORK, MADV_DOFORK}) {
    EXPECT_EQ(mm_->Madvise(a, kPg, adv), 0) << adv;
  }
  uintptr_t s = MapAnon(kPg, PROT_READ | PROT_WRITE, MAP_SHARED);
  EXPECT_EQ(mm_->Madvise(s, kPg, MADV_FREE), -EINVAL);
  EXPECT_EQ(mm_->Madvise(s, kPg, MADV_WIPEONFORK), -EINVAL);
  EXPECT_EQ(mm_->Madvise(a, kPg, MADV_REMOVE), -EINVAL);
}

TEST_F(MMTest, MadviseRemoveZeroesSharedObject) {
  uintptr_t a = MapAnon(2 * kPg, PROT_READ | PROT_WRITE, MAP_SHARED);
  Fill(a, 2 * kPg, 9);
  ASSERT_EQ(mm_->Madvise(a, kPg, MADV_REMOVE), 0);
  EXPECT_EQ(ByteAt(a), 0);
  EXPECT_EQ(ByteAt(a + kPg), 9);
}

TEST_F(MMTest, MadviseDontforkSplitsVmas) {
  uintptr_t a = MapAnon(3 * kPg);
  ASSERT_EQ(mm_->Madvise(a + kPg, kPg, MADV_DONTFORK), 0);
  EXPECT_EQ(mm_->NumVmas(), 3u);
  ASSERT_EQ(mm_->Madvise(a + kPg, kPg, MADV_DOFORK), 0);
  EXPECT_EQ(mm_->NumVmas(), 1u);
}

// --- brk ------------------------------------------------------------------

TEST_F(MMTest, Brk) {
  EXPECT_EQ(mm_->Brk(0), 0);  // no heap before the loader sets it up
  const uintptr_t start = 0x555555558000;
  mm_->SetBrkStart(start - 100);  // rounded up
  EXPECT_EQ(mm_->Brk(0), static_cast<int64_t>(start));
  EXPECT_EQ(mm_->Brk(start + 10), static_cast<int64_t>(start + 10));
  Fill(start, 10, 0x11);
  uint8_t b;
  EXPECT_EQ(mm_->CopyIn(start + kPg, &b, 1), -EFAULT);
  EXPECT_EQ(mm_->Brk(start + 3 * kPg), static_cast<int64_t>(start + 3 * kPg));
  EXPECT_EQ(mm_->NumVmas(), 1u);
  EXPECT_THAT(mm_->DebugString(), HasSubstr("[heap]"));
  Fill(start, 3 * kPg, 0x22);
  // Below the start: unchanged.
  EXPECT_EQ(mm_->Brk(start - kPg), static_cast<int64_t>(start + 3 * kPg));
  // Shrink frees pages; growing again gives zeros.
  EXPECT_EQ(mm_->Brk(start + kPg), static_cast<int64_t>(start + kPg));
  EXPECT_EQ(mf_->AllocatedBytes(), kPg);
  EXPECT_EQ(mm_->CopyIn(start + kPg, &b, 1), -EFAULT);
  EXPECT_EQ(mm_->Brk(start + 2 * kPg), static_cast<int64_t>(start + 2 * kPg));
  EXPECT_EQ(ByteAt(start + kPg), 0);
  EXPECT_EQ(ByteAt(start), 0x22);
  // Growing into another mapping (or its guard page) fails silently.
  MapAnon(kPg, PROT_READ, MAP_PRIVATE | MAP_FIXED, start + 5 * kPg);
  EXPECT_EQ(mm_->Brk(start + 5 * kPg), static_cast<int64_t>(start + 2 * kPg));
  EXPECT_EQ(mm_->Brk(start + 4 * kPg), static_cast<int64_t>(start + 4 * kPg));
}

// --- copies ---------------------------------------------------------------

TEST_F(MMTest, CopyFaults) {
  uint8_t buf[16] = {};
  EXPECT_EQ(mm_->CopyIn(0, buf, 1), -EFAULT);
  EXPECT_EQ(mm_->CopyIn(0x200000000, buf, 1), -EFAULT);
  EXPECT_EQ(mm_->CopyOut(kMax - 8, buf, 16), -EFAULT);
  EXPECT_EQ(mm_->CopyIn(UINT64_MAX - 4, buf, 16), -EFAULT);
  EXPECT_EQ(mm_->CopyIn(0x200000000, buf, 0), 0);
  uintptr_t a = MapAnon(kPg);
  // Crossing the end of the mapping: partial.
  EXPECT_EQ(mm_->CopyOut(a + kPg - 4, buf, 16), 4);
  EXPECT_EQ(mm_->CopyIn(a + kPg - 4, buf, 16), 4);
  // Spanning two adjacent VMAs with different protections works for reads.
  ASSERT_EQ(MapAnon(kPg, PROT_READ, MAP_PRIVATE | MAP_FIXED, a + kPg), a + kPg);
  EXPECT_EQ(mm_->CopyIn(a + kPg - 4, buf, 16), 16);
  EXPECT_EQ(mm_->CopyOut(a + kPg - 4, buf, 16), 4);
}

TEST_F(MMTest, CopyInString) {
  uintptr_t a = MapAnon(2 * kPg);
  ASSERT_EQ(mm_->Munmap(a + kPg, kPg), 0);
  std::string s;
  ASSERT_EQ(mm_->CopyOut(a, "hello", 6), 6);
  EXPECT_EQ(mm_->CopyInString(a, 100, &s), 0);
  EXPECT_EQ(s, "hello");
  EXPECT_EQ(mm_->CopyInString(a, 5, &s), 0);  // exactly max_len
  EXPECT_EQ(mm_->CopyInString(a, 4, &s), -ENAMETOOLONG);
  EXPECT_EQ(mm_->CopyInString(0x200000000, 4, &s), -EFAULT);
  // A string ending on the last byte of the mapping.
  ASSERT_EQ(mm_->CopyOut(a + kPg - 3, "ab", 3), 3);
  EXPECT_EQ(mm_->CopyInString(a + kPg - 3, 4096, &s), 0);
  EXPECT_EQ(s, "ab");
  // Running into the unmapped page before a NUL.
  ASSERT_EQ(mm_->CopyOut(a + kPg - 3, "abc", 3), 3);
  EXPECT_EQ(mm_->CopyInString(a + kPg - 3, 4096, &s), -EFAULT);
  // A long string across pages.
  uintptr_t b = MapAnon(3 * kPg);
  std::string big(5000, 'z');
  ASSERT_EQ(mm_->CopyOut(b + 100, big.c_str(), big.size() + 1), 5001);
  EXPECT_EQ(mm_->CopyInString(b + 100, 8192, &s), 0);
  EXPECT_EQ(s, big);
}

TEST_F(MMTest, AtomicWord) {
  uintptr_t a = MapAnon(kPg);
  uintptr_t ro = MapAnon(kPg, PROT_READ);
  std::atomic<uint32_t>* w = nullptr;
  EXPECT_EQ(mm_->AtomicWord(a + 2, false, &w), -EINVAL);
  EXPECT_EQ(mm_->AtomicWord(0x200000000, false, &w), -EFAULT);
  EXPECT_EQ(mm_->AtomicWord(ro, true, &w), -EFAULT);
  EXPECT_EQ(mm_->AtomicWord(ro, false, &w), 0);
  ASSERT_EQ(mm_->AtomicWord(a + 8, true, &w), 0);
  w->store(0x12345678);
  uint32_t v = 0;
  ASSERT_EQ(mm_->CopyIn(a + 8, &v, 4), 4);
  EXPECT_EQ(v, 0x12345678u);
  v = 99;
  ASSERT_EQ(mm_->CopyOut(a + 8, &v, 4), 4);
  EXPECT_EQ(w->load(), 99u);
}

TEST_F(MMTest, ConcurrentCopiesAndMappingChanges) {
  constexpr int kThreads = 8;
  constexpr uint64_t kRegion = 64 * kPg;
  uintptr_t base = MapAnon(kThreads * kRegion);
  std::atomic<bool> stop{false};
  // Another thread keeps changing unrelated mappings and faulting.
  std::thread churn([&] {
    while (!stop.load()) {
      int64_t r = mm_->Mmap(0, 8 * kPg, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS);
      ASSERT_GT(r, 0);
      int code;
      ASSERT_TRUE(mm_->HandleFault(r, true, false, &code));
      ASSERT_EQ(mm_->Mprotect(r, kPg, PROT_READ), 0);
      ASSERT_EQ(mm_->Munmap(r, 8 * kPg), 0);
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uintptr_t region = base + t * kRegion;
      std::vector<uint8_t> out(3 * kPg + 17), in(out.size());
      for (int i = 0; i < 300; ++i) {
        for (size_t j = 0; j < out.size(); ++j) {
          out[j] = static_cast<uint8_t>(t * 31 + i + j);
        }
        uintptr_t at = region + (i * 4099) % (kRegion - out.size());
        ASSERT_EQ(mm_->CopyOut(at, out.data(), out.size()),
                  static_cast<int64_t>(out.size()));
        ASSERT_EQ(mm_->CopyIn(at, in.data(), in.size()),
                  static_cast<int64_t>(in.size()));
        ASSERT_EQ(in, out);
      }
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  churn.join();
  EXPECT_EQ(mm_->BackedBytes(), kThreads * kRegion);
}

TEST_F(MMTest, DebugStringLooksLikeProcMaps) {
  uintptr_t a = MapAnon(kPg, PROT_READ | PROT_EXEC, MAP_PRIVATE, 0x700000000);
  MapAnon(2 * kPg, PROT_READ | PROT_WRITE, MAP_SHARED, 0x700010000);
  ASSERT_EQ(mm_->SetName(a, kPg, "[stack]"), 0);
  std::string s = mm_->DebugString();
  EXPECT_THAT(s, HasSubstr("700000000-700001000 r-xp 00000000 00:00 0"));
  EXPECT_THAT(s, HasSubstr("[stack]"));
  EXPECT_THAT(s, HasSubstr("700010000-700012000 rw-s 00000000 00:00 0"));
  EXPECT_THAT(s, HasSubstr("/dev/zero (deleted)"));
}

TEST_F(MMTest, DestructionFreesEverything) {
  uintptr_t p = MapAnon(4 * kPg);
  uintptr_t s = MapAnon(4 * kPg, PROT_READ | PROT_WRITE, MAP_SHARED);
  ASSERT_EQ(s, p - 4 * kPg);
  Fill(s, 8 * kPg, 1);
  EXPECT_EQ(mf_->AllocatedBytes(), 8 * kPg);
  mm_.reset();
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

// --- fork: copy-on-write ---------------------------------------------------

// A read-only file of `size` bytes whose byte i is (i % 251).
class PatternFile : public Mappable {
 public:
  explicit PatternFile(uint64_t size) : size_(size) {}
  uint64_t Size() override { return size_; }
  int64_t ReadAt(void* dst, uint64_t n, uint64_t off) override {
    if (off >= size_) return 0;
    n = std::min(n, size_ - off);
    auto* d = static_cast<uint8_t*>(dst);
    for (uint64_t i = 0; i < n; i++) d[i] = static_cast<uint8_t>((off + i) % 251);
    return static_cast<int64_t>(n);
  }
  std::string Name() override { return "/pattern"; }

 private:
  const uint64_t size_;
};

class ForkTest : public MMTest {
 protected:
  // A child of `parent` with its own fake address space (*as).
  std::unique_ptr<MM> ForkOf(MM& parent, FakeAddressSpace** as = nullptr) {
    auto fas = std::make_unique<FakeAddressSpace>();
    if (as != nullptr) *as = fas.get();
    auto child = parent.Fork(std::move(fas));
    EXPECT_TRUE(child.ok()) << child.status();
    return child.ok() ? std::move(child).value() : nullptr;
  }
  static uint8_t Get(MM& mm, uintptr_t addr) {
    uint8_t b = 0xee;
    EXPECT_EQ(mm.CopyIn(addr, &b, 1), 1);
    return b;
  }
  static void Put(MM& mm, uintptr_t addr, uint8_t v) {
    EXPECT_EQ(mm.CopyOut(addr, &v, 1), 1);
  }
  // The memory-file offset `as` maps at page `addr`, or -1.
  static off_t MappedAt(FakeAddressSpace& as, uintptr_t addr,
                        bool* writable = nullptr) {
    FakeAddressSpace::Page p;
    if (!as.Mapped(addr, &p)) return -1;
    if (writable != nullptr) *writable = p.prot.write;
    return p.file_offset;
  }
};

TEST_F(ForkTest, ForkSharesPagesAndWriteProtectsTheParent) {
  uintptr_t a = MapAnon(8 * kPg);
  Fill(a, 8 * kPg, 0x11);
  int code;
  ASSERT_TRUE(mm_->HandleFault(a, /*write=*/true, false, &code));
  bool w = false;
  const off_t before = MappedAt(*as_, a, &w);
  ASSERT_GE(before, 0);
  EXPECT_TRUE(w);
  const uint64_t allocated = mf_->AllocatedBytes();

  FakeAddressSpace* cas;
  auto child = ForkOf(*mm_, &cas);
  ASSERT_NE(child, nullptr);
  // Nothing was copied; the parent lost its writable mapping.
  EXPECT_EQ(mf_->AllocatedBytes(), allocated);
  EXPECT_EQ(mf_->SharedBytes(), 8 * kPg);
  EXPECT_EQ(MappedAt(*as_, a), -1);
  EXPECT_EQ(child->BackedBytes(), 8 * kPg);
  // Read faults map the very same pages, read-only, on both sides.
  ASSERT_TRUE(child->HandleFault(a + 5, false, false, &code));
  EXPECT_EQ(MappedAt(*cas, a, &w), before);
  EXPECT_FALSE(w);
  ASSERT_TRUE(mm_->HandleFault(a + 5, false, false, &code));
  EXPECT_EQ(MappedAt(*as_, a, &w), before);
  EXPECT_FALSE(w);
  EXPECT_EQ(Get(*child, a + 7 * kPg), 0x11);
}

TEST_F(ForkTest, WritesOnEitherSideStayOnThatSide) {
  uintptr_t a = MapAnon(4 * kPg);
  Fill(a, 4 * kPg, 0x11);
  FakeAddressSpace* cas;
  auto child = ForkOf(*mm_, &cas);
  ASSERT_NE(child, nullptr);

  // A write fault in the child copies: the child maps new pages writable.
  int code;
  ASSERT_TRUE(child->HandleFault(a, /*write=*/true, false, &code));
  bool w = false;
  off_t off = MappedAt(*cas, a, &w);
  ASSERT_GE(off, 0);
  EXPECT_TRUE(w);
  mf_->Internal(off)[0] = 0x22;  // the program's store
  EXPECT_EQ(Get(*child, a), 0x22);
  EXPECT_EQ(Get(*mm_, a), 0x11);

  // The Sentry's writes (CopyOut) break sharing too, parent side this time.
  Put(*mm_, a + 3 * kPg, 0x33);
  EXPECT_EQ(Get(*mm_, a + 3 * kPg), 0x33);
  EXPECT_EQ(Get(*child, a + 3 * kPg), 0x11);
  EXPECT_EQ(Get(*child, a + 2 * kPg), 0x11);
  EXPECT_EQ(Get(*mm_, a + 2 * kPg), 0x11);

  // Once both sides have written everything, nothing is shared.
  Fill(a, 4 * kPg, 0x44);
  std::vector<uint8_t> buf(4 * kPg, 0x55);
  ASSERT_EQ(child->CopyOut(a, buf.data(), buf.size()), 4 * kPg);
  EXPECT_EQ(mf_->SharedBytes(), 0u);
  EXPECT_TRUE(AllAre(a, 4 * kPg, 0x44));
  child.reset();
  mm_.reset();
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

TEST_F(ForkTest, SoleOwnerTakesPagesBackWithoutCopying) {
  uintptr_t a = MapAnon(2 * kPg);
  Fill(a, 2 * kPg, 0x11);
  int code;
  ASSERT_TRUE(mm_->HandleFault(a, false, false, &code));
  const off_t before = MappedAt(*as_, a);
  FakeAddressSpace* chas;
  auto child = ForkOf(*mm_, &chas);
  ASSERT_NE(child, nullptr);
  // The parent exits before the child: the child now owns the pages alone.
  mm_.reset();
  const uint64_t allocated = mf_->AllocatedBytes();
  EXPECT_EQ(allocated, 2 * kPg);
  Put(*child, a, 0x22);
  EXPECT_EQ(mf_->AllocatedBytes(), allocated);
  EXPECT_EQ(Get(*child, a), 0x22);
  EXPECT_EQ(Get(*child, a + kPg), 0x11);
  // After a fork whose child went away, even a read fault takes the
  // pages back: they are mapped writable, where they were.
  FakeAddressSpace* cas;
  auto grandchild = ForkOf(*child, &cas);
  ASSERT_NE(grandchild, nullptr);
  ASSERT_TRUE(grandchild->HandleFault(a + kPg, false, false, &code));
  bool w = true;
  EXPECT_EQ(MappedAt(*cas, a + kPg, &w), before + static_cast<off_t>(kPg));
  EXPECT_FALSE(w);  // still shared: read-only
  grandchild.reset();
  ASSERT_TRUE(child->HandleFault(a + kPg, false, false, &code));
  EXPECT_EQ(MappedAt(*chas, a + kPg, &w), before + static_cast<off_t>(kPg));
  EXPECT_TRUE(w);
  EXPECT_EQ(mf_->AllocatedBytes(), allocated);
  EXPECT_EQ(mf_->SharedBytes(), 0u);
  child.reset();
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

TEST_F(ForkTest, CopyOutReplacesAStaleReadOnlyMapping) {
  uintptr_t a = MapAnon(kPg);
  Fill(a, kPg, 0x11);
  FakeAddressSpace* cas;
  auto child = ForkOf(*mm_, &cas);
  ASSERT_NE(child, nullptr);
  int code;
  ASSERT_TRUE(child->HandleFault(a, false, false, &code));
  const off_t shared = MappedAt(*cas, a);
  ASSERT_GE(shared, 0);
  // read(2) into the page: the Sentry copies it for the child; the child's
  // address space must not keep showing the parent's page.
  Put(*child, a + 9, 0x22);
  const off_t now = MappedAt(*cas, a);
  EXPECT_NE(now, shared);
  if (now >= 0) {
    EXPECT_EQ(mf_->Internal(now)[9], 0x22);
  }
  EXPECT_EQ(mf_->Internal(shared)[9], 0x11);
  EXPECT_EQ(Get(*mm_, a + 9), 0x11);
}

TEST_F(ForkTest, AtomicWordForWritingBreaksSharing) {
  uintptr_t a = MapAnon(kPg);
  Fill(a, kPg, 0);
  auto child = ForkOf(*mm_);
  ASSERT_NE(child, nullptr);
  std::atomic<uint32_t>* pw;
  std::atomic<uint32_t>* cr;
  std::atomic<uint32_t>* cw;
  ASSERT_EQ(child->AtomicWord(a, /*write=*/true, &cw), 0);
  ASSERT_EQ(mm_->AtomicWord(a, /*write=*/false, &pw), 0);
  EXPECT_NE(cw, pw);
  cw->store(7);
  EXPECT_EQ(Get(*mm_, a), 0);
  EXPECT_EQ(Get(*child, a), 7);
  // A futex waiter's word (a read) in writable private memory is this
  // MM's own page too: a later write by another thread must not move it.
  ASSERT_EQ(child->Mprotect(a, kPg, PROT_READ), 0);
  auto grandchild = ForkOf(*child);
  ASSERT_NE(grandchild, nullptr);
  ASSERT_EQ(child->AtomicWord(a, /*write=*/false, &cr), 0);
  std::atomic<uint32_t>* gr;
  ASSERT_EQ(grandchild->AtomicWord(a, /*write=*/false, &gr), 0);
  EXPECT_EQ(cr, gr);  // read-only memory stays shared
  ASSERT_EQ(child->Mprotect(a, kPg, PROT_READ | PROT_WRITE), 0);
  ASSERT_EQ(child->AtomicWord(a, /*write=*/false, &cr), 0);
  EXPECT_NE(cr, gr);
  EXPECT_EQ(cr->load(), 7u);
  Put(*child, a, 8);
  EXPECT_EQ(cr->load(), 8u);
  // FUTEX_WAKE_OP's read-modify-write, on a page shared again by a fork.
  auto third = ForkOf(*child);
  ASSERT_NE(third, nullptr);
  ASSERT_EQ(child->UpdateWord(a, [](std::atomic<uint32_t>* w) {
    w->fetch_add(1);
  }), 0);
  EXPECT_EQ(Get(*child, a), 9);
  EXPECT_EQ(Get(*third, a), 8);
  EXPECT_EQ(child->UpdateWord(a + 2, [](std::atomic<uint32_t>*) {}), -EINVAL);
  EXPECT_EQ(child->UpdateWord(kMin, [](std::atomic<uint32_t>*) {}), -EFAULT);
}

TEST_F(ForkTest, PartialMunmapAndMprotectAfterFork) {
  uintptr_t a = MapAnon(8 * kPg);
  Fill(a, 8 * kPg, 0x11);
  auto child = ForkOf(*mm_);
  ASSERT_NE(child, nullptr);
  // The child drops a middle part; the parent keeps all of it.
  ASSERT_EQ(child->Munmap(a + 2 * kPg, 2 * kPg), 0);
  EXPECT_TRUE(AllAre(a, 8 * kPg, 0x11));
  EXPECT_EQ(mf_->SharedBytes(), 6 * kPg);
  // The parent drops another part; the child keeps its pages.
  ASSERT_EQ(mm_->Munmap(a + 5 * kPg, kPg), 0);
  EXPECT_EQ(Get(*child, a + 5 * kPg), 0x11);
  EXPECT_EQ(mf_->SharedBytes(), 5 * kPg);
  // mprotect splits VMAs and PMAs; sharing survives and breaks per side.
  ASSERT_EQ(child->Mprotect(a + 6 * kPg, kPg, PROT_READ), 0);
  int code;
  EXPECT_FALSE(child->HandleFault(a + 6 * kPg, true, false, &code));
  EXPECT_EQ(code, SEGV_ACCERR);
  ASSERT_EQ(child->Mprotect(a + 6 * kPg, kPg, PROT_READ | PROT_WRITE), 0);
  ASSERT_TRUE(child->HandleFault(a + 6 * kPg, true, false, &code));
  Put(*child, a + 6 * kPg, 0x22);
  EXPECT_EQ(Get(*mm_, a + 6 * kPg), 0x11);
  ASSERT_EQ(mm_->Mprotect(a, 2 * kPg, PROT_READ), 0);
  EXPECT_EQ(mm_->CopyOut(a, "x", 1), -EFAULT);
  ASSERT_EQ(mm_->Mprotect(a, 2 * kPg, PROT_READ | PROT_WRITE), 0);
  Put(*mm_, a + kPg, 0x33);
  EXPECT_EQ(Get(*child, a + kPg), 0x11);
  child.reset();
  mm_.reset();
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

TEST_F(ForkTest, MremapAfterForkMovesSharedPages) {
  uintptr_t a = MapAnon(4 * kPg);
  Fill(a, 4 * kPg, 0x11);
  auto child = ForkOf(*mm_);
  ASSERT_NE(child, nullptr);
  const uint64_t allocated = mf_->AllocatedBytes();
  // Moving (and growing) keeps the pages shared: nothing is copied.
  int64_t b = child->Mremap(a + kPg, 2 * kPg, 6 * kPg, MREMAP_MAYMOVE, 0);
  ASSERT_GT(b, 0);
  const uintptr_t nb = static_cast<uintptr_t>(b);
  ASSERT_NE(nb, a + kPg);
  EXPECT_EQ(mf_->AllocatedBytes(), allocated);
  EXPECT_EQ(Get(*child, nb + kPg), 0x11);
  Put(*child, nb, 0x22);
  EXPECT_EQ(Get(*mm_, a + kPg), 0x11);
  EXPECT_EQ(Get(*child, nb + 5 * kPg), 0);  // the grown part is fresh
  // Shrinking in the parent drops its references to the tail.
  ASSERT_EQ(mm_->Mremap(a, 4 * kPg, kPg, 0, 0), static_cast<int64_t>(a));
  EXPECT_EQ(Get(*child, nb + kPg), 0x11);
  EXPECT_EQ(Get(*child, a), 0x11);
  child.reset();
  mm_.reset();
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

TEST_F(ForkTest, DontneedAfterForkDropsOnlyThisSide) {
  uintptr_t a = MapAnon(4 * kPg);
  Fill(a, 4 * kPg, 0x11);
  auto child = ForkOf(*mm_);
  ASSERT_NE(child, nullptr);
  ASSERT_EQ(child->Madvise(a, 2 * kPg, MADV_DONTNEED), 0);
  EXPECT_EQ(Get(*child, a), 0);
  EXPECT_EQ(Get(*child, a + 2 * kPg), 0x11);
  EXPECT_TRUE(AllAre(a, 4 * kPg, 0x11));
  // The parent is the only owner of [a, a+2 pages) now: no copy to write.
  const uint64_t allocated = mf_->AllocatedBytes();
  Put(*mm_, a, 0x33);
  EXPECT_EQ(mf_->AllocatedBytes(), allocated);
  ASSERT_EQ(mm_->Madvise(a + 2 * kPg, 2 * kPg, MADV_DONTNEED), 0);
  EXPECT_EQ(Get(*mm_, a + 3 * kPg), 0);
  EXPECT_EQ(Get(*child, a + 3 * kPg), 0x11);
  EXPECT_EQ(mf_->SharedBytes(), 0u);
}

TEST_F(ForkTest, ThreeGenerations) {
  uintptr_t a = MapAnon(4 * kPg);
  Fill(a, 4 * kPg, 1);
  auto b = ForkOf(*mm_);
  ASSERT_NE(b, nullptr);
  Put(*b, a, 2);
  auto c = ForkOf(*b);
  ASSERT_NE(c, nullptr);
  Put(*c, a + kPg, 3);
  // b's copy of page 0 (with c), page 1 (a, b), pages 2-3 (all three).
  EXPECT_EQ(mf_->SharedBytes(), 4 * kPg);
  // Each generation sees its own writes and its ancestors' from before its
  // birth, nothing later.
  Put(*mm_, a + 2 * kPg, 4);
  EXPECT_EQ(Get(*mm_, a), 1);
  EXPECT_EQ(Get(*mm_, a + kPg), 1);
  EXPECT_EQ(Get(*b, a), 2);
  EXPECT_EQ(Get(*b, a + kPg), 1);
  EXPECT_EQ(Get(*b, a + 2 * kPg), 1);
  EXPECT_EQ(Get(*c, a), 2);
  EXPECT_EQ(Get(*c, a + kPg), 3);
  EXPECT_EQ(Get(*c, a + 2 * kPg), 1);
  EXPECT_EQ(Get(*c, a + 3 * kPg), 1);
  // The middle generation goes first; the others keep their pages.
  b.reset();
  EXPECT_EQ(Get(*c, a), 2);
  EXPECT_EQ(Get(*c, a + 3 * kPg), 1);
  mm_.reset();
  EXPECT_EQ(Get(*c, a + 2 * kPg), 1);
  EXPECT_EQ(mf_->SharedBytes(), 0u);
  c.reset();
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

TEST_F(ForkTest, DontforkAndWipeonfork) {
  uintptr_t a = MapAnon(3 * kPg);
  Fill(a, 3 * kPg, 0x11);
  ASSERT_EQ(mm_->Madvise(a, kPg, MADV_DONTFORK), 0);
  ASSERT_EQ(mm_->Madvise(a + kPg, kPg, MADV_WIPEONFORK), 0);
  auto child = ForkOf(*mm_);
  ASSERT_NE(child, nullptr);
  int code;
  EXPECT_FALSE(child->HandleFault(a, false, false, &code));
  EXPECT_EQ(Get(*child, a + kPg), 0);
  EXPECT_EQ(Get(*child, a + 2 * kPg), 0x11);
  EXPECT_EQ(mf_->SharedBytes(), kPg);
  // The parent's own pages in the areas the child did not get are still
  // exclusively its: writing them copies nothing.
  const uint64_t allocated = mf_->AllocatedBytes();
  Fill(a, 2 * kPg, 0x22);
  EXPECT_EQ(mf_->AllocatedBytes(), allocated);
}

TEST_F(ForkTest, SharedMemoryStaysShared) {
  uintptr_t s = MapAnon(kPg, PROT_READ | PROT_WRITE, MAP_SHARED);
  Put(*mm_, s, 1);
  auto child = ForkOf(*mm_);
  ASSERT_NE(child, nullptr);
  Put(*child, s, 2);
  EXPECT_EQ(Get(*mm_, s), 2);
  EXPECT_EQ(mf_->SharedBytes(), 0u);
}

TEST_F(ForkTest, PrivateFileMappingIsCopyOnWrite) {
  auto file = std::make_shared<PatternFile>(3 * kPg);
  int64_t r = mm_->MmapFile(0, 3 * kPg, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                            file, 0, platform::Prot{true, true, true});
  ASSERT_GT(r, 0);
  const uintptr_t a = static_cast<uintptr_t>(r);
  EXPECT_EQ(Get(*mm_, a + 300), 300 % 251);
  Put(*mm_, a + 1, 0xaa);
  auto child = ForkOf(*mm_);
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(Get(*child, a + 1), 0xaa);
  Put(*child, a + 2, 0xbb);
  Put(*mm_, a + 2 * kPg, 0xcc);
  EXPECT_EQ(Get(*mm_, a + 2), 2);
  EXPECT_EQ(Get(*child, a + 2 * kPg), (2 * kPg) % 251);
  EXPECT_EQ(Get(*child, a + 2), 0xbb);
}

// Other threads of the parent keep writing while it forks: each child must
// see one fixed value, the one from before its fork, however long it looks.
TEST_F(ForkTest, ForkWhileAnotherThreadWrites) {
  uintptr_t a = MapAnon(4 * kPg);
  Fill(a, 4 * kPg, 0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{0};
  std::thread writer([&] {
    for (uint64_t v = 1; !stop.load(); v++) {
      ASSERT_EQ(mm_->CopyOut(a + kPg + 64, &v, sizeof(v)), 8);
      written.store(v);
    }
  });
  while (written.load() == 0) std::this_thread::yield();
  for (int i = 0; i < 200; i++) {
    auto child = ForkOf(*mm_);
    ASSERT_NE(child, nullptr);
    uint64_t first, later;
    ASSERT_EQ(child->CopyIn(a + kPg + 64, &first, 8), 8);
    std::this_thread::yield();
    ASSERT_EQ(child->CopyIn(a + kPg + 64, &later, 8), 8);
    EXPECT_EQ(first, later) << "fork " << i;
  }
  stop = true;
  writer.join();
  uint64_t last;
  ASSERT_EQ(mm_->CopyIn(a + kPg + 64, &last, 8), 8);
  EXPECT_GT(last, 0u);
}


// --- exec: mapping ahead ----------------------------------------------------

TEST_F(MMTest, PrefaultMapsSmallFilesWholeAndOnlyBackedAnonymousPages) {
  auto small = std::make_shared<PatternFile>(5 * kPg);
  const int64_t f = mm_->MmapFile(0, 5 * kPg, PROT_READ | PROT_EXEC, MAP_PRIVATE,
                                  small, 0, platform::Prot{true, false, true});
  ASSERT_GT(f, 0);
  auto big = std::make_shared<PatternFile>(64 * kPg);
  const int64_t b = mm_->MmapFile(0, 64 * kPg, PROT_READ, MAP_PRIVATE, big, 0,
                                  platform::Prot{true, false, true});
  ASSERT_GT(b, 0);
  const uintptr_t anon = MapAnon(8 * kPg);
  Fill(anon + 7 * kPg, kPg, 0x5a);  // as the loader writes the stack
  const uintptr_t none = MapAnon(2 * kPg, PROT_NONE);
  const int batches = as_->batches();

  mm_->Prefault(/*max_file_bytes=*/16 * kPg);

  EXPECT_EQ(as_->batches(), batches + 1);  // one request for all of it
  for (uint64_t i = 0; i < 5; i++) {
    EXPECT_TRUE(as_->Mapped(f + i * kPg)) << i;
  }
  EXPECT_EQ(*mf_->Internal(MappedAtOf(f + 4 * kPg)), (4 * kPg) % 251);
  EXPECT_FALSE(as_->Mapped(b));  // over the limit: left to fault
  EXPECT_TRUE(as_->Mapped(anon + 7 * kPg));
  EXPECT_FALSE(as_->Mapped(anon));  // never touched: no zero page made
  EXPECT_FALSE(as_->Mapped(none));
  EXPECT_EQ(NumMappedIn(anon, anon + 8 * kPg), 1u);
}

TEST_F(MMTest, ReadOnlyFileMappingsFaultAroundALargerBlock) {
  const uint64_t len = 2 * MM::kFileFaultAroundPages * kPg;
  auto file = std::make_shared<PatternFile>(len);
  const int64_t f = mm_->MmapFile(0, len, PROT_READ | PROT_EXEC, MAP_PRIVATE,
                                  file, 0, platform::Prot{true, false, true});
  ASSERT_GT(f, 0);
  const uintptr_t addr = f + len / 2 + 3 * kPg;
  int code;
  ASSERT_TRUE(mm_->HandleFault(addr, false, true, &code));
  const uint64_t block = MM::kFileFaultAroundPages * kPg;
  const uintptr_t start = std::max<uintptr_t>(f, addr & ~(block - 1));
  const uintptr_t end = std::min<uintptr_t>(f + len, (addr & ~(block - 1)) + block);
  EXPECT_EQ(NumMappedIn(f, f + len), (end - start) / kPg);
  EXPECT_GT(NumMappedIn(f, f + len), MM::kFaultAroundPages);
  // A writable private mapping of the same file keeps the small block.
  const int64_t w = mm_->MmapFile(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                                  file, 0, platform::Prot{true, true, true});
  ASSERT_GT(w, 0);
  ASSERT_TRUE(mm_->HandleFault(w + 5 * kPg, false, false, &code));
  EXPECT_LE(NumMappedIn(w, w + len), MM::kFaultAroundPages);
}

}  // namespace
}  // namespace sandboxd::mm
