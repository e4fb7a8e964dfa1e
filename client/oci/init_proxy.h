// The child `create` leaves behind, whose pid goes to --pid-file: the
// shim (a subreaper) reaps it and takes its exit status as the container's.
// It takes its session, terminal, network namespace and rlimits, then
// execs the backend's command: at once for the serve backend (the init
// proxy, proxy.h, which waits on ROOT/ID/exec.fifo itself), or, for the
// run backend, once `start` has opened exec.fifo (`sentry run ...`, which
// exits with the sandbox init's status, 128+N for signal N).
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
  bool wait_fifo = true;  // else exec at once, `report` kept open across it
  const struct rlimit* rlimits = nullptr;
  const int* rlimit_resources = nullptr;
  int n_rlimits = 0;
  // cgroup.procs of the container's accounting cgroups, joined ("0").
  const int* cgroup_procs = nullptr;
  int n_cgroup_procs = 0;
};

// The child's side; never returns.
[[noreturn]] void RunInitChild(const InitPlan& plan);

// exec's child: its own session, `keep` open across the exec of `exe`.
[[noreturn]] void RunExecChild(const char* exe, char* const* argv,
                               char* const* envp, int keep);

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_INIT_PROXY_H_
