// What runs between fork and exec of pasta (sandbox_net.h).
#ifndef SANDBOXD_SENTRY_SOCKET_SANDBOX_NET_SIGNAL_SAFE_H_
#define SANDBOXD_SENTRY_SOCKET_SANDBOX_NET_SIGNAL_SAFE_H_

namespace sandboxd::sandbox_net {

struct PastaChildArgs {
  const char* path;
  char* const* argv;
  int stdin_fd;     // becomes fd 0 (/dev/null)
  int stderr_fd;    // becomes fds 1 and 2 (a pipe the parent reads)
  int keep_fds[3];  // made inheritable (-1: none)
};

// Resets the signal mask and dispositions, sets up stdio, and execs
// pasta. Never returns; exits 127 when anything fails.
[[noreturn]] void RunPastaChild(const PastaChildArgs& a);

}  // namespace sandboxd::sandbox_net

#endif  // SANDBOXD_SENTRY_SOCKET_SANDBOX_NET_SIGNAL_SAFE_H_
