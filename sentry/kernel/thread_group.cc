#include "sentry/kernel/thread_group.h"

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
#include "sentry/kernel/kernel.h"

namespace sandboxd::kernel {

ThreadGroup::ThreadGroup(Kernel* k, pid_t tgid, std::shared_ptr<mm::MM> mm,
                         std::shared_ptr<fs::FdTable> fds,
                         std::shared_ptr<fs::FsContext> fs)
    : kernel_(k), tgid_(tgid), mm_(std::move(mm)), fds_(std::move(fds)),
      fs_(std::move(fs)) {
  absl::MutexLock l(&mu_);
  // Limits start as the host gave them to the Sentry, like a process
  // started from the same shell.
  for (int r = 0; r < RLIM_NLIMITS; r++) {
    getrlimit(static_cast<__rlimit_resource>(r), &limits_[r]);
  }
  ApplyMemoryLimitsLocked();
}

void ThreadGroup::ApplyMemoryLimitsLocked() {
  if (mm_ != nullptr) {
    mm_->SetRlimits(limits_[RLIMIT_AS].rlim_cur, limits_[RLIMIT_DATA].rlim_cur);
  }
}

void ThreadGroup::set_mm(std::shared_ptr<mm::MM> mm) {
  mm_ = std::move(mm);
  absl::MutexLock l(&mu_);
  ApplyMemoryLimitsLocked();
}

SigAction ThreadGroup::GetAction(int signo) {
  absl::MutexLock l(&mu_);
  return actions_[signo - 1];
}

void ThreadGroup::SetAction(int signo, const SigAction& a) {
  absl::MutexLock l(&mu_);
  actions_[signo - 1] = a;
}

rlimit ThreadGroup::GetLimit(int resource) {
  absl::MutexLock l(&mu_);
  return limits_[resource];
}

void ThreadGroup::SetLimit(int resource, const rlimit& r) {
  {
    absl::MutexLock l(&mu_);
    limits_[resource] = r;
    if (resource == RLIMIT_AS || resource == RLIMIT_DATA) {
      ApplyMemoryLimitsLocked();
    }
  }
  if (resource == RLIMIT_NOFILE) fds_->set_max_fds(r.rlim_cur);
}

void ThreadGroup::Exit(ExitStatus status) {
  std::vector<std::shared_ptr<Task>> tasks;
  {
    absl::MutexLock l(&mu_);
    if (exiting_.load()) return;
    status_ = status;
    exiting_.store(true, std::memory_order_release);
    tasks = TasksLocked();
  }
  for (const auto& t : tasks) t->Interrupt();
}

ExitStatus ThreadGroup::exit_status() {
  absl::MutexLock l(&mu_);
  return status_;
}

void ThreadGroup::AddTask(Task* t) {
  absl::MutexLock l(&mu_);
  tasks_.push_back(t);
}

size_t ThreadGroup::NumTasks() {
  absl::MutexLock l(&mu_);
  return tasks_.size();
}

bool ThreadGroup::RemoveTask(Task* t) {
  Usage final_usage = t->cputime().Read(MonotonicNowNs());
  absl::MutexLock l(&mu_);
  for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
    if (*it == t) {
      tasks_.erase(it);
      dead_usage_ += final_usage;
      break;
    }
  }
  // The others may all be stopped already.
  if (!tasks_.empty()) MaybeCompleteStopLocked();
  return tasks_.empty();
}

std::vector<std::shared_ptr<Task>> ThreadGroup::Tasks() {
  absl::MutexLock l(&mu_);
  return TasksLocked();
}

std::vector<std::shared_ptr<Task>> ThreadGroup::TasksLocked() {
  std::vector<std::shared_ptr<Task>> out;
  out.reserve(tasks_.size());
  // A task in the list is alive: the kernel drops its reference only after
  // RemoveTask.
  for (Task* t : tasks_) {
    if (auto p = t->weak_from_this().lock()) out.push_back(std::move(p));
  }
  return out;
}

}  // namespace sandboxd::kernel
