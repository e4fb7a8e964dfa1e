// The kernel: owns the pid namespace (the sandbox's init is pid 1), the
// tasks and thread groups (task.h, thread_group.h), the process tree
// (process.cc), the futexes and the syscall table.
//
// Lock order: Kernel::mu_ > ThreadGroup::mu_ > Task::mu_ ; Futexes::mu_ >
// Task::mu_. mm and fs locks are taken with none of these held, except
// that Futexes::mu_ may be held around mm::MM::AtomicWord.
#ifndef SANDBOXD_SENTRY_KERNEL_KERNEL_H_
#define SANDBOXD_SENTRY_KERNEL_KERNEL_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "platforms/platform.h"
#include "sentry/fs/file.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/cputime.h"
#include "sentry/kernel/futex.h"
#include "sentry/kernel/signal.h"
#include "sentry/kernel/task.h"
#include "sentry/kernel/thread_group.h"
#include "sentry/kernel/world_stop.h"
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
  // Count CPU time by the host's CPU clocks of the threads that ran it
  // (cputime.h), so that time throttled by a CPU quota or lost to other
  // host threads is not counted; costs a few clock reads per trap. Off:
  // by the length of each stretch, as gVisor counts.
  bool thread_cpu_clocks = false;
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
  // The limits of KernelOptions that a running sandbox's owner may change
  // (SetLimits: sandboxd-oci update); these, not options(), are read.
  uint64_t max_tasks() const { return max_tasks_.load(std::memory_order_relaxed); }
  int max_cpus() const { return max_cpus_.load(std::memory_order_relaxed); }
  uint64_t memory_limit() const { return memory_limit_.load(std::memory_order_relaxed); }
  // Pid 1 is a pid namespace's init as a container runtime's init is
  // (Linux's SIGNAL_UNKILLABLE, kernel/signal.c sig_task_ignored): a
  // signal whose action is the default is ignored, but for SIGKILL and
  // SIGSTOP sent from outside the sandbox (si_pid 0: the control channel,
  // the Sentry's own kills); faults (Task::ForceSignal) still kill it.
  // Off: pid 1 takes signals as any process (sandboxctl's programs, the
  // conformance tests, which compare with a native run).
  bool container_init() const { return container_init_.load(std::memory_order_relaxed); }
  void set_container_init(bool on) { container_init_.store(on, std::memory_order_relaxed); }
  void SetLimits(uint64_t max_tasks, int max_cpus, uint64_t memory_limit) {
    max_tasks_.store(max_tasks, std::memory_order_relaxed);
    max_cpus_.store(max_cpus, std::memory_order_relaxed);
    memory_limit_.store(memory_limit, std::memory_order_relaxed);
  }
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
  // Sends a process-directed signal to `g` (si_uid: the sender's real uid).
  void SignalGroup(ThreadGroup& g, int signo, pid_t sender, uid_t uid = 0);
  // check_kill_permission: whether `sender` may send `signo` to `target`
  // (the uid rule of fs::MaySignal; SIGCONT within the sender's session
  // always).
  bool MaySignal(Task& sender, Task& target, int signo);
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

  // Stops the world for a checkpoint (world_stop.cc): asks every task to
  // stop and waits until each is parked at a safe point, either on its way
  // back to application code (its registers complete, signals that arrived
  // still pending) or asleep in an interruptible wait inside a syscall
  // (Block, a host wait, a group stop, a vfork wait): such a task is saved
  // to execute the syscall again (sentry/state/README.md). A task inside a
  // syscall that does not block finishes it first; one exiting exits; one
  // created meanwhile parks before its first instruction. Parked tasks
  // stay parked, whatever is sent to them, until ResumeTheWorld.
  // DeadlineExceeded (naming the tasks that did not stop) after `timeout`,
  // the stop ended; FailedPrecondition while another stop holds it.
  absl::Status StopTheWorld(absl::Duration timeout);
  // Ends the stop StopTheWorld took: parked tasks go on.
  void ResumeTheWorld();
  bool world_stop_requested() const {
    return world_stop_.requested.load(std::memory_order_acquire);
  }
  // Called by a task at a safe point, holding no lock: parks it while a
  // stop is requested (returns at once when none is).
  void ParkForWorldStop(Task& t);

  // Blocks until `g` has exited (is a zombie) and returns its status. A
  // group without a parent other than init (one CreateInit made for sentry
  // serve's Exec) has nobody to wait(2) for it: it is reaped here, and
  // *reaped says so.
  ExitStatus AwaitExit(const std::shared_ptr<ThreadGroup>& g, bool* reaped);

  // Signal-driven I/O (sigio.cc): whether `pid` names a thread, or a
  // process group or session with a live member (F_SETOWN's lookup).
  bool PidInUse(pid_t pid);
  // send_sigio: sends `s` to its owner, if the owner's setter may signal
  // it. Called holding no lock (the dispatcher's timer thread).
  void SendAsyncSignal(const fs::AsyncSignal& s);

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
  // Undoes CreateThread or CreateProcess for a task that never ran (its
  // host thread could not be started): the task, and a process made for
  // it, leave the kernel without a trace (no zombie, no SIGCHLD), so that
  // clone can fail with EAGAIN as if they had never been.
  void AbandonTask(Task* t);

  // The memory cgroup's OOM killer for the sandbox's memory limit
  // (README.md, "Out of memory"): called by a task whose allocation the
  // memory file refused, holding no lock. Unless a process it killed
  // before still holds its address space (for at most kOomVictimGrace),
  // SIGKILLs the live process with the most memory (its RSS in pages plus
  // oom_score_adj thousandths of the limit; -1000 is never chosen).
  // False if nobody was killed and nobody is dying.
  bool OutOfMemory();
  static constexpr int64_t kOomVictimGrace = 5'000'000'000;  // ns
  uint64_t oom_kills() const { return oom_kills_.load(std::memory_order_relaxed); }
  // init was killed by OutOfMemory: the sandbox's exit reason.
  bool init_oom_killed() const {
    return init_oom_killed_.load(std::memory_order_acquire);
  }

  // Unimplemented syscalls, counted by number.
  void CountUnimplemented(uint64_t nr);
  std::map<uint64_t, uint64_t> UnimplementedCounts();

 private:
  // Makes this kernel the process's fs::AsyncSignaller, and undoes it
  // (the constructor and destructor).
  void InstallAsyncSignaller();
  void UninstallAsyncSignaller();

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
  std::atomic<uint64_t> max_tasks_{opts_.max_tasks};
  std::atomic<int> max_cpus_{opts_.max_cpus};
  std::atomic<uint64_t> memory_limit_{opts_.memory_limit};
  std::atomic<bool> container_init_{false};
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

  // Not state (world_stop.h).
  WorldStop world_stop_;

  // OutOfMemory's last victim, until its address space is gone. Not
  // state: a restored sandbox starts with none.
  std::weak_ptr<mm::MM> oom_victim_ ABSL_GUARDED_BY(mu_);
  int64_t oom_victim_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> oom_kills_{0};
  std::atomic<bool> init_oom_killed_{false};

  absl::Mutex unimpl_mu_;
  std::map<uint64_t, uint64_t> unimplemented_ ABSL_GUARDED_BY(unimpl_mu_);
  friend struct state::KernelState;
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_KERNEL_H_
