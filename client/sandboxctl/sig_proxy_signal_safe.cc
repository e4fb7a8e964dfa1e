// The signal handler of the signal proxy (sig_proxy.cc): it only writes
// the signal's number to a pipe, which the proxy's thread reads.
#include <unistd.h>

#include "client/sandboxctl/sig_proxy.h"

namespace sandboxd::client::ctl {

int sig_proxy_pipe[2] = {-1, -1};

void OnProxiedSignal(int sig) {
  const unsigned char c = static_cast<unsigned char>(sig);
  (void)!write(sig_proxy_pipe[1], &c, 1);
}

}  // namespace sandboxd::client::ctl
