// sandboxctl wait ID: exits as the sandbox's init program did.
#include "absl/strings/str_cat.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Wait(Client& c, std::vector<std::string> args) {
  flags::FlagSet fs("sandboxctl wait", "ID", "exits as the init program did");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "wait: which sandbox? (wait ID)");
  const std::string id = rest[0];
  absl::StatusOr<v1::ExitStatus> e = c.Wait(id);
  FailOn(e.status());
  if (!e->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", e->error()));
  return ExitCode(*e);
}

}  // namespace sandboxd::client::ctl
