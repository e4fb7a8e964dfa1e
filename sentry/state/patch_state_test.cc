// Checkpoint and restore of a process whose syscall sites are patched
// (platforms/systrap/README.md, "Syscall patching"): a real systrap stub
// runs a hot `mov $39,%eax; syscall` loop in an MM until the site is
// patched, the MM is saved, and it is loaded into another memory file and
// another Systrap. The load gives the site its original bytes back (so the
// restored program never jumps through table entries written for another
// Sentry's stub), the program goes on with its registers, the site gets
// patched again by the restoring Sentry, and munmap of the table restores
// it.
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "platforms/systrap/patch.h"
#include "platforms/systrap/systrap.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"
#include "sentry/state/loader.h"
#include "sentry/state/mm_state.h"
#include "sentry/state/pages.h"
#include "sentry/state/saver.h"

namespace sandboxd::state {
namespace {

using platform::CpuState;
using platform::Event;

constexpr uintptr_t kCode = 0x400000;
constexpr uintptr_t kData = 0x500000;
constexpr uint64_t kPage = mm::kPageSize;
constexpr uintptr_t kTable = systrap::kPatchTableBase;

// site: mov $39,%eax; syscall
//       add %rax,%rbx     (rbx accumulates the results)
//       jmp site
constexpr uint8_t kLoop[] = {0xb8, 39, 0, 0, 0, 0x0f, 0x05,
                             0x48, 0x01, 0xc3, 0xeb, 0xf4};

// One sandbox's memory file and platform. Systrap::Create forks the stub
// template: both sandboxes are made before the test starts threads.
struct Sandbox {
  std::unique_ptr<mm::MemoryFile> mf;
  std::unique_ptr<systrap::Systrap> platform;
};

class PatchStateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (Sandbox* s : {&a_, &b_}) {
      auto mf = mm::MemoryFile::Create(1ull << 30);
      ASSERT_TRUE(mf.ok()) << mf.status();
      s->mf = std::move(mf).value();
      auto p = systrap::Systrap::Create(s->mf->fd());
      ASSERT_TRUE(p.ok()) << p.status();
      s->platform = std::move(p).value();
      std::string why;
      if (!s->platform->set_patching(true, &why)) why_ = why;
    }
  }
  static void TearDownTestSuite() {
    for (Sandbox* s : {&a_, &b_}) {
      s->platform.reset();
      s->mf.reset();
    }
  }
  void SetUp() override {
    if (!why_.empty()) GTEST_SKIP() << "no syscall patching here: " << why_;
  }

  static std::shared_ptr<mm::MM> NewMm(Sandbox& s) {
    auto as = s.platform->NewAddressSpace();
    EXPECT_TRUE(as.ok()) << as.status();
    return std::make_shared<mm::MM>(s.mf.get(), std::move(as).value(),
                                    s.platform->MinUserAddress(),
                                    s.platform->MaxUserAddress());
  }

  static std::string Site(mm::MM& m) {
    uint8_t b[systrap::kSiteSize];
    if (!m.ReadCode(kCode, b, sizeof(b))) return "<unreadable>";
    return std::string(reinterpret_cast<char*>(b), sizeof(b));
  }
  static std::string Original() {
    return std::string(reinterpret_cast<const char*>(kLoop),
                       systrap::kSiteSize);
  }

  // Runs the loop for `n` syscalls, answering the i-th with base + i and
  // checking what the program sees: its accumulated results in rbx, the
  // registers it does not touch, rip after the site.
  static void Run(platform::Context& ctx, mm::MM& m, CpuState& cpu, int n,
                  uint64_t base, uint64_t* want_rbx) {
    int done = 0;
    for (int guard = 0; done < n && guard < 100 * n; guard++) {
      cpu.regs.r12 = 0x1234 + done;
      Event ev = ctx.Switch(m.address_space(), cpu);
      if (ev.kind == Event::Kind::kFault) {
        int signo = 0, code = 0;
        ASSERT_TRUE(m.HandleFault(ev.addr, ev.write, ev.exec, &signo, &code))
            << std::hex << "fault at " << ev.addr << " rip " << cpu.regs.rip;
        continue;
      }
      if (ev.kind == Event::Kind::kInterrupted) continue;
      ASSERT_EQ(ev.kind, Event::Kind::kSyscall)
          << static_cast<int>(ev.kind) << " signo " << ev.signo << " "
          << ev.detail << std::hex << " rip " << cpu.regs.rip;
      ASSERT_EQ(cpu.regs.orig_rax, 39u) << done;
      ASSERT_EQ(cpu.regs.rip, kCode + systrap::kSiteSize) << done;
      ASSERT_EQ(cpu.regs.rbx, *want_rbx) << done;
      ASSERT_EQ(cpu.regs.r12, 0x1234u + done) << done;
      cpu.regs.rax = base + done;
      *want_rbx += base + done;
      done++;
    }
    ASSERT_EQ(done, n);
  }

  static Sandbox a_, b_;
  static std::string why_;
};
Sandbox PatchStateTest::a_;
Sandbox PatchStateTest::b_;
std::string PatchStateTest::why_;

TEST_F(PatchStateTest, RestoredSitesAreTheProgramsAndArePatchedAgain) {
  // The sandbox being checkpointed: text, a stack, and a hot site.
  auto m1 = NewMm(a_);
  ASSERT_EQ(m1->Mmap(kCode, kPage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kCode));
  ASSERT_EQ(m1->CopyOut(kCode, kLoop, sizeof(kLoop)),
            static_cast<int64_t>(sizeof(kLoop)));
  ASSERT_EQ(m1->Mprotect(kCode, kPage, PROT_READ | PROT_EXEC), 0);
  ASSERT_EQ(m1->Mmap(kData, kPage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED),
            static_cast<int64_t>(kData));
  CpuState cpu;
  cpu.regs.rip = kCode;
  cpu.regs.rsp = kData + kPage - 256;
  cpu.regs.eflags = 0x202;
  uint64_t want_rbx = 0;
  {
    auto ctx = a_.platform->NewContext();
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    Run(**ctx, *m1, cpu, 3 * systrap::kPatchThreshold, 1000, &want_rbx);
    (*ctx)->Release();
  }
  ASSERT_EQ(m1->NumPatchedSites(), 1u);
  ASSERT_EQ(Site(*m1)[0], '\xff');  // jmp *entry

  // Save: the record goes with the MM.
  pb::State st;
  MemoryPages pages(a_.mf->Internal(0));
  auto save = [&]() -> absl::Status {
    st.Clear();
    Saver s(&st, &pages);
    MmState saver;
    return s
        .Save<mm::MM, pb::Mm>(m1.get(), st.mutable_mms(),
                              [&](pb::Mm* r) { return saver.SaveMm(s, *m1, r); })
        .status();
  };
  ASSERT_TRUE(save().ok());
  ASSERT_EQ(st.mms(0).patched_sites_size(), 1);
  EXPECT_EQ(st.mms(0).patched_sites(0).site(), kCode);
  EXPECT_EQ(st.mms(0).patched_sites(0).original(), Original());
  EXPECT_EQ(st.mms(0).patch_table(), kTable);

  // As if another Sentry build had written the table: every entry's
  // pointer to the stub's common entry (+40) names nothing in this one.
  // A restore that kept the site patched would jump there.
  bool found = false;
  for (const pb::Pma& p : st.mms(0).pmas()) {
    if (p.start() > kTable || p.end() <= kTable) continue;
    uint8_t* t = a_.mf->Internal(p.memfile_offset() + (kTable - p.start()));
    uint64_t used;
    std::memcpy(&used, t, sizeof(used));
    ASSERT_GE(used, 2u);
    for (uint64_t e = 1; e < used; e++) {
      const uint64_t bogus = 0xdead0000;
      std::memcpy(t + e * systrap::kPatchEntrySize + 40, &bogus, 8);
    }
    found = true;
  }
  ASSERT_TRUE(found);
  ASSERT_TRUE(save().ok());  // with the changed table

  // Restore into the other sandbox.
  Loader l(&st, &pages, b_.mf.get());
  MmState loading;
  auto loaded = l.Load<mm::MM, pb::Mm>(1, st.mms(), "mm", [&](const pb::Mm& r) {
    auto as = b_.platform->NewAddressSpace();
    if (!as.ok()) return absl::StatusOr<std::shared_ptr<mm::MM>>(as.status());
    return loading.LoadMmInto(l, r, b_.mf.get(), std::move(as).value(),
                              b_.platform->MinUserAddress(),
                              b_.platform->MaxUserAddress(), nullptr);
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  mm::MM& m2 = **loaded;
  EXPECT_EQ(Site(m2), Original());
  EXPECT_EQ(m2.NumPatchedSites(), 0u);
  EXPECT_NE(m2.DebugString().find("[sbx-patch]"), std::string::npos);

  // The program goes on where it stopped, and the restoring Sentry
  // patches the site again (a new entry after the old ones).
  auto ctx = b_.platform->NewContext();
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  Run(**ctx, m2, cpu, 3 * systrap::kPatchThreshold, 5000, &want_rbx);
  EXPECT_EQ(m2.NumPatchedSites(), 1u);
  EXPECT_EQ(Site(m2)[0], '\xff');

  // munmap of the table gives the site back, and the program goes on.
  ASSERT_EQ(m2.Munmap(kTable, systrap::kPatchTableEnd - kTable), 0);
  EXPECT_EQ(Site(m2), Original());
  EXPECT_EQ(m2.NumPatchedSites(), 0u);
  Run(**ctx, m2, cpu, 4, 9000, &want_rbx);
  (*ctx)->Release();
}

TEST_F(PatchStateTest, BadRecordsFailTheLoad) {
  // A site outside every mapping, and a table that is not a VMA.
  auto m1 = NewMm(a_);
  pb::State st;
  MemoryPages pages(a_.mf->Internal(0));
  {
    Saver s(&st, &pages);
    MmState saver;
    auto saved = s.Save<mm::MM, pb::Mm>(
        m1.get(), st.mutable_mms(),
        [&](pb::Mm* r) { return saver.SaveMm(s, *m1, r); });
    ASSERT_TRUE(saved.ok()) << saved.status();
  }
  auto load = [&](const pb::State& image) {
    Loader l(&image, &pages, b_.mf.get());
    MmState loading;
    return l
        .Load<mm::MM, pb::Mm>(
            1, image.mms(), "mm",
            [&](const pb::Mm& r) -> absl::StatusOr<std::shared_ptr<mm::MM>> {
              auto as = b_.platform->NewAddressSpace();
              if (!as.ok()) return as.status();
              return loading.LoadMmInto(l, r, b_.mf.get(), std::move(as).value(),
                                        b_.platform->MinUserAddress(),
                                        b_.platform->MaxUserAddress(), nullptr);
            })
        .status();
  };
  ASSERT_TRUE(load(st).ok());
  pb::State bad = st;
  bad.mutable_mms(0)->set_patch_table(kTable);
  bad.mutable_mms(0)->set_patch_table_len(systrap::kPatchTableEnd - kTable);
  absl::Status s = load(bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("patch table"), std::string::npos) << s;
  bad = st;
  pb::PatchedSite* site = bad.mutable_mms(0)->add_patched_sites();
  site->set_site(kCode);
  site->set_original(Original());
  s = load(bad);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("patched site"), std::string::npos) << s;
}

}  // namespace
}  // namespace sandboxd::state
