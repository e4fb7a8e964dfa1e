// sandboxctl stop [-t SECS] ID...: docker stop. SIGTERM to the init, then,
// when it has not ended after the grace period, SIGKILL (the daemon's host
// kill of every process: Signal's SIGKILL of the init); prints each id
// once it is stopped.
#include <signal.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/sandboxctl/sandboxctl.h"

namespace sandboxd::client::ctl {
namespace {

// Whether `id` is gone (removed meanwhile: run --rm) or no longer running.
absl::StatusOr<bool> Stopped(Client& c, const std::string& id) {
  absl::StatusOr<v1::SandboxInfo> info = c.Get(id);
  if (absl::IsNotFound(info.status())) return true;
  if (!info.ok()) return info.status();
  return info->state() != v1::SANDBOX_STATE_RUNNING;
}

absl::Status StopOne(Client& c, const std::string& id, absl::Duration grace) {
  absl::StatusOr<v1::SandboxInfo> info = c.Get(id);
  if (!info.ok()) return info.status();  // an unknown id is an error, as docker's
  if (info->state() != v1::SANDBOX_STATE_RUNNING) return absl::OkStatus();
  absl::StatusOr<bool> stopped;
  absl::Status s = c.Signal(id, SIGTERM);
  if (!s.ok() && !absl::IsFailedPrecondition(s)) return s;  // ended meanwhile: fine
  absl::StatusOr<v1::ExitStatus> e = c.Wait(id, grace);
  if (e.ok()) return absl::OkStatus();
  if (!absl::IsDeadlineExceeded(e.status())) {
    stopped = Stopped(c, id);
    if (!stopped.ok() || *stopped) return stopped.status();
  }
  s = c.Signal(id, SIGKILL);
  if (!s.ok() && !absl::IsFailedPrecondition(s) && !absl::IsNotFound(s)) return s;
  e = c.Wait(id, absl::Seconds(30));
  if (e.ok()) return absl::OkStatus();
  stopped = Stopped(c, id);
  if (!stopped.ok()) return stopped.status();
  if (!*stopped) return absl::DeadlineExceededError("still running 30 s after SIGKILL");
  return absl::OkStatus();
}

}  // namespace

int Stop(Client& c, std::vector<std::string> args) {
  int secs = 10;
  flags::FlagSet fs("sandboxctl stop", "[-t SECS] ID...",
                    "SIGTERM to each sandbox's init, SIGKILL after the grace period");
  fs.Int("time", &secs, "seconds to wait for the init after SIGTERM before SIGKILL (10)");
  fs.Alias("-t", "time");
  std::vector<std::string> rest = ParseFlags(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "stop: which sandbox? (stop [-t SECS] ID...)");
  if (secs < 0) Fail(kExitError, "stop: -t wants a number of seconds >= 0");
  int code = 0;
  for (const std::string& id : rest) {
    absl::Status s = StopOne(c, id, absl::Seconds(secs));
    if (!s.ok()) {
      fprintf(stderr, "sandboxctl: stop %s: %s\n", id.c_str(), std::string(s.message()).c_str());
      code = kExitError;
      continue;
    }
    printf("%s\n", id.c_str());
  }
  return code;
}

}  // namespace sandboxd::client::ctl
