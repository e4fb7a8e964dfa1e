#include "platforms/kvm/page_tables.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace sandboxd::kvm {
namespace {

// Table pages from the heap, with made-up physical addresses.
class HeapAllocator : public TableAllocator {
 public:
  ~HeapAllocator() override {
    for (auto& [phys, host] : pages_) std::free(host);
  }
  absl::StatusOr<TablePage> AllocTable() override {
    void* p = std::aligned_alloc(4096, 4096);
    std::memset(p, 0, 4096);
    const uint64_t phys = next_phys_;
    next_phys_ += 4096;
    pages_[phys] = static_cast<uint64_t*>(p);
    return TablePage{static_cast<uint64_t*>(p), phys};
  }
  void FreeTable(TablePage page) override {
    auto it = pages_.find(page.phys);
    ASSERT_NE(it, pages_.end());
    ASSERT_EQ(it->second, page.host);
    std::free(it->second);
    pages_.erase(it);
  }
  uint64_t* HostOf(uint64_t phys) override {
    auto it = pages_.find(phys);
    EXPECT_NE(it, pages_.end()) << std::hex << phys;
    return it == pages_.end() ? nullptr : it->second;
  }
  size_t live() const { return pages_.size(); }

 private:
  uint64_t next_phys_ = 0x100000000ull;
  std::map<uint64_t, uint64_t*> pages_;
};

constexpr PteAccess kRw{.write = true, .exec = false};
constexpr PteAccess kRx{.write = false, .exec = true};

class PageTablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pt = PageTables::Create(&alloc_);
    ASSERT_TRUE(pt.ok()) << pt.status();
    pt_ = std::make_unique<PageTables>(std::move(*pt));
  }

  HeapAllocator alloc_;
  std::unique_ptr<PageTables> pt_;
};

TEST_F(PageTablesTest, FourKPage) {
  ASSERT_TRUE(pt_->Map(0x400000 + 0x3000, 0x7000, 0x1000, kRx).ok());
  auto t = pt_->Lookup(0x403123);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->phys, 0x7123u);
  EXPECT_EQ(t->page_size, k4K);
  EXPECT_TRUE(t->flags & kPteUser);
  EXPECT_FALSE(t->flags & kPteWrite);
  EXPECT_FALSE(t->flags & kPteNoExec);
  EXPECT_FALSE(pt_->Lookup(0x402fff).has_value());
  EXPECT_FALSE(pt_->Lookup(0x404000).has_value());
  EXPECT_EQ(pt_->table_pages(), 4u);  // PML4, PDPT, PD, PT
}

TEST_F(PageTablesTest, LargePagesWhereAligned) {
  // 1 GiB + 2 MiB + 4 KiB starting at a 1 GiB boundary: one PDPT entry,
  // one PD entry and one PTE.
  const uint64_t va = 0x40000000, pa = 0x80000000;
  ASSERT_TRUE(pt_->Map(va, pa, k1G + k2M + k4K, kRw).ok());
  auto a = pt_->Lookup(va + 0x12345678);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->page_size, k1G);
  EXPECT_EQ(a->phys, pa + 0x12345678);
  EXPECT_TRUE(a->flags & kPteNoExec);
  auto b = pt_->Lookup(va + k1G + 0x1000);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->page_size, k2M);
  EXPECT_EQ(b->phys, pa + k1G + 0x1000);
  auto c = pt_->Lookup(va + k1G + k2M + 0xabc);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->page_size, k4K);
  EXPECT_FALSE(pt_->Lookup(va + k1G + k2M + k4K).has_value());
  // PML4, PDPT, one PD (for the 2M part), one PT (for the 4K part).
  EXPECT_EQ(pt_->table_pages(), 4u);
}

TEST_F(PageTablesTest, MisalignedPhysicalUsesSmallerPages) {
  // va is 2 MiB aligned but pa is not: every page must be 4 KiB.
  ASSERT_TRUE(pt_->Map(0x200000, 0x1000, k2M, kRw).ok());
  auto t = pt_->Lookup(0x3ff000);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->page_size, k4K);
  EXPECT_EQ(t->phys, 0x200000u);
}

TEST_F(PageTablesTest, UnmapSplitsLargePage) {
  ASSERT_TRUE(pt_->Map(0, 0x40000000, k1G, kRw).ok());
  // Punch one 4 KiB hole in the middle of the 1 GiB page.
  ASSERT_TRUE(pt_->Unmap(0x12345000, k4K).ok());
  EXPECT_FALSE(pt_->Lookup(0x12345000).has_value());
  auto before = pt_->Lookup(0x12344fff);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->phys, 0x40000000u + 0x12344fff);
  EXPECT_EQ(before->page_size, k4K);
  auto after = pt_->Lookup(0x12346000);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->phys, 0x40000000u + 0x12346000);
  // The rest of the split stays in large pages.
  auto far = pt_->Lookup(0x30000000);
  ASSERT_TRUE(far.has_value());
  EXPECT_EQ(far->page_size, k2M);
  EXPECT_TRUE(far->flags & kPteWrite);
}

TEST_F(PageTablesTest, UnmapFreesEmptyTables) {
  ASSERT_TRUE(pt_->Map(0x7f0000000000, 0x5000, 3 * k4K, kRw).ok());
  EXPECT_EQ(pt_->table_pages(), 4u);
  ASSERT_TRUE(pt_->Unmap(0x7f0000000000, 3 * k4K).ok());
  EXPECT_EQ(pt_->table_pages(), 1u);
  EXPECT_EQ(alloc_.live(), 1u);
  EXPECT_FALSE(pt_->Lookup(0x7f0000001000).has_value());
}

TEST_F(PageTablesTest, RemapReplaces) {
  ASSERT_TRUE(pt_->Map(0x10000, 0x1000, k4K, kRx).ok());
  ASSERT_TRUE(pt_->Map(0x10000, 0x9000, k4K, kRw).ok());
  auto t = pt_->Lookup(0x10010);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->phys, 0x9010u);
  EXPECT_TRUE(t->flags & kPteWrite);
  // A large mapping over a range that had small pages drops the table.
  ASSERT_TRUE(pt_->Map(0, 0x200000, k2M, kRw).ok());
  t = pt_->Lookup(0x10010);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->page_size, k2M);
  EXPECT_EQ(t->phys, 0x210010u);
  EXPECT_EQ(pt_->table_pages(), 3u);
}

TEST_F(PageTablesTest, InvalidationsCountOnlyWhatCachesCouldHold) {
  ASSERT_TRUE(pt_->Map(0x10000, 0x1000, 4 * k4K, kRw).ok());
  ASSERT_TRUE(pt_->Map(0x40000000, 0, k2M, kRw).ok());
  EXPECT_EQ(pt_->invalidations(), 0u);  // only new mappings
  ASSERT_TRUE(pt_->Map(0x10000, 0x1000, k4K, kRw).ok());
  EXPECT_EQ(pt_->invalidations(), 0u);  // the same entry again
  ASSERT_TRUE(pt_->Map(0x10000, 0x1000, k4K, kRx).ok());
  EXPECT_EQ(pt_->invalidations(), 1u);  // rights changed
  ASSERT_TRUE(pt_->Unmap(0x11000, k4K).ok());
  EXPECT_EQ(pt_->invalidations(), 2u);
  ASSERT_TRUE(pt_->Unmap(0x100000, k4K).ok());
  EXPECT_EQ(pt_->invalidations(), 2u);  // nothing was there
  ASSERT_TRUE(pt_->Unmap(0x40001000, k4K).ok());
  EXPECT_GT(pt_->invalidations(), 2u);  // split and cleared
}

// What a shadow MMU must drop: the old targets of changed or cleared 4 KiB
// entries, one by one, and a count of large entries changed or split.
TEST_F(PageTablesTest, StalePagesAndLargeInvalidations) {
  ASSERT_TRUE(pt_->Map(0x10000, 0x5000, 4 * k4K, kRw).ok());
  ASSERT_TRUE(pt_->Map(0x40000000, 0x200000, k2M, kRw).ok());
  EXPECT_TRUE(pt_->TakeStalePages().empty());  // only new mappings
  ASSERT_TRUE(pt_->Map(0x10000, 0x5000, k4K, kRw).ok());
  EXPECT_TRUE(pt_->TakeStalePages().empty());  // the same entry again
  ASSERT_TRUE(pt_->Map(0x11000, 0x9000, k4K, kRw).ok());  // another page
  ASSERT_TRUE(pt_->Map(0x12000, 0x7000, k4K, kRx).ok());  // other rights
  ASSERT_TRUE(pt_->Unmap(0x13000, k4K).ok());
  EXPECT_EQ(pt_->TakeStalePages(),
            (std::vector<uint64_t>{0x6000, 0x7000, 0x8000}));
  EXPECT_TRUE(pt_->TakeStalePages().empty());  // taken
  EXPECT_EQ(pt_->large_invalidations(), 0u);
  // Unmapping a whole table's range reports every page that was in it.
  ASSERT_TRUE(pt_->Unmap(0, k2M).ok());
  EXPECT_EQ(pt_->TakeStalePages(), (std::vector<uint64_t>{0x5000, 0x9000, 0x7000}));
  // A split of a large page, and its removal, are large invalidations.
  ASSERT_TRUE(pt_->Unmap(0x40001000, k4K).ok());
  EXPECT_EQ(pt_->large_invalidations(), 1u);
  EXPECT_EQ(pt_->TakeStalePages(), (std::vector<uint64_t>{0x201000}));
  ASSERT_TRUE(pt_->Map(0x80000000, 0x400000, k2M, kRw).ok());
  ASSERT_TRUE(pt_->Unmap(0x80000000, k2M).ok());
  EXPECT_EQ(pt_->large_invalidations(), 2u);
  EXPECT_TRUE(pt_->TakeStalePages().empty());
}

TEST_F(PageTablesTest, RejectsBadRanges) {
  EXPECT_FALSE(pt_->Map(0x1001, 0, k4K, kRw).ok());
  EXPECT_FALSE(pt_->Map(kLowerHalfEnd - k4K, 0, 2 * k4K, kRw).ok());
  EXPECT_FALSE(pt_->Map(0xffff800000000000ull, 0, k4K, kRw).ok());
}

TEST_F(PageTablesTest, DestructorFreesEverything) {
  ASSERT_TRUE(pt_->Map(0x1000, 0x1000, 64 * k4K, kRw).ok());
  ASSERT_TRUE(pt_->Map(0x40000000, 0, 3 * k1G, kRw).ok());
  ASSERT_TRUE(pt_->Map(0x7ffff0000000, 0, 4 * k2M + k4K, kRw).ok());
  pt_.reset();
  EXPECT_EQ(alloc_.live(), 0u);
}

}  // namespace
}  // namespace sandboxd::kvm
