// The kernel's terminal settings (asm/termbits.h), which TCGETS/TCSETS and
// the termios2 ioctls carry. glibc's struct termios is larger (NCCS 32 and
// speed fields) and is translated by the library, so the Sentry never sees
// it.
#ifndef SANDBOXD_SENTRY_FS_TTY_TERMIOS_H_
#define SANDBOXD_SENTRY_FS_TTY_TERMIOS_H_

#include <sys/ioctl.h>
#include <termios.h>

#include <cstdint>

namespace sandboxd::fs::tty {

inline constexpr int kKernelNccs = 19;

struct KernelTermios {
  uint32_t c_iflag = 0;
  uint32_t c_oflag = 0;
  uint32_t c_cflag = 0;
  uint32_t c_lflag = 0;
  uint8_t c_line = 0;
  uint8_t c_cc[kKernelNccs] = {};
};
static_assert(sizeof(KernelTermios) == 36, "struct termios of the kernel");

// struct termios2: the same with explicit speeds.
struct KernelTermios2 {
  KernelTermios t;
  uint32_t c_ispeed = 0;
  uint32_t c_ospeed = 0;
};
static_assert(sizeof(KernelTermios2) == 44, "struct termios2 of the kernel");

// termios2 ioctls (asm/ioctls.h; spelled out because that header's
// _IOR(..., struct termios2) cannot be used next to glibc's <termios.h>).
inline constexpr uint64_t kTcGets2 = 0x802c542a;
inline constexpr uint64_t kTcSets2 = 0x402c542b;
inline constexpr uint64_t kTcSetsW2 = 0x402c542c;
inline constexpr uint64_t kTcSetsF2 = 0x402c542d;
// Unix98 pty ioctls.
inline constexpr uint64_t kTiocGPtn = 0x80045430;
inline constexpr uint64_t kTiocSPtLck = 0x40045431;
inline constexpr uint64_t kTiocGPtLck = 0x80045439;
inline constexpr uint64_t kTiocGPtPeer = 0x5441;
inline constexpr uint64_t kTiocGPkt = 0x80045438;

// Linux's _POSIX_VDISABLE: a control character set to 0 is disabled.
inline constexpr uint8_t kDisabled = 0;

// The settings of a new pseudo-terminal replica (Linux's tty_std_termios
// with the pts driver's c_cflag): canonical mode, echo, signals, CR->NL on
// input and NL->CRNL on output, 38400 baud.
inline KernelTermios DefaultTermios() {
  KernelTermios t;
  t.c_iflag = ICRNL | IXON;
  t.c_oflag = OPOST | ONLCR;
  t.c_cflag = B38400 | CS8 | CREAD;
  t.c_lflag = ISIG | ICANON | ECHO | ECHOE | ECHOK | ECHOCTL | ECHOKE | IEXTEN;
  // INIT_C_CC: ^C ^\ DEL ^U ^D, TIME 0, MIN 1, SWTC 0, ^Q ^S ^Z, EOL 0,
  // ^R ^O ^W ^V, EOL2 0.
  static constexpr uint8_t kInitCc[kKernelNccs] = {
      003, 034, 0177, 025, 004, 0, 1, 0, 021, 023, 032, 0, 022, 017, 027, 026, 0};
  for (int i = 0; i < kKernelNccs; i++) t.c_cc[i] = kInitCc[i];
  return t;
}

}  // namespace sandboxd::fs::tty

#endif  // SANDBOXD_SENTRY_FS_TTY_TERMIOS_H_
