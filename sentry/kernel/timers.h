// Interval timers (alarm, setitimer) and POSIX timers (timer_create) of a
// process.
//
// Every timer is an IntervalTimer served by the Sentry's TimerThread
// (sentry/waiter/timer_thread.h). Timers on host clocks are armed for their
// deadline on that clock. Timers on CPU clocks (ITIMER_VIRTUAL, ITIMER_PROF,
// CLOCK_*_CPUTIME_ID and clock_getcpuclockid ids) are armed on
// CLOCK_MONOTONIC for the earliest moment the CPU budget left could be used
// up (the budget divided by the threads that advance the clock); at that
// moment the timer reads the clock again and fires or re-arms. Expiring
// sends the signal through the kernel's signal code, which interrupts a
// task running application code, so a program that spins without syscalls
// still gets it.
//
// A POSIX timer whose signal is still pending does not queue it again: its
// expirations count as overruns until the signal is taken
// (SignalSource::Dequeued), as Linux's posixtimer_rearm does. A pending
// signal of a timer that was re-armed or deleted since is dropped.
//
// Lock order: ProcessTimers::mu_ > IntervalTimer::mu_ > TimerThread's lock;
// IntervalTimer::mu_ > ThreadGroup::mu_ > Task::mu_ (expiry sends signals).
#ifndef SANDBOXD_SENTRY_KERNEL_TIMERS_H_
#define SANDBOXD_SENTRY_KERNEL_TIMERS_H_

#include <sys/time.h>
#include <time.h>

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/kernel/cputime.h"
#include "sentry/kernel/signal.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::state {
struct KernelState;
}  // namespace sandboxd::state

namespace sandboxd::kernel {

class Task;
class ThreadGroup;

// A clock a timer runs on, or that clock_gettime reads.
struct TimerClock {
  enum class Kind { kHost, kProcessCpu, kThreadCpu };
  Kind kind = Kind::kHost;
  clockid_t host = CLOCK_MONOTONIC;  // kHost
  CpuWhich which = CpuWhich::kSched;  // CPU clocks
  std::weak_ptr<ThreadGroup> group;  // kProcessCpu
  std::weak_ptr<Task> task;          // kThreadCpu

  // Nanoseconds; -1 when the process or thread is gone.
  int64_t Now() const;
  // How many threads advance the clock at most at once (>= 1).
  int Threads() const;
};

// Resolves `id` for task `t` as clock_gettime does: host clocks and CPU
// clocks of the caller, its threads, or another process. -EINVAL for an
// unknown clock or a pid/tid that is not there.
int64_t ResolveClock(Task& t, clockid_t id, TimerClock* out);

// The kernel's struct sigevent (x86-64).
struct KSigEvent {
  uint64_t value = 0;  // union sigval
  int32_t signo = 0;
  int32_t notify = 0;
  int32_t tid = 0;     // SIGEV_THREAD_ID
  int32_t pad[11] = {};
};
static_assert(sizeof(KSigEvent) == 64);

// How an expiry notifies.
struct TimerTarget {
  enum class Notify { kNone, kProcess, kThread };
  Notify notify = Notify::kProcess;
  int signo = 0;
  int code = 0;           // SI_TIMER, or SI_KERNEL for interval timers
  int timerid = 0;
  uint64_t value = 0;
  bool posix = false;     // count overruns until the signal is taken
  std::weak_ptr<ThreadGroup> group;
  std::weak_ptr<Task> task;  // kThread
};

// One timer: a deadline and an interval on a clock, and what to do on
// expiry. Owned by shared_ptr; the TimerThread holds it weakly.
class IntervalTimer : public waiter::Timer,
                      public SignalSource,
                      public std::enable_shared_from_this<IntervalTimer> {
 public:
  IntervalTimer(TimerClock clock, TimerTarget target)
      : clock_(std::move(clock)), target_(std::move(target)) {}

  // Arms (value > 0) or disarms (value == 0); `absolute`: value is a time
  // on the clock, else relative to now. Resets the overrun count. Returns
  // the previous setting in *old_value/*old_interval when not null.
  void Set(int64_t value_ns, int64_t interval_ns, bool absolute,
           int64_t* old_value, int64_t* old_interval);
  // Time left (0: disarmed) and the interval.
  void Get(int64_t* value_ns, int64_t* interval_ns);
  // The overrun count of the last signal taken (timer_getoverrun).
  int Overrun();
  // timer_delete, exec, exit: never fires again.
  void Delete();

  void Expired() override;
  bool Dequeued(siginfo_t* info) override;

 private:
  void ArmLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLocked(uint64_t periods) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GetLocked(int64_t now, int64_t* value_ns, int64_t* interval_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TimerClock clock_;
  const TimerTarget target_;
  absl::Mutex mu_;
  int64_t next_ns_ ABSL_GUARDED_BY(mu_) = 0;  // 0: disarmed
  int64_t interval_ns_ ABSL_GUARDED_BY(mu_) = 0;
  bool deleted_ ABSL_GUARDED_BY(mu_) = false;
  bool signal_pending_ ABSL_GUARDED_BY(mu_) = false;
  // Bumped by every Set and Delete: a signal queued before is dropped when
  // dequeued, as Linux (6.13 and later) drops it.
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t queued_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t overrun_ ABSL_GUARDED_BY(mu_) = 0;  // since the signal was queued
  int overrun_last_ ABSL_GUARDED_BY(mu_) = 0;
  // Set absolute on CLOCK_REALTIME: a checkpoint keeps the deadline, which
  // follows the host's real time across a restore; other timers keep the
  // time left (Linux runs relative CLOCK_REALTIME timers on the monotonic
  // base).
  bool abs_realtime_ ABSL_GUARDED_BY(mu_) = false;
  friend struct state::KernelState;
  // Name mu_ in their lock order annotations.
  friend class ProcessTimers;
  friend class ThreadGroup;
};

// Periods of `interval_ns` that ended between `next_ns` and `now_ns`,
// counting the one at `next_ns` (now_ns >= next_ns): Linux's
// hrtimer_forward. 1 for a one-shot timer.
uint64_t ExpiredPeriods(int64_t next_ns, int64_t interval_ns, int64_t now_ns);

class ProcessTimers {
 public:
  ProcessTimers() = default;
  ~ProcessTimers() { DeleteAll(); }
  ProcessTimers(const ProcessTimers&) = delete;
  ProcessTimers& operator=(const ProcessTimers&) = delete;

  // setitimer/getitimer for ITIMER_REAL, _VIRTUAL, _PROF (-EINVAL for
  // others and for bad timevals). `old` may be null.
  int64_t SetITimer(Task& t, int which, const itimerval& next, itimerval* old);
  int64_t GetITimer(int which, itimerval* cur);

  // timer_create: -EINVAL (bad clock, sigevent or thread), -EOPNOTSUPP
  // (clocks without timers), -EPERM (the _ALARM clocks: no CAP_WAKE_ALARM
  // in a sandbox). `sev` null: SIGALRM to the process with the id as value.
  int64_t Create(Task& t, clockid_t clock, const KSigEvent* sev, int* id);
  int64_t SetTime(int id, int flags, const itimerspec& value, itimerspec* old);
  int64_t GetTime(int id, itimerspec* cur);
  int64_t GetOverrun(int id);
  int64_t Delete(int id);

  // execve: POSIX timers go, interval timers stay.
  void DeletePosixTimers();
  // Process exit.
  void DeleteAll();

 private:
  std::shared_ptr<IntervalTimer> Find(int id);

  absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(IntervalTimer::mu_);
  std::shared_ptr<IntervalTimer> itimers_[3] ABSL_GUARDED_BY(mu_);
  std::map<int, std::shared_ptr<IntervalTimer>> posix_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  friend struct state::KernelState;
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_TIMERS_H_
