// The daemon's state directory (default /run/sandboxd): what a daemon
// restarted after a crash or an upgrade needs to find, re-adopt or clean
// up everything an earlier instance left, and nothing else:
//
//   lock                      flock'ed: one daemon per state directory
//   cgroup-parent             the cgroup parent's name, when this state
//                             directory's daemon created it
//   sentries/<pid>            every Sentry spawned (pool ones included):
//                             its start time and cgroup name
//   sockets/<pid>             a warm Sentry's Persist socket, renamed to
//                             its sandbox's control.sock at the create
//   sandboxes/<id>/sandbox.pb the sandbox (v1::SandboxInfo: spec, state,
//                             timings, exit, Sentry pid), replaced
//                             atomically at each change
//   sandboxes/<id>/output.log the init's output (OutputLog's file)
//   sandboxes/<id>/control.sock  the socket its Sentry accepts the next
//                             daemon's control channel on (control.proto
//                             Persist)
//   sandboxes/<id>/exec-<pid>.pb   an Exec'd process (v1::ExecInfo),
//   sandboxes/<id>/exec-<pid>.log  and its output (OutputLog's file)
//   sandboxes/<id>/network    NETWORK_MODE_SANDBOX's pasta: its pid and
//                             start time, so that a restarted daemon ends
//                             it with the sandbox
//
// Thread safety: every method may be called from any thread.
#ifndef SANDBOXD_DAEMON_STATE_DIR_H_
#define SANDBOXD_DAEMON_STATE_DIR_H_

#include <sys/types.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "proto/sandbox.pb.h"

namespace sandboxd {
namespace daemon {

// One sentries/<pid> file.
struct SentryRecord {
  pid_t pid = 0;
  std::string start_time;  // ProcessStartTime when recorded
  std::string cgroup;      // "" without cgroups
  // The recorded process still runs (same pid and start time).
  bool Alive() const;
};

class StateDir {
 public:
  // Creates the directory if needed and takes its lock; FAILED_PRECONDITION
  // when another live daemon holds it.
  static absl::StatusOr<std::unique_ptr<StateDir>> Open(const std::string& path);

  const std::string& path() const { return path_; }

  // --- Sentries
  absl::Status Record(pid_t pid, const std::string& cgroup = "");
  // Removes sentries/<pid> (and sockets/<pid>).
  void Forget(pid_t pid);
  // sandboxes/<id>/network: the pasta serving sandbox `id`'s network
  // namespace. LoadNetwork gives pid 0 when none is recorded.
  absl::Status RecordNetwork(const std::string& id, pid_t pid);
  SentryRecord LoadNetwork(const std::string& id) const;
  void ForgetNetwork(const std::string& id);
  std::vector<SentryRecord> Sentries() const;
  // Kills (SIGKILL, with their process groups) the recorded Sentries that
  // still run, except those in `keep` (re-adopted), and forgets them;
  // appends the cgroup names of the forgotten ones to `cgroups` (may be
  // null). Returns how many were killed.
  int KillStale(const std::set<pid_t>& keep = {},
                std::vector<std::string>* cgroups = nullptr);

  // --- Sandboxes
  std::string SandboxDir(const std::string& id) const;
  // Writes sandboxes/<id>/sandbox.pb atomically (a temporary file renamed).
  absl::Status SaveSandbox(const v1::SandboxInfo& info);
  // Every readable record; `unreadable` (may be null) gets the ids of the
  // directories that have none or an unreadable one.
  std::vector<v1::SandboxInfo> LoadSandboxes(
      std::vector<std::string>* unreadable) const;
  // Removes sandboxes/<id> and everything in it.
  void RemoveSandbox(const std::string& id);
  std::string OutputLogPath(const std::string& id) const;
  // Exec'd process `pid` of sandbox `id`: its record and output log.
  absl::Status SaveExec(const std::string& id, const v1::ExecInfo& info);
  std::vector<v1::ExecInfo> LoadExecs(const std::string& id) const;
  void RemoveExec(const std::string& id, int pid);
  std::string ExecLogPath(const std::string& id, int pid) const;
  // A listening SOCK_SEQPACKET socket at sandboxes/<id>/control.sock
  // (replacing a stale one), and a connection to it.
  absl::StatusOr<UniqueFd> Listen(const std::string& id);
  absl::StatusOr<UniqueFd> Connect(const std::string& id) const;
  // A listening socket at sockets/<pid>, for a warm Sentry; and its move
  // to sandboxes/<id>/control.sock (a rename: the Sentry's listening
  // socket is reachable at the new name).
  absl::StatusOr<UniqueFd> ListenWarm(pid_t pid);
  absl::Status MoveWarmSocket(pid_t pid, const std::string& id);

  // --- The cgroup parent this state directory's daemon created (if any).
  void RecordCgroupParent(const std::string& parent);
  bool CreatedCgroupParent(const std::string& parent) const;
  void ForgetCgroupParent();

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
// Whether `pid` has died and awaits its parent's wait.
bool IsZombie(pid_t pid);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_STATE_DIR_H_
