// docker run's signal proxy (--sig-proxy, on by default without -t): the
// signals an attached sandboxctl receives go to the program instead of
// ending sandboxctl (and, with --rm, the sandbox). With -t they are not
// needed: ^C, ^\ and ^Z are bytes the sandbox's own terminal turns into
// signals.
#ifndef SANDBOXD_CLIENT_SANDBOXCTL_SIG_PROXY_H_
#define SANDBOXD_CLIENT_SANDBOXCTL_SIG_PROXY_H_

#include <string>

#include "client/client.h"

namespace sandboxd::client::ctl {

// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are caught from
// now on (handlers, so it holds for every thread, gRPC's included) and
// held until ProxySignalsTo names where they go.
void CatchSignalsForProxy();
// Sends each caught signal, in order, to process `pid` of sandbox `id`
// (0: its init) through Signal. Preconditions: CatchSignalsForProxy ran;
// called once.
void ProxySignalsTo(Client* c, const std::string& id, int pid = 0);

// sig_proxy_signal_safe.cc: the handler and its pipe.
extern int sig_proxy_pipe[2];
void OnProxiedSignal(int sig);

}  // namespace sandboxd::client::ctl

#endif  // SANDBOXD_CLIENT_SANDBOXCTL_SIG_PROXY_H_
