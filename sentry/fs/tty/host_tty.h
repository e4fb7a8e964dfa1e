// The host terminal the Sentry was started on, as the sandbox's console.
//
// When `sentry run`'s stdin is a terminal, the sandbox sees a terminal:
// its stdio descriptors on that terminal are HostTtyFiles, /dev/console
// opens it, and it is the controlling terminal of init's session. Reads,
// writes, the line discipline, termios and the window size are the host's
// (TCGETS/TCSETS*/TIOCGWINSZ/TIOCSWINSZ go to the host fd); job control is
// the sandbox's own: the session and foreground process group are pids of
// the sandbox, never host pgids, and the Sentry (which is the host
// terminal's foreground process) forwards the host's SIGINT, SIGQUIT,
// SIGTSTP and SIGWINCH to the sandbox's foreground process group.
#ifndef SANDBOXD_SENTRY_FS_TTY_HOST_TTY_H_
#define SANDBOXD_SENTRY_FS_TTY_HOST_TTY_H_

#include <memory>

#include "base/unique_fd.h"
#include "sentry/fs/file.h"
#include "sentry/fs/tty/terminal.h"

namespace sandboxd::state {
struct TtyState;
}  // namespace sandboxd::state

namespace sandboxd::fs::tty {

class HostTerminal final : public Terminal {
 public:
  // `fd`: a dup of the host terminal descriptor, for the ioctls.
  HostTerminal(UniqueFd fd, JobControl* jc);

  // The device node that names this terminal in the sandbox
  // (/dev/console): its files stat as that node, so that ttyname(3) finds
  // the name.
  void set_node(std::shared_ptr<Inode> node) { node_ = std::move(node); }
  const std::shared_ptr<Inode>& node() const { return node_; }
  // Whether host descriptor `fd` is this same terminal.
  bool Same(int fd) const;
  // A new description of the terminal on a dup of host fd `fd`.
  std::shared_ptr<File> OpenHostFd(int fd);

  // The host sent SIGWINCH: the size changed behind the sandbox's back.
  void HostResized() { NotifyResize(); }

  int64_t GetTermios(KernelTermios* out) override;
  int64_t SetTermios(const KernelTermios& t, bool flush_input) override;
  int64_t GetWinsize(struct winsize* out) override;
  int64_t SetWinsize(const struct winsize& ws) override;
  int64_t InputQueued(int* out) override;
  int64_t OutputQueued(int* out) override;
  int64_t Flush(int queue) override;
  bool hung_up() const override { return false; }
  // /dev/console's: 5:1.
  dev_t Device() const override { return makedev(5, 1); }
  int64_t OpenProgramSide(int flags, std::shared_ptr<Inode> via,
                          std::shared_ptr<File>* out) override;

 private:
  const UniqueFd fd_;
  dev_t rdev_ = 0;
  std::shared_ptr<Inode> node_;
};

class HostTtyFile final : public HostFile, public TtyFile {
 public:
  HostTtyFile(UniqueFd fd, std::shared_ptr<Terminal> term);

  // Job control first (SIGTTIN, SIGTTOU under TOSTOP), then the host.
  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override;
  int64_t Stat(struct stat* st) override;
  // Terminal ioctls are handled through terminal(); nothing else applies.
  int64_t Ioctl(uint64_t request, void* buf) override { return -ENOTTY; }
  const std::shared_ptr<Terminal>& terminal() const override { return term_; }
  // The node fstat shows when not the terminal's own (/dev/tty).
  void set_stat_node(std::shared_ptr<Inode> node) { stat_node_ = std::move(node); }

 private:
  friend struct ::sandboxd::state::TtyState;  // checkpoint save and load
  const std::shared_ptr<Terminal> term_;
  std::shared_ptr<Inode> stat_node_;
};

}  // namespace sandboxd::fs::tty

#endif  // SANDBOXD_SENTRY_FS_TTY_HOST_TTY_H_
