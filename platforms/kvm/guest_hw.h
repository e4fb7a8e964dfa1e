// The hardware-KVM (VMX/SVM) flavour of the guest stub: a real ring 0
// with its own GDT, IDT and TSS, a SYSCALL entry at MSR_LSTAR, and
// exception entries that exit to the host. Hand-assembled, as the PVM stub
// (stub_pvm.h); the bytes are listed with their disassembly.
//
// The stub region is the same 2 MiB at kStubVa as PVM's, mapped in every
// address space, but supervisor-only (U/S clear: the program cannot read
// or write it; on real hardware ring 0 runs there, unlike on PVM):
//
//   +0x0000  code page
//              0x000 SYSCALL entry (MSR_LSTAR):
//                      out %al,$0xe1   -> KVM_EXIT_IO: the syscall
//                      sysretq         <- the host resumes here with RAX
//                                         the result, RCX/R11 the return
//                                         RIP/RFLAGS
//              0x100 + 8*v  entry of exception vector v (0..31):
//                      out %al,$(0x80+v)  -> KVM_EXIT_IO: exception v
//                      hlt                   (never resumed: the host
//                                            re-enters user mode itself)
//   +0x1000  GDT (kGdtEntries words) at +0, IDT (32 gates) at +0x100
//   +0x2000 + 0x2000*i  vCPU i: its TSS (one page), then its exception
//                      stack (one page; TSS.IST1 = its top)
//
// Every IDT gate uses IST 1, so an exception frame is always at the top of
// the vCPU's own stack, whether it came from user mode or from the stub:
// the host reads it there (ExceptionFrame) through the private memory.
// SYSCALL switches no stack and the stub touches none. OUT at CPL 0 with
// IOPL 0 needs no I/O bitmap (the PVM stub's TSS bitmap is for CPL 3).
//
// Not run on this project's hosts (no VMX/SVM): the probe (probe.cc,
// RunHardwareProbe) is the judge where hardware KVM exists.
#ifndef SANDBOXD_PLATFORMS_KVM_GUEST_HW_H_
#define SANDBOXD_PLATFORMS_KVM_GUEST_HW_H_

#include <linux/kvm.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "platforms/kvm/descriptors.h"
#include "platforms/kvm/page_tables.h"
#include "platforms/kvm/stub_pvm.h"
#include "platforms/kvm/vm.h"

namespace sandboxd::kvm::hw {

inline constexpr uint64_t kSyscallEntry = 0x0;
inline constexpr uint64_t kSysretAt = 0x2;  // right after the OUT
inline constexpr uint64_t kVectorEntries = 0x100;
inline constexpr uint64_t kVectorEntrySize = 8;
inline constexpr int kVectors = 32;
inline constexpr uint8_t kExceptionPortBase = 0x80;  // + vector

inline constexpr uint64_t kTablesOffset = 0x1000;
inline constexpr uint64_t kGdtOffset = kTablesOffset;
inline constexpr uint64_t kIdtOffset = kTablesOffset + 0x100;
inline constexpr uint64_t kVcpuAreaOffset = 0x2000;
inline constexpr uint64_t kVcpuAreaSize = 0x2000;  // TSS page + stack page
// vCPUs whose TSS and stack fit in the 2 MiB region.
inline constexpr int kMaxVcpus =
    static_cast<int>(((2ull << 20) - kVcpuAreaOffset) / kVcpuAreaSize);

// The stub region's pages before the vCPU areas, and all of it for `vcpus`.
inline constexpr uint64_t kFixedBytes = kVcpuAreaOffset;
constexpr uint64_t RegionBytes(int vcpus) {
  return kVcpuAreaOffset + kVcpuAreaSize * static_cast<uint64_t>(vcpus);
}
// Guest-virtual addresses of vCPU i's TSS and of its stack's top.
constexpr uint64_t TssVa(int vcpu) {
  return kStubVa + kVcpuAreaOffset + kVcpuAreaSize * static_cast<uint64_t>(vcpu);
}
constexpr uint64_t StackTopVa(int vcpu) { return TssVa(vcpu) + kVcpuAreaSize; }

// MSR_SYSCALL_MASK: SYSCALL clears TF, IF, DF, NT and AC, as Linux's.
inline constexpr uint64_t kSyscallMask =
    (1u << 8) | (1u << 9) | (1u << 10) | (1u << 14) | (1u << 18);

// Whether the CPU pushes an error code for vector v.
bool HasErrorCode(int vector);

// Writes the whole region for `vcpus` vCPUs into `region` (its host view,
// RegionBytes(vcpus) bytes, zeroed): code, GDT, IDT, each vCPU's TSS.
absl::Status WriteStubRegion(uint8_t* region, int vcpus);

// Takes RegionBytes(vcpus) of contiguous pages from a fresh `mem` (its
// first allocations) and writes the region there; returns its
// guest-physical address.
absl::StatusOr<uint64_t> AllocStubRegion(PrivateMemory* mem, int vcpus);

// MSR_STAR, MSR_LSTAR and MSR_SYSCALL_MASK of StubMsrs on `v`.
absl::Status InitVcpu(const Vcpu& v);

// Maps the region (at guest-physical `phys`, contiguous) at kStubVa in
// `pt`: the code page read+execute, the rest read+write, none of it user.
absl::Status MapStubRegion(PageTables* pt, uint64_t phys, int vcpus);

// The segment and control registers of 64-bit user mode for vCPU `vcpu`,
// over `s` (what KVM_GET_SREGS returned): CS=0x33, SS=0x2b, the stub's
// GDT, IDT and the vCPU's TSS, paging with root `cr3`.
void UserSregs(kvm_sregs* s, int vcpu, uint64_t cr3, uint64_t fs_base,
               uint64_t gs_base);

// The MSR values the stub relies on (index, value), for KVM_SET_MSRS.
struct Msr {
  uint32_t index;
  uint64_t value;
};
inline constexpr size_t kMsrCount = 3;
void StubMsrs(Msr out[kMsrCount]);

// What an exit of the stub means.
struct Exit {
  enum class Kind {
    kSyscall,    // RAX the number, RCX/R11 the return RIP/RFLAGS
    kException,  // `vector`, the frame's fields below
    kOther,      // not the stub's: the caller describes it
  };
  Kind kind = Kind::kOther;
  int vector = -1;
  uint64_t error_code = 0;
  // The exception frame: where and in what state the exception happened.
  uint64_t rip = 0, cs = 0, rflags = 0, rsp = 0, ss = 0;
  bool from_user = false;  // CPL 3 in the frame's CS
};

// The last kFrameWords words of a vCPU's stack, where every exception
// frame is: [0] the error code (when HasErrorCode), [1] RIP, [2] CS,
// [3] RFLAGS, [4] RSP, [5] SS.
inline constexpr size_t kFrameWords = 6;

// Decodes the exit in `run`. `rip` is the guest's RIP after the exit
// (synced registers: the OUT's own on VMX/SVM, which skip it at the next
// KVM_RUN; past it where the OUT was emulated); `frame` is the host view of
// the vCPU's last stack words (above), read only for exceptions.
Exit DecodeExit(const kvm_run& run, uint64_t rip, const uint64_t* frame);

}  // namespace sandboxd::kvm::hw

#endif  // SANDBOXD_PLATFORMS_KVM_GUEST_HW_H_
