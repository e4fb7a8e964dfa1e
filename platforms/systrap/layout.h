// The memory shared by the Sentry and a systrap stub process, and the fixed
// addresses of the stub's region. Included by both sides: the Sentry (normal
// C++) and the stub (freestanding code in stub/), so only plain types here.
//
// The top of the user address space, [kStubBase, kStubEnd), belongs to the
// stub; application mappings stay below kStubBase. The stub itself uses only
// the window [kStubBase, kStubWindowEnd); the rest is unmapped in stubs. The
// window sits 1 TiB below the lowest mmap base that ASLR can pick for the
// Sentry (2^28 pages below TASK_SIZE), so the Sentry's own mappings, which
// grow down from its mmap base, do not reach it.
//
//   kStubBase   +--------------------------+
//               | stub code (RX), copied   |  kStubCodeSize
//   kStubShared +--------------------------+
//               | StubShared (MAP_SHARED,  |  header + kMaxThreads slots
//               |  memfd also mapped by    |
//               |  the Sentry)             |
//   kStubStacks +--------------------------+
//               | per-slot stacks, private |  kMaxThreads * kStackSize
//   kStubWindowEnd ------------------------+
//               | nothing (unmapped)       |
//   kStubEnd    +--------------------------+
//
// Everything the stub reads here was written by the Sentry or the stub, but
// application code can write it too (it is mapped in the application's
// address space): the Sentry treats every field as untrusted input.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_LAYOUT_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_LAYOUT_H_

#include <stddef.h>
#include <stdint.h>

namespace sandboxd::systrap {

inline constexpr uint64_t kStubBase = 0x7e0000000000ull;
inline constexpr uint64_t kStubEnd = 0x7ffffffff000ull;  // TASK_SIZE
inline constexpr uint64_t kStubCodeSize = 1ull << 20;
inline constexpr uint64_t kStubShared = kStubBase + kStubCodeSize;
inline constexpr uint32_t kMaxThreads = 256;  // slot 0 is the control thread
inline constexpr uint64_t kStackSize = 64 * 1024;
inline constexpr uint64_t kStubSharedSize = 8ull << 20;
inline constexpr uint64_t kStubStacks = kStubShared + kStubSharedSize;
inline constexpr uint64_t kStubStacksSize = kMaxThreads * kStackSize;
inline constexpr uint64_t kStubWindowEnd = kStubStacks + kStubStacksSize;
static_assert(kStubWindowEnd < kStubEnd);

// Host fds in every stub process (nothing else is open there).
inline constexpr int kStubMemFileFd = 3;  // the sandbox's memory file
// In the template only: the pool of every stub's shared area (a memfd,
// area i at offset i * kStubSharedSize; area 0 is the template's). A new
// stub maps its own area and closes this before any application code runs.
inline constexpr int kStubPoolFd = 4;
// Areas in the pool at most (stub processes alive at once, the template
// included): 512 GiB of sparse file offsets.
inline constexpr uint32_t kMaxStubAreas = 1u << 16;

// The host signal the Sentry sends a stub thread to make it trap
// (Context::Interrupt).
inline constexpr int kInterruptSignal = 12;  // SIGUSR2

// Who may touch a slot or the control block. The other side waits.
enum Owner : uint32_t {
  kOwnerStub = 1,    // the stub thread runs (application code, or a request)
  kOwnerSentry = 2,  // the stub thread waits for the Sentry
};

// Why a stub thread handed its slot to the Sentry.
enum TrapKind : uint32_t {
  kTrapReady = 1,   // a new thread is up; gregs are meaningless, fp is the
                    // default FPU image
  kTrapSignal = 2,  // a host signal: SIGSYS (syscall), SIGSEGV, ... (signo)
  kTrapPatched = 3,  // a patched syscall site entered the stub directly
                     // (stub/patch_entry_amd64.cc): a syscall, no signal
};

// Where a stub thread is in the patched-syscall path (ThreadSlot::
// patch_state), for its signal handler: what an interrupt landing there
// may do (stub/patch_entry_amd64.cc).
enum PatchState : uint32_t {
  kPatchIdle = 0,       // not in it (or in its prologue, which is plain
                        // application state: a signal there is ordinary)
  kPatchSaving = 1,     // writing the registers into the slot
  kPatchWaiting = 2,    // the slot is the Sentry's
  kPatchReturning = 3,  // the slot holds the whole state to return to
};

// What the Sentry asks of a stub thread when it hands the slot back.
enum Action : uint32_t {
  kActionResume = 1,  // load gregs/fp/fs_base and return to the application
  kActionExit = 2,    // the thread exits
};

// Requests served by a stub's control thread (slot 0).
enum ControlOp : uint32_t {
  kOpNone = 0,
  kOpMmap = 1,     // args: addr, len, prot, flags, fd, off
  kOpMunmap = 2,   // args: addr, len
  kOpClone = 3,    // args: slot index; result: tid or -errno
  kOpExit = 4,     // exit_group
  kOpNewStub = 5,  // the template only: args: area index; result: the new
                   // stub's pid or -errno
  kOpMembarrier = 6,  // args: membarrier cmd (the filter allows two)
  kOpMmapBatch = 7,  // args: n; maps StubShared::map_batch[0, n) in order,
                     // each MAP_SHARED|MAP_FIXED of the memory file; result:
                     // n, or -errno of the first that failed
};

// clone(2) flags of a stub thread: a thread of the stub process whose tid
// the kernel writes to, and clears (with a futex wake) in, ThreadSlot::tid.
inline constexpr uint64_t kStubCloneFlags =
    0x00000100 /* CLONE_VM */ | 0x00000200 /* CLONE_FS */ |
    0x00000400 /* CLONE_FILES */ | 0x00000800 /* CLONE_SIGHAND */ |
    0x00010000 /* CLONE_THREAD */ | 0x00040000 /* CLONE_SYSVSEM */ |
    0x00200000 /* CLONE_CHILD_CLEARTID */ | 0x01000000 /* CLONE_CHILD_SETTID */;

// clone(2) flags with which the template makes a stub process: a child of
// the template's parent, the Sentry (CLONE_PARENT), sharing nothing, that
// signals its death with SIGCHLD.
inline constexpr uint64_t kNewStubCloneFlags =
    0x00008000 /* CLONE_PARENT */ | 17 /* SIGCHLD */;

// Exit codes of a stub process that found something it cannot go on with
// (DeathReason names them).
enum StubExit : int {
  kStubExitAltStack = 111,   // sigaltstack failed in a new thread
  kStubExitBadStack = 112,   // a signal handler on a stack not its slot's
  kStubExitControlSignal = 113,  // the control thread took a signal
  kStubExitSeccomp = 114,    // installing the seccomp filter failed
  kStubExitCorrupt = 115,    // a hand-over word holds neither owner value
  kStubExitNewStub = 116,    // a new stub could not set itself up
};

// Number of general registers in the kernel's ucontext mcontext (NGREG).
inline constexpr int kNumGregs = 23;
inline constexpr uint32_t kMaxFpSize = 4096;

// One application thread's hand-over area.
struct alignas(64) ThreadSlot {
  // Written by both sides; futex word.
  alignas(64) uint32_t owner;
  uint32_t sentry_sleeping;  // the Sentry is (about to be) in FUTEX_WAIT
  uint32_t stub_sleeping;    // the stub is (about to be) in FUTEX_WAIT
  // CLONE_CHILD_CLEARTID word: the kernel zeroes it when the thread exits.
  int32_t tid;

  // Written by the Sentry before owner=kOwnerStub.
  alignas(64) uint32_t action;
  int32_t sentry_cpu;  // the host CPU of the Sentry thread (-1: unknown)
  uint64_t fs_base;  // loaded before returning to the application
  uint64_t gs_base;
  // How long the stub thread spins (TSC) at its next wait for the Sentry
  // before it sleeps; 0: it sleeps at once (the fast path decides).
  uint64_t stub_spin_cycles;

  // Written by the stub before owner=kOwnerSentry.
  alignas(64) uint32_t trap;     // TrapKind
  int32_t signo;
  int32_t sig_code;
  int32_t sig_errno;
  uint64_t fault_addr;  // si_addr: fault address / call address
  int32_t sys_nr;       // SIGSYS: si_syscall
  uint32_t sys_arch;     // SIGSYS: si_arch
  uint64_t stub_fs_base;  // FS base at the trap
  uint64_t stub_gs_base;

  // Written by the stub: the hand-over timestamps (TSC) for the fast path's
  // latencies. submit_tsc and stub_cpu before owner=kOwnerSentry; wake_tsc
  // and stub_spun when the stub sees owner=kOwnerStub again (read by the
  // Sentry at the next trap).
  alignas(64) uint64_t submit_tsc;
  uint64_t wake_tsc;
  int32_t stub_cpu;     // the host CPU the stub thread trapped on
  uint32_t stub_spun;   // 1: it spun while waiting (0: slept at once)

  // Both directions: registers in mcontext gregs order, and the xsave image.
  alignas(64) uint64_t gregs[kNumGregs];
  uint32_t fp_size;
  alignas(64) uint8_t fp[kMaxFpSize];

  // Syscall patching (stub/patch_entry_amd64.cc). Written by the Sentry
  // when it hands the slot out: `self` is the slot's address in the stub
  // (the entry checks GS base against it), `stack_top` where the entry
  // runs. Written by the stub thread: patch_state (PatchState) and
  // patch_pending (an interrupt arrived while the Sentry had the slot).
  alignas(64) uint64_t self;
  uint64_t stack_top;
  uint32_t patch_state;
  uint32_t patch_pending;
};

// The control thread's request block.
struct alignas(64) ControlBlock {
  alignas(64) uint32_t owner;  // kOwnerStub: a request is posted
  uint32_t sentry_sleeping;
  uint32_t stub_sleeping;
  uint32_t op;
  uint64_t args[6];
  int64_t result;
};

// One mapping of kOpMmapBatch: [off, off+len) of the memory file at addr.
struct MapRequest {
  uint64_t addr;
  uint64_t len;
  uint64_t off;
  uint64_t prot;  // PROT_* bits
};
inline constexpr uint32_t kMaxMapBatch = 64;

// Facts the Sentry tells the stub once, before it starts.
struct alignas(64) StubConfig {
  uint32_t has_fsgsbase;  // rdfsbase/wrfsbase are usable in user mode
  uint32_t pad;
  uint64_t spin_cycles;   // how long the control thread spins (TSC)
  // Syscall patching: the xsave feature mask (XCR0 bits the kernel puts in
  // a signal frame) the patched entry saves and restores.
  uint64_t xsave_mask;
  int32_t sentry_pid;     // the template's: a new stub's parent must be it
};

struct StubShared {
  StubConfig config;
  ControlBlock control;
  ThreadSlot slots[kMaxThreads];
  // kOpMmapBatch's requests, written by the Sentry before it posts one.
  MapRequest map_batch[kMaxMapBatch];
};
static_assert(sizeof(StubShared) <= kStubSharedSize);
static_assert(offsetof(ThreadSlot, owner) == 0);
static_assert(offsetof(ThreadSlot, action) == 64);
static_assert(offsetof(ThreadSlot, trap) == 128);
static_assert(offsetof(ThreadSlot, submit_tsc) == 192);
static_assert(offsetof(ThreadSlot, gregs) == 256);
static_assert(offsetof(ThreadSlot, fp) % 64 == 0);
static_assert(sizeof(ThreadSlot) % 64 == 0);
static_assert(offsetof(StubShared, control) == 64);
static_assert(sizeof(StubConfig) == 64);
static_assert(sizeof(MapRequest) == 32);

inline StubShared* StubSharedInStub() {
  return reinterpret_cast<StubShared*>(kStubShared);
}

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_LAYOUT_H_
