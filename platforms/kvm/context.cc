// KvmContext: one application thread's platform::Context, a vCPU of the
// pool while it runs, its register and FP state, the KVM_RUN loop and the
// decoding of guest exits into platform events.
#include <errno.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "platforms/kvm/guest_hw.h"
#include "platforms/kvm/guest_pvm.h"
#include "platforms/kvm/kvm_abi.h"
#include "platforms/kvm/kvm_platform.h"
#include "platforms/kvm/stats.h"

namespace sandboxd::kvm {

using platform::CpuState;
using platform::Event;

namespace {

constexpr uint64_t kRflagsFixed = 0x2, kRflagsIf = 0x200;
// What a user-mode program can set in RFLAGS (CF PF AF ZF SF TF DF OF AC
// ID, and the rest of the arithmetic flags); IOPL, VM, VIF, VIP and NT
// stay clear, as SYSRET and sigreturn leave them on Linux.
constexpr uint64_t kRflagsUser = 0x254dd5;

// Signal-frame layout of the xsave image (the kernel's struct
// _fpx_sw_bytes at byte 464, and the magic after the image).
constexpr uint32_t kFpMagic1 = 0x46505853, kFpMagic2 = 0x46505845;
constexpr size_t kSwBytesOffset = 464;

Event Dead(const absl::Status& st) {
  Event ev;
  ev.kind = Event::Kind::kDead;
  ev.detail = std::string(st.message());
  return ev;
}

Event Exception(int signo, int code, uint64_t addr) {
  Event ev;
  ev.kind = Event::Kind::kException;
  ev.signo = signo;
  ev.code = code;
  ev.addr = addr;
  return ev;
}

// The event of exception `vector` in user mode, as Linux signals it.
Event ExceptionEvent(int vector, uint32_t err, uint64_t cr2, uint64_t rip) {
  switch (vector) {
    case 14: {  // #PF
      Event f;
      f.kind = Event::Kind::kFault;
      f.signo = SIGSEGV;
      f.addr = cr2;
      f.write = (err & 2) != 0;
      f.exec = (err & 16) != 0;
      return f;
    }
    case 0:  // #DE
      return Exception(SIGFPE, FPE_INTDIV, rip);
    case 6:  // #UD
      return Exception(SIGILL, ILL_ILLOPN, rip);
    case 1:  // #DB
      return Exception(SIGTRAP, TRAP_TRACE, 0);
    case 3:  // #BP: RIP is already past the int3, as Linux reports it
      return Exception(SIGTRAP, SI_KERNEL, 0);
    case 16:  // #MF
    case 19:  // #XM
      return Exception(SIGFPE, 0, rip);
    case 17:  // #AC
      return Exception(SIGBUS, BUS_ADRALN, 0);
    default:  // #GP, #SS, #NP...
      return Exception(SIGSEGV, SI_KERNEL, 0);
  }
}

}  // namespace

KvmContext::KvmContext(KvmPlatform* p) : platform_(p) {
  absl::MutexLock l(&platform_->ctx_mu_);
  platform_->contexts_.insert(this);
}

KvmContext::~KvmContext() {
  {
    absl::MutexLock l(&platform_->ctx_mu_);
    platform_->contexts_.erase(this);
  }
  live_cpu_ = nullptr;  // its task is going away with it
  Release();
}

void KvmContext::Kick() {
  absl::MutexLock l(&kick_mu_);
  if (running_) {
    vcpu_->run()->immediate_exit = 1;
    pthread_kill(thread_, kKickSignal);
  }
}

absl::Status KvmContext::Acquire() {
  absl::Status st = AcquireVcpu();
  if (!st.ok()) {
    platform_->vm()->stats().vcpus_refused.fetch_add(1, std::memory_order_relaxed);
  }
  return st;
}

absl::Status KvmContext::AcquireVcpu() {
  if (platform_->pool() == nullptr) {
    return absl::FailedPreconditionError(
        "kvm: a vCPU before FinishSetup made the pool (eager mode)");
  }
  ASSIGN_OR_RETURN(vcpu_, platform_->pool()->Take());
  live_cpu_ = nullptr;  // a vCPU fresh from the pool holds nobody's state
  parked_ = false;
  if (platform_->hardware()) {
    if (vcpu_->id() >= hw::kMaxVcpus) {
      platform_->pool()->Give(std::move(vcpu_));
      return absl::ResourceExhaustedError(absl::StrFormat(
          "kvm: more than %d vCPUs in use (the stub region's TSSes)",
          hw::kMaxVcpus));
    }
    RETURN_IF_ERROR(hw::InitVcpu(*vcpu_));
  } else {
    RETURN_IF_ERROR(InitPvmVcpu(*vcpu_));
  }
  kvm_xcrs xcrs = {};
  xcrs.nr_xcrs = 1;
  xcrs.xcrs[0].xcr = 0;
  xcrs.xcrs[0].value = platform_->xcr0();
  if (ioctl(vcpu_->fd(), KVM_SET_XCRS, &xcrs) < 0) {
    return ErrnoStatus(absl::StrFormat("KVM_SET_XCRS xcr0=%#x",
                                       platform_->xcr0()),
                       errno);
  }
  sregs_valid_ = false;
  return absl::OkStatus();
}

absl::Status KvmContext::Prepare(platform::AddressSpace& as) {
  (void)as;
  // Before FinishSetup made the pool, the first Switch takes it.
  if (vcpu_ != nullptr || platform_->pool() == nullptr) {
    return absl::OkStatus();
  }
  return Acquire();
}

void KvmContext::Release() {
  if (vcpu_ == nullptr) return;
  // The state the vCPU kept goes back to its task before the vCPU goes to
  // another.
  if (live_cpu_ != nullptr) SyncFp(*live_cpu_);
  platform_->pool()->Give(std::move(vcpu_));
  sregs_valid_ = false;
}

void KvmContext::SyncFp(CpuState& cpu) {
  if (cpu.fp_live == this && live_cpu_ == &cpu && vcpu_ != nullptr) {
    if (absl::Status st = SaveFp(cpu); !st.ok()) {
      // The vCPU's state is lost with its fd; what the task gets instead
      // is the state execve gives.
      cpu.fp_size = 0;
    }
  }
  cpu.fp_live = nullptr;
  if (live_cpu_ == &cpu) live_cpu_ = nullptr;
}

void KvmContext::Interrupt() {
  interrupt_.store(true);
  absl::MutexLock l(&kick_mu_);
  if (running_) {
    vcpu_->run()->immediate_exit = 1;
    pthread_kill(thread_, kKickSignal);
  }
}

absl::Status KvmContext::LoadFp(const CpuState& cpu) {
  KvmXsave x = {};
  auto* bytes = reinterpret_cast<uint8_t*>(x.region);
  const uint32_t size = platform_->xsave_size();
  if (cpu.fp_size >= size + 4) {
    std::memcpy(bytes, cpu.fp, size);
    // The software-reserved bytes are the kernel's, not the CPU's.
    std::memset(bytes + kSwBytesOffset, 0, 512 - kSwBytesOffset);
    uint32_t mxcsr;
    std::memcpy(&mxcsr, bytes + 24, 4);
    mxcsr &= 0xffff;  // reserved bits would make KVM_SET_XSAVE fail
    std::memcpy(bytes + 24, &mxcsr, 4);
    uint64_t xstate_bv;
    std::memcpy(&xstate_bv, bytes + 512, 8);
    xstate_bv &= platform_->xcr0();
    std::memcpy(bytes + 512, &xstate_bv, 8);
  } else {
    // A fresh task: the state execve gives (FCW 0x37f, MXCSR 0x1f80).
    const uint16_t fcw = 0x37f;
    const uint32_t mxcsr = 0x1f80, mxcsr_mask = 0xffff;
    const uint64_t xstate_bv = 0x3;
    std::memcpy(bytes, &fcw, 2);
    std::memcpy(bytes + 24, &mxcsr, 4);
    std::memcpy(bytes + 28, &mxcsr_mask, 4);
    std::memcpy(bytes + 512, &xstate_bv, 8);
  }
  if (ioctl(vcpu_->fd(), kKvmSetXsave, &x) < 0) {
    return ErrnoStatus("KVM_SET_XSAVE", errno);
  }
  ++xsave_loads_;
  return absl::OkStatus();
}

absl::Status KvmContext::SaveFp(CpuState& cpu) {
  KvmXsave x;
  if (ioctl(vcpu_->fd(), kKvmGetXsave, &x) < 0) {
    return ErrnoStatus("KVM_GET_XSAVE", errno);
  }
  ++xsave_saves_;
  const uint32_t size = platform_->xsave_size();
  std::memcpy(cpu.fp, x.region, size);
  // As the kernel writes it into a signal frame: sw bytes and magic.
  struct {
    uint32_t magic1;
    uint32_t extended_size;
    uint64_t xfeatures;
    uint32_t xstate_size;
    uint32_t padding[7];
  } sw = {kFpMagic1, size + 4, platform_->xcr0(), size, {}};
  static_assert(sizeof(sw) == 48);
  std::memcpy(cpu.fp + kSwBytesOffset, &sw, sizeof(sw));
  std::memcpy(cpu.fp + size, &kFpMagic2, 4);
  cpu.fp_size = size + 4;
  return absl::OkStatus();
}

Event KvmContext::Switch(platform::AddressSpace& as, CpuState& cpu) {
  auto& kas = static_cast<KvmAddressSpace&>(as);
  if (vcpu_ == nullptr) {
    absl::Status st = Acquire();
    if (!st.ok()) return Dead(Annotate(st, "kvm: taking a vCPU"));
  }
  if (interrupt_.exchange(false)) return Event{};
  kvm_run* run = vcpu_->run();
  run->kvm_valid_regs =
      KVM_SYNC_X86_REGS | KVM_SYNC_X86_SREGS | KVM_SYNC_X86_EVENTS;

  kvm_regs& r = run->s.regs.regs;
  const platform::Regs& in = cpu.regs;
  r.rax = in.rax, r.rbx = in.rbx, r.rcx = in.rcx, r.rdx = in.rdx;
  r.rsi = in.rsi, r.rdi = in.rdi, r.rsp = in.rsp, r.rbp = in.rbp;
  r.r8 = in.r8, r.r9 = in.r9, r.r10 = in.r10, r.r11 = in.r11;
  r.r12 = in.r12, r.r13 = in.r13, r.r14 = in.r14, r.r15 = in.r15;
  r.rip = in.rip;
  r.rflags = (in.eflags & kRflagsUser) | kRflagsFixed | kRflagsIf;
  uint32_t dirty = KVM_SYNC_X86_REGS;

  const uint64_t root = kas.root();
  const bool sregs_stale = !sregs_valid_ || root != loaded_root_ ||
                           in.fs_base != loaded_fs_ || in.gs_base != loaded_gs_;
  if (parked_) {
    // Hardware flavour, after a syscall: the vCPU waits in the stub (ring
    // 0) before its SYSRETQ. That returns as Linux does (RIP from RCX,
    // RFLAGS from R11) when the task's state allows it; otherwise the
    // vCPU enters user mode directly, as after an exception.
    const uint64_t rflags = r.rflags;
    const bool canonical = in.rip < (1ull << 47);
    if (!sregs_stale && canonical && in.rcx == in.rip &&
        (in.r11 & kRflagsUser) == (in.eflags & kRflagsUser)) {
      r.rcx = in.rip;
      r.r11 = rflags;
      r.rip = parked_rip_;
      r.rflags = parked_rflags_;
    } else {
      sregs_valid_ = false;  // CS/SS are the stub's: reload user mode
    }
    parked_ = false;
  }
  if (!sregs_valid_ || sregs_stale) {
    kvm_sregs& s = run->s.regs.sregs;
    if (!sregs_valid_) {
      absl::Status st = vcpu_->GetSregs(&s);
      if (!st.ok()) return Dead(st);
    }
    if (platform_->hardware()) {
      hw::UserSregs(&s, vcpu_->id(), root, in.fs_base, in.gs_base);
    } else {
      UserModeSregs(&s, root, in.fs_base, in.gs_base);
    }
    dirty |= KVM_SYNC_X86_SREGS;
    sregs_valid_ = true;
    loaded_root_ = root;
    loaded_fs_ = in.fs_base, loaded_gs_ = in.gs_base;
  }
  run->kvm_dirty_regs = dirty;
  // The FPU state: the vCPU still has it when it was left there at the
  // last exit and nobody replaced it since (which clears fp_live).
  if (cpu.fp_live != this || live_cpu_ != &cpu) {
    if (live_cpu_ != nullptr) SyncFp(*live_cpu_);
    if (absl::Status st = LoadFp(cpu); !st.ok()) {
      // Only a corrupt image from sigreturn gets here; Linux answers that
      // with SIGSEGV.
      cpu.fp_size = 0;
      return Exception(SIGSEGV, SI_KERNEL, 0);
    }
    cpu.fp_live = nullptr;
  }

  absl::StatusOr<uint32_t> reason;
  for (;;) {
    if (absl::Status st = platform_->FlushShadowIfStale(); !st.ok()) {
      return Dead(st);
    }
    absl::ReaderMutexLock run_lock(&platform_->run_mu());
    {
      absl::MutexLock l(&kick_mu_);
      running_ = true;
      thread_ = pthread_self();
      if (interrupt_.load() || platform_->ShadowFlushPending()) {
        run->immediate_exit = 1;
      }
    }
    reason = vcpu_->Run();
    {
      absl::MutexLock l(&kick_mu_);
      running_ = false;
      run->immediate_exit = 0;
    }
    if (!reason.ok()) return Dead(reason.status());
    // A kick for the shadow flush: flush, then run on.
    if (*reason != KVM_EXIT_INTR || interrupt_.load()) break;
    if (!platform_->ShadowFlushPending()) break;
    platform_->vm()->stats().CountExit(ExitKind::kShadowFlush);
    run->kvm_dirty_regs = 0;  // the synced registers hold the live state
  }
  interrupt_.store(false);

  platform::Regs& out = cpu.regs;
  out.rax = r.rax, out.rbx = r.rbx, out.rcx = r.rcx, out.rdx = r.rdx;
  out.rsi = r.rsi, out.rdi = r.rdi, out.rsp = r.rsp, out.rbp = r.rbp;
  out.r8 = r.r8, out.r9 = r.r9, out.r10 = r.r10, out.r11 = r.r11;
  out.r12 = r.r12, out.r13 = r.r13, out.r14 = r.r14, out.r15 = r.r15;
  out.rip = r.rip;
  out.eflags = r.rflags;
  out.cs = kUserCs;
  out.ss = kUserDs;
  out.fs_base = loaded_fs_ = run->s.regs.sregs.fs.base;
  out.gs_base = loaded_gs_ = run->s.regs.sregs.gs.base;
  if (platform_->options().lazy_fp && *reason != KVM_EXIT_FAIL_ENTRY &&
      *reason != KVM_EXIT_INTERNAL_ERROR) {
    // Most exits go back without the Sentry looking at the FPU state, so
    // it stays in the vCPU (fp_live) until a reader asks (Task::SyncFp:
    // signal frames, fork, checkpoint). A PVM triple fault keeps it too
    // (FpSurvivesAnException).
    cpu.fp_live = this;
    live_cpu_ = &cpu;
    if (cpu.fp_size == 0) cpu.fp_size = platform_->xsave_size() + 4;
  } else {
    if (absl::Status st = SaveFp(cpu); !st.ok()) return Dead(st);
    cpu.fp_live = nullptr;
    live_cpu_ = nullptr;
  }
  Event ev = Decode(*reason, cpu);
  // `int $0x80` from 64-bit code (PVM: #UD at it; hardware: #GP through
  // the absent gate). Linux would serve it from the i386 table, which the
  // Sentry does not implement: refused as a syscall the kernel does not
  // have (-ENOSYS, every other register kept), past the instruction,
  // counted.
  if (ev.kind == Event::Kind::kException &&
      (ev.signo == SIGILL || ev.signo == SIGSEGV) &&
      kas.IsInt80At(cpu.regs.rip)) {
    cpu.regs.rip += 2;
    cpu.regs.orig_rax = cpu.regs.rax & 0xffffffffu;
    cpu.regs.rax = static_cast<uint64_t>(-ENOSYS);
    platform_->vm()->stats().compat_syscalls_refused.fetch_add(
        1, std::memory_order_relaxed);
    return Event{};
  }
  return ev;
}

Event KvmContext::DecodeHardware(uint32_t reason, CpuState& cpu) {
  kvm_run* run = vcpu_->run();
  platform::Regs& regs = cpu.regs;
  const uint64_t stub_rip = run->s.regs.regs.rip;
  const hw::Exit e =
      hw::DecodeExit(*run, stub_rip, platform_->HardwareFrame(vcpu_->id()));
  switch (e.kind) {
    case hw::Exit::Kind::kSyscall: {
      Event ev;
      ev.kind = Event::Kind::kSyscall;
      regs.orig_rax = regs.rax;
      regs.rip = regs.rcx;
      regs.eflags = regs.r11;
      parked_ = true;
      parked_rip_ = stub_rip;
      parked_rflags_ = run->s.regs.regs.rflags;
      return ev;
    }
    case hw::Exit::Kind::kException:
      // The vCPU is left in the stub's entry; the next Switch enters user
      // mode directly.
      sregs_valid_ = false;
      if (!e.from_user) {
        return Dead(absl::InternalError(absl::StrFormat(
            "kvm: exception %d in the stub at rip=%#x (error %#x)", e.vector,
            e.rip, e.error_code)));
      }
      regs.rip = e.rip;
      regs.rsp = e.rsp;
      regs.eflags = e.rflags;
      return ExceptionEvent(e.vector, static_cast<uint32_t>(e.error_code),
                            run->s.regs.sregs.cr2, regs.rip);
    case hw::Exit::Kind::kOther:
      break;
  }
  if (reason == KVM_EXIT_INTR) {
    if (stub_rip >= kStubVa && stub_rip < kStubVa + k4K) {
      // Stopped in the stub on the way back from a syscall (before its
      // SYSRETQ): the task's state is the one SYSRET would give.
      regs.rip = regs.rcx;
      regs.eflags = regs.r11;
      parked_ = true;
      parked_rip_ = stub_rip;
      parked_rflags_ = run->s.regs.regs.rflags;
    }
    return Event{};
  }
  sregs_valid_ = false;
  if (reason == KVM_EXIT_IO && run->io.port == kSyscallPort) {
    // The program's own OUT (IOPL 0 at CPL 3: a #GP on Linux).
    return Exception(SIGSEGV, SI_KERNEL, 0);
  }
  return Dead(absl::InternalError(
      absl::StrCat("kvm: unexpected exit: ", DescribeExit(*vcpu_, reason))));
}

Event KvmContext::Decode(uint32_t reason, CpuState& cpu) {
  if (platform_->hardware()) return DecodeHardware(reason, cpu);
  kvm_run* run = vcpu_->run();
  platform_->vm()->stats().CountExit(ClassifyExit(
      reason, run->io.port, run->s.regs.events.exception.nr));
  platform::Regs& regs = cpu.regs;
  switch (reason) {
    case KVM_EXIT_IO: {
      if (run->io.port != kSyscallPort ||
          run->io.direction != KVM_EXIT_IO_OUT) {
        break;
      }
      if (regs.rip != kStubVa + kStubSyscallEntry + 2) {
        // The program's own OUT to the port: on Linux, a #GP.
        return Exception(SIGSEGV, SI_KERNEL, 0);
      }
      // SYSCALL left the return address in RCX and RFLAGS in R11.
      Event ev;
      ev.kind = Event::Kind::kSyscall;
      regs.orig_rax = regs.rax;
      regs.rip = regs.rcx;
      regs.eflags = regs.r11;
      return ev;
    }
    case KVM_EXIT_SHUTDOWN: {
      // PVM delivers no exception to the guest here: the vCPU stops, and
      // the vCPU events say which exception it was.
      sregs_valid_ = false;
      const kvm_vcpu_events& ev = run->s.regs.events;
      uint64_t cr2 = 0;
      if (ev.exception.nr == 14) {
        // The synced sregs can hold a stale CR2 after a triple fault;
        // KVM_GET_SREGS has the one of this fault.
        kvm_sregs s;
        cr2 = vcpu_->GetSregs(&s).ok() ? s.cr2 : 0;
      }
      return ExceptionEvent(ev.exception.nr, ev.exception.error_code, cr2,
                            regs.rip);
    }
    case KVM_EXIT_INTR:
      return Event{};
    default:
      break;
  }
  return Dead(absl::InternalError(
      absl::StrCat("kvm: unexpected exit: ", DescribeExit(*vcpu_, reason))));
}

}  // namespace sandboxd::kvm
