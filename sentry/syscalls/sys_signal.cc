// Signal syscalls: dispositions, masks, the alternate stack, sending.
#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>

#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

using kernel::SigAction;
using kernel::SigBit;
using kernel::SigSet;

bool ValidSignal(uint64_t signo) {
  return signo >= 1 && signo <= kernel::kNumSignals;
}

int64_t SysRtSigaction(Task& t, const SyscallArgs& a) {
  uint64_t signo = a.a[0];
  if (a.a[3] != sizeof(SigSet)) return -EINVAL;
  if (!ValidSignal(signo)) return -EINVAL;
  SigAction next;
  if (a.a[1] != 0) {
    if (t.mm().CopyIn(a.a[1], &next, sizeof(next)) != sizeof(next)) {
      return -EFAULT;
    }
    if (signo == SIGKILL || signo == SIGSTOP) return -EINVAL;
  }
  SigAction old = t.group().GetAction(static_cast<int>(signo));
  if (a.a[2] != 0 &&
      t.mm().CopyOut(a.a[2], &old, sizeof(old)) != sizeof(old)) {
    return -EFAULT;
  }
  if (a.a[1] != 0) {
    next.mask &= ~kernel::kUnblockable;
    t.group().SetAction(static_cast<int>(signo), next);
  }
  return 0;
}

int64_t SysRtSigprocmask(Task& t, const SyscallArgs& a) {
  if (a.a[3] != sizeof(SigSet)) return -EINVAL;
  SigSet old = t.signal_mask();
  if (a.a[1] != 0) {
    SigSet set;
    if (t.mm().CopyIn(a.a[1], &set, sizeof(set)) != sizeof(set)) return -EFAULT;
    switch (a.a[0]) {
      case SIG_BLOCK: t.set_signal_mask(old | set); break;
      case SIG_UNBLOCK: t.set_signal_mask(old & ~set); break;
      case SIG_SETMASK: t.set_signal_mask(set); break;
      default: return -EINVAL;
    }
  }
  if (a.a[2] != 0 && t.mm().CopyOut(a.a[2], &old, sizeof(old)) != sizeof(old)) {
    return -EFAULT;
  }
  return 0;
}

int64_t SysRtSigpending(Task& t, const SyscallArgs& a) {
  if (a.a[1] > sizeof(SigSet)) return -EINVAL;
  SigSet pending = t.pending_signals() & t.signal_mask();
  return t.mm().CopyOut(a.a[0], &pending, a.a[1]) == static_cast<int64_t>(a.a[1])
             ? 0
             : -EFAULT;
}

int64_t SysSigaltstack(Task& t, const SyscallArgs& a) {
  kernel::SignalStack& cur = t.signal_stack();
  kernel::SignalStack old = cur;
  uint64_t sp = t.cpu().regs.rsp;
  bool on = (cur.flags & SS_DISABLE) == 0 && sp > cur.sp &&
            sp - cur.sp <= cur.size;
  old.flags = (cur.flags & SS_DISABLE) ? SS_DISABLE : (on ? SS_ONSTACK : 0);
  if (a.a[0] != 0) {
    kernel::SignalStack next;
    if (t.mm().CopyIn(a.a[0], &next, sizeof(next)) != sizeof(next)) {
      return -EFAULT;
    }
    if (on) return -EPERM;
    int mode = next.flags & ~(1 << 31);  // SS_AUTODISARM
    if (mode != 0 && mode != SS_DISABLE && mode != SS_ONSTACK) return -EINVAL;
    if (mode == SS_DISABLE) {
      cur = kernel::SignalStack{};
    } else {
      if (next.size < static_cast<uint64_t>(MINSIGSTKSZ)) return -ENOMEM;
      cur.sp = next.sp;
      cur.size = next.size;
      cur.flags = 0;
    }
  }
  if (a.a[1] != 0 && t.mm().CopyOut(a.a[1], &old, sizeof(old)) != sizeof(old)) {
    return -EFAULT;
  }
  return 0;
}

int64_t SysRtSigreturn(Task& t, const SyscallArgs& a) { return t.SigReturn(); }

// Sends `signo` to the thread `target` (0: existence check only).
int64_t SendTo(Task& t, kernel::Task* target, uint64_t signo) {
  if (signo > kernel::kNumSignals) return -EINVAL;
  if (target == nullptr) return -ESRCH;
  if (signo != 0) target->SendSignal(static_cast<int>(signo), t.group().tgid());
  return 0;
}

int64_t SysTgkill(Task& t, const SyscallArgs& a) {
  pid_t tgid = static_cast<pid_t>(a.a[0]), tid = static_cast<pid_t>(a.a[1]);
  if (tgid <= 0 || tid <= 0) return -EINVAL;
  if (a.a[2] > kernel::kNumSignals) return -EINVAL;
  kernel::Task* target = t.kernel().FindTask(tid);
  if (target == nullptr || target->group().tgid() != tgid) return -ESRCH;
  return SendTo(t, target, a.a[2]);
}

int64_t SysTkill(Task& t, const SyscallArgs& a) {
  pid_t tid = static_cast<pid_t>(a.a[0]);
  if (tid <= 0) return -EINVAL;
  if (a.a[1] > kernel::kNumSignals) return -EINVAL;
  return SendTo(t, t.kernel().FindTask(tid), a.a[1]);
}

// kill(pid, sig). A process-directed signal goes to a thread that does not
// block it, else to the first thread. Until the process model brings
// process groups and sessions, every process is in process group 1 (init's).
int64_t SysKill(Task& t, const SyscallArgs& a) {
  pid_t pid = static_cast<pid_t>(a.a[0]);
  uint64_t signo = a.a[1];
  if (signo > kernel::kNumSignals) return -EINVAL;
  if (pid == -1) {
    // Every process but init and the caller (kill_something_info); in a
    // sandbox of one process that is nobody.
    return -ESRCH;
  }
  if (pid == 0) pid = t.group().tgid();  // the caller's process group
  if (pid < -1) {
    if (-pid != 1) return -ESRCH;  // the only process group
    pid = 1;
  }
  auto group = t.kernel().FindGroup(pid);
  if (group == nullptr) return -ESRCH;
  std::vector<kernel::Task*> tasks = group->Tasks();
  if (tasks.empty()) return -ESRCH;
  if (signo == 0) return 0;
  kernel::Task* target = tasks.front();
  for (kernel::Task* c : tasks) {
    if ((c->signal_mask() & SigBit(static_cast<int>(signo))) == 0) {
      target = c;
      break;
    }
  }
  return SendTo(t, target, signo);
}

}  // namespace

void RegisterSignal(Entry* table) {
  table[SYS_rt_sigaction] = {SysRtSigaction, "rt_sigaction"};
  table[SYS_rt_sigprocmask] = {SysRtSigprocmask, "rt_sigprocmask"};
  table[SYS_rt_sigpending] = {SysRtSigpending, "rt_sigpending"};
  table[SYS_sigaltstack] = {SysSigaltstack, "sigaltstack"};
  table[SYS_rt_sigreturn] = {SysRtSigreturn, "rt_sigreturn"};
  table[SYS_tgkill] = {SysTgkill, "tgkill"};
  table[SYS_tkill] = {SysTkill, "tkill"};
  table[SYS_kill] = {SysKill, "kill"};
}

}  // namespace sandboxd::syscalls
