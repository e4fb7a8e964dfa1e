// The line discipline (Linux's n_tty): what happens to bytes between the
// terminal side (a pty master, a keyboard) and the program side (the
// replica). Pure state, no locking and no blocking: the terminal that owns
// it holds its lock around every call and does the waiting.
//
// Input (typed at the terminal, read by the program): ISTRIP, IGNCR,
// ICRNL, INLCR; ISIG (INTR, QUIT, SUSP become signals for the foreground
// process group, flushing input unless NOFLSH); canonical mode with
// ERASE, WERASE (IEXTEN), KILL, EOF, EOL, EOL2 and lines of at most 4095
// bytes; echo with ECHO, ECHOE, ECHOK, ECHOKE, ECHONL, ECHOCTL.
// Output (written by the program): OPOST with ONLCR and OCRNL.
// Not kept: IXON flow control (START/STOP are ordinary characters), LNEXT,
// REPRINT, DISCARD, IUCLC/OLCUC, tab expansion, ECHOPRT, parity.
#ifndef SANDBOXD_SENTRY_FS_TTY_LINE_DISCIPLINE_H_
#define SANDBOXD_SENTRY_FS_TTY_LINE_DISCIPLINE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "sentry/fs/tty/termios.h"

namespace sandboxd::state {
struct TtyState;
}  // namespace sandboxd::state

namespace sandboxd::fs::tty {

class LineDiscipline {
 public:
  // N_TTY_BUF_SIZE: the input buffer; a canonical line holds one less.
  static constexpr size_t kBufSize = 4096;

  LineDiscipline() : termios_(DefaultTermios()) {}

  const KernelTermios& termios() const { return termios_; }
  // Switching ICANON off makes the line being edited readable at once;
  // switching it on makes unread raw input the start of a line.
  void SetTermios(const KernelTermios& t);

  // Processes bytes typed at the terminal. Appends what must be echoed
  // (already output-processed) to *echo and the signals to raise in the
  // foreground process group to *signals. Returns how many bytes were
  // taken: fewer than n only when raw input has no room left (canonical
  // input past the line limit is dropped, as Linux does).
  size_t Input(const uint8_t* p, size_t n, std::string* echo,
               std::vector<int>* signals);
  // Whether Input could take a byte now.
  bool HasRoom() const;

  // Whether a read would return now: a whole line (or an EOF) in
  // canonical mode, any byte otherwise.
  bool Readable() const;
  // FIONREAD/TIOCINQ: bytes of complete lines, or all bytes when raw.
  size_t Available() const;
  // Takes at most n bytes and, in canonical mode, at most one line (an EOF
  // line gives 0). Preconditions: Readable().
  size_t Read(uint8_t* buf, size_t n);

  // Output processing of bytes the program writes; appends to *out.
  void Output(const uint8_t* p, size_t n, std::string* out) const;

  // TCFLSH TCIFLUSH, and what ISIG does without NOFLSH.
  void FlushInput();

 private:
  friend struct ::sandboxd::state::TtyState;  // checkpoint save and load
  bool canonical() const { return (termios_.c_lflag & ICANON) != 0; }
  bool Is(uint8_t c, int index) const {
    return c != kDisabled && termios_.c_cc[index] == c;
  }
  size_t Buffered() const;
  // Echoes c, as ^X for control characters under ECHOCTL.
  void EchoChar(uint8_t c, std::string* echo) const;
  void EchoRaw(uint8_t c, std::string* echo) const;
  // ERASE, WERASE and KILL in canonical mode.
  void Erase(uint8_t c, std::string* echo);

  KernelTermios termios_;
  // Canonical mode: complete lines (with their terminator; an EOF line is
  // empty) and the line being edited. Raw mode: the bytes in raw_.
  std::deque<std::string> lines_;
  std::string edit_;
  std::string raw_;
};

}  // namespace sandboxd::fs::tty

#endif  // SANDBOXD_SENTRY_FS_TTY_LINE_DISCIPLINE_H_
