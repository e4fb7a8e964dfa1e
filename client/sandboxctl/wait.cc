// sandboxctl wait [--pid=N] ID: exits as the sandbox's init program (or
// its exec'd process N) did.
// sandboxctl wait --restored ID: returns once every page of a restored
// sandbox is loaded (0), or with the load's error (125).
#include "absl/strings/str_cat.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Wait(Client& c, std::vector<std::string> args) {
  bool restored = false;
  int pid = 0;
  flags::FlagSet fs("sandboxctl wait", "[--restored | --pid=N] ID",
                    "exits as the init program did; with --restored, returns\n"
                    "once a restored sandbox's memory is all loaded");
  fs.Bool("restored", &restored,
          "wait until every page of the restored sandbox's image is loaded "
          "(exit 0), not for its exit; a failed load is an error (125)");
  fs.Int("pid", &pid, "an exec'd process (its pid in the sandbox) instead of the init");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "wait: which sandbox? (wait ID)");
  const std::string id = rest[0];
  if (restored) {
    absl::StatusOr<v1::RestoreProgress> p = c.WaitRestored(id);
    FailOn(p.status());
    return 0;
  }
  absl::StatusOr<v1::ExitStatus> e = pid != 0 ? c.WaitPid(id, pid) : c.Wait(id);
  FailOn(e.status());
  if (!e->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", e->error()));
  return ExitCode(*e);
}

}  // namespace sandboxd::client::ctl
