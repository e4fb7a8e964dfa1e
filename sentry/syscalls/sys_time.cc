// Clocks, sleeps, interval timers, POSIX timers and CPU usage:
// clock_gettime, clock_getres, nanosleep, clock_nanosleep, alarm,
// setitimer/getitimer, timer_*, getrusage, times.
// The timers themselves are in sentry/kernel/timers.h, the accounting in
// sentry/kernel/cputime.h.
#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/times.h>
#include <time.h>

#include <algorithm>
#include <climits>

#include "absl/time/clock.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/syscalls.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::syscalls {
namespace {

using kernel::kNsPerSec;

// The resolution Linux reports for tick-based CPU clocks (PROF, VIRT):
// one tick at Debian's HZ=250.
constexpr int64_t kTickNs = kNsPerSec / 250;
// times(2) and the clock_t fields count USER_HZ ticks.
constexpr int64_t kUserHzNs = kNsPerSec / 100;

int64_t SysClockGettime(Task& t, const SyscallArgs& a) {
  kernel::TimerClock clock;
  RETURN_IF_ERRNO(
      kernel::ResolveClock(t, static_cast<clockid_t>(a.a[0]), &clock));
  struct timespec ts;
  if (clock.kind == kernel::TimerClock::Kind::kHost) {
    // Coarse and raw clocks too: the host's as they are, plus the offset
    // a restore gave the monotonic and boottime ones.
    if (waiter::ClockGettime(clock.host, &ts) != 0) return -errno;
  } else {
    int64_t ns = clock.Now();
    if (ns < 0) return -EINVAL;
    ts.tv_sec = ns / kNsPerSec;
    ts.tv_nsec = ns % kNsPerSec;
  }
  return CopyOutObj(t, a.a[1], ts);
}

int64_t SysClockGetres(Task& t, const SyscallArgs& a) {
  kernel::TimerClock clock;
  RETURN_IF_ERRNO(
      kernel::ResolveClock(t, static_cast<clockid_t>(a.a[0]), &clock));
  struct timespec ts = {0, 1};
  if (clock.kind == kernel::TimerClock::Kind::kHost) {
    if (clock_getres(clock.host, &ts) != 0) return -errno;
  } else if (clock.which != kernel::CpuWhich::kSched) {
    ts.tv_nsec = kTickNs;
  }
  if (a.a[1] == 0) return 0;
  return CopyOutObj(t, a.a[1], ts);
}

// ---------------------------------------------------------------------------
// Sleeps

bool ValidTimespec(const timespec& ts) {
  return ts.tv_sec >= 0 && ts.tv_nsec >= 0 && ts.tv_nsec < kNsPerSec;
}

// The sandbox's `clk` (waiter::ClockNowNs: after a restore, the monotonic
// and boottime clocks go on from their saved values, so an absolute
// deadline on them keeps its meaning).
int64_t HostClockNs(clockid_t clk) { return waiter::ClockNowNs(clk); }

// What an interrupted sleep leaves behind: the time left in `rem` (if the
// program asked for it) and its deadline in the restart block, from which
// restart_syscall(2) goes on when no handler runs. -EINTR otherwise.
int64_t Interrupted(Task& t, clockid_t program_clock, int64_t deadline_ns,
                    int64_t now_ns, uint64_t rem_addr) {
  if (rem_addr != 0) {
    int64_t left = std::max<int64_t>(deadline_ns - now_ns, 0);
    timespec rem = {static_cast<time_t>(left / kNsPerSec),
                    static_cast<long>(left % kNsPerSec)};
    CopyOutObj(t, rem_addr, rem);
  }
  t.restart_block() = kernel::RestartBlock{kernel::RestartBlock::Kind::kSleep,
                                           program_clock, deadline_ns, rem_addr};
  return -EINTR;
}

// Sleeps on host clock `clk` until its time is `deadline_ns`.
int64_t SleepUntil(Task& t, clockid_t program_clock, clockid_t clk,
                   int64_t deadline_ns, uint64_t rem_addr) {
  for (;;) {
    int64_t now = HostClockNs(clk);
    if (now >= deadline_ns) return 0;
    Task::WakeReason why =
        t.Block(absl::Now() + absl::Nanoseconds(deadline_ns - now));
    if (why == Task::WakeReason::kInterrupted) break;
  }
  return Interrupted(t, program_clock, deadline_ns, HostClockNs(clk), rem_addr);
}

// Sleeps until a CPU clock reaches `target`, looking at it again whenever
// the budget left could first have been used up.
int64_t CpuSleepUntil(Task& t, clockid_t program_clock,
                      const kernel::TimerClock& clock, int64_t target,
                      uint64_t rem_addr) {
  int64_t now;
  for (;;) {
    now = clock.Now();
    if (now < 0 || now >= target) return 0;
    int64_t wait = std::max<int64_t>((target - now) / clock.Threads(), 1000000);
    Task::WakeReason why = t.Block(absl::Now() + absl::Nanoseconds(wait));
    if (why == Task::WakeReason::kInterrupted) break;
  }
  return Interrupted(t, program_clock, target, std::max<int64_t>(clock.Now(), 0),
                     rem_addr);
}

// A sleep on `clock` for `req`, or until `req` with TIMER_ABSTIME (which
// writes no time left, as on Linux).
int64_t Sleep(Task& t, clockid_t program_clock, const kernel::TimerClock& clock,
              const timespec& req, bool absolute, uint64_t rem_addr) {
  if (!ValidTimespec(req)) return -EINVAL;
  int64_t ns = req.tv_sec * kNsPerSec + req.tv_nsec;
  if (absolute) rem_addr = 0;
  if (clock.kind == kernel::TimerClock::Kind::kHost) {
    // A relative sleep that a checkpoint saved goes on for what was left.
    if (!absolute) {
      ns = absl::ToInt64Nanoseconds(t.SyscallTimeout(absl::Nanoseconds(ns)));
    }
    int64_t deadline = absolute ? ns : HostClockNs(clock.host) + ns;
    return SleepUntil(t, program_clock, clock.host, deadline, rem_addr);
  }
  int64_t now = clock.Now();
  if (now < 0) return -EINVAL;
  // As above, on the CPU clock: what a checkpoint left of it.
  return CpuSleepUntil(t, program_clock, clock,
                       absolute ? ns : t.SyscallCpuTimeout(clock, now, ns),
                       rem_addr);
}

int64_t SysNanosleep(Task& t, const SyscallArgs& a) {
  timespec req;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[0], &req));
  kernel::TimerClock clock;
  clock.kind = kernel::TimerClock::Kind::kHost;
  clock.host = CLOCK_MONOTONIC;
  return Sleep(t, CLOCK_MONOTONIC, clock, req, false, a.a[1]);
}

// restart_syscall(2): goes on with the sleep that a stop (or a signal that
// ran no handler) interrupted, towards the same deadline. Without one, as
// when a program calls it itself, Linux's answer: EINTR.
// The block stays set while the sleep goes on (a checkpoint taken now
// re-executes restart_syscall after the load, which needs it); a new
// interruption sets it again, the end of the sleep clears it.
int64_t SysRestartSyscall(Task& t, const SyscallArgs&) {
  const kernel::RestartBlock b = t.restart_block();
  if (b.kind != kernel::RestartBlock::Kind::kSleep) return -EINTR;
  kernel::TimerClock clock;
  int64_t r = kernel::ResolveClock(t, b.clock, &clock);
  if (r == 0) {
    r = clock.kind == kernel::TimerClock::Kind::kHost
            ? SleepUntil(t, b.clock, clock.host, b.deadline_ns, b.rem_addr)
            : CpuSleepUntil(t, b.clock, clock, b.deadline_ns, b.rem_addr);
  }
  if (r != -EINTR) t.restart_block() = kernel::RestartBlock{};
  return r;
}

int64_t SysClockNanosleep(Task& t, const SyscallArgs& a) {
  clockid_t clk = static_cast<clockid_t>(a.a[0]);
  switch (clk) {
    case CLOCK_MONOTONIC_RAW: case CLOCK_REALTIME_COARSE:
    case CLOCK_MONOTONIC_COARSE:
      return -EOPNOTSUPP;
    case CLOCK_REALTIME_ALARM: case CLOCK_BOOTTIME_ALARM:
      if (a.a[1] & ~static_cast<uint64_t>(TIMER_ABSTIME)) return -EINVAL;
      return -EPERM;  // no CAP_WAKE_ALARM in a sandbox
    default:
      break;
  }
  kernel::CpuClockId cpu;
  // Linux: a thread may not sleep on its own CPU clock.
  if (kernel::DecodeCpuClock(clk, &cpu) && cpu.thread &&
      (cpu.pid == 0 || cpu.pid == t.tid())) {
    return -EINVAL;
  }
  kernel::TimerClock clock;
  RETURN_IF_ERRNO(kernel::ResolveClock(t, clk, &clock));
  if (a.a[1] & ~static_cast<uint64_t>(TIMER_ABSTIME)) return -EINVAL;
  timespec req;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &req));
  const bool absolute = (a.a[1] & TIMER_ABSTIME) != 0;
  return Sleep(t, clk, clock, req, absolute, a.a[3]);
}

// ---------------------------------------------------------------------------
// Interval timers

int64_t SysSetitimer(Task& t, const SyscallArgs& a) {
  struct itimerval next = {}, old = {};
  // A null new value disarms, as Linux has always accepted.
  if (a.a[1] != 0) RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &next));
  RETURN_IF_ERRNO(t.group().timers().SetITimer(
      t, static_cast<int>(a.a[0]), next, a.a[2] != 0 ? &old : nullptr));
  if (a.a[2] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[2], old));
  return 0;
}

int64_t SysGetitimer(Task& t, const SyscallArgs& a) {
  struct itimerval cur;
  RETURN_IF_ERRNO(t.group().timers().GetITimer(static_cast<int>(a.a[0]), &cur));
  return CopyOutObj(t, a.a[1], cur);
}

int64_t SysAlarm(Task& t, const SyscallArgs& a) {
  struct itimerval next = {}, old = {};
  next.it_value.tv_sec = static_cast<unsigned int>(a.a[0]);
  t.group().timers().SetITimer(t, ITIMER_REAL, next, &old);
  // Linux's alarm_setitimer: round to the nearest second, and never
  // report 0 for an alarm that is still pending.
  int64_t secs = old.it_value.tv_sec;
  if ((secs == 0 && old.it_value.tv_usec != 0) ||
      old.it_value.tv_usec >= 500000) {
    secs++;
  }
  return secs;
}

// ---------------------------------------------------------------------------
// POSIX timers

int64_t SysTimerCreate(Task& t, const SyscallArgs& a) {
  kernel::KSigEvent sev;
  if (a.a[1] != 0) RETURN_IF_ERRNO(CopyInObj(t, a.a[1], &sev));
  int id = 0;
  kernel::ProcessTimers& timers = t.group().timers();
  RETURN_IF_ERRNO(timers.Create(t, static_cast<clockid_t>(a.a[0]),
                                a.a[1] != 0 ? &sev : nullptr, &id));
  int32_t id32 = id;
  if (CopyOutObj(t, a.a[2], id32) < 0) {
    timers.Delete(id);
    return -EFAULT;
  }
  return 0;
}

int64_t SysTimerSettime(Task& t, const SyscallArgs& a) {
  if (a.a[2] == 0) return -EINVAL;
  struct itimerspec next, old;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &next));
  RETURN_IF_ERRNO(t.group().timers().SetTime(static_cast<int>(a.a[0]),
                                             static_cast<int>(a.a[1]), next,
                                             a.a[3] != 0 ? &old : nullptr));
  if (a.a[3] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[3], old));
  return 0;
}

int64_t SysTimerGettime(Task& t, const SyscallArgs& a) {
  struct itimerspec cur;
  RETURN_IF_ERRNO(t.group().timers().GetTime(static_cast<int>(a.a[0]), &cur));
  return CopyOutObj(t, a.a[1], cur);
}

int64_t SysTimerGetoverrun(Task& t, const SyscallArgs& a) {
  return t.group().timers().GetOverrun(static_cast<int>(a.a[0]));
}

int64_t SysTimerDelete(Task& t, const SyscallArgs& a) {
  return t.group().timers().Delete(static_cast<int>(a.a[0]));
}

// ---------------------------------------------------------------------------
// CPU usage

int64_t SysGetrusage(Task& t, const SyscallArgs& a) {
  kernel::Usage u;
  switch (static_cast<int>(a.a[0])) {
    case RUSAGE_SELF:
      t.group().NoteMaxRss();
      u = t.group().SelfUsage();
      break;
    case RUSAGE_CHILDREN:
      u = t.group().ChildrenUsage();
      break;
    case RUSAGE_THREAD: {
      // Times and counts of the thread, memory of the process.
      t.group().NoteMaxRss();
      uint64_t maxrss = t.group().SelfUsage().maxrss_kb;
      u = t.cputime().Read(kernel::MonotonicNowNs());
      u.maxrss_kb = maxrss;
      break;
    }
    default:
      return -EINVAL;
  }
  struct rusage ru = u.ToRusage();
  return CopyOutObj(t, a.a[1], ru);
}

int64_t SysTimes(Task& t, const SyscallArgs& a) {
  if (a.a[0] != 0) {
    kernel::Usage self = t.group().SelfUsage();
    kernel::Usage children = t.group().ChildrenUsage();
    struct tms buf;
    buf.tms_utime = self.user_ns / kUserHzNs;
    buf.tms_stime = self.sys_ns / kUserHzNs;
    buf.tms_cutime = children.user_ns / kUserHzNs;
    buf.tms_cstime = children.sys_ns / kUserHzNs;
    RETURN_IF_ERRNO(CopyOutObj(t, a.a[0], buf));
  }
  // The return value counts ticks since an arbitrary point: the host's.
  struct tms ignored;
  return static_cast<int64_t>(::times(&ignored));
}

}  // namespace

void RegisterTime(Entry* table) {
  table[SYS_clock_gettime] = {SysClockGettime, "clock_gettime"};
  table[SYS_clock_getres] = {SysClockGetres, "clock_getres"};
  table[SYS_nanosleep] = {SysNanosleep, "nanosleep"};
  table[SYS_clock_nanosleep] = {SysClockNanosleep, "clock_nanosleep"};
  table[SYS_restart_syscall] = {SysRestartSyscall, "restart_syscall"};
  table[SYS_alarm] = {SysAlarm, "alarm"};
  table[SYS_setitimer] = {SysSetitimer, "setitimer"};
  table[SYS_getitimer] = {SysGetitimer, "getitimer"};
  table[SYS_timer_create] = {SysTimerCreate, "timer_create"};
  table[SYS_timer_settime] = {SysTimerSettime, "timer_settime"};
  table[SYS_timer_gettime] = {SysTimerGettime, "timer_gettime"};
  table[SYS_timer_getoverrun] = {SysTimerGetoverrun, "timer_getoverrun"};
  table[SYS_timer_delete] = {SysTimerDelete, "timer_delete"};
  table[SYS_getrusage] = {SysGetrusage, "getrusage"};
  table[SYS_times] = {SysTimes, "times"};
}

}  // namespace sandboxd::syscalls
