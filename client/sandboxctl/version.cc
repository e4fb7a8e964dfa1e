// sandboxctl version: the client's version and the daemon's (its
// Capabilities call), as `docker version` prints both.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/version.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Version(Client& c, std::vector<std::string> args) {
  flags::FlagSet fs("sandboxctl version", "",
                    "the versions of sandboxctl and of the daemon it talks to");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (!rest.empty()) Fail(kExitError, absl::StrCat("version: unknown argument: ", rest[0]));
  printf("client: sandboxctl %s\n", kVersion);
  fflush(stdout);
  absl::StatusOr<v1::CapabilitiesResponse> caps = c.Capabilities();
  FailOn(caps.status());
  printf("daemon: sandboxd %s (%s)\n",
         caps->version().empty() ? "older than 0.1.0" : caps->version().c_str(),
         c.target().c_str());
  return 0;
}

}  // namespace sandboxd::client::ctl
