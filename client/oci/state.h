// A container's record under the runtime's --root, as runc keeps its
// state.json: ROOT/ID/state.json (what `state` prints, plus the init
// proxy's start time, which tells the recorded pid from a reused one) and
// ROOT/ID/exec.fifo, which exists from `create` until `start` (the init
// proxy waits on it). No lock: the shim runs one command per container at
// a time, as it does with runc.
#ifndef SANDBOXD_CLIENT_OCI_STATE_H_
#define SANDBOXD_CLIENT_OCI_STATE_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sandboxd::oci {

struct ContainerState {
  std::string id;
  pid_t pid = 0;
  uint64_t pid_start = 0;  // /proc/PID/stat field 22
  std::string bundle;
  std::string rootfs;
  std::string created;  // RFC 3339, UTC, nanoseconds
  std::map<std::string, std::string> annotations;
  // The daemon backend's sandboxd socket ("" for a Sentry of our own).
  std::string sandboxd_socket;
  // The accounting cgroups create made (cgroup.h), which delete removes.
  std::vector<std::string> cgroups;
};

enum class Status { kCreated, kRunning, kPaused, kStopped };
const char* StatusName(Status s);

// A container id runc would take: [A-Za-z0-9_+.-]+, not "." or "..".
absl::Status CheckId(const std::string& id);

std::string ContainerDir(const std::string& root, const std::string& id);
std::string FifoPath(const std::string& root, const std::string& id);
// Exists while the container is paused (`pause` until `resume`).
std::string PausedPath(const std::string& root, const std::string& id);

absl::Status WriteState(const std::string& root, const ContainerState& st);
// NotFound ("container ID does not exist") when there is no record.
absl::StatusOr<ContainerState> ReadState(const std::string& root,
                                         const std::string& id);
// Every recorded id under root, sorted.
std::vector<std::string> ListIds(const std::string& root);

// Whether the recorded init proxy still runs (not a zombie, same start
// time), whether it still waits for `start`, and whether it is paused.
Status CurrentStatus(const std::string& root, const ContainerState& st);
// The start time of `pid` (0 when it is gone or a zombie).
uint64_t ProcessStartTime(pid_t pid);
// `pid` and every process below it (host pids), pid first.
std::vector<pid_t> ProcessTree(pid_t pid);

// runc's `state` JSON of the container.
std::string StateJson(const ContainerState& st, Status status);

// JSON string literal of `s`.
std::string JsonQuote(const std::string& s);

// Now, as RFC 3339 with nanoseconds, UTC.
std::string NowRfc3339();

}  // namespace sandboxd::oci

#endif  // SANDBOXD_CLIENT_OCI_STATE_H_
