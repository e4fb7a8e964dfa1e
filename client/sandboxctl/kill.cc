// sandboxctl kill [-s SIGNAL] [--all | --pid=N] ID.
#include <signal.h>
#include <string.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {
namespace {

// A number, or a name with or without SIG ("TERM", "sigterm").
absl::StatusOr<int> ParseSignal(absl::string_view v) {
  int n;
  if (absl::SimpleAtoi(v, &n)) return n;
  const std::string upper = absl::AsciiStrToUpper(v);
  absl::string_view name = upper;
  absl::ConsumePrefix(&name, "SIG");
  for (int s = 1; s < 32; s++) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev != nullptr && name == abbrev) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown signal: ", v));
}

}  // namespace

int Kill(Client& c, std::vector<std::string> args) {
  int sig = SIGKILL;
  bool all = false;
  int pid = 0;
  flags::FlagSet fs("sandboxctl kill", "[FLAGS] ID",
                    "sends a signal to the sandbox's init, a process or all");
  fs.Func(
      "signal", "SIGNAL", "a number or a name (TERM, SIGTERM)",
      [&sig](absl::string_view v) {
        absl::StatusOr<int> s = ParseSignal(v);
        if (!s.ok()) return s.status();
        sig = *s;
        return absl::OkStatus();
      },
      "KILL");
  fs.Alias("-s", "signal");
  fs.Bool("all", &all, "every process of the sandbox");
  fs.Alias("-a", "all");
  fs.Func("pid", "N", "process N inside the sandbox", [&pid](absl::string_view v) {
    if (!absl::SimpleAtoi(v, &pid) || pid <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("want a pid inside the sandbox, got ", v));
    }
    return absl::OkStatus();
  });
  fs.Alias("-p", "pid");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) {
    Fail(kExitError, "kill: which sandbox? (kill [-s SIGNAL] [--all | --pid=N] ID)");
  }
  FailOn(c.Signal(rest[0], sig, all, pid));
  return 0;
}

}  // namespace sandboxd::client::ctl
