#include "platforms/kvm/descriptors.h"

#include "gtest/gtest.h"

namespace sandboxd::kvm {
namespace {

// Reference values: what Linux's GDT_ENTRY_INIT produces for the same
// segments (arch/x86/kernel/cpu/common.c, gdt_page), and hand-decoded
// fields from the SDM's descriptor layouts.
TEST(Descriptors, SegmentsMatchLinux) {
  EXPECT_EQ(CodeSegment64(0), 0x00af9b000000ffffull);  // __KERNEL_CS
  EXPECT_EQ(DataSegment(0), 0x00cf93000000ffffull);    // __KERNEL_DS
  EXPECT_EQ(CodeSegment32(3), 0x00cffb000000ffffull);  // __USER32_CS
  EXPECT_EQ(DataSegment(3), 0x00cff3000000ffffull);    // __USER_DS
  EXPECT_EQ(CodeSegment64(3), 0x00affb000000ffffull);  // __USER_CS
}

TEST(Descriptors, StarGivesLinuxSelectors) {
  EXPECT_EQ((kStar >> 32) & 0xffff, kKernelCs);         // SYSCALL CS
  EXPECT_EQ(((kStar >> 32) & 0xffff) + 8, kKernelDs);   // SYSCALL SS
  EXPECT_EQ(((kStar >> 48) | 3) + 16, kUserCs);         // SYSRET CS
  EXPECT_EQ(((kStar >> 48) | 3) + 8, kUserDs);          // SYSRET SS
}

TEST(Descriptors, TssDescriptorFields) {
  const uint64_t base = 0x00007f1234567000ull;
  SystemDescriptor d = TssDescriptor(base, 103);
  EXPECT_EQ(d.low & 0xffff, 103u);                // limit 15:0
  EXPECT_EQ((d.low >> 40) & 0xf, 0x9u);           // available 64-bit TSS
  EXPECT_EQ((d.low >> 44) & 1, 0u);               // S=0: system
  EXPECT_EQ((d.low >> 47) & 1, 1u);               // present
  EXPECT_EQ(SystemDescriptorBase(d), base);
  EXPECT_EQ(d.high, base >> 32);
}

TEST(Descriptors, InterruptGateFields) {
  const uint64_t handler = 0x00007fffdeadbeefull;
  IdtGate g = InterruptGate(handler, kKernelCs, 3, 2);
  EXPECT_EQ(GateHandler(g), handler);
  EXPECT_EQ((g.low >> 16) & 0xffff, kKernelCs);
  EXPECT_EQ((g.low >> 32) & 7, 2u);     // IST
  EXPECT_EQ((g.low >> 40) & 0xf, 0xeu); // interrupt gate
  EXPECT_EQ((g.low >> 45) & 3, 3u);     // DPL
  EXPECT_EQ((g.low >> 47) & 1, 1u);     // present
  EXPECT_EQ(g.high >> 32, 0u);          // reserved
}

TEST(Descriptors, GdtLayout) {
  uint64_t gdt[kGdtEntries];
  BuildGdt(gdt, 0x5000);
  EXPECT_EQ(gdt[0], 0u);
  EXPECT_EQ(gdt[kKernelCs / 8], CodeSegment64(0));
  EXPECT_EQ(gdt[kUserCs / 8], CodeSegment64(3));
  EXPECT_EQ(gdt[kUserDs / 8], DataSegment(3));
  EXPECT_EQ(SystemDescriptorBase({gdt[kTss / 8], gdt[kTss / 8 + 1]}), 0x5000u);
}

}  // namespace
}  // namespace sandboxd::kvm
