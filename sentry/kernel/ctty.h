// The kernel's side of terminals: fs::tty::JobControl over the process
// tree (see ctty.cc and Kernel's "controlling terminals" methods).
#ifndef SANDBOXD_SENTRY_KERNEL_CTTY_H_
#define SANDBOXD_SENTRY_KERNEL_CTTY_H_

#include <memory>

#include "sentry/fs/tty/terminal.h"
#include "sentry/kernel/kernel.h"

namespace sandboxd::kernel {

// Job control for the terminals of `k`'s sandbox. Lives as long as k.
std::unique_ptr<fs::tty::JobControl> NewJobControl(Kernel* k);

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_CTTY_H_
