#include "platforms/kvm/guest_pvm.h"

#include <sys/ioctl.h>

#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "platforms/kvm/descriptors.h"
#include "platforms/kvm/stub_pvm.h"

namespace sandboxd::kvm {

absl::Status InstallPvmStub(PrivateMemory* mem, PageTables* pt) {
  ASSIGN_OR_RETURN(uint64_t phys, WritePvmStubPage(mem));
  return MapPvmStub(pt, phys);
}

absl::Status MapPvmStub(PageTables* pt, uint64_t phys) {
  return Annotate(
      pt->Map(kStubVa, phys, k4K,
              PteAccess{.write = false, .exec = true,
                        .user = kStubPagesNeedUser}),
      "mapping the PVM stub");
}

absl::StatusOr<uint64_t> WritePvmStubPage(PrivateMemory* mem) {
  ASSIGN_OR_RETURN(TablePage page, mem->AllocPage());
  auto* bytes = reinterpret_cast<uint8_t*>(page.host);
  std::memcpy(bytes + kStubSyscallEntry, kStubCode, sizeof(kStubCode));
  Tss64 tss = {};
  tss.iomap_base = sizeof(Tss64);
  std::memcpy(bytes + kStubTss, &tss, sizeof(tss));
  uint8_t* bitmap = bytes + kStubTss + sizeof(Tss64);
  std::memset(bitmap, 0xff, kStubIoBitmapBytes + 1);  // + terminator
  bitmap[kSyscallPort / 8] &= ~(1u << (kSyscallPort % 8));
  return page.phys;
}

absl::Status InitPvmVcpu(const Vcpu& v) {
  RETURN_IF_ERROR(v.SetMsr(kMsrStar, kStar));
  RETURN_IF_ERROR(v.SetMsr(kMsrLstar, kStubVa + kStubSyscallEntry));
  // Interrupts stay as they were in user mode: the stub exits at once.
  return v.SetMsr(kMsrSyscallMask, 0);
}

namespace {

kvm_segment Segment(uint16_t selector, bool code) {
  kvm_segment s = {};
  s.base = 0;
  s.limit = 0xffffffff;
  s.selector = selector;
  s.type = code ? 0xb : 0x3;  // execute/read accessed : read/write accessed
  s.present = 1;
  s.dpl = selector & 3;
  s.db = code ? 0 : 1;
  s.s = 1;
  s.l = code ? 1 : 0;
  s.g = 1;
  return s;
}

}  // namespace

void UserModeSregs(kvm_sregs* s, uint64_t cr3, uint64_t fs_base,
                   uint64_t gs_base) {
  s->cr0 = kCr0;
  s->cr3 = cr3;
  s->cr4 = kCr4;
  s->efer = kEfer;
  s->cs = Segment(kUserCs, true);
  s->ss = Segment(kUserDs, false);
  s->ds = s->es = s->ss;
  // Programs see null DS/ES/FS/GS selectors on Linux; the bases are what
  // matters (FS for TLS).
  s->ds.selector = s->es.selector = 0;
  s->fs = s->gs = s->ss;
  s->fs.selector = s->gs.selector = 0;
  s->fs.base = fs_base;
  s->gs.base = gs_base;
  std::memset(&s->ldt, 0, sizeof(s->ldt));
  s->tr = {};
  s->tr.present = 1;
  s->tr.type = 11;  // busy 64-bit TSS
  s->tr.selector = kTss;
  s->tr.base = kStubVa + kStubTss;
  s->tr.limit = kStubTssLimit;
}

const char* ExitName(uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_IO:
      return "IO";
    case KVM_EXIT_MMIO:
      return "MMIO";
    case KVM_EXIT_HLT:
      return "HLT";
    case KVM_EXIT_SHUTDOWN:
      return "SHUTDOWN";
    case KVM_EXIT_FAIL_ENTRY:
      return "FAIL_ENTRY";
    case KVM_EXIT_INTERNAL_ERROR:
      return "INTERNAL_ERROR";
    case KVM_EXIT_INTR:
      return "INTR";
    case KVM_EXIT_DEBUG:
      return "DEBUG";
    case KVM_EXIT_HYPERCALL:
      return "HYPERCALL";
    default:
      return "other";
  }
}

std::string DescribeExit(const Vcpu& v, uint32_t reason) {
  kvm_regs r = {};
  kvm_sregs s = {};
  kvm_vcpu_events ev = {};
  (void)v.GetRegs(&r);
  (void)v.GetSregs(&s);
  ioctl(v.fd(), KVM_GET_VCPU_EVENTS, &ev);
  std::string d = absl::StrFormat(
      "exit %s (%u) rip=%#x rsp=%#x rax=%#x rcx=%#x r11=%#x cs=%#x cr2=%#x "
      "exception=%u error_code=%#x",
      ExitName(reason), reason, r.rip, r.rsp, r.rax, r.rcx, r.r11,
      s.cs.selector, s.cr2, ev.exception.nr, ev.exception.error_code);
  const kvm_run* run = v.run();
  if (reason == KVM_EXIT_IO) {
    absl::StrAppendFormat(&d, " port=%#x %s", run->io.port,
                          run->io.direction == KVM_EXIT_IO_OUT ? "out" : "in");
  } else if (reason == KVM_EXIT_MMIO) {
    absl::StrAppendFormat(&d, " gpa=%#x %s", run->mmio.phys_addr,
                          run->mmio.is_write ? "write" : "read");
  } else if (reason == KVM_EXIT_INTERNAL_ERROR) {
    absl::StrAppendFormat(&d, " suberror=%u", run->internal.suberror);
  } else if (reason == KVM_EXIT_FAIL_ENTRY) {
    absl::StrAppendFormat(
        &d, " hardware_entry_failure_reason=%#x",
        run->fail_entry.hardware_entry_failure_reason);
  }
  return d;
}

}  // namespace sandboxd::kvm
