#include "platforms/kvm/stats.h"

#include <linux/kvm.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "platforms/kvm/kvm_platform.h"
#include "platforms/kvm/stub_pvm.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd::kvm {
namespace {

TEST(KvmStatsTest, ClassifyExit) {
  EXPECT_EQ(ClassifyExit(KVM_EXIT_IO, kSyscallPort, 0), ExitKind::kSyscall);
  EXPECT_EQ(ClassifyExit(KVM_EXIT_IO, 0x80, 0), ExitKind::kOther);
  EXPECT_EQ(ClassifyExit(KVM_EXIT_SHUTDOWN, 0, 14), ExitKind::kPageFault);
  EXPECT_EQ(ClassifyExit(KVM_EXIT_SHUTDOWN, 0, 6), ExitKind::kException);
  EXPECT_EQ(ClassifyExit(KVM_EXIT_SHUTDOWN, 0, 13), ExitKind::kException);
  EXPECT_EQ(ClassifyExit(KVM_EXIT_INTR, 0, 0), ExitKind::kInterrupted);
  EXPECT_EQ(ClassifyExit(KVM_EXIT_HLT, 0, 0), ExitKind::kOther);
}

TEST(KvmStatsTest, ToProtoCopiesEveryCounter) {
  Stats s;
  s.CountExit(ExitKind::kSyscall);
  s.CountExit(ExitKind::kSyscall);
  s.CountExit(ExitKind::kPageFault);
  s.CountExit(ExitKind::kException);
  s.CountExit(ExitKind::kInterrupted);
  s.CountExit(ExitKind::kShadowFlush);
  s.CountExit(ExitKind::kShadowFlush);
  s.CountExit(ExitKind::kShadowFlush);
  s.CountExit(ExitKind::kOther);
  s.vm_create_ns = 250000;
  s.vcpu0_create_ns = 270000;
  s.vcpu_pool_fill_ns = 4000000;
  s.CountSlotAdd(30000);
  s.CountSlotAdd(100000);
  s.vcpus = 4;
  control::KvmStats p;
  ToProto(s, &p);
  EXPECT_EQ(p.exits().syscall(), 2u);
  EXPECT_EQ(p.exits().page_fault(), 1u);
  EXPECT_EQ(p.exits().exception(), 1u);
  EXPECT_EQ(p.exits().interrupted(), 1u);
  EXPECT_EQ(p.exits().shadow_flush(), 3u);
  EXPECT_EQ(p.exits().other(), 1u);
  EXPECT_EQ(p.vm_create_nanos(), 250000u);
  EXPECT_EQ(p.vcpu0_create_nanos(), 270000u);
  EXPECT_EQ(p.vcpu_pool_fill_nanos(), 4000000u);
  EXPECT_EQ(p.memslot_adds(), 2u);
  EXPECT_EQ(p.memslot_add_nanos(), 130000u);
  EXPECT_EQ(p.vcpus(), 4u);
}

// The counting itself, on a real VM (skipped where the probe fails).
TEST(KvmStatsTest, PlatformCountsItsExits) {
  int memfd = memfd_create("kvm-stats-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(ftruncate(memfd, 2 * 4096), 0);
  auto p = KvmPlatform::Create(memfd, 1ull << 30);
  if (!p.ok()) GTEST_SKIP() << p.status().message();
  KvmPlatform& k = **p;
  // mov $39,%eax; syscall; ud2
  const std::vector<uint8_t> code = {0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0x0f, 0x0b};
  ASSERT_EQ(pwrite(memfd, code.data(), code.size(), 0),
            static_cast<ssize_t>(code.size()));
  auto as = k.NewAddressSpace();
  ASSERT_TRUE(as.ok()) << as.status();
  ASSERT_TRUE((*as)->MapFile(0x10000, memfd, 0, 4096, platform::Prot{true, false, true}).ok());
  auto ctx = k.NewContext();
  ASSERT_TRUE(ctx.ok()) << ctx.status();

  control::PlatformStats before;
  k.ExportStats(&before);
  platform::CpuState cpu;
  cpu.regs.rip = 0x10000;
  cpu.regs.eflags = 0x202;
  ASSERT_EQ((*ctx)->Switch(**as, cpu).kind, platform::Event::Kind::kSyscall);
  ASSERT_EQ((*ctx)->Switch(**as, cpu).kind, platform::Event::Kind::kException);
  cpu.regs.rip = 0x30000;  // nothing mapped there: #PF
  ASSERT_EQ((*ctx)->Switch(**as, cpu).kind, platform::Event::Kind::kFault);
  (*ctx)->Interrupt();
  ASSERT_EQ((*ctx)->Switch(**as, cpu).kind, platform::Event::Kind::kInterrupted);
  (*ctx)->Release();

  control::PlatformStats after;
  k.ExportStats(&after);
  EXPECT_EQ(after.platform(), "kvm");
  ASSERT_TRUE(after.has_kvm());
  const control::KvmStats& a = after.kvm();
  const control::KvmStats& b = before.kvm();
  EXPECT_EQ(a.exits().syscall() - b.exits().syscall(), 1u);
  EXPECT_EQ(a.exits().exception() - b.exits().exception(), 1u);
  EXPECT_EQ(a.exits().page_fault() - b.exits().page_fault(), 1u);
  EXPECT_EQ(a.exits().other(), 0u);
  EXPECT_EQ(a.flavour(), "pvm");
  EXPECT_GT(a.vm_create_nanos(), 0u);
  EXPECT_GT(a.vcpu0_create_nanos(), 0u);
  // The private slot and the memory file's first chunk.
  EXPECT_GE(a.memslot_adds(), 2u);
  EXPECT_GT(a.memslot_add_nanos(), 0u);
  k.pool()->JoinFiller();
  control::PlatformStats filled;
  k.ExportStats(&filled);
  EXPECT_GT(filled.kvm().vcpu_pool_fill_nanos(), 0u);
  EXPECT_GE(filled.kvm().vcpus(), 4u);
  EXPECT_EQ(filled.kvm().vcpu_pool_free(), filled.kvm().vcpus());
  // Contexts and address spaces go before their platform.
  ctx->reset();
  as->reset();
  p->reset();
  close(memfd);
}

}  // namespace
}  // namespace sandboxd::kvm
