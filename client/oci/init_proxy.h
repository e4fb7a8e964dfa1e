// The container's init proxy: the process `create` leaves behind, whose pid
// goes to --pid-file. The shim (a subreaper) reaps it and takes its exit
// status as the container's. It waits on ROOT/ID/exec.fifo until `start`
// opens the other end, then execs the backend's command (`sentry run ...`),
// which exits with the sandbox init's status (128+N for signal N).
#ifndef SANDBOXD_CLIENT_OCI_INIT_PROXY_H_
#define SANDBOXD_CLIENT_OCI_INIT_PROXY_H_

#include <sys/resource.h>

namespace sandboxd::oci {

// Everything the child needs, made before fork: between fork and exec the
// child only makes system calls (init_proxy_signal_safe.cc).
struct InitPlan {
  const char* fifo = nullptr;
  const char* exe = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int console = -1;    // the pty's slave: stdio and controlling terminal
  int netns = -1;      // a network namespace to join (setns)
  int report = -1;     // write end: a failure before the fifo wait, as text
  const struct rlimit* rlimits = nullptr;
  const int* rlimit_resources = nullptr;
  int n_rlimits = 0;
};

// The child's side; never returns.
[[noreturn]] void RunInitProxy(const InitPlan& plan);

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_INIT_PROXY_H_
