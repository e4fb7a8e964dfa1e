#include "platforms/kvm/cpuid.h"

#include <errno.h>
#include <sys/ioctl.h>


#include "base/status_macros.h"
#include "platforms/kvm/kvm_abi.h"

namespace sandboxd::kvm {

absl::StatusOr<CpuidEntries> SupportedCpuid(int kvm_fd) {
  // KVM fails with E2BIG until the buffer is large enough.
  for (uint32_t n = 128; n <= 4096; n *= 2) {
    KvmCpuid2Buffer c(n);
    if (ioctl(kvm_fd, kKvmGetSupportedCpuid, c.get()) == 0) {
      return CpuidEntries(c.entries(), c.entries() + *c.nent());
    }
    if (errno != E2BIG) return ErrnoStatus("KVM_GET_SUPPORTED_CPUID", errno);
  }
  return absl::InternalError("KVM_GET_SUPPORTED_CPUID: more than 4096 entries");
}

CpuidEntries FilterCpuid(CpuidEntries entries, Flavour flavour) {
  using namespace cpuid_bits;
  for (kvm_cpuid_entry2& e : entries) {
    switch (e.function) {
      case 1:
        // No nested virtualization, no MONITOR/MWAIT (the stub never
        // idles in the guest), and say that this is a virtual machine.
        e.ecx &= ~(kLeaf1EcxVmx | kLeaf1EcxMonitor);
        e.ecx |= kLeaf1EcxHypervisor;
        break;
      case 7:
        if (e.index != 0) break;
        // The stub enables neither protection keys nor 5-level paging.
        e.ecx &= ~(kLeaf7EcxPku | kLeaf7EcxOspke | kLeaf7EcxLa57);
        if (flavour == Flavour::kPvm) {
          // Not supported by PVM ("X86 PVM Specification", CPUID).
          e.ebx &= ~kLeaf7EbxSmap;
          e.ecx &= ~kLeaf7EcxCetSs;
          e.edx &= ~kLeaf7EdxCetIbt;
        }
        break;
      case 0x80000001:
        e.ecx &= ~kExt1EcxSvm;
        break;
      default:
        break;
    }
  }
  return entries;
}

const kvm_cpuid_entry2* FindCpuid(const CpuidEntries& entries,
                                  uint32_t function, uint32_t index) {
  for (const kvm_cpuid_entry2& e : entries) {
    if (e.function != function) continue;
    if ((e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX) && e.index != index) {
      continue;
    }
    return &e;
  }
  return nullptr;
}

uint32_t XsaveSize(const CpuidEntries& entries) {
  const kvm_cpuid_entry2* d = FindCpuid(entries, 0xd, 0);
  if (d == nullptr || d->ecx < 512) return 512;
  return d->ecx;
}

}  // namespace sandboxd::kvm
