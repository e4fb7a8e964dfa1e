// Advisory locking from the syscall side: flock(2), and the record-lock
// commands of fcntl(2), which sys_file.cc's fcntl hands over here.
#ifndef SANDBOXD_SENTRY_SYSCALLS_LOCK_SYSCALLS_H_
#define SANDBOXD_SENTRY_SYSCALLS_LOCK_SYSCALLS_H_

#include <cstdint>

#include "sentry/fs/file.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {

// fcntl(fd, cmd, arg) for cmd F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK,
// F_OFD_SETLK, F_OFD_SETLKW (the *64 variants are the same numbers on
// x86_64). `arg` is the application's struct flock address; `f` the file
// of fd.
int64_t FcntlLock(Task& t, fs::File& f, int cmd, uint64_t arg);

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_LOCK_SYSCALLS_H_
