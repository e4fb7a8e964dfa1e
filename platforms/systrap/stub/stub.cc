// The systrap stub. Every function here runs inside a stub process, in a
// signal handler or on a stub thread, after everything but the stub region
// has been unmapped: no libc, no allocation, no locks, no globals, no
// stack protector, nothing outside the section "sbx_stub". Data lives at the
// fixed addresses of layout.h. Built with -ffreestanding -fno-stack-protector
// -fno-jump-tables -fno-tree-loop-distribute-patterns -fcf-protection=none
// (see CMakeLists.txt / BUILD.bazel), so the compiler emits no calls.
#define _GNU_SOURCE 1
#include "platforms/systrap/stub/stub.h"
#include "platforms/systrap/stub/stub_inline.h"

#include <asm/unistd.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ucontext.h>

#include "platforms/systrap/layout.h"

namespace sandboxd::systrap {
namespace {

// rdtscp: the TSC and, in TSC_AUX, Linux's (node << 12 | cpu).
STUB_INLINE uint64_t Rdtscp(int32_t* cpu) {
  uint32_t lo, hi, aux;
  __asm__ volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux));
  *cpu = static_cast<int32_t>(aux & 0xfff);
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Sleeps on *owner until it is kOwnerStub. Any other value than the two
// owners means the shared memory was overwritten (by the application, which
// can write it): FUTEX_WAIT would fail at once and this would spin forever,
// so the stub dies with its own exit code and the Sentry reports it.
STUB_INLINE void SleepUntilStub(uint32_t* owner, uint32_t* stub_sleeping) {
  StoreSeqCst(stub_sleeping, 1);
  for (;;) {
    uint32_t v = LoadSeqCst(owner);
    if (v == kOwnerStub) break;
    if (v != kOwnerSentry) Die(kStubExitCorrupt);
    Syscall6(__NR_futex, reinterpret_cast<long>(owner), FUTEX_WAIT,
             kOwnerSentry, 0, 0, 0);
  }
  StoreSeqCst(stub_sleeping, 0);
}

// Hands the slot to the Sentry and waits until it is handed back: spins for
// as long as the Sentry said at the last hand-back (the adaptive fast path;
// never when the Sentry thread was on this CPU), then sleeps on the futex.
// *sentry_sleeping tells us to FUTEX_WAKE the Sentry, *stub_sleeping tells
// the Sentry to wake us; each side sets owner before reading the other's
// flag (seq_cst on both sides), so a wakeup cannot be lost. Both ends are
// timestamped for the Sentry's latency figures.
STUB_INLINE void HandOverAndWait(ThreadSlot* slot) {
  uint64_t spin = __atomic_load_n(&slot->stub_spin_cycles, __ATOMIC_RELAXED);
  int32_t sentry_cpu = __atomic_load_n(&slot->sentry_cpu, __ATOMIC_RELAXED);
  int32_t cpu;
  slot->submit_tsc = Rdtscp(&cpu);
  slot->stub_cpu = cpu;
  if (sentry_cpu == cpu) spin = 0;  // it needs this CPU to answer
  StoreSeqCst(&slot->owner, kOwnerSentry);
  if (LoadSeqCst(&slot->sentry_sleeping) != 0) {
    Syscall6(__NR_futex, reinterpret_cast<long>(&slot->owner), FUTEX_WAKE, 1,
             0, 0, 0);
  }
  if (spin != 0) {
    const uint64_t start = Rdtsc();
    while (LoadAcquire(&slot->owner) != kOwnerStub) {
      if (Rdtsc() - start > spin) {
        SleepUntilStub(&slot->owner, &slot->stub_sleeping);
        break;
      }
      __builtin_ia32_pause();
    }
  } else {
    SleepUntilStub(&slot->owner, &slot->stub_sleeping);
  }
  slot->wake_tsc = Rdtsc();
  slot->stub_spun = spin != 0 ? 1 : 0;
}

STUB_INLINE void Copy(void* dst, const void* src, uint64_t n) {
  // A plain loop; -fno-tree-loop-distribute-patterns keeps it from becoming
  // a call to memcpy, which does not exist here.
  uint64_t* d = static_cast<uint64_t*>(dst);
  const uint64_t* s = static_cast<const uint64_t*>(src);
  for (uint64_t i = 0; i < n / 8; i++) d[i] = s[i];
}

// Size of the xsave image in a signal frame, from the kernel's software
// bytes at offset 464 of the fxsave area; 512 when only fxsave is present.
STUB_INLINE uint32_t FpFrameSize(const uint8_t* fp) {
  const uint32_t* sw = reinterpret_cast<const uint32_t*>(fp + 464);
  if (sw[0] == 0x46505853u /* FP_XSTATE_MAGIC1 */) {
    uint32_t size = sw[1];  // extended_size, includes FP_XSTATE_MAGIC2
    if (size >= 512 && size <= kMaxFpSize && size % 8 == 0) return size;
    if (size >= 512 && size <= kMaxFpSize) return size & ~7u;
    return 0;
  }
  return 512;
}

STUB_INLINE uint64_t ReadFsBase(bool fsgsbase) {
  uint64_t v = 0;
  if (fsgsbase) {
    __asm__ volatile("rdfsbase %0" : "=r"(v));
  } else {
    Syscall3(__NR_arch_prctl, 0x1003 /* ARCH_GET_FS */,
             reinterpret_cast<long>(&v), 0);
  }
  return v;
}

STUB_INLINE void WriteFsBase(bool fsgsbase, uint64_t v) {
  if (fsgsbase) {
    __asm__ volatile("wrfsbase %0" ::"r"(v) : "memory");
  } else {
    Syscall3(__NR_arch_prctl, 0x1002 /* ARCH_SET_FS */, static_cast<long>(v),
             0);
  }
}

STUB_INLINE uint64_t ReadGsBase(bool fsgsbase) {
  uint64_t v = 0;
  if (fsgsbase) {
    __asm__ volatile("rdgsbase %0" : "=r"(v));
  } else {
    Syscall3(__NR_arch_prctl, 0x1004 /* ARCH_GET_GS */,
             reinterpret_cast<long>(&v), 0);
  }
  return v;
}

STUB_INLINE void WriteGsBase(bool fsgsbase, uint64_t v) {
  if (fsgsbase) {
    __asm__ volatile("wrgsbase %0" ::"r"(v) : "memory");
  } else {
    Syscall3(__NR_arch_prctl, 0x1001 /* ARCH_SET_GS */, static_cast<long>(v),
             0);
  }
}

// Registers the Sentry may change: everything but CSGSFS, ERR, TRAPNO,
// OLDMASK and CR2, which are the kernel's.
STUB_INLINE bool SentryWritable(int i) {
  return i <= REG_EFL;
}

// Loads the registers, FPU and FS/GS bases the Sentry left in the slot
// into the signal frame `uc`, so that sigreturn resumes the application
// there. Preconditions: the slot is the stub's (owner kOwnerStub) and holds
// a whole state from the Sentry.
STUB_INLINE void LoadFrameFromSlot(ThreadSlot* slot, ucontext_t* uc,
                                   bool fsgsbase) {
  greg_t* gregs = uc->uc_mcontext.gregs;
  for (int i = 0; i < kNumGregs; i++) {
    if (SentryWritable(i)) gregs[i] = static_cast<greg_t>(slot->gregs[i]);
  }
  uint8_t* fp = reinterpret_cast<uint8_t*>(uc->uc_mcontext.fpregs);
  uint32_t fp_size = fp != nullptr ? FpFrameSize(fp) : 0;
  if (fp_size != 0 && slot->fp_size == fp_size) Copy(fp, slot->fp, fp_size);
  uint64_t fs = ReadFsBase(fsgsbase), gs = ReadGsBase(fsgsbase);
  if (slot->fs_base != fs) WriteFsBase(fsgsbase, slot->fs_base);
  if (slot->gs_base != gs) WriteGsBase(fsgsbase, slot->gs_base);
}

// Reports an interrupt with the state the slot holds (the Sentry's last
// reply, whole) and waits for the answer.
STUB_INLINE void HandOverInterrupt(ThreadSlot* slot) {
  slot->trap = kTrapSignal;
  slot->signo = kInterruptSignal;
  slot->sig_code = -6;  // SI_TKILL
  slot->sig_errno = 0;
  slot->fault_addr = 0;
  slot->sys_nr = 0;
  slot->sys_arch = 0;
  slot->stub_fs_base = slot->fs_base;
  slot->stub_gs_base = slot->gs_base;
  HandOverAndWait(slot);
  if (__atomic_load_n(&slot->action, __ATOMIC_ACQUIRE) != kActionResume) {
    for (;;) Syscall3(__NR_exit, 0, 0, 0);
  }
}

// A signal on the patched path's way back (kPatchReturning, or in its last
// instructions): the application's state is the slot's. An interrupt is
// reported with it; then the thread returns to the application through
// sigreturn, leaving the rest of the way back.
STUB_INLINE void ResumeFromSlot(ThreadSlot* slot, int signo, ucontext_t* uc,
                                bool fsgsbase) {
  __atomic_store_n(&slot->patch_pending, 0, __ATOMIC_SEQ_CST);
  if (signo == kInterruptSignal) HandOverInterrupt(slot);
  LoadFrameFromSlot(slot, uc, fsgsbase);
  __atomic_store_n(&slot->patch_state, kPatchIdle, __ATOMIC_SEQ_CST);
}

}  // namespace
}  // namespace sandboxd::systrap

using namespace sandboxd::systrap;

// Called by the patched entry (patch_entry_amd64.cc) on the slot's stack
// with the state saved in the slot: hands it to the Sentry and returns when
// the slot holds the state to return to (kPatchReturning). An interrupt
// that came while the Sentry had the slot is reported first, with the
// reply's state, so that the Sentry sees it with whole registers.
extern "C" STUB void sbx_stub_patch_handover(ThreadSlot* slot) {
  __atomic_store_n(&slot->patch_state, kPatchWaiting, __ATOMIC_SEQ_CST);
  HandOverAndWait(slot);
  if (__atomic_load_n(&slot->action, __ATOMIC_ACQUIRE) != kActionResume) {
    for (;;) Syscall3(__NR_exit, 0, 0, 0);
  }
  for (;;) {
    __atomic_store_n(&slot->patch_state, kPatchReturning, __ATOMIC_SEQ_CST);
    if (__atomic_exchange_n(&slot->patch_pending, 0, __ATOMIC_SEQ_CST) == 0) {
      return;
    }
    // Signals arriving now are handled by ResumeFromSlot; back to waiting
    // for the reply to this report.
    __atomic_store_n(&slot->patch_state, kPatchWaiting, __ATOMIC_SEQ_CST);
    HandOverInterrupt(slot);
  }
}

// A new stub thread starts here (via sbx_stub_clone) on its slot's stack.
// It registers that stack as its signal stack and traps into the handler
// from stub code, which the handler reads as "ready".
extern "C" STUB void sbx_stub_thread_entry() {
  uint64_t sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  uint64_t index = (sp - kStubStacks) / kStackSize;
  stack_t ss;
  ss.ss_sp = reinterpret_cast<void*>(kStubStacks + index * kStackSize);
  ss.ss_size = kStackSize;
  ss.ss_flags = 0;
  if (Syscall3(__NR_sigaltstack, reinterpret_cast<long>(&ss), 0, 0) != 0) {
    Die(kStubExitAltStack);
  }
  for (;;) __asm__ volatile("int3");
}

extern "C" STUB void sbx_stub_signal_handler(int signo, void* info_v,
                                             void* uc_v) {
  siginfo_t* info = static_cast<siginfo_t*>(info_v);
  ucontext_t* uc = static_cast<ucontext_t*>(uc_v);
  StubShared* shared = StubSharedInStub();
  uint64_t sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  if (sp < kStubStacks || sp >= kStubStacks + kStubStacksSize) {
    Die(kStubExitBadStack);
  }
  uint64_t index = (sp - kStubStacks) / kStackSize;
  ThreadSlot* slot = &shared->slots[index];
  if (index == 0) {
    // The control thread never runs application code: a signal here is a
    // stub bug. Leave a note for the Sentry and die.
    slot->signo = signo;
    slot->sig_code = info->si_code;
    slot->fault_addr = reinterpret_cast<uint64_t>(info->si_addr);
    for (int i = 0; i < kNumGregs; i++) slot->gregs[i] = uc->uc_mcontext.gregs[i];
    Die(kStubExitControlSignal);
  }
  const bool fsgsbase = shared->config.has_fsgsbase != 0;

  greg_t* gregs = uc->uc_mcontext.gregs;
  uint64_t rip = static_cast<uint64_t>(gregs[REG_RIP]);
  // Inside the patched-syscall path (patch_entry_amd64.cc says what each
  // state allows).
  const uint32_t patch_state =
      __atomic_load_n(&slot->patch_state, __ATOMIC_ACQUIRE);
  const uint64_t tail = reinterpret_cast<uint64_t>(sbx_stub_patch_tail);
  const uint64_t tail_end = reinterpret_cast<uint64_t>(sbx_stub_patch_tail_end);
  if (patch_state == kPatchReturning || (rip >= tail && rip < tail_end)) {
    ResumeFromSlot(slot, signo, uc, fsgsbase);
    return;
  }
  if (patch_state == kPatchSaving || patch_state == kPatchWaiting) {
    if (signo != kInterruptSignal) Die(kStubExitCorrupt);
    if (patch_state == kPatchWaiting) {
      __atomic_store_n(&slot->patch_pending, 1, __ATOMIC_SEQ_CST);
    }
    return;
  }
  bool bootstrap = signo == SIGTRAP && rip >= kStubBase &&
                   rip < kStubBase + kStubCodeSize;

  for (int i = 0; i < kNumGregs; i++) slot->gregs[i] = gregs[i];
  uint8_t* fp = reinterpret_cast<uint8_t*>(uc->uc_mcontext.fpregs);
  uint32_t fp_size = fp != nullptr ? FpFrameSize(fp) : 0;
  slot->fp_size = fp_size;
  if (fp_size != 0) Copy(slot->fp, fp, fp_size);
  slot->trap = bootstrap ? kTrapReady : kTrapSignal;
  slot->signo = signo;
  slot->sig_code = info->si_code;
  slot->sig_errno = info->si_errno;
  slot->fault_addr = reinterpret_cast<uint64_t>(info->si_addr);
  slot->sys_nr = signo == SIGSYS ? info->si_syscall : 0;
  slot->sys_arch = signo == SIGSYS ? info->si_arch : 0;
  uint64_t fs_base = ReadFsBase(fsgsbase);
  uint64_t gs_base = ReadGsBase(fsgsbase);
  slot->stub_fs_base = fs_base;
  slot->stub_gs_base = gs_base;

  HandOverAndWait(slot);

  if (__atomic_load_n(&slot->action, __ATOMIC_ACQUIRE) != kActionResume) {
    for (;;) Syscall3(__NR_exit, 0, 0, 0);
  }
  for (int i = 0; i < kNumGregs; i++) {
    if (SentryWritable(i)) gregs[i] = static_cast<greg_t>(slot->gregs[i]);
  }
  if (fp_size != 0 && slot->fp_size == fp_size) Copy(fp, slot->fp, fp_size);
  uint64_t new_fs = slot->fs_base, new_gs = slot->gs_base;
  if (new_fs != fs_base) WriteFsBase(fsgsbase, new_fs);
  if (new_gs != gs_base) WriteGsBase(fsgsbase, new_gs);
}

// Creates a thread sharing everything with this one, on `stack_top`, that
// runs sbx_stub_thread_entry. Returns its tid or -errno.
extern "C" STUB long sbx_stub_clone(uint64_t flags, uint64_t stack_top,
                                    uint64_t ctid) {
  long ret;
  register long r10 __asm__("r10") = static_cast<long>(ctid);
  register long r8 __asm__("r8") = 0;  // tls
  // The child returns on its new, empty stack: it must not touch this
  // frame, so it jumps straight to the entry function.
  __asm__ volatile(
      "syscall\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xor %%ebp, %%ebp\n\t"
      "call sbx_stub_thread_entry\n\t"
      "ud2\n"
      "1:\n\t"
      : "=a"(ret)
      : "a"(__NR_clone), "D"(flags), "S"(stack_top), "d"(0), "r"(r10),
        "r"(r8)
      : "rcx", "r11", "memory");
  return ret;
}

// The control thread: serves the Sentry's requests on the address space.
extern "C" STUB __attribute__((noreturn)) void sbx_stub_control_loop() {
  ControlBlock* cb = &StubSharedInStub()->control;
  for (;;) {
    // Wait for a request (owner == kOwnerStub).
    const uint64_t spin = StubSharedInStub()->config.spin_cycles;
    const uint64_t start = Rdtsc();
    while (LoadAcquire(&cb->owner) != kOwnerStub) {
      if (Rdtsc() - start > spin) {
        SleepUntilStub(&cb->owner, &cb->stub_sleeping);
        break;
      }
      __builtin_ia32_pause();
    }
    long r = -38;  // ENOSYS
    const uint64_t* a = cb->args;
    switch (cb->op) {
      case kOpMmap:
        r = Syscall6(__NR_mmap, a[0], a[1], a[2], a[3], a[4], a[5]);
        break;
      case kOpMunmap:
        r = Syscall3(__NR_munmap, a[0], a[1], 0);
        break;
      case kOpMmapBatch: {
        const uint64_t n = a[0] <= kMaxMapBatch ? a[0] : kMaxMapBatch;
        const MapRequest* m = StubSharedInStub()->map_batch;
        r = static_cast<long>(n);
        for (uint64_t i = 0; i < n; i++) {
          long e = Syscall6(__NR_mmap, m[i].addr, m[i].len, m[i].prot,
                            0x01 /* MAP_SHARED */ | 0x10 /* MAP_FIXED */,
                            kStubMemFileFd, m[i].off);
          if (e < 0 && e > -4096) {
            r = e;
            break;
          }
        }
        break;
      }
      case kOpClone: {
        uint64_t index = a[0];
        if (index == 0 || index >= kMaxThreads) {
          r = -22;  // EINVAL
          break;
        }
        ThreadSlot* slot = &StubSharedInStub()->slots[index];
        uint64_t top = kStubStacks + (index + 1) * kStackSize - 64;
        r = sbx_stub_clone(kStubCloneFlags, top,
                           reinterpret_cast<uint64_t>(&slot->tid));
        break;
      }
      case kOpExit:
        Die(0);
        break;
      case kOpMembarrier:  // serializes this mm's CPUs (syscall patching)
        r = Syscall3(__NR_membarrier, a[0], 0, 0);
        break;
      default:
        break;
    }
    cb->result = r;
    StoreSeqCst(&cb->owner, kOwnerSentry);
    if (LoadSeqCst(&cb->sentry_sleeping) != 0) {
      Syscall6(__NR_futex, reinterpret_cast<long>(&cb->owner), FUTEX_WAKE, 1,
               0, 0, 0);
    }
  }
}

extern "C" STUB __attribute__((noreturn)) void sbx_stub_main(const void* prog) {
  // The filter first: from here on only the stub's own code may make host
  // syscalls, and only the few the filter allows.
  if (Syscall3(__NR_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0,
               reinterpret_cast<long>(prog)) != 0) {
    Die(kStubExitSeccomp);
  }
  // Nothing of the process that forked us may stay visible to the
  // application: unmap everything outside the stub region.
  Syscall3(__NR_munmap, 0, static_cast<long>(kStubBase), 0);
  Syscall3(__NR_munmap, static_cast<long>(kStubWindowEnd),
           static_cast<long>(kStubEnd - kStubWindowEnd), 0);
  sbx_stub_control_loop();
}

// Entered from normal code with (prog, stack_top): moves to the stub stack
// and never returns.
__asm__(
    ".pushsection sbx_stub,\"ax\",@progbits\n"
    ".globl sbx_stub_start\n"
    ".type sbx_stub_start,@function\n"
    "sbx_stub_start:\n\t"
    "mov %rsi, %rsp\n\t"
    "xor %ebp, %ebp\n\t"
    "call sbx_stub_main\n\t"
    "ud2\n"
    ".size sbx_stub_start, .-sbx_stub_start\n"
    ".globl sbx_stub_restorer\n"
    ".type sbx_stub_restorer,@function\n"
    "sbx_stub_restorer:\n\t"
    "mov $15, %eax\n\t"  // __NR_rt_sigreturn
    "syscall\n\t"
    "ud2\n"
    ".size sbx_stub_restorer, .-sbx_stub_restorer\n"
    ".popsection\n");
