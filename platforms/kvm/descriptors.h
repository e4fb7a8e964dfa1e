// x86-64 descriptor tables for the hardware-KVM flavour of the guest stub:
// GDT segment descriptors, the 64-bit TSS and its 16-byte system
// descriptor, and IDT interrupt gates (Intel SDM vol. 3, 3.4.5, 7.2.3,
// 6.14.1). Pure encoding, no KVM. The PVM flavour uses only the TSS (its
// I/O bitmap, see stub_pvm.h) and the selector values.
#ifndef SANDBOXD_PLATFORMS_KVM_DESCRIPTORS_H_
#define SANDBOXD_PLATFORMS_KVM_DESCRIPTORS_H_

#include <cstddef>
#include <cstdint>

namespace sandboxd::kvm {

// The stub's GDT layout. The user selectors are Linux's (0x23, 0x2b,
// 0x33), which SYSRET derives from MSR_STAR and which programs may read
// from %cs and %ss; the kernel ones follow Linux too.
inline constexpr uint16_t kKernelCs = 0x10;
inline constexpr uint16_t kKernelDs = 0x18;
inline constexpr uint16_t kUser32Cs = 0x23;
inline constexpr uint16_t kUserDs = 0x2b;
inline constexpr uint16_t kUserCs = 0x33;
inline constexpr uint16_t kTss = 0x40;  // 16 bytes: GDT entries 8 and 9
inline constexpr size_t kGdtEntries = 10;

// MSR_STAR for the layout above: SYSCALL loads CS=0x10, SS=0x18; SYSRET
// to 64-bit loads CS=0x23+16=0x33, SS=0x23+8=0x2b.
inline constexpr uint64_t kStar =
    (static_cast<uint64_t>(kUser32Cs) << 48) |
    (static_cast<uint64_t>(kKernelCs) << 32);

// A code or data segment descriptor. In 64-bit mode base and limit are
// ignored for CS/SS/DS/ES; only type, DPL, P, L and D matter.
uint64_t CodeSegment64(int dpl);  // L=1, D=0, execute/read
uint64_t CodeSegment32(int dpl);  // L=0, D=1 (compatibility mode)
uint64_t DataSegment(int dpl);    // read/write

// The 64-bit task-state segment (104 bytes): the stacks the CPU switches
// to on an interrupt from user mode (rsp0) or through an IST slot.
struct __attribute__((packed)) Tss64 {
  uint32_t reserved0;
  uint64_t rsp[3];
  uint64_t reserved1;
  uint64_t ist[7];
  uint64_t reserved2;
  uint16_t reserved3;
  uint16_t iomap_base;  // = sizeof(Tss64): no I/O permission bitmap
};
static_assert(sizeof(Tss64) == 104);
static_assert(offsetof(Tss64, rsp) == 4);
static_assert(offsetof(Tss64, ist) == 36);
static_assert(offsetof(Tss64, iomap_base) == 102);

// The two GDT words of an available 64-bit TSS descriptor (type 9).
struct SystemDescriptor {
  uint64_t low;
  uint64_t high;
};
SystemDescriptor TssDescriptor(uint64_t base, uint32_t limit);

// A 64-bit interrupt gate (type 0xE: IF cleared on entry).
struct IdtGate {
  uint64_t low;
  uint64_t high;
};
static_assert(sizeof(IdtGate) == 16);
// `dpl` is who may raise the vector with INT n (3 for int3/into, 0
// otherwise); `ist` selects an IST stack (0: none).
IdtGate InterruptGate(uint64_t handler, uint16_t selector, int dpl, int ist);

// Decoding, for tests and for debugging a guest that triple-faulted.
uint64_t GateHandler(const IdtGate& g);
uint64_t SystemDescriptorBase(const SystemDescriptor& d);

// Fills a complete GDT (kGdtEntries words) for the layout above.
void BuildGdt(uint64_t gdt[kGdtEntries], uint64_t tss_base);

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_DESCRIPTORS_H_
