#include "sentry/kernel/task.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "sentry/kernel/kernel.h"
#include "sentry/waiter/host_poller.h"

namespace sandboxd::kernel {

using platform::Event;

DefaultAction DefaultActionOf(int signo) {
  switch (signo) {
    case SIGQUIT: case SIGILL: case SIGTRAP: case SIGABRT: case SIGBUS:
    case SIGFPE: case SIGSEGV: case SIGXCPU: case SIGXFSZ: case SIGSYS:
      return DefaultAction::kCore;
    case SIGCHLD: case SIGURG: case SIGWINCH:
      return DefaultAction::kIgnore;
    case SIGCONT:
      return DefaultAction::kContinue;
    case SIGSTOP: case SIGTSTP: case SIGTTIN: case SIGTTOU:
      return DefaultAction::kStop;
    default:
      return DefaultAction::kTerminate;
  }
}

Task::Task(Kernel* k, pid_t tid, std::shared_ptr<ThreadGroup> tg,
           std::unique_ptr<platform::Context> ctx)
    : kernel_(k), tid_(tid), tg_(std::move(tg)), ctx_(std::move(ctx)),
      interrupt_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

Task::~Task() = default;

namespace {
thread_local Task* current_task = nullptr;
constexpr uint64_t kSyscallInsnLen = 2;  // x86-64 `syscall`
}  // namespace

Task* Task::Current() { return current_task; }

void Task::SetCredentials(std::shared_ptr<const fs::Credentials> c) {
  std::shared_ptr<const fs::Credentials> old;
  {
    absl::MutexLock l(&creds_mu_);
    old = std::move(creds_);
    creds_ = std::move(c);
    if (current_task == this) fs::SetCurrentCredentials(creds_.get());
  }
}

absl::Status Task::Start() {
  // The interrupt eventfd is what blocking host waits poll: without it a
  // signal could not interrupt them.
  if (!interrupt_fd_.valid()) {
    return ErrnoStatus(absl::StrCat("the interrupt eventfd of task ", tid_),
                       EAGAIN);
  }
  // What the platform needs to run it (systrap: a context slot and its
  // stub worker; kvm: a vCPU): a host refusal is the clone's EAGAIN.
  RETURN_IF_ERROR(ctx_->Prepare(mm().address_space()));
  // The new thread waits until thread_ is assigned: a task that exits at
  // once is joined by another task's TaskExited, which must see it
  // joinable (else the Task is destroyed with a joinable thread_).
  auto assigned = std::make_shared<absl::Notification>();
  ASSIGN_OR_RETURN(thread_,
                   StartThread(absl::StrCat("the host thread of task ", tid_),
                               [this, assigned] {
                                 assigned->WaitForNotification();
                                 current_task = this;
                                 Run();
                               }));
  assigned->Notify();
  return absl::OkStatus();
}

void Task::ExitUnstarted() {
  tg_->Exit(ExitStatus{0, SIGKILL, false});
  Cleanup();
  kernel_->TaskExited(this);
}

void Task::Join() {
  if (thread_.joinable()) thread_.join();
}

Task::WakeReason Task::Block(absl::Time deadline) {
  sleeping_.store(true, std::memory_order_relaxed);
  WakeReason why;
  bool park = false;
  // A checkpoint's stop parks the task inside its wait (a safe point: the
  // syscall is saved to run again) and the wait goes on after it; unless
  // the call has moved data already (MarkProgress): the wait ends as a
  // signal would end it, the call returns what it moved, and the task
  // parks at the top of its loop, set to go on with the rest of the call
  // (HandleSyscall) or, for calls that cannot, with the short count.
  while ((why = WaitUntilReady(deadline, &park)) ==
             WakeReason::kInterrupted &&
         park) {
    if (syscall_progress_) {
      stopped_with_progress_ = true;
      break;
    }
    kernel_->ParkForWorldStop(*this);
  }
  sleeping_.store(false, std::memory_order_relaxed);
  return why;
}

Task::WakeReason Task::WaitUntilReady(absl::Time deadline, bool* park) {
  absl::MutexLock l(&mu_);
  *park = false;
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return wake_pending_ || interrupt_.load() ||
           (pending_.load() & ~mask_.load()) != 0 || tg_->stop_requested() ||
           kernel_->world_stop_requested();
  };
  if (!ready()) {
    // Time asleep is nobody's CPU time.
    cputime_.StartBlocking(MonotonicNowNs(), CpuNow());
    cputime_.CountVoluntarySwitch();
    while (!ready()) {
      if (cv_.WaitWithDeadline(&mu_, deadline) && !ready()) {
        cputime_.StopBlocking(MonotonicNowNs(), CpuNow());
        return WakeReason::kTimeout;
      }
    }
    cputime_.StopBlocking(MonotonicNowNs(), CpuNow());
  }
  if (wake_pending_) {
    wake_pending_ = false;
    return WakeReason::kWoken;
  }
  // Only the world stop: park and wait again. Anything else (a signal, an
  // exit, a group stop) ends the wait as an interruption.
  *park = !interrupt_.load() && (pending_.load() & ~mask_.load()) == 0 &&
          !tg_->stop_requested() && kernel_->world_stop_requested();
  return WakeReason::kInterrupted;
}

namespace {
// Turns a file's readiness notification into a wakeup of the task.
class TaskWaiter : public waiter::Waiter {
 public:
  explicit TaskWaiter(Task* t) : t_(t) {}
  void Notify(waiter::EventMask) override { t_->Wake(); }

 private:
  Task* const t_;
};
}  // namespace

int Task::Wait(waiter::WaitQueue& q, waiter::EventMask mask,
               const std::function<bool()>& ready, absl::Time deadline) {
  TaskWaiter w(this);
  q.Add(&w, mask);
  int r = BlockUntilReady(ready, deadline);
  q.Remove(&w);
  return r;
}

int Task::BlockUntilReady(const std::function<bool()>& ready,
                          absl::Time deadline) {
  if (ready()) return 0;
  // What this task waits for may be a host fd's change reaching its queue
  // through the poller's thread (directly, or through an epoll interest):
  // the thread must watch while the task sleeps here.
  waiter::HostPoller::NeedThread();
  int r = 0;
  while (!ready()) {
    WakeReason why = Block(deadline);
    if (why == WakeReason::kTimeout) {
      r = ready() ? 0 : -ETIMEDOUT;
      break;
    }
    if (why == WakeReason::kInterrupted) {
      r = ready() ? 0 : -EINTR;
      break;
    }
  }
  waiter::HostPoller::DoneWithThread();
  return r;
}

int Task::WaitOrHostFd(waiter::WaitQueue& q, waiter::EventMask mask,
                       const std::function<bool()>& ready, int host_fd,
                       const std::function<void()>& on_host_ready,
                       absl::Time deadline) {
  if (!wake_fd_.valid()) {
    wake_fd_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd_.valid()) return Wait(q, mask, ready, deadline);
  }
  TaskWaiter w(this);
  q.Add(&w, mask);
  int r = 0;
  // Once Block has been used (an interruption, or an interrupt eventfd
  // left readable by a Poke that asked for nothing this wait must end
  // for), the rest of the wait is Block's: the poller's thread still
  // delivers host changes, as it does for Wait.
  bool host_poll = true;
  while (!ready()) {
    if (host_poll) {
      bool interrupted;
      {
        absl::MutexLock l(&mu_);
        if (wake_pending_) {
          wake_pending_ = false;
          continue;
        }
        interrupted = interrupt_.load() ||
                      (pending_.load() & ~mask_.load()) != 0 ||
                      tg_->stop_requested() ||
                      kernel_->world_stop_requested();
        host_waiting_ = !interrupted;
      }
      if (!interrupted) {
        int ms = -1;
        if (deadline != absl::InfiniteFuture()) {
          const absl::Duration left = deadline - absl::Now();
          ms = left <= absl::ZeroDuration()
                   ? 0
                   : static_cast<int>(std::min<int64_t>(
                         absl::ToInt64Milliseconds(
                             absl::Ceil(left, absl::Milliseconds(1))),
                         INT32_MAX));
        }
        struct pollfd p[3] = {{host_fd, POLLIN, 0},
                              {interrupt_fd_.get(), POLLIN, 0},
                              {wake_fd_.get(), POLLIN, 0}};
        int n = 0;
        if (ms != 0) {
          HostWaitBegin();
          n = ::poll(p, 3, ms);
          HostWaitEnd();
        }
        {
          absl::MutexLock l(&mu_);
          host_waiting_ = false;
        }
        if (n > 0 && (p[2].revents & POLLIN)) {
          uint64_t drained;
          (void)!read(wake_fd_.get(), &drained, sizeof(drained));
        }
        if (n > 0 && (p[0].revents & POLLIN)) on_host_ready();
        if (n > 0 && (p[1].revents & POLLIN)) {
          // An interruption is seen at the top of the loop; a stale
          // eventfd (nothing to end the wait for) would keep poll
          // returning at once.
          host_poll = false;
        }
        if (ms == 0 || (n == 0 && absl::Now() >= deadline)) {
          r = ready() ? 0 : -ETIMEDOUT;
          break;
        }
        if (host_poll) continue;
      }
      host_poll = false;
      continue;
    }
    r = BlockUntilReady(ready, deadline);
    break;
  }
  q.Remove(&w);
  return r;
}

void Task::Wake() {
  absl::MutexLock l(&mu_);
  wake_pending_ = true;
  if (host_waiting_) {
    uint64_t one = 1;
    (void)!write(wake_fd_.get(), &one, sizeof(one));
    host_waiting_ = false;
  }
  cv_.SignalAll();
}

void Task::Poke() {
  {
    absl::MutexLock l(&mu_);
    cv_.SignalAll();
  }
  uint64_t one = 1;
  poked_.store(true, std::memory_order_release);
  (void)!write(interrupt_fd_.get(), &one, sizeof(one));
  ctx_->Interrupt();
}

void Task::Interrupt() {
  interrupt_.store(true, std::memory_order_release);
  Poke();
}

void Task::ExitThread(int code) {
  exit_thread_ = true;
  exit_code_ = code;
}

void Task::SendSignal(int signo, pid_t sender) {
  siginfo_t info{};
  info.si_signo = signo;
  info.si_code = SI_USER;
  info.si_pid = sender;
  SendSignalInfo(info);
}

bool Task::SendSignalInfo(const siginfo_t& info, bool group_directed,
                          std::shared_ptr<SignalSource> source) {
  const int signo = info.si_signo;
  // Linux's prepare_signal: job-control signals act when sent, whatever
  // the disposition or mask.
  if (IsStopSignal(signo)) {
    tg_->DiscardPending(SigBit(SIGCONT));
  } else if (signo == SIGCONT) {
    tg_->DiscardPending(kStopSignals);
    tg_->Continue();
  }
  SigAction act = tg_->GetAction(signo);
  // SIGCONT's default action (continuing) was taken above.
  bool ignored = act.handler == kSigIgn ||
                 (act.handler == kSigDfl &&
                  (DefaultActionOf(signo) == DefaultAction::kIgnore ||
                   DefaultActionOf(signo) == DefaultAction::kContinue));
  // A blocked signal stays pending even if ignored now: its disposition
  // may change before it is unblocked (Linux checks at delivery too).
  if (ignored && (mask_.load() & SigBit(signo)) == 0 && signo != SIGKILL) {
    return false;
  }
  // A container's init: only SIGKILL and SIGSTOP from outside act by
  // default (Kernel::container_init). A blocked one is queued (sigwaitinfo
  // or a signalfd may take it; delivery drops it if still default).
  if (act.handler == kSigDfl && (mask_.load() & SigBit(signo)) == 0 && IsUnkillableInit() &&
      !(info.si_pid == 0 && info.si_code == SI_USER && (signo == SIGKILL || signo == SIGSTOP))) {
    return false;
  }
  {
    absl::MutexLock l(&mu_);
    // One pending instance per signal number: a second is merged into the
    // first (whose siginfo stays).
    if (pending_info_[signo - 1].queued) return false;
    pending_.fetch_or(SigBit(signo));
    pending_info_[signo - 1] =
        PendingInfo{true, group_directed, info, std::move(source)};
  }
  tg_->signal_queue->Notify(POLLIN);
  // A blocked signal interrupts nothing (signalfd and sigtimedwait
  // waiters were woken through the queue); this thread unblocks it itself.
  if ((mask_.load() & SigBit(signo)) == 0) Poke();
  return true;
}

int64_t Task::CpuNow() const {
  return kernel_->options().thread_cpu_clocks ? ThreadCpuNowNs() : -1;
}

void Task::Run() {
  current_task = this;
  {
    absl::MutexLock l(&creds_mu_);
    fs::SetCurrentCredentials(creds_.get());
  }
  cputime_.Start(MonotonicNowNs(), CpuNow());
  if (restored_vfork_child_ != nullptr) {
    // Saved inside its vfork: the call returned (rax is the child's tid)
    // once the child execs or exits, as it does here.
    std::shared_ptr<Task> child = std::move(restored_vfork_child_);
    child->WaitVforkDone(*this);
  }
  while (!exit_thread_ && !killed_ && !tg_->exiting()) {
    DeliverPendingSignals();
    if (exit_thread_ || killed_ || tg_->exiting()) break;
    if (DoJobControl()) continue;
    PrepareToResume();
    // A checkpoint's safe point: registers complete, signals that arrive
    // while parked are delivered after it.
    if (kernel_->world_stop_requested()) {
      kernel_->ParkForWorldStop(*this);
      continue;
    }
    // From Switch's entry to its return the application ran: user time,
    // as the CPU clock of the thread that ran it counts (cputime.h).
    cputime_.EnterApp(MonotonicNowNs(), CpuNow());
    Event ev = ctx_->Switch(mm().address_space(), cpu_);
    cputime_.LeaveApp(MonotonicNowNs(), CpuNow(), ev.app_cpu_ns);
    switch (ev.kind) {
      case Event::Kind::kSyscall:
        HandleSyscall();
        break;
      case Event::Kind::kFault: {
        int signo = SIGSEGV, si_code = 0;
        if (mm().HandleFault(ev.addr, ev.write, ev.exec, &signo, &si_code)) {
          cputime_.CountMinorFault();
        } else if (signo == 0) {
          // The sandbox's memory limit: as in a memory cgroup, the OOM
          // killer frees memory and the access is made again (unless this
          // task is the one killed). Nothing killable: SIGBUS.
          if (!kernel_->OutOfMemory()) {
            ForceSignal(SIGBUS, BUS_ADRERR, ev.addr);
          } else {
            Block(absl::Now() + absl::Milliseconds(1));
          }
        } else {
          ForceSignal(signo, si_code, ev.addr);
        }
        break;
      }
      case Event::Kind::kException:
        // A host SIGBUS in application code means the host could not
        // provide a memory-file page the Sentry mapped: a Sentry problem
        // (alignment checks, BUS_ADRALN, are the program's own).
        if (ev.signo == SIGBUS && ev.code != BUS_ADRALN) {
          fprintf(stderr, "sentry: task %d: host SIGBUS (code %d) at 0x%lx\n",
                  tid_, ev.code, static_cast<unsigned long>(ev.addr));
        }
        ForceSignal(ev.signo, ev.code, ev.addr);
        break;
      case Event::Kind::kInterrupted:
        break;
      case Event::Kind::kDead:
        fprintf(stderr, "sentry: task %d: the platform lost the thread: %s\n",
                tid_, ev.detail.c_str());
        tg_->Exit(ExitStatus{0, SIGKILL, false});
        break;
    }
  }
  cputime_.Stop(MonotonicNowNs(), CpuNow());
  Cleanup();
  kernel_->TaskExited(this);
}

namespace {

// Syscalls that Linux restarts after a handler with SA_RESTART when a
// signal interrupted them (signal(7), "Interruption of system calls").
bool Restartable(uint64_t nr) {
  switch (nr) {
    case SYS_read: case SYS_readv: case SYS_write: case SYS_writev:
    case SYS_pread64: case SYS_pwrite64: case SYS_preadv: case SYS_pwritev:
    case SYS_ioctl: case SYS_wait4: case SYS_waitid: case SYS_open:
    case SYS_openat: case SYS_flock: case SYS_fcntl: case SYS_accept:
    case SYS_accept4: case SYS_connect: case SYS_recvfrom: case SYS_recvmsg:
    case SYS_sendto: case SYS_sendmsg: case SYS_futex:
      return true;
    default:
      return false;
  }
}

// Interrupted calls that Linux restarts when the signal ran no handler (a
// stop and continue, a signal that was ignored by the time it came out):
// the -ERESTARTSYS ones and those that return -ERESTARTNOHAND. select and
// the p* calls wrote the time left back, as Linux does; poll starts again
// with its whole timeout (Linux keeps the deadline in a restart block).
// nanosleep and clock_nanosleep are not here: they go on through their
// restart block (restart_syscall), or return -EINTR and the time left when
// a handler ran.
bool RestartsWithoutHandler(uint64_t nr) {
  switch (nr) {
    case SYS_pause: case SYS_rt_sigsuspend: case SYS_poll: case SYS_ppoll:
    case SYS_select: case SYS_pselect6:
      return true;
    default:
      return Restartable(nr);
  }
}

// Calls that a checkpoint's stop may split after they moved data: their
// handlers go on from what was moved (Task::TakeResumedMoved). Others
// (sendmsg, recvmsg, preadv...) return the short count, as Linux's do
// when a stop interrupts them.
bool ResumesAfterStop(uint64_t nr) {
  switch (nr) {
    case SYS_read: case SYS_write: case SYS_readv: case SYS_writev:
    case SYS_sendto: case SYS_recvfrom:
      return true;
    default:
      return false;
  }
}

}  // namespace

void Task::HandleSyscall() {
  platform::Regs& r = cpu_.regs;
  SyscallArgs args{r.orig_rax, {r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9}};
  syscall_progress_ = false;
  syscall_deadline_ = absl::InfiniteFuture();
  syscall_cpu_target_ = -1;
  // The first call of a loaded task, if it is the one saved waiting with a
  // timeout (a signal handler may run first and make calls of its own).
  resumed_timeout_now_ = resumed_timeout_pending_ &&
                         r.rip - kSyscallInsnLen == resumed_timeout_rip_;
  if (resumed_timeout_now_) resumed_timeout_pending_ = false;
  // The rest of a call that a stop split (below).
  resumed_moved_now_ =
      r.rip - kSyscallInsnLen == resume_moved_rip_ ? resume_moved_ : 0;
  resume_moved_ = 0;
  // Data moved already: never park in this call to run it again.
  if (resumed_moved_now_ > 0) syscall_progress_ = true;
  stopped_with_progress_ = false;
  in_syscall_.store(true, std::memory_order_release);
  int64_t ret = kernel_->syscalls().Invoke(*this, args);
  in_syscall_.store(false, std::memory_order_release);
  syscall_progress_ = false;
  syscall_deadline_ = absl::InfiniteFuture();
  syscall_cpu_target_ = -1;
  syscall_cpu_clock_ = TimerClock{};  // holds its process or thread weakly
  resumed_timeout_now_ = false;
  resumed_moved_now_ = 0;
  if (stopped_with_progress_ && ret > 0 && ResumesAfterStop(args.nr)) {
    // A checkpoint's stop ended the call after it moved `ret` bytes: the
    // program does not see the short count. The call is executed again
    // after the stop and goes on from there (TakeResumedMoved), as a
    // call that a stop signal interrupts goes on in Linux, and the task
    // parks now with nothing in progress, which a checkpoint saves as it
    // is (regs before the syscall instruction, resume_moved_).
    stopped_with_progress_ = false;
    resume_moved_ = static_cast<uint64_t>(ret);
    r.rip -= kSyscallInsnLen;
    resume_moved_rip_ = r.rip;
    r.rax = r.orig_rax;
    restart_pending_ = false;
    restart_if_no_handler_ = false;
    restart_with_block_ = false;
    return;
  }
  stopped_with_progress_ = false;
  // An allocation the sandbox's memory limit refused (the call returned
  // its error): the OOM killer frees memory for what comes next.
  if (mm::MemoryFile::TakeRefusedOnThisThread()) kernel_->OutOfMemory();
  if (ret != kNoReturnValue) r.rax = static_cast<uint64_t>(ret);
  // An interrupted restartable call is re-run if the handler that
  // interrupted it has SA_RESTART (decided at delivery).
  restart_pending_ = ret == -EINTR && Restartable(args.nr) &&
                     (pending_.load() & ~mask_.load()) != 0;
  restart_if_no_handler_ = ret == -EINTR && RestartsWithoutHandler(args.nr);
  // An interrupted sleep left its deadline in the restart block: Linux's
  // -ERESTART_RESTARTBLOCK, which goes on as restart_syscall(2).
  restart_with_block_ = ret == -EINTR &&
                        restart_block_.kind != RestartBlock::Kind::kNone &&
                        (args.nr == SYS_nanosleep ||
                         args.nr == SYS_clock_nanosleep ||
                         args.nr == SYS_restart_syscall);
  if (restart_with_block_) restart_if_no_handler_ = true;
}

absl::Duration Task::SyscallTimeout(absl::Duration timeout) {
  if (resumed_timeout_now_) {
    timeout = std::min(timeout, resumed_timeout_);
    resumed_timeout_now_ = false;
  }
  syscall_deadline_ = absl::Now() + timeout;
  return timeout;
}

int64_t Task::SyscallCpuTimeout(const TimerClock& clock, int64_t now, int64_t ns) {
  if (resumed_timeout_now_) {
    ns = std::min(ns, absl::ToInt64Nanoseconds(resumed_timeout_));
    resumed_timeout_now_ = false;
  }
  syscall_cpu_clock_ = clock;
  syscall_cpu_target_ = ns > std::numeric_limits<int64_t>::max() - now
                            ? std::numeric_limits<int64_t>::max()
                            : now + ns;
  return syscall_cpu_target_;
}

int Task::TakePendingSignal(SigSet set, siginfo_t* out) {
  for (;;) {
    PendingInfo pi;
    int signo;
    {
      absl::MutexLock l(&mu_);
      SigSet hit = pending_.load() & set;
      if (hit == 0) return 0;
      signo = __builtin_ctzll(hit) + 1;
      pending_.fetch_and(~SigBit(signo));
      pi = std::move(pending_info_[signo - 1]);
      pending_info_[signo - 1] = PendingInfo{};
    }
    // Without mu_: the source's lock is ordered before ours. A stale timer
    // signal (re-armed or deleted since) is dropped.
    if (pi.source != nullptr && !pi.source->Dequeued(&pi.info)) continue;
    if (out != nullptr) *out = pi.info;
    return signo;
  }
}

void Task::DeliverPendingSignals() {
  for (;;) {
    SigSet deliverable = pending_.load() & ~mask_.load();
    if (deliverable == 0) {
      RestoreTemporaryMask();
      return;
    }
    int signo = __builtin_ctzll(deliverable) + 1;
    PendingInfo info;
    {
      absl::MutexLock l(&mu_);
      pending_.fetch_and(~SigBit(signo));
      info = std::move(pending_info_[signo - 1]);
      pending_info_[signo - 1] = PendingInfo{};
      uint64_t drained;
      (void)!read(interrupt_fd_.get(), &drained, sizeof(drained));
    }
    // A stale timer signal (re-armed or deleted since it was queued) is
    // dropped; a live one gets its overrun count.
    if (info.source != nullptr && !info.source->Dequeued(&info.info)) continue;
    SigAction act = tg_->GetAction(signo);
    // Queued while blocked or handled, its action now the default: a
    // container's init drops it, as Linux's get_signal does.
    if (act.handler == kSigDfl && signo != SIGKILL && signo != SIGSTOP &&
        IsUnkillableInit()) {
      continue;
    }
    if (signo == SIGKILL || act.handler == kSigDfl) {
      ApplyDefaultAction(signo);
      if (tg_->exiting()) return;
      continue;
    }
    if (act.handler == kSigIgn) continue;
    if (restart_pending_) {
      restart_pending_ = false;
      if (act.flags & SA_RESTART) {
        // Back to the syscall instruction, with its number in rax.
        cpu_.regs.rip -= 2;
        cpu_.regs.rax = cpu_.regs.orig_rax;
      }
    }
    restart_if_no_handler_ = false;  // the handler's SA_RESTART decides
    // A handler ran: the sleep returns EINTR, and a later restart_syscall
    // has nothing to resume (Linux resets the block when it sets up the
    // frame).
    restart_with_block_ = false;
    restart_block_ = RestartBlock{};
    if (!DeliverToHandler(signo, info.info.si_code, 0, info.info.si_pid, act,
                          info.queued ? &info.info : nullptr)) {
      tg_->Exit(ExitStatus{0, SIGSEGV, true});
      return;
    }
  }
}

void Task::ForceSignal(int signo, int code, uint64_t addr) {
  SigAction act = tg_->GetAction(signo);
  bool blocked = (mask_.load() & SigBit(signo)) != 0;
  // Like Linux's force_sig: a blocked or ignored synchronous signal cannot
  // be held back, so it takes its default action.
  if (act.handler == kSigDfl || act.handler == kSigIgn || blocked) {
    ApplyDefaultAction(signo);
    return;
  }
  if (!DeliverToHandler(signo, code, addr, 0, act)) {
    tg_->Exit(ExitStatus{0, SIGSEGV, true});
  }
}

bool Task::IsUnkillableInit() const {
  return tg_->tgid() == 1 && kernel_->container_init();
}

void Task::ApplyDefaultAction(int signo) {
  switch (DefaultActionOf(signo)) {
    case DefaultAction::kIgnore:
    case DefaultAction::kContinue:
      return;
    case DefaultAction::kStop:
      // POSIX: the terminal stop signals do not stop an orphaned process
      // group (nobody could continue it); Linux discards them.
      if (signo != SIGSTOP && kernel_->IsPgrpOrphaned(*tg_)) return;
      tg_->BeginStop(signo);
      return;
    case DefaultAction::kCore:
      tg_->Exit(ExitStatus{0, signo, true});
      return;
    case DefaultAction::kTerminate:
      tg_->Exit(ExitStatus{0, signo, false});
      return;
  }
}

void Task::Cleanup() {
  VforkDone();
  // CLONE_CHILD_CLEARTID: what pthread_join waits on.
  if (clear_child_tid_ != 0 && !tg_->exiting()) {
    uint32_t zero = 0;
    if (mm().CopyOut(clear_child_tid_, &zero, sizeof(zero)) == sizeof(zero)) {
      kernel_->futexes().Wake(Futexes::Key{&mm(), clear_child_tid_}, 1, ~0u);
    }
  }
  ctx_->Release();
  if (tid_ == tg_->tgid()) tg_->set_leader_exit_code(exit_code_);
  const bool last = tg_->RemoveTask(this);
  if (!last) NotifyParentIfDue();
  // The process's last thread: what it wrote through shared mappings of
  // host files reaches them before anyone is told of the exit (the address
  // space is dropped only after that, ThreadGroup::ReleaseResources).
  if (last && tg_->mm_ptr() != nullptr) mm().SyncSharedFiles();
  if (last && !tg_->exiting()) {
    // Every thread left with exit(2): the process's status is the
    // leader's exit code, as wait(2) reports it on Linux.
    tg_->Exit(ExitStatus{tg_->leader_exit_code(), 0, false});
  }
}

}  // namespace sandboxd::kernel
