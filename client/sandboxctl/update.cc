// sandboxctl update [--memory=BYTES] [--cpus=N] [--pids-limit=N] ID...
// (docker update's flags): a running sandbox's limits.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {

int Update(Client& c, std::vector<std::string> args) {
  v1::Limits lim;
  flags::FlagSet fs("sandboxctl update", "[FLAGS] ID...",
                    "changes running sandboxes' limits (a flag left out keeps its limit)");
  fs.Func("memory", "BYTES[k|m|g]", "the memory limit (it covers the Sentry too)",
          [&lim](absl::string_view v) {
            absl::StatusOr<uint64_t> n = ParseBytes(v);
            if (!n.ok()) return n.status();
            if (*n == 0) return absl::InvalidArgumentError("want a positive size, got 0");
            lim.set_memory_bytes(*n);
            return absl::OkStatus();
          });
  fs.Alias("-m", "memory");
  fs.Func("cpus", "N", "the CPU limit (e.g. 0.5; the sandbox sees whole CPUs, rounded up)",
          [&lim](absl::string_view v) {
            double cpus;
            if (!absl::SimpleAtod(v, &cpus) || cpus <= 0) {
              return absl::InvalidArgumentError(absl::StrCat("want a positive number, got ", v));
            }
            lim.set_cpu_millis(static_cast<uint64_t>(cpus * 1000 + 0.5));
            return absl::OkStatus();
          });
  fs.Func("pids-limit", "N", "the most tasks (threads) at once", [&lim](absl::string_view v) {
    uint64_t n;
    if (!absl::SimpleAtoi(v, &n) || n == 0) {
      return absl::InvalidArgumentError(absl::StrCat("want a positive number, got ", v));
    }
    lim.set_pids(n);
    return absl::OkStatus();
  });
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) {
    Fail(kExitError, "update: which sandbox? (update [--memory=B] [--cpus=N] [--pids-limit=N] ID...)");
  }
  if (!lim.memory_bytes() && !lim.cpu_millis() && !lim.pids()) {
    Fail(kExitError, "update: give at least one of --memory, --cpus, --pids-limit");
  }
  // As docker update: each sandbox in turn, its id printed once updated.
  int code = 0;
  for (const std::string& id : rest) {
    absl::StatusOr<v1::Limits> now = c.Update(id, lim);
    if (!now.ok()) {
      fprintf(stderr, "sandboxctl: update %s: %s\n", id.c_str(),
              std::string(now.status().message()).c_str());
      code = kExitError;
      continue;
    }
    printf("%s\n", id.c_str());
  }
  return code;
}

}  // namespace sandboxd::client::ctl
