#include "platforms/kvm/descriptors.h"

namespace sandboxd::kvm {
namespace {

// Access-byte and flag bits of a segment descriptor.
constexpr uint64_t kAccessed = 1ull << 40;
constexpr uint64_t kReadWrite = 1ull << 41;  // readable code / writable data
constexpr uint64_t kExecutable = 1ull << 43;
constexpr uint64_t kCodeOrData = 1ull << 44;  // S: not a system descriptor
constexpr uint64_t kPresent = 1ull << 47;
constexpr uint64_t kLong = 1ull << 53;
constexpr uint64_t kDefault32 = 1ull << 54;
constexpr uint64_t kGranularity4K = 1ull << 55;
// Limit 0xfffff with 4 KiB granularity: the whole 4 GiB (for 32-bit code).
constexpr uint64_t kFlatLimit = 0xffffull | (0xfull << 48);

uint64_t Dpl(int dpl) { return static_cast<uint64_t>(dpl & 3) << 45; }

}  // namespace

uint64_t CodeSegment64(int dpl) {
  return kAccessed | kReadWrite | kExecutable | kCodeOrData | kPresent |
         kLong | kGranularity4K | kFlatLimit | Dpl(dpl);
}

uint64_t CodeSegment32(int dpl) {
  return kAccessed | kReadWrite | kExecutable | kCodeOrData | kPresent |
         kDefault32 | kGranularity4K | kFlatLimit | Dpl(dpl);
}

uint64_t DataSegment(int dpl) {
  return kAccessed | kReadWrite | kCodeOrData | kPresent | kDefault32 |
         kGranularity4K | kFlatLimit | Dpl(dpl);
}

SystemDescriptor TssDescriptor(uint64_t base, uint32_t limit) {
  SystemDescriptor d;
  d.low = (limit & 0xffffull) | ((base & 0xffffffull) << 16) |
          (0x9ull << 40) /* available 64-bit TSS */ | kPresent |
          (static_cast<uint64_t>((limit >> 16) & 0xf) << 48) |
          (((base >> 24) & 0xffull) << 56);
  d.high = base >> 32;
  return d;
}

uint64_t SystemDescriptorBase(const SystemDescriptor& d) {
  return ((d.low >> 16) & 0xffffffull) | (((d.low >> 56) & 0xffull) << 24) |
         (d.high << 32);
}

IdtGate InterruptGate(uint64_t handler, uint16_t selector, int dpl, int ist) {
  IdtGate g;
  g.low = (handler & 0xffffull) | (static_cast<uint64_t>(selector) << 16) |
          (static_cast<uint64_t>(ist & 7) << 32) | (0xeull << 40) |
          Dpl(dpl) | kPresent | (((handler >> 16) & 0xffffull) << 48);
  g.high = handler >> 32;
  return g;
}

uint64_t GateHandler(const IdtGate& g) {
  return (g.low & 0xffffull) | (((g.low >> 48) & 0xffffull) << 16) |
         (g.high << 32);
}

void BuildGdt(uint64_t gdt[kGdtEntries], uint64_t tss_base) {
  for (size_t i = 0; i < kGdtEntries; ++i) gdt[i] = 0;
  gdt[kKernelCs / 8] = CodeSegment64(0);
  gdt[kKernelDs / 8] = DataSegment(0);
  gdt[kUser32Cs / 8] = CodeSegment32(3);
  gdt[kUserDs / 8] = DataSegment(3);
  gdt[kUserCs / 8] = CodeSegment64(3);
  const SystemDescriptor tss = TssDescriptor(tss_base, sizeof(Tss64) - 1);
  gdt[kTss / 8] = tss.low;
  gdt[kTss / 8 + 1] = tss.high;
}

}  // namespace sandboxd::kvm
