// The seccomp filter of every stub process.
//
// A syscall made from outside the stub's code (the application) traps:
// SECCOMP_RET_TRAP, delivered as SIGSYS to the stub's handler, which hands
// it to the Sentry. A syscall made from the stub's code is allowed only if
// it is one the stub needs (futex, mmap, munmap, clone of a thread,
// sigaltstack, arch_prctl, rt_sigreturn, exit, exit_group, sched_yield,
// clock_gettime of CLOCK_THREAD_CPUTIME_ID;
// and for the template and a new stub: clone with exactly the new-stub
// flags, prctl(PR_SET_PDEATHSIG, SIGKILL), close(kStubPoolFd), getppid);
// anything else kills the stub process. The application can jump into stub
// code, so that allow-list is what it could reach at worst (README.md,
// "Processes", says why each is harmless); its only file descriptor is the
// sandbox's memory file. Installed once, in the template; every stub
// inherits it and adds StubProcessFilter() before it serves anything.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_SECCOMP_FILTER_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_SECCOMP_FILTER_H_

#include <linux/filter.h>

#include <vector>

namespace sandboxd::systrap {

// The filter program, built once per Sentry.
const std::vector<sock_filter>& StubFilter();

// The filter a new stub process adds to StubFilter() (which it inherits
// from the template) before any application code runs in it: from stub
// code it kills clone with anything but the thread flags (no new
// processes), prctl, seccomp, close and getppid (a new stub's first steps
// only), an mmap of anything but the memory file, and an mmap or munmap
// whose range reaches kStubBase. Built once per Sentry; the Sentry copies
// it into the template's area (StubShared::stub_filter).
const std::vector<sock_filter>& StubProcessFilter();

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_SECCOMP_FILTER_H_
