// The SIGSYS handler of the Sentry's own seccomp filter (host_filter.h).
#ifndef SANDBOXD_SENTRY_HOST_FILTER_TRAP_H_
#define SANDBOXD_SENTRY_HOST_FILTER_TRAP_H_

#include <signal.h>

namespace sandboxd::host_filter {

// System call numbers the handler can name.
inline constexpr int kMaxNamedSyscall = 512;

// Records `name` (not copied; must live as long as the process) for `nr`.
void SetSyscallName(int nr, const char* name);

// Writes "sentry: host syscall NR (name) not in the Sentry's seccomp
// allow-list" to stderr and aborts.
void OnSigsys(int sig, siginfo_t* info, void* ucontext);

}  // namespace sandboxd::host_filter

#endif  // SANDBOXD_SENTRY_HOST_FILTER_TRAP_H_
