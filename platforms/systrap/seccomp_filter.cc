#include "platforms/systrap/seccomp_filter.h"

#include <asm/prctl.h>
#include <linux/audit.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <sys/syscall.h>

#include <cstdint>
#include <initializer_list>

#include "platforms/systrap/layout.h"

namespace sandboxd::systrap {
namespace {

// A tiny assembler with forward labels for the three verdicts.
class FilterBuilder {
 public:
  enum Label { kTrap, kAllow, kKill, kNumLabels };

  void Load(uint32_t offset) {
    prog_.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offset));
  }
  void Emit(sock_filter insn) { prog_.push_back(insn); }
  // if (A op k) goto `yes` else fall through / goto `no`.
  void JumpIf(uint16_t op, uint32_t k, int yes, int no) {
    fixups_.push_back({prog_.size(), yes, no});
    prog_.push_back(BPF_JUMP(BPF_JMP | op | BPF_K, k, 0, 0));
  }
  // if (A op X) goto `yes` else `no`.
  void JumpIfX(uint16_t op, int yes, int no) {
    fixups_.push_back({prog_.size(), yes, no});
    prog_.push_back(BPF_JUMP(BPF_JMP | op | BPF_X, 0, 0, 0));
  }
  static constexpr int kNext = -1;
  // A jump over the next n instructions.
  static constexpr int Skip(int n) { return kSkipBase + n; }
  size_t size() const { return prog_.size(); }

  // `otherwise`: the verdict of the first label (kTrap: SECCOMP_RET_TRAP;
  // the stub-process filter has no trap and puts ALLOW there).
  std::vector<sock_filter> Finish(uint32_t trap_verdict = SECCOMP_RET_TRAP) {
    size_t label_pos[kNumLabels];
    label_pos[kTrap] = prog_.size();
    prog_.push_back(BPF_STMT(BPF_RET | BPF_K, trap_verdict));
    label_pos[kAllow] = prog_.size();
    prog_.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    label_pos[kKill] = prog_.size();
    prog_.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    for (const Fixup& f : fixups_) {
      auto target = [&](int label) -> uint8_t {
        if (label == kNext) return 0;
        if (label >= kSkipBase) return static_cast<uint8_t>(label - kSkipBase);
        return static_cast<uint8_t>(label_pos[label] - f.at - 1);
      };
      prog_[f.at].jt = target(f.yes);
      prog_[f.at].jf = target(f.no);
    }
    return prog_;
  }

 private:
  static constexpr int kSkipBase = 1000;
  struct Fixup {
    size_t at;
    int yes, no;
  };
  std::vector<sock_filter> prog_;
  std::vector<Fixup> fixups_;
};

constexpr uint32_t kIpLo = offsetof(seccomp_data, instruction_pointer);
constexpr uint32_t kIpHi = kIpLo + 4;
constexpr uint32_t kArch = offsetof(seccomp_data, arch);
constexpr uint32_t kNr = offsetof(seccomp_data, nr);
constexpr uint32_t ArgLo(int i) { return offsetof(seccomp_data, args) + 8 * i; }
constexpr uint32_t ArgHi(int i) { return ArgLo(i) + 4; }

struct ArgIs {
  int index;
  uint64_t value;
};

// If A (the syscall number) is `nr`: allowed when every listed argument
// has exactly its value (all 64 bits), killed otherwise. Any other number
// goes on to the next check, with A unchanged.
void AllowOnlyWith(FilterBuilder& b, uint32_t nr,
                   std::initializer_list<ArgIs> args) {
  using B = FilterBuilder;
  b.JumpIf(BPF_JEQ, nr, B::kNext, B::Skip(static_cast<int>(4 * args.size())));
  size_t i = 0;
  for (const ArgIs& a : args) {
    const bool last = ++i == args.size();
    b.Load(ArgHi(a.index));
    b.JumpIf(BPF_JEQ, static_cast<uint32_t>(a.value >> 32), B::kNext, B::kKill);
    b.Load(ArgLo(a.index));
    b.JumpIf(BPF_JEQ, static_cast<uint32_t>(a.value), last ? B::kAllow : B::kNext,
             B::kKill);
  }
}

// If A is `nr`: allowed when argument `index` is one of `values` (all 64
// bits, each below 2^32), killed otherwise; A is left unchanged for any
// other number.
void AllowOnlyArgIn(FilterBuilder& b, uint32_t nr, int index,
                    std::initializer_list<uint32_t> values) {
  using B = FilterBuilder;
  const int n = static_cast<int>(values.size());
  b.JumpIf(BPF_JEQ, nr, B::kNext, B::Skip(3 + n));
  b.Load(ArgHi(index));
  b.JumpIf(BPF_JEQ, 0, B::kNext, B::kKill);
  b.Load(ArgLo(index));
  int i = 0;
  for (uint32_t v : values) {
    const bool last = ++i == n;
    b.JumpIf(BPF_JEQ, v, B::kAllow, last ? B::kKill : B::kNext);
  }
}

// Kills unless args[0] + args[1] (an address and a length) <= kStubBase,
// without wrapping: the range lies wholly in the application's part of
// the address space. Falls through when it does. Clobbers A, X, M[0..1].
void RequireBelowStub(FilterBuilder& b) {
  using B = FilterBuilder;
  static_assert((kStubBase & 0xffffffffull) == 0);
  constexpr uint32_t kHi = static_cast<uint32_t>(kStubBase >> 32);
  // Both below kStubBase: their sum cannot wrap 64 bits.
  b.Load(ArgHi(0));
  b.JumpIf(BPF_JGE, kHi, B::kKill, B::kNext);
  b.Load(ArgHi(1));
  b.JumpIf(BPF_JGE, kHi, B::kKill, B::kNext);
  // Low words and their carry.
  b.Load(ArgLo(0));
  b.Emit(BPF_STMT(BPF_MISC | BPF_TAX, 0));
  b.Load(ArgLo(1));
  b.Emit(BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0));
  b.Emit(BPF_STMT(BPF_ST, 0));  // M[0] = low word of the end
  b.JumpIfX(BPF_JGE, B::Skip(2), B::kNext);  // end_lo >= addr_lo: no carry
  b.Emit(BPF_STMT(BPF_LD | BPF_IMM, 1));
  b.JumpIf(BPF_JEQ, 1, B::Skip(1), B::Skip(1));  // an unconditional jump
  b.Emit(BPF_STMT(BPF_LD | BPF_IMM, 0));
  b.Emit(BPF_STMT(BPF_ST, 1));  // M[1] = carry
  // High words: addr_hi + len_hi + carry.
  b.Load(ArgHi(0));
  b.Emit(BPF_STMT(BPF_MISC | BPF_TAX, 0));
  b.Load(ArgHi(1));
  b.Emit(BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0));
  b.Emit(BPF_STMT(BPF_MISC | BPF_TAX, 0));
  b.Emit(BPF_STMT(BPF_LD | BPF_MEM, 1));
  b.Emit(BPF_STMT(BPF_ALU | BPF_ADD | BPF_X, 0));
  b.JumpIf(BPF_JGT, kHi, B::kKill, B::kNext);
  b.JumpIf(BPF_JEQ, kHi, B::kNext, B::Skip(2));
  // End high word == kStubBase's: the low word must be 0.
  b.Emit(BPF_STMT(BPF_LD | BPF_MEM, 0));
  b.JumpIf(BPF_JEQ, 0, B::kNext, B::kKill);
}

// Falls through from stub code; application code goes to `outside`.
void FromStubCode(FilterBuilder& b, int outside) {
  using B = FilterBuilder;
  static_assert((kStubBase >> 32) == ((kStubBase + kStubCodeSize - 1) >> 32),
                "stub code must not cross a 4 GiB boundary");
  b.Load(kIpHi);
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kStubBase >> 32), B::kNext,
           outside);
  b.Load(kIpLo);
  b.JumpIf(BPF_JGE, static_cast<uint32_t>(kStubBase), B::kNext, outside);
  b.JumpIf(BPF_JGE, static_cast<uint32_t>(kStubBase + kStubCodeSize),
           outside, B::kNext);
}

std::vector<sock_filter> Build() {
  using B = FilterBuilder;
  B b;
  // Outside the stub's code: trap to the Sentry, whatever the arch.
  FromStubCode(b, B::kTrap);
  // From the stub: x86-64 only, and only the allow-list.
  b.Load(kArch);
  b.JumpIf(BPF_JEQ, AUDIT_ARCH_X86_64, B::kNext, B::kKill);
  b.Load(kNr);
  for (uint32_t nr : {SYS_munmap, SYS_sigaltstack, SYS_rt_sigreturn,
                      SYS_exit, SYS_exit_group, SYS_sched_yield,
                      SYS_getppid}) {
    b.JumpIf(BPF_JEQ, nr, B::kAllow, B::kNext);
  }
  // The stub waits and wakes on shared words: FUTEX_WAIT and FUTEX_WAKE
  // (not private: the Sentry maps them too), nothing else.
  AllowOnlyArgIn(b, SYS_futex, 1, {FUTEX_WAIT, FUTEX_WAKE});
  // The worker's own CPU time, for the application's CPU clocks.
  AllowOnlyArgIn(b, SYS_clock_gettime, 0, {CLOCK_THREAD_CPUTIME_ID});
  // FS and GS base without FSGSBASE.
  AllowOnlyArgIn(b, SYS_arch_prctl, 0,
                 {ARCH_SET_GS, ARCH_SET_FS, ARCH_GET_FS, ARCH_GET_GS});
  // Maps are MAP_SHARED|MAP_FIXED of the memory file (or, in a new stub
  // before it drops it, of the pool of shared areas).
  b.JumpIf(BPF_JEQ, SYS_mmap, B::kNext, B::Skip(9));
  b.Load(ArgHi(3));
  b.JumpIf(BPF_JEQ, 0, B::kNext, B::kKill);
  b.Load(ArgLo(3));
  b.JumpIf(BPF_JEQ, MAP_SHARED | MAP_FIXED, B::kNext, B::kKill);
  b.Load(ArgHi(4));
  b.JumpIf(BPF_JEQ, 0, B::kNext, B::kKill);
  b.Load(ArgLo(4));
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kStubMemFileFd), B::kAllow,
           B::kNext);
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kStubPoolFd), B::kAllow, B::kKill);
  // A new stub, right after the template cloned it (stub/template_stub.cc):
  // it dies with the Sentry, adds the stub-process filter (only
  // SECCOMP_SET_MODE_FILTER, no flags: no TSYNC, no listener) and drops
  // the pool of shared areas. The stub-process filter then kills all three.
  AllowOnlyWith(b, SYS_prctl, {{0, PR_SET_PDEATHSIG}, {1, SIGKILL}});
  AllowOnlyWith(b, SYS_seccomp, {{0, SECCOMP_SET_MODE_FILTER}, {1, 0}});
  AllowOnlyWith(b, SYS_close, {{0, static_cast<uint64_t>(kStubPoolFd)}});
  // membarrier for syscall patching's cross-modifying code (patching.cc):
  // only registering for and issuing a SYNC_CORE barrier on the stub's own
  // mm, flags 0.
  b.JumpIf(BPF_JEQ, SYS_membarrier, B::kNext, B::Skip(9));
  b.Load(ArgHi(0));
  b.JumpIf(BPF_JEQ, 0, B::kNext, B::kKill);
  b.Load(ArgLo(0));
  b.JumpIf(BPF_JEQ, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, B::Skip(1),
           B::kNext);
  b.JumpIf(BPF_JEQ, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE,
           B::kNext, B::kKill);
  b.Load(ArgHi(1));
  b.JumpIf(BPF_JEQ, 0, B::kNext, B::kKill);
  b.Load(ArgLo(1));
  b.JumpIf(BPF_JEQ, 0, B::kAllow, B::kKill);
  // clone with exactly the stub-thread flags, or exactly the template's
  // new-stub flags (a child of the Sentry, nothing shared); nothing else.
  b.JumpIf(BPF_JEQ, SYS_clone, B::kNext, B::kKill);
  static_assert((kStubCloneFlags >> 32) == 0 && (kNewStubCloneFlags >> 32) == 0);
  b.Load(ArgHi(0));
  b.JumpIf(BPF_JEQ, 0, B::kNext, B::kKill);
  b.Load(ArgLo(0));
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kStubCloneFlags), B::kAllow,
           B::kNext);
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kNewStubCloneFlags), B::kAllow,
           B::kKill);
  return b.Finish();
}

// The filter a stub process adds on top of the template's (both run; the
// strictest verdict wins, so ALLOW here leaves the decision to the
// template's filter). It takes away what only the template and a new
// stub's first steps need, and bounds maps and unmaps to the application's
// part of the address space.
std::vector<sock_filter> BuildStubProcess() {
  using B = FilterBuilder;
  B b;
  FromStubCode(b, B::kAllow);
  b.Load(kNr);
  for (uint32_t nr : {SYS_prctl, SYS_seccomp, SYS_close, SYS_getppid}) {
    b.JumpIf(BPF_JEQ, nr, B::kKill, B::kNext);
  }
  AllowOnlyWith(b, SYS_clone, {{0, kStubCloneFlags}});
  // mmap: the memory file only (the template's filter checks the flags).
  b.JumpIf(BPF_JEQ, SYS_mmap, B::kNext, B::Skip(4));
  b.Load(ArgHi(4));
  b.JumpIf(BPF_JEQ, 0, B::kNext, B::kKill);
  b.Load(ArgLo(4));
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kStubMemFileFd), B::Skip(1),
           B::kKill);
  b.JumpIf(BPF_JEQ, SYS_munmap, B::kNext, B::kAllow);
  RequireBelowStub(b);
  b.Emit(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return b.Finish(SECCOMP_RET_ALLOW);
}

}  // namespace

const std::vector<sock_filter>& StubFilter() {
  static const std::vector<sock_filter>* filter =
      new std::vector<sock_filter>(Build());
  return *filter;
}

const std::vector<sock_filter>& StubProcessFilter() {
  static const std::vector<sock_filter>* filter =
      new std::vector<sock_filter>(BuildStubProcess());
  return *filter;
}

}  // namespace sandboxd::systrap
