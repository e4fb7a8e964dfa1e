// SIGIO delivery (Linux's send_sigio): the kernel's fs::AsyncSignaller.
//
// A file posts its signals under its own locks (fs/file_async.h), which
// may include the tasklist lock (a process's exit releases its files under
// Kernel::mu_): the dispatcher only queues them and has the timer thread
// send them, holding no lock, right away. So a SIGIO reaches its owner
// moments after the event rather than before the notifying call returns.

#include <signal.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "sentry/fs/file_async.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/task.h"
#include "sentry/kernel/thread_group.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::kernel {

namespace {

// sigio_perm: the owner's setter (its uids at F_SETOWN) may signal `p`.
bool SigioPerm(const fs::AsyncOwner& o, const Task& p) {
  std::shared_ptr<const fs::Credentials> c = p.creds();
  return o.euid == 0 || o.euid == c->suid || o.euid == c->ruid ||
         o.uid == c->suid || o.uid == c->ruid;
}

siginfo_t InfoFor(const fs::AsyncSignal& s) {
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  if (s.sig == 0) {
    info.si_signo = SIGIO;
    info.si_code = SI_KERNEL;  // SEND_SIG_PRIV
  } else {
    info.si_signo = s.sig;
    info.si_code = s.reason;
    info.si_band = s.band;
    info.si_fd = s.fd;
  }
  return info;
}

class SigioDispatcher final : public fs::AsyncSignaller,
                              public waiter::Timer,
                              public std::enable_shared_from_this<SigioDispatcher> {
 public:
  explicit SigioDispatcher(Kernel* k) : k_(k) {}

  void Post(const fs::AsyncSignal& s) override {
    bool arm;
    {
      absl::MutexLock l(&mu_);
      arm = queue_.empty();
      queue_.push_back(s);
    }
    if (arm) {
      waiter::TimerThread::Get().Arm(shared_from_this(), CLOCK_MONOTONIC, 0);
    }
  }

  void Expired() override {
    std::vector<fs::AsyncSignal> todo;
    Kernel* k;
    {
      absl::MutexLock l(&mu_);
      todo.swap(queue_);
      k = k_;
    }
    if (k == nullptr) return;
    for (const fs::AsyncSignal& s : todo) k->SendAsyncSignal(s);
  }

  bool DetachIf(const Kernel* k) {
    absl::MutexLock l(&mu_);
    if (k != nullptr && k_ != k) return false;
    k_ = nullptr;
    queue_.clear();
    return true;
  }

 private:
  absl::Mutex mu_;
  Kernel* k_ ABSL_GUARDED_BY(mu_);
  std::vector<fs::AsyncSignal> queue_ ABSL_GUARDED_BY(mu_);
};

// The installed dispatcher and those it replaced: never freed, since a
// poster or the timer thread may still hold one (one per Kernel, and a
// process normally has one Kernel).
absl::Mutex g_mu(absl::kConstInit);
std::vector<std::shared_ptr<SigioDispatcher>>& Dispatchers() {
  static auto* d = new std::vector<std::shared_ptr<SigioDispatcher>>();
  return *d;
}

}  // namespace

void Kernel::InstallAsyncSignaller() {
  absl::MutexLock l(&g_mu);
  for (const auto& d : Dispatchers()) d->DetachIf(nullptr);
  Dispatchers().push_back(std::make_shared<SigioDispatcher>(this));
  fs::SetAsyncSignaller(Dispatchers().back().get());
}

void Kernel::UninstallAsyncSignaller() {
  absl::MutexLock l(&g_mu);
  if (!Dispatchers().empty() && Dispatchers().back()->DetachIf(this)) {
    fs::SetAsyncSignaller(nullptr);
  }
}

bool Kernel::PidInUse(pid_t pid) {
  absl::MutexLock l(&mu_);
  if (tasks_.count(pid) != 0) return true;
  for (const auto& [id, g] : groups_) {
    if (!g->zombie && (g->pgid == pid || g->sid == pid)) return true;
  }
  return false;
}

void Kernel::SendAsyncSignal(const fs::AsyncSignal& s) {
  const siginfo_t info = InfoFor(s);
  const int signo = info.si_signo;
  switch (s.owner.type) {
    case F_OWNER_TID: {
      std::shared_ptr<Task> t = FindTask(s.owner.pid);
      if (t != nullptr && SigioPerm(s.owner, *t)) t->SendSignalInfo(info);
      return;
    }
    case F_OWNER_PID: {
      std::shared_ptr<ThreadGroup> g = FindGroup(s.owner.pid);
      if (g == nullptr || g->exiting()) return;
      std::vector<std::shared_ptr<Task>> tasks = g->Tasks();
      if (tasks.empty() || !SigioPerm(s.owner, *tasks.front())) return;
      SignalGroupInfo(*g, info);
      return;
    }
    case F_OWNER_PGRP: {
      std::vector<std::shared_ptr<ThreadGroup>> groups;
      {
        absl::MutexLock l(&mu_);
        for (const auto& [id, g] : groups_) {
          if (!g->zombie && g->pgid == s.owner.pid) groups.push_back(g);
        }
      }
      for (const auto& g : groups) {
        if (g->exiting()) continue;
        std::vector<std::shared_ptr<Task>> tasks = g->Tasks();
        if (tasks.empty() || !SigioPerm(s.owner, *tasks.front())) continue;
        SignalGroupInfo(*g, info);
      }
      return;
    }
    default:
      (void)signo;
      return;
  }
}

}  // namespace sandboxd::kernel
