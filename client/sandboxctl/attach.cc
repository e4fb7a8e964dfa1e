// sandboxctl attach ID: follows a running sandbox's init (docker attach):
// its output from now on, stdin forwarded when the sandbox keeps it open
// (created with -i), ^P ^Q detaches when the init has a terminal; exits
// as the init did.
#include <unistd.h>

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/sandboxctl/sandboxctl.h"
#include "client/sandboxctl/sig_proxy.h"
#include "client/sandboxctl/terminal.h"

namespace sandboxd::client::ctl {

int Attach(Client& c, std::vector<std::string> args) {
  bool no_stdin = false;
  flags::FlagSet fs("sandboxctl attach", "[FLAGS] ID",
                    "follows a running sandbox's init: its output, and stdin when the sandbox "
                    "was created with -i; ^P ^Q detaches (with a terminal)");
  fs.Bool("no-stdin", &no_stdin, "do not send stdin");
  bool sig_proxy = true;
  SigProxyFlag(fs, &sig_proxy);
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "attach: which sandbox? (attach ID)");
  const std::string id = rest[0];
  absl::StatusOr<v1::SandboxInfo> info = c.Get(id);
  FailOn(info.status());
  if (info->state() != v1::SANDBOX_STATE_RUNNING) {
    Fail(kExitError, absl::StrCat("sandbox ", id, " is not running (it is ",
                                  absl::AsciiStrToLower(absl::StripPrefix(
                                      v1::SandboxState_Name(info->state()), "SANDBOX_STATE_")),
                                  ")"));
  }
  const bool tty = info->spec().process().tty();
  const bool interactive = !no_stdin && info->spec().open_stdin();
  // The local terminal goes raw only when its keys go to the init: without
  // stdin, ^C ends this client (a detach) and the init runs on.
  ExecIo io = StdIo(interactive, tty && interactive && isatty(STDIN_FILENO));
  // Stdin's end here is not the init's: the next attach may send more.
  io.keep_stdin_open = true;
  io.detach_keys = tty && interactive;
  bool detached = false;
  io.detached = &detached;
  if (sig_proxy && !tty) {
    CatchSignalsForProxy();
    ProxySignalsTo(&c, id);
  }
  absl::StatusOr<v1::ExitStatus> exit = c.Exec(id, /*attach=*/true, {}, std::move(io));
  RestoreTerminal();
  if (detached) {
    fprintf(stderr, "\r\nsandboxctl: detached from %s (it runs on)\n", id.c_str());
    return 0;
  }
  if (!exit.ok()) Fail(kExitError, std::string(exit.status().message()));
  if (!exit->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", exit->error()));
  return ExitCode(*exit);
}

}  // namespace sandboxd::client::ctl
