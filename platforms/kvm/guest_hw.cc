#include "platforms/kvm/guest_hw.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "platforms/kvm/guest_pvm.h"

namespace sandboxd::kvm::hw {

bool HasErrorCode(int vector) {
  switch (vector) {
    case 8:   // #DF
    case 10:  // #TS
    case 11:  // #NP
    case 12:  // #SS
    case 13:  // #GP
    case 14:  // #PF
    case 17:  // #AC
    case 21:  // #CP
    case 29:  // #VC
    case 30:  // #SX
      return true;
    default:
      return false;
  }
}

absl::Status WriteStubRegion(uint8_t* region, int vcpus) {
  if (vcpus < 1 || vcpus > kMaxVcpus) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kvm hardware stub: %d vCPUs (1..%d fit its region)", vcpus, kMaxVcpus));
  }
  // SYSCALL entry: out %al,$0xe1 (e6 e1); sysretq (48 0f 07).
  const uint8_t entry[] = {0xe6, kSyscallPort, 0x48, 0x0f, 0x07};
  std::memcpy(region + kSyscallEntry, entry, sizeof(entry));
  // Exception entries: out %al,$(0x80+v) (e6 xx); hlt (f4); int3 padding.
  for (int v = 0; v < kVectors; ++v) {
    uint8_t* e = region + kVectorEntries + kVectorEntrySize * v;
    std::memset(e, 0xcc, kVectorEntrySize);
    e[0] = 0xe6;
    e[1] = static_cast<uint8_t>(kExceptionPortBase + v);
    e[2] = 0xf4;
  }
  // GDT: its TSS descriptor is vCPU 0's; the others' TR is loaded through
  // KVM_SET_SREGS (the hidden base), never with LTR.
  uint64_t gdt[kGdtEntries];
  BuildGdt(gdt, TssVa(0));
  std::memcpy(region + kGdtOffset, gdt, sizeof(gdt));
  // IDT: every vector through IST 1; int3 and into may come from user mode.
  for (int v = 0; v < kVectors; ++v) {
    const uint64_t handler = kStubVa + kVectorEntries + kVectorEntrySize * v;
    const int dpl = (v == 3 || v == 4) ? 3 : 0;
    const IdtGate g = InterruptGate(handler, kKernelCs, dpl, /*ist=*/1);
    std::memcpy(region + kIdtOffset + sizeof(IdtGate) * v, &g, sizeof(g));
  }
  for (int i = 0; i < vcpus; ++i) {
    Tss64 tss = {};
    tss.rsp[0] = StackTopVa(i);
    tss.ist[0] = StackTopVa(i);
    tss.iomap_base = sizeof(Tss64);  // no I/O bitmap: CPL 0 needs none
    std::memcpy(region + (TssVa(i) - kStubVa), &tss, sizeof(tss));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> AllocStubRegion(PrivateMemory* mem, int vcpus) {
  const uint64_t pages = RegionBytes(vcpus) / k4K;
  uint64_t first = 0;
  for (uint64_t i = 0; i < pages; ++i) {
    ASSIGN_OR_RETURN(TablePage p, mem->AllocPage());
    if (i == 0) first = p.phys;
    if (p.phys != first + i * k4K) {
      return absl::FailedPreconditionError(
          "kvm hardware stub: its region needs contiguous private pages");
    }
  }
  RETURN_IF_ERROR(WriteStubRegion(
      reinterpret_cast<uint8_t*>(mem->HostOf(first)), vcpus));
  return first;
}

absl::Status InitVcpu(const Vcpu& v) {
  Msr m[kMsrCount];
  StubMsrs(m);
  for (const Msr& x : m) RETURN_IF_ERROR(v.SetMsr(x.index, x.value));
  return absl::OkStatus();
}

absl::Status MapStubRegion(PageTables* pt, uint64_t phys, int vcpus) {
  RETURN_IF_ERROR(pt->Map(kStubVa, phys, k4K,
                          PteAccess{.write = false, .exec = true, .user = false}));
  return pt->Map(kStubVa + k4K, phys + k4K, RegionBytes(vcpus) - k4K,
                 PteAccess{.write = true, .exec = false, .user = false});
}

void UserSregs(kvm_sregs* s, int vcpu, uint64_t cr3, uint64_t fs_base,
               uint64_t gs_base) {
  // User mode as the PVM flavour sets it up; then what a ring-0 stub adds:
  // no LDT, this vCPU's TSS, the stub's GDT and IDT.
  UserModeSregs(s, cr3, fs_base, gs_base);
  s->ldt.unusable = 1;
  s->tr.base = TssVa(vcpu);
  s->tr.limit = sizeof(Tss64) - 1;
  s->gdt.base = kStubVa + kGdtOffset;
  s->gdt.limit = kGdtEntries * 8 - 1;
  s->idt.base = kStubVa + kIdtOffset;
  s->idt.limit = kVectors * sizeof(IdtGate) - 1;
}

void StubMsrs(Msr out[kMsrCount]) {
  out[0] = {kMsrStar, kStar};
  out[1] = {kMsrLstar, kStubVa + kSyscallEntry};
  out[2] = {kMsrSyscallMask, kSyscallMask};
}

namespace {

// Whether `rip` is at the 2-byte OUT at `out_va` or just past it: VMX and
// SVM report the OUT's own RIP and skip it at the next KVM_RUN
// (complete_fast_pio_out); an emulated OUT is reported past.
bool AtOut(uint64_t rip, uint64_t out_va) {
  return rip == out_va || rip == out_va + 2;
}

}  // namespace

Exit DecodeExit(const kvm_run& run, uint64_t rip, const uint64_t* frame) {
  Exit e;
  if (run.exit_reason != KVM_EXIT_IO || run.io.direction != KVM_EXIT_IO_OUT) {
    return e;
  }
  if (run.io.port == kSyscallPort) {
    if (AtOut(rip, kStubVa + kSyscallEntry)) e.kind = Exit::Kind::kSyscall;
    return e;
  }
  const int v = static_cast<int>(run.io.port) - kExceptionPortBase;
  if (v < 0 || v >= kVectors ||
      !AtOut(rip, kStubVa + kVectorEntries + kVectorEntrySize * v)) {
    return e;  // an OUT that is not the stub's
  }
  e.kind = Exit::Kind::kException;
  e.vector = v;
  e.error_code = HasErrorCode(v) ? frame[0] : 0;
  e.rip = frame[1];
  e.cs = frame[2];
  e.rflags = frame[3];
  e.rsp = frame[4];
  e.ss = frame[5];
  e.from_user = (e.cs & 3) == 3;
  return e;
}

}  // namespace sandboxd::kvm::hw
