#include "sentry/mm/memory_file.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sandboxd::mm {
namespace {

constexpr uint64_t kMaxSize = 1ull << 30;

std::unique_ptr<MemoryFile> NewFile(uint64_t max = kMaxSize) {
  auto mf = MemoryFile::Create(max);
  EXPECT_TRUE(mf.ok()) << mf.status();
  return std::move(mf).value();
}

bool AllZero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

// The application's memory limit: an allocation past it is refused and
// remembered for the thread that asked (the kernel's OOM killer runs
// then), once; freed memory makes room again.
TEST(MemoryFileTest, TheLimitRefusesAndIsRememberedOnce) {
  auto mf = NewFile();
  mf->SetLimit(16 * kPageSize);
  MemoryFile::TakeRefusedOnThisThread();
  auto a = mf->Allocate(12 * kPageSize);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(MemoryFile::TakeRefusedOnThisThread());
  auto b = mf->Allocate(8 * kPageSize);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(MemoryFile::TakeRefusedOnThisThread());
  EXPECT_FALSE(MemoryFile::TakeRefusedOnThisThread());
  // Another thread's refusal is not this one's.
  std::thread([&] { EXPECT_FALSE(mf->Allocate(8 * kPageSize).ok()); }).join();
  EXPECT_FALSE(MemoryFile::TakeRefusedOnThisThread());
  EXPECT_EQ(mf->limit_refusals(), 2u);
  auto c = mf->Allocate(4 * kPageSize);  // exactly to the limit
  EXPECT_TRUE(c.ok()) << c.status();
  mf->Free(*a, 12 * kPageSize);
  EXPECT_TRUE(mf->Allocate(8 * kPageSize).ok());
}

TEST(MemoryFileTest, ApplicationMemoryLimitKeepsTheSentrysReserve) {
  EXPECT_EQ(ApplicationMemoryLimit(0), 0u);
  EXPECT_EQ(ApplicationMemoryLimit(64ull << 20), 40ull << 20);    // 24 MiB
  EXPECT_EQ(ApplicationMemoryLimit(256ull << 20), 192ull << 20);  // a quarter
  EXPECT_EQ(ApplicationMemoryLimit(8ull << 30), (8ull << 30) - (128ull << 20));
  EXPECT_EQ(ApplicationMemoryLimit(16ull << 20), 8ull << 20);     // half at most
}

TEST(MemoryFileTest, CreateRejectsBadSizes) {
  EXPECT_FALSE(MemoryFile::Create(0).ok());
  EXPECT_FALSE(MemoryFile::Create(kPageSize + 1).ok());
}

TEST(MemoryFileTest, AllocateGivesZeroedPagesAndGrowsInSteps) {
  auto mf = NewFile();
  ASSERT_GE(mf->fd(), 0);
  EXPECT_EQ(mf->FileSize(), 0u);
  auto a = mf->Allocate(3 * kPageSize);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(IsPageAligned(*a));
  EXPECT_TRUE(AllZero(mf->Internal(*a), 3 * kPageSize));
  EXPECT_EQ(mf->AllocatedBytes(), 3 * kPageSize);
  EXPECT_EQ(mf->FileSize(), MemoryFile::kGrowStep);
  struct stat st;
  ASSERT_EQ(fstat(mf->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), MemoryFile::kGrowStep);

  auto b = mf->Allocate(kPageSize);
  ASSERT_TRUE(b.ok());
  EXPECT_GE(*b, *a + 3 * kPageSize);  // disjoint
  EXPECT_EQ(mf->FileSize(), MemoryFile::kGrowStep);  // no ftruncate needed
}

TEST(MemoryFileTest, RejectsBadLengths) {
  auto mf = NewFile();
  EXPECT_FALSE(mf->Allocate(0).ok());
  EXPECT_FALSE(mf->Allocate(100).ok());
}

TEST(MemoryFileTest, ExhaustionIsAnError) {
  auto mf = NewFile(16 * kPageSize);
  ASSERT_TRUE(mf->Allocate(16 * kPageSize).ok());
  auto r = mf->Allocate(kPageSize);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(mf->FileSize(), 16 * kPageSize);  // growth capped at max size
}

TEST(MemoryFileTest, FreedPagesReadZeroWhenReused) {
  auto mf = NewFile();
  auto a = mf->Allocate(2 * kPageSize);
  auto guard = mf->Allocate(kPageSize);  // keeps `a` out of the bump region
  ASSERT_TRUE(a.ok() && guard.ok());
  std::memset(mf->Internal(*a), 0xab, 2 * kPageSize);
  mf->Free(*a, 2 * kPageSize);
  EXPECT_EQ(mf->AllocatedBytes(), kPageSize);
  auto b = mf->Allocate(2 * kPageSize);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);  // first fit reuses it
  EXPECT_TRUE(AllZero(mf->Internal(*b), 2 * kPageSize));
}

TEST(MemoryFileTest, FreeOfSubrangesCoalesces) {
  auto mf = NewFile();
  auto a = mf->Allocate(4 * kPageSize);
  auto guard = mf->Allocate(kPageSize);
  ASSERT_TRUE(a.ok() && guard.ok());
  std::memset(mf->Internal(*a), 1, 4 * kPageSize);
  // Free the 2nd and 4th page, then the 3rd: pages 2..4 become one range.
  mf->Free(*a + kPageSize, kPageSize);
  mf->Free(*a + 3 * kPageSize, kPageSize);
  mf->Free(*a + 2 * kPageSize, kPageSize);
  EXPECT_EQ(mf->Internal(*a)[0], 1);  // the first page is untouched
  auto b = mf->Allocate(3 * kPageSize);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a + kPageSize);
  EXPECT_TRUE(AllZero(mf->Internal(*b), 3 * kPageSize));
}

TEST(MemoryFileTest, FreeAtTheEndReturnsToBumpRegion) {
  auto mf = NewFile();
  auto a = mf->Allocate(kPageSize);
  auto b = mf->Allocate(8 * kPageSize);
  ASSERT_TRUE(a.ok() && b.ok());
  mf->Free(*b, 8 * kPageSize);
  // A larger request than the freed range still starts there: the tail
  // went back to the bump region instead of staying a too-small hole.
  auto c = mf->Allocate(16 * kPageSize);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *b);
}

TEST(MemoryFileTest, HostMappingOfFdSeesSameBytes) {
  auto mf = NewFile();
  auto a = mf->Allocate(kPageSize);
  ASSERT_TRUE(a.ok());
  void* p = mmap(nullptr, kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                 mf->fd(), static_cast<off_t>(*a));
  ASSERT_NE(p, MAP_FAILED);
  static_cast<uint8_t*>(p)[7] = 42;
  EXPECT_EQ(mf->Internal(*a)[7], 42);
  mf->Internal(*a)[8] = 43;
  EXPECT_EQ(static_cast<uint8_t*>(p)[8], 43);
  munmap(p, kPageSize);
}

TEST(MemoryFileTest, DecommitZeroesButKeepsAllocated) {
  auto mf = NewFile();
  auto a = mf->Allocate(2 * kPageSize);
  ASSERT_TRUE(a.ok());
  std::memset(mf->Internal(*a), 5, 2 * kPageSize);
  mf->Decommit(*a, kPageSize);
  EXPECT_TRUE(AllZero(mf->Internal(*a), kPageSize));
  EXPECT_EQ(mf->Internal(*a)[kPageSize], 5);
  EXPECT_EQ(mf->AllocatedBytes(), 2 * kPageSize);
}

TEST(MemoryFileDeathTest, DoubleFreeAborts) {
  auto mf = NewFile();
  auto a = mf->Allocate(kPageSize);
  auto guard = mf->Allocate(kPageSize);
  ASSERT_TRUE(a.ok() && guard.ok());
  mf->Free(*a, kPageSize);
  EXPECT_DEATH(mf->Free(*a, kPageSize), "already free");
}

TEST(MemoryFileTest, ConcurrentAllocateAndFreeNeverOverlap) {
  auto mf = NewFile();
  constexpr int kThreads = 8, kIters = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::pair<uint64_t, uint64_t>> mine;
      for (int i = 0; i < kIters; ++i) {
        uint64_t len = ((i + t) % 4 + 1) * kPageSize;
        auto off = mf->Allocate(len);
        ASSERT_TRUE(off.ok());
        uint8_t* p = mf->Internal(*off);
        // Each page must be zero on allocation and ours alone afterwards.
        ASSERT_TRUE(AllZero(p, len));
        std::memset(p, t + 1, len);
        mine.emplace_back(*off, len);
        if (i % 3 == 2) {
          for (auto [o, l] : mine) {
            const uint8_t* q = mf->Internal(o);
            ASSERT_TRUE(std::all_of(q, q + l, [&](uint8_t b) { return b == t + 1; }));
            mf->Free(o, l);
          }
          mine.clear();
        }
      }
      for (auto [o, l] : mine) mf->Free(o, l);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mf->AllocatedBytes(), 0u);
}

TEST(MemoryFileTest, ReferenceCountsFreeOnLastDecRef) {
  auto mf = MemoryFile::Create(1ull << 30);
  ASSERT_TRUE(mf.ok()) << mf.status();
  auto off = (*mf)->Allocate(4 * kPageSize);
  ASSERT_TRUE(off.ok());
  const uint64_t a = *off;
  EXPECT_TRUE((*mf)->IsExclusive(a, 4 * kPageSize));
  // Share the middle two pages twice over, the last page once.
  (*mf)->IncRef(a + kPageSize, 2 * kPageSize);
  (*mf)->IncRef(a + kPageSize, 3 * kPageSize);
  EXPECT_EQ((*mf)->SharedBytes(), 3 * kPageSize);
  EXPECT_TRUE((*mf)->IsExclusive(a, kPageSize));
  EXPECT_FALSE((*mf)->IsExclusive(a, 2 * kPageSize));
  // Dropping one reference from everything frees only the first page.
  (*mf)->DecRef(a, 4 * kPageSize);
  EXPECT_EQ((*mf)->AllocatedBytes(), 3 * kPageSize);
  EXPECT_FALSE((*mf)->IsExclusive(a + kPageSize, kPageSize));
  EXPECT_TRUE((*mf)->IsExclusive(a + 3 * kPageSize, kPageSize));
  EXPECT_EQ((*mf)->SharedBytes(), 2 * kPageSize);
  // Partial drops split the recorded ranges.
  (*mf)->DecRef(a + 2 * kPageSize, kPageSize);
  EXPECT_TRUE((*mf)->IsExclusive(a + 2 * kPageSize, kPageSize));
  EXPECT_FALSE((*mf)->IsExclusive(a + kPageSize, kPageSize));
  (*mf)->DecRef(a + kPageSize, 3 * kPageSize);
  EXPECT_EQ((*mf)->AllocatedBytes(), kPageSize);
  EXPECT_EQ((*mf)->SharedBytes(), 0u);
  (*mf)->DecRef(a + kPageSize, kPageSize);
  EXPECT_EQ((*mf)->AllocatedBytes(), 0u);
}


TEST(MemoryFileTest, PopulateMakesTheFirstPagesAndAllocationsStillReadZero) {
  auto mf = MemoryFile::Create(1ull << 30);
  ASSERT_TRUE(mf.ok()) << mf.status();
  ASSERT_TRUE((*mf)->Populate(0).ok());
  ASSERT_TRUE((*mf)->Populate(3 * kPageSize + 1).ok());
  EXPECT_GE((*mf)->FileSize(), 4 * kPageSize);
  EXPECT_EQ((*mf)->AllocatedBytes(), 0u);  // made, not handed out
  // The host has the pages now (the populated range is resident).
  struct stat st;
  ASSERT_EQ(fstat((*mf)->fd(), &st), 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 4 * kPageSize);
  auto off = (*mf)->Allocate(4 * kPageSize);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(*off, 0u);
  for (uint64_t i = 0; i < 4 * kPageSize; i++) {
    ASSERT_EQ((*mf)->Internal(*off)[i], 0) << i;
  }
}

}  // namespace
}  // namespace sandboxd::mm

