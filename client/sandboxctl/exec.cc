// sandboxctl exec ID -- PROGRAM: another process in a running sandbox;
// exits as it did.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "client/sandboxctl/sandboxctl.h"
#include "client/sandboxctl/sig_proxy.h"
#include "client/sandboxctl/terminal.h"

namespace sandboxd::client::ctl {

int Exec(Client& c, std::vector<std::string> args) {
  v1::ProcessSpec p;
  bool interactive = false, tty = false, detach = false;
  flags::FlagSet fs("sandboxctl exec", "[FLAGS] ID [--] PROGRAM [ARGS...]",
                    "runs another process in a running sandbox");
  fs.Bool("interactive", &interactive, "send stdin to the program");
  fs.Alias("-i", "interactive");
  fs.Bool("tty", &tty, "give the program a terminal");
  fs.Alias("-t", "tty");
  fs.Bool("detach", &detach, "print the process's pid and leave it running (wait/logs --pid)");
  fs.Alias("-d", "detach");
  fs.Func("env", "K=V", "an environment variable (repeatable)", [&p](absl::string_view v) {
    p.add_env(std::string(v));
    return absl::OkStatus();
  });
  fs.Alias("-e", "env");
  fs.Func("cwd", "DIR", "the program's working directory", [&p](absl::string_view v) {
    p.set_cwd(std::string(v));
    return absl::OkStatus();
  });
  fs.Alias("-w", "cwd");
  UserFlag(fs, &p);
  bool sig_proxy = true;
  SigProxyFlag(fs, &sig_proxy);
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "exec: which sandbox? (exec ID -- PROGRAM [ARGS...])");
  const std::string id = rest[0];
  for (std::string& s : Program(rest, 1, "exec")) p.add_argv(std::move(s));
  p.set_tty(tty);
  // The sandbox's env, cwd and user hold where -e, -w and -u name none
  // (the daemon fills them in, as docker exec does); only TERM is ours.
  DefaultEnv(&p, tty, /*path=*/false);
  if (detach && (interactive || tty)) Fail(kExitError, "exec: -d goes without -i and -t");
  ExecIo io = StdIo(interactive, tty);
  if (tty && !interactive) RestoreTerminal();  // as run: ^C is a signal here
  if (detach) {
    io.detach_after_pid = true;
    io.on_pid = [](int pid) { printf("%d\n", pid); };
  } else if (sig_proxy && !(tty && interactive)) {
    CatchSignalsForProxy();
    io.on_pid = [&c, id](int pid) { ProxySignalsTo(&c, id, pid); };
  }
  absl::StatusOr<v1::ExitStatus> exit = c.Exec(id, /*attach=*/false, p, std::move(io));
  if (detach && exit.ok()) return 0;
  RestoreTerminal();
  if (!exit.ok()) Fail(StartFailureCode(exit.status()), std::string(exit.status().message()));
  if (!exit->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", exit->error()));
  return ExitCode(*exit);
}

}  // namespace sandboxd::client::ctl
