// Syscall patching end to end at the platform level: a real stub process,
// a hot `mov $39,%eax; syscall` site, and a CodePatcher standing in for the
// memory manager over one memory file (code, data and table pages).
#include <errno.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "platforms/systrap/systrap.h"

namespace sandboxd::systrap {
namespace {

using platform::CpuState;
using platform::Event;
using platform::Prot;

constexpr uintptr_t kCode = 0x10000;
constexpr uintptr_t kData = 0x20000;
constexpr size_t kPage = 4096;
// A hot syscall site in a loop:
//   site: mov $39,%eax; syscall
//         add %rax,%rbx     (rbx accumulates the results)
//         jmp site
constexpr uint8_t kHotLoop[] = {0xb8, 39, 0, 0, 0, 0x0f, 0x05,
                                0x48, 0x01, 0xc3, 0xeb, 0xf4};
// Memory-file layout: code page, data page, then the 16 table pages.
constexpr off_t kTableOff = 2 * kPage;
constexpr size_t kFileSize = 2 * kPage + (kPatchTableEnd - kPatchTableBase);

// The memory manager's part, over the test's memory file: every address
// is private, the table is mapped into the address space on first use.
class FilePatcher : public platform::CodePatcher {
 public:
  FilePatcher(uint8_t* file, platform::AddressSpace* as, int fd)
      : file_(file), as_(as), fd_(fd) {}
  uint8_t* At(uintptr_t addr) {
    if (addr >= kCode && addr < kCode + kPage) return file_ + (addr - kCode);
    if (addr >= kData && addr < kData + kPage) {
      return file_ + kPage + (addr - kData);
    }
    if (addr >= kPatchTableBase && addr < kPatchTableEnd) {
      return file_ + kTableOff + (addr - kPatchTableBase);
    }
    return nullptr;
  }
  bool ReadCode(uintptr_t addr, void* dst, size_t n) override {
    uint8_t* p = At(addr);
    if (p == nullptr || At(addr + n - 1) != p + n - 1) return false;
    std::memcpy(dst, p, n);
    return true;
  }
  bool PatchCode(uintptr_t site, size_t len, uintptr_t table, size_t table_len,
                 const std::function<bool(uint8_t*, uint8_t*)>& patch,
                 std::function<void(uint8_t*)> unpatch) override {
    if (!table_mapped_) {
      if (!as_->MapFile(table, fd_, kTableOff, table_len, Prot{true, false, true})
               .ok()) {
        return false;
      }
      table_mapped_ = true;
    }
    uint8_t* s = At(site);
    if (s == nullptr || !patch(s, At(table))) return false;
    patched_++;
    return true;
  }
  int patched_ = 0;

 private:
  uint8_t* const file_;
  platform::AddressSpace* const as_;
  const int fd_;
  bool table_mapped_ = false;
};

bool HostHasSyncCore() {
  const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) != 0;
}

class PatchSentryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    memfd_ = memfd_create("patch-sentry-test", 0);
    ASSERT_GE(memfd_, 0);
    ASSERT_EQ(ftruncate(memfd_, kFileSize), 0);
    auto p = Systrap::Create(memfd_);
    ASSERT_TRUE(p.ok()) << p.status();
    platform_ = p->release();
    std::string why;
    patching_ = platform_->set_patching(true, &why);
    if (!patching_) why_ = why;
  }

  void SetUp() override {
    if (!patching_) GTEST_SKIP() << "no syscall patching here: " << why_;
    void* m = mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED,
                   memfd_, 0);
    ASSERT_NE(m, MAP_FAILED);
    file_ = static_cast<uint8_t*>(m);
    std::memset(file_, 0, kFileSize);
    auto as = platform_->NewAddressSpace();
    ASSERT_TRUE(as.ok()) << as.status();
    as_ = std::move(*as);
    ASSERT_TRUE(as_->MapFile(kCode, memfd_, 0, kPage, Prot{true, false, true}).ok());
    ASSERT_TRUE(as_->MapFile(kData, memfd_, kPage, kPage, Prot{true, true, false}).ok());
    patcher_ = std::make_unique<FilePatcher>(file_, as_.get(), memfd_);
    as_->Feature<platform::PatchingAddressSpace>()->SetCodePatcher(patcher_.get());
  }
  void TearDown() override {
    if (as_ != nullptr) {
      as_->Feature<platform::PatchingAddressSpace>()->SetCodePatcher(nullptr);
    }
    if (file_ != nullptr) munmap(file_, kFileSize);
  }

  static CpuState StartAt(uintptr_t rip) {
    CpuState cpu;
    cpu.regs.rip = rip;
    cpu.regs.rsp = kData + kPage - 256;
    cpu.regs.eflags = 0x202;
    return cpu;
  }

  static int memfd_;
  static Systrap* platform_;
  static bool patching_;
  static std::string why_;
  uint8_t* file_ = nullptr;
  std::unique_ptr<platform::AddressSpace> as_;
  std::unique_ptr<FilePatcher> patcher_;
};
int PatchSentryTest::memfd_ = -1;
Systrap* PatchSentryTest::platform_ = nullptr;
bool PatchSentryTest::patching_ = false;
std::string PatchSentryTest::why_;

TEST_F(PatchSentryTest, AHotSiteIsPatchedAndKeepsRegistersAndFlags) {
  std::memcpy(file_, kHotLoop, sizeof(kHotLoop));
  auto ctx = platform_->NewContext();
  ASSERT_TRUE(ctx.ok());
  CpuState cpu = StartAt(kCode);
  const uint64_t patched_before = platform_->stats().patched_sites.load();
  const uint64_t unserialized_before =
      platform_->stats().patch_unserialized.load();
  uint64_t want_rbx = 0;
  cpu.regs.rbx = 0;
  const uint64_t markers[] = {0x1111, 0x2222, 0x3333, 0x4444, 0x5555};
  for (int i = 0; i < 200; i++) {
    cpu.regs.rdx = markers[0] + i;
    cpu.regs.r12 = markers[1] + i;
    cpu.regs.r15 = markers[2] + i;
    cpu.regs.rbp = markers[3] + i;
    cpu.regs.r10 = markers[4] + i;
    const uint64_t rsp = cpu.regs.rsp;
    Event ev = (*ctx)->Switch(*as_, cpu);
    ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << i << " " << ev.detail;
    ASSERT_EQ(cpu.regs.orig_rax, 39u) << i;
    ASSERT_EQ(cpu.regs.rip, kCode + 7) << i;
    ASSERT_EQ(cpu.regs.rcx, kCode + 7) << i;
    ASSERT_EQ(cpu.regs.rsp, rsp) << i;
    if (i > 0) {
      // `add` set the flags from a nonzero sum: ZF clear; what r11 says
      // is the flags the `syscall` saw.
      ASSERT_EQ(cpu.regs.r11 & 0x40, 0u) << i;
      ASSERT_EQ(cpu.regs.eflags & 0x40, 0u) << i;
    }
    ASSERT_EQ(cpu.regs.rbx, want_rbx) << i;
    ASSERT_EQ(cpu.regs.rdx, markers[0] + i) << i;
    ASSERT_EQ(cpu.regs.r12, markers[1] + i) << i;
    ASSERT_EQ(cpu.regs.r15, markers[2] + i) << i;
    ASSERT_EQ(cpu.regs.rbp, markers[3] + i) << i;
    ASSERT_EQ(cpu.regs.r10, markers[4] + i) << i;
    ASSERT_EQ(cpu.regs.gs_base, 0u) << i;  // the slot is never shown
    cpu.regs.rax = 1000 + i;
    want_rbx += 1000 + i;
  }
  EXPECT_EQ(patcher_->patched_, 1);
  EXPECT_EQ(platform_->stats().patched_sites.load(), patched_before + 1);
  // Written with the stub's SYNC_CORE barriers between the steps, where
  // the host has them.
  if (HostHasSyncCore()) {
    EXPECT_EQ(platform_->stats().patch_unserialized.load(),
              unserialized_before);
  }
  // The site is `jmp *entry` into the table now.
  EXPECT_EQ(file_[0], 0xff);
  EXPECT_EQ(file_[kSyscallOffset], kPatchFaultByte);
  (*ctx)->Release();
}

TEST_F(PatchSentryTest, AThreadCaughtOnAPatchedSitesSyscallIsRestarted) {
  // The site, already patched by an earlier round, and a thread sent back
  // onto its `syscall` (rip = site + 5, as a restart does): the SIGILL it
  // takes there is never reported; it reruns the site instead.
  std::memcpy(file_, kHotLoop, sizeof(kHotLoop));
  auto ctx = platform_->NewContext();
  ASSERT_TRUE(ctx.ok());
  CpuState cpu = StartAt(kCode);
  for (int i = 0; i < 40; i++) {
    Event ev = (*ctx)->Switch(*as_, cpu);
    ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  }
  ASSERT_EQ(file_[0], 0xff);
  cpu.regs.rip = kCode + kSyscallOffset;
  cpu.regs.rax = 39;
  Event ev = (*ctx)->Switch(*as_, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.orig_rax, 39u);
  EXPECT_EQ(cpu.regs.rip, kCode + 7);
  // restart_syscall on the same spot is that syscall.
  cpu.regs.rip = kCode + kSyscallOffset;
  cpu.regs.rax = 219;
  ev = (*ctx)->Switch(*as_, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.orig_rax, 219u);
  EXPECT_EQ(cpu.regs.rip, kCode + 7);
  (*ctx)->Release();
}

// What the barriers cost each patched site: two kOpMembarrier requests
// (a control round trip to the stub and the kernel's IPIs to the CPUs
// running its threads). Printed, not checked: the figure depends on the
// machine's load.
TEST_F(PatchSentryTest, SyncCoreCostPerSite) {
  if (!HostHasSyncCore()) GTEST_SKIP() << "the host has no SYNC_CORE barrier";
  auto* stub = dynamic_cast<StubProcess*>(as_.get());
  ASSERT_NE(stub, nullptr);
  ASSERT_EQ(stub->Control(kOpMembarrier,
                          MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE),
            0);
  // Interleaved with a request the stub answers at once (kOpNone:
  // ENOSYS), the round trip without the barrier.
  std::vector<double> barrier, trip;
  auto time_us = [&](ControlOp op, uint64_t cmd, int64_t want) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(stub->Control(op, cmd), want);
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now() - t0)
        .count();
  };
  for (int i = 0; i < 101; i++) {
    barrier.push_back(time_us(
        kOpMembarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0));
    trip.push_back(time_us(kOpNone, 0, -ENOSYS));
  }
  std::sort(barrier.begin(), barrier.end());
  std::sort(trip.begin(), trip.end());
  std::printf("SYNC_CORE barrier through the stub: median %.1f us (p90 "
              "%.1f); control round trip alone %.1f us; per patched site "
              "(2 barriers) ~%.1f us\n",
              barrier[50], barrier[90], trip[50], 2 * barrier[50]);
}

// The patched path with more contexts than workers: the hand-over of a
// patched site takes the next context from the ring, whichever it is, and
// the tail returns to that one. Every context keeps its own registers.
TEST_F(PatchSentryTest, ContextsMoveBetweenWorkersOnThePatchedPath) {
  std::memcpy(file_, kHotLoop, sizeof(kHotLoop));
  auto* stub = static_cast<StubProcess*>(as_.get());
  // Patch the site first: then every trap below comes by the patched path
  // (the fallback's `syscall` in the table would return to the table, not
  // to kCode + 7, which the loop checks).
  {
    auto ctx = platform_->NewContext();
    CpuState cpu = StartAt(kCode);
    for (int i = 0; i < 40 && file_[0] != 0xff; i++) {
      ASSERT_EQ((*ctx)->Switch(*as_, cpu).kind, Event::Kind::kSyscall);
    }
    ASSERT_EQ(file_[0], 0xff);
    (*ctx)->Release();
  }
  constexpr int kContexts = 24, kTraps = 60;
  std::vector<std::thread> threads;
  for (int c = 0; c < kContexts; c++) {
    threads.emplace_back([&, c] {
      auto ctx = platform_->NewContext();
      CpuState cpu = StartAt(kCode);
      cpu.regs.rsp -= 160 * c;  // its own stack: the entry writes 152 below
      uint64_t want_rbx = 0;
      cpu.regs.rbx = 0;
      usleep(300 * c);  // not all at once (see ring_test)
      for (int i = 0; i < kTraps; i++) {
        const uint64_t mark = (static_cast<uint64_t>(c) << 32) | i;
        cpu.regs.r12 = mark;
        cpu.regs.r15 = ~mark;
        const uint64_t rsp = cpu.regs.rsp;
        Event ev = (*ctx)->Switch(*as_, cpu);
        if (ev.kind != Event::Kind::kSyscall || cpu.regs.rip != kCode + 7 ||
            cpu.regs.rsp != rsp || cpu.regs.rbx != want_rbx ||
            cpu.regs.r12 != mark || cpu.regs.r15 != ~mark ||
            cpu.regs.gs_base != 0) {
          ADD_FAILURE() << "context " << c << " trap " << i << ": kind "
                        << static_cast<int>(ev.kind) << " " << ev.detail
                        << " rbx " << cpu.regs.rbx << " want " << want_rbx;
          break;
        }
        cpu.regs.rax = 1000 + c;
        want_rbx += 1000 + c;
        usleep(1000);  // mostly "in the Sentry", as blocked threads are
      }
      (*ctx)->Release();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(stub->workers(), static_cast<uint32_t>(kContexts));
  RecordProperty("workers", static_cast<int>(stub->workers()));
}

}  // namespace
}  // namespace sandboxd::systrap
