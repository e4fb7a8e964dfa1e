// Processes: the tree of thread groups, fork/vfork, exit and wait,
// process groups and sessions. The tree is guarded by Kernel::mu_, Linux's
// tasklist_lock.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "sentry/kernel/kernel.h"

namespace sandboxd::kernel {

// ---------------------------------------------------------------------------
// ThreadGroup

std::shared_ptr<mm::MM> ThreadGroup::ReleaseResources() {
  // The address space (its stub process) and the open files go with the
  // last task; a zombie keeps only its exit status, ids and usage. Its
  // timers stop. The files close here, so that a reader of the group's
  // pipes sees their end before anyone hears of the exit.
  timers_.DeleteAll();
  NoteMaxRss();
  fds_.reset();
  return std::move(mm_);
}

void ThreadGroup::InheritFrom(ThreadGroup& parent) {
  std::array<SigAction, kNumSignals> actions;
  std::array<rlimit, RLIM_NLIMITS> limits;
  {
    absl::MutexLock l(&parent.mu_);
    actions = parent.actions_;
    limits = parent.limits_;
  }
  absl::MutexLock l(&mu_);
  actions_ = actions;
  limits_ = limits;
  ApplyMemoryLimitsLocked();
  dumpable.store(parent.dumpable.load());
  no_new_privs.store(parent.no_new_privs.load());
}

void ThreadGroup::ResetHandlersForExec() {
  absl::MutexLock l(&mu_);
  for (SigAction& a : actions_) {
    if (a.handler != kSigIgn) a = SigAction{};
  }
}

// ---------------------------------------------------------------------------
// vfork

void Task::VforkDone() {
  if (!vforked_) return;
  vforked_ = false;
  absl::MutexLock l(&vfork_mu_);
  vfork_done_ = true;
}

void Task::WaitVforkDone(Task& parent) {
  // `parent` is the calling task; it sleeps here, using no CPU.
  parent.cputime().StartBlocking(MonotonicNowNs(), parent.CpuNow());
  parent.vfork_waiting_for_ = this;
  {
    absl::MutexLock l(&vfork_mu_);
    // Like Linux's killable wait: signals do not end it, the parent's exit
    // does (checked a few times a second).
    while (!vfork_done_ && !parent.group().exiting()) {
      if (kernel_->world_stop_requested()) {
        // A safe point for a checkpoint's stop: the parent is saved as
        // returned from its vfork and waiting for this child
        // (vfork_waiting_for_, sentry/state/README.md); seen within the
        // timeout.
        vfork_mu_.Unlock();
        kernel_->ParkForWorldStop(parent);
        vfork_mu_.Lock();
        continue;
      }
      vfork_mu_.AwaitWithTimeout(absl::Condition(&vfork_done_),
                                 absl::Milliseconds(200));
    }
  }
  parent.vfork_waiting_for_ = nullptr;
  parent.cputime().StopBlocking(MonotonicNowNs(), parent.CpuNow());
}

// ---------------------------------------------------------------------------
// Kernel: the process tree

namespace {

// The SIGCHLD (or other exit signal) a parent gets when `c` ends.
siginfo_t ChildExitInfo(ThreadGroup& c, int signo) {
  ExitStatus st = c.exit_status();
  siginfo_t info{};
  info.si_signo = signo;
  info.si_pid = c.tgid();
  if (st.signo != 0) {
    info.si_code = st.core ? CLD_DUMPED : CLD_KILLED;
    info.si_status = st.signo;
  } else {
    info.si_code = CLD_EXITED;
    info.si_status = st.code;
  }
  return info;
}

}  // namespace

void Kernel::SignalGroup(ThreadGroup& g, int signo, pid_t sender, uid_t uid) {
  siginfo_t info{};
  info.si_signo = signo;
  info.si_code = SI_USER;
  info.si_pid = sender;
  info.si_uid = uid;
  SignalGroupInfo(g, info);
}

bool Kernel::SignalGroupInfo(ThreadGroup& g, const siginfo_t& info,
                             std::shared_ptr<SignalSource> source) {
  const int signo = info.si_signo;
  std::vector<std::shared_ptr<Task>> tasks = g.Tasks();
  if (tasks.empty()) return false;
  Task* target = tasks.front().get();
  for (const auto& c : tasks) {
    if ((c->signal_mask() & SigBit(signo)) == 0) {
      target = c.get();
      break;
    }
  }
  return target->SendSignalInfo(info, /*group_directed=*/true,
                                std::move(source));
}

// `g` is taken by value: callers pass elements of the parent's children
// vector, which this function erases from.
void Kernel::ReapLocked(std::shared_ptr<ThreadGroup> g) {
  if (g->reaped) return;
  g->reaped = true;
  if (g->parent != nullptr) {
    auto& siblings = g->parent->children;
    for (auto it = siblings.begin(); it != siblings.end(); ++it) {
      if (it->get() == g.get()) {
        siblings.erase(it);
        break;
      }
    }
  }
  auto it = groups_.find(g->tgid());
  if (it != groups_.end() && it->second == g) groups_.erase(it);
}

void Kernel::GroupExitedLocked(const std::shared_ptr<ThreadGroup>& g) {
  if (g->zombie) return;
  g->zombie = true;
  const bool is_init = g->tgid() == 1;
  if (g->sid == g->tgid()) DisassociateTerminalLocked(*g);

  // Children go to the nearest living ancestor that is a child subreaper
  // (prctl PR_SET_CHILD_SUBREAPER), else to init (the sandbox's pid 1);
  // when init itself exits, every other process of the pid namespace is
  // killed, as on Linux.
  std::shared_ptr<ThreadGroup> init;
  auto iit = groups_.find(1);
  if (iit != groups_.end() && !iit->second->zombie) init = iit->second;
  for (ThreadGroup* a = g->parent; a != nullptr && !is_init; a = a->parent) {
    if (a->child_subreaper && !a->zombie && !a->exiting()) {
      auto ait = groups_.find(a->tgid());
      if (ait != groups_.end()) init = ait->second;
      break;
    }
  }
  std::vector<std::shared_ptr<ThreadGroup>> orphans;
  orphans.swap(g->children);
  for (auto& c : orphans) {
    // PR_SET_PDEATHSIG: the child hears of its parent's death.
    if (!c->zombie && c->pdeath_signal != 0) SignalGroup(*c, c->pdeath_signal, 0);
    if (init != nullptr) {
      c->parent = init.get();
      init->children.push_back(c);
      if (c->zombie) {
        SignalGroupInfo(*init, ChildExitInfo(*c, SIGCHLD));
        init->child_events.Notify(POLLIN);
      }
    } else {
      c->parent = nullptr;
      if (c->zombie) {
        ReapLocked(c);
      } else {
        SignalGroup(*c, SIGKILL, 0);
      }
    }
  }
  if (is_init) {
    for (auto& [pid, other] : groups_) {
      if (other != g && !other->zombie) SignalGroup(*other, SIGKILL, 0);
    }
  }
  released_mms_.push_back(g->ReleaseResources());

  ThreadGroup* p = g->parent;
  if (p == nullptr) return;  // init: stays a zombie for RunUntilInitExits
  SigAction a = p->GetAction(SIGCHLD);
  bool ignored = a.handler == kSigIgn;
  if (g->exit_signal > 0 && !(g->exit_signal == SIGCHLD && ignored)) {
    SignalGroupInfo(*p, ChildExitInfo(*g, g->exit_signal));
  }
  p->child_events.Notify(POLLIN);
  // A parent that ignores SIGCHLD (or set SA_NOCLDWAIT) never sees
  // zombies: the child is reaped at once.
  if (g->exit_signal == SIGCHLD && (ignored || (a.flags & SA_NOCLDWAIT))) {
    ReapLocked(g);
  }
}

ExitStatus Kernel::AwaitExit(const std::shared_ptr<ThreadGroup>& g,
                             bool* reaped) {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](ThreadGroup* tg) ABSL_NO_THREAD_SAFETY_ANALYSIS { return tg->zombie; },
      g.get()));
  *reaped = g->parent == nullptr && g->tgid() != 1 && !g->reaped;
  if (*reaped) ReapLocked(g);
  return g->exit_status();
}

absl::StatusOr<Task*> Kernel::CreateProcess(Task& parent,
                                            std::shared_ptr<mm::MM> mm,
                                            std::shared_ptr<fs::FdTable> fds,
                                            std::shared_ptr<fs::FsContext> fs,
                                            int exit_signal,
                                            const platform::CpuState& cpu) {
  auto ctx = platform_->NewContext();
  if (!ctx.ok()) return ctx.status();
  absl::MutexLock l(&mu_);
  ThreadGroup& pg = parent.group();
  if (pg.exiting()) {
    return absl::FailedPreconditionError("the parent is exiting");
  }
  RETURN_IF_ERROR(CheckTaskLimitLocked());
  pid_t tid = AllocTid();
  auto g = std::make_shared<ThreadGroup>(this, tid, std::move(mm),
                                         std::move(fds), std::move(fs));
  g->InheritFrom(pg);
  g->parent = &pg;
  g->pgid = pg.pgid;
  g->sid = pg.sid;
  g->ctty = pg.ctty;
  g->exit_signal = exit_signal;
  // The child runs the parent's image until it execs.
  g->image = pg.image;
  g->oom_score_adj.store(pg.oom_score_adj.load());
  pg.children.push_back(g);
  auto task = std::make_shared<Task>(this, tid, g, std::move(*ctx));
  task->cpu_ = cpu;
  task->mask_.store(parent.signal_mask());
  task->altstack_ = parent.altstack_;
  task->mempolicy = parent.mempolicy;
  task->SetCredentials(parent.creds());
  task->sched = parent.sched.ForChild();
  Task* t = task.get();
  g->AddTask(t);
  groups_[tid] = g;
  tasks_[tid] = std::move(task);
  live_tasks_++;
  return t;
}

int64_t Kernel::WaitChild(Task& t, pid_t pid, bool by_pgid, int options,
                          WaitResult* out) {
  ThreadGroup& me = t.group();
  const bool all = (options & __WALL) != 0;
  const bool clones = (options & __WCLONE) != 0;
  // 1: found (out filled), 0: matching children, none done, -ECHILD: none.
  auto scan = [&](bool reap, WaitResult* res)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> int {
    bool any = false;
    for (const auto& c : me.children) {
      bool match = pid == -1 || (by_pgid ? c->pgid == pid : c->tgid() == pid);
      if (!match) continue;
      // A "clone" child (exit signal other than SIGCHLD) is waited for
      // only with __WCLONE or __WALL, and the others only without
      // __WCLONE (or with __WALL).
      bool is_clone = c->exit_signal != SIGCHLD;
      if (!all && is_clone != clones) continue;
      any = true;
      const bool consume = reap && !(options & WNOWAIT);
      if (!c->zombie) {
        // Job control: a stop, then a continue, each reported once.
        int signo = 0;
        if ((options & WSTOPPED) && c->TakeStopReport(consume, &signo)) {
          *res = WaitResult{};
          res->pid = c->tgid();
          res->stop_signo = signo;
          return 1;
        }
        if ((options & WCONTINUED) && c->TakeContinueReport(consume)) {
          *res = WaitResult{};
          res->pid = c->tgid();
          res->continued = true;
          return 1;
        }
        continue;
      }
      if (!(options & WEXITED)) continue;
      res->pid = c->tgid();
      res->status = c->exit_status();
      res->stop_signo = 0;
      res->continued = false;
      res->usage = c->SelfUsage();
      res->usage += c->ChildrenUsage();
      if (consume) {
        // The parent's children's usage grows when it reaps, as Linux's
        // wait_task_zombie adds to cutime/cstime.
        me.AddChildUsage(res->usage);
        ReapLocked(c);
      }
      return 1;
    }
    return any ? 0 : -ECHILD;
  };
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      int r = scan(true, out);
      if (r == 1) return out->pid;
      if (r < 0) return r;
      if (options & WNOHANG) return 0;
    }
    int r = t.Wait(me.child_events, POLLIN, [&] {
      absl::MutexLock l(&mu_);
      WaitResult ignored;
      return scan(false, &ignored) != 0;
    });
    if (r < 0) return r;
  }
}

pid_t Kernel::ParentOf(ThreadGroup& g) {
  absl::MutexLock l(&mu_);
  return g.parent != nullptr ? g.parent->tgid() : 0;
}

int64_t Kernel::GetPgid(Task& t, pid_t pid) {
  absl::MutexLock l(&mu_);
  if (pid == 0) return t.group().pgid;
  auto it = groups_.find(pid);
  if (it == groups_.end() || it->second->reaped) return -ESRCH;
  return it->second->pgid;
}

int64_t Kernel::GetSid(Task& t, pid_t pid) {
  absl::MutexLock l(&mu_);
  if (pid == 0) return t.group().sid;
  auto it = groups_.find(pid);
  if (it == groups_.end() || it->second->reaped) return -ESRCH;
  return it->second->sid;
}

int64_t Kernel::SetPgid(Task& t, pid_t pid, pid_t pgid) {
  if (pid < 0 || pgid < 0) return -EINVAL;
  absl::MutexLock l(&mu_);
  ThreadGroup& me = t.group();
  ThreadGroup* target = nullptr;
  if (pid == 0 || pid == me.tgid()) {
    target = &me;
  } else {
    for (const auto& c : me.children) {
      if (c->tgid() == pid && !c->zombie) target = c.get();
    }
    if (target == nullptr) return -ESRCH;
    if (target->sid != me.sid) return -EPERM;
    if (target->did_exec) return -EACCES;
  }
  if (pgid == 0) pgid = target->tgid();
  if (target->sid == target->tgid()) return -EPERM;  // a session leader
  if (pgid != target->tgid()) {
    bool exists = false;
    for (const auto& [id, g] : groups_) {
      if (!g->zombie && g->pgid == pgid && g->sid == me.sid) exists = true;
    }
    if (!exists) return -EPERM;
  }
  target->pgid = pgid;
  return 0;
}

int64_t Kernel::SetSid(Task& t) {
  absl::MutexLock l(&mu_);
  ThreadGroup& me = t.group();
  for (const auto& [id, g] : groups_) {
    if (!g->zombie && g->pgid == me.tgid()) return -EPERM;
  }
  me.sid = me.tgid();
  me.pgid = me.tgid();
  me.ctty.reset();  // a new session starts without a controlling terminal
  return me.sid;
}

bool Kernel::MaySignal(Task& sender, Task& target, int signo) {
  if (fs::MaySignal(sender.own_creds(), *target.creds())) return true;
  if (signo != SIGCONT) return false;
  absl::MutexLock l(&mu_);
  return sender.group().sid == target.group().sid;
}

// kill_pgrp_info and kill(-1): 0 if any process got the signal; for a
// process group the last refusal otherwise; kill(-1) ignores refusals
// (Linux returns 0 when every candidate refused).
int64_t Kernel::SignalProcessGroup(Task& sender, pid_t pgid, int signo) {
  absl::MutexLock l(&mu_);
  bool found = false, sent = false;
  const uid_t uid = sender.own_creds().ruid;
  for (const auto& [id, g] : groups_) {
    if (g->zombie) continue;
    if (pgid == -1) {
      if (g->tgid() == 1 || g.get() == &sender.group()) continue;
    } else if (g->pgid != pgid) {
      continue;
    }
    found = true;
    std::vector<std::shared_ptr<Task>> tasks = g->Tasks();
    if (tasks.empty()) continue;
    if (!fs::MaySignal(sender.own_creds(), *tasks.front()->creds()) &&
        !(signo == SIGCONT && sender.group().sid == g->sid)) {
      continue;
    }
    sent = true;
    if (signo != 0) SignalGroup(*g, signo, sender.group().tgid(), uid);
  }
  if (!found) return -ESRCH;
  return sent || pgid == -1 ? 0 : -EPERM;
}

}  // namespace sandboxd::kernel
