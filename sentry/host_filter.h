// The Sentry's own seccomp filter: the host system calls the Sentry may
// make once its sandbox's program runs (DESIGN.md, "Processes").
//
// Built once (libseccomp) while prewarming and loaded, on every thread of
// the Sentry at once (SECCOMP_FILTER_FLAG_TSYNC), right before the init
// program's first instruction — in `sentry serve` and `sentry run` alike
// (`sentry run --sentry-seccomp=off` leaves it out, for debugging).
//
// A call outside the list is a bug of the list or of the Sentry, never the
// program's doing (the program's own calls are trapped by the platform and
// never reach the host). It is made diagnosable: SECCOMP_RET_TRAP delivers
// SIGSYS, whose handler writes
//   sentry: host syscall NR (name) not in the Sentry's seccomp allow-list
// to stderr and aborts. To extend the list, add the call to kAllowed in
// host_filter.cc (or a rule with its argument checks beside the others),
// with the reason, and run the full test suite.
//
// Not allowed, on purpose: execve/execveat, fork-like clones (clone without
// CLONE_THREAD; clone3, whose flags a filter cannot see, fails with ENOSYS
// so that glibc falls back to clone), ptrace, mount and namespace calls,
// module and kexec loading, bpf, perf_event_open, keyrings, setuid and
// friends, and everything else not listed.
#ifndef SANDBOXD_SENTRY_HOST_FILTER_H_
#define SANDBOXD_SENTRY_HOST_FILTER_H_

#include <linux/filter.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sandboxd::host_filter {

// A compiled filter (classic BPF), ready to load.
struct Program {
  std::vector<sock_filter> insns;
};

// Compiles the allow-list. Also records the names of system calls for the
// SIGSYS handler (which must not allocate).
absl::StatusOr<Program> Build();

// Installs the SIGSYS handler, sets no_new_privs and loads `p` on every
// thread of the process.
absl::Status Install(const Program& p);

}  // namespace sandboxd::host_filter

#endif  // SANDBOXD_SENTRY_HOST_FILTER_H_
