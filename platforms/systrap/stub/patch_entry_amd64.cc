// The stub's common entry for patched syscall sites (README.md, "Syscall
// patching"). A patched site `jmp *entry` lands in its patch-table entry
// (patch.h, EncodeEntry), which moves rsp below the red zone, sets rcx to
// the return address and eax to the syscall number and jumps here. This
// code hands the thread's state to the Sentry through its ThreadSlot as the
// signal handler does, without a signal: no SIGSYS delivery, no sigreturn.
//
// Stub code (see stub.cc): freestanding, position independent, in section
// "sbx_stub". The offsets below are checked against layout.h.
//
// Finding the slot: a context whose application GS base is 0 runs with
// GS base = the record of the worker running it (StubWorker; the Sentry
// sets ThreadSlot::gs_worker, the worker loads it). The entry checks that
// GS base is one of this stub's worker records and names itself (`self`),
// that the worker's `ctx` is a context slot that names itself, and that
// the Sentry has told the stub its xsave mask; if not (the program set its
// own GS base, e.g. with wrgsbase), it takes the *fallback*: back to the
// application state and a real `syscall` in the patch table's header,
// outside stub code, which traps as every unpatched syscall does.
//
// The hand-over (sbx_stub_patch_handover, stub.cc) hands the context back
// and takes the next one from the ring: any context, not necessarily the
// one that entered. The tail loads the new context's state and returns to
// it through the worker's ret_rsp/ret_rip.
//
// Interrupts (kInterruptSignal) can land anywhere in here; what the signal
// handler does depends on StubWorker::patch_state (layout.h, PatchState):
//   - before kPatchSaving (the prologue, on the application's stack, below
//     its red zone): the thread's registers are whole; ordinary handling.
//   - kPatchSaving: the hand-over follows at once; the handler returns and
//     the Sentry, which still has its interrupt flag set, stops the task at
//     its next Switch.
//   - kPatchWaiting: handing back and waiting for the ring: ignored (the
//     next context's interrupt flag is read when it is taken).
//   - kPatchReturning, or rip in [sbx_stub_patch_tail, _end): the new
//     context's slot holds the whole state to return to; an interrupt for
//     it is reported with that state (a stale one is ignored), anything
//     else (the int3 below) returns to it through sigreturn.
// So the Sentry never sees half-saved registers.
#include <stddef.h>

#include "platforms/systrap/layout.h"

// Offsets (decimal) in ThreadSlot and StubWorker, and absolute addresses
// in the stub.
#define SLOT_FS_BASE 72
#define SLOT_GS_BASE 80
#define SLOT_TRAP 128
#define SLOT_SIGNO 132
#define SLOT_SIG_CODE 136
#define SLOT_SIG_ERRNO 140
#define SLOT_FAULT_ADDR 144
#define SLOT_SYS_NR 152
#define SLOT_SYS_ARCH 156
#define SLOT_STUB_FS 160
#define SLOT_STUB_GS 168
#define SLOT_GREGS 256
#define SLOT_FP 448
#define SLOT_SELF 4544
#define SLOT_GS_WORKER 4552
#define W_SELF 8
#define W_STACK_TOP 16
#define W_CTX 24
#define W_PATCH_STATE 32
#define W_RET_RSP 40
#define W_RET_RIP 48
#define SLOTS_FIRST 0x7e0000100400
#define SLOTS_LAST 0x7e00012ff200
#define WORKERS_FIRST 0x7e0001301480
#define WORKERS_LAST 0x7e0001341400
#define CONFIG_XSAVE_MASK 0x7e0000100010
// The fallback `syscall` in the patch table's header (patch.h; patch.cc
// checks the value).
#define PATCH_FALLBACK 0x60010

namespace sandboxd::systrap {
static_assert(offsetof(ThreadSlot, fs_base) == SLOT_FS_BASE);
static_assert(offsetof(ThreadSlot, gs_base) == SLOT_GS_BASE);
static_assert(offsetof(ThreadSlot, trap) == SLOT_TRAP);
static_assert(offsetof(ThreadSlot, signo) == SLOT_SIGNO);
static_assert(offsetof(ThreadSlot, sig_code) == SLOT_SIG_CODE);
static_assert(offsetof(ThreadSlot, sig_errno) == SLOT_SIG_ERRNO);
static_assert(offsetof(ThreadSlot, fault_addr) == SLOT_FAULT_ADDR);
static_assert(offsetof(ThreadSlot, sys_nr) == SLOT_SYS_NR);
static_assert(offsetof(ThreadSlot, sys_arch) == SLOT_SYS_ARCH);
static_assert(offsetof(ThreadSlot, stub_fs_base) == SLOT_STUB_FS);
static_assert(offsetof(ThreadSlot, stub_gs_base) == SLOT_STUB_GS);
static_assert(offsetof(ThreadSlot, gregs) == SLOT_GREGS);
static_assert(offsetof(ThreadSlot, fp) == SLOT_FP);
static_assert(offsetof(ThreadSlot, self) == SLOT_SELF);
static_assert(offsetof(ThreadSlot, gs_worker) == SLOT_GS_WORKER);
static_assert(offsetof(StubWorker, self) == W_SELF);
static_assert(offsetof(StubWorker, stack_top) == W_STACK_TOP);
static_assert(offsetof(StubWorker, ctx) == W_CTX);
static_assert(offsetof(StubWorker, patch_state) == W_PATCH_STATE);
static_assert(offsetof(StubWorker, ret_rsp) == W_RET_RSP);
static_assert(offsetof(StubWorker, ret_rip) == W_RET_RIP);
static_assert(kStubShared + offsetof(StubShared, slots) == SLOTS_FIRST);
static_assert(kStubShared + offsetof(StubShared, slots) +
                  (kMaxThreads - 1) * sizeof(ThreadSlot) ==
              SLOTS_LAST);
static_assert(kStubShared + offsetof(StubShared, workers) +
                  sizeof(StubWorker) ==
              WORKERS_FIRST);
static_assert(kStubShared + offsetof(StubShared, workers) +
                  (kMaxThreads - 1) * sizeof(StubWorker) ==
              WORKERS_LAST);
static_assert(kStubShared + offsetof(StubConfig, xsave_mask) ==
              CONFIG_XSAVE_MASK);
static_assert(kTrapPatched == 3 && kPatchSaving == 1);
}  // namespace sandboxd::systrap

#define STR2(x) #x
#define STR(x) STR2(x)
// gregs[i] in mcontext order (sys/ucontext.h REG_*).
#define G(i) STR(SLOT_GREGS) "+8*" #i

// REG_*: r8 0, r9 1, r10 2, r11 3, r12 4, r13 5, r14 6, r15 7, rdi 8,
// rsi 9, rbp 10, rbx 11, rdx 12, rax 13, rcx 14, rsp 15, rip 16, efl 17.
__asm__(
    ".pushsection sbx_stub,\"ax\",@progbits\n"
    ".globl sbx_stub_patch_entry\n"
    ".type sbx_stub_patch_entry,@function\n"
    ".balign 64\n"
    "sbx_stub_patch_entry:\n\t"
    // rsp = application rsp - 128, rcx = return address, eax = sysno.
    "pushfq\n\t"
    "push %rcx\n\t"
    "push %rdx\n\t"
    // rcx = the worker (GS base), rdx = its context slot.
    "rdgsbase %rcx\n\t"
    "movabs $" STR(WORKERS_FIRST) ", %rdx\n\t"
    "cmp %rdx, %rcx\n\t"
    "jb 9f\n\t"
    "movabs $" STR(WORKERS_LAST) ", %rdx\n\t"
    "cmp %rdx, %rcx\n\t"
    "ja 9f\n\t"
    "cmp %rcx, " STR(W_SELF) "(%rcx)\n\t"
    "jne 9f\n\t"
    // No xsave mask yet (the Sentry has not seen this stub's FPU layout).
    "movabs $" STR(CONFIG_XSAVE_MASK) ", %rdx\n\t"
    "cmpq $0, (%rdx)\n\t"
    "je 9f\n\t"
    "mov " STR(W_CTX) "(%rcx), %rdx\n\t"
    "movabs $" STR(SLOTS_FIRST) ", %rcx\n\t"
    "cmp %rcx, %rdx\n\t"
    "jb 9f\n\t"
    "movabs $" STR(SLOTS_LAST) ", %rcx\n\t"
    "cmp %rcx, %rdx\n\t"
    "ja 9f\n\t"
    "cmp %rdx, " STR(SLOT_SELF) "(%rdx)\n\t"
    "jne 9f\n\t"
    // r11 and rcx are free: `syscall` clobbers them.
    "mov %rdx, %r11\n\t"
    "pop %rdx\n\t"
    "movl $1, %gs:" STR(W_PATCH_STATE) "\n\t"  // kPatchSaving
    "mov %r8, " G(0) "(%r11)\n\t"
    "mov %r9, " G(1) "(%r11)\n\t"
    "mov %r10, " G(2) "(%r11)\n\t"
    "mov %r12, " G(4) "(%r11)\n\t"
    "mov %r13, " G(5) "(%r11)\n\t"
    "mov %r14, " G(6) "(%r11)\n\t"
    "mov %r15, " G(7) "(%r11)\n\t"
    "mov %rdi, " G(8) "(%r11)\n\t"
    "mov %rsi, " G(9) "(%r11)\n\t"
    "mov %rbp, " G(10) "(%r11)\n\t"
    "mov %rbx, " G(11) "(%r11)\n\t"
    "mov %rdx, " G(12) "(%r11)\n\t"
    "mov %rax, " G(13) "(%r11)\n\t"
    "pop %rcx\n\t"  // the return address: rip, and rcx as after `syscall`
    "mov %rcx, " G(14) "(%r11)\n\t"
    "mov %rcx, " G(16) "(%r11)\n\t"
    "mov %rcx, " STR(SLOT_FAULT_ADDR) "(%r11)\n\t"
    "pop %rcx\n\t"  // the flags: eflags, and r11 as after `syscall`
    "mov %rcx, " G(3) "(%r11)\n\t"
    "mov %rcx, " G(17) "(%r11)\n\t"
    "lea 128(%rsp), %rcx\n\t"
    "mov %rcx, " G(15) "(%r11)\n\t"
    // What a SIGSYS from seccomp would have said.
    "movl $3, " STR(SLOT_TRAP) "(%r11)\n\t"  // kTrapPatched
    "movl $31, " STR(SLOT_SIGNO) "(%r11)\n\t"  // SIGSYS
    "movl $1, " STR(SLOT_SIG_CODE) "(%r11)\n\t"  // SYS_SECCOMP
    "movl $0, " STR(SLOT_SIG_ERRNO) "(%r11)\n\t"
    "mov %eax, " STR(SLOT_SYS_NR) "(%r11)\n\t"
    "movl $0xc000003e, " STR(SLOT_SYS_ARCH) "(%r11)\n\t"  // AUDIT_ARCH_X86_64
    "rdfsbase %rcx\n\t"
    "mov %rcx, " STR(SLOT_STUB_FS) "(%r11)\n\t"
    "rdgsbase %rcx\n\t"
    "mov %rcx, " STR(SLOT_STUB_GS) "(%r11)\n\t"
    // The FPU, in the layout of a signal frame's xsave area (the legacy
    // area's software bytes and the end magic stay as the Sentry wrote
    // them: xsave does not touch them).
    "movabs $" STR(CONFIG_XSAVE_MASK) ", %rcx\n\t"
    "mov (%rcx), %eax\n\t"
    "mov 4(%rcx), %edx\n\t"
    "xsave64 " STR(SLOT_FP) "(%r11)\n\t"
    "mov %gs:" STR(W_STACK_TOP) ", %rsp\n\t"
    "rdgsbase %rdi\n\t"
    "call sbx_stub_patch_handover\n\t"
    // kPatchReturning: rax = the slot of the context to return to (maybe
    // another one). The last instructions need GS base = this worker; if
    // that context wants another GS base, the signal handler returns to it
    // instead (int3 below).
    "mov %rax, %rbx\n\t"
    "cmpl $0, " STR(SLOT_GS_WORKER) "(%rbx)\n\t"
    "je 8f\n\t"
    "mov " G(15) "(%rbx), %rcx\n\t"
    "mov %rcx, %gs:" STR(W_RET_RSP) "\n\t"
    "mov " G(16) "(%rbx), %rcx\n\t"
    "mov %rcx, %gs:" STR(W_RET_RIP) "\n\t"
    "mov " STR(SLOT_FS_BASE) "(%rbx), %rcx\n\t"
    "wrfsbase %rcx\n\t"
    "movabs $" STR(CONFIG_XSAVE_MASK) ", %rcx\n\t"
    "mov (%rcx), %eax\n\t"
    "mov 4(%rcx), %edx\n\t"
    "xrstor64 " STR(SLOT_FP) "(%rbx)\n\t"
    "push " G(17) "(%rbx)\n\t"  // the flags, for popfq on this stack
    "mov " G(0) "(%rbx), %r8\n\t"
    "mov " G(1) "(%rbx), %r9\n\t"
    "mov " G(2) "(%rbx), %r10\n\t"
    "mov " G(3) "(%rbx), %r11\n\t"
    "mov " G(4) "(%rbx), %r12\n\t"
    "mov " G(5) "(%rbx), %r13\n\t"
    "mov " G(6) "(%rbx), %r14\n\t"
    "mov " G(7) "(%rbx), %r15\n\t"
    "mov " G(8) "(%rbx), %rdi\n\t"
    "mov " G(9) "(%rbx), %rsi\n\t"
    "mov " G(10) "(%rbx), %rbp\n\t"
    "mov " G(12) "(%rbx), %rdx\n\t"
    "mov " G(13) "(%rbx), %rax\n\t"
    "mov " G(14) "(%rbx), %rcx\n\t"
    "mov " G(11) "(%rbx), %rbx\n\t"
    ".globl sbx_stub_patch_tail\n"
    ".hidden sbx_stub_patch_tail\n"
    "sbx_stub_patch_tail:\n\t"
    // Nothing after popfq changes the flags.
    "popfq\n\t"
    "movl $0, %gs:" STR(W_PATCH_STATE) "\n\t"  // kPatchIdle
    "mov %gs:" STR(W_RET_RSP) ", %rsp\n\t"
    "jmp *%gs:" STR(W_RET_RIP) "\n"
    ".globl sbx_stub_patch_tail_end\n"
    ".hidden sbx_stub_patch_tail_end\n"
    "sbx_stub_patch_tail_end:\n"
    "8:\n\t"
    "int3\n\t"
    "ud2\n"
    // Fallback: GS base is not a worker of ours (or its context not a slot). Back to the application's
    // registers and flags, the return address below the red zone, and a
    // real syscall in the patch table (it traps; see patch.h).
    "9:\n\t"
    "pop %rdx\n\t"
    "pop %rcx\n\t"
    "popfq\n\t"
    "push %rcx\n\t"
    "mov $" STR(PATCH_FALLBACK) ", %ecx\n\t"
    "jmp *%rcx\n"
    ".size sbx_stub_patch_entry, .-sbx_stub_patch_entry\n"
    ".popsection\n");
