// The CPUID the guest sees: KVM_GET_SUPPORTED_CPUID, filtered.
//
// KVM reports what it can virtualize; the stub and the application need
// less, and some of it must not be offered at all: features the stub does
// not set up (protection keys, 5-level paging), nested virtualization, and
// on PVM what its specification says is not supported (SMAP, CET).
// Application code reads CPUID natively in user mode on PVM and on most
// hardware (no CPUID faulting), so this table matters mostly to the
// Sentry's own decisions (xsave size) and to hardware-KVM guests.
#ifndef SANDBOXD_PLATFORMS_KVM_CPUID_H_
#define SANDBOXD_PLATFORMS_KVM_CPUID_H_

#include <linux/kvm.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "platforms/kvm/flavour.h"

namespace sandboxd::kvm {

using CpuidEntries = std::vector<kvm_cpuid_entry2>;

// KVM_GET_SUPPORTED_CPUID on the /dev/kvm fd.
absl::StatusOr<CpuidEntries> SupportedCpuid(int kvm_fd);

// Returns `supported` with the features above removed and the hypervisor
// bit set. Leaves that are absent stay absent.
CpuidEntries FilterCpuid(CpuidEntries supported, Flavour flavour);

// The entry for (function, index), or nullptr.
const kvm_cpuid_entry2* FindCpuid(const CpuidEntries& entries,
                                  uint32_t function, uint32_t index = 0);

// Size in bytes of the XSAVE area for every feature the table enables
// (CPUID.(EAX=0DH,ECX=0):ECX), or 512 (FXSAVE) when there is no leaf 0xD.
uint32_t XsaveSize(const CpuidEntries& entries);

// Bits this filter clears, by leaf and register, for tests and docs.
namespace cpuid_bits {
inline constexpr uint32_t kLeaf1EcxVmx = 1u << 5;
inline constexpr uint32_t kLeaf1EcxMonitor = 1u << 3;
inline constexpr uint32_t kLeaf1EcxHypervisor = 1u << 31;
inline constexpr uint32_t kLeaf7EbxSmap = 1u << 20;
inline constexpr uint32_t kLeaf7EcxPku = 1u << 3;
inline constexpr uint32_t kLeaf7EcxOspke = 1u << 4;
inline constexpr uint32_t kLeaf7EcxCetSs = 1u << 7;
inline constexpr uint32_t kLeaf7EcxLa57 = 1u << 16;
inline constexpr uint32_t kLeaf7EdxCetIbt = 1u << 20;
inline constexpr uint32_t kExt1EcxSvm = 1u << 2;
}  // namespace cpuid_bits

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_CPUID_H_
