// Terminal ioctls (tty_ioctl(4), Linux's tty_io.c, tty_ioctl.c,
// tty_jobctrl.c and pty.c) and the terminal rules of open(2).
#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <termios.h>

#include "sentry/fs/devfs.h"
#include "sentry/fs/tty/pty.h"
#include "sentry/fs/tty/terminal.h"
#include "sentry/fs/tty/termios.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/tty.h"

namespace sandboxd::syscalls {
namespace {

using fs::tty::KernelTermios;
using fs::tty::KernelTermios2;
using fs::tty::Terminal;
using kernel::Task;

// tty_check_change: a background process of the terminal's session that
// changes its settings gets SIGTTOU (unless it ignores or blocks it).
int64_t CheckChange(Task& t, Terminal& term) {
  return t.kernel().CheckTerminalAccess(t, term, SIGTTOU, true);
}

// The speed in baud of the kernel's c_cflag CBAUD encoding, for termios2.
uint32_t BaudOf(uint32_t cflag) {
  static constexpr uint32_t kRates[] = {0,    50,   75,   110,  134,  150,
                                        200,  300,  600,  1200, 1800, 2400,
                                        4800, 9600, 19200, 38400};
  uint32_t b = cflag & CBAUD;
  if (b < 16) return kRates[b];
  static constexpr uint32_t kHigh[] = {0,      57600,   115200,  230400,
                                       460800, 500000,  576000,  921600,
                                       1000000, 1152000, 1500000, 2000000,
                                       2500000, 3000000, 3500000, 4000000};
  return kHigh[(b & ~CBAUDEX) & 15];
}

int64_t SetTermiosFrom(Task& t, Terminal& term, uint64_t request,
                       uint64_t arg) {
  KernelTermios nt;
  bool flush = false;
  if (request == TCSETS || request == TCSETSW || request == TCSETSF) {
    RETURN_IF_ERRNO(CopyInObj(t, arg, &nt));
    flush = request == TCSETSF;
  } else {
    KernelTermios2 t2;
    RETURN_IF_ERRNO(CopyInObj(t, arg, &t2));
    nt = t2.t;
    flush = request == fs::tty::kTcSetsF2;
  }
  RETURN_IF_ERRNO(CheckChange(t, term));
  // TCSETSW waits for output to drain: output is never held back here.
  return term.SetTermios(nt, flush);
}

// Ioctls only the master of a pty has.
int64_t MasterIoctl(Task& t, fs::tty::PtyMasterFile& m, uint64_t request,
                    uint64_t arg, bool* handled) {
  fs::tty::Pty& pty = m.pty();
  *handled = true;
  switch (request) {
    case fs::tty::kTiocGPtn:
      return CopyOutObj<unsigned>(t, arg, pty.index());
    case fs::tty::kTiocSPtLck: {
      int lock;
      RETURN_IF_ERRNO(CopyInObj(t, arg, &lock));
      return pty.SetLocked(lock != 0);
    }
    case fs::tty::kTiocGPtLck:
      return CopyOutObj<int>(t, arg, pty.locked() ? 1 : 0);
    case TIOCPKT: {
      int on;
      RETURN_IF_ERRNO(CopyInObj(t, arg, &on));
      return pty.SetPacketMode(on != 0);
    }
    case fs::tty::kTiocGPkt:
      return CopyOutObj<int>(t, arg, pty.packet_mode() ? 1 : 0);
    case fs::tty::kTiocGPtPeer: {
      const int flags = static_cast<int>(arg);
      if (flags & ~(O_ACCMODE | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)) {
        return -EINVAL;
      }
      std::shared_ptr<fs::File> f;
      RETURN_IF_ERRNO(pty.OpenProgramSide(flags | O_NOCTTY, nullptr, &f));
      return t.group().fds().Install(std::move(f), (flags & O_CLOEXEC) != 0);
    }
    case FIONREAD: {
      int n = 0;
      pty.MasterQueued(&n);
      return CopyOutObj(t, arg, n);
    }
    case TCFLSH: {
      // The master's input is what the replica wrote, and the other way
      // round.
      int q = static_cast<int>(arg);
      if (q == TCIFLUSH) {
        q = TCOFLUSH;
      } else if (q == TCOFLUSH) {
        q = TCIFLUSH;
      }
      RETURN_IF_ERRNO(CheckChange(t, pty));
      return pty.Flush(q);
    }
    default:
      *handled = false;
      return 0;
  }
}

}  // namespace

int64_t TerminalIoctl(Task& t, const std::shared_ptr<fs::File>& f,
                      uint64_t request, uint64_t arg, bool* handled) {
  auto* tf = dynamic_cast<fs::tty::TtyFile*>(f.get());
  *handled = tf != nullptr;
  if (tf == nullptr) return 0;
  const std::shared_ptr<Terminal>& term = tf->terminal();
  const bool master = !tf->program_side();
  if (master) {
    bool done = false;
    int64_t r = MasterIoctl(t, static_cast<fs::tty::PtyMasterFile&>(*f),
                            request, arg, &done);
    if (done) return r;
  } else if (term->hung_up() && request != TIOCNOTTY) {
    return -EIO;  // hung_up_tty_ioctl
  }
  switch (request) {
    case TCGETS: {
      KernelTermios kt;
      RETURN_IF_ERRNO(term->GetTermios(&kt));
      return CopyOutObj(t, arg, kt);
    }
    case fs::tty::kTcGets2: {
      KernelTermios2 t2;
      RETURN_IF_ERRNO(term->GetTermios(&t2.t));
      t2.c_ispeed = t2.c_ospeed = BaudOf(t2.t.c_cflag);
      return CopyOutObj(t, arg, t2);
    }
    case TCSETS: case TCSETSW: case TCSETSF:
    case fs::tty::kTcSets2: case fs::tty::kTcSetsW2: case fs::tty::kTcSetsF2:
      return SetTermiosFrom(t, *term, request, arg);
    case TIOCGWINSZ: {
      struct winsize ws;
      RETURN_IF_ERRNO(term->GetWinsize(&ws));
      return CopyOutObj(t, arg, ws);
    }
    case TIOCSWINSZ: {
      struct winsize ws;
      RETURN_IF_ERRNO(CopyInObj(t, arg, &ws));
      return term->SetWinsize(ws);
    }
    case FIONREAD: {
      int n = 0;
      RETURN_IF_ERRNO(term->InputQueued(&n));
      return CopyOutObj(t, arg, n);
    }
    case TIOCOUTQ: {
      int n = 0;
      RETURN_IF_ERRNO(term->OutputQueued(&n));
      return CopyOutObj(t, arg, n);
    }
    case TCFLSH:
      RETURN_IF_ERRNO(CheckChange(t, *term));
      return term->Flush(static_cast<int>(arg));
    case TCSBRK:
    case TCSBRKP:
      // tcdrain and tcsendbreak: output is never held back, and a
      // pseudo-terminal has no line to send a break on.
      RETURN_IF_ERRNO(CheckChange(t, *term));
      return 0;
    case TIOCSCTTY:
      // Linux wants a readable description or CAP_SYS_ADMIN, and
      // CAP_SYS_ADMIN to steal (arg 1): the sandbox's root has it.
      return t.kernel().SetControllingTerminal(t, term, arg == 1);
    case TIOCNOTTY:
      if (master) return -ENOTTY;
      return t.kernel().DropControllingTerminal(t, *term);
    case TIOCGPGRP:
    case TIOCGSID: {
      // The program side answers only its own controlling processes; the
      // master answers anyone.
      if (!master && t.kernel().ControllingTerminal(t) != term) return -ENOTTY;
      pid_t v = request == TIOCGPGRP ? term->foreground() : term->session();
      if (request == TIOCGSID && v == 0) return -ENOTTY;
      return CopyOutObj(t, arg, v);
    }
    case TIOCSPGRP: {
      int64_t r = CheckChange(t, *term);
      if (r == -EIO) return -ENOTTY;
      if (r < 0) return r;
      pid_t pgid;
      RETURN_IF_ERRNO(CopyInObj(t, arg, &pgid));
      if (t.kernel().ControllingTerminal(t) != term) return -ENOTTY;
      return t.kernel().SetForegroundGroup(t, *term, pgid);
    }
    default:
      // Flow control (TCXONC), exclusive mode, TIOCSTI, line disciplines
      // and modem lines are not implemented.
      t.kernel().CountUnimplemented(SYS_ioctl);
      return -ENOTTY;
  }
}

int OpenInode(Task& t, const fs::Location& loc, int flags,
              std::shared_ptr<fs::File>* out) {
  fs::Inode& inode = loc.inode();
  if (inode.Type() == S_IFCHR && !(flags & O_PATH)) {
    fs::Attr a;
    if (inode.GetAttr(&a) == 0 && a.rdev == fs::kDevTty) {
      std::shared_ptr<Terminal> term = t.kernel().ControllingTerminal(t);
      if (term == nullptr) return -ENXIO;
      return static_cast<int>(
          term->OpenProgramSide(flags, inode.shared_from_this(), out));
    }
  }
  int r = inode.Open(flags, out);
  if (r < 0 || (flags & O_NOCTTY)) return r;
  auto* tf = dynamic_cast<fs::tty::TtyFile*>(out->get());
  if (tf != nullptr && tf->program_side()) {
    t.kernel().TerminalOpened(t, tf->terminal());
  }
  return r;
}

}  // namespace sandboxd::syscalls
