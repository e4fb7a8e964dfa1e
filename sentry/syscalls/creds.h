// What the handlers outside sys_creds.cc need of credentials: the
// capability prctls (sys_prctl.cc), execve's new credentials
// (sys_process.cc).
#ifndef SANDBOXD_SENTRY_SYSCALLS_CREDS_H_
#define SANDBOXD_SENTRY_SYSCALLS_CREDS_H_

#include <cstdint>
#include <memory>

#include "sentry/fs/credentials.h"
#include "sentry/fs/inode.h"
#include "sentry/kernel/task.h"

namespace sandboxd::syscalls {

// PR_CAPBSET_READ/DROP, PR_GET/SET_KEEPCAPS, PR_GET/SET_SECUREBITS,
// PR_CAP_AMBIENT.
int64_t CapabilityPrctl(kernel::Task& t, int option, uint64_t arg2,
                        uint64_t arg3, uint64_t arg4, uint64_t arg5);

// The credentials a program runs with after execve of a file with these
// attributes (its set-user-ID and set-group-ID bits unless `nosuid` or
// no_new_privs; capabilities recomputed as for a file without file
// capabilities).
std::shared_ptr<const fs::Credentials> ExecCredentials(
    const fs::Credentials& old, const fs::Attr& file, bool nosuid,
    bool no_new_privs);

}  // namespace sandboxd::syscalls

#endif  // SANDBOXD_SENTRY_SYSCALLS_CREDS_H_
