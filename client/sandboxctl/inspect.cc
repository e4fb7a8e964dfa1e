// sandboxctl inspect ID: the sandbox as JSON (sandboxd.v1.SandboxInfo).
#include <cstdio>

#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Inspect(Client& c, std::vector<std::string> args) {
  flags::FlagSet fs("sandboxctl inspect", "ID", "the sandbox as JSON");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "inspect: which sandbox? (inspect ID)");
  absl::StatusOr<v1::SandboxInfo> info = c.Get(rest[0]);
  FailOn(info.status());
  fputs(ToJson(*info).c_str(), stdout);
  return 0;
}

}  // namespace sandboxd::client::ctl
