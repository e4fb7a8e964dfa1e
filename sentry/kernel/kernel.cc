#include "sentry/kernel/kernel.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace sandboxd::kernel {

namespace {

// The options of the memfd tmpfs: no limits but the memory file's, and an
// anonymous device number of its own, as Linux's internal shm mount has.
fs::TmpFsOptions MemfdOptions() {
  fs::TmpFsOptions o;
  o.dev = 0x10;
  return o;
}

}  // namespace

Kernel::Kernel(std::unique_ptr<mm::MemoryFile> mf,
               std::unique_ptr<platform::Platform> platform,
               SyscallTable* syscalls, KernelOptions opts)
    : mf_(std::move(mf)),
      memfd_sb_(std::make_shared<fs::TmpFsSuperblock>(
          mf_.get(), MemfdOptions())),
      platform_(std::move(platform)),
      syscalls_(syscalls),
      opts_(std::move(opts)) {
  if (opts_.thread_cpu_clocks) platform_->MeasureAppCpu(true);
  InstallAsyncSignaller();
}

Kernel::~Kernel() {
  UninstallAsyncSignaller();
  std::vector<std::shared_ptr<Task>> done;
  {
    absl::MutexLock l(&mu_);
    done.swap(exited_);
  }
  for (auto& t : done) t->Join();
}

absl::Status Kernel::CheckTaskLimitLocked() {
  const uint64_t max = max_tasks();
  if (max != 0 && static_cast<uint64_t>(live_tasks_) >= max) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the sandbox's limit of ", max, " tasks"));
  }
  return absl::OkStatus();
}

pid_t Kernel::AllocTid() {
  // Ids in use: live tasks, and thread groups (zombies keep theirs until
  // reaped; a process group or session id stays in use while it has
  // members, which are live groups).
  while (tasks_.count(next_tid_) != 0 || groups_.count(next_tid_) != 0) {
    next_tid_ = next_tid_ >= kMaxPid ? 1 : next_tid_ + 1;
  }
  pid_t tid = next_tid_;
  next_tid_ = next_tid_ >= kMaxPid ? 1 : next_tid_ + 1;
  return tid;
}

absl::StatusOr<Task*> Kernel::CreateInit(std::shared_ptr<mm::MM> mm,
                                         std::shared_ptr<fs::FdTable> fds,
                                         std::shared_ptr<fs::FsContext> fs,
                                         const platform::CpuState& cpu) {
  auto ctx = platform_->NewContext();
  if (!ctx.ok()) return ctx.status();
  absl::MutexLock l(&mu_);
  RETURN_IF_ERROR(CheckTaskLimitLocked());
  pid_t tid = AllocTid();
  auto tg = std::make_shared<ThreadGroup>(this, tid, std::move(mm),
                                          std::move(fds), std::move(fs));
  tg->pgid = tid;
  tg->sid = tid;
  auto task = std::make_shared<Task>(this, tid, tg, std::move(*ctx));
  task->cpu_ = cpu;
  Task* t = task.get();
  tg->AddTask(t);
  groups_[tid] = tg;
  tasks_[tid] = std::move(task);
  live_tasks_++;
  return t;
}

absl::StatusOr<Task*> Kernel::CreateThread(Task& parent,
                                           const platform::CpuState& cpu) {
  auto ctx = platform_->NewContext();
  if (!ctx.ok()) return ctx.status();
  absl::MutexLock l(&mu_);
  if (parent.group().exiting()) {
    return absl::FailedPreconditionError("the thread group is exiting");
  }
  RETURN_IF_ERROR(CheckTaskLimitLocked());
  // The platform's bound on the threads of one address space (clone then
  // fails with EAGAIN, as at a host limit).
  if (const uint32_t max = platform_->MaxThreadsPerAddressSpace();
      max != 0 && parent.group().NumTasks() >= max) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the platform's limit of ", max, " threads in one process"));
  }
  pid_t tid = AllocTid();
  auto task =
      std::make_shared<Task>(this, tid, parent.group_ptr(), std::move(*ctx));
  task->cpu_ = cpu;
  // A new thread inherits the signal mask; its alternate stack is cleared
  // (clone with CLONE_VM).
  task->mask_.store(parent.signal_mask());
  task->mempolicy = parent.mempolicy;
  task->SetCredentials(parent.creds());
  task->sched = parent.sched.ForChild();
  Task* t = task.get();
  parent.group().AddTask(t);
  tasks_[tid] = std::move(task);
  live_tasks_++;
  return t;
}

ExitStatus Kernel::RunRestored() {
  std::shared_ptr<ThreadGroup> init = FindGroup(1);
  std::vector<std::shared_ptr<Task>> tasks;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [tid, t] : tasks_) tasks.push_back(t);
  }
  for (auto& t : tasks) {
    if (absl::Status s = t->Start(); !s.ok()) {
      fprintf(stderr, "sentry: restore: %s\n", s.ToString().c_str());
      t->ExitUnstarted();
    }
  }
  std::vector<std::shared_ptr<Task>> done;
  {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* live) { return *live == 0; }, &live_tasks_));
    done.swap(exited_);
  }
  for (auto& t : done) t->Join();
  return init != nullptr ? init->exit_status() : ExitStatus{};
}

ExitStatus Kernel::RunUntilInitExits(
    Task* init, const std::function<void(const ExitStatus&)>& on_exit) {
  std::shared_ptr<ThreadGroup> tg = init->group_ptr();
  if (absl::Status s = init->Start(); !s.ok()) {
    fprintf(stderr, "sentry: init: %s\n", s.ToString().c_str());
    init->ExitUnstarted();
  }
  std::vector<std::shared_ptr<Task>> done;
  {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* live) { return *live == 0; }, &live_tasks_));
    done.swap(exited_);
  }
  const ExitStatus st = tg->exit_status();
  if (on_exit) on_exit(st);
  for (auto& t : done) t->Join();
  return st;
}

void Kernel::TaskExited(Task* t) {
  std::vector<std::shared_ptr<Task>> joinable;
  std::vector<std::shared_ptr<mm::MM>> released;
  {
    absl::MutexLock l(&mu_);
    auto it = tasks_.find(t->tid());
    if (it == tasks_.end()) return;
    std::shared_ptr<Task> owned = std::move(it->second);
    tasks_.erase(it);
    std::shared_ptr<ThreadGroup> g = owned->group_ptr();
    if (g->Tasks().empty()) GroupExitedLocked(g);
    // Tasks that exited before this one have left their host threads (or
    // are about to): join them here so that threads do not pile up.
    joinable.swap(exited_);
    exited_.push_back(std::move(owned));
    released.swap(released_mms_);
    live_tasks_--;
    // A checkpoint's stop counts live tasks against parked ones.
    absl::MutexLock w(&world_stop_.mu);
    world_stop_.stopped_cv.SignalAll();
  }
  // Outside the lock and after live_tasks_ went down (RunUntilInitExits
  // may already be reporting the exit): the stub processes are killed and
  // reaped here, on this task's thread.
  released.clear();
  for (auto& j : joinable) j->Join();
}

void Kernel::AbandonTask(Task* t) {
  std::shared_ptr<Task> owned;
  std::shared_ptr<ThreadGroup> gone;
  {
    absl::MutexLock l(&mu_);
    auto it = tasks_.find(t->tid());
    if (it == tasks_.end()) return;
    owned = std::move(it->second);
    tasks_.erase(it);
    live_tasks_--;
    ThreadGroup& g = owned->group();
    if (g.RemoveTask(t) && g.tgid() == t->tid()) {
      // A process made for this task alone: nobody saw it.
      gone = owned->group_ptr();
      groups_.erase(g.tgid());
      if (ThreadGroup* p = g.parent) {
        auto& c = p->children;
        for (auto ci = c.begin(); ci != c.end(); ++ci) {
          if (ci->get() == &g) {
            c.erase(ci);
            break;
          }
        }
      }
      g.parent = nullptr;
    }
  }
  // Outside the lock: the process's address space (its stub process) and
  // files go with the last references, dropped here.
  owned.reset();
  gone.reset();
}

bool Kernel::OutOfMemory() {
  const uint64_t limit = mf_->limit();
  struct Candidate {
    std::shared_ptr<ThreadGroup> g;
    std::shared_ptr<mm::MM> mm;
    int adj;
  };
  std::vector<Candidate> candidates;
  {
    absl::MutexLock l(&mu_);
    if (!oom_victim_.expired() &&
        MonotonicNanos() - oom_victim_ns_ < kOomVictimGrace) {
      return true;  // its memory is on its way back
    }
    for (const auto& [tgid, g] : groups_) {
      if (g->zombie || g->exiting() || g->mm_ptr() == nullptr) continue;
      const int adj = g->oom_score_adj.load();
      if (adj <= -1000) continue;
      candidates.push_back({g, g->mm_ptr(), adj});
    }
  }
  // The sizes without Kernel::mu_ (each takes its MM's lock).
  std::shared_ptr<ThreadGroup> victim;
  uint64_t rss = 0;
  int64_t best = 0;
  for (const Candidate& c : candidates) {
    const uint64_t bytes = c.mm->BackedBytes();
    // Linux's oom_badness: pages, plus adj thousandths of the limit.
    int64_t points = static_cast<int64_t>(bytes / mm::kPageSize) +
                     static_cast<int64_t>(c.adj) *
                         static_cast<int64_t>(limit / mm::kPageSize) / 1000;
    if (points < 1) points = 1;
    if (points > best) {
      best = points;
      victim = c.g;
      rss = bytes;
    }
  }
  if (victim == nullptr) return false;
  std::string comm;
  {
    absl::MutexLock l(&mu_);
    if (!oom_victim_.expired() &&
        MonotonicNanos() - oom_victim_ns_ < kOomVictimGrace) {
      return true;  // another task's call chose one meanwhile
    }
    if (victim->zombie || victim->exiting()) return true;
    oom_victim_ = victim->mm_ptr();
    oom_victim_ns_ = MonotonicNanos();
    comm = victim->image.comm;
    oom_kills_.fetch_add(1, std::memory_order_relaxed);
    if (victim->tgid() == 1) {
      init_oom_killed_.store(true, std::memory_order_release);
    }
  }
  fprintf(stderr,
          "sentry: out of memory: the sandbox's memory limit (%llu bytes "
          "for the application): killed process %d (%s), %llu KiB resident\n",
          static_cast<unsigned long long>(limit), victim->tgid(), comm.c_str(),
          static_cast<unsigned long long>(rss >> 10));
  SignalGroup(*victim, SIGKILL, 0);
  return true;
}

std::shared_ptr<Task> Kernel::FindTask(pid_t tid) {
  absl::MutexLock l(&mu_);
  auto it = tasks_.find(tid);
  return it == tasks_.end() ? nullptr : it->second;
}

std::shared_ptr<ThreadGroup> Kernel::FindGroup(pid_t tgid) {
  absl::MutexLock l(&mu_);
  auto it = groups_.find(tgid);
  return it == groups_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ThreadGroup>> Kernel::ThreadGroups() {
  absl::MutexLock l(&mu_);
  std::vector<std::shared_ptr<ThreadGroup>> out;
  out.reserve(groups_.size());
  for (const auto& [pid, g] : groups_) out.push_back(g);
  return out;
}

void Kernel::WithTasklistLock(const std::function<void()>& fn) {
  absl::MutexLock l(&mu_);
  fn();
}

void Kernel::CountUnimplemented(uint64_t nr) {
  absl::MutexLock l(&unimpl_mu_);
  unimplemented_[nr]++;
}

std::map<uint64_t, uint64_t> Kernel::UnimplementedCounts() {
  absl::MutexLock l(&unimpl_mu_);
  return unimplemented_;
}

}  // namespace sandboxd::kernel
