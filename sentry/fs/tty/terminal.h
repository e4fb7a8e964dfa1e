// Terminals: what a pseudo-terminal pair and the host's terminal have in
// common, as the ioctl layer and the kernel's controlling-terminal code see
// them.
//
// A Terminal holds its job-control state (the session it controls and its
// foreground process group, as pids of the sandbox) and the settings
// (termios, window size). Which processes have it as their controlling
// terminal is the kernel's business (ThreadGroup::ctty); the terminal asks
// the kernel through JobControl for what needs the process tree:
// signalling a process group, the background checks, the hangup.
//
// Lock order: Terminal::job_mu_ and each kind's own lock are leaves; the
// kernel's locks are never held when a terminal calls JobControl.
#ifndef SANDBOXD_SENTRY_FS_TTY_TERMINAL_H_
#define SANDBOXD_SENTRY_FS_TTY_TERMINAL_H_

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/file.h"
#include "sentry/fs/tty/termios.h"

namespace sandboxd::fs::tty {

class Terminal;

// The kernel side of job control, implemented in sentry/kernel (ctty.cc).
class JobControl {
 public:
  virtual ~JobControl() = default;
  // Sends `signo` to every process of group `pgid` (ISIG, SIGWINCH).
  virtual void SignalProcessGroup(pid_t pgid, int signo) = 0;
  // Linux's job-control check for the task behind `io` (its Blocker):
  // 0 if it may go on (not a background process of the terminal's
  // session, or `signo` is ignored or blocked), -EIO for an orphaned
  // background group, or -EINTR after sending `signo` (SIGTTIN for reads,
  // SIGTTOU for writes under TOSTOP and for settings changes) to its
  // process group.
  virtual int CheckAccess(Terminal& t, const IoContext& io, int signo,
                          bool ignored_ok) = 0;
  // The terminal hung up (its master side closed): the session leader
  // (Terminal::session_leader) gets SIGHUP and SIGCONT; processes stop
  // seeing it as their controlling terminal (hung_up()). May be called with
  // Kernel::mu_ held (a process's last close happens at its exit).
  virtual void HangUp(std::shared_ptr<Terminal> t, pid_t sid) = 0;
};

class Terminal : public std::enable_shared_from_this<Terminal> {
 public:
  explicit Terminal(JobControl* jc) : jc_(jc) {}
  virtual ~Terminal() = default;

  JobControl* job_control() const { return jc_; }

  // The session this terminal controls (0: none) and its foreground
  // process group.
  pid_t session() const {
    absl::MutexLock l(&job_mu_);
    return sid_;
  }
  pid_t foreground() const {
    absl::MutexLock l(&job_mu_);
    return fg_pgid_;
  }
  // `leader` is the kernel's session leader object, opaque here, held
  // weakly for the hangup.
  void SetSession(pid_t sid, pid_t pgid, std::weak_ptr<void> leader = {}) {
    absl::MutexLock l(&job_mu_);
    sid_ = sid;
    fg_pgid_ = pgid;
    leader_ = std::move(leader);
  }
  std::weak_ptr<void> session_leader() const {
    absl::MutexLock l(&job_mu_);
    return leader_;
  }
  void SetForeground(pid_t pgid) {
    absl::MutexLock l(&job_mu_);
    fg_pgid_ = pgid;
  }

  // The device number that names it (st_rdev of its node; /proc's tty_nr).
  virtual dev_t Device() const = 0;

  virtual int64_t GetTermios(KernelTermios* out) = 0;
  // TCSETS (drain is immediate: output never waits for a line), TCSETSF
  // also flushes unread input.
  virtual int64_t SetTermios(const KernelTermios& t, bool flush_input) = 0;
  virtual int64_t GetWinsize(struct winsize* out) = 0;
  // Sends SIGWINCH to the foreground process group when the size changes.
  virtual int64_t SetWinsize(const struct winsize& ws) = 0;
  virtual int64_t InputQueued(int* out) = 0;   // FIONREAD, TIOCINQ
  virtual int64_t OutputQueued(int* out) = 0;  // TIOCOUTQ
  virtual int64_t Flush(int queue) = 0;        // TCFLSH: TCIFLUSH...
  // After a hangup the terminal controls nothing and its program side
  // reads EOF.
  virtual bool hung_up() const = 0;
  // Opens the program side again: a new description. `via` is the node it
  // is opened by when that is not the terminal's own (/dev/tty): fstat
  // shows that node, as on Linux.
  virtual int64_t OpenProgramSide(int flags, std::shared_ptr<Inode> via,
                                  std::shared_ptr<File>* out) = 0;

 protected:
  // SIGWINCH to the foreground group, if any.
  void NotifyResize() {
    pid_t fg = foreground();
    if (fg > 0) jc_->SignalProcessGroup(fg, SIGWINCH);
  }

 private:
  JobControl* const jc_;
  mutable absl::Mutex job_mu_;
  pid_t sid_ ABSL_GUARDED_BY(job_mu_) = 0;
  pid_t fg_pgid_ ABSL_GUARDED_BY(job_mu_) = 0;
  std::weak_ptr<void> leader_ ABSL_GUARDED_BY(job_mu_);
};

// Implemented by every File of a terminal: both sides of a pty, the host
// terminal.
class TtyFile {
 public:
  virtual ~TtyFile() = default;
  virtual const std::shared_ptr<Terminal>& terminal() const = 0;
  // The program side (a replica, the host terminal), which processes can
  // have as their controlling terminal; a pty master is not.
  virtual bool program_side() const { return true; }
};

}  // namespace sandboxd::fs::tty

#endif  // SANDBOXD_SENTRY_FS_TTY_TERMINAL_H_
