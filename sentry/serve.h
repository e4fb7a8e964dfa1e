// `sentry serve`: a warm Sentry that sandboxd keeps in its pool.
//
// It prewarms (boot::Prewarm: host info, memory file, platform, vDSO),
// says Hello on the control channel (proto/control.proto) with the time of
// each prewarm step, then serves the daemon's requests: Start builds the
// sandbox from the spec and the fds that come with it and runs its init;
// Wait/WaitPid stay pending on threads of their own while other requests
// are served; Destroy kills everything, answers with init's status and
// exits 0. When the channel closes (the daemon is gone), a Sentry whose
// sandbox has started and which got Persist (a listening socket in the
// daemon's state directory) lets the sandbox run on and serves the next
// daemon that connects to that socket (Reattach hands it the descriptors
// kept meanwhile); any other Sentry (a warm one, or one never made to
// persist) kills the sandbox and exits.
//
// The daemon spawns it with clone(CLONE_NEWPID), so that the Sentry is the
// init of a pid namespace of its own (isolation.h says why the Sentry
// cannot make that namespace itself).
#ifndef SANDBOXD_SENTRY_SERVE_H_
#define SANDBOXD_SENTRY_SERVE_H_

#include <string>

#include "platforms/registry.h"

namespace sandboxd::serve {

struct Options {
  int control_fd = -1;  // one end of a SOCK_SEQPACKET socketpair
  // A name from platforms/registry.h, and that back-end's options
  // (--systrap-patch=on, --kvm-vcpu-pool=eager, ...).
  std::string platform = platform::Registry::Get().DefaultName();
  platform::OptionValues platform_options;
  bool vdso_tsc = true;
  // New namespaces, an empty root, no capabilities (isolation.h);
  // --isolation=off for debugging.
  bool isolate = true;
  // --network=host: the daemon's network namespace instead of one of the
  // Sentry's own (EnterNamespaces); it then serves only specs with
  // NETWORK_MODE_HOST, and the others only specs without.
  bool host_network = false;
  // The Sentry's seccomp filter (host_filter.h); --sentry-seccomp=off for
  // debugging.
  bool sentry_seccomp = true;
};

// Runs until Destroy or until the channel closes; returns the Sentry's
// exit status.
int Serve(const Options& o);

}  // namespace sandboxd::serve

#endif  // SANDBOXD_SENTRY_SERVE_H_
