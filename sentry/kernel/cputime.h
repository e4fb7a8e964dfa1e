// CPU time and resource usage of tasks and processes.
//
// A task's time is split as gVisor splits it: from the entry of
// Context::Switch to its return the application ran (user time); the rest of
// the task's loop is the Sentry working for it (system time), except the
// time it spends blocked in Task::Block, which is nobody's CPU time. Each
// stretch counts what the host's CPU clock of the thread that ran it says
// (CLOCK_THREAD_CPUTIME_ID: the task's own thread for the Sentry's part
// and on kvm, the stub worker's for systrap, Event::app_cpu_ns), never more
// than CLOCK_MONOTONIC's length of the stretch: so time the host did not
// run it (throttled by a cgroup's CPU quota, or another thread had the CPU)
// counts for nothing, as on Linux. Without a CPU clock reading (-1) a
// stretch counts its length.
#ifndef SANDBOXD_SENTRY_KERNEL_CPUTIME_H_
#define SANDBOXD_SENTRY_KERNEL_CPUTIME_H_

#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstdint>

namespace sandboxd::state {
struct KernelState;
}  // namespace sandboxd::state

namespace sandboxd::kernel {

inline constexpr int64_t kNsPerSec = 1000000000;

// Resource usage as getrusage(2) reports it.
struct Usage {
  int64_t user_ns = 0;
  int64_t sys_ns = 0;
  uint64_t minflt = 0;
  uint64_t majflt = 0;
  uint64_t nvcsw = 0;
  uint64_t nivcsw = 0;
  uint64_t maxrss_kb = 0;  // a maximum, not a sum

  int64_t total_ns() const { return user_ns + sys_ns; }
  // Sums times and counts; keeps the larger maxrss (Linux's rules for
  // adding up threads and reaped children).
  Usage& operator+=(const Usage& o);
  struct rusage ToRusage() const;
};

// Nanoseconds of CLOCK_MONOTONIC.
int64_t MonotonicNowNs();
// Nanoseconds of the calling thread's CPU clock (CLOCK_THREAD_CPUTIME_ID).
int64_t ThreadCpuNowNs();

// One task's CPU time. The state changes are made by the task's own
// thread only (single writer); Read may be called from any thread and sees
// a consistent snapshot, including the time of the current stretch.
class TaskCpuTime {
 public:
  // `now` is CLOCK_MONOTONIC; `cpu` the calling thread's CPU clock
  // (ThreadCpuNowNs), -1: not read.
  // The task's thread starts, in the Sentry.
  void Start(int64_t now, int64_t cpu = -1) { Set(kSentry, now, cpu); }
  // Around Context::Switch. `app_cpu`: Event::app_cpu_ns (-1: the
  // application ran on this thread, whose clock `cpu` measured it).
  void EnterApp(int64_t now, int64_t cpu = -1) { Set(kApp, now, cpu); }
  void LeaveApp(int64_t now, int64_t cpu = -1, int64_t app_cpu = -1) {
    Set(kSentry, now, cpu, app_cpu);
  }
  // Around a blocking wait of the task.
  void StartBlocking(int64_t now, int64_t cpu = -1) { Set(kIdle, now, cpu); }
  void StopBlocking(int64_t now, int64_t cpu = -1) { Set(kSentry, now, cpu); }
  // The task's thread leaves its loop.
  void Stop(int64_t now, int64_t cpu = -1) { Set(kIdle, now, cpu); }

  void CountMinorFault() { minflt_.fetch_add(1, std::memory_order_relaxed); }
  void CountVoluntarySwitch() {
    nvcsw_.fetch_add(1, std::memory_order_relaxed);
  }

  // Any thread.
  Usage Read(int64_t now) const;

 private:
  enum State : int { kIdle, kSentry, kApp };
  // Ends the current stretch (adding it to user or system time, as the
  // state was) and starts `next` at `now`, under the sequence count
  // readers check.
  void Set(State next, int64_t now, int64_t cpu, int64_t app_cpu = -1);
  // Raises *floor to v and returns the larger: a clock read from another
  // thread counts the current stretch by its length, which its end may
  // then count for less; later reads never go back.
  static int64_t Floor(std::atomic<int64_t>* floor, int64_t v);

  std::atomic<uint32_t> seq_{0};
  std::atomic<int> state_{kIdle};
  std::atomic<int64_t> user_ns_{0};
  std::atomic<int64_t> sys_ns_{0};
  std::atomic<int64_t> since_atomic_{0};
  // The writer's copies of state_ and since_atomic_.
  State state_copy_ = kIdle;
  int64_t since_ = 0;
  int64_t cpu_since_ = -1;  // the thread's CPU clock at since_ (-1: unread)
  mutable std::atomic<int64_t> user_floor_{0};
  mutable std::atomic<int64_t> sys_floor_{0};
  std::atomic<uint64_t> minflt_{0};
  std::atomic<uint64_t> nvcsw_{0};
  friend struct state::KernelState;
};

// Which part of a CPU clock counts (Linux's CPUCLOCK_PROF, _VIRT, _SCHED).
enum class CpuWhich { kProf = 0, kVirt = 1, kSched = 2 };

inline int64_t CpuClockValue(const Usage& u, CpuWhich which) {
  return which == CpuWhich::kVirt ? u.user_ns : u.total_ns();
}

// The clock ids of clock_getcpuclockid(3) and pthread_getcpuclockid(3):
// ((~pid) << 3) | per-thread bit (4) | which.
struct CpuClockId {
  pid_t pid = 0;  // 0: the caller
  bool thread = false;
  CpuWhich which = CpuWhich::kSched;
};
// False for ids that are not CPU clocks or that Linux rejects (which == 3).
// CLOCK_PROCESS_CPUTIME_ID and CLOCK_THREAD_CPUTIME_ID decode as the
// caller's own clocks.
bool DecodeCpuClock(clockid_t id, CpuClockId* out);

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_CPUTIME_H_
