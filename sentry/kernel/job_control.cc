// Job control: group stops by SIGSTOP/SIGTSTP/SIGTTIN/SIGTTOU, SIGCONT,
// and what the parent learns of them (SIGCHLD with CLD_STOPPED or
// CLD_CONTINUED, wait4 WUNTRACED/WCONTINUED, waitid WSTOPPED/WCONTINUED).
//
// As in Linux (kernel/signal.c): the stop signal's default action, taken
// when one task dequeues it, asks the whole group to stop; every task
// stops at its next stop point (the top of its loop, after delivering
// signals): one blocked in a syscall is woken (Block and host waits see
// the request) and its call restarts after the continue; one running
// application code is interrupted. The last task to stop makes the group
// stopped and notifies the parent. SIGCONT acts when it is *sent*,
// whatever its disposition or mask: it ends the stop, and the first task
// to run again sends the parent CLD_CONTINUED (the sender may hold the
// tasklist lock). SIGKILL wakes a stopped task.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sentry/kernel/kernel.h"

namespace sandboxd::kernel {

// ---------------------------------------------------------------------------
// ThreadGroup

void ThreadGroup::BeginStop(int signo) {
  std::vector<std::shared_ptr<Task>> tasks;
  {
    absl::MutexLock l(&mu_);
    if (exiting() || stop_requested_.load()) return;
    stop_signo_ = signo;
    stopped_ = false;
    stop_requested_.store(true, std::memory_order_release);
    tasks = TasksLocked();
  }
  for (const auto& t : tasks) t->Poke();
}

void ThreadGroup::Continue() {
  std::vector<std::shared_ptr<Task>> tasks;
  {
    absl::MutexLock l(&mu_);
    if (!stop_requested_.load() && !stopped_) return;
    // Linux's prepare_signal: a finished stop is reported as continued; a
    // stop still in progress counts as a stop the parent was not told of.
    if (stopped_) {
      SetParentNotificationLocked(CLD_CONTINUED, SIGCONT);
    } else {
      SetParentNotificationLocked(CLD_STOPPED, stop_signo_);
    }
    continue_report_ = true;
    stop_report_ = false;
    stopped_ = false;
    stop_requested_.store(false, std::memory_order_release);
    tasks = TasksLocked();
  }
  for (const auto& t : tasks) t->Poke();
}

void ThreadGroup::DiscardPending(SigSet set) {
  for (const auto& t : Tasks()) {
    absl::MutexLock l(&t->mu_);
    SigSet hit = t->pending_.load() & set;
    t->pending_.fetch_and(~set);
    for (int signo = 1; signo <= kNumSignals; signo++) {
      if (hit & SigBit(signo)) t->pending_info_[signo - 1] = Task::PendingInfo{};
    }
  }
}

bool ThreadGroup::stopped() {
  absl::MutexLock l(&mu_);
  return stopped_;
}

bool ThreadGroup::TakeStopReport(bool consume, int* signo) {
  absl::MutexLock l(&mu_);
  if (!stopped_ || !stop_report_) return false;
  *signo = stop_signo_;
  if (consume) stop_report_ = false;
  return true;
}

bool ThreadGroup::TakeContinueReport(bool consume) {
  absl::MutexLock l(&mu_);
  if (!continue_report_) return false;
  if (consume) continue_report_ = false;
  return true;
}

int ThreadGroup::TakeParentNotification(int* status) {
  // Checked at every turn of every task's loop: no lock unless one is due.
  if (!notification_due_.load(std::memory_order_acquire)) return 0;
  absl::MutexLock l(&mu_);
  notification_due_.store(false, std::memory_order_relaxed);
  int why = parent_notification_;
  *status = parent_notification_status_;
  parent_notification_ = 0;
  return why;
}

bool ThreadGroup::TaskStopped() {
  absl::MutexLock l(&mu_);
  stopped_tasks_++;
  bool was = stopped_;
  MaybeCompleteStopLocked();
  return !was && stopped_;
}

void ThreadGroup::TaskResumed() {
  absl::MutexLock l(&mu_);
  stopped_tasks_--;
}

void ThreadGroup::MaybeCompleteStopLocked() {
  if (!stop_requested_.load() || stopped_ || exiting()) return;
  if (stopped_tasks_ < static_cast<int>(tasks_.size())) return;
  stopped_ = true;
  stop_report_ = true;
  continue_report_ = false;
  SetParentNotificationLocked(CLD_STOPPED, stop_signo_);
}

void ThreadGroup::SetParentNotificationLocked(int why, int status) {
  parent_notification_ = why;
  parent_notification_status_ = status;
  notification_due_.store(true, std::memory_order_release);
}

// ---------------------------------------------------------------------------
// Task

void Task::NotifyParentIfDue() {
  int status = 0;
  int why = tg_->TakeParentNotification(&status);
  if (why != 0) kernel_->NotifyParentJobControl(*tg_, why, status);
}

bool Task::DoJobControl() {
  NotifyParentIfDue();
  if (!tg_->stop_requested()) return false;
  tg_->TaskStopped();
  NotifyParentIfDue();  // this task completed the stop
  {
    absl::MutexLock l(&mu_);
    // Only SIGKILL (and the group's exit, which interrupts) gets a stopped
    // task going; other signals wait for the continue.
    while (tg_->stop_requested() && !interrupt_.load() && !killed_.load() &&
           (pending_.load() & SigBit(SIGKILL)) == 0) {
      if (kernel_->world_stop_requested()) {
        // A stopped task is at a safe point for a checkpoint too (the
        // Poke of the stop signals cv_ under mu_: the request is seen).
        mu_.Unlock();
        kernel_->ParkForWorldStop(*this);
        mu_.Lock();
        continue;
      }
      cv_.Wait(&mu_);
    }
    uint64_t drained;
    (void)!read(interrupt_fd_.get(), &drained, sizeof(drained));
  }
  tg_->TaskResumed();
  NotifyParentIfDue();  // continued: the first task to run tells
  return true;
}

void Task::PrepareToResume() {
  if (restart_if_no_handler_) {
    // Back to the syscall instruction, with its number in rax (or
    // restart_syscall's, which resumes from the restart block).
    cpu_.regs.rip -= 2;
    cpu_.regs.rax = restart_with_block_ ? SYS_restart_syscall
                                        : cpu_.regs.orig_rax;
  }
  // The restart decisions are about the call that just returned; once
  // the task goes back to application code they are stale.
  restart_if_no_handler_ = false;
  restart_with_block_ = false;
  restart_pending_ = false;
  // Whatever a Poke asked for has been looked at. A Poke after this also
  // interrupts the platform context, so the next Switch returns at once.
  if (poked_.exchange(false, std::memory_order_acq_rel) && !interrupt_.load()) {
    uint64_t drained;
    (void)!read(interrupt_fd_.get(), &drained, sizeof(drained));
  }
}

SigSet Task::GroupDirectedPending(SigSet set) {
  absl::MutexLock l(&mu_);
  SigSet out = 0;
  SigSet hit = pending_.load() & set;
  for (int signo = 1; signo <= kNumSignals; signo++) {
    if ((hit & SigBit(signo)) && pending_info_[signo - 1].group_directed) {
      out |= SigBit(signo);
    }
  }
  return out;
}

SigSet Task::PendingForThreadAndGroup() {
  SigSet out = pending_.load();
  for (const auto& other : tg_->Tasks()) {
    if (other.get() != this) out |= other->GroupDirectedPending(~0ull);
  }
  return out;
}

bool Task::CanDequeueSignal(SigSet set) {
  if (pending_.load() & set) return true;
  for (const auto& other : tg_->Tasks()) {
    if (other.get() != this && other->GroupDirectedPending(set) != 0) return true;
  }
  return false;
}

int Task::DequeueSignal(SigSet set, siginfo_t* info) {
  // This thread's own signals first, then the process's: Linux's
  // dequeue_signal looks at the private queue before the shared one.
  SigSet mine = pending_.load() & set & ~GroupDirectedPending(set);
  int signo = mine != 0 ? TakePendingSignal(mine & -mine, info) : 0;
  if (signo != 0) return signo;
  signo = TakePendingSignal(set, info);
  if (signo != 0) return signo;
  for (const auto& other : tg_->Tasks()) {
    if (other.get() == this) continue;
    SigSet shared = other->GroupDirectedPending(set);
    if (shared == 0) continue;
    // Taken only if it is still there (another reader may have won).
    signo = other->TakePendingSignal(shared & -shared, info);
    if (signo != 0) return signo;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Kernel

void Kernel::NotifyParentJobControl(ThreadGroup& g, int why, int status) {
  absl::MutexLock l(&mu_);
  ThreadGroup* p = g.parent;
  if (p == nullptr || g.zombie) return;
  // Linux's do_notify_parent_cldstop: SIGCHLD (whatever the exit signal)
  // unless the parent ignores it or asked for no stop notifications.
  SigAction a = p->GetAction(SIGCHLD);
  if (a.handler != kSigIgn && (a.flags & SA_NOCLDSTOP) == 0) {
    siginfo_t info{};
    info.si_signo = SIGCHLD;
    info.si_code = why;
    info.si_pid = g.tgid();
    info.si_status = status;
    SignalGroupInfo(*p, info);
  }
  p->child_events.Notify(POLLIN);
}

bool Kernel::IsPgrpOrphaned(ThreadGroup& g) {
  absl::MutexLock l(&mu_);
  const pid_t pgid = g.pgid;
  for (const auto& [id, m] : groups_) {
    if (m->zombie || m->pgid != pgid) continue;
    ThreadGroup* p = m->parent;
    // The sandbox's init is an ordinary parent here: only the host's init
    // is exempt on Linux (is_global_init), and it is not in the sandbox.
    if (p != nullptr && p->pgid != pgid && p->sid == m->sid) return false;
  }
  return true;
}

}  // namespace sandboxd::kernel
