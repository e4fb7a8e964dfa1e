// sandboxctl wait [--pid=N] ID: exits as the sandbox's init program (or
// its exec'd process N) did.
#include "absl/strings/str_cat.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Wait(Client& c, std::vector<std::string> args) {
  int pid = 0;
  flags::FlagSet fs("sandboxctl wait", "ID", "exits as the init program did");
  fs.Int("pid", &pid, "an exec'd process (its pid in the sandbox) instead of the init");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "wait: which sandbox? (wait ID)");
  const std::string id = rest[0];
  absl::StatusOr<v1::ExitStatus> e = pid != 0 ? c.WaitPid(id, pid) : c.Wait(id);
  FailOn(e.status());
  if (!e->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", e->error()));
  return ExitCode(*e);
}

}  // namespace sandboxd::client::ctl
