// sandboxctl pause ID... / unpause ID... (docker's names): every process
// of a running sandbox stopped, then continued (sandboxd's Pause, Resume).
#include "absl/strings/str_cat.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {
namespace {

int PauseOrUnpause(Client& c, std::vector<std::string> args, bool pause) {
  const char* verb = pause ? "pause" : "unpause";
  flags::FlagSet fs(absl::StrCat("sandboxctl ", verb), "ID...",
                    pause ? "stops every process of running sandboxes"
                          : "continues paused sandboxes");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, absl::StrCat(verb, ": which sandbox? (", verb, " ID...)"));
  // As docker: each sandbox in turn, its id printed once done.
  int code = 0;
  for (const std::string& id : rest) {
    absl::Status s = pause ? c.Pause(id) : c.Resume(id);
    if (!s.ok()) {
      fprintf(stderr, "sandboxctl: %s %s: %s\n", verb, id.c_str(),
              std::string(s.message()).c_str());
      code = kExitError;
      continue;
    }
    printf("%s\n", id.c_str());
  }
  return code;
}

}  // namespace

int Pause(Client& c, std::vector<std::string> args) {
  return PauseOrUnpause(c, std::move(args), true);
}

int Unpause(Client& c, std::vector<std::string> args) {
  return PauseOrUnpause(c, std::move(args), false);
}

}  // namespace sandboxd::client::ctl
