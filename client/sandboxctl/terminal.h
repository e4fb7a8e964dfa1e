// -t: the local terminal in raw mode while a sandbox's tty is attached, and
// its size sent on every SIGWINCH.
#ifndef SANDBOXD_CLIENT_SANDBOXCTL_TERMINAL_H_
#define SANDBOXD_CLIENT_SANDBOXCTL_TERMINAL_H_

#include "client/client.h"

namespace sandboxd::client::ctl {

// Raw mode on stdin's terminal (undone by RestoreTerminal, and at exit)
// and SIGWINCH -> io->resize_fd / io->get_size.
void SetUpTty(ExecIo* io);
// Leaves raw mode, if SetUpTty entered it. Idempotent.
void RestoreTerminal();

}  // namespace sandboxd::client::ctl

#endif  // SANDBOXD_CLIENT_SANDBOXCTL_TERMINAL_H_
