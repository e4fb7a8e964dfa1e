// MM's side of syscall patching (code_patch.cc): what may be patched, that
// the change stays in this process's own pages, and that munmap, mremap
// and fork keep patched sites and the table consistent.
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sentry/mm/mm.h"

namespace sandboxd::mm {
namespace {

constexpr uintptr_t kMin = 0x10000;
constexpr uintptr_t kMax = 0x7ffffffff000;
constexpr uintptr_t kTable = 0x60000;
constexpr size_t kTableLen = 0x10000;
constexpr size_t kLen = 7;

class NullAddressSpace : public platform::AddressSpace,
                         public platform::PatchingAddressSpace {
 public:
  absl::Status MapFile(uintptr_t, int, off_t, size_t,
                       platform::Prot) override {
    return absl::OkStatus();
  }
  void Unmap(uintptr_t, size_t) override {}
  void SetCodePatcher(platform::CodePatcher* p) override { patcher = p; }
  void* FindFeature(platform::FeatureTag tag) override {
    return platform::OfferFeature<platform::PatchingAddressSpace>(this, tag);
  }
  platform::CodePatcher* patcher = nullptr;
};

class CodePatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    mf_ = std::move(mf).value();
    auto as = std::make_unique<NullAddressSpace>();
    as_ = as.get();
    mm_ = std::make_unique<MM>(mf_.get(), std::move(as), kMin, kMax);
  }

  // Maps `len` bytes of "text" (r-x) holding `orig` at `site_off`.
  uintptr_t MapText(int flags = MAP_PRIVATE, size_t len = 4 * kPageSize,
                    size_t site_off = 0x100) {
    int64_t r = mm_->Mmap(0, len, PROT_READ | PROT_WRITE, flags | MAP_ANONYMOUS);
    EXPECT_GT(r, 0);
    uintptr_t a = static_cast<uintptr_t>(r);
    EXPECT_EQ(mm_->CopyOut(a + site_off, kOrig, kLen), static_cast<int64_t>(kLen));
    EXPECT_EQ(mm_->Mprotect(a, len, PROT_READ | PROT_EXEC), 0);
    return a;
  }

  // Patches `site` with kPatched (and a mark in the table's first byte).
  bool Patch(MM& mm, uintptr_t site) {
    return mm.PatchCode(
        site, kLen, kTable, kTableLen,
        [](uint8_t* s, uint8_t* t) {
          std::memcpy(s, kPatched, kLen);
          t[0]++;
          return true;
        },
        [](uint8_t* s) { std::memcpy(s, kOrig, kLen); });
  }

  std::string Code(MM& mm, uintptr_t addr) {
    char b[kLen];
    if (!mm.ReadCode(addr, b, kLen)) return "<unreadable>";
    return std::string(b, kLen);
  }

  static constexpr char kOrig[] = "ORIGINL";
  static constexpr char kPatched[] = "PATCHED";
  std::unique_ptr<MemoryFile> mf_;
  NullAddressSpace* as_ = nullptr;
  std::unique_ptr<MM> mm_;
};

TEST_F(CodePatchTest, TheMMRegistersItselfWithItsAddressSpace) {
  EXPECT_EQ(as_->patcher, mm_.get());
}

TEST_F(CodePatchTest, PatchesPrivateTextAndMapsTheTable) {
  uintptr_t a = MapText();
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  EXPECT_EQ(Code(*mm_, a + 0x100), "PATCHED");
  EXPECT_EQ(mm_->NumPatchedSites(), 1u);
  EXPECT_NE(mm_->DebugString().find("[sbx-patch]"), std::string::npos);
  uint8_t t0 = 0;
  ASSERT_TRUE(mm_->ReadCode(kTable, &t0, 1));
  EXPECT_EQ(t0, 1);
  // The same site twice: no.
  EXPECT_FALSE(Patch(*mm_, a + 0x100));
}

TEST_F(CodePatchTest, NeverPatchesASharedMapping) {
  uintptr_t a = MapText(MAP_SHARED);
  EXPECT_FALSE(Patch(*mm_, a + 0x100));
  EXPECT_EQ(Code(*mm_, a + 0x100), "ORIGINL");
  EXPECT_EQ(mm_->NumPatchedSites(), 0u);
}

TEST_F(CodePatchTest, NeverPatchesASiteAcrossPages) {
  uintptr_t a = MapText(MAP_PRIVATE, 4 * kPageSize, kPageSize - 3);
  EXPECT_FALSE(Patch(*mm_, a + kPageSize - 3));
}

TEST_F(CodePatchTest, NoTableWhereTheProgramHasAMapping) {
  ASSERT_EQ(mm_->Mmap(kTable, kPageSize, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kTable));
  uintptr_t a = MapText();
  EXPECT_FALSE(Patch(*mm_, a + 0x100));
  EXPECT_EQ(Code(*mm_, a + 0x100), "ORIGINL");
}

TEST_F(CodePatchTest, PatchAfterForkStaysInTheParent) {
  uintptr_t a = MapText();
  auto child = mm_->Fork(std::make_unique<NullAddressSpace>());
  ASSERT_TRUE(child.ok());
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  EXPECT_EQ(Code(*mm_, a + 0x100), "PATCHED");
  EXPECT_EQ(Code(**child, a + 0x100), "ORIGINL");
  EXPECT_EQ((*child)->NumPatchedSites(), 0u);
}

TEST_F(CodePatchTest, ForkCopiesPatchedTextTableAndRecord) {
  uintptr_t a = MapText();
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  auto child = mm_->Fork(std::make_unique<NullAddressSpace>());
  ASSERT_TRUE(child.ok());
  EXPECT_EQ(Code(**child, a + 0x100), "PATCHED");
  EXPECT_EQ((*child)->NumPatchedSites(), 1u);
  // A second patch in the child writes the child's table only.
  ASSERT_TRUE(Patch(**child, a + 0x200 - 0x80));
  uint8_t pt = 0, ct = 0;
  ASSERT_TRUE(mm_->ReadCode(kTable, &pt, 1));
  ASSERT_TRUE((*child)->ReadCode(kTable, &ct, 1));
  EXPECT_EQ(pt, 1);
  EXPECT_EQ(ct, 2);
}

TEST_F(CodePatchTest, ReadsOnOthersBehalfSeeTheOriginalBytes) {
  uintptr_t a = MapText();
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  auto read = [&](uintptr_t addr, size_t n, bool original) {
    std::string b(n, '?');
    int64_t r = original ? mm_->CopyInOriginal(addr, b.data(), n)
                         : mm_->CopyIn(addr, b.data(), n);
    EXPECT_EQ(r, static_cast<int64_t>(n));
    return b;
  };
  EXPECT_EQ(read(a + 0x100, kLen, false), "PATCHED");
  EXPECT_EQ(read(a + 0x100, kLen, true), "ORIGINL");
  // Reads that cover part of the site, or more than it.
  EXPECT_EQ(read(a + 0x102, 3, true), "IGI");
  EXPECT_EQ(read(a + 0xfe, 4, true), std::string("\0\0OR", 4));
  EXPECT_EQ(read(a + 0x105, 4, true), std::string("NL\0\0", 4));
  // After the table goes, the memory itself is original again.
  ASSERT_EQ(mm_->Munmap(kTable, kTableLen), 0);
  EXPECT_EQ(read(a + 0x100, kLen, false), "ORIGINL");
  EXPECT_EQ(read(a + 0x100, kLen, true), "ORIGINL");
}

TEST_F(CodePatchTest, UnmappingTheTableRestoresEverySite) {
  uintptr_t a = MapText();
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  ASSERT_EQ(mm_->Munmap(kTable, kTableLen), 0);
  EXPECT_EQ(Code(*mm_, a + 0x100), "ORIGINL");
  EXPECT_EQ(mm_->NumPatchedSites(), 0u);
  // A new table comes with the next patch.
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  EXPECT_EQ(Code(*mm_, a + 0x100), "PATCHED");
}

TEST_F(CodePatchTest, MapFixedOverTheTableRestoresEverySite) {
  uintptr_t a = MapText();
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  ASSERT_EQ(mm_->Mmap(kTable, kPageSize, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kTable));
  EXPECT_EQ(Code(*mm_, a + 0x100), "ORIGINL");
}

TEST_F(CodePatchTest, UnmappingASiteForgetsIt) {
  uintptr_t a = MapText();
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  ASSERT_EQ(mm_->Munmap(a, kPageSize), 0);
  EXPECT_EQ(mm_->NumPatchedSites(), 0u);
}

TEST_F(CodePatchTest, MremapRestoresSitesBeforeTheyMove) {
  uintptr_t a = MapText();
  ASSERT_TRUE(Patch(*mm_, a + 0x100));
  // Grow so that it must move: something right after it.
  ASSERT_EQ(mm_->Mmap(a + 4 * kPageSize, kPageSize, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(a + 4 * kPageSize));
  int64_t b = mm_->Mremap(a, 4 * kPageSize, 8 * kPageSize, MREMAP_MAYMOVE, 0);
  ASSERT_GT(b, 0);
  ASSERT_NE(static_cast<uintptr_t>(b), a);
  EXPECT_EQ(Code(*mm_, static_cast<uintptr_t>(b) + 0x100), "ORIGINL");
  EXPECT_EQ(mm_->NumPatchedSites(), 0u);
}

}  // namespace
}  // namespace sandboxd::mm
