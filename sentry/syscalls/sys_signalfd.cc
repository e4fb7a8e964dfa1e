// signalfd, signalfd4, and sending signals with a siginfo: rt_sigqueueinfo,
// rt_tgsigqueueinfo.
#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>

#include <memory>

#include "sentry/kernel/signalfd.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

using kernel::SigSet;

// signalfd(fd, mask, sizemask) and signalfd4(..., flags): fd -1 creates a
// file, an existing signalfd gets the new mask.
int64_t SignalFd4(Task& t, int64_t fd, uint64_t mask_addr, uint64_t size,
                  uint64_t flags) {
  if (flags & ~static_cast<uint64_t>(SFD_CLOEXEC | SFD_NONBLOCK)) {
    return -EINVAL;
  }
  if (size != sizeof(SigSet)) return -EINVAL;
  SigSet mask;
  RETURN_IF_ERRNO(CopyInObj(t, mask_addr, &mask));
  if (fd != -1) {
    ASSIGN_OR_RETURN_ERRNO(
        std::shared_ptr<kernel::SignalFd> sfd,
        FileAs<kernel::SignalFd>(t, static_cast<uint32_t>(fd), -EINVAL));
    sfd->set_mask(mask);
    // Readers and pollers look again with the new mask.
    sfd->event_queue()->Notify(POLLIN);
    return fd;
  }
  auto f = std::make_shared<kernel::SignalFd>(t.group_ptr(), mask,
                                              static_cast<int>(flags));
  return t.group().fds().Install(std::move(f), (flags & SFD_CLOEXEC) != 0);
}

int64_t SysSignalfd(Task& t, const SyscallArgs& a) {
  return SignalFd4(t, static_cast<int32_t>(a.a[0]), a.a[1], a.a[2], 0);
}
int64_t SysSignalfd4(Task& t, const SyscallArgs& a) {
  return SignalFd4(t, static_cast<int32_t>(a.a[0]), a.a[1], a.a[2], a.a[3]);
}

// The siginfo a sigqueue-style caller gives. Linux's permission rule: a
// process may pass kernel-looking codes (si_code >= 0, or SI_TKILL) only
// to itself, so that nobody can forge a kill(2) or a kernel signal.
int64_t CopyInQueuedInfo(Task& t, uint64_t addr, int signo, pid_t target,
                         siginfo_t* info) {
  RETURN_IF_ERRNO(CopyInObj(t, addr, info));
  info->si_signo = signo;
  if ((info->si_code >= 0 || info->si_code == SI_TKILL) &&
      target != t.tid()) {
    return -EPERM;
  }
  return 0;
}

int64_t SysRtSigqueueinfo(Task& t, const SyscallArgs& a) {
  pid_t pid = static_cast<pid_t>(a.a[0]);
  uint64_t signo = a.a[1];
  if (signo > kernel::kNumSignals) return -EINVAL;
  siginfo_t info;
  RETURN_IF_ERRNO(
      CopyInQueuedInfo(t, a.a[2], static_cast<int>(signo), pid, &info));
  auto group = pid > 0 ? t.kernel().FindGroup(pid) : nullptr;
  if (group == nullptr || group->reaped) return -ESRCH;
  if (signo == 0 || group->Tasks().empty()) return 0;  // a zombie: no effect
  t.kernel().SignalGroupInfo(*group, info);
  return 0;
}

int64_t SysRtTgsigqueueinfo(Task& t, const SyscallArgs& a) {
  pid_t tgid = static_cast<pid_t>(a.a[0]), tid = static_cast<pid_t>(a.a[1]);
  uint64_t signo = a.a[2];
  if (tgid <= 0 || tid <= 0 || signo > kernel::kNumSignals) return -EINVAL;
  siginfo_t info;
  RETURN_IF_ERRNO(
      CopyInQueuedInfo(t, a.a[3], static_cast<int>(signo), tid, &info));
  std::shared_ptr<kernel::Task> target = t.kernel().FindTask(tid);
  if (target == nullptr || target->group().tgid() != tgid) return -ESRCH;
  if (signo != 0) target->SendSignalInfo(info);
  return 0;
}

}  // namespace

void RegisterSignalfd(Entry* table) {
  table[SYS_signalfd] = {SysSignalfd, "signalfd"};
  table[SYS_signalfd4] = {SysSignalfd4, "signalfd4"};
  table[SYS_rt_sigqueueinfo] = {SysRtSigqueueinfo, "rt_sigqueueinfo"};
  table[SYS_rt_tgsigqueueinfo] = {SysRtTgsigqueueinfo, "rt_tgsigqueueinfo"};
}

}  // namespace sandboxd::syscalls
