#include "platforms/kvm/cpuid.h"

#include "gtest/gtest.h"

namespace sandboxd::kvm {
namespace {

using namespace cpuid_bits;

kvm_cpuid_entry2 Entry(uint32_t fn, uint32_t idx, uint32_t a, uint32_t b,
                       uint32_t c, uint32_t d, uint32_t flags = 0) {
  kvm_cpuid_entry2 e = {};
  e.function = fn;
  e.index = idx;
  e.flags = flags;
  e.eax = a;
  e.ebx = b;
  e.ecx = c;
  e.edx = d;
  return e;
}

CpuidEntries Table() {
  return {
      Entry(0, 0, 0xd, 0x68747541, 0x444d4163, 0x69746e65),
      Entry(1, 0, 0xa20f10, 0, kLeaf1EcxVmx | kLeaf1EcxMonitor | 1, 0),
      Entry(7, 0, 0, kLeaf7EbxSmap | 1, kLeaf7EcxPku | kLeaf7EcxOspke |
                kLeaf7EcxLa57 | kLeaf7EcxCetSs | 2,
            kLeaf7EdxCetIbt | 4, KVM_CPUID_FLAG_SIGNIFCANT_INDEX),
      Entry(7, 1, 0, kLeaf7EbxSmap, 0, 0, KVM_CPUID_FLAG_SIGNIFCANT_INDEX),
      Entry(0xd, 0, 0xe7, 0x980, 0xa88, 0, KVM_CPUID_FLAG_SIGNIFCANT_INDEX),
      Entry(0xd, 1, 0xf, 0, 0, 0, KVM_CPUID_FLAG_SIGNIFCANT_INDEX),
      Entry(0x80000001, 0, 0, 0, kExt1EcxSvm | 1, 0),
  };
}

TEST(Cpuid, FilterHidesWhatTheStubDoesNotSetUp) {
  CpuidEntries f = FilterCpuid(Table(), Flavour::kHardware);
  const kvm_cpuid_entry2* l1 = FindCpuid(f, 1);
  ASSERT_NE(l1, nullptr);
  EXPECT_EQ(l1->ecx & (kLeaf1EcxVmx | kLeaf1EcxMonitor), 0u);
  EXPECT_TRUE(l1->ecx & kLeaf1EcxHypervisor);
  EXPECT_TRUE(l1->ecx & 1);  // untouched bits stay
  const kvm_cpuid_entry2* l7 = FindCpuid(f, 7, 0);
  ASSERT_NE(l7, nullptr);
  EXPECT_EQ(l7->ecx & (kLeaf7EcxPku | kLeaf7EcxOspke | kLeaf7EcxLa57), 0u);
  // Hardware KVM keeps SMAP and CET in the table.
  EXPECT_TRUE(l7->ebx & kLeaf7EbxSmap);
  EXPECT_TRUE(l7->ecx & kLeaf7EcxCetSs);
  EXPECT_EQ(FindCpuid(f, 0x80000001)->ecx & kExt1EcxSvm, 0u);
}

TEST(Cpuid, PvmAlsoHidesSmapAndCet) {
  CpuidEntries f = FilterCpuid(Table(), Flavour::kPvm);
  const kvm_cpuid_entry2* l7 = FindCpuid(f, 7, 0);
  ASSERT_NE(l7, nullptr);
  EXPECT_EQ(l7->ebx & kLeaf7EbxSmap, 0u);
  EXPECT_EQ(l7->ecx & kLeaf7EcxCetSs, 0u);
  EXPECT_EQ(l7->edx & kLeaf7EdxCetIbt, 0u);
  EXPECT_EQ(l7->ebx & 1, 1u);
  EXPECT_EQ(l7->ecx & 2, 2u);
  EXPECT_EQ(l7->edx & 4, 4u);
  // Only subleaf 0 of leaf 7 holds those features.
  EXPECT_TRUE(FindCpuid(f, 7, 1)->ebx & kLeaf7EbxSmap);
}

TEST(Cpuid, FindHonoursSignificantIndex) {
  CpuidEntries t = Table();
  EXPECT_EQ(FindCpuid(t, 0xd, 1)->eax, 0xfu);
  EXPECT_EQ(FindCpuid(t, 0xd, 0)->eax, 0xe7u);
  EXPECT_EQ(FindCpuid(t, 0xd, 2), nullptr);
  // Without the flag the index is ignored.
  EXPECT_EQ(FindCpuid(t, 1, 5)->eax, 0xa20f10u);
  EXPECT_EQ(FindCpuid(t, 0x12345), nullptr);
}

TEST(Cpuid, XsaveSize) {
  EXPECT_EQ(XsaveSize(Table()), 0xa88u);
  EXPECT_EQ(XsaveSize({}), 512u);
}

}  // namespace
}  // namespace sandboxd::kvm
