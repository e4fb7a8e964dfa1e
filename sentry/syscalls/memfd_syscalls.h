// File seals from the syscall side: fcntl(2)'s F_ADD_SEALS and F_GET_SEALS,
// which sys_file.cc's fcntl hands over here (sys_memfd.cc).
#ifndef SANDBOXD_SENTRY_SYSCALLS_MEMFD_SYSCALLS_H_
#define SANDBOXD_SENTRY_SYSCALLS_MEMFD_SYSCALLS_H_

#include <cstdint>

#include "sentry/fs/file.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {

// fcntl(fd, cmd, arg) for F_ADD_SEALS and F_GET_SEALS on `f`, the file of
// fd: -EINVAL for files that have no seals (anything but tmpfs files).
int64_t FcntlSeals(Task& t, fs::File& f, int cmd, uint64_t arg);

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_MEMFD_SYSCALLS_H_
