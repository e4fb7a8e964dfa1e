#include "sentry/kernel/timers.h"

#include <errno.h>
#include <signal.h>

#include <algorithm>
#include <climits>

#include "sentry/kernel/kernel.h"

namespace sandboxd::kernel {
namespace {

constexpr int kSigevSignal = 0, kSigevNone = 1, kSigevThread = 2,
              kSigevThreadId = 4;
// The shortest wait between two looks at a CPU clock: a running program
// is interrupted at most this often (Linux checks CPU timers every tick).
constexpr int64_t kMinCpuPollNs = 100 * 1000;
// One tick at Debian's HZ=250.
constexpr int64_t kTickNs = kNsPerSec / 250;

bool IsTimerThreadClock(clockid_t c) {
  return c == CLOCK_REALTIME || c == CLOCK_MONOTONIC || c == CLOCK_BOOTTIME;
}

// Saturates: a deadline centuries away is as good as never.
int64_t AddSat(int64_t a, int64_t b) {
  return a > INT64_MAX / 2 - b ? INT64_MAX / 2 : a + b;
}

int64_t TimespecNs(const timespec& ts) {
  if (ts.tv_sec >= INT64_MAX / kNsPerSec - 1) return INT64_MAX / 2;
  return ts.tv_sec * kNsPerSec + ts.tv_nsec;
}

timespec NsTimespec(int64_t ns) {
  return timespec{static_cast<time_t>(ns / kNsPerSec),
                  static_cast<long>(ns % kNsPerSec)};
}

int64_t TimevalNs(const timeval& tv) {
  if (tv.tv_sec >= INT64_MAX / kNsPerSec - 1) return INT64_MAX / 2;
  return tv.tv_sec * kNsPerSec + tv.tv_usec * 1000;
}

timeval NsTimeval(int64_t ns) {
  return timeval{static_cast<time_t>(ns / kNsPerSec),
                 static_cast<suseconds_t>((ns % kNsPerSec) / 1000)};
}

}  // namespace

uint64_t ExpiredPeriods(int64_t next_ns, int64_t interval_ns, int64_t now_ns) {
  if (interval_ns <= 0 || now_ns < next_ns) return 1;
  return 1 + static_cast<uint64_t>((now_ns - next_ns) / interval_ns);
}

// ---------------------------------------------------------------------------
// Clocks

int64_t TimerClock::Now() const {
  switch (kind) {
    case Kind::kHost:
      return waiter::ClockNowNs(host);
    case Kind::kProcessCpu: {
      std::shared_ptr<ThreadGroup> g = group.lock();
      if (g == nullptr) return -1;
      return CpuClockValue(g->SelfUsage(), which);
    }
    case Kind::kThreadCpu: {
      std::shared_ptr<Task> t = task.lock();
      if (t == nullptr) return -1;
      return CpuClockValue(t->cputime().Read(MonotonicNowNs()), which);
    }
  }
  return -1;
}

int TimerClock::Threads() const {
  if (kind != Kind::kProcessCpu) return 1;
  std::shared_ptr<ThreadGroup> g = group.lock();
  return g == nullptr ? 1 : std::max<int>(1, g->Tasks().size());
}

int64_t ResolveClock(Task& t, clockid_t id, TimerClock* out) {
  switch (id) {
    case CLOCK_REALTIME: case CLOCK_MONOTONIC: case CLOCK_MONOTONIC_RAW:
    case CLOCK_REALTIME_COARSE: case CLOCK_MONOTONIC_COARSE:
    case CLOCK_BOOTTIME: case CLOCK_TAI:
      out->kind = TimerClock::Kind::kHost;
      out->host = id;
      return 0;
    case CLOCK_REALTIME_ALARM: case CLOCK_BOOTTIME_ALARM:
      // Readable like their base clocks.
      out->kind = TimerClock::Kind::kHost;
      out->host = id == CLOCK_REALTIME_ALARM ? CLOCK_REALTIME : CLOCK_BOOTTIME;
      return 0;
    default:
      break;
  }
  CpuClockId cpu;
  if (!DecodeCpuClock(id, &cpu)) return -EINVAL;
  out->which = cpu.which;
  if (cpu.thread) {
    out->kind = TimerClock::Kind::kThreadCpu;
    std::shared_ptr<Task> task =
        cpu.pid == 0 ? t.kernel().FindTask(t.tid()) : t.kernel().FindTask(cpu.pid);
    // Linux: only threads of the caller's own process.
    if (task == nullptr || &task->group() != &t.group()) return -EINVAL;
    out->task = task;
    return 0;
  }
  out->kind = TimerClock::Kind::kProcessCpu;
  if (cpu.pid == 0) {
    out->group = t.group_ptr();
    return 0;
  }
  std::shared_ptr<ThreadGroup> g = t.kernel().FindGroup(cpu.pid);
  if (g == nullptr || g->reaped) return -EINVAL;
  out->group = g;
  return 0;
}

// ---------------------------------------------------------------------------
// IntervalTimer

void IntervalTimer::Set(int64_t value_ns, int64_t interval_ns, bool absolute,
                        int64_t* old_value, int64_t* old_interval) {
  absl::MutexLock l(&mu_);
  int64_t now = clock_.Now();
  if (old_value != nullptr) GetLocked(now, old_value, old_interval);
  seq_++;
  signal_pending_ = false;
  overrun_ = 0;
  overrun_last_ = 0;
  interval_ns_ = interval_ns;
  abs_realtime_ = absolute && clock_.kind == TimerClock::Kind::kHost &&
                  clock_.host == CLOCK_REALTIME;
  if (value_ns == 0 || deleted_ || now < 0) {
    next_ns_ = 0;
    waiter::TimerThread::Get().Disarm(this);
    return;
  }
  // An absolute time in the past fires at once; next_ns_ stays non-zero.
  next_ns_ = absolute ? std::max<int64_t>(value_ns, 1) : AddSat(now, value_ns);
  ArmLocked(now);
}

void IntervalTimer::GetLocked(int64_t now, int64_t* value_ns,
                              int64_t* interval_ns) {
  *interval_ns = interval_ns_;
  if (next_ns_ == 0 || now < 0) {
    *value_ns = 0;
    return;
  }
  int64_t next = next_ns_;
  // The timer thread may not have run yet for a period that ended.
  if (interval_ns_ > 0 && now >= next) {
    next += static_cast<int64_t>(ExpiredPeriods(next, interval_ns_, now)) *
            interval_ns_;
  }
  // An armed timer never reports 0, which would read as disarmed.
  *value_ns = std::max<int64_t>(next - now, 1);
}

void IntervalTimer::Get(int64_t* value_ns, int64_t* interval_ns) {
  absl::MutexLock l(&mu_);
  GetLocked(clock_.Now(), value_ns, interval_ns);
}

int IntervalTimer::Overrun() {
  absl::MutexLock l(&mu_);
  return overrun_last_;
}

void IntervalTimer::Delete() {
  absl::MutexLock l(&mu_);
  deleted_ = true;
  seq_++;
  next_ns_ = 0;
  waiter::TimerThread::Get().Disarm(this);
}

void IntervalTimer::ArmLocked(int64_t now) {
  if (clock_.kind == TimerClock::Kind::kHost && IsTimerThreadClock(clock_.host)) {
    waiter::TimerThread::Get().Arm(shared_from_this(), clock_.host, next_ns_);
    return;
  }
  // Other clocks: look again when the deadline could first be reached.
  int64_t wait = std::max<int64_t>(next_ns_ - now, 0);
  if (clock_.kind != TimerClock::Kind::kHost) {
    wait = std::max(wait / clock_.Threads(), kMinCpuPollNs);
  }
  waiter::TimerThread::Get().Arm(shared_from_this(), CLOCK_MONOTONIC,
                             AddSat(waiter::ClockNowNs(CLOCK_MONOTONIC), wait));
}

void IntervalTimer::Expired() {
  absl::MutexLock l(&mu_);
  if (deleted_ || next_ns_ == 0) return;
  int64_t now = clock_.Now();
  if (now < 0) {
    next_ns_ = 0;  // the process or thread whose clock it was is gone
    return;
  }
  if (now < next_ns_) {
    ArmLocked(now);
    return;
  }
  uint64_t periods = ExpiredPeriods(next_ns_, interval_ns_, now);
  if (interval_ns_ > 0) {
    next_ns_ = AddSat(next_ns_, static_cast<int64_t>(periods) * interval_ns_);
  } else {
    next_ns_ = 0;
  }
  SendLocked(periods);
  if (next_ns_ != 0) ArmLocked(now);
}

void IntervalTimer::SendLocked(uint64_t periods) {
  if (target_.notify == TimerTarget::Notify::kNone) return;
  if (target_.posix && signal_pending_) {
    overrun_ += periods;
    return;
  }
  siginfo_t info{};
  info.si_signo = target_.signo;
  info.si_code = target_.code;
  std::shared_ptr<SignalSource> source;
  if (target_.posix) {
    overrun_ += periods - 1;
    info.si_timerid = target_.timerid;
    info.si_value.sival_ptr = reinterpret_cast<void*>(target_.value);
    source = shared_from_this();
  }
  bool queued = false;
  if (target_.notify == TimerTarget::Notify::kThread) {
    if (std::shared_ptr<Task> t = target_.task.lock()) {
      queued = t->SendSignalInfo(info, /*group_directed=*/false,
                                 std::move(source));
    }
  } else if (std::shared_ptr<ThreadGroup> g = target_.group.lock()) {
    queued = g->kernel().SignalGroupInfo(*g, info, std::move(source));
  }
  if (target_.posix && queued) {
    signal_pending_ = true;
    queued_seq_ = seq_;
  }
}

bool IntervalTimer::Dequeued(siginfo_t* info) {
  absl::MutexLock l(&mu_);
  if (deleted_ || queued_seq_ != seq_) return false;
  signal_pending_ = false;
  overrun_last_ = static_cast<int>(
      std::min<uint64_t>(overrun_, static_cast<uint64_t>(INT_MAX)));
  overrun_ = 0;
  info->si_overrun = overrun_last_;
  return true;
}

// ---------------------------------------------------------------------------
// ProcessTimers

int64_t ProcessTimers::SetITimer(Task& t, int which, const itimerval& next,
                                 itimerval* old) {
  if (which < ITIMER_REAL || which > ITIMER_PROF) return -EINVAL;
  auto valid = [](const timeval& tv) {
    return tv.tv_sec >= 0 && tv.tv_usec >= 0 && tv.tv_usec < 1000000;
  };
  if (!valid(next.it_value) || !valid(next.it_interval)) return -EINVAL;
  std::shared_ptr<IntervalTimer> timer;
  {
    absl::MutexLock l(&mu_);
    if (itimers_[which] == nullptr) {
      TimerClock clock;
      TimerTarget target;
      target.group = t.group_ptr();
      target.code = SI_KERNEL;
      if (which == ITIMER_REAL) {
        clock.kind = TimerClock::Kind::kHost;
        clock.host = CLOCK_MONOTONIC;
        target.signo = SIGALRM;
      } else {
        clock.kind = TimerClock::Kind::kProcessCpu;
        clock.group = t.group_ptr();
        clock.which = which == ITIMER_VIRTUAL ? CpuWhich::kVirt : CpuWhich::kProf;
        target.signo = which == ITIMER_VIRTUAL ? SIGVTALRM : SIGPROF;
      }
      itimers_[which] = std::make_shared<IntervalTimer>(std::move(clock),
                                                        std::move(target));
    }
    timer = itimers_[which];
  }
  int64_t value = TimevalNs(next.it_value);
  // Linux's set_cpu_itimer adds a tick so that the timer never fires
  // early; getitimer shows it.
  if (which != ITIMER_REAL && value > 0) value += kTickNs;
  int64_t old_value = 0, old_interval = 0;
  timer->Set(value, TimevalNs(next.it_interval), false, &old_value,
             &old_interval);
  if (old != nullptr) {
    old->it_value = NsTimeval(old_value);
    // A pending timer never reads as disarmed (Linux rounds up to 1 us).
    if (old_value > 0 && old->it_value.tv_sec == 0 &&
        old->it_value.tv_usec == 0) {
      old->it_value.tv_usec = 1;
    }
    old->it_interval = NsTimeval(old_interval);
  }
  return 0;
}

int64_t ProcessTimers::GetITimer(int which, itimerval* cur) {
  if (which < ITIMER_REAL || which > ITIMER_PROF) return -EINVAL;
  std::shared_ptr<IntervalTimer> timer;
  {
    absl::MutexLock l(&mu_);
    timer = itimers_[which];
  }
  *cur = itimerval{};
  if (timer == nullptr) return 0;
  int64_t value = 0, interval = 0;
  timer->Get(&value, &interval);
  cur->it_value = NsTimeval(value);
  if (value > 0 && cur->it_value.tv_sec == 0 && cur->it_value.tv_usec == 0) {
    cur->it_value.tv_usec = 1;
  }
  cur->it_interval = NsTimeval(interval);
  return 0;
}

int64_t ProcessTimers::Create(Task& t, clockid_t clock_id, const KSigEvent* sev,
                              int* id) {
  switch (clock_id) {
    case CLOCK_MONOTONIC_RAW: case CLOCK_REALTIME_COARSE:
    case CLOCK_MONOTONIC_COARSE:
      return -EOPNOTSUPP;
    case CLOCK_REALTIME_ALARM: case CLOCK_BOOTTIME_ALARM:
      return -EPERM;
    default:
      break;
  }
  TimerClock clock;
  int64_t r = ResolveClock(t, clock_id, &clock);
  if (r < 0) return r;

  TimerTarget target;
  target.posix = true;
  target.code = SI_TIMER;
  target.group = t.group_ptr();
  KSigEvent def;
  def.signo = SIGALRM;
  def.notify = kSigevSignal;
  if (sev == nullptr) sev = &def;
  // Linux's good_sigevent.
  switch (sev->notify) {
    case kSigevSignal | kSigevThreadId: {
      std::shared_ptr<Task> task = t.kernel().FindTask(sev->tid);
      if (task == nullptr || &task->group() != &t.group()) return -EINVAL;
      target.task = task;
      target.notify = TimerTarget::Notify::kThread;
      break;
    }
    case kSigevSignal:
    case kSigevThread:
      target.notify = TimerTarget::Notify::kProcess;
      break;
    case kSigevNone:
      target.notify = TimerTarget::Notify::kNone;
      break;
    default:
      return -EINVAL;
  }
  if (target.notify != TimerTarget::Notify::kNone &&
      (sev->signo <= 0 || sev->signo > kNumSignals)) {
    return -EINVAL;
  }
  target.signo = sev->signo;

  absl::MutexLock l(&mu_);
  // Ids as Linux hands them out: counting up from 0, skipping ids in use,
  // wrapping at INT_MAX.
  int tid = next_id_;
  while (posix_.count(tid) != 0) tid = tid == INT_MAX ? 0 : tid + 1;
  next_id_ = tid == INT_MAX ? 0 : tid + 1;
  target.timerid = tid;
  target.value = sev == &def ? static_cast<uint64_t>(tid) : sev->value;
  posix_[tid] =
      std::make_shared<IntervalTimer>(std::move(clock), std::move(target));
  *id = tid;
  return 0;
}

std::shared_ptr<IntervalTimer> ProcessTimers::Find(int id) {
  absl::MutexLock l(&mu_);
  auto it = posix_.find(id);
  return it == posix_.end() ? nullptr : it->second;
}

int64_t ProcessTimers::SetTime(int id, int flags, const itimerspec& value,
                               itimerspec* old) {
  std::shared_ptr<IntervalTimer> timer = Find(id);
  if (timer == nullptr) return -EINVAL;
  auto valid = [](const timespec& ts) {
    return ts.tv_sec >= 0 && ts.tv_nsec >= 0 && ts.tv_nsec < kNsPerSec;
  };
  if (!valid(value.it_value) || !valid(value.it_interval)) return -EINVAL;
  int64_t old_value = 0, old_interval = 0;
  timer->Set(TimespecNs(value.it_value), TimespecNs(value.it_interval),
             (flags & TIMER_ABSTIME) != 0, &old_value, &old_interval);
  if (old != nullptr) {
    old->it_value = NsTimespec(old_value);
    old->it_interval = NsTimespec(old_interval);
  }
  return 0;
}

int64_t ProcessTimers::GetTime(int id, itimerspec* cur) {
  std::shared_ptr<IntervalTimer> timer = Find(id);
  if (timer == nullptr) return -EINVAL;
  int64_t value = 0, interval = 0;
  timer->Get(&value, &interval);
  cur->it_value = NsTimespec(value);
  cur->it_interval = NsTimespec(interval);
  return 0;
}

int64_t ProcessTimers::GetOverrun(int id) {
  std::shared_ptr<IntervalTimer> timer = Find(id);
  if (timer == nullptr) return -EINVAL;
  return timer->Overrun();
}

int64_t ProcessTimers::Delete(int id) {
  std::shared_ptr<IntervalTimer> timer;
  {
    absl::MutexLock l(&mu_);
    auto it = posix_.find(id);
    if (it == posix_.end()) return -EINVAL;
    timer = std::move(it->second);
    posix_.erase(it);
  }
  timer->Delete();
  return 0;
}

void ProcessTimers::DeletePosixTimers() {
  std::map<int, std::shared_ptr<IntervalTimer>> gone;
  {
    absl::MutexLock l(&mu_);
    gone.swap(posix_);
  }
  for (auto& [id, timer] : gone) timer->Delete();
}

void ProcessTimers::DeleteAll() {
  DeletePosixTimers();
  std::shared_ptr<IntervalTimer> gone[3];
  {
    absl::MutexLock l(&mu_);
    for (int i = 0; i < 3; i++) gone[i] = std::move(itimers_[i]);
  }
  for (auto& timer : gone) {
    if (timer != nullptr) timer->Delete();
  }
}

}  // namespace sandboxd::kernel
