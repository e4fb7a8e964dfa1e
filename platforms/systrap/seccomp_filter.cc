#include "platforms/systrap/seccomp_filter.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/syscall.h>

#include <cstdint>

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
        return static_cast<uint8_t>(label_pos[label] - f.at - 1);
      };
      prog_[f.at].jt = target(f.yes);
      prog_[f.at].jf = target(f.no);
    }
    return prog_;
  }

 private:
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
constexpr uint32_t kArg0Lo = offsetof(seccomp_data, args);
constexpr uint32_t kArg0Hi = kArg0Lo + 4;

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
                      SYS_exit_group, SYS_sched_yield}) {
    b.JumpIf(BPF_JEQ, nr, B::kAllow, B::kNext);
  }
  // clone only with the stub-thread flags (no new processes).
  b.JumpIf(BPF_JEQ, SYS_clone, B::kNext, B::kKill);
  b.Load(kArg0Hi);
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kStubCloneFlags >> 32), B::kNext,
           B::kKill);
  b.Load(kArg0Lo);
  b.JumpIf(BPF_JEQ, static_cast<uint32_t>(kStubCloneFlags), B::kAllow,
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
