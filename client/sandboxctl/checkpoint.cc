// sandboxctl checkpoint ID DIR: the sandbox's image into DIR.
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Checkpoint(Client& c, std::vector<std::string> args) {
  flags::FlagSet fs("sandboxctl checkpoint", "ID DIR",
                    "writes the sandbox's checkpoint image into DIR");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  v1::CheckpointRequest req;
  if (rest.empty()) Fail(kExitError, "checkpoint: which sandbox? (checkpoint ID DIR)");
  req.set_id(rest[0]);
  if (rest.size() < 2) Fail(kExitError, "checkpoint: where to? (checkpoint ID DIR)");
  req.set_image_dir(rest[1]);
  FailOn(c.Checkpoint(req));
  return 0;
}

}  // namespace sandboxd::client::ctl
