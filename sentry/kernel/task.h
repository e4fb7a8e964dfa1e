// Tasks, thread groups and the kernel that owns them.
//
// Every application thread is a Task run by one host thread of the Sentry:
// its loop switches into the application through the platform Context and
// handles what comes back (syscall, fault, exception, interrupt). Tasks of
// one process share a ThreadGroup (pid, signal handlers, fd table, mm,
// limits). The Kernel owns the pid namespace (the sandbox's init is pid 1),
// the futexes and the syscall table.
//
// Lock order: Kernel::mu_ > ThreadGroup::mu_ > Task::mu_ ; Futexes::mu_ >
// Task::mu_. mm and fs locks are taken with none of these held, except
// that Futexes::mu_ may be held around mm::MM::AtomicWord.
#ifndef SANDBOXD_SENTRY_KERNEL_TASK_H_
#define SANDBOXD_SENTRY_KERNEL_TASK_H_

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "platforms/platform.h"
#include "sentry/fs/file.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/cputime.h"
#include "sentry/kernel/futex.h"
#include "sentry/kernel/signal.h"
#include "sentry/kernel/timers.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"

namespace sandboxd::vdso {
class Vdso;
}  // namespace sandboxd::vdso
namespace sandboxd::fs::tty {
class Terminal;
}  // namespace sandboxd::fs::tty
namespace sandboxd::state {
struct KernelState;  // checkpoint save/load (sentry/state/kernel_state.h)
}  // namespace sandboxd::state

namespace sandboxd::kernel {

class Kernel;
class Task;
class ThreadGroup;

// CLOCK_MONOTONIC in nanoseconds: start times and the sandbox's uptime
// (/proc/uptime, /proc/[pid]/stat) are measured on it.
inline int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Arguments of one syscall, as the task's registers hold them.
struct SyscallArgs {
  uint64_t nr;
  uint64_t a[6];
};

// Returned by a handler whose task must not get a return value in rax
// (exit, rt_sigreturn which restores all registers).
inline constexpr int64_t kNoReturnValue = INT64_MIN;

// The syscall table lives in sentry/syscalls, which depends on the kernel;
// the kernel calls it through this interface.
class SyscallTable {
 public:
  virtual ~SyscallTable() = default;
  virtual int64_t Invoke(Task& t, const SyscallArgs& args) = 0;
};

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
  void set_mm(std::shared_ptr<mm::MM> mm) { mm_ = std::move(mm); }
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
  std::string comm;          // the program's name (16 bytes, as Linux)
  std::string exe;           // the executable's path in the sandbox
  // The controlling terminal (ctty.cc); inherited by fork, gone at setsid.
  std::shared_ptr<fs::tty::Terminal> ctty;
  // Where the initial argv and envp strings are in the address space.
  uint64_t arg_start = 0, arg_end = 0, env_start = 0, env_end = 0;
  // The auxiliary vector the image started with (/proc/[pid]/auxv).
  std::vector<uint64_t> auxv;
  // /proc/[pid]/oom_score_adj: kept and inherited, used by nothing yet.
  std::atomic<int> oom_score_adj{0};
  // prctl(2) state (sys_prctl.cc). Under Kernel::mu_: PR_SET_PDEATHSIG's
  // signal (sent when the parent exits; cleared by fork) and
  // PR_SET_CHILD_SUBREAPER (orphans below go here rather than to init).
  int pdeath_signal = 0;
  bool child_subreaper = false;
  // Inherited by fork: PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS (sticky),
  // PR_SET_KEEPCAPS, the capability bounding set (PR_CAPBSET_DROP; the
  // sandbox's root starts with every capability, as in a user namespace).
  std::atomic<int> dumpable{1};
  std::atomic<bool> no_new_privs{false};
  std::atomic<bool> keepcaps{false};
  std::atomic<uint64_t> cap_bset{(1ull << 41) - 1};  // CAP_LAST_CAP = 40
  // When the process was created (MonotonicNanos). Set again only by a
  // checkpoint load, before the group is shared.
  int64_t start_ns = MonotonicNanos();
  // Parents wait here for children's state changes (wait4, waitid).
  fs::WaitQueue child_events;
  // Notified (POLLIN) whenever a signal becomes pending for a task of the
  // group: what signalfd readers wait on. Shared-owned so that epoll can
  // hold it (fs/event_source.h).
  const std::shared_ptr<fs::WaitQueue> signal_queue =
      std::make_shared<fs::WaitQueue>();

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

// Linux's restart_block: how restart_syscall(2) resumes an interrupted
// sleep when the interruption ran no handler (a stop and continue, an
// ignored signal), so that the sleep keeps its deadline instead of
// starting over or failing with EINTR.
struct RestartBlock {
  enum class Kind { kNone, kSleep };
  Kind kind = Kind::kNone;
  clockid_t clock = CLOCK_MONOTONIC;  // as the program named it
  int64_t deadline_ns = 0;            // absolute, on `clock`
  uint64_t rem_addr = 0;              // where the time left goes (0: nowhere)
};

class Task : public fs::Blocker, public std::enable_shared_from_this<Task> {
 public:
  Task(Kernel* k, pid_t tid, std::shared_ptr<ThreadGroup> tg,
       std::unique_ptr<platform::Context> ctx);
  ~Task() override;

  // The task whose host thread is calling (null on other threads).
  static Task* Current();

  pid_t tid() const { return tid_; }
  // A thread's own name (prctl PR_SET_NAME by a thread other than the
  // leader, whose name is the group's comm); empty: the group's comm.
  // Guarded by Kernel::mu_.
  std::string thread_comm;
  // set_mempolicy(2)'s policy for this thread: mode 0 (MPOL_DEFAULT) with
  // no nodes unless set. The sandbox has one node, node 0. `nodes` is the
  // mask as the program gave it (kept for MPOL_F_STATIC_NODES and
  // MPOL_F_RELATIVE_NODES, which report it back). Touched by the thread
  // itself, and by clone and the state saver while it is in a syscall.
  struct MemPolicy {
    int mode = 0;
    int flags = 0;
    uint64_t nodes = 0;
  };
  MemPolicy mempolicy;
  ThreadGroup& group() { return *tg_; }
  const std::shared_ptr<ThreadGroup>& group_ptr() const { return tg_; }
  Kernel& kernel() { return *kernel_; }
  mm::MM& mm() { return tg_->mm(); }
  platform::CpuState& cpu() { return cpu_; }
  // Makes cpu().fp current (the platform may keep the live FPU state in a
  // vCPU, CpuState::fp_live): before reading or copying it.
  void SyncFp() { ctx_->SyncFp(cpu_); }

  // Starts the task's host thread.
  void Start();
  // Joins the host thread (after it exited).
  void Join();

  // Blocks the task until Wake(), the deadline, or an interrupt.
  enum class WakeReason { kWoken, kTimeout, kInterrupted };
  WakeReason Block(absl::Time deadline);
  void Wake();
  // Makes the task leave whatever it is doing (blocking call or
  // application code) and look at its state: used for group exit.
  void Interrupt();
  bool interrupted() const { return interrupt_.load(std::memory_order_acquire); }
  // Whether the task is asleep in Block or a host poll (state S in /proc)
  // rather than running or runnable (R).
  bool sleeping() const { return sleeping_.load(std::memory_order_relaxed); }
  // When the task was created (MonotonicNanos).
  int64_t start_ns() const { return start_ns_; }
  fs::IoContext io() {
    return fs::IoContext{interrupt_fd_.get(), this};
  }
  // fs::Blocker: waits on a file's queue until ready() (see waiter.h).
  int Wait(fs::WaitQueue& q, fs::EventMask mask,
           const std::function<bool()>& ready,
           absl::Time deadline = absl::InfiniteFuture()) override;
  // fs::Blocker: a host-fd wait is sleeping (S in /proc), not CPU time.
  // Called by the task's own thread only.
  void HostWaitBegin() override {
    sleeping_.store(true, std::memory_order_relaxed);
    cputime_.StartBlocking(MonotonicNowNs());
    cputime_.CountVoluntarySwitch();
  }
  void HostWaitEnd() override {
    cputime_.StopBlocking(MonotonicNowNs());
    sleeping_.store(false, std::memory_order_relaxed);
  }

  // Ends this thread at the next return to the task loop.
  void ExitThread(int code);
  // execve by another thread of the group: this one must go.
  void KillForExec() {
    killed_.store(true);
    Poke();
  }

  // Signal state of this thread.
  SigSet signal_mask() const { return mask_.load(std::memory_order_acquire); }
  void set_signal_mask(SigSet m) {
    mask_.store(m & ~kUnblockable, std::memory_order_release);
  }
  SignalStack& signal_stack() { return altstack_; }
  // rt_sigsuspend, ppoll, pselect, epoll_pwait: run with `temporary` as
  // the mask until a signal is delivered; the frame then saves `saved`, so
  // the handler's return restores it (Linux's set_restore_sigmask).
  void SetTemporaryMask(SigSet temporary, SigSet saved) {
    saved_mask_ = saved;
    restore_mask_ = true;
    set_signal_mask(temporary);
  }
  // Undoes SetTemporaryMask when no handler ran.
  void RestoreTemporaryMask() {
    if (restore_mask_) {
      restore_mask_ = false;
      set_signal_mask(saved_mask_);
    }
  }

  // rt_sigreturn: restores the state saved by DeliverToHandler from the
  // frame at the user stack. Returns kNoReturnValue, or -EFAULT... by
  // killing the task with SIGSEGV when the frame is unreadable.
  int64_t SigReturn();

  // Signals pending for this thread (tgkill/tkill and process-directed
  // signals routed here).
  SigSet pending_signals() const { return pending_.load(); }
  // Removes and returns the lowest pending signal in `set` (0 if none),
  // with its siginfo in *info if not null.
  int TakePendingSignal(SigSet set, siginfo_t* info = nullptr);

  // Delivers a signal caused by this task's own execution (fault, abort):
  // runs the handler if one is installed and the signal is not blocked,
  // else the default action.
  void ForceSignal(int signo, int code, uint64_t addr);
  // Sends a signal to this task from kill/tgkill.
  void SendSignal(int signo, pid_t sender);
  // Queues `info` (its si_signo is the signal). `group_directed`: a
  // process-directed signal routed to this task, which any task of the
  // group may take with a signalfd read (Linux's shared pending queue).
  // Applies SIGCONT's and the stop signals' effects at sending time.
  // Returns false when it was not queued: ignored, or that signal is
  // already pending (one per signal number; a POSIX timer then counts an
  // overrun). `source`, if any, is told when the signal is taken off the
  // queue (signal.h).
  bool SendSignalInfo(const siginfo_t& info, bool group_directed = false,
                      std::shared_ptr<SignalSource> source = nullptr);
  // Linux's dequeue_signal, for signalfd and sigtimedwait: removes the
  // lowest signal of `set` pending for this task, or else a
  // process-directed one pending on another task of the group; 0 if none.
  int DequeueSignal(SigSet set, siginfo_t* info);
  // Whether DequeueSignal(set) would find a signal.
  bool CanDequeueSignal(SigSet set);
  // rt_sigpending's view: this thread's pending signals and the
  // process-directed ones pending on any thread of the group.
  SigSet PendingForThreadAndGroup();

  // CPU time of this thread (cputime.h).
  TaskCpuTime& cputime() { return cputime_; }

  // vfork: the parent sleeps until the child execs or exits.
  // Called by the child (this task) when it execs or exits.
  void VforkDone();
  // Called by the parent: sleeps (only an exit of the parent's group ends
  // it early) until this child calls VforkDone.
  void WaitVforkDone(Task& parent);
  void set_vforked(bool v) { vforked_ = v; }

  // execve: replaces the thread's image. Preconditions: the caller is the
  // group's only thread.
  // Must come before the group's mm is replaced: the platform thread bound
  // to the old address space is released while that still exists.
  void ExecImage(const platform::CpuState& cpu) {
    ctx_->Release();
    cpu_ = cpu;
    altstack_ = SignalStack{};
  }

  void set_clear_child_tid(uint64_t addr) { clear_child_tid_ = addr; }
  void set_robust_list(uint64_t head, uint64_t len) {
    robust_list_ = head;
    robust_len_ = len;
  }
  uint64_t robust_list() const { return robust_list_; }
  // Set by a sleep that is interrupted (sys_time.cc), read by
  // restart_syscall(2). Only the task's own thread touches it.
  RestartBlock& restart_block() { return restart_block_; }

 private:
  void Run();
  // The wait of Block.
  WakeReason WaitUntilReady(absl::Time deadline);
  void HandleSyscall();
  // Wakes Block and host-fd waits and makes a running Switch return, so
  // that the task looks at its state (exit, pending signals).
  void Poke();
  void DeliverPendingSignals();
  // Delivers `signo` to a handler: builds the frame on the user stack.
  // Returns false if the frame cannot be written (the task then dies).
  bool DeliverToHandler(int signo, int code, uint64_t addr, pid_t sender,
                        const SigAction& act,
                        const siginfo_t* info = nullptr);
  // Job control at the task's stop point (job_control.cc): sends what the
  // parent is owed, and parks the task while its group is stopped. True if
  // it parked (signals must be looked at again).
  bool DoJobControl();
  void NotifyParentIfDue();
  // Just before the task goes back to application code: a syscall that a
  // stop (or any signal that ran no handler) interrupted starts again, as
  // Linux's -ERESTARTSYS/-ERESTARTNOHAND do; a leftover Poke (a stop that
  // was cancelled, a signal taken by signalfd) is drained so that host
  // waits do not keep failing with -EINTR.
  void PrepareToResume();
  // Signals of `set` pending on this task that were process-directed.
  SigSet GroupDirectedPending(SigSet set);
  void ApplyDefaultAction(int signo);
  void Cleanup();

  Kernel* const kernel_;
  const pid_t tid_;
  std::shared_ptr<ThreadGroup> tg_;
  std::unique_ptr<platform::Context> ctx_;
  platform::CpuState cpu_;
  std::thread thread_;

  std::atomic<SigSet> mask_{0};
  SignalStack altstack_;
  uint64_t clear_child_tid_ = 0;
  uint64_t robust_list_ = 0, robust_len_ = 0;
  bool exit_thread_ = false;
  std::atomic<bool> killed_{false};
  // The task is inside a syscall handler (a checkpoint taken while it
  // blocks there makes it re-execute the syscall after the load).
  std::atomic<bool> in_syscall_{false};
  // The last syscall was interrupted and may be restarted (SA_RESTART).
  bool restart_pending_ = false;
  // The last syscall returned -EINTR and Linux would restart it if no
  // handler runs (PrepareToResume).
  bool restart_if_no_handler_ = false;
  // ... and it restarts as restart_syscall(2), from restart_block_.
  bool restart_with_block_ = false;
  RestartBlock restart_block_;
  bool restore_mask_ = false;
  SigSet saved_mask_ = 0;
  bool vforked_ = false;
  absl::Mutex vfork_mu_;
  bool vfork_done_ ABSL_GUARDED_BY(vfork_mu_) = false;
  int exit_code_ = 0;
  TaskCpuTime cputime_;

  struct PendingInfo {
    bool queued = false;
    bool group_directed = false;
    siginfo_t info{};
    std::shared_ptr<SignalSource> source;  // a POSIX timer
  };
  std::atomic<SigSet> pending_{0};

  // Blocking.
  absl::Mutex mu_ ABSL_ACQUIRED_AFTER(ThreadGroup::mu_, Futexes::mu_);
  absl::CondVar cv_;
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::array<PendingInfo, kNumSignals> pending_info_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> interrupt_{false};
  std::atomic<bool> sleeping_{false};
  int64_t start_ns_ = MonotonicNanos();  // a checkpoint load sets it again
  std::atomic<bool> poked_{false};  // interrupt_fd_ may be readable
  UniqueFd interrupt_fd_;  // eventfd, readable once interrupted
  friend class Kernel;
  friend class SignalFrame;
  friend class ThreadGroup;
  friend struct state::KernelState;
};

inline constexpr pid_t kMaxPid = 4194304;
struct KernelOptions {
  std::string hostname = "sandbox";
  // The vDSO that exec maps into each new address space (null: none).
  // Not owned; outlives the Kernel.
  vdso::Vdso* vdso = nullptr;
  // The sandbox's limits as seen from inside (the cgroup that enforces them
  // on the host is the daemon's). 0: none.
  uint64_t max_tasks = 0;     // clone/fork beyond this many tasks: EAGAIN
  int max_cpus = 0;           // sched_getaffinity shows at most this many
  uint64_t memory_limit = 0;  // sysinfo's totalram (bytes)
  // The memory the sandbox sees (its limit, or the host's): what a tmpfs
  // mounted without size= takes half of. 0: such a tmpfs is unlimited.
  uint64_t total_ram = 0;
};

class Kernel {
 public:
  Kernel(std::unique_ptr<mm::MemoryFile> mf,
         std::unique_ptr<platform::Platform> platform, SyscallTable* syscalls,
         KernelOptions opts);
  ~Kernel();

  platform::Platform& platform() { return *platform_; }
  mm::MemoryFile& memory_file() { return *mf_; }
  // The internal tmpfs that memfd_create's files live in (Linux's shm_mnt).
  const std::shared_ptr<fs::TmpFsSuperblock>& memfd_superblock() {
    return memfd_sb_;
  }
  SyscallTable& syscalls() { return *syscalls_; }
  Futexes& futexes() { return futexes_; }
  const KernelOptions& options() const { return opts_; }
  // The sandbox's mount namespace. Set once, before init starts.
  fs::Vfs& vfs() { return *vfs_; }
  void set_vfs(std::shared_ptr<fs::Vfs> vfs) { vfs_ = std::move(vfs); }

  // Creates the init process (pid 1) around a loaded address space; the
  // caller sets its registers with `init_cpu`. Returns the task, not yet
  // started. Called again (sentry serve's Exec), it makes another process
  // without a parent, in a session of its own; see AwaitExit.
  absl::StatusOr<Task*> CreateInit(std::shared_ptr<mm::MM> mm,
                                   std::shared_ptr<fs::FdTable> fds,
                                   std::shared_ptr<fs::FsContext> fs,
                                   const platform::CpuState& cpu);
  // Creates a thread in `parent`'s group (clone with CLONE_THREAD).
  absl::StatusOr<Task*> CreateThread(Task& parent,
                                     const platform::CpuState& cpu);
  // Creates a process: a child of `parent`'s group running `cpu` in `mm`
  // (a fork's copy, or the parent's own with CLONE_VM), with `fds` and
  // `fs` (copies or shared, per the clone flags). Not yet started.
  absl::StatusOr<Task*> CreateProcess(Task& parent, std::shared_ptr<mm::MM> mm,
                                      std::shared_ptr<fs::FdTable> fds,
                                      std::shared_ptr<fs::FsContext> fs,
                                      int exit_signal,
                                      const platform::CpuState& cpu);

  // wait4/waitid. Selects children by pid (>0), process group (pgid > 0
  // with by_pgid), or any (pid == -1). options: WNOHANG, WNOWAIT,
  // WEXITED, WSTOPPED, WCONTINUED (wait4 passes WEXITED). Returns the child's pid and fills
  // *status; 0 with WNOHANG when none has exited; -ECHILD when there is no
  // such child; -EINTR when interrupted.
  struct WaitResult {
    pid_t pid = 0;
    ExitStatus status;
    Usage usage;  // the child's and its reaped children's (wait4's rusage)
    int stop_signo = 0;      // WSTOPPED: stopped by this signal
    bool continued = false;  // WCONTINUED: continued
  };
  int64_t WaitChild(Task& t, pid_t pid, bool by_pgid, int options,
                    WaitResult* out);

  // Process groups and sessions.
  int64_t SetPgid(Task& t, pid_t pid, pid_t pgid);
  int64_t GetPgid(Task& t, pid_t pid);
  int64_t GetSid(Task& t, pid_t pid);
  int64_t SetSid(Task& t);
  pid_t ParentOf(ThreadGroup& g);
  // Sends `signo` to every process of group `pgid` (-ESRCH if none);
  // pgid -1: every process but init and the sender.
  int64_t SignalProcessGroup(Task& sender, pid_t pgid, int signo);
  // Sends a process-directed signal to `g`.
  void SignalGroup(ThreadGroup& g, int signo, pid_t sender);
  // Returns false if it was not queued (Task::SendSignalInfo).
  bool SignalGroupInfo(ThreadGroup& g, const siginfo_t& info,
                       std::shared_ptr<SignalSource> source = nullptr);
  // Job control (job_control.cc). Tells `g`'s parent that `g` stopped or
  // continued (why: CLD_STOPPED, CLD_CONTINUED): SIGCHLD unless the parent
  // ignores it or set SA_NOCLDSTOP, and a wakeup of its waits.
  void NotifyParentJobControl(ThreadGroup& g, int why, int status);
  // Whether `g`'s process group is orphaned (POSIX): no member has a
  // parent in another process group of the same session.
  bool IsPgrpOrphaned(ThreadGroup& g);
  // Controlling terminals and job control (ctty.cc, Linux's tty_jobctrl.c).
  // `t`'s controlling terminal, null if none (or hung up).
  std::shared_ptr<fs::tty::Terminal> ControllingTerminal(Task& t);
  // open(2) without O_NOCTTY of a terminal's program side: a session
  // leader without one acquires it if it controls no session yet.
  void TerminalOpened(Task& t, const std::shared_ptr<fs::tty::Terminal>& tty);
  // Makes `tty` init's controlling terminal (the host terminal at start).
  void SetInitTerminal(const std::shared_ptr<fs::tty::Terminal>& tty);
  int64_t SetControllingTerminal(Task& t,
                                 const std::shared_ptr<fs::tty::Terminal>& tty,
                                 bool steal);                      // TIOCSCTTY
  int64_t DropControllingTerminal(Task& t, fs::tty::Terminal& tty);  // TIOCNOTTY
  int64_t SetForegroundGroup(Task& t, fs::tty::Terminal& tty, pid_t pgid);
  // 0 to go on, -EIO, or -EINTR after sending `signo` to t's group
  // (see fs::tty::JobControl::CheckAccess).
  int CheckTerminalAccess(Task& t, fs::tty::Terminal& tty, int signo,
                          bool ignored_ok);
  // Sends `signo` to process group `pgid` from the kernel (no sender).
  void SignalPgrp(pid_t pgid, int signo);

  // Starts init and waits until every task of the sandbox has exited.
  // `on_exit` (may be null) gets init's status as soon as it is final,
  // before the exited tasks' host threads are joined and the address
  // spaces they left behind are torn down: whoever waits for the sandbox
  // hears of its end without waiting for that.
  ExitStatus RunUntilInitExits(
      Task* init, const std::function<void(const ExitStatus&)>& on_exit = nullptr);
  // After a checkpoint load (state::KernelState::LoadKernel built the tasks
  // without starting them): starts every task, waits until all have exited
  // and returns init's status.
  ExitStatus RunRestored();

  // Blocks until `g` has exited (is a zombie) and returns its status. A
  // group without a parent other than init (one CreateInit made for sentry
  // serve's Exec) has nobody to wait(2) for it: it is reaped here, and
  // *reaped says so.
  ExitStatus AwaitExit(const std::shared_ptr<ThreadGroup>& g, bool* reaped);

  std::shared_ptr<Task> FindTask(pid_t tid);
  std::shared_ptr<ThreadGroup> FindGroup(pid_t tgid);
  // Every thread group with a pid (live ones and zombies), by pid: what
  // /proc lists.
  std::vector<std::shared_ptr<ThreadGroup>> ThreadGroups();
  // Runs `fn` under the tasklist lock (Kernel::mu_), which guards the
  // fields of ThreadGroup that the process tree and /proc read: exec
  // publishes a new image through it, /proc copies them out through it.
  // `fn` may take ThreadGroup and Task locks, not Kernel ones.
  void WithTasklistLock(const std::function<void()>& fn);
  // When the kernel started (MonotonicNanos): the sandbox's boot.
  int64_t boot_ns() const { return boot_ns_; }

  // A task's host thread calls this as its last act.
  void TaskExited(Task* t);

  // Unimplemented syscalls, counted by number.
  void CountUnimplemented(uint64_t nr);
  std::map<uint64_t, uint64_t> UnimplementedCounts();

 private:
  pid_t AllocTid() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ResourceExhausted when the sandbox has KernelOptions::max_tasks tasks.
  absl::Status CheckTaskLimitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last task of `g` is gone: make it a zombie (or reap it), reparent
  // its children, tell its parent.
  void GroupExitedLocked(const std::shared_ptr<ThreadGroup>& g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReapLocked(std::shared_ptr<ThreadGroup> g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A session leader exited: its controlling terminal's foreground group
  // gets SIGHUP and the session loses the terminal (ctty.cc).
  void DisassociateTerminalLocked(ThreadGroup& leader)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<mm::MemoryFile> mf_;
  std::shared_ptr<fs::TmpFsSuperblock> memfd_sb_;
  std::unique_ptr<platform::Platform> platform_;
  SyscallTable* const syscalls_;
  const KernelOptions opts_;
  int64_t boot_ns_ = MonotonicNanos();  // a checkpoint load sets it again
  std::shared_ptr<fs::Vfs> vfs_;
  Futexes futexes_;

  absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(ThreadGroup::mu_);
  pid_t next_tid_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<pid_t, std::shared_ptr<Task>> tasks_ ABSL_GUARDED_BY(mu_);
  std::map<pid_t, std::shared_ptr<ThreadGroup>> groups_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Task>> exited_ ABSL_GUARDED_BY(mu_);
  int live_tasks_ ABSL_GUARDED_BY(mu_) = 0;
  // Address spaces of groups that exited, dropped by TaskExited once it
  // has left the lock (ThreadGroup::ReleaseResources).
  std::vector<std::shared_ptr<mm::MM>> released_mms_ ABSL_GUARDED_BY(mu_);

  absl::Mutex unimpl_mu_;
  std::map<uint64_t, uint64_t> unimplemented_ ABSL_GUARDED_BY(unimpl_mu_);
  friend struct state::KernelState;
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_TASK_H_
