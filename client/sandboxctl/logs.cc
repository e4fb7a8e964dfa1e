// sandboxctl logs [-f] [--pid=N] ID: the init program's (or exec'd process
// N's) output that the daemon kept.
#include <unistd.h>

#include <cstdio>

#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Logs(Client& c, std::vector<std::string> args) {
  bool follow = false;
  int pid = 0;
  flags::FlagSet fs("sandboxctl logs", "[FLAGS] ID",
                    "output of the init program (kept by the daemon, 1 MiB)");
  fs.Bool("follow", &follow, "until the program ends");
  fs.Alias("-f", "follow");
  fs.Int("pid", &pid, "an exec'd process's output (its pid in the sandbox)");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "logs: which sandbox? (logs [-f] ID)");
  FailOn(c.Logs(rest[0], follow, [](const v1::LogsResponse& m) {
    if (m.dropped_bytes() > 0) {
      fprintf(stderr, "sandboxctl: (%llu earlier bytes were dropped from the log)\n",
              static_cast<unsigned long long>(m.dropped_bytes()));
    }
    if (m.msg_case() == v1::LogsResponse::kStdout) WriteAll(STDOUT_FILENO, m.stdout());
    if (m.msg_case() == v1::LogsResponse::kStderr) WriteAll(STDERR_FILENO, m.stderr());
  }, pid));
  return 0;
}

}  // namespace sandboxd::client::ctl
