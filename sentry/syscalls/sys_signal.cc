// Signal syscalls: dispositions, masks, the alternate stack, sending.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>

#include "absl/time/clock.h"

#include "sentry/syscalls/args.h"
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
    RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &next));
    if (signo == SIGKILL || signo == SIGSTOP) return -EINVAL;
  }
  SigAction old = t.group().GetAction(static_cast<int>(signo));
  if (a.a[2] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[2], old));
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
    RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &set));
    switch (a.a[0]) {
      case SIG_BLOCK: t.set_signal_mask(old | set); break;
      case SIG_UNBLOCK: t.set_signal_mask(old & ~set); break;
      case SIG_SETMASK: t.set_signal_mask(set); break;
      default: return -EINVAL;
    }
  }
  if (a.a[2] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[2], old));
  return 0;
}

int64_t SysRtSigpending(Task& t, const SyscallArgs& a) {
  if (a.a[1] > sizeof(SigSet)) return -EINVAL;
  SigSet pending = t.PendingForThreadAndGroup() & t.signal_mask();
  return CopyOutBytes(t, a.a[0], &pending, a.a[1]);
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
    RETURN_IF_ERRNO(CopyInObj(t, a.a[0], &next));
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
  if (a.a[1] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[1], old));
  return 0;
}

int64_t SysRtSigreturn(Task& t, const SyscallArgs& a) { return t.SigReturn(); }

// rt_sigsuspend: waits with a temporary mask until a signal is delivered;
// always -EINTR. The old mask comes back when the handler returns.
int64_t SysRtSigsuspend(Task& t, const SyscallArgs& a) {
  if (a.a[1] != sizeof(SigSet)) return -EINVAL;
  SigSet set;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[0], &set));
  t.SetTemporaryMask(set, t.signal_mask());
  while (t.Block(absl::InfiniteFuture()) != Task::WakeReason::kInterrupted) {
  }
  return -EINTR;
}

int64_t SysPause(Task& t, const SyscallArgs& a) {
  while (t.Block(absl::InfiniteFuture()) != Task::WakeReason::kInterrupted) {
  }
  return -EINTR;
}

// rt_sigtimedwait: takes a pending signal of `set` without running its
// handler, waiting up to the timeout.
int64_t SysRtSigtimedwait(Task& t, const SyscallArgs& a) {
  if (a.a[3] != sizeof(SigSet)) return -EINVAL;
  SigSet set;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[0], &set));
  set &= ~kernel::kUnblockable;
  absl::Time deadline = absl::InfiniteFuture();
  if (a.a[2] != 0) {
    struct timespec ts;
    RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &ts));
    if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000) {
      return -EINVAL;
    }
    deadline = absl::Now() + t.SyscallTimeout(absl::DurationFromTimespec(ts));
  }
  // The signals of `set` stay blocked (they are usually blocked so that
  // they wait here): watch the group's signal queue for them instead.
  for (;;) {
    siginfo_t si = {};
    int signo = t.DequeueSignal(set, &si);
    if (signo > 0) {
      si.si_signo = signo;
      if (a.a[1] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[1], si));
      return signo;
    }
    int r = t.Wait(*t.group().signal_queue, POLLIN,
                   [&t, set] { return t.CanDequeueSignal(set); }, deadline);
    if (r == -ETIMEDOUT) return -EAGAIN;
    if (r < 0) return r;
  }
}

// Sends `signo` to the thread `target` (0: existence check only).
// As Linux's do_tkill: si_code SI_TKILL, which raise(3) shows its handler.
int64_t SendTo(Task& t, kernel::Task* target, uint64_t signo) {
  if (signo > kernel::kNumSignals) return -EINVAL;
  if (target == nullptr) return -ESRCH;
  if (!t.kernel().MaySignal(t, *target, static_cast<int>(signo))) return -EPERM;
  if (signo == 0) return 0;
  siginfo_t info{};
  info.si_signo = static_cast<int>(signo);
  info.si_code = SI_TKILL;
  info.si_pid = t.group().tgid();
  info.si_uid = t.own_creds().ruid;
  target->SendSignalInfo(info);
  return 0;
}

int64_t SysTgkill(Task& t, const SyscallArgs& a) {
  pid_t tgid = static_cast<pid_t>(a.a[0]), tid = static_cast<pid_t>(a.a[1]);
  if (tgid <= 0 || tid <= 0) return -EINVAL;
  if (a.a[2] > kernel::kNumSignals) return -EINVAL;
  std::shared_ptr<kernel::Task> target = t.kernel().FindTask(tid);
  if (target == nullptr || target->group().tgid() != tgid) return -ESRCH;
  return SendTo(t, target.get(), a.a[2]);
}

int64_t SysTkill(Task& t, const SyscallArgs& a) {
  pid_t tid = static_cast<pid_t>(a.a[0]);
  if (tid <= 0) return -EINVAL;
  if (a.a[1] > kernel::kNumSignals) return -EINVAL;
  return SendTo(t, t.kernel().FindTask(tid).get(), a.a[1]);
}

// kill(pid, sig): pid > 0 one process, 0 the caller's process group,
// -1 every process but init and the caller, < -1 the process group -pid.
int64_t SysKill(Task& t, const SyscallArgs& a) {
  pid_t pid = static_cast<pid_t>(a.a[0]);
  uint64_t signo = a.a[1];
  if (signo > kernel::kNumSignals) return -EINVAL;
  if (pid == INT32_MIN) return -ESRCH;
  if (pid == 0) {
    return t.kernel().SignalProcessGroup(
        t, static_cast<pid_t>(t.kernel().GetPgid(t, 0)), static_cast<int>(signo));
  }
  if (pid < 0) {
    return t.kernel().SignalProcessGroup(t, pid == -1 ? -1 : -pid,
                                         static_cast<int>(signo));
  }
  auto group = t.kernel().FindGroup(pid);
  if (group == nullptr || group->reaped) return -ESRCH;
  std::vector<std::shared_ptr<kernel::Task>> tasks = group->Tasks();
  if (tasks.empty()) return 0;  // a zombie: no effect
  if (!t.kernel().MaySignal(t, *tasks.front(), static_cast<int>(signo))) {
    return -EPERM;
  }
  if (signo == 0) return 0;
  t.kernel().SignalGroup(*group, static_cast<int>(signo), t.group().tgid(),
                         t.own_creds().ruid);
  return 0;
}

}  // namespace

void RegisterSignal(Entry* table) {
  table[SYS_rt_sigaction] = {SysRtSigaction, "rt_sigaction"};
  table[SYS_rt_sigprocmask] = {SysRtSigprocmask, "rt_sigprocmask"};
  table[SYS_rt_sigpending] = {SysRtSigpending, "rt_sigpending"};
  table[SYS_sigaltstack] = {SysSigaltstack, "sigaltstack"};
  table[SYS_rt_sigreturn] = {SysRtSigreturn, "rt_sigreturn"};
  table[SYS_rt_sigsuspend] = {SysRtSigsuspend, "rt_sigsuspend"};
  table[SYS_pause] = {SysPause, "pause"};
  table[SYS_rt_sigtimedwait] = {SysRtSigtimedwait, "rt_sigtimedwait"};
  table[SYS_tgkill] = {SysTgkill, "tgkill"};
  table[SYS_tkill] = {SysTkill, "tkill"};
  table[SYS_kill] = {SysKill, "kill"};
}

}  // namespace sandboxd::syscalls
