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

// The calling worker's CPU time in ns (CLOCK_THREAD_CPUTIME_ID, which
// counts only the time the host ran it: not time throttled by a CPU quota,
// nor time other host threads had its CPU).
STUB_INLINE uint64_t ThreadCpuNs() {
  struct {
    int64_t sec;
    int64_t nsec;
  } ts = {0, 0};
  if (Syscall3(__NR_clock_gettime, 3 /* CLOCK_THREAD_CPUTIME_ID */,
               reinterpret_cast<long>(&ts), 0) != 0) {
    return 0;
  }
  return static_cast<uint64_t>(ts.sec) * 1000000000ull +
         static_cast<uint64_t>(ts.nsec);
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

STUB_INLINE uint32_t FetchAdd(uint32_t* p, uint32_t v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

STUB_INLINE ThreadSlot* SlotAt(uint32_t index) {
  return &StubSharedInStub()->slots[index];
}

// Hands the context in `slot` back to the Sentry (its state is written)
// and returns how long this worker should spin on the ring for its next
// context: as long as the Sentry said for this context (the adaptive fast
// path), never when the Sentry thread was on this CPU. The worker counts
// itself idle (`waiting`) *before* the Sentry can see the slot, so that a
// Sentry thread that queues the context again at once finds an idle worker
// instead of making a new one. The owner word is stored last (seq_cst) and
// is the publication; *sentry_sleeping tells us to wake the Sentry.
// `ran`: the context ran since TakeNext returned it (its CPU time is
// reported); false for one handed back unrun.
STUB_INLINE uint64_t HandBack(ThreadSlot* slot, bool ran = true) {
  if (__atomic_load_n(&slot->measure_cpu, __ATOMIC_RELAXED) != 0) {
    slot->run_cpu_ns = ran ? ThreadCpuNs() - slot->run_start_cpu_ns : 0;
  }
  uint64_t spin = __atomic_load_n(&slot->stub_spin_cycles, __ATOMIC_RELAXED);
  int32_t sentry_cpu = __atomic_load_n(&slot->sentry_cpu, __ATOMIC_RELAXED);
  int32_t cpu;
  slot->submit_tsc = Rdtscp(&cpu);
  slot->stub_cpu = cpu;
  if (sentry_cpu == cpu) spin = 0;  // it needs this CPU to answer
  FetchAdd(&StubSharedInStub()->ring.waiting, 1);
  __atomic_store_n(&slot->running_tid, 0, __ATOMIC_SEQ_CST);
  StoreSeqCst(&slot->owner, kOwnerSentry);
  if (LoadSeqCst(&slot->sentry_sleeping) != 0) {
    Syscall6(__NR_futex, reinterpret_cast<long>(&slot->owner), FUTEX_WAKE, 1,
             0, 0, 0);
  }
  return spin;
}

// Takes the oldest entry of the ring, if any: false when it is empty.
// Vyukov's consumer: the cell at head is ready when its seq is head + 1;
// the CAS on head decides which worker takes it; the cell is freed for the
// producer's next lap (seq = head + kRingSize) once it is read. A cell
// that is neither ready nor empty while head has not moved can only be
// overwritten memory: the stub exits (kStubExitRing) rather than spin.
STUB_INLINE bool TryTake(ContextRing* ring, uint32_t* index, uint32_t* gen) {
  for (;;) {
    uint32_t h = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
    RingCell* c = &ring->cells[h & (kRingSize - 1)];
    const uint32_t seq = LoadAcquire(&c->seq);
    const int32_t d = static_cast<int32_t>(seq - (h + 1));
    if (d < 0) return false;  // not written yet: empty
    if (d == 0) {
      if (__atomic_compare_exchange_n(&ring->head, &h, h + 1, false,
                                      __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
        *index = __atomic_load_n(&c->ctx_index, __ATOMIC_RELAXED);
        *gen = __atomic_load_n(&c->generation, __ATOMIC_RELAXED);
        __atomic_store_n(&c->seq, h + kRingSize, __ATOMIC_RELEASE);
        return true;
      }
      continue;  // another worker took it
    }
    // Taken by another worker since we read head (it moves head before it
    // frees the cell): read head again. If it has not moved, the cell lies.
    if (__atomic_load_n(&ring->head, __ATOMIC_ACQUIRE) == h) {
      Die(kStubExitRing);
    }
  }
}

// Waits for an entry of the ring: spins for `spin` TSC cycles (0: not at
// all), then sleeps on the ring's futex word. The Sentry bumps that word
// (seq_cst) after it publishes an entry and then wakes one sleeper if
// `sleepers` is non-zero; we count ourselves a sleeper and read the word
// before we look at the ring again, so one of the two sees the other.
STUB_INLINE void WaitForEntry(StubWorker* w, uint64_t spin, uint32_t* index,
                              uint32_t* gen, bool* spun) {
  ContextRing* ring = &StubSharedInStub()->ring;
  // As the fast path measures it: whether this wait was allowed to spin
  // (its "slept at once" baseline is the waits that were not).
  *spun = spin != 0;
  if (TryTake(ring, index, gen)) return;
  if (spin != 0) {
    const uint64_t start = Rdtsc();
    while (Rdtsc() - start <= spin) {
      __builtin_ia32_pause();
      if (TryTake(ring, index, gen)) return;
    }
  }
  for (;;) {
    StoreSeqCst(&w->sleeping, 1);
    FetchAdd(&ring->sleepers, 1);
    const uint32_t word = LoadSeqCst(&ring->futex);
    bool got = TryTake(ring, index, gen);
    if (!got) {
      Syscall6(__NR_futex, reinterpret_cast<long>(&ring->futex), FUTEX_WAIT,
               word, 0, 0, 0);
    }
    __atomic_fetch_sub(&ring->sleepers, 1, __ATOMIC_SEQ_CST);
    StoreSeqCst(&w->sleeping, 0);
    if (got || TryTake(ring, index, gen)) return;
  }
}

// Fills the trap fields of an interrupt report: the state is the slot's
// as the Sentry left it (whole: the context has not run since).
STUB_INLINE void SetInterruptTrap(ThreadSlot* slot) {
  slot->trap = kTrapSignal;
  slot->signo = kInterruptSignal;
  slot->sig_code = -6;  // SI_TKILL
  slot->sig_errno = 0;
  slot->fault_addr = 0;
  slot->sys_nr = 0;
  slot->sys_arch = 0;
  slot->stub_fs_base = slot->fs_base;
  slot->stub_gs_base = slot->gs_base;
}

// Makes the maps the Sentry queued for the context this worker is about
// to run (ThreadSlot::maps), as kOpMmapBatch does on the control thread.
// False at the first failure, whose -errno is left in deferred_error.
STUB_INLINE bool MakeDeferredMaps(uint32_t n) {
  StubShared* shared = StubSharedInStub();
  const long r = MapBatch(shared->deferred, n);
  if (r < 0) {
    shared->deferred_error = r;
    return false;
  }
  return true;
}

// Takes the next context from the ring (any context: a worker is not bound
// to one) after handing one back with `spin` (HandBack), and returns its
// slot, recorded in w. The interrupt protocol: the worker stores
// running_tid, *then* reads `interrupt`; the Sentry stores `interrupt`,
// then reads running_tid and signals it. So either we see the flag here
// and report the interrupt at once, or the Sentry's signal reaches us
// while we run the context. `patched`: on the patched path, where signals
// are not blocked: kPatchReturning is set before the check, so a signal
// after it finds a whole context to report (see the handler).
STUB_INLINE ThreadSlot* TakeNext(StubWorker* w, uint64_t spin, bool patched) {
  for (;;) {
    uint32_t index, gen;
    bool spun;
    WaitForEntry(w, spin, &index, &gen, &spun);
    if (index == 0 || index >= kMaxThreads) Die(kStubExitRing);
    ThreadSlot* slot = SlotAt(index);
    if (__atomic_load_n(&slot->generation, __ATOMIC_ACQUIRE) != gen) {
      Die(kStubExitRing);
    }
    if (LoadAcquire(&slot->owner) != kOwnerStub) Die(kStubExitCorrupt);
    w->ctx_index = index;
    __atomic_store_n(&w->ctx, reinterpret_cast<uint64_t>(slot),
                     __ATOMIC_SEQ_CST);
    slot->wake_tsc = Rdtsc();
    slot->stub_spun = spun ? 1 : 0;
    // Maps the Sentry queued for this context (a page fault's, an exec's)
    // are made here, before it runs: no round trip to the control thread.
    // Made even if an interrupt is pending, so that the Sentry never waits
    // on them for long. A failure hands the context back unrun.
    const uint32_t maps = LoadAcquire(&slot->maps);
    if (maps != 0) {
      const bool ok = MakeDeferredMaps(maps);
      StoreSeqCst(&slot->maps, 0);
      if (!ok) {
        slot->trap = kTrapMapFailed;
        spin = HandBack(slot, /*ran=*/false);
        continue;
      }
    }
    __atomic_store_n(&slot->running_tid, w->tid, __ATOMIC_SEQ_CST);
    if (patched) StoreSeqCst(&w->patch_state, kPatchReturning);
    if (LoadSeqCst(&slot->interrupt) == 0) {
      if (__atomic_load_n(&slot->measure_cpu, __ATOMIC_RELAXED) != 0) {
        slot->run_start_cpu_ns = ThreadCpuNs();
      }
      return slot;
    }
    if (patched) StoreSeqCst(&w->patch_state, kPatchWaiting);
    SetInterruptTrap(slot);
    spin = HandBack(slot, /*ran=*/false);
  }
}

// The context slot this worker runs (it is running application code, or
// on the patched path): checked, since the record is writable by the
// application.
STUB_INLINE ThreadSlot* CurrentSlot(StubWorker* w) {
  const uint32_t index = __atomic_load_n(&w->ctx_index, __ATOMIC_ACQUIRE);
  if (index == 0 || index >= kMaxThreads ||
      __atomic_load_n(&w->ctx, __ATOMIC_ACQUIRE) == 0) {
    Die(kStubExitRing);
  }
  return SlotAt(index);
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
STUB_INLINE void LoadFrameFromSlot(ThreadSlot* slot, StubWorker* w,
                                   ucontext_t* uc, bool fsgsbase) {
  greg_t* gregs = uc->uc_mcontext.gregs;
  for (int i = 0; i < kNumGregs; i++) {
    if (SentryWritable(i)) gregs[i] = static_cast<greg_t>(slot->gregs[i]);
  }
  uint8_t* fp = reinterpret_cast<uint8_t*>(uc->uc_mcontext.fpregs);
  uint32_t fp_size = fp != nullptr ? FpFrameSize(fp) : 0;
  if (fp_size != 0 && slot->fp_size == fp_size) Copy(fp, slot->fp, fp_size);
  // With patching, GS base is the worker's record (the patched entry
  // finds the worker, and through it the context, there).
  const uint64_t new_gs = __atomic_load_n(&slot->gs_worker, __ATOMIC_RELAXED)
                              ? w->self
                              : slot->gs_base;
  uint64_t fs = ReadFsBase(fsgsbase), gs = ReadGsBase(fsgsbase);
  if (slot->fs_base != fs) WriteFsBase(fsgsbase, slot->fs_base);
  if (new_gs != gs) WriteGsBase(fsgsbase, new_gs);
}

}  // namespace
}  // namespace sandboxd::systrap

using namespace sandboxd::systrap;

// Called by the patched entry (patch_entry_amd64.cc) on the worker's stack
// with the state saved in its context slot: hands that context back, takes
// the next one from the ring and returns its slot (kPatchReturning), whose
// state the entry's tail loads.
extern "C" STUB ThreadSlot* sbx_stub_patch_handover(StubWorker* w) {
  ThreadSlot* slot = CurrentSlot(w);
  StoreSeqCst(&w->patch_state, kPatchWaiting);
  return TakeNext(w, HandBack(slot), /*patched=*/true);
}

// A new worker starts here (via sbx_stub_clone) on its own stack. It
// registers that stack as its signal stack and traps into the handler
// from stub code, which the handler reads as "start".
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
  if (index == 0) {
    // The control thread never runs application code: a signal here is a
    // stub bug. Leave a note for the Sentry (in slot 0, no context's) and
    // die.
    ThreadSlot* note = &shared->slots[0];
    note->signo = signo;
    note->sig_code = info->si_code;
    note->fault_addr = reinterpret_cast<uint64_t>(info->si_addr);
    for (int i = 0; i < kNumGregs; i++) note->gregs[i] = uc->uc_mcontext.gregs[i];
    Die(kStubExitControlSignal);
  }
  // A stub thread runs with no signal blocked, so whatever sigreturn
  // restores is the empty mask: a mask the application forged (a jump to
  // the restorer with a frame of its own) lasts until its next trap at
  // most, and a thread that never traps again is killed by the Sentry
  // when it does not take its interrupt (StubProcess::WaitForContext).
  *reinterpret_cast<uint64_t*>(&uc->uc_sigmask) = 0;
  StubWorker* w = &shared->workers[index];
  const bool fsgsbase = shared->config.has_fsgsbase != 0;

  greg_t* gregs = uc->uc_mcontext.gregs;
  uint64_t rip = static_cast<uint64_t>(gregs[REG_RIP]);
  uint8_t* fp = reinterpret_cast<uint8_t*>(uc->uc_mcontext.fpregs);
  const uint32_t fp_size = fp != nullptr ? FpFrameSize(fp) : 0;

  // Inside the patched-syscall path (patch_entry_amd64.cc says what each
  // state allows).
  const uint32_t patch_state = LoadAcquire(&w->patch_state);
  const uint64_t tail = reinterpret_cast<uint64_t>(sbx_stub_patch_tail);
  const uint64_t tail_end = reinterpret_cast<uint64_t>(sbx_stub_patch_tail_end);
  if (patch_state == kPatchReturning || (rip >= tail && rip < tail_end)) {
    // The context slot holds the whole state to return to.
    ThreadSlot* slot = CurrentSlot(w);
    if (signo == kInterruptSignal) {
      // Not for this context (stale): carry on where we were.
      if (LoadSeqCst(&slot->interrupt) == 0) return;
      SetInterruptTrap(slot);
      StoreSeqCst(&w->patch_state, kPatchWaiting);
      slot = TakeNext(w, HandBack(slot), /*patched=*/false);
    }
    // Else the entry's int3 (the context's GS base is not its worker's):
    // return to the application through sigreturn.
    LoadFrameFromSlot(slot, w, uc, fsgsbase);
    StoreSeqCst(&w->patch_state, kPatchIdle);
    return;
  }
  if (patch_state == kPatchSaving || patch_state == kPatchWaiting) {
    // An interrupt for the context being handed back: the Sentry's own
    // flag still holds it and its next Switch reports it. One for the next
    // context is seen when it is taken (TakeNext).
    if (signo != kInterruptSignal) Die(kStubExitCorrupt);
    return;
  }

  if (signo == SIGTRAP && rip >= kStubBase && rip < kStubBase + kStubCodeSize &&
      __atomic_load_n(&w->ctx, __ATOMIC_ACQUIRE) == 0) {
    // The worker's start (sbx_stub_thread_entry's int3). The first one
    // tells the Sentry the FPU layout and announces itself idle; the others
    // were made for a queued entry, already counted.
    if (__atomic_load_n(&w->matched, __ATOMIC_ACQUIRE) == 0) {
      shared->fp_init_size = fp_size;
      if (fp_size != 0) Copy(shared->fp_init, fp, fp_size);
      FetchAdd(&shared->ring.waiting, 1);
      StoreSeqCst(&shared->ready, kOwnerSentry);
      if (LoadSeqCst(&shared->ready_sleeping) != 0) {
        Syscall6(__NR_futex, reinterpret_cast<long>(&shared->ready),
                 FUTEX_WAKE, 1, 0, 0, 0);
      }
    }
    ThreadSlot* slot = TakeNext(w, 0, /*patched=*/false);
    LoadFrameFromSlot(slot, w, uc, fsgsbase);
    return;
  }

  ThreadSlot* slot = CurrentSlot(w);
  // An interrupt for a context this worker has handed back since (the
  // Sentry read running_tid just before): not for this one.
  if (signo == kInterruptSignal && LoadSeqCst(&slot->interrupt) == 0) return;

  for (int i = 0; i < kNumGregs; i++) slot->gregs[i] = gregs[i];
  slot->fp_size = fp_size;
  if (fp_size != 0) Copy(slot->fp, fp, fp_size);
  slot->trap = kTrapSignal;
  slot->signo = signo;
  slot->sig_code = info->si_code;
  slot->sig_errno = info->si_errno;
  slot->fault_addr = reinterpret_cast<uint64_t>(info->si_addr);
  slot->sys_nr = signo == SIGSYS ? info->si_syscall : 0;
  slot->sys_arch = signo == SIGSYS ? info->si_arch : 0;
  slot->stub_fs_base = ReadFsBase(fsgsbase);
  slot->stub_gs_base = ReadGsBase(fsgsbase);

  slot = TakeNext(w, HandBack(slot), /*patched=*/false);
  LoadFrameFromSlot(slot, w, uc, fsgsbase);
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
      case kOpMmapBatch:
        r = MapBatch(StubSharedInStub()->map_batch, a[0]);
        break;
      case kOpClone: {
        uint64_t index = a[0];
        if (index == 0 || index >= kMaxThreads) {
          r = -22;  // EINVAL
          break;
        }
        StubWorker* w = &StubSharedInStub()->workers[index];
        uint64_t top = kStubStacks + (index + 1) * kStackSize - 64;
        r = sbx_stub_clone(kStubCloneFlags, top,
                           reinterpret_cast<uint64_t>(&w->tid));
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
    AnswerRequest(cb, r);
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
