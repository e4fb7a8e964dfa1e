// Terminal syscalls (sys_tty.cc): the ioctls of terminal files and the
// open(2) rules for terminals, called from sys_file.cc and sys_path.cc.
#ifndef SANDBOXD_SENTRY_SYSCALLS_TTY_H_
#define SANDBOXD_SENTRY_SYSCALLS_TTY_H_

#include <cstdint>
#include <memory>

#include "sentry/fs/file.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/kernel.h"

namespace sandboxd::syscalls {

// ioctl(2) on a terminal file: handled is set to false when `f` is not
// one (the caller goes on with the generic path).
int64_t TerminalIoctl(kernel::Task& t, const std::shared_ptr<fs::File>& f,
                      uint64_t request, uint64_t arg, bool* handled);

// Opens `loc` for open(2): /dev/tty (5:0) is the caller's controlling
// terminal (ENXIO without one), and a terminal's program side opened
// without O_NOCTTY becomes a session leader's controlling terminal.
int OpenInode(kernel::Task& t, const fs::Location& loc, int flags,
              std::shared_ptr<fs::File>* out);

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_TTY_H_
