// Setting up a vCPU for the PVM flavour: the stub page, the MSRs the stub
// relies on, and the segment state of application (user) mode.
#ifndef SANDBOXD_PLATFORMS_KVM_GUEST_PVM_H_
#define SANDBOXD_PLATFORMS_KVM_GUEST_PVM_H_

#include <linux/kvm.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "platforms/kvm/page_tables.h"
#include "platforms/kvm/vm.h"

namespace sandboxd::kvm {

// Control registers of the guest: paging with PAE and NX, SSE/AVX state
// (OSFXSR, OSXMMEXCPT, OSXSAVE) and FSGSBASE, as a Linux host gives its
// processes.
inline constexpr uint64_t kCr0 = 0x80050033;  // PG AM WP NE ET MP PE
inline constexpr uint64_t kCr4 = (1u << 5) | (1u << 9) | (1u << 10) |
                                 (1u << 16) | (1u << 18);
inline constexpr uint64_t kEfer = 0xd01;  // NXE LMA LME SCE
inline constexpr uint32_t kMsrStar = 0xc0000081;
inline constexpr uint32_t kMsrLstar = 0xc0000082;
inline constexpr uint32_t kMsrSyscallMask = 0xc0000084;

// Copies the stub code into a fresh private page and maps it at kStubVa
// in `pt` (read+execute, user-accessible: see kStubPagesNeedUser).
absl::Status InstallPvmStub(PrivateMemory* mem, PageTables* pt);
// The two halves of it: the page (one per VM), and its mapping (one per
// address space).
absl::StatusOr<uint64_t> WritePvmStubPage(PrivateMemory* mem);
absl::Status MapPvmStub(PageTables* pt, uint64_t phys);

// MSR_STAR/LSTAR/SFMASK for the stub's syscall entry.
absl::Status InitPvmVcpu(const Vcpu& v);

// Fills the segment and control registers of 64-bit user mode on top of
// what KVM_GET_SREGS returned (`s`), with page tables `cr3`.
void UserModeSregs(kvm_sregs* s, uint64_t cr3, uint64_t fs_base,
                   uint64_t gs_base);

// A one-line description of an exit that is not a syscall, for errors and
// for the README's record of what the vCPU did.
std::string DescribeExit(const Vcpu& v, uint32_t reason);
const char* ExitName(uint32_t reason);

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_GUEST_PVM_H_
