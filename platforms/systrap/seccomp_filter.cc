#include "platforms/systrap/seccomp_filter.h"

#include <linux/audit.h>
#include <linux/membarrier.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <signal.h>
#include <sys/prctl.h>
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
  // if (A op k) goto `yes` else fall through / goto `no`.
  void JumpIf(uint16_t op, uint32_t k, int yes, int no) {
    fixups_.push_back({prog_.size(), yes, no});
    prog_.push_back(BPF_JUMP(BPF_JMP | op | BPF_K, k, 0, 0));
  }
  static constexpr int kNext = -1;
  // A jump over the next n instructions.
  static constexpr int Skip(int n) { return kSkipBase + n; }
  size_t size() const { return prog_.size(); }

  std::vector<sock_filter> Finish() {
    size_t label_pos[kNumLabels];
    label_pos[kTrap] = prog_.size();
    prog_.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP));
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

std::vector<sock_filter> Build() {
  static_assert((kStubBase >> 32) == ((kStubBase + kStubCodeSize - 1) >> 32),
                "stub code must not cross a 4 GiB boundary");
  using B = FilterBuilder;
  B b;
  // Outside the stub's code: trap to the Sentry, whatever the arch.
  b.Load(kIpHi);
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kStubBase >> 32), B::kNext,
           B::kTrap);
  b.Load(kIpLo);
  b.JumpIf(BPF_JGE, static_cast<uint32_t>(kStubBase), B::kNext, B::kTrap);
  b.JumpIf(BPF_JGE, static_cast<uint32_t>(kStubBase + kStubCodeSize),
           B::kTrap, B::kNext);
  // From the stub: x86-64 only, and only the allow-list.
  b.Load(kArch);
  b.JumpIf(BPF_JEQ, AUDIT_ARCH_X86_64, B::kNext, B::kKill);
  b.Load(kNr);
  for (uint32_t nr : {SYS_futex, SYS_mmap, SYS_munmap, SYS_sigaltstack,
                      SYS_arch_prctl, SYS_rt_sigreturn, SYS_exit,
                      SYS_exit_group, SYS_sched_yield, SYS_getppid}) {
    b.JumpIf(BPF_JEQ, nr, B::kAllow, B::kNext);
  }
  // A new stub, right after the template cloned it (stub/template_stub.cc):
  // it dies with the Sentry, and drops the pool of shared areas.
  AllowOnlyWith(b, SYS_prctl, {{0, PR_SET_PDEATHSIG}, {1, SIGKILL}});
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

}  // namespace

const std::vector<sock_filter>& StubFilter() {
  static const std::vector<sock_filter>* filter =
      new std::vector<sock_filter>(Build());
  return *filter;
}

}  // namespace sandboxd::systrap
