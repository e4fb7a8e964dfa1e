// sandboxctl rm [-f] ID...: destroys sandboxes (-f: also running ones).
#include <cstdio>

#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Rm(Client& c, std::vector<std::string> args) {
  bool force = false;
  flags::FlagSet fs("sandboxctl rm", "[FLAGS] ID...", "destroys sandboxes");
  fs.Bool("force", &force, "also running ones");
  fs.Alias("-f", "force");
  std::vector<std::string> ids = ParseFlags(fs, std::move(args));
  if (ids.empty()) Fail(kExitError, "rm: which sandbox? (rm [-f] ID...)");
  int rc = 0;
  for (const std::string& id : ids) {
    if (!force) {
      absl::StatusOr<v1::SandboxInfo> info = c.Get(id);
      if (info.ok() && info->state() == v1::SANDBOX_STATE_RUNNING) {
        fprintf(stderr, "sandboxctl: sandbox %s is running (stop it first, or rm -f)\n",
                id.c_str());
        rc = kExitError;
        continue;
      }
    }
    absl::StatusOr<v1::ExitStatus> e = c.Destroy(id);
    if (!e.ok()) {
      fprintf(stderr, "sandboxctl: %s\n", std::string(e.status().message()).c_str());
      rc = kExitError;
      continue;
    }
    printf("%s\n", id.c_str());
  }
  return rc;
}

}  // namespace sandboxd::client::ctl
