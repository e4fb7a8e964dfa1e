// Thread groups: what the tasks of one process share (pid, signal
// dispositions, limits, fd table, mm, job-control state, exit status). The
// tasks are in task.h, the kernel that owns both in kernel.h.
//
// Lock order: Kernel::mu_ > ThreadGroup::mu_ > Task::mu_ (kernel.h).
#ifndef SANDBOXD_SENTRY_KERNEL_THREAD_GROUP_H_
#define SANDBOXD_SENTRY_KERNEL_THREAD_GROUP_H_

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/file.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/cputime.h"
#include "sentry/kernel/signal.h"
#include "sentry/kernel/timers.h"
#include "sentry/loader/exec_image.h"
#include "sentry/mm/mm.h"
#include "sentry/waiter/timer_thread.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::fs::tty {
class Terminal;
}  // namespace sandboxd::fs::tty
namespace sandboxd::state {
struct KernelState;  // checkpoint save/load (sentry/state/kernel_state.h)
}  // namespace sandboxd::state

namespace sandboxd::kernel {

class Kernel;
class Task;

// The sandbox's CLOCK_MONOTONIC in nanoseconds (waiter::ClockNowNs: it
// goes on from the saved value after a restore): start times and the
// sandbox's uptime (/proc/uptime, /proc/[pid]/stat) are measured on it.
inline int64_t MonotonicNanos() {
  return waiter::ClockNowNs(CLOCK_MONOTONIC);
}

// How a process ended, in wait(2) status form.
struct ExitStatus {
  int code = 0;    // exit code when signo == 0
  int signo = 0;   // killing signal
  bool core = false;
  int WaitStatus() const {
    return signo != 0 ? (signo | (core ? 0x80 : 0)) : ((code & 0xff) << 8);
  }
  // The shell's convention: the code, or 128 + the signal.
  int ShellStatus() const { return signo != 0 ? 128 + signo : (code & 0xff); }
};

class ThreadGroup {
 public:
  ThreadGroup(Kernel* k, pid_t tgid, std::shared_ptr<mm::MM> mm,
              std::shared_ptr<fs::FdTable> fds,
              std::shared_ptr<fs::FsContext> fs);

  pid_t tgid() const { return tgid_; }
  Kernel& kernel() { return *kernel_; }
  mm::MM& mm() { return *mm_; }
  const std::shared_ptr<mm::MM>& mm_ptr() const { return mm_; }
  fs::FdTable& fds() { return *fds_; }
  const std::shared_ptr<fs::FdTable>& fds_ptr() const { return fds_; }
  fs::FsContext& fs() { return *fs_; }
  const std::shared_ptr<fs::FsContext>& fs_ptr() const { return fs_; }
  // execve: the new image. Preconditions: the caller is the group's only
  // task.
  // Also hands the group's RLIMIT_AS and RLIMIT_DATA to the new mm.
  void set_mm(std::shared_ptr<mm::MM> mm);
  void set_fds(std::shared_ptr<fs::FdTable> fds) { fds_ = std::move(fds); }

  // The process tree; guarded by Kernel::mu_ (the tasklist lock).
  ThreadGroup* parent = nullptr;  // null for init
  std::vector<std::shared_ptr<ThreadGroup>> children;
  pid_t pgid = 0;
  pid_t sid = 0;
  bool zombie = false;       // exited, not yet reaped
  bool reaped = false;
  int exit_signal = 17;      // SIGCHLD: what the parent gets at exit
  bool did_exec = false;     // setpgid by the parent fails after exec
  // The program image: comm, exe, argv/envp ranges, auxv. Set by exec,
  // copied by fork; comm also by PR_SET_NAME and /proc/[pid]/comm.
  loader::ExecImage image;
  // The controlling terminal (ctty.cc); inherited by fork, gone at setsid.
  std::shared_ptr<fs::tty::Terminal> ctty;
  // /proc/[pid]/oom_score_adj: kept and inherited, used by nothing yet.
  std::atomic<int> oom_score_adj{0};
  // prctl(2) state (sys_prctl.cc). Under Kernel::mu_: PR_SET_PDEATHSIG's
  // signal (sent when the parent exits; cleared by fork) and
  // PR_SET_CHILD_SUBREAPER (orphans below go here rather than to init).
  int pdeath_signal = 0;
  bool child_subreaper = false;
  // Inherited by fork: PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS (sticky).
  // (PR_SET_KEEPCAPS and the bounding set are per thread, in its
  // credentials: Task::creds.)
  std::atomic<int> dumpable{1};
  std::atomic<bool> no_new_privs{false};
  // When the process was created (MonotonicNanos). Set again only by a
  // checkpoint load, before the group is shared.
  int64_t start_ns = MonotonicNanos();
  // Parents wait here for children's state changes (wait4, waitid).
  waiter::WaitQueue child_events;
  // Notified (POLLIN) whenever a signal becomes pending for a task of the
  // group: what signalfd readers wait on. Shared-owned so that epoll can
  // hold it (waiter/event_source.h).
  const std::shared_ptr<waiter::WaitQueue> signal_queue =
      std::make_shared<waiter::WaitQueue>();

  // Job control (job_control.cc). A stop signal's default action asks every
  // task to stop at its next chance; the group is stopped once all have.
  bool stop_requested() const {
    return stop_requested_.load(std::memory_order_acquire);
  }
  // Every task has stopped (what /proc shows as state T).
  bool stopped();
  // Starts a group stop for `signo` (no-op while one is in progress).
  void BeginStop(int signo);
  // SIGCONT, at sending time: ends a stop (finished or in progress) and
  // records what the parent must learn.
  void Continue();
  // Removes `set` from the pending signals of every task (a stop signal
  // discards pending SIGCONT and vice versa).
  void DiscardPending(SigSet set);
  // wait4/waitid: a stop not yet reported (its signal in *signo) and a
  // continue not yet reported. `consume` clears the report (not WNOWAIT).
  bool TakeStopReport(bool consume, int* signo);
  bool TakeContinueReport(bool consume);
  // The CLD_STOPPED/CLD_CONTINUED notification owed to the parent (0 if
  // none), with its si_status; taken by the task that sends it.
  int TakeParentNotification(int* status);

  // Releases what a zombie no longer needs (files, timers) and hands back
  // its address space, for the caller to drop outside the tasklist lock:
  // tearing down the platform's side of it (a stub process, killed and
  // reaped) takes a while, and nobody waiting for the exit needs it done.
  std::shared_ptr<mm::MM> ReleaseResources();
  // Copies dispositions and limits from `parent` (fork).
  void InheritFrom(ThreadGroup& parent);
  // execve: handlers go back to SIG_DFL, ignored signals stay ignored.
  void ResetHandlersForExec();

  // Signal dispositions (shared by the group's tasks: CLONE_SIGHAND).
  SigAction GetAction(int signo);
  void SetAction(int signo, const SigAction& a);

  rlimit GetLimit(int resource);
  void SetLimit(int resource, const rlimit& r);

  // Ends the whole group: every task exits at its next chance.
  // The first call's status wins.
  void Exit(ExitStatus status);
  bool exiting() const { return exiting_.load(std::memory_order_acquire); }
  ExitStatus exit_status();

  void set_leader_exit_code(int code) { leader_exit_code_.store(code); }
  int leader_exit_code() const { return leader_exit_code_.load(); }

  void AddTask(Task* t);
  // The number of its tasks (added and not yet removed).
  size_t NumTasks();
  // Returns true when `t` was the last task. Its CPU time stays counted
  // in the group's.
  bool RemoveTask(Task* t);
  // The group's live tasks, each held by a reference: a task that exits
  // meanwhile stays valid for the caller (a signal sent to it is lost with
  // it, as on Linux).
  std::vector<std::shared_ptr<Task>> Tasks();
  std::vector<std::shared_ptr<Task>> TasksLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Interval and POSIX timers (timers.h).
  ProcessTimers& timers() { return timers_; }
  // Resource usage (cputime.cc): the group's threads, live and exited.
  Usage SelfUsage();
  // Children reaped by wait, with their own reaped children.
  Usage ChildrenUsage();
  void AddChildUsage(const Usage& u);
  // Records the address space's size for ru_maxrss (exit, exec, getrusage).
  void NoteMaxRss();

 private:
  Kernel* const kernel_;
  const pid_t tgid_;
  std::shared_ptr<mm::MM> mm_;
  std::shared_ptr<fs::FdTable> fds_;
  std::shared_ptr<fs::FsContext> fs_;
  std::atomic<bool> exiting_{false};
  std::atomic<int> leader_exit_code_{0};
  std::atomic<bool> stop_requested_{false};

  // A task of the group reached its stop point; true if that completed the
  // group stop. Then Task::Resumed when it leaves it.
  bool TaskStopped();
  void TaskResumed();
  // Preconditions: mu_ held. Marks the group stopped once every task is.
  void MaybeCompleteStopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetParentNotificationLocked(int why, int status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::atomic<bool> notification_due_{false};

  // Kernel::mu_ (Kernel's annotation) and an expiring timer's lock come
  // first.
  absl::Mutex mu_ ABSL_ACQUIRED_AFTER(IntervalTimer::mu_);
  std::array<SigAction, kNumSignals> actions_ ABSL_GUARDED_BY(mu_);
  std::array<rlimit, RLIM_NLIMITS> limits_ ABSL_GUARDED_BY(mu_);
  // RLIMIT_AS and RLIMIT_DATA to mm_ (mm::MM::SetRlimits).
  void ApplyMemoryLimitsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ExitStatus status_ ABSL_GUARDED_BY(mu_);
  std::vector<Task*> tasks_ ABSL_GUARDED_BY(mu_);
  Usage dead_usage_ ABSL_GUARDED_BY(mu_);
  Usage children_usage_ ABSL_GUARDED_BY(mu_);
  uint64_t maxrss_kb_ ABSL_GUARDED_BY(mu_) = 0;
  ProcessTimers timers_;
  int stop_signo_ ABSL_GUARDED_BY(mu_) = 0;
  int stopped_tasks_ ABSL_GUARDED_BY(mu_) = 0;  // tasks at their stop point
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;   // every task is
  bool stop_report_ ABSL_GUARDED_BY(mu_) = false;      // for WSTOPPED
  bool continue_report_ ABSL_GUARDED_BY(mu_) = false;  // for WCONTINUED
  int parent_notification_ ABSL_GUARDED_BY(mu_) = 0;   // CLD_* or 0
  int parent_notification_status_ ABSL_GUARDED_BY(mu_) = 0;
  friend class Task;
  friend class Kernel;  // names mu_ in its lock order annotation
  friend struct state::KernelState;
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_THREAD_GROUP_H_
