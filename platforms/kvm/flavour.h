// Which kind of KVM this is, which decides the guest stub's flavour.
//
// Hardware KVM (kvm_intel/kvm_amd) runs the stub in real ring 0 with its
// own GDT, IDT, TSS and SYSCALL entry. PVM (kvm_pvm) runs the guest at
// hardware CPL 3 on shadow page tables and has its own entry ABI. What
// tells them apart, in order:
//   1. the host CPU's VMX (CPUID.1:ECX[5]) or SVM (CPUID.80000001H:ECX[2])
//      flag: with either, /dev/kvm is hardware KVM;
//   2. without them, PVM's identification MSR: on this project's hosts
//      host-side KVM_GET_MSRS of 0x4b564d11 returns the PVM signature
//      0x4d5650 ("PVM"). (The published PVM series answer the same
//      signature through CPUID leaves that only a guest can read, and
//      their MSR numbers differ between revisions; see README.md.)
// Neither: kNone, and the platform is not offered.
#ifndef SANDBOXD_PLATFORMS_KVM_FLAVOUR_H_
#define SANDBOXD_PLATFORMS_KVM_FLAVOUR_H_

#include <cstdint>
#include <optional>
#include <string>

namespace sandboxd::kvm {

enum class Flavour { kNone, kHardware, kPvm };
const char* FlavourName(Flavour f);

inline constexpr uint32_t kMsrPvmSignature = 0x4b564d11;
inline constexpr uint32_t kPvmSignature = 0x4d5650;  // "PVM"
// The one PVM MSR a guest can write on this project's hosts: the
// guest-physical address of the vCPU struct (PVCS), page aligned.
inline constexpr uint32_t kMsrPvmVcpuStruct = 0x4b564d10;

struct FlavourInfo {
  Flavour flavour = Flavour::kNone;
  std::string reason;  // one line: what decided it
};

// The decision itself, from what was observed (unit-tested).
FlavourInfo ClassifyFlavour(bool host_vmx, bool host_svm,
                            std::optional<uint64_t> pvm_signature_msr);

// Observes the host CPU and `kvm_fd` (/dev/kvm). Creates and destroys a
// scratch VM with one vCPU to read the MSR.
FlavourInfo DetectFlavour(int kvm_fd);

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_FLAVOUR_H_
