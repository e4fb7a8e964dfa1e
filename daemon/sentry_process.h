// One Sentry process, as the daemon sees it: the child it spawned
// (`sentry serve --control-fd=3`), the daemon's end of its control channel
// (proto/control.proto), and the thread that reads the channel.
//
// Requests are multiplexed: Call sends one and waits for the response with
// the same id, so a Wait may stay pending while Signal, Exec or Stats are
// served. The reader thread is also the process's only reaper: when the
// channel closes (the Sentry exited, crashed or was killed) it collects the
// exit status, fails every pending call with the reason, and runs the exit
// callback.
//
// A Sentry re-adopted by a restarted daemon (Adopt) is no child of it: its
// channel is a connection to the socket it listens on (control.proto
// Persist), it is watched and killed through a pidfd, and its exit status
// goes to whoever is its parent now.
//
// Thread safety: every method may be called from any thread.
#ifndef SANDBOXD_DAEMON_SENTRY_PROCESS_H_
#define SANDBOXD_DAEMON_SENTRY_PROCESS_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/control.pb.h"
#include "proto/control_channel.h"

namespace sandboxd {
namespace daemon {

struct SentrySpawnOptions {
  std::string sentry_path;  // the `sentry` binary
  std::string platform;     // --platform=
  std::vector<std::string> flags;  // more `sentry serve` flags (SentryKind)
  // A network namespace the child enters before exec (-1: the daemon's);
  // only open during Spawn.
  int netns_fd = -1;
  // Runs in the daemon after fork, while the child waits before exec (so
  // that the Sentry is in its cgroup before it forks anything). An error
  // kills the child.
  std::function<absl::Status(pid_t)> before_exec;
};

class SentryProcess {
 public:
  static absl::StatusOr<std::unique_ptr<SentryProcess>> Spawn(
      const SentrySpawnOptions& options);
  // The running Sentry `pid` (started at `start_time`, state_dir.h's
  // ProcessStartTime) of an earlier daemon, over `channel` (a connection
  // to its Persist socket). UNAVAILABLE when that process is gone.
  static absl::StatusOr<std::unique_ptr<SentryProcess>> Adopt(
      pid_t pid, const std::string& start_time, UniqueFd channel);
  // A Sentry that is already gone (`reason`): every Call fails with it.
  static std::unique_ptr<SentryProcess> Gone(pid_t pid, const std::string& reason);
  // Kills the process (group) if it still runs, reaps it, joins the reader.
  ~SentryProcess();
  SentryProcess(const SentryProcess&) = delete;
  SentryProcess& operator=(const SentryProcess&) = delete;

  // Waits for the Sentry's Hello (sent once it has prewarmed).
  absl::Status AwaitHello(absl::Duration timeout);
  // Valid after AwaitHello succeeded.
  const control::Hello& hello() const { return hello_; }
  // The Hello's prewarm stage timings.
  const std::vector<control::StageTiming>& prewarm_timings() const {
    return prewarm_timings_;
  }

  // Sends `request` (its id is assigned here) with `fds`, and waits up to
  // `timeout` for the response. A response with a non-OK code becomes that
  // status (with the Sentry's message); UNAVAILABLE when the Sentry is gone.
  absl::StatusOr<control::Response> Call(control::Request request,
                                         absl::Span<const int> fds = {},
                                         absl::Duration timeout = absl::InfiniteDuration());
  // The same, with the descriptors that came with the response.
  absl::StatusOr<control::Response> Call(control::Request request,
                                         std::vector<UniqueFd>* received,
                                         absl::Duration timeout);

  pid_t pid() const { return pid_; }
  bool adopted() const { return pidfd_.valid(); }

  // SIGKILLs the Sentry and its process group (its stub processes).
  void Kill();
  // Sends `sig` to the Sentry's process group: the Sentry, its stub
  // processes and its namespace holder (everything it starts stays in the
  // group it leads; Pause's SIGSTOP and SIGCONT without cgroups).
  // FAILED_PRECONDITION once the Sentry is gone.
  absl::Status SignalGroup(int sig);
  // The next channel close is expected (after Destroy): no crash report.
  void ExpectExit();

  // Set before anything can fail; runs once, on the reader thread, when the
  // Sentry is gone: `crashed` is false after ExpectExit; `reason` says how
  // it ended ("killed by signal 9").
  void SetOnExit(std::function<void(bool crashed, const std::string& reason)> f);
  bool exited() const;
  // "" while the Sentry runs.
  std::string exit_reason() const;

 private:
  SentryProcess(pid_t pid, control::Channel channel, UniqueFd pidfd = UniqueFd());
  // Both Calls: sends `request` with `fds`, waits, and hands over the
  // response's descriptors to `received` (may be null: they are closed).
  absl::StatusOr<control::Response> Exchange(control::Request request,
                                             absl::Span<const int> fds,
                                             std::vector<UniqueFd>* received,
                                             absl::Duration timeout);
  void ReadLoop();
  void Reap(bool expected);
  // An adopted Sentry's end: waits through its pidfd, killing it if it
  // lingers; returns how it ended, as far as a non-parent can tell.
  std::string ReapAdopted(bool expected);

  struct Pending {
    bool done = false;
    absl::Status status;
    control::Response response;
    std::vector<UniqueFd> fds;
  };

  const pid_t pid_;
  const UniqueFd pidfd_;  // adopted Sentries only
  control::Channel channel_;
  control::Hello hello_;
  std::vector<control::StageTiming> prewarm_timings_;

  mutable absl::Mutex mu_;
  bool have_hello_ ABSL_GUARDED_BY(mu_) = false;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;
  bool expect_exit_ ABSL_GUARDED_BY(mu_) = false;
  std::string exit_reason_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  friend class Sandbox;  // names mu_ in its lock order annotation
  absl::flat_hash_map<uint64_t, Pending*> pending_ ABSL_GUARDED_BY(mu_);
  std::function<void(bool, const std::string&)> on_exit_ ABSL_GUARDED_BY(mu_);

  std::atomic<bool> reaped_{false};
  std::thread reader_;
};

// "exited with status 3", "killed by signal 9": a wait status in words.
std::string DescribeWaitStatus(int status);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_SENTRY_PROCESS_H_
