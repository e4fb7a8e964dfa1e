// Scheduling priorities as the sandbox sees them: nice values
// (getpriority/setpriority), I/O priorities (ioprio_get/set), scheduling
// policies and their parameters (sched_setscheduler & co., sched_setattr,
// sched_getattr), and the clock setters a container may not use
// (clock_settime, settimeofday: EPERM).
//
// The values are kept per task (Task::sched, under Kernel::mu_),
// inherited by clone and fork and reported back with Linux's encodings and
// checks (kernel/sys.c, kernel/sched/core.c, block/ioprio.c); they do not
// change how the host schedules the Sentry's threads.
#include <errno.h>
#include <linux/ioprio.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "sentry/fs/credentials.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

using TaskPtr = std::shared_ptr<kernel::Task>;

constexpr int kSchedOther = 0, kSchedFifo = 1, kSchedRr = 2, kSchedBatch = 3,
              kSchedIdle = 5, kSchedDeadline = 6;
constexpr int kSchedResetOnFork = 0x40000000;
constexpr uint64_t kFlagResetOnFork = 0x01, kFlagKeepPolicy = 0x08,
                   kFlagKeepParams = 0x10, kFlagUtilClampMin = 0x20,
                   kFlagUtilClampMax = 0x40;
constexpr uint64_t kFlagAll = 0x7f;
constexpr uint32_t kAttrSizeVer0 = 48, kAttrSizeVer1 = 56;

bool RtPolicy(int p) { return p == kSchedFifo || p == kSchedRr; }
bool FairPolicy(int p) {
  return p == kSchedOther || p == kSchedBatch || p == kSchedIdle;
}
bool ValidPolicy(int p) { return FairPolicy(p) || RtPolicy(p) || p == kSchedDeadline; }

// The tasks `which`/`who` names (PRIO_PROCESS: one thread; PRIO_PGRP: every
// thread of the process group; PRIO_USER: every thread whose real uid is
// who). The IOPRIO_WHO_* values are the same numbers plus one.
std::vector<TaskPtr> Targets(Task& t, int which, int who) {
  kernel::Kernel& k = t.kernel();
  std::vector<TaskPtr> out;
  if (which == PRIO_PROCESS) {
    if (who == 0) {
      out.push_back(t.shared_from_this());
    } else if (TaskPtr p = k.FindTask(who)) {
      out.push_back(std::move(p));
    }
    return out;
  }
  const auto groups = k.ThreadGroups();
  const uint32_t uid = who == 0 ? t.own_creds().ruid : static_cast<uint32_t>(who);
  k.WithTasklistLock([&] {
    const pid_t pgid = who == 0 ? t.group().pgid : who;
    for (const auto& g : groups) {
      if (g->zombie || g->reaped) continue;
      if (which == PRIO_PGRP && g->pgid != pgid) continue;
      for (auto& task : g->Tasks()) {
        if (which == PRIO_USER && task->creds()->ruid != uid) continue;
        out.push_back(std::move(task));
      }
    }
  });
  return out;
}

// RLIMIT_NICE or CAP_SYS_NICE allows a nice value this low (can_nice).
bool CanNice(Task& t, kernel::Task& target, int nice) {
  const rlimit lim = target.group().GetLimit(RLIMIT_NICE);
  return static_cast<rlim_t>(20 - nice) <= lim.rlim_cur ||
         t.own_creds().HasCap(CAP_SYS_NICE);
}

// The caller's effective uid is the target's real or effective uid, or it
// has CAP_SYS_NICE (set_one_prio_perm, check_same_owner).
bool SameOwnerOrNice(Task& t, kernel::Task& target) {
  const fs::Credentials& c = t.own_creds();
  std::shared_ptr<const fs::Credentials> tc = target.creds();
  return c.euid == tc->ruid || c.euid == tc->euid || c.HasCap(CAP_SYS_NICE);
}

int64_t SysGetpriority(Task& t, const SyscallArgs& a) {
  const int which = static_cast<int>(a.a[0]), who = static_cast<int>(a.a[1]);
  if (which < PRIO_PROCESS || which > PRIO_USER) return -EINVAL;
  if (who < 0 && which != PRIO_USER) return -ESRCH;
  std::vector<TaskPtr> targets = Targets(t, which, who);
  if (targets.empty()) return -ESRCH;
  int best = 0;
  t.kernel().WithTasklistLock([&] {
    for (const auto& p : targets) best = std::max(best, 20 - p->sched.nice);
  });
  return best;  // 40..1, as the raw syscall returns it (libc subtracts)
}

int64_t SysSetpriority(Task& t, const SyscallArgs& a) {
  const int which = static_cast<int>(a.a[0]), who = static_cast<int>(a.a[1]);
  const int nice = std::clamp(static_cast<int>(a.a[2]), -20, 19);
  if (which < PRIO_PROCESS || which > PRIO_USER) return -EINVAL;
  if (who < 0 && which != PRIO_USER) return -ESRCH;
  std::vector<TaskPtr> targets = Targets(t, which, who);
  int64_t error = -ESRCH;
  for (const auto& p : targets) {
    if (!SameOwnerOrNice(t, *p)) {
      error = -EPERM;
      continue;
    }
    int cur = 0;
    t.kernel().WithTasklistLock([&] { cur = p->sched.nice; });
    if (nice < cur && !CanNice(t, *p, nice)) {
      error = -EACCES;
      continue;
    }
    if (error == -ESRCH) error = 0;
    t.kernel().WithTasklistLock([&] { p->sched.nice = nice; });
  }
  return error;
}

// ioprio_check_cap (block/ioprio.c).
int64_t CheckIoprio(Task& t, int ioprio) {
  const int cls = IOPRIO_PRIO_CLASS(ioprio), data = IOPRIO_PRIO_DATA(ioprio);
  switch (cls) {
    case IOPRIO_CLASS_RT:
      if (!t.own_creds().HasCap(CAP_SYS_NICE) &&
          !t.own_creds().HasCap(CAP_SYS_ADMIN)) {
        return -EPERM;
      }
      [[fallthrough]];
    case IOPRIO_CLASS_BE:
      if (data >= 8) return -EINVAL;
      return 0;
    case IOPRIO_CLASS_IDLE:
      return 0;
    case IOPRIO_CLASS_NONE:
      return data != 0 ? -EINVAL : 0;
    default:
      return -EINVAL;
  }
}

int64_t SysIoprioSet(Task& t, const SyscallArgs& a) {
  const int which = static_cast<int>(a.a[0]), who = static_cast<int>(a.a[1]);
  const int ioprio = static_cast<int>(a.a[2]);
  if (int64_t r = CheckIoprio(t, ioprio); r < 0) return r;
  if (which < IOPRIO_WHO_PROCESS || which > IOPRIO_WHO_USER) return -EINVAL;
  std::vector<TaskPtr> targets = Targets(t, which - 1, who);
  int64_t ret = -ESRCH;
  for (const auto& p : targets) {
    // set_task_ioprio: the caller's real or effective uid is the target's
    // real uid, or CAP_SYS_NICE.
    const fs::Credentials& c = t.own_creds();
    const uint32_t tuid = p->creds()->ruid;
    if (tuid != c.euid && tuid != c.ruid && !c.HasCap(CAP_SYS_NICE)) return -EPERM;
    t.kernel().WithTasklistLock([&] { p->sched.ioprio = ioprio; });
    ret = 0;
  }
  return ret;
}

// ioprio_best: the higher of two priorities (a lower class number is
// higher, none counting as best-effort).
int IoprioBest(int a, int b) {
  auto norm = [](int v) {
    return IOPRIO_PRIO_CLASS(v) == IOPRIO_CLASS_NONE
               ? IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 4)
               : v;
  };
  const int na = norm(a), nb = norm(b);
  return std::min(na, nb);
}

int64_t SysIoprioGet(Task& t, const SyscallArgs& a) {
  const int which = static_cast<int>(a.a[0]), who = static_cast<int>(a.a[1]);
  if (which < IOPRIO_WHO_PROCESS || which > IOPRIO_WHO_USER) return -EINVAL;
  std::vector<TaskPtr> targets = Targets(t, which - 1, who);
  if (targets.empty()) return -ESRCH;
  int ret = -1;
  t.kernel().WithTasklistLock([&] {
    for (const auto& p : targets) {
      ret = ret < 0 ? p->sched.ioprio : IoprioBest(ret, p->sched.ioprio);
    }
  });
  return ret;
}

// The task `pid` names for the sched_* calls (0: the caller).
int64_t SchedTarget(Task& t, int64_t pid, TaskPtr* out) {
  if (pid < 0) return -EINVAL;
  *out = pid == 0 ? t.shared_from_this() : t.kernel().FindTask(static_cast<pid_t>(pid));
  return *out == nullptr ? -ESRCH : 0;
}

struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};
static_assert(sizeof(SchedAttr) == kAttrSizeVer1);

// __checkparam_dl with Linux's default period bounds (100 us .. 4.19 s).
bool CheckDeadline(const SchedAttr& a) {
  if (a.sched_deadline == 0) return false;
  if (a.sched_runtime < (1u << 10)) return false;
  if ((a.sched_deadline | a.sched_period) & (1ull << 63)) return false;
  const uint64_t period = a.sched_period != 0 ? a.sched_period : a.sched_deadline;
  if (period < a.sched_deadline || a.sched_deadline < a.sched_runtime) return false;
  return period >= 100000 && period <= (1ull << 22) * 1000;
}

// __sched_setscheduler. policy < 0: keep the current policy (setparam).
int64_t SetScheduler(Task& t, kernel::Task& p, SchedAttr attr, bool set_nice) {
  kernel::Task::SchedState cur;
  t.kernel().WithTasklistLock([&] { cur = p.sched; });
  int policy = static_cast<int>(attr.sched_policy);
  const bool keep_policy = policy < 0;
  if (keep_policy) policy = cur.policy;
  if (!ValidPolicy(policy)) return -EINVAL;
  if (attr.sched_flags & ~kFlagAll) return -EINVAL;
  if (attr.sched_priority > 99) return -EINVAL;
  if ((policy == kSchedDeadline && !CheckDeadline(attr)) ||
      (RtPolicy(policy) != (attr.sched_priority != 0))) {
    return -EINVAL;
  }
  if (attr.sched_flags & (kFlagUtilClampMin | kFlagUtilClampMax)) {
    return -EOPNOTSUPP;  // no utilization clamping (CONFIG_UCLAMP_TASK off)
  }
  const fs::Credentials& c = t.own_creds();
  if (!c.HasCap(CAP_SYS_NICE)) {
    if (set_nice && FairPolicy(policy) && attr.sched_nice < cur.nice &&
        !CanNice(t, p, attr.sched_nice)) {
      return -EPERM;
    }
    if (RtPolicy(policy)) {
      const rlim_t rlim = p.group().GetLimit(RLIMIT_RTPRIO).rlim_cur;
      if (policy != cur.policy && rlim == 0) return -EPERM;
      if (attr.sched_priority > std::max<rlim_t>(cur.rt_priority, rlim)) return -EPERM;
    }
    if (policy == kSchedDeadline) return -EPERM;
    if (cur.policy == kSchedIdle && policy != kSchedIdle &&
        !CanNice(t, p, cur.nice)) {
      return -EPERM;
    }
    if (!SameOwnerOrNice(t, p)) return -EPERM;
    if (cur.reset_on_fork && !(attr.sched_flags & kFlagResetOnFork)) return -EPERM;
  }
  if (policy == kSchedDeadline) {
    // Admission control needs the sandbox's bandwidth, which it does not
    // model: refused as Linux refuses a set over its limit.
    return -EBUSY;
  }
  t.kernel().WithTasklistLock([&] {
    p.sched.policy = policy;
    p.sched.rt_priority = RtPolicy(policy) ? static_cast<int>(attr.sched_priority) : 0;
    p.sched.reset_on_fork = (attr.sched_flags & kFlagResetOnFork) != 0;
    if (set_nice && FairPolicy(policy)) p.sched.nice = attr.sched_nice;
  });
  return 0;
}

int64_t DoSetscheduler(Task& t, int64_t pid, int policy, uint64_t param_addr) {
  if (param_addr == 0 || pid < 0) return -EINVAL;
  struct sched_param param;
  RETURN_IF_ERRNO(CopyInObj(t, param_addr, &param));
  TaskPtr p;
  RETURN_IF_ERRNO(SchedTarget(t, pid, &p));
  SchedAttr attr{};
  attr.sched_priority = static_cast<uint32_t>(param.sched_priority);
  if (policy >= 0) {
    if (policy & kSchedResetOnFork) attr.sched_flags |= kFlagResetOnFork;
    policy &= ~kSchedResetOnFork;
  } else {
    // sched_setparam keeps the reset-on-fork flag as it is.
    t.kernel().WithTasklistLock([&] {
      if (p->sched.reset_on_fork) attr.sched_flags |= kFlagResetOnFork;
    });
  }
  attr.sched_policy = static_cast<uint32_t>(policy);
  if (param.sched_priority < 0) return -EINVAL;
  return SetScheduler(t, *p, attr, /*set_nice=*/false);
}

int64_t SysSchedSetscheduler(Task& t, const SyscallArgs& a) {
  const int policy = static_cast<int>(a.a[1]);
  if (policy < 0) return -EINVAL;
  return DoSetscheduler(t, static_cast<int32_t>(a.a[0]), policy, a.a[2]);
}

int64_t SysSchedSetparam(Task& t, const SyscallArgs& a) {
  return DoSetscheduler(t, static_cast<int32_t>(a.a[0]), -1, a.a[1]);
}

int64_t SysSchedGetscheduler(Task& t, const SyscallArgs& a) {
  TaskPtr p;
  RETURN_IF_ERRNO(SchedTarget(t, static_cast<int32_t>(a.a[0]), &p));
  int r = 0;
  t.kernel().WithTasklistLock([&] {
    r = p->sched.policy | (p->sched.reset_on_fork ? kSchedResetOnFork : 0);
  });
  return r;
}

int64_t SysSchedGetparam(Task& t, const SyscallArgs& a) {
  if (a.a[1] == 0 || static_cast<int32_t>(a.a[0]) < 0) return -EINVAL;
  TaskPtr p;
  RETURN_IF_ERRNO(SchedTarget(t, static_cast<int32_t>(a.a[0]), &p));
  struct sched_param param {};
  t.kernel().WithTasklistLock([&] { param.sched_priority = p->sched.rt_priority; });
  return CopyOutObj(t, a.a[1], param);
}

// sched_rr_get_interval: SCHED_RR's time slice (Linux's default
// sched_rr_timeslice_ms, 100 ms); 0 for the other policies, as Linux 6.6+
// (EEVDF) answers for SCHED_OTHER and always for SCHED_FIFO.
int64_t SysSchedRrGetInterval(Task& t, const SyscallArgs& a) {
  if (static_cast<int32_t>(a.a[0]) < 0) return -EINVAL;
  TaskPtr p;
  RETURN_IF_ERRNO(SchedTarget(t, static_cast<int32_t>(a.a[0]), &p));
  int policy = 0;
  t.kernel().WithTasklistLock([&] { policy = p->sched.policy; });
  struct timespec ts {};
  if (policy == kSchedRr) ts.tv_nsec = 100 * 1000 * 1000;
  return CopyOutObj(t, a.a[1], ts);
}

int64_t SysSchedGetPriorityMax(Task&, const SyscallArgs& a) {
  const int policy = static_cast<int>(a.a[0]);
  if (RtPolicy(policy)) return 99;
  return FairPolicy(policy) || policy == kSchedDeadline ? 0 : -EINVAL;
}

int64_t SysSchedGetPriorityMin(Task&, const SyscallArgs& a) {
  const int policy = static_cast<int>(a.a[0]);
  if (RtPolicy(policy)) return 1;
  return FairPolicy(policy) || policy == kSchedDeadline ? 0 : -EINVAL;
}

// sched_copy_attr: the size the caller claims, bytes past what the Sentry
// knows must be zero (else E2BIG with the size it knows written back).
int64_t CopyInAttr(Task& t, uint64_t addr, SchedAttr* attr) {
  *attr = {};
  uint32_t size = 0;
  RETURN_IF_ERRNO(CopyInObj(t, addr, &size));
  if (size == 0) size = kAttrSizeVer0;
  auto too_big = [&]() -> int64_t {
    const uint32_t known = kAttrSizeVer1;
    RETURN_IF_ERRNO(CopyOutObj(t, addr, known));
    return -E2BIG;
  };
  if (size < kAttrSizeVer0 || size > 4096) return too_big();
  const uint32_t n = std::min<uint32_t>(size, sizeof(SchedAttr));
  RETURN_IF_ERRNO(CopyInBytes(t, addr, attr, n));
  for (uint32_t off = sizeof(SchedAttr); off < size; off++) {
    uint8_t b = 0;
    RETURN_IF_ERRNO(CopyInObj(t, addr + off, &b));
    if (b != 0) return too_big();
  }
  attr->size = size;
  attr->sched_nice = std::clamp(attr->sched_nice, -20, 19);
  return 0;
}

int64_t SysSchedSetattr(Task& t, const SyscallArgs& a) {
  const int64_t pid = static_cast<int32_t>(a.a[0]);
  if (a.a[1] == 0 || pid < 0 || a.a[2] != 0) return -EINVAL;
  SchedAttr attr;
  RETURN_IF_ERRNO(CopyInAttr(t, a.a[1], &attr));
  if (static_cast<int32_t>(attr.sched_policy) < 0) return -EINVAL;
  if (attr.sched_flags & kFlagKeepPolicy) attr.sched_policy = static_cast<uint32_t>(-1);
  TaskPtr p;
  RETURN_IF_ERRNO(SchedTarget(t, pid, &p));
  if (attr.sched_flags & kFlagKeepParams) {
    t.kernel().WithTasklistLock([&] {
      attr.sched_priority = static_cast<uint32_t>(p->sched.rt_priority);
    });
  }
  return SetScheduler(t, *p, attr, /*set_nice=*/true);
}

int64_t SysSchedGetattr(Task& t, const SyscallArgs& a) {
  const int64_t pid = static_cast<int32_t>(a.a[0]);
  const uint32_t usize = static_cast<uint32_t>(a.a[2]);
  if (a.a[1] == 0 || pid < 0 || usize > 4096 || usize < kAttrSizeVer0 ||
      a.a[3] != 0) {
    return -EINVAL;
  }
  TaskPtr p;
  RETURN_IF_ERRNO(SchedTarget(t, pid, &p));
  SchedAttr attr{};
  t.kernel().WithTasklistLock([&] {
    const kernel::Task::SchedState& s = p->sched;
    attr.sched_policy = static_cast<uint32_t>(s.policy);
    if (s.reset_on_fork) attr.sched_flags |= kFlagResetOnFork;
    if (s.policy == kSchedDeadline) {
      attr.sched_runtime = s.dl_runtime;
      attr.sched_deadline = s.dl_deadline;
      attr.sched_period = s.dl_period;
    } else if (RtPolicy(s.policy)) {
      attr.sched_priority = static_cast<uint32_t>(s.rt_priority);
    } else {
      attr.sched_nice = s.nice;
    }
  });
  attr.sched_util_max = 1024;  // SCHED_CAPACITY_SCALE: no clamp
  attr.size = std::min<uint32_t>(usize, sizeof(attr));
  return CopyOutBytes(t, a.a[1], &attr, attr.size);
}

// Setting the system clock needs CAP_SYS_TIME in the host's initial user
// namespace, which no sandbox has: EPERM after the argument checks, as in
// an unprivileged container. Clocks that cannot be set are EINVAL.
int64_t SysClockSettime(Task& t, const SyscallArgs& a) {
  const clockid_t clock = static_cast<clockid_t>(a.a[0]);
  struct timespec ts;
  if (clock < 0) {
    // CPU clocks: posix_cpu_clock_set refuses every set.
    RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &ts));
    return -EPERM;
  }
  if (clock != CLOCK_REALTIME) return -EINVAL;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &ts));
  if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000) return -EINVAL;
  return -EPERM;
}

int64_t SysSettimeofday(Task& t, const SyscallArgs& a) {
  if (a.a[0] != 0) {
    struct timeval tv;
    RETURN_IF_ERRNO(CopyInObj(t, a.a[0], &tv));
    if (tv.tv_usec < 0 || tv.tv_usec >= 1000000 || tv.tv_sec < 0) return -EINVAL;
  }
  if (a.a[1] != 0) {
    struct timezone tz;
    RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &tz));
    if (tz.tz_minuteswest > 15 * 60 || tz.tz_minuteswest < -15 * 60) return -EINVAL;
  }
  return -EPERM;
}

}  // namespace

void RegisterSched(Entry* table) {
  table[SYS_getpriority] = {SysGetpriority, "getpriority"};
  table[SYS_setpriority] = {SysSetpriority, "setpriority"};
  table[SYS_ioprio_get] = {SysIoprioGet, "ioprio_get"};
  table[SYS_ioprio_set] = {SysIoprioSet, "ioprio_set"};
  table[SYS_sched_setscheduler] = {SysSchedSetscheduler, "sched_setscheduler"};
  table[SYS_sched_getscheduler] = {SysSchedGetscheduler, "sched_getscheduler"};
  table[SYS_sched_setparam] = {SysSchedSetparam, "sched_setparam"};
  table[SYS_sched_getparam] = {SysSchedGetparam, "sched_getparam"};
  table[SYS_sched_rr_get_interval] = {SysSchedRrGetInterval, "sched_rr_get_interval"};
  table[SYS_sched_get_priority_max] = {SysSchedGetPriorityMax, "sched_get_priority_max"};
  table[SYS_sched_get_priority_min] = {SysSchedGetPriorityMin, "sched_get_priority_min"};
  table[SYS_sched_setattr] = {SysSchedSetattr, "sched_setattr"};
  table[SYS_sched_getattr] = {SysSchedGetattr, "sched_getattr"};
  table[SYS_clock_settime] = {SysClockSettime, "clock_settime"};
  table[SYS_settimeofday] = {SysSettimeofday, "settimeofday"};
}

}  // namespace sandboxd::syscalls
