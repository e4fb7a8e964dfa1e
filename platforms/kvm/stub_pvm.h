// The guest-kernel stub of the PVM flavour, and the guest-virtual layout
// it lives in. Hand-assembled: the stub is a few instructions, and keeping
// the bytes here (with their disassembly) avoids an assembler step in both
// build lanes.
//
// What the stub does, as measured on this project's PVM hosts (README.md,
// "What the PVM vCPU does"): a SYSCALL from application (user) mode enters
// the guest at MSR_LSTAR with RCX = the user's next RIP and R11 = the
// user's RFLAGS; RSP is unchanged. The stub's only instruction there is an
// OUT to kSyscallPort, which exits KVM_RUN to the task's host thread as
// KVM_EXIT_IO. The host returns to user mode itself, by writing RIP=RCX,
// RFLAGS=R11 and RAX=result through kvm_run's synced registers: no guest
// return instruction is needed (SYSRET faults in this state, see README).
// The OUT itself: at hardware CPL 3 it raises #GP, which PVM hands to
// KVM's emulator, which checks it as CPL 3 code against the TSS I/O
// bitmap (kStubTss). Exceptions in user mode are not delivered to the guest on this host: the
// vCPU stops with KVM_EXIT_SHUTDOWN and KVM_GET_VCPU_EVENTS names the
// exception (vector, error code; CR2 for #PF).
#ifndef SANDBOXD_PLATFORMS_KVM_STUB_PVM_H_
#define SANDBOXD_PLATFORMS_KVM_STUB_PVM_H_

#include <cstdint>

namespace sandboxd::kvm {

// The stub's 2 MiB at the top of the lower half; application addresses
// end below it.
inline constexpr uint64_t kStubVa = (1ull << 47) - (2ull << 20);
// The I/O port whose OUT means "a system call".
inline constexpr uint8_t kSyscallPort = 0xe1;

// Offsets in the stub's page (mapped at kStubVa).
inline constexpr uint64_t kStubSyscallEntry = 0x0;  // MSR_LSTAR
// The TSS that TR points at. KVM still sees CPL 3 when the stub runs, so
// its instruction emulator allows the stub's OUT only through the TSS
// I/O permission bitmap; the bitmap allows kSyscallPort and nothing else.
inline constexpr uint64_t kStubTss = 0x800;
inline constexpr uint64_t kStubIoBitmapBytes = kSyscallPort / 8 + 1;
// TR limit: the 104-byte TSS, the bitmap and its 0xff terminator.
inline constexpr uint32_t kStubTssLimit = 104 + kStubIoBitmapBytes + 1 - 1;

inline constexpr uint8_t kStubCode[] = {
    // kStubSyscallEntry:
    0xe6, kSyscallPort,  // out %al, $kSyscallPort  -> KVM_EXIT_IO
    0x0f, 0x0b,          // ud2: the host never resumes here
};

// Page-table rule found on this host: code the stub runs must be mapped
// with the U/S bit set. With U/S clear, the PVM shadow MMU reports every
// fetch as a spurious fault and KVM_RUN spins (pf_spurious grows by
// ~300k/s) without ever returning.
inline constexpr bool kStubPagesNeedUser = true;

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_STUB_PVM_H_
