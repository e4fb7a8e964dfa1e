// The x86-64 signal frame, as Linux builds it (arch/x86/kernel/signal.c):
//
//   [user stack or sigaltstack top]
//   - 128 bytes red zone (not on a fresh alternate stack)
//   xsave image, 64-byte aligned           <- uc_mcontext.fpstate
//   struct rt_sigframe, (addr + 8) % 16 == 0:
//     pretcode (sa_restorer)              <- rsp at handler entry
//     struct ucontext uc
//     siginfo_t info
#include <errno.h>
#include <signal.h>

#include <cstring>

#include "sentry/kernel/task.h"

namespace sandboxd::kernel {
namespace {

struct SigContext {  // struct sigcontext (x86-64)
  uint64_t r8, r9, r10, r11, r12, r13, r14, r15;
  uint64_t rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags;
  uint16_t cs, gs, fs, ss;
  uint64_t err, trapno, oldmask, cr2;
  uint64_t fpstate;
  uint64_t reserved1[8];
};
static_assert(sizeof(SigContext) == 256);

struct UContext {  // struct ucontext (kernel)
  uint64_t uc_flags;
  uint64_t uc_link;
  SignalStack uc_stack;
  SigContext uc_mcontext;
  SigSet uc_sigmask;
};
static_assert(sizeof(UContext) == 304);

struct SigInfo {
  int32_t si_signo, si_errno, si_code, pad;
  union {
    uint64_t addr;  // SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP
    struct {
      int32_t pid;
      uint32_t uid;
    } kill;
    struct {
      int32_t tid;
      int32_t overrun;
      uint64_t value;
    } timer;
    uint8_t bytes[112];
  } fields;
};
static_assert(sizeof(SigInfo) == 128);

struct RtSigFrame {
  uint64_t pretcode;
  UContext uc;
  SigInfo info;
};
static_assert(sizeof(RtSigFrame) == 440);

constexpr uint64_t kUcFpXstate = 0x1, kUcSigcontextSs = 0x2,
                   kUcStrictRestoreSs = 0x4;
constexpr int32_t kSsOnstack = 1, kSsDisable = 2;
// EFLAGS bits a signal handler's return may change (Linux FIX_EFLAGS).
constexpr uint64_t kFixEflags = 0x40000 | 0x800 | 0x400 | 0x100 | 0x80 |
                                0x40 | 0x10 | 0x4 | 0x1 | 0x10000;

bool OnStack(const SignalStack& ss, uint64_t sp) {
  return (ss.flags & kSsDisable) == 0 && sp > ss.sp && sp - ss.sp <= ss.size;
}

}  // namespace

bool Task::DeliverToHandler(int signo, int code, uint64_t addr, pid_t sender,
                            const SigAction& act, const siginfo_t* info) {
  platform::Regs& r = cpu_.regs;
  uint64_t sp = r.rsp;
  bool on_alt = OnStack(altstack_, sp);
  if ((act.flags & SA_ONSTACK) && (altstack_.flags & kSsDisable) == 0 &&
      !on_alt) {
    sp = altstack_.sp + altstack_.size;
  } else {
    sp -= 128;  // the red zone
  }
  SyncFp();
  uint64_t fp_size = cpu_.fp_size;
  uint64_t fpstate = (sp - fp_size) & ~63ull;
  uint64_t frame_addr = ((fpstate - sizeof(RtSigFrame)) & ~15ull) - 8;

  RtSigFrame frame{};
  if ((act.flags & 0x04000000 /* SA_RESTORER */) == 0) return false;
  frame.pretcode = act.restorer;
  frame.uc.uc_flags = kUcFpXstate | kUcSigcontextSs | kUcStrictRestoreSs;
  frame.uc.uc_stack = altstack_;
  frame.uc.uc_stack.flags =
      (altstack_.flags & kSsDisable) ? kSsDisable : (on_alt ? kSsOnstack : 0);
  SigContext& sc = frame.uc.uc_mcontext;
  sc.r8 = r.r8; sc.r9 = r.r9; sc.r10 = r.r10; sc.r11 = r.r11;
  sc.r12 = r.r12; sc.r13 = r.r13; sc.r14 = r.r14; sc.r15 = r.r15;
  sc.rdi = r.rdi; sc.rsi = r.rsi; sc.rbp = r.rbp; sc.rbx = r.rbx;
  sc.rdx = r.rdx; sc.rax = r.rax; sc.rcx = r.rcx; sc.rsp = r.rsp;
  sc.rip = r.rip; sc.eflags = r.eflags;
  sc.cs = static_cast<uint16_t>(r.cs ? r.cs : 0x33);
  sc.ss = static_cast<uint16_t>(r.ss ? r.ss : 0x2b);
  sc.cr2 = addr;
  // After sigsuspend (and friends) the handler returns to the mask from
  // before the call, not the temporary one.
  SigSet return_mask = restore_mask_ ? saved_mask_ : mask_.load();
  sc.oldmask = return_mask;
  sc.fpstate = fp_size != 0 ? fpstate : 0;
  frame.uc.uc_sigmask = return_mask;
  frame.info.si_signo = signo;
  frame.info.si_code = code;
  if (code == SI_USER || code == SI_TKILL) {
    frame.info.fields.kill.pid = sender;
    frame.info.fields.kill.uid = 0;
  } else {
    frame.info.fields.addr = addr;
  }
  // A queued signal carries its whole siginfo (sigqueue's value, SIGCHLD's
  // status, ...), as the sender gave it.
  static_assert(sizeof(siginfo_t) == sizeof(SigInfo));
  if (info != nullptr) {
    std::memcpy(&frame.info, info, sizeof(frame.info));
    frame.info.si_signo = signo;
  }

  if (fp_size != 0 &&
      mm().CopyOut(fpstate, cpu_.fp, fp_size) != static_cast<int64_t>(fp_size)) {
    return false;
  }
  if (mm().CopyOut(frame_addr, &frame, sizeof(frame)) !=
      static_cast<int64_t>(sizeof(frame))) {
    return false;
  }

  r.rdi = static_cast<uint64_t>(signo);
  r.rsi = frame_addr + offsetof(RtSigFrame, info);
  r.rdx = frame_addr + offsetof(RtSigFrame, uc);
  r.rax = 0;
  r.rsp = frame_addr;
  r.rip = act.handler;
  r.eflags &= ~(0x400ull | 0x100ull | 0x10000ull);  // DF, TF, RF
  cpu_.ResetFp();

  SigSet m = mask_.load() | act.mask;
  if ((act.flags & SA_NODEFER) == 0) m |= SigBit(signo);
  set_signal_mask(m);
  restore_mask_ = false;
  if (act.flags & SA_RESETHAND) {
    SigAction dfl;
    tg_->SetAction(signo, dfl);
  }
  return true;
}

int64_t Task::SigReturn() {
  platform::Regs& r = cpu_.regs;
  uint64_t frame_addr = r.rsp - 8;
  RtSigFrame frame;
  if (mm().CopyIn(frame_addr, &frame, sizeof(frame)) !=
      static_cast<int64_t>(sizeof(frame))) {
    ForceSignal(SIGSEGV, SI_KERNEL, 0);
    return kNoReturnValue;
  }
  const SigContext& sc = frame.uc.uc_mcontext;
  r.r8 = sc.r8; r.r9 = sc.r9; r.r10 = sc.r10; r.r11 = sc.r11;
  r.r12 = sc.r12; r.r13 = sc.r13; r.r14 = sc.r14; r.r15 = sc.r15;
  r.rdi = sc.rdi; r.rsi = sc.rsi; r.rbp = sc.rbp; r.rbx = sc.rbx;
  r.rdx = sc.rdx; r.rax = sc.rax; r.rcx = sc.rcx; r.rsp = sc.rsp;
  r.rip = sc.rip;
  r.eflags = (r.eflags & ~kFixEflags) | (sc.eflags & kFixEflags);
  SyncFp();  // the frame's image replaces the live state
  if (sc.fpstate == 0) {
    cpu_.ResetFp();
  } else if (cpu_.fp_size != 0) {
    // The image must keep the layout the platform gave it; the kernel's
    // software bytes inside it are checked again by the platform's
    // sigreturn when it loads the state.
    uint8_t fp[platform::kMaxFpStateSize];
    if (mm().CopyIn(sc.fpstate, fp, cpu_.fp_size) !=
        static_cast<int64_t>(cpu_.fp_size)) {
      ForceSignal(SIGSEGV, SI_KERNEL, 0);
      return kNoReturnValue;
    }
    // Keep the software-reserved bytes (464..511) the platform expects.
    std::memcpy(fp + 464, cpu_.fp + 464, 48);
    std::memcpy(cpu_.fp, fp, cpu_.fp_size);
  }
  set_signal_mask(frame.uc.uc_sigmask);
  // sigaltstack state saved in the frame (restore_altstack).
  const SignalStack& ss = frame.uc.uc_stack;
  if ((ss.flags & ~(kSsDisable | kSsOnstack)) == 0 &&
      !OnStack(altstack_, r.rsp)) {
    if (ss.flags & kSsDisable) {
      altstack_ = SignalStack{};
    } else {
      altstack_.sp = ss.sp;
      altstack_.size = ss.size;
      altstack_.flags = 0;
    }
  }
  return kNoReturnValue;
}

}  // namespace sandboxd::kernel
