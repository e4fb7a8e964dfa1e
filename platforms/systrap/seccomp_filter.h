// The seccomp filter of every stub process.
//
// A syscall made from outside the stub's code (the application) traps:
// SECCOMP_RET_TRAP, delivered as SIGSYS to the stub's handler, which hands
// it to the Sentry. A syscall made from the stub's code is allowed only if
// it is one the stub needs (futex, mmap, munmap, clone of a thread,
// sigaltstack, arch_prctl, rt_sigreturn, exit, exit_group, sched_yield;
// and for the template and a new stub: clone with exactly the new-stub
// flags, prctl(PR_SET_PDEATHSIG, SIGKILL), close(kStubPoolFd), getppid);
// anything else kills the stub process. The application can jump into stub
// code, so that allow-list is what it could reach at worst (README.md,
// "Processes", says why each is harmless); its only file descriptor is the
// sandbox's memory file. Installed once, in the template; every stub
// inherits it.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_SECCOMP_FILTER_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_SECCOMP_FILTER_H_

#include <linux/filter.h>

#include <vector>

namespace sandboxd::systrap {

// The filter program, built once per Sentry.
const std::vector<sock_filter>& StubFilter();

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_SECCOMP_FILTER_H_
