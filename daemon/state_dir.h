// The daemon's state directory (default /run/sandboxd): a lock file that
// keeps two daemons from sharing it, and one file per live Sentry
// (sentries/<pid>, holding the process's start time) so that a daemon
// restarted after a crash can find and kill the Sentries an earlier
// instance left behind.
//
// Thread safety: Record and Forget may be called from any thread.
#ifndef SANDBOXD_DAEMON_STATE_DIR_H_
#define SANDBOXD_DAEMON_STATE_DIR_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace sandboxd {
namespace daemon {

class StateDir {
 public:
  // Creates the directory if needed and takes its lock; FAILED_PRECONDITION
  // when another live daemon holds it.
  static absl::StatusOr<std::unique_ptr<StateDir>> Open(const std::string& path);

  const std::string& path() const { return path_; }

  // Kills (SIGKILL, with their process groups) the Sentries recorded by an
  // earlier daemon that still run, and forgets every record. Returns how
  // many were killed.
  int KillStale();

  absl::Status Record(pid_t pid);
  void Forget(pid_t pid);

 private:
  StateDir(std::string path, UniqueFd lock) : path_(std::move(path)), lock_(std::move(lock)) {}
  std::string SentryFile(pid_t pid) const;

  const std::string path_;
  UniqueFd lock_;  // flock'ed for the daemon's lifetime
};

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or
// "" when the process does not exist: with the pid, it names one process
// even after pids wrap.
std::string ProcessStartTime(pid_t pid);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_STATE_DIR_H_
