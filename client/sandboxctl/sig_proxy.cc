#include "client/sandboxctl/sig_proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

namespace sandboxd::client::ctl {

void CatchSignalsForProxy() {
  if (sig_proxy_pipe[0] >= 0) return;
  if (pipe2(sig_proxy_pipe, O_CLOEXEC) != 0) return;  // signals keep their defaults
  // A full pipe drops signals rather than blocking a handler.
  fcntl(sig_proxy_pipe[1], F_SETFL, O_NONBLOCK);
  struct sigaction sa = {};
  sa.sa_handler = OnProxiedSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    sigaction(sig, &sa, nullptr);
  }
}

void ProxySignalsTo(Client* c, const std::string& id, int pid) {
  if (sig_proxy_pipe[0] < 0) return;
  std::thread([c, id, pid] {
    for (;;) {
      unsigned char sig;
      ssize_t n = read(sig_proxy_pipe[0], &sig, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1) return;
      // The program may have ended meanwhile: nothing to tell anyone.
      (void)c->Signal(id, sig, /*all=*/false, pid);
    }
  }).detach();
}

}  // namespace sandboxd::client::ctl
