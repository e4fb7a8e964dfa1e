// Tasks: every application thread is a Task run by one host thread of the
// Sentry. Its loop switches into the application through the platform
// Context and handles what comes back (syscall, fault, exception,
// interrupt). A task blocks as the waiter::Blocker of its file operations.
//
// Lock order: ThreadGroup::mu_ > Task::mu_; Futexes::mu_ > Task::mu_
// (kernel.h has the whole order).
#ifndef SANDBOXD_SENTRY_KERNEL_TASK_H_
#define SANDBOXD_SENTRY_KERNEL_TASK_H_

#include <signal.h>
#include <sys/types.h>
#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "platforms/platform.h"
#include "sentry/fs/credentials.h"
#include "sentry/fs/file.h"
#include "sentry/kernel/cputime.h"
#include "sentry/kernel/futex.h"
#include "sentry/kernel/signal.h"
#include "sentry/kernel/thread_group.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::state {
struct KernelState;  // checkpoint save/load (sentry/state/kernel_state.h)
}  // namespace sandboxd::state

namespace sandboxd::kernel {

class Kernel;

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

// The result of a call that went on after a stop split it (Task::
// TakeResumedMoved): what it had moved, plus what the rest moved, or only
// the former if the rest failed.
inline int64_t WithResumedMoved(uint64_t moved, int64_t r) {
  if (moved == 0) return r;
  return r < 0 ? static_cast<int64_t>(moved) : static_cast<int64_t>(moved) + r;
}

class Task : public waiter::Blocker, public std::enable_shared_from_this<Task> {
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

  // This thread's credentials (sentry/fs/credentials.h). Any thread may
  // read them; only the task's own thread replaces them (set*id, capset,
  // prctl, execve), except before the task first runs (clone, restore).
  std::shared_ptr<const fs::Credentials> creds() const {
    absl::MutexLock l(&creds_mu_);
    return creds_;
  }
  // The calling task's own credentials, without a copy of the pointer.
  // Preconditions: called on this task's thread.
  const fs::Credentials& own_creds() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return *creds_;
  }
  void SetCredentials(std::shared_ptr<const fs::Credentials> c);

  // Scheduling as the task sees it (no effect on the host): the nice value
  // (-20..19), the I/O priority (ioprio_set's encoding), the policy
  // (SCHED_*, with SCHED_RESET_ON_FORK kept apart) and its priority, and
  // SCHED_DEADLINE's parameters, and the CPU affinity mask
  // sched_setaffinity set (a cpu_set_t's bits; all set: every CPU the
  // sandbox sees). Read and written under Kernel::mu_ (the calls that name
  // other tasks walk the task table).
  struct SchedState {
    static constexpr int kAffinityWords = 16;  // sizeof(cpu_set_t) / 8
    int nice = 0;
    int ioprio = 0;
    int policy = 0;  // SCHED_OTHER
    int rt_priority = 0;
    bool reset_on_fork = false;
    uint64_t dl_runtime = 0, dl_deadline = 0, dl_period = 0;
    std::array<uint64_t, kAffinityWords> affinity = AllCpus();

    static constexpr std::array<uint64_t, kAffinityWords> AllCpus() {
      std::array<uint64_t, kAffinityWords> a{};
      for (auto& w : a) w = ~uint64_t{0};
      return a;
    }

    // What a new thread or process inherits (clone, fork): the same, but
    // with SCHED_RESET_ON_FORK SCHED_OTHER and a nice value of at least 0.
    SchedState ForChild() const {
      SchedState c = *this;
      if (c.reset_on_fork) {
        c.reset_on_fork = false;
        if (c.policy != 0 && c.policy != 3 && c.policy != 5) {  // not OTHER, BATCH, IDLE
          c.policy = 0;
          c.rt_priority = 0;
        }
        if (c.nice < 0) c.nice = 0;
      }
      return c;
    }
  };
  SchedState sched;
  ThreadGroup& group() { return *tg_; }
  const std::shared_ptr<ThreadGroup>& group_ptr() const { return tg_; }
  Kernel& kernel() { return *kernel_; }
  mm::MM& mm() { return tg_->mm(); }
  platform::CpuState& cpu() { return cpu_; }
  // Makes cpu().fp current (the platform may keep the live FPU state in a
  // vCPU, CpuState::fp_live): before reading or copying it.
  void SyncFp() { ctx_->SyncFp(cpu_); }

  // Starts the task's host thread. An error (the host refused a thread) is
  // the caller's to undo: Kernel::AbandonTask for a clone, which then
  // fails with EAGAIN; ExitUnstarted for a process nobody made in the
  // application (init, Exec).
  absl::Status Start();
  // For a task whose host thread could not be started: its group dies of
  // SIGKILL and the task leaves the kernel as if it had run, on the
  // calling thread.
  void ExitUnstarted();
  // Joins the host thread (after it exited).
  void Join();

  // Blocks the task until Wake(), the deadline, or an interrupt.
  enum class WakeReason { kWoken, kTimeout, kInterrupted };
  WakeReason Block(absl::Time deadline);
  // The sleep of Wait (and of WaitOrHostFd once it has left its host
  // poll): Block until ready() (0), the deadline (-ETIMEDOUT) or an
  // interruption (-EINTR), with the HostPoller's thread watching meanwhile.
  int BlockUntilReady(const std::function<bool()>& ready, absl::Time deadline);
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
  // waiter::Blocker: waits on a queue until ready() (sentry/waiter/waiter.h).
  int Wait(waiter::WaitQueue& q, waiter::EventMask mask,
           const std::function<bool()>& ready,
           absl::Time deadline = absl::InfiniteFuture()) override;
  // waiter::Blocker: the same wait, asleep in a host poll of `host_fd`,
  // the interrupt eventfd and wake_fd_, so that a host fd's change wakes
  // this thread directly rather than through the poller's thread. An
  // interruption (a signal, a stop, a checkpoint's world stop) is handed
  // to Block, which decides as in Wait. Called by the task's own thread.
  int WaitOrHostFd(waiter::WaitQueue& q, waiter::EventMask mask,
                   const std::function<bool()>& ready, int host_fd,
                   const std::function<void()>& on_host_ready,
                   absl::Time deadline = absl::InfiniteFuture()) override;
  // waiter::Blocker: a host-fd wait is sleeping (S in /proc), not CPU time.
  // Called by the task's own thread only.
  void HostWaitBegin() override {
    sleeping_.store(true, std::memory_order_relaxed);
    cputime_.StartBlocking(MonotonicNowNs(), CpuNow());
    cputime_.CountVoluntarySwitch();
  }
  void HostWaitEnd() override {
    cputime_.StopBlocking(MonotonicNowNs(), CpuNow());
    sleeping_.store(false, std::memory_order_relaxed);
  }
  // waiter::Blocker: the call in progress cannot be executed again.
  // Called by the task's own thread only.
  void MarkProgress() override { syscall_progress_ = true; }
  // What the call in progress moved before a checkpoint's stop split it
  // (read, write, readv, writev, sendto, recvfrom: the stop ended the
  // call with a short count, and the task executes it again after the
  // stop, in the saved sandbox and in every restored copy, to go on from
  // there): the handler skips that many bytes of its buffers and adds them
  // to its result. 0 for any other call. At most once per call.
  uint64_t TakeResumedMoved() {
    uint64_t n = resumed_moved_now_;
    resumed_moved_now_ = 0;
    return n;
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
  // Pid 1 of a sandbox whose init is a container's (Kernel::container_init).
  bool IsUnkillableInit() const;
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
  // The calling thread's CPU clock for cputime_ when the kernel counts by
  // CPU clocks (KernelOptions::thread_cpu_clocks), else -1.
  int64_t CpuNow() const;

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
  // A relative timeout of the syscall in progress (poll, select,
  // epoll_wait, nanosleep, futex, sigtimedwait): returns `timeout`, or,
  // for the call that a restore executes again, what was left of it at
  // the checkpoint (Linux goes on towards the same deadline: poll's and
  // futex's restart block, nanosleep's restart_syscall, select's time
  // left written back). Remembers the deadline, which a checkpoint taken
  // while the call waits saves as the time left. At most once per call.
  absl::Duration SyscallTimeout(absl::Duration timeout);
  // SyscallTimeout for a relative sleep on a CPU clock (clock_nanosleep on
  // CLOCK_PROCESS_CPUTIME_ID or another thread's clock): `ns` of that
  // clock's time from `now`, or, for the call that a restore executes
  // again, what was left of it at the checkpoint in CPU time. Remembers
  // the clock and the target it returns, which a checkpoint saves as the
  // CPU time left.
  int64_t SyscallCpuTimeout(const TimerClock& clock, int64_t now, int64_t ns);

 private:
  void Run();
  // The wait of Block. *park: it ended for a checkpoint's stop only.
  WakeReason WaitUntilReady(absl::Time deadline, bool* park);
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
  // The syscall in progress has moved data (MarkProgress): its waits end
  // at a checkpoint's stop rather than park. Not state: a task is never
  // saved inside such a call.
  bool syscall_progress_ = false;
  // The deadline of the call in progress's relative timeout
  // (SyscallTimeout; InfiniteFuture: none), read by a checkpoint while the
  // task is parked in the call (the park orders the two).
  absl::Time syscall_deadline_ = absl::InfiniteFuture();
  // The same for a relative sleep on a CPU clock (SyscallCpuTimeout): the
  // clock and the target on it; -1: none.
  TimerClock syscall_cpu_clock_;
  int64_t syscall_cpu_target_ = -1;
  // A loaded task saved in a call with a relative timeout: the time that
  // was left, for that call (the syscall instruction at
  // resumed_timeout_rip_) when it is executed again.
  bool resumed_timeout_pending_ = false;
  absl::Duration resumed_timeout_;
  uint64_t resumed_timeout_rip_ = 0;
  // The call in progress is that one: SyscallTimeout takes the time left.
  bool resumed_timeout_now_ = false;
  // A wait of the call in progress ended for a checkpoint's stop after
  // MarkProgress (Block sets it; HandleSyscall reads it).
  bool stopped_with_progress_ = false;
  // A call split by such a stop: what it had moved, for the same syscall
  // instruction (resume_moved_rip_) executed again; saved with the task.
  uint64_t resume_moved_ = 0;
  uint64_t resume_moved_rip_ = 0;
  // The call in progress is that one (TakeResumedMoved).
  uint64_t resumed_moved_now_ = 0;
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
  // The vfork child this task (its parent) waits for in WaitVforkDone:
  // set and cleared by this task's own thread around the wait, read by a
  // checkpoint while the task is parked in it (the park orders the two).
  Task* vfork_waiting_for_ = nullptr;
  // A restored parent's vfork child, waited for before the task's first
  // instruction (Run): the load's counterpart of vfork_waiting_for_.
  std::shared_ptr<Task> restored_vfork_child_;
  int exit_code_ = 0;
  TaskCpuTime cputime_;
  // A leaf lock: readers copy the pointer and drop it.
  mutable absl::Mutex creds_mu_;
  std::shared_ptr<const fs::Credentials> creds_ ABSL_GUARDED_BY(creds_mu_) =
      fs::Credentials::Root();

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
  // While the task sleeps in WaitOrHostFd's host poll: Wake also writes
  // wake_fd_ (an eventfd made by the task's thread on first use).
  bool host_waiting_ ABSL_GUARDED_BY(mu_) = false;
  UniqueFd wake_fd_;
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

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_TASK_H_
