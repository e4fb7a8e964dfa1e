#include "sentry/state/kernel_state.h"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"
#include "sentry/state/tty_state.h"
#include "sentry/vdso/vdso_mapping.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::state {

using kernel::IntervalTimer;
using kernel::Kernel;
using kernel::SigSet;
using kernel::Task;
using kernel::ThreadGroup;
using kernel::TimerClock;
using kernel::TimerTarget;

namespace {

constexpr int kNumRegs = sizeof(platform::Regs) / sizeof(uint64_t);
static_assert(sizeof(platform::Regs) == kNumRegs * sizeof(uint64_t));
// The x86-64 `syscall` instruction (0f 05): a restarted call re-executes it.
constexpr uint64_t kSyscallInsnLen = 2;

int64_t AddSat(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::numeric_limits<int64_t>::max();
  return r;
}

void SaveUsage(const kernel::Usage& u, pb::Usage* r) {
  r->set_user_ns(u.user_ns);
  r->set_sys_ns(u.sys_ns);
  r->set_minflt(u.minflt);
  r->set_majflt(u.majflt);
  r->set_nvcsw(u.nvcsw);
  r->set_nivcsw(u.nivcsw);
  r->set_maxrss_kb(u.maxrss_kb);
}

kernel::Usage LoadUsage(const pb::Usage& r) {
  kernel::Usage u;
  u.user_ns = r.user_ns();
  u.sys_ns = r.sys_ns();
  u.minflt = r.minflt();
  u.majflt = r.majflt();
  u.nvcsw = r.nvcsw();
  u.nivcsw = r.nivcsw();
  u.maxrss_kb = r.maxrss_kb();
  return u;
}

void SaveCredentials(const fs::Credentials& c, pb::Credentials* r) {
  SBX_SAVED_SIZE(fs::Credentials, 104);
  r->set_ruid(c.ruid);
  r->set_euid(c.euid);
  r->set_suid(c.suid);
  r->set_fsuid(c.fsuid);
  r->set_rgid(c.rgid);
  r->set_egid(c.egid);
  r->set_sgid(c.sgid);
  r->set_fsgid(c.fsgid);
  for (uint32_t g : c.groups) r->add_groups(g);
  r->set_cap_inheritable(c.cap_inheritable);
  r->set_cap_permitted(c.cap_permitted);
  r->set_cap_effective(c.cap_effective);
  r->set_cap_bounding(c.cap_bounding);
  r->set_cap_ambient(c.cap_ambient);
  r->set_securebits(c.securebits);
}

std::shared_ptr<const fs::Credentials> LoadCredentials(const pb::Credentials& r) {
  auto c = std::make_shared<fs::Credentials>();
  c->ruid = r.ruid();
  c->euid = r.euid();
  c->suid = r.suid();
  c->fsuid = r.fsuid();
  c->rgid = r.rgid();
  c->egid = r.egid();
  c->sgid = r.sgid();
  c->fsgid = r.fsgid();
  c->groups.assign(r.groups().begin(), r.groups().end());
  std::sort(c->groups.begin(), c->groups.end());
  c->groups.erase(std::unique(c->groups.begin(), c->groups.end()),
                  c->groups.end());
  c->cap_inheritable = r.cap_inheritable() & fs::kAllCaps;
  c->cap_permitted = r.cap_permitted() & fs::kAllCaps;
  c->cap_effective = r.cap_effective() & fs::kAllCaps;
  c->cap_bounding = r.cap_bounding() & fs::kAllCaps;
  c->cap_ambient = r.cap_ambient() & fs::kAllCaps;
  c->securebits = r.securebits();
  return c;
}

// An image from before per-task credentials: every task was root; the
// group kept PR_SET_KEEPCAPS and the bounding set.
std::shared_ptr<const fs::Credentials> OldImageCredentials(
    const pb::ThreadGroup& g) {
  auto c = std::make_shared<fs::Credentials>();
  if (g.cap_bset() != 0) c->cap_bounding = g.cap_bset() & fs::kAllCaps;
  if (g.keepcaps()) c->securebits |= fs::kSecbitKeepCaps;
  return c;
}

void SaveSched(const kernel::Task::SchedState& s, pb::Sched* r) {
  SBX_SAVED_SIZE(kernel::Task::SchedState, 176);
  r->set_nice(s.nice);
  r->set_ioprio(s.ioprio);
  r->set_policy(s.policy);
  r->set_rt_priority(s.rt_priority);
  r->set_reset_on_fork(s.reset_on_fork);
  r->set_dl_runtime(s.dl_runtime);
  r->set_dl_deadline(s.dl_deadline);
  r->set_dl_period(s.dl_period);
  // Every CPU (the default) is saved as no words.
  if (s.affinity != kernel::Task::SchedState::AllCpus()) {
    for (uint64_t w : s.affinity) r->add_affinity(w);
  }
}

kernel::Task::SchedState LoadSched(const pb::Sched& r) {
  kernel::Task::SchedState s;
  s.nice = std::clamp(r.nice(), -20, 19);
  s.ioprio = r.ioprio();
  s.policy = r.policy();
  s.rt_priority = r.rt_priority();
  s.reset_on_fork = r.reset_on_fork();
  s.dl_runtime = r.dl_runtime();
  s.dl_deadline = r.dl_deadline();
  s.dl_period = r.dl_period();
  if (r.affinity_size() == kernel::Task::SchedState::kAffinityWords) {
    for (int i = 0; i < r.affinity_size(); i++) s.affinity[i] = r.affinity(i);
  }
  return s;
}

void SaveExecImage(const loader::ExecImage& image, pb::ExecImage* r) {
  r->set_comm(image.comm);
  r->set_exe(image.exe);
  r->set_arg_start(image.arg_start);
  r->set_arg_end(image.arg_end);
  r->set_env_start(image.env_start);
  r->set_env_end(image.env_end);
  for (uint64_t v : image.auxv) r->add_auxv(v);
}

loader::ExecImage LoadExecImage(const pb::ExecImage& r) {
  loader::ExecImage image;
  image.comm = r.comm();
  image.exe = r.exe();
  image.arg_start = r.arg_start();
  image.arg_end = r.arg_end();
  image.env_start = r.env_start();
  image.env_end = r.env_end();
  image.auxv.assign(r.auxv().begin(), r.auxv().end());
  return image;
}

bool ValidPid(int64_t pid) { return pid > 0 && pid <= kernel::kMaxPid; }

}  // namespace

// ---------------------------------------------------------------------------
// Save

absl::StatusOr<uint64_t> KernelState::SaveTimer(Saver& s, IntervalTimer& timer) {
  SBX_SAVED_SIZE(kernel::IntervalTimer, 208);
  SBX_SAVED_SIZE(kernel::TimerTarget, 64);
  return s.Save<IntervalTimer, pb::IntervalTimer>(
      &timer, s.state().mutable_timers(), [&](pb::IntervalTimer* r) {
        const TimerClock& c = timer.clock_;
        const TimerTarget& t = timer.target_;
        r->set_clock_kind(static_cast<int>(c.kind));
        r->set_host_clock(c.host);
        r->set_cpu_which(static_cast<int>(c.which));
        if (c.kind == TimerClock::Kind::kProcessCpu) {
          if (auto g = c.group.lock()) r->set_clock_pid(g->tgid());
        } else if (c.kind == TimerClock::Kind::kThreadCpu) {
          if (auto task = c.task.lock()) r->set_clock_pid(task->tid());
        }
        r->set_notify(static_cast<int>(t.notify));
        r->set_signo(t.signo);
        r->set_code(t.code);
        r->set_timerid(t.timerid);
        r->set_value(t.value);
        r->set_posix(t.posix);
        if (auto g = t.group.lock()) r->set_target_tgid(g->tgid());
        if (auto task = t.task.lock()) r->set_target_tid(task->tid());

        absl::MutexLock l(&timer.mu_);
        int64_t remaining = 0, interval = 0;
        timer.GetLocked(c.Now(), &remaining, &interval);
        // An overdue deadline fires at once after the load.
        if (timer.next_ns_ != 0 && remaining <= 0) remaining = 1;
        r->set_remaining_ns(remaining);
        if (timer.abs_realtime_ && timer.next_ns_ != 0) {
          r->set_realtime_deadline_ns(timer.next_ns_);
        }
        r->set_interval_ns(interval);
        r->set_deleted(timer.deleted_);
        r->set_signal_pending(timer.signal_pending_);
        r->set_overrun(timer.overrun_);
        r->set_overrun_last(timer.overrun_last_);
        r->set_queued_current(timer.queued_seq_ == timer.seq_);
        return absl::OkStatus();
      });
}

absl::StatusOr<uint64_t> KernelState::SaveGroup(Saver& s, ThreadGroup& g,
                                                const fs::Vfs& vfs,
                                                MmCheckpointer& mms) {
  SBX_SAVED_SIZE(kernel::ThreadGroup, 2960);
  SBX_SAVED_SIZE(loader::ExecImage, 120);
  SBX_SAVED_SIZE(kernel::ProcessTimers, 112);
  SBX_SAVED_SIZE(kernel::SigAction, 32);
  SBX_SAVED_SIZE(kernel::Usage, 56);
  return s.Save<ThreadGroup, pb::ThreadGroup>(
      &g, s.state().mutable_thread_groups(),
      [&](pb::ThreadGroup* r) -> absl::Status {
        // What the tasklist lock guards, copied out; the references are
        // saved without it (they take fs and mm locks).
        ThreadGroup* parent;
        std::vector<std::shared_ptr<ThreadGroup>> children;
        std::shared_ptr<fs::tty::Terminal> ctty;
        {
          absl::MutexLock l(&g.kernel_->mu_);
          ctty = g.ctty;
          parent = g.parent;
          children = g.children;
          r->set_pgid(g.pgid);
          r->set_sid(g.sid);
          r->set_zombie(g.zombie);
          r->set_reaped(g.reaped);
          r->set_exit_signal(g.exit_signal);
          r->set_did_exec(g.did_exec);
          SaveExecImage(g.image, r->mutable_image());
          r->set_pdeath_signal(g.pdeath_signal);
          r->set_child_subreaper(g.child_subreaper);
        }
        r->set_tgid(g.tgid());
        r->set_age_ns(std::max<int64_t>(0, kernel::MonotonicNanos() - g.start_ns));
        r->set_oom_score_adj(g.oom_score_adj.load());
        r->set_dumpable(g.dumpable.load());
        r->set_no_new_privs(g.no_new_privs.load());
        r->set_exiting(g.exiting());
        r->set_leader_exit_code(g.leader_exit_code());
        r->set_stop_requested(g.stop_requested());
        r->set_notification_due(g.notification_due_.load());
        {
          absl::MutexLock l(&g.mu_);
          for (const kernel::SigAction& a : g.actions_) {
            pb::SigAction* ra = r->add_actions();
            ra->set_handler(a.handler);
            ra->set_flags(a.flags);
            ra->set_restorer(a.restorer);
            ra->set_mask(a.mask);
          }
          for (const rlimit& lim : g.limits_) {
            pb::Rlimit* rl = r->add_rlimits();
            rl->set_cur(lim.rlim_cur);
            rl->set_max(lim.rlim_max);
          }
          r->set_exit_code(g.status_.code);
          r->set_exit_signo(g.status_.signo);
          r->set_exit_core(g.status_.core);
          r->set_stop_signo(g.stop_signo_);
          r->set_stopped(g.stopped_);
          r->set_stop_report(g.stop_report_);
          r->set_continue_report(g.continue_report_);
          r->set_parent_notification(g.parent_notification_);
          r->set_parent_notification_status(g.parent_notification_status_);
          SaveUsage(g.dead_usage_, r->mutable_dead_usage());
          SaveUsage(g.children_usage_, r->mutable_children_usage());
          r->set_maxrss_kb(g.maxrss_kb_);
        }
        // Timers.
        std::vector<std::shared_ptr<IntervalTimer>> itimers(3);
        std::vector<std::pair<int, std::shared_ptr<IntervalTimer>>> posix;
        {
          kernel::ProcessTimers& pt = g.timers_;
          absl::MutexLock l(&pt.mu_);
          for (int i = 0; i < 3; i++) itimers[i] = pt.itimers_[i];
          for (const auto& [id, timer] : pt.posix_) posix.emplace_back(id, timer);
          r->set_next_timer_id(pt.next_id_);
        }
        for (const auto& timer : itimers) {
          uint64_t id = 0;
          if (timer != nullptr) {
            ASSIGN_OR_RETURN(id, SaveTimer(s, *timer));
          }
          r->add_itimers(id);
        }
        for (const auto& [timer_id, timer] : posix) {
          ASSIGN_OR_RETURN(uint64_t id, SaveTimer(s, *timer));
          pb::PosixTimer* pt = r->add_posix_timers();
          pt->set_id(timer_id);
          pt->set_timer(id);
        }
        // Address space, descriptors, filesystem context.
        if (g.mm_ != nullptr) {
          ASSIGN_OR_RETURN(
              uint64_t mm_id,
              (s.Save<mm::MM, pb::Mm>(
                  g.mm_.get(), s.state().mutable_mms(),
                  [&](pb::Mm* m) { return mms.SaveMm(s, *g.mm_, m); })));
          r->set_mm(mm_id);
        }
        if (ctty != nullptr) {
          uint64_t pty = 0;
          bool console = false;
          absl::Status st = TtyState::SaveTerminal(s, ctty, &pty, &console);
          if (!st.ok()) {
            return absl::Status(st.code(), absl::StrCat("process ", g.tgid(),
                                                        ": ", st.message()));
          }
          r->set_ctty(pty);
          r->set_ctty_console(console);
        }
        ASSIGN_OR_RETURN(uint64_t fds,
                         Annotate(FsState::SaveFdTable(s, vfs, g.fds_),
                                  absl::StrCat("process ", g.tgid())));
        r->set_fd_table(fds);
        ASSIGN_OR_RETURN(uint64_t fsc, FsState::SaveFsContext(s, vfs, g.fs_));
        r->set_fs_context(fsc);
        // The process tree (ids are assigned before a record is filled, so
        // parent and children referring back end the recursion).
        if (parent != nullptr) {
          ASSIGN_OR_RETURN(uint64_t pid, SaveGroup(s, *parent, vfs, mms));
          r->set_parent(pid);
        }
        for (const auto& c : children) {
          ASSIGN_OR_RETURN(uint64_t cid, SaveGroup(s, *c, vfs, mms));
          r->add_children(cid);
        }
        return absl::OkStatus();
      });
}

absl::StatusOr<uint64_t> KernelState::SaveTask(Saver& s, Task& t,
                                               const fs::Vfs& vfs,
                                               MmCheckpointer& mms) {
  // Task fields of one call in progress, not state: syscall_progress_,
  // stopped_with_progress_ and the *_now_ ones (a task is saved parked,
  // between calls or inside a wait that parks); syscall_deadline_, or
  // syscall_cpu_clock_ and syscall_cpu_target_, are saved as the time
  // left (syscall_timeout_left_ns), resume_moved_ as
  // syscall_resume_moved, and both rips are the loaded rip. host_waiting_
  // and wake_fd_ are the Sentry's own (a host wait in progress and its
  // eventfd, made again on first use), as interrupt_fd_ is.
  SBX_SAVED_SIZE(kernel::Task, 14912);
  SBX_SAVED_SIZE(kernel::Task::PendingInfo, 152);
  SBX_SAVED_SIZE(kernel::RestartBlock, 24);
  SBX_SAVED_SIZE(kernel::TaskCpuTime, 88);
  SBX_SAVED_SIZE(platform::Regs, 216);
  SBX_SAVED_SIZE(platform::CpuState, 4352);
  return s.Save<Task, pb::Task>(
      &t, s.state().mutable_tasks(), [&](pb::Task* r) -> absl::Status {
        {
          absl::MutexLock l(&t.vfork_mu_);
          r->set_vfork_child(t.vforked_ && !t.vfork_done_);
        }
        r->set_tid(t.tid());
        ASSIGN_OR_RETURN(uint64_t gid, SaveGroup(s, *t.tg_, vfs, mms));
        r->set_group(gid);
        {
          absl::MutexLock l(&t.kernel_->mu_);
          r->set_thread_comm(t.thread_comm);
          r->set_mempolicy_mode(t.mempolicy.mode);
          r->set_mempolicy_flags(t.mempolicy.flags);
          r->set_mempolicy_nodes(t.mempolicy.nodes);
          SaveSched(t.sched, r->mutable_sched());
        }
        SaveCredentials(*t.creds(), r->mutable_creds());

        t.SyncFp();  // the task is stopped: its vCPU holds no newer state
        platform::CpuState cpu = t.cpu_;
        SigSet mask = t.mask_.load();
        bool restore_mask = t.restore_mask_;
        bool restart_pending = t.restart_pending_;
        bool restart_if_no_handler = t.restart_if_no_handler_;
        bool in_syscall = t.in_syscall_.load(std::memory_order_acquire);
        if (Task* child = t.vfork_waiting_for_) {
          // Parked in its vfork's wait for the child: the call is over
          // but for that wait, and is not executed again (that would
          // make a second child). Saved as returned with the child's
          // tid, and waiting for it still unless it has exec'd or exited.
          cpu.regs.rax = static_cast<uint64_t>(child->tid());
          in_syscall = false;
          restart_pending = false;
          restart_if_no_handler = false;
          absl::MutexLock l(&child->vfork_mu_);
          if (child->vforked_ && !child->vfork_done_) {
            r->set_vfork_wait_tid(child->tid());
          }
        }
        if (in_syscall) {
          // Blocked in a syscall: after the load it executes the syscall
          // instruction again with the same arguments (the argument
          // registers are intact while a handler runs), as Linux does for
          // -ERESTARTSYS. A temporary mask (sigsuspend, ppoll, pselect6,
          // epoll_pwait) is undone: the call sets it again.
          cpu.regs.rip -= kSyscallInsnLen;
          cpu.regs.rax = cpu.regs.orig_rax;
          if (restore_mask) {
            mask = t.saved_mask_;
            restore_mask = false;
          }
          restart_pending = false;
          restart_if_no_handler = false;
          // A relative timeout goes on from what is left of it, not from
          // the whole timeout again.
          if (t.syscall_deadline_ != absl::InfiniteFuture()) {
            r->set_syscall_timeout_saved(true);
            r->set_syscall_timeout_left_ns(absl::ToInt64Nanoseconds(
                std::max(absl::ZeroDuration(),
                         t.syscall_deadline_ - absl::Now())));
          } else if (t.syscall_cpu_target_ >= 0) {
            // On a CPU clock: the CPU time left (its process or thread
            // gone: the sleep ends at once when executed again).
            const int64_t now = t.syscall_cpu_clock_.Now();
            r->set_syscall_timeout_saved(true);
            r->set_syscall_timeout_left_ns(
                now < 0 ? 0 : std::max<int64_t>(0, t.syscall_cpu_target_ - now));
          }
        }
        r->set_in_syscall(in_syscall);
        if (!in_syscall) r->set_syscall_resume_moved(t.resume_moved_);
        uint64_t regs[kNumRegs];
        std::memcpy(regs, &cpu.regs, sizeof(regs));
        for (uint64_t v : regs) r->add_regs(v);
        r->set_fp_size(cpu.fp_size);
        r->set_fp(std::string(reinterpret_cast<const char*>(cpu.fp),
                              std::min<size_t>(cpu.fp_size, sizeof(cpu.fp))));
        r->set_signal_mask(mask);
        r->set_restore_mask(restore_mask);
        r->set_saved_mask(t.saved_mask_);
        r->set_restart_pending(restart_pending);
        r->set_restart_if_no_handler(restart_if_no_handler);
        r->set_restart_with_block(in_syscall ? false : t.restart_with_block_);
        if (t.restart_block_.kind == kernel::RestartBlock::Kind::kSleep) {
          const kernel::RestartBlock& b = t.restart_block_;
          pb::RestartBlock* rb = r->mutable_restart_block();
          rb->set_clock(b.clock);
          rb->set_rem_addr(b.rem_addr);
          if (b.clock >= 0) {
            struct timespec now;
            waiter::ClockGettime(b.clock, &now);
            rb->set_remaining_ns(b.deadline_ns -
                                 (now.tv_sec * 1000000000LL + now.tv_nsec));
          } else {
            rb->set_cpu_deadline_ns(b.deadline_ns);
          }
        }
        r->set_altstack_sp(t.altstack_.sp);
        r->set_altstack_flags(t.altstack_.flags);
        r->set_altstack_size(t.altstack_.size);
        r->set_clear_child_tid(t.clear_child_tid_);
        r->set_robust_list(t.robust_list_);
        r->set_robust_len(t.robust_len_);
        r->set_age_ns(std::max<int64_t>(0, kernel::MonotonicNanos() - t.start_ns_));
        r->set_exit_thread(t.exit_thread_);
        r->set_exit_code(t.exit_code_);

        kernel::Usage u = t.cputime_.Read(kernel::MonotonicNowNs());
        SaveUsage(u, r->mutable_cpu());

        // Pending signals, copied out under the task's lock; their timers
        // are saved without it (lock order: timer before task).
        std::vector<std::pair<int, Task::PendingInfo>> pending;
        {
          absl::MutexLock l(&t.mu_);
          SigSet bits = t.pending_.load();
          for (int signo = 1; signo <= kernel::kNumSignals; signo++) {
            if (bits & kernel::SigBit(signo)) {
              pending.emplace_back(signo, t.pending_info_[signo - 1]);
            }
          }
        }
        for (const auto& [signo, pi] : pending) {
          pb::PendingSignal* p = r->add_pending();
          p->set_signo(signo);
          p->set_queued(pi.queued);
          p->set_group_directed(pi.group_directed);
          p->set_siginfo(std::string(reinterpret_cast<const char*>(&pi.info),
                                     sizeof(pi.info)));
          if (pi.source != nullptr) {
            auto* timer = dynamic_cast<IntervalTimer*>(pi.source.get());
            if (timer == nullptr) {
              return absl::UnimplementedError(absl::StrCat(
                  "task ", t.tid(), ": signal ", signo,
                  " has a source other than a timer"));
            }
            ASSIGN_OR_RETURN(uint64_t id, SaveTimer(s, *timer));
            p->set_timer(id);
          }
        }
        return absl::OkStatus();
      });
}

absl::Status KernelState::SaveKernel(Saver& s, Kernel& k, const fs::Vfs& vfs,
                                     MmCheckpointer& mms) {
  // world_stop_ is not state: a save runs inside a stop, a load starts
  // without one. Nor is the OOM killer's last victim and its counts (a
  // restored sandbox starts with none killed). Nor are the limits an
  // update changed (max_tasks_, max_cpus_, memory_limit_) nor
  // container_init_ (set from the spec at each start and restore): a restored
  // sandbox has its restore spec's, as runc's restore has config.json's.
  SBX_SAVED_SIZE(kernel::Kernel, 584);
  std::vector<std::shared_ptr<ThreadGroup>> groups;
  std::vector<std::shared_ptr<Task>> tasks;
  pid_t next_tid;
  {
    absl::MutexLock l(&k.mu_);
    next_tid = k.next_tid_;
    for (const auto& [tgid, g] : k.groups_) groups.push_back(g);
    for (const auto& [tid, t] : k.tasks_) tasks.push_back(t);
  }
  pb::Kernel* r = s.state().mutable_kernel();
  r->set_next_tid(next_tid);
  // Groups first, then their tasks in the group's order (leader first), so
  // that a load rebuilds the same order.
  size_t saved_tasks = 0;
  for (const auto& g : groups) {
    ASSIGN_OR_RETURN(uint64_t id, SaveGroup(s, *g, vfs, mms));
    r->add_thread_groups(id);
    for (const auto& t : g->Tasks()) {
      ASSIGN_OR_RETURN(uint64_t tid, SaveTask(s, *t, vfs, mms));
      r->add_tasks(tid);
      saved_tasks++;
    }
  }
  if (saved_tasks != tasks.size()) {
    return absl::InternalError(absl::StrCat(
        tasks.size(), " tasks, but ", saved_tasks, " in thread groups"));
  }
  for (const auto& [nr, count] : k.UnimplementedCounts()) {
    pb::UnimplementedCount* c = r->add_unimplemented();
    c->set_nr(nr);
    c->set_count(count);
  }
  // The clocks last, after every time left (timers, timerfds, sleeps,
  // restart blocks) was measured: the load measures those again from
  // these readings (LoadClocks), so that nothing fires early by the time
  // the save took (it is late by that much at the most).
  r->set_uptime_ns(std::max<int64_t>(0, kernel::MonotonicNanos() - k.boot_ns_));
  r->set_monotonic_ns(waiter::ClockNowNs(CLOCK_MONOTONIC));
  r->set_boottime_ns(waiter::ClockNowNs(CLOCK_BOOTTIME));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Load

absl::StatusOr<std::shared_ptr<IntervalTimer>> KernelState::LoadTimer(
    Loader& l, Kernel& k, uint64_t id) {
  return l.Load<IntervalTimer, pb::IntervalTimer>(
      id, l.state().timers(), "timer",
      [&](const pb::IntervalTimer& r)
          -> absl::StatusOr<std::shared_ptr<IntervalTimer>> {
        TimerClock c;
        if (r.clock_kind() < 0 || r.clock_kind() > 2 || r.cpu_which() < 0 ||
            r.cpu_which() > 2 || r.notify() < 0 || r.notify() > 2 ||
            r.signo() < 0 || r.signo() > kernel::kNumSignals ||
            r.remaining_ns() < 0 || r.interval_ns() < 0) {
          return absl::InvalidArgumentError("bad timer record");
        }
        c.kind = static_cast<TimerClock::Kind>(r.clock_kind());
        c.host = r.host_clock();
        c.which = static_cast<kernel::CpuWhich>(r.cpu_which());
        if (c.kind == TimerClock::Kind::kProcessCpu) {
          c.group = k.FindGroup(r.clock_pid());
        } else if (c.kind == TimerClock::Kind::kThreadCpu) {
          c.task = k.FindTask(r.clock_pid());
        }
        TimerTarget t;
        t.notify = static_cast<TimerTarget::Notify>(r.notify());
        t.signo = r.signo();
        t.code = r.code();
        t.timerid = r.timerid();
        t.value = r.value();
        t.posix = r.posix();
        if (r.target_tgid() != 0) t.group = k.FindGroup(r.target_tgid());
        if (r.target_tid() != 0) t.task = k.FindTask(r.target_tid());
        auto timer = std::make_shared<IntervalTimer>(std::move(c), std::move(t));
        absl::MutexLock lock(&timer->mu_);
        // Armed by ArmTimers once everything is built.
        timer->deleted_ = r.deleted();
        timer->interval_ns_ = r.interval_ns();
        timer->signal_pending_ = r.signal_pending();
        timer->overrun_ = r.overrun();
        timer->overrun_last_ = r.overrun_last();
        timer->seq_ = 1;
        timer->queued_seq_ = r.queued_current() ? 1 : 0;
        return timer;
      });
}

absl::Status KernelState::NewGroup(Loader& l, Kernel& k, uint64_t id) {
  auto g = l.Load<ThreadGroup, pb::ThreadGroup>(
      id, l.state().thread_groups(), "thread group",
      [&](const pb::ThreadGroup& r)
          -> absl::StatusOr<std::shared_ptr<ThreadGroup>> {
        if (!ValidPid(r.tgid())) {
          return absl::InvalidArgumentError(absl::StrCat("bad tgid ", r.tgid()));
        }
        // Its address space, descriptors and FsContext come in LoadGroup.
        auto g = std::make_shared<ThreadGroup>(&k, r.tgid(), nullptr, nullptr,
                                               nullptr);
        absl::MutexLock lock(&k.mu_);
        if (!k.groups_.emplace(r.tgid(), g).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("tgid ", r.tgid(), " twice"));
        }
        // What the tasklist lock guards, set now: procfs files that the
        // descriptor tables open again at load read it (comm, ids).
        g->pgid = r.pgid();
        g->sid = r.sid();
        g->zombie = r.zombie();
        g->reaped = r.reaped();
        g->exit_signal = r.exit_signal();
        g->did_exec = r.did_exec();
        g->image = LoadExecImage(r.image());
        g->pdeath_signal = r.pdeath_signal();
        g->child_subreaper = r.child_subreaper();
        return g;
      });
  if (g.ok() && *g == nullptr) return absl::InvalidArgumentError("thread group 0");
  return g.status();
}

absl::Status KernelState::LoadGroup(Loader& l, Kernel& k, fs::Vfs& vfs,
                                    MmCheckpointer& mms, uint64_t id) {
  // Made by NewGroup.
  const pb::ThreadGroup& r = l.state().thread_groups(id - 1);
  std::shared_ptr<ThreadGroup> g = k.FindGroup(r.tgid());
  if (g == nullptr) return absl::InternalError("group not made");
  if (r.actions_size() != kernel::kNumSignals ||
      r.rlimits_size() != RLIM_NLIMITS || r.itimers_size() > 3) {
    return absl::InvalidArgumentError(
        "wrong number of signal actions, limits or interval timers");
  }
  std::shared_ptr<mm::MM> mm;
  if (r.mm() != 0) {
    ASSIGN_OR_RETURN(mm, (l.Load<mm::MM, pb::Mm>(
                             r.mm(), l.state().mms(), "mm",
                             [&](const pb::Mm& m) {
                               return mms.LoadMm(l, k, m);
                             })));
  }
  // Before the descriptors: a procfs file among them (/proc/self/maps
  // open across the checkpoint) generates its text at load, from the
  // process's address space.
  g->mm_ = mm;
  ASSIGN_OR_RETURN(auto fds, FsState::LoadFdTable(l, vfs, r.fd_table()));
  ASSIGN_OR_RETURN(auto fsc, FsState::LoadFsContext(l, vfs, r.fs_context()));
  std::shared_ptr<fs::tty::Terminal> ctty;
  if (r.ctty() != 0) {
    ASSIGN_OR_RETURN(ctty, TtyState::LoadPty(l, r.ctty()));
  } else if (r.ctty_console()) {
    ASSIGN_OR_RETURN(ctty, TtyState::LoadConsole(l));
  }
  {
    absl::MutexLock lock(&k.mu_);
    g->ctty = std::move(ctty);
  }
  // Ages go on from the load: a process that had run 5 s shows 5 s.
  g->start_ns = kernel::MonotonicNanos() - std::max<int64_t>(0, r.age_ns());
  g->mm_ = std::move(mm);
  g->fds_ = std::move(fds);
  g->fs_ = std::move(fsc);
  g->oom_score_adj.store(r.oom_score_adj());
  g->dumpable.store(r.dumpable());
  g->no_new_privs.store(r.no_new_privs());
  g->exiting_.store(r.exiting());
  g->leader_exit_code_.store(r.leader_exit_code());
  g->stop_requested_.store(r.stop_requested());
  g->notification_due_.store(r.notification_due());
  {
    absl::MutexLock lock(&g->mu_);
    for (int i = 0; i < kernel::kNumSignals; i++) {
      const pb::SigAction& a = r.actions(i);
      g->actions_[i] = kernel::SigAction{a.handler(), a.flags(), a.restorer(),
                                         a.mask()};
    }
    for (int i = 0; i < RLIM_NLIMITS; i++) {
      g->limits_[i].rlim_cur = r.rlimits(i).cur();
      g->limits_[i].rlim_max = r.rlimits(i).max();
    }
    g->ApplyMemoryLimitsLocked();  // RLIMIT_AS and RLIMIT_DATA to its mm
    g->status_ = kernel::ExitStatus{r.exit_code(), r.exit_signo(), r.exit_core()};
    g->stop_signo_ = r.stop_signo();
    // The tasks reach their stop point again after the start; the stop is
    // not reported twice (it completed already).
    g->stopped_ = r.stopped();
    g->stopped_tasks_ = 0;
    g->stop_report_ = r.stop_report();
    g->continue_report_ = r.continue_report();
    g->parent_notification_ = r.parent_notification();
    g->parent_notification_status_ = r.parent_notification_status();
    g->dead_usage_ = LoadUsage(r.dead_usage());
    g->children_usage_ = LoadUsage(r.children_usage());
    g->maxrss_kb_ = r.maxrss_kb();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Task>> KernelState::LoadTask(Loader& l,
                                                            Kernel& k,
                                                            uint64_t id) {
  return l.Load<Task, pb::Task>(
      id, l.state().tasks(), "task",
      [&](const pb::Task& r) -> absl::StatusOr<std::shared_ptr<Task>> {
        if (!ValidPid(r.tid())) {
          return absl::InvalidArgumentError(absl::StrCat("bad tid ", r.tid()));
        }
        if (r.regs_size() != kNumRegs ||
            r.fp_size() > platform::kMaxFpStateSize ||
            r.fp().size() != r.fp_size()) {
          return absl::InvalidArgumentError("bad CPU state");
        }
        // Built by the first pass (NewGroup); not built here.
        if (r.group() == 0 ||
            r.group() > static_cast<uint64_t>(l.state().thread_groups_size())) {
          return absl::InvalidArgumentError("bad thread group");
        }
        std::shared_ptr<ThreadGroup> g =
            k.FindGroup(l.state().thread_groups(r.group() - 1).tgid());
        if (g == nullptr) return absl::InvalidArgumentError("bad thread group");
        if (g->zombie) {
          return absl::InvalidArgumentError("a task in a zombie group");
        }
        // Through the platform, as the kernel creates every task.
        ASSIGN_OR_RETURN(std::unique_ptr<platform::Context> ctx,
                         k.platform().NewContext());
        auto t = std::make_shared<Task>(&k, r.tid(), g, std::move(ctx));
        uint64_t regs[kNumRegs];
        for (int i = 0; i < kNumRegs; i++) regs[i] = r.regs(i);
        std::memcpy(&t->cpu_.regs, regs, sizeof(regs));
        t->cpu_.fp_size = r.fp_size();
        std::memcpy(t->cpu_.fp, r.fp().data(), r.fp().size());
        t->set_signal_mask(r.signal_mask());
        t->restore_mask_ = r.restore_mask();
        t->saved_mask_ = r.saved_mask();
        t->restart_pending_ = r.restart_pending();
        t->restart_if_no_handler_ = r.restart_if_no_handler();
        t->restart_with_block_ = r.restart_with_block();
        if (r.syscall_resume_moved() > 0) {
          if (r.in_syscall()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "task ", r.tid(), ": a split syscall inside a syscall"));
          }
          t->resume_moved_ = r.syscall_resume_moved();
          t->resume_moved_rip_ = t->cpu_.regs.rip;
        }
        if (r.syscall_timeout_saved()) {
          if (!r.in_syscall()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "task ", r.tid(), ": a syscall timeout outside a syscall"));
          }
          t->resumed_timeout_pending_ = true;
          t->resumed_timeout_ = absl::Nanoseconds(
              std::max<int64_t>(r.syscall_timeout_left_ns(), 0));
          t->resumed_timeout_rip_ = t->cpu_.regs.rip;
        }
        if (r.has_restart_block()) {
          const pb::RestartBlock& rb = r.restart_block();
          kernel::RestartBlock b;
          b.kind = kernel::RestartBlock::Kind::kSleep;
          b.clock = rb.clock();
          b.rem_addr = rb.rem_addr();
          if (rb.clock() >= 0) {
            struct timespec now;
            if (waiter::ClockGettime(rb.clock(), &now) != 0) {
              return absl::DataLossError(absl::StrCat(
                  "task ", r.tid(), ": restart block on unknown clock ", rb.clock()));
            }
            b.deadline_ns = now.tv_sec * 1000000000LL + now.tv_nsec +
                            std::max<int64_t>(rb.remaining_ns(), 0);
          } else {
            b.deadline_ns = rb.cpu_deadline_ns();
          }
          t->restart_block_ = b;
        }
        t->altstack_.sp = r.altstack_sp();
        t->altstack_.flags = r.altstack_flags();
        t->altstack_.size = r.altstack_size();
        t->clear_child_tid_ = r.clear_child_tid();
        t->robust_list_ = r.robust_list();
        t->robust_len_ = r.robust_len();
        t->start_ns_ = kernel::MonotonicNanos() - std::max<int64_t>(0, r.age_ns());
        t->exit_thread_ = r.exit_thread();
        t->exit_code_ = r.exit_code();
        t->vforked_ = r.vfork_child();
        // CPU time goes on from the saved totals (the task is idle until
        // it starts). cpu_since_ is the old host thread's clock and the
        // floors the old readers': a loaded task starts without them.
        kernel::TaskCpuTime& cpu = t->cputime_;
        cpu.user_ns_.store(r.cpu().user_ns());
        cpu.sys_ns_.store(r.cpu().sys_ns());
        cpu.minflt_.store(r.cpu().minflt());
        cpu.nvcsw_.store(r.cpu().nvcsw());
        g->AddTask(t.get());
        absl::MutexLock lock(&k.mu_);
        t->thread_comm = r.thread_comm();
        t->mempolicy = {r.mempolicy_mode(), r.mempolicy_flags(),
                        r.mempolicy_nodes()};
        t->sched = LoadSched(r.sched());
        t->SetCredentials(
            r.has_creds() ? LoadCredentials(r.creds())
                          : OldImageCredentials(
                                l.state().thread_groups(r.group() - 1)));
        if (!k.tasks_.emplace(r.tid(), t).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("tid ", r.tid(), " twice"));
        }
        k.live_tasks_++;
        return t;
      });
}

absl::Status KernelState::LinkGroup(Loader& l, Kernel& k, uint64_t id) {
  const pb::ThreadGroup& r = l.state().thread_groups(id - 1);
  std::shared_ptr<ThreadGroup> g = k.FindGroup(r.tgid());
  auto group_at = [&](uint64_t gid) -> absl::StatusOr<std::shared_ptr<ThreadGroup>> {
    if (gid == 0 || gid > static_cast<uint64_t>(l.state().thread_groups_size())) {
      return absl::InvalidArgumentError(absl::StrCat("thread group ", gid));
    }
    auto found = k.FindGroup(l.state().thread_groups(gid - 1).tgid());
    if (found == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("thread group ", gid, " is not in the kernel's table"));
    }
    return found;
  };
  ThreadGroup* parent = nullptr;
  if (r.parent() != 0) {
    ASSIGN_OR_RETURN(auto p, group_at(r.parent()));
    parent = p.get();
  }
  std::vector<std::shared_ptr<ThreadGroup>> children;
  for (uint64_t c : r.children()) {
    ASSIGN_OR_RETURN(auto child, group_at(c));
    children.push_back(std::move(child));
  }
  {
    absl::MutexLock lock(&k.mu_);
    g->parent = parent;
    g->children = std::move(children);
  }
  // Timers (their targets are groups and tasks, all built by now).
  std::shared_ptr<IntervalTimer> itimers[3];
  for (int i = 0; i < r.itimers_size(); i++) {
    ASSIGN_OR_RETURN(itimers[i], LoadTimer(l, k, r.itimers(i)));
  }
  std::map<int, std::shared_ptr<IntervalTimer>> posix;
  for (const pb::PosixTimer& p : r.posix_timers()) {
    ASSIGN_OR_RETURN(auto timer, LoadTimer(l, k, p.timer()));
    if (timer == nullptr || !posix.emplace(p.id(), timer).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("POSIX timer ", p.id(), ": missing or twice"));
    }
  }
  kernel::ProcessTimers& pt = g->timers_;
  absl::MutexLock lock(&pt.mu_);
  for (int i = 0; i < 3; i++) pt.itimers_[i] = std::move(itimers[i]);
  pt.posix_ = std::move(posix);
  pt.next_id_ = r.next_timer_id();
  return absl::OkStatus();
}

absl::Status KernelState::LinkTask(Loader& l, Kernel& k, uint64_t id) {
  ASSIGN_OR_RETURN(std::shared_ptr<Task> t, LoadTask(l, k, id));
  const pb::Task& r = l.state().tasks(id - 1);
  if (r.vfork_wait_tid() != 0) {
    // The child is waited for before this task runs (Task::Run).
    std::shared_ptr<Task> child;
    {
      absl::MutexLock lock(&k.mu_);
      auto it = k.tasks_.find(r.vfork_wait_tid());
      if (it != k.tasks_.end()) child = it->second;
    }
    if (child == nullptr || !child->vforked_ ||
        child->group_ptr() == t->group_ptr()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", r.tid(), ": waits for vfork child ", r.vfork_wait_tid(),
          ", which is not a vfork child of another process"));
    }
    t->restored_vfork_child_ = std::move(child);
  }
  for (const pb::PendingSignal& p : r.pending()) {
    if (p.signo() < 1 || p.signo() > kernel::kNumSignals ||
        p.siginfo().size() != sizeof(siginfo_t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("task ", r.tid(), ": bad pending signal"));
    }
    Task::PendingInfo pi;
    pi.queued = p.queued();
    pi.group_directed = p.group_directed();
    std::memcpy(&pi.info, p.siginfo().data(), sizeof(pi.info));
    if (p.timer() != 0) {
      ASSIGN_OR_RETURN(auto timer, LoadTimer(l, k, p.timer()));
      pi.source = std::move(timer);
    }
    absl::MutexLock lock(&t->mu_);
    t->pending_info_[p.signo() - 1] = std::move(pi);
    t->pending_.fetch_or(kernel::SigBit(p.signo()));
  }
  return absl::OkStatus();
}

absl::Status KernelState::ArmTimers(Loader& l, Kernel& k) {
  for (int i = 0; i < l.state().timers_size(); i++) {
    const pb::IntervalTimer& r = l.state().timers(i);
    ASSIGN_OR_RETURN(auto timer, LoadTimer(l, k, i + 1));
    if (r.deleted() || r.remaining_ns() == 0) continue;
    absl::MutexLock lock(&timer->mu_);
    int64_t now = timer->clock_.Now();
    if (now < 0) continue;  // its process or thread is gone
    if (r.realtime_deadline_ns() > 0 &&
        timer->clock_.kind == TimerClock::Kind::kHost &&
        timer->clock_.host == CLOCK_REALTIME) {
      // Absolute on the real time: the same deadline (past: fires now).
      timer->abs_realtime_ = true;
      timer->next_ns_ = r.realtime_deadline_ns();
      timer->ArmLocked(now);
      continue;
    }
    timer->next_ns_ = AddSat(now, r.remaining_ns());
    timer->ArmLocked(now);
  }
  return absl::OkStatus();
}

void KernelState::LoadClocks(const Loader& l, Kernel& k) {
  const pb::Kernel& r = l.state().kernel();
  // Read as the host's (no offset) so that a second load in one process
  // sets the same offsets as the first.
  auto host_ns = [](clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  if (r.monotonic_ns() <= 0 || r.boottime_ns() <= 0) return;  // not saved
  waiter::SetClockOffsets(r.monotonic_ns() - host_ns(CLOCK_MONOTONIC),
                          r.boottime_ns() - host_ns(CLOCK_BOOTTIME));
  if (vdso::Vdso* v = k.options().vdso) v->timekeeper().Republish();
}

absl::Status KernelState::LoadKernel(Loader& l, Kernel& k, fs::Vfs& vfs,
                                     MmCheckpointer& mms) {
  {
    absl::MutexLock lock(&k.mu_);
    if (!k.tasks_.empty() || !k.groups_.empty()) {
      return absl::FailedPreconditionError(
          "a kernel is loaded into a new Kernel without tasks");
    }
  }
  const pb::Kernel& r = l.state().kernel();
  if (!ValidPid(r.next_tid())) {
    return absl::InvalidArgumentError(absl::StrCat("bad next tid ", r.next_tid()));
  }
  // Groups, then tasks, then what links them (tree, timers, signals).
  k.boot_ns_ = kernel::MonotonicNanos() - std::max<int64_t>(0, r.uptime_ns());
  // Every group exists before anything that may name one is loaded (a
  // signalfd names the process that made it), then each is filled in.
  for (uint64_t id : r.thread_groups()) RETURN_IF_ERROR(NewGroup(l, k, id));
  // Procfs files among the descriptors are opened again last, once what
  // they look up is loaded (a /proc/PID/fdinfo/N, PID's table and N in
  // it): Loader::set_defer_proc_fds.
  l.set_defer_proc_fds(true);
  absl::Cleanup no_defer = [&l] { l.set_defer_proc_fds(false); };
  for (uint64_t id : r.thread_groups()) {
    RETURN_IF_ERROR(LoadGroup(l, k, vfs, mms, id));
  }
  for (uint64_t id : r.tasks()) RETURN_IF_ERROR(LoadTask(l, k, id).status());
  for (uint64_t id : r.thread_groups()) RETURN_IF_ERROR(LinkGroup(l, k, id));
  for (uint64_t id : r.tasks()) RETURN_IF_ERROR(LinkTask(l, k, id));
  l.set_defer_proc_fds(false);
  RETURN_IF_ERROR(Annotate(FsState::LoadDeferredFds(l, vfs),
                           "procfs files among the descriptors"));
  {
    absl::MutexLock lock(&k.mu_);
    k.next_tid_ = r.next_tid();
  }
  {
    absl::MutexLock lock(&k.unimpl_mu_);
    for (const pb::UnimplementedCount& c : r.unimplemented()) {
      k.unimplemented_[c.nr()] = c.count();
    }
  }
  return ArmTimers(l, k);
}

}  // namespace sandboxd::state
