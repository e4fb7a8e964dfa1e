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
//               | StubShared (MAP_SHARED,  |  header, context slots,
//               |  memfd also mapped by    |  worker records, the ring
//               |  the Sentry)             |
//   kStubStacks +--------------------------+
//               | per-worker stacks,       |  kMaxThreads * kStackSize
//               |  private                 |
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
// Context slots and worker records each (index 0: the control thread):
// an address space runs at most kMaxThreads - 1 (4095) application
// threads; the next clone of a thread there fails with EAGAIN.
inline constexpr uint32_t kMaxThreads = 4096;
inline constexpr uint64_t kStackSize = 64 * 1024;
inline constexpr uint64_t kStubSharedSize = 32ull << 20;
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
// included): 2 TiB of sparse file offsets.
inline constexpr uint32_t kMaxStubAreas = 1u << 16;

// The host signal the Sentry sends a stub worker to make its context trap
// (Context::Interrupt).
inline constexpr int kInterruptSignal = 12;  // SIGUSR2

// Who may touch a context slot or the control block. The other side waits.
enum Owner : uint32_t {
  kOwnerStub = 1,    // queued for, or run by, a stub worker (or a request)
  kOwnerSentry = 2,  // the Sentry has it
};

// Why a stub worker handed a context slot to the Sentry.
enum TrapKind : uint32_t {
  kTrapSignal = 2,  // a host signal: SIGSYS (syscall), SIGSEGV, ... (signo)
  kTrapPatched = 3,  // a patched syscall site entered the stub directly
                     // (stub/patch_entry_amd64.cc): a syscall, no signal
  kTrapMapFailed = 4,  // a map made on the way back failed
                       // (StubShared::deferred_error): the context has not
                       // run; its state is the Sentry's, unchanged
};

// Where a stub worker is in the patched-syscall path (StubWorker::
// patch_state), for its signal handler: what an interrupt landing there
// may do (stub/patch_entry_amd64.cc).
enum PatchState : uint32_t {
  kPatchIdle = 0,       // not in it (or in its prologue, which is plain
                        // application state: a signal there is ordinary)
  kPatchSaving = 1,     // writing the registers into its context slot
  kPatchWaiting = 2,    // handing it back, waiting for the ring
  kPatchReturning = 3,  // its (new) context slot holds the whole state to
                        // return to
};

// Requests served by a stub's control thread (slot 0).
enum ControlOp : uint32_t {
  kOpNone = 0,
  kOpMmap = 1,     // args: addr, len, prot, flags, fd, off
  kOpMunmap = 2,   // args: addr, len
  kOpClone = 3,    // args: worker index; result: tid or -errno
  kOpExit = 4,     // exit_group
  kOpNewStub = 5,  // the template only: args: area index; result: the new
                   // stub's pid or -errno
  kOpMembarrier = 6,  // args: membarrier cmd (the filter allows two)
  kOpMmapBatch = 7,  // args: n; maps StubShared::map_batch[0, n) in order,
                     // each MAP_SHARED|MAP_FIXED of the memory file; result:
                     // n, or -errno of the first that failed
};

// clone(2) flags of a stub worker: a thread of the stub process whose tid
// the kernel writes to, and clears (with a futex wake) in, StubWorker::tid.
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
  kStubExitBadStack = 112,   // a signal handler on a stack not a worker's
  kStubExitControlSignal = 113,  // the control thread took a signal
  kStubExitSeccomp = 114,    // installing the seccomp filter failed
  kStubExitCorrupt = 115,    // a hand-over word holds neither owner value
  kStubExitNewStub = 116,    // a new stub could not set itself up
  kStubExitRing = 117,       // the context ring or a worker record is
                             // inconsistent (a cell names no slot or a
                             // slot of another generation)
};

// Number of general registers in the kernel's ucontext mcontext (NGREG).
inline constexpr int kNumGregs = 23;
inline constexpr uint32_t kMaxFpSize = 4096;

// One application thread's context slot: its state while the Sentry has it
// or while it waits in the ring, and the hand-over area. Any stub worker
// may run it (README.md, "The context queue").
struct alignas(64) ThreadSlot {
  // Written by both sides; futex word of the Sentry's wait.
  alignas(64) uint32_t owner;
  uint32_t sentry_sleeping;  // the Sentry is (about to be) in FUTEX_WAIT
  // Set (seq_cst) by the Sentry's Interrupt(): the worker that takes or
  // runs the context reports an interrupt. Cleared by the Sentry before it
  // queues the context again.
  uint32_t interrupt;
  // The tid of the worker running the context (stored seq_cst by the
  // worker before it reads `interrupt`; 0 once handed back): whom
  // Interrupt() signals.
  int32_t running_tid;

  // Written by the Sentry before it queues the context.
  alignas(64) uint32_t generation;  // the Sentry's count for this slot: a
                                    // ring entry must carry the same
  int32_t sentry_cpu;  // the host CPU of the Sentry thread (-1: unknown)
  uint64_t fs_base;  // loaded before returning to the application
  uint64_t gs_base;
  // How long the worker that hands this context back spins (TSC) on the
  // ring before it sleeps; 0: it sleeps at once (the fast path decides).
  uint64_t stub_spin_cycles;
  // 1: the worker measures the CPU time the context runs (run_cpu_ns).
  uint32_t measure_cpu;

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
  int32_t stub_cpu;     // the host CPU the context trapped on
  uint32_t stub_spun;   // 1: it spun while waiting (0: slept at once)
  // With measure_cpu: the CPU time (CLOCK_THREAD_CPUTIME_ID of the worker,
  // ns) the context used since the worker took it: run_start_cpu_ns when
  // it is taken, run_cpu_ns before owner=kOwnerSentry (0 when it did not
  // run). What the application's clocks count (sentry/kernel/cputime.h);
  // untrusted.
  uint64_t run_start_cpu_ns;
  uint64_t run_cpu_ns;

  // Both directions: registers in mcontext gregs order, and the xsave image.
  alignas(64) uint64_t gregs[kNumGregs];
  uint32_t fp_size;
  alignas(64) uint8_t fp[kMaxFpSize];

  // Written by the Sentry when it hands the slot out: its address in the
  // stub (the patched entry checks a worker's `ctx` against it), and
  // whether the context runs with GS base = its worker's record (syscall
  // patching on and the application's GS base 0).
  alignas(64) uint64_t self;
  uint32_t gs_worker;
  // Maps on the way back (README.md): the number of StubShared::deferred
  // requests the worker that takes this context makes before it runs it.
  // Written by the Sentry before it queues the context; zeroed (seq_cst)
  // by the worker once they are made.
  uint32_t maps;
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

// The seccomp filter a new stub process adds to the template's before any
// application code runs in it (seccomp_filter.h, StubProcessFilter):
// written by the Sentry into the template's area only. Each entry is one
// struct sock_filter (8 bytes).
inline constexpr uint32_t kMaxStubFilterLen = 96;
struct alignas(64) StubFilterImage {
  uint32_t len;
  uint32_t pad;
  uint64_t insns[kMaxStubFilterLen];
};

// One host thread of the stub (index 0: the control thread; 1..: workers
// that run contexts taken from the ring). Its stack is kStubStacks +
// index * kStackSize.
struct alignas(64) StubWorker {
  // CLONE_CHILD_SETTID/CLEARTID word: the worker's host tid.
  int32_t tid;
  uint32_t ctx_index;   // the context slot it runs (valid while ctx != 0)
  // Written by the Sentry before the clone: the record's own address (the
  // patched entry checks GS base against it) and the top of its stack.
  uint64_t self;
  uint64_t stack_top;
  uint64_t ctx;          // address of that slot in the stub; 0: none yet
  uint32_t patch_state;  // PatchState
  uint32_t sleeping;     // 1: (about to be) asleep on the ring's futex
  // The patched path's way back: the new context's rsp and rip.
  uint64_t ret_rsp;
  uint64_t ret_rip;
  // Written by the Sentry before the clone: 1: made for a queued entry
  // (already counted by the Sentry); 0: announces itself idle (the first).
  uint32_t matched;
  uint32_t pad;
};
static_assert(sizeof(StubWorker) == 64);

// One entry of the context ring. `seq` is the cell's generation (Vyukov's
// bounded queue): pos when free for the producer of position pos, pos + 1
// once the entry at pos is written, pos + kRingSize once it is taken.
struct RingCell {
  uint32_t seq;
  uint32_t ctx_index;
  uint32_t generation;  // the slot's generation when it was queued
  uint32_t pad;
};
// More cells than contexts: each context is queued at most once at a time,
// so the ring is never full unless its memory was overwritten.
inline constexpr uint32_t kRingSize = kMaxThreads;
static_assert(kRingSize > kMaxThreads - 1 &&
              (kRingSize & (kRingSize - 1)) == 0);

// Contexts queued by the Sentry for the stub's workers (README.md, "The
// context queue"). Producers are Sentry threads (serialized; the real tail
// is the Sentry's), consumers are workers (they CAS `head`).
struct alignas(64) ContextRing {
  alignas(64) uint32_t head;
  alignas(64) uint32_t tail;      // a copy of the Sentry's, for the gauges
  alignas(64) uint32_t futex;     // bumped at every push; sleepers wait on it
  uint32_t waiting;   // idle workers not yet matched to an entry
  uint32_t sleepers;  // workers (about to be) in FUTEX_WAIT on `futex`
  uint32_t workers;   // workers made (a gauge; the Sentry counts its own)
  alignas(64) RingCell cells[kRingSize];
};

struct StubShared {
  StubConfig config;
  ControlBlock control;
  // The template's area only (see StubFilterImage).
  StubFilterImage stub_filter;
  ThreadSlot slots[kMaxThreads];
  // The first worker's start: it writes its FPU image (the layout of a
  // fresh CpuState) and then stores ready = kOwnerSentry.
  alignas(64) uint32_t ready;
  uint32_t ready_sleeping;
  uint32_t fp_init_size;
  alignas(64) uint8_t fp_init[kMaxFpSize];
  StubWorker workers[kMaxThreads];
  ContextRing ring;
  // kOpMmapBatch's requests, written by the Sentry before it posts one.
  MapRequest map_batch[kMaxMapBatch];
  // Maps on the way back: requests the Sentry queued while one context ran
  // in this process, made by the worker that takes it next (ThreadSlot::
  // maps says how many); deferred_error: the first failure's -errno.
  alignas(64) int64_t deferred_error;
  MapRequest deferred[kMaxMapBatch];
};
static_assert(sizeof(StubShared) <= kStubSharedSize);
static_assert(offsetof(ThreadSlot, owner) == 0);
static_assert(offsetof(ThreadSlot, generation) == 64);
static_assert(offsetof(ThreadSlot, trap) == 128);
static_assert(offsetof(ThreadSlot, submit_tsc) == 192);
static_assert(offsetof(ThreadSlot, run_cpu_ns) < 256);
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
