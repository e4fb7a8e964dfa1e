// Process creation shared by clone (sys_thread.cc) and fork/vfork.
#ifndef SANDBOXD_SENTRY_SYSCALLS_PROCESS_H_
#define SANDBOXD_SENTRY_SYSCALLS_PROCESS_H_

#include <cstdint>

#include "sentry/kernel/task.h"

namespace sandboxd::syscalls {

// clone(2) without CLONE_THREAD: a new process. Returns its pid or -errno.
int64_t CloneProcess(kernel::Task& t, uint64_t flags, uint64_t stack,
                     uint64_t ptid, uint64_t ctid, uint64_t tls);

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_PROCESS_H_
