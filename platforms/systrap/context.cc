// SystrapContext: one application thread's platform::Context, the switch
// into its stub thread and back (registers, FP state, the events a stop
// means) and the interrupt that brings it back early.
#include <errno.h>
#include <linux/audit.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstring>

#include "base/status_macros.h"
#include "platforms/systrap/shared_words.h"
#include "platforms/systrap/systrap.h"

namespace sandboxd::systrap {
namespace {

using platform::CpuState;
using platform::Event;

// A latency above this is no hand-over's: a timestamp was overwritten by
// the application (the slot is in its address space) or is from another
// round trip. Dropped, not counted.
constexpr uint64_t kMaxLatencyNs = 1000ull * 1000 * 1000;

// The TSC and this thread's host CPU (Linux keeps node << 12 | cpu in
// TSC_AUX).
uint64_t RdtscpCpu(int* cpu) {
  unsigned int aux;
  uint64_t t = __rdtscp(&aux);
  *cpu = static_cast<int>(aux & 0xfff);
  return t;
}

// mcontext gregs indices (sys/ucontext.h REG_*).
enum {
  kR8, kR9, kR10, kR11, kR12, kR13, kR14, kR15, kRdi, kRsi, kRbp, kRbx,
  kRdx, kRax, kRcx, kRsp, kRip, kEfl, kCsgsfs, kErr, kTrapno, kOldmask, kCr2
};

// Whether a GS base read in the stub is a worker record (the patched
// path's): the kernel's view of it is 0.
bool IsWorkerRecord(uint64_t gs) {
  if (gs < WorkerInStub(1) || gs > WorkerInStub(kMaxThreads - 1)) return false;
  return (gs - WorkerInStub(0)) % sizeof(StubWorker) == 0;
}

void RegsToGregs(const platform::Regs& r, uint64_t* g) {
  g[kR8] = r.r8; g[kR9] = r.r9; g[kR10] = r.r10; g[kR11] = r.r11;
  g[kR12] = r.r12; g[kR13] = r.r13; g[kR14] = r.r14; g[kR15] = r.r15;
  g[kRdi] = r.rdi; g[kRsi] = r.rsi; g[kRbp] = r.rbp; g[kRbx] = r.rbx;
  g[kRdx] = r.rdx; g[kRax] = r.rax; g[kRcx] = r.rcx; g[kRsp] = r.rsp;
  g[kRip] = r.rip; g[kEfl] = r.eflags;
}

void GregsToRegs(const uint64_t* g, platform::Regs& r) {
  r.r8 = g[kR8]; r.r9 = g[kR9]; r.r10 = g[kR10]; r.r11 = g[kR11];
  r.r12 = g[kR12]; r.r13 = g[kR13]; r.r14 = g[kR14]; r.r15 = g[kR15];
  r.rdi = g[kRdi]; r.rsi = g[kRsi]; r.rbp = g[kRbp]; r.rbx = g[kRbx];
  r.rdx = g[kRdx]; r.rax = g[kRax]; r.rcx = g[kRcx]; r.rsp = g[kRsp];
  r.rip = g[kRip]; r.eflags = g[kEfl];
  r.cs = g[kCsgsfs] & 0xffff;
  r.ss = (g[kCsgsfs] >> 48) & 0xffff;
}

}  // namespace

Event SystrapContext::Switch(platform::AddressSpace& as_base, CpuState& cpu) {
  auto& as = static_cast<StubProcess&>(as_base);
  for (;;) {
    Event ev = SwitchOnce(as, cpu);
    if (!platform_->patching()) return ev;
    if (ev.kind == Event::Kind::kSyscall && !last_patched_) {
      as.CountSyscallSite(cpu);
    } else if (ev.kind == Event::Kind::kException && ev.signo == SIGILL) {
      // A thread caught by a patch in progress, or sent back onto a
      // patched site's `syscall` by a restart: never the program's SIGILL.
      bool as_syscall = false;
      if (as.RestartPatchedSite(cpu, &as_syscall)) {
        if (!as_syscall) continue;
        ev.kind = Event::Kind::kSyscall;
        ev.signo = SIGSYS;
      }
    }
    return ev;
  }
}

Event SystrapContext::SwitchOnce(StubProcess& as, CpuState& cpu) {
  Event ev;
  const bool measure = platform_->measure_cpu();
  // The application runs on a stub worker, if at all.
  if (measure) ev.app_cpu_ns = 0;
  last_patched_ = false;
  if (stub_ != &as) {
    if (absl::Status st = Prepare(as); !st.ok()) {
      ev.kind = Event::Kind::kDead;
      ev.detail = std::string(st.message());
      return ev;
    }
  }
  if (fresh_) {
    fresh_ = false;
    if (cpu.fp_size == 0) {
      // The first worker's FPU image gives the layout; reset its values.
      uint32_t n = as.shared()->fp_init_size;
      if (n > sizeof(cpu.fp) || n > kMaxFpSize) n = 0;
      cpu.fp_size = n;
      std::memcpy(cpu.fp, as.shared()->fp_init, n);
      cpu.ResetFp();
    }
    // A fork's child runs patched text from its first instruction: its stub
    // must know the xsave mask before it runs any.
    if (platform_->patching()) as.SetXsaveMask(cpu);
  }
  ThreadSlot* s = &as.shared()->slots[slot_];
  // The interrupt protocol (README.md, "The context queue"): the slot's
  // flag is cleared before running_ is set, so an Interrupt() that comes
  // after our check of interrupt_ below sets it again for the worker.
  StoreSeqCst(&s->interrupt, 0);
  running_.store(true, std::memory_order_seq_cst);
  if (interrupt_.exchange(false, std::memory_order_seq_cst)) {
    running_.store(false, std::memory_order_seq_cst);
    ev.kind = Event::Kind::kInterrupted;
    return ev;
  }
  RegsToGregs(cpu.regs, s->gregs);
  s->fs_base = cpu.regs.fs_base;
  // With patching, a context whose GS base is 0 runs with its worker's
  // record there: the patched entry finds the worker through it.
  s->gs_worker = platform_->patching() && cpu.regs.gs_base == 0 ? 1 : 0;
  s->gs_base = cpu.regs.gs_base;
  s->measure_cpu = measure ? 1 : 0;
  uint32_t fp_size = cpu.fp_size <= sizeof(s->fp) ? cpu.fp_size : 0;
  s->fp_size = fp_size;
  std::memcpy(s->fp, cpu.fp, fp_size);

  // The fast path: whether the stub spins at its next wait for us, and
  // whether we spin now waiting for its next trap.
  FastPath& fp = platform_->fastpath();
  int host_cpu;
  const uint64_t give = RdtscpCpu(&host_cpu);
  const uint64_t give_ns = platform_->TscToNs(give);
  s->sentry_cpu = host_cpu;
  s->stub_spin_cycles = fp.ShouldSpin(Side::kStub, give_ns, -1, -1)
                            ? platform_->spin_cycles()
                            : 0;
  const int stub_cpu = __atomic_load_n(&s->stub_cpu, __ATOMIC_RELAXED);
  const bool spin = fp.ShouldSpin(Side::kSentry, give_ns, host_cpu, stub_cpu);
  StoreSeqCst(&s->owner, kOwnerStub);
  // A process reaped before that store has handed its slots back already:
  // then nothing would hand this one back. Reaped after it, the reaper's
  // hand-back ends our wait (it sets dead before it hands back).
  bool alive = !as.dead();
  if (alive) {
    int64_t unmatched_pos;
    as.Submit(slot_, &unmatched_pos);  // if it fails, the process is killed
    alive = as.WaitForContext(s, spin ? platform_->spin_cycles() : 0,
                              interrupt_, unmatched_pos);
  }
  const uint64_t take = __rdtsc();
  running_.store(false, std::memory_order_seq_cst);
  if (!alive) {
    ev.kind = Event::Kind::kDead;
    ev.detail = as.DeathReason();
    return ev;
  }
  if (s->trap == kTrapMapFailed) {
    // Maps queued for it failed in the worker; it has not run, and the
    // slot still holds what we wrote. From now on every map of this
    // process goes through the control thread, which reports its error:
    // run it again, and its fault on what is not mapped says the rest.
    as.defer_off_.store(true, std::memory_order_relaxed);
    return SwitchOnce(as, cpu);
  }
  RecordHandOvers(*s, give, take, spin);
  // The worker's measure of the time the context ran; the application
  // can write it, and it can never exceed the round trip's own length.
  if (measure) {
    const uint64_t ran = __atomic_load_n(&s->run_cpu_ns, __ATOMIC_RELAXED);
    const uint64_t trip = platform_->TscToNs(take - give);
    ev.app_cpu_ns = static_cast<int64_t>(std::min(ran, trip));
  }

  // Everything read here may have been written by the application.
  GregsToRegs(s->gregs, cpu.regs);
  cpu.regs.fs_base = s->stub_fs_base;
  cpu.regs.gs_base = s->stub_gs_base;
  if (platform_->patching() && IsWorkerRecord(cpu.regs.gs_base)) {
    cpu.regs.gs_base = 0;
  }
  uint32_t got = s->fp_size;
  if (got == cpu.fp_size && got <= sizeof(cpu.fp)) {
    std::memcpy(cpu.fp, s->fp, got);
  }
  int signo = s->signo;
  ev.signo = signo;
  ev.code = s->sig_code;
  ev.addr = s->fault_addr;
  if (s->trap == kTrapPatched) {
    // A syscall by a patched site: the same as a SIGSYS from seccomp.
    last_patched_ = true;
    ev.kind = Event::Kind::kSyscall;
    ev.signo = SIGSYS;
    cpu.regs.orig_rax = static_cast<uint64_t>(static_cast<int64_t>(s->sys_nr));
    return ev;
  }
  if (s->trap != kTrapSignal) {
    ev.kind = Event::Kind::kInterrupted;
    return ev;
  }
  switch (signo) {
    case SIGSYS:
      if (s->sys_arch != AUDIT_ARCH_X86_64) {
        // `int $0x80` (or sysenter) from 64-bit code: Linux serves it with
        // the i386 table, whose numbers and arguments are not the x86-64
        // ones the Sentry implements. Refused as a syscall the kernel does
        // not have: -ENOSYS in rax, every other register kept, counted.
        cpu.regs.orig_rax =
            static_cast<uint64_t>(static_cast<int64_t>(s->sys_nr));
        cpu.regs.rax = static_cast<uint64_t>(-ENOSYS);
        platform_->fastpath().mutable_counters().compat_syscalls_refused
            .fetch_add(1, std::memory_order_relaxed);
        ev.kind = Event::Kind::kInterrupted;
        break;
      }
      ev.kind = Event::Kind::kSyscall;
      cpu.regs.orig_rax = static_cast<uint64_t>(static_cast<int64_t>(s->sys_nr));
      break;
    case SIGSEGV:
      if (ev.code == SEGV_MAPERR || ev.code == SEGV_ACCERR) {
        ev.kind = Event::Kind::kFault;
        uint64_t err = s->gregs[kErr];
        ev.write = (err & 2) != 0;
        ev.exec = (err & 16) != 0;
      } else {
        ev.kind = Event::Kind::kException;
      }
      break;
    case kInterruptSignal:
      ev.kind = Event::Kind::kInterrupted;
      interrupt_.store(false, std::memory_order_seq_cst);
      break;
    default:
      ev.kind = Event::Kind::kException;
      break;
  }
  return ev;
}

void SystrapContext::RecordHandOvers(const ThreadSlot& s, uint64_t give,
                                     uint64_t take, bool spun) {
  // The stub's timestamps are untrusted: only values inside this round trip
  // are latencies.
  FastPath& fp = platform_->fastpath();
  const uint64_t submit = __atomic_load_n(&s.submit_tsc, __ATOMIC_RELAXED);
  const uint64_t wake = __atomic_load_n(&s.wake_tsc, __ATOMIC_RELAXED);
  const bool stub_spun = __atomic_load_n(&s.stub_spun, __ATOMIC_RELAXED) != 0;
  if (give <= submit && submit <= take) {
    uint64_t ns = platform_->TscToNs(take - submit);
    if (ns < kMaxLatencyNs) fp.Record(Side::kSentry, spun, ns);
  }
  if (give <= wake && wake <= take) {
    uint64_t ns = platform_->TscToNs(wake - give);
    if (ns < kMaxLatencyNs) fp.Record(Side::kStub, stub_spun, ns);
  }
  fp.OnSubmit(platform_->TscToNs(take));
}

void SystrapContext::Interrupt() {
  interrupt_.store(true, std::memory_order_seq_cst);
  if (running_.load(std::memory_order_seq_cst)) {
    StubProcess* stub = stub_;
    if (stub == nullptr) return;
    // The worker stores running_tid and then reads the flag: either it sees
    // the flag when it takes the context, or we see its tid here. A tid
    // that has moved on to another context ignores the signal (stale).
    ThreadSlot* s = &stub->shared()->slots[slot_];
    StoreSeqCst(&s->interrupt, 1);
    const pid_t tid = __atomic_load_n(&s->running_tid, __ATOMIC_SEQ_CST);
    if (tid > 0) syscall(SYS_tgkill, stub->pid(), tid, kInterruptSignal);
  }
}

absl::Status SystrapContext::Prepare(platform::AddressSpace& as_base) {
  auto& as = static_cast<StubProcess&>(as_base);
  if (stub_ == &as) return absl::OkStatus();
  Release();
  ASSIGN_OR_RETURN(slot_, as.NewThread());
  stub_ = &as;
  fresh_ = true;
  return absl::OkStatus();
}

void SystrapContext::Release() {
  if (stub_ != nullptr) {
    stub_->ReleaseThread(slot_);
    stub_ = nullptr;
    slot_ = -1;
  }
}

}  // namespace sandboxd::systrap
