// Controlling terminals, foreground process groups and the background
// checks, as Linux's drivers/tty/tty_jobctrl.c. A process's controlling
// terminal is ThreadGroup::ctty (Linux's signal->tty), guarded by
// Kernel::mu_ like the rest of the tree; the terminal's own session and
// foreground group are kept by the Terminal. Kernel::mu_ is taken before
// the terminal's job lock, never after.
#include "sentry/kernel/ctty.h"

#include <errno.h>
#include <signal.h>

#include "sentry/fs/tty/terminal.h"

namespace sandboxd::kernel {

using fs::tty::Terminal;

std::shared_ptr<Terminal> Kernel::ControllingTerminal(Task& t) {
  absl::MutexLock l(&mu_);
  std::shared_ptr<Terminal> tty = t.group().ctty;
  if (tty != nullptr && tty->hung_up()) return nullptr;
  return tty;
}

void Kernel::TerminalOpened(Task& t, const std::shared_ptr<Terminal>& tty) {
  absl::MutexLock l(&mu_);
  ThreadGroup& me = t.group();
  if (me.sid != me.tgid() || tty->session() != 0 || tty->hung_up()) return;
  if (me.ctty != nullptr && !me.ctty->hung_up()) return;
  me.ctty = tty;
  tty->SetSession(me.sid, me.pgid, groups_[me.tgid()]);
}

void Kernel::SetInitTerminal(const std::shared_ptr<Terminal>& tty) {
  absl::MutexLock l(&mu_);
  auto it = groups_.find(1);
  if (it == groups_.end()) return;
  it->second->ctty = tty;
  tty->SetSession(it->second->sid, it->second->pgid, it->second);
}

int64_t Kernel::SetControllingTerminal(Task& t,
                                       const std::shared_ptr<Terminal>& tty,
                                       bool steal) {
  absl::MutexLock l(&mu_);
  ThreadGroup& me = t.group();
  const bool leader = me.sid == me.tgid();
  if (leader && tty->session() == me.sid) return 0;
  if (!leader || (me.ctty != nullptr && !me.ctty->hung_up())) return -EPERM;
  if (tty->hung_up()) return -EIO;
  if (pid_t old = tty->session(); old != 0) {
    // Stealing needs CAP_SYS_ADMIN, which the sandbox's root has in its
    // own namespaces.
    if (!steal) return -EPERM;
    for (auto& [id, g] : groups_) {
      if (g->sid == old && g->ctty == tty) g->ctty.reset();
    }
  }
  me.ctty = tty;
  tty->SetSession(me.sid, me.pgid, groups_[me.tgid()]);
  return 0;
}

int64_t Kernel::DropControllingTerminal(Task& t, Terminal& tty) {
  pid_t fg = 0;
  {
    absl::MutexLock l(&mu_);
    ThreadGroup& me = t.group();
    if (me.ctty.get() != &tty) return -ENOTTY;
    if (me.sid == me.tgid()) {
      // The session leader gives the terminal up for the whole session;
      // its foreground group gets SIGHUP and SIGCONT.
      fg = tty.foreground();
      for (auto& [id, g] : groups_) {
        if (g->sid == me.sid && g->ctty.get() == &tty) g->ctty.reset();
      }
      tty.SetSession(0, 0);
    }
    me.ctty.reset();
  }
  if (fg > 0) {
    SignalPgrp(fg, SIGHUP);
    SignalPgrp(fg, SIGCONT);
  }
  return 0;
}

int64_t Kernel::SetForegroundGroup(Task& t, Terminal& tty, pid_t pgid) {
  absl::MutexLock l(&mu_);
  ThreadGroup& me = t.group();
  if (me.ctty.get() != &tty || tty.session() != me.sid) return -ENOTTY;
  if (pgid < 0) return -EINVAL;
  bool exists = false, same_session = false;
  for (const auto& [id, g] : groups_) {
    if (g->zombie || g->pgid != pgid) continue;
    exists = true;
    if (g->sid == me.sid) same_session = true;
  }
  if (!exists) return -ESRCH;
  if (!same_session) return -EPERM;
  tty.SetForeground(pgid);
  return 0;
}

int Kernel::CheckTerminalAccess(Task& t, Terminal& tty, int signo,
                                bool ignored_ok) {
  pid_t pgid;
  {
    absl::MutexLock l(&mu_);
    ThreadGroup& me = t.group();
    if (me.ctty.get() != &tty) return 0;
    pid_t fg = tty.foreground();
    if (fg == 0 || fg == me.pgid) return 0;
    SigAction a = me.GetAction(signo);
    const bool ignored =
        a.handler == kSigIgn || (t.signal_mask() & SigBit(signo)) != 0;
    if (ignored) return ignored_ok ? 0 : -EIO;
    // An orphaned process group (no member has a parent in another group
    // of the session) must not be stopped: EIO instead.
    bool orphaned = true;
    for (const auto& [id, g] : groups_) {
      if (g->zombie || g->pgid != me.pgid || g->parent == nullptr) continue;
      if (g->parent->pgid != me.pgid && g->parent->sid == me.sid) {
        orphaned = false;
      }
    }
    if (orphaned) return -EIO;
    pgid = me.pgid;
  }
  SignalPgrp(pgid, signo);
  return -EINTR;
}

void Kernel::DisassociateTerminalLocked(ThreadGroup& leader) {
  std::shared_ptr<Terminal> tty = leader.ctty;
  if (tty == nullptr || tty->hung_up() || tty->session() != leader.sid) return;
  const pid_t fg = tty->foreground();
  tty->SetSession(0, 0);
  for (const auto& [id, g] : groups_) {
    if (g->ctty == tty) g->ctty.reset();
    if (fg > 0 && !g->zombie && g->pgid == fg) SignalGroup(*g, SIGHUP, 0);
  }
}

void Kernel::SignalPgrp(pid_t pgid, int signo) {
  absl::MutexLock l(&mu_);
  for (const auto& [id, g] : groups_) {
    if (!g->zombie && g->pgid == pgid) SignalGroup(*g, signo, 0);
  }
}

namespace {

class KernelJobControl final : public fs::tty::JobControl {
 public:
  explicit KernelJobControl(Kernel* k) : k_(k) {}

  void SignalProcessGroup(pid_t pgid, int signo) override {
    k_->SignalPgrp(pgid, signo);
  }

  int CheckAccess(Terminal& t, const fs::IoContext& io, int signo,
                  bool ignored_ok) override {
    auto* task = dynamic_cast<Task*>(io.blocker);
    if (task == nullptr) return 0;
    return k_->CheckTerminalAccess(*task, t, signo, ignored_ok);
  }

  // Without Kernel::mu_, which the caller may hold (a process's exit
  // releases its files under it): the leader is held by the terminal, and
  // signalling a group takes only the locks below mu_.
  void HangUp(std::shared_ptr<Terminal> t, pid_t sid) override {
    auto leader = std::static_pointer_cast<ThreadGroup>(t->session_leader().lock());
    if (leader == nullptr || leader->tgid() != sid || leader->exiting()) return;
    k_->SignalGroup(*leader, SIGHUP, 0);
    k_->SignalGroup(*leader, SIGCONT, 0);
  }

 private:
  Kernel* const k_;
};

}  // namespace

std::unique_ptr<fs::tty::JobControl> NewJobControl(Kernel* k) {
  return std::make_unique<KernelJobControl>(k);
}

}  // namespace sandboxd::kernel
