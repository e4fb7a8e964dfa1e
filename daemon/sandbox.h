// One sandbox: its spec, its Sentry (with cgroup), the init program's
// stdio and output log, and its state machine:
//
//   CREATED --Start/attach--> RUNNING --init exits--> STOPPED
//      |                         |   --Checkpoint--> STOPPED (checkpoint set)
//      +------ Sentry dies ------+--> FAILED (exit.error says why)
//
// A sandbox restored from an image is created the same way with the image
// directory in its Options: its start sends the Sentry Restore instead of
// Start (control.proto), and from then on it is like any other.
//
// With a state directory, the sandbox's record (sandbox.pb) is rewritten
// at each change and its init's output is kept in a file there; before
// Start its Sentry is told to outlive the daemon (control.proto Persist),
// and a restarted daemon rebuilds the sandbox from the record with Adopt.
//
// Processes that Exec starts belong to the sandbox, not to the call that
// started them: they run on when their client goes, and their output log
// and exit status are kept (the running ones and the last
// kKeptEndedExecs that ended). With a state directory each is recorded
// (exec-<pid>.pb, exec-<pid>.log) and its Sentry keeps the daemon's ends
// of its output (control.proto Exec.keep_fds), so that a restarted daemon
// re-adopts it too: its output goes on into the same log, and its exit
// is learned.
//
// Destroy kills what is left and releases the Sentry; the object itself
// lives on while a call still holds it (shared_ptr), with everything
// released.
//
// Thread safety: every method may be called from any thread.
// Lock order: Service::mu_ > Sandbox::mu_ > ExecProcess::mu, SentryProcess
// and OutputLog locks; Sandbox::save_mu_ > Sandbox::mu_.
#ifndef SANDBOXD_DAEMON_SANDBOX_H_
#define SANDBOXD_DAEMON_SANDBOX_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "base/stage_clock.h"
#include "daemon/metrics.h"
#include "daemon/pool.h"
#include "daemon/relay.h"
#include "daemon/state_dir.h"
#include "proto/sandbox.pb.h"
#include "sentry/socket/sandbox_net.h"

namespace sandboxd {
namespace daemon {

// Bytes of an init program's output kept for `logs`.
inline constexpr size_t kInitLogBytes = 1 << 20;
// Ended Exec'd processes a sandbox keeps (SandboxInfo.execs).
inline constexpr size_t kKeptEndedExecs = 16;

// A state as messages and `ps` name it: "created", "running", "paused",
// "stopped", "failed" (never the enum's own name).
std::string StateWord(v1::SandboxState s);
// How an init ended, as sandboxd_sandbox_exits_total{reason} counts it:
// "exited" (a code), "signal", "oom" (killed by the Sentry's out-of-memory
// kill: ExitStatus.reason), "failed" (ExitStatus.error).
std::string ExitReasonLabel(const v1::ExitStatus& e);

// A process Exec started in a sandbox.
struct ExecProcess {
  int pid = 0;  // in the sandbox
  v1::ProcessSpec process;
  absl::Time started;
  std::unique_ptr<ProcessRelay> relay;  // its stdio and output log

  // Waits for its end (Sandbox::ExecWaitLoop); joined by whoever takes
  // the process out of its sandbox's table, or by the destructor.
  std::thread waiter;

  absl::Mutex mu;  // a leaf
  bool running ABSL_GUARDED_BY(mu) = true;
  v1::ExitStatus exit ABSL_GUARDED_BY(mu);
  absl::Time exited ABSL_GUARDED_BY(mu);

  ~ExecProcess();
  v1::ExecInfo Info();
};

class Sandbox {
 public:
  struct Options {
    std::string id;
    v1::SandboxSpec spec;
    std::unique_ptr<WarmSentry> sentry;
    UniqueFd rootfs;  // O_PATH|O_DIRECTORY
    // spec.checkpoint_dir, opened (O_PATH|O_DIRECTORY); invalid: none.
    // Handed to the Sentry at the start.
    UniqueFd checkpoint_dir;
    // spec.mounts' bind sources, in order (spec_policy.h OpenBindMounts).
    std::vector<UniqueFd> binds;
    // Set for a restore: the image directory (O_PATH|O_DIRECTORY) and its
    // path (errors only).
    UniqueFd image;
    std::string image_path;
    // The restore's page loader's rate limit (bytes/s; 0: none).
    uint64_t restore_rate = 0;
    bool pool_hit = false;
    absl::Time created;
    // The daemon's steps of Create so far (Timings.stages): a Restore's
    // own first, then Create's.
    std::vector<std::pair<std::string, absl::Duration>> restore_stages;
    std::vector<std::pair<Stage, absl::Duration>> stages;
    Metrics* metrics = nullptr;  // may be null
    StateDir* state_dir = nullptr;  // may be null: nothing kept
    // Called (without locks held) after every state change.
    std::function<void()> on_state_change;
    // NETWORK_MODE_SANDBOX: pasta, serving the Sentry's network namespace;
    // ended with the Sentry.
    sandbox_net::Pasta network;
  };
  static absl::StatusOr<std::shared_ptr<Sandbox>> Create(Options o);
  // The sandbox `record` of an earlier daemon (o.id, o.spec and o.created
  // are taken from it), with its Sentry re-adopted, or Gone: RUNNING again
  // when the Sentry answers Reattach (its Wait then tells whether the init
  // ended meanwhile), the record's STOPPED or FAILED when it had ended,
  // else FAILED saying why it could not be recovered.
  static std::shared_ptr<Sandbox> Adopt(Options o, const v1::SandboxInfo& record);
  ~Sandbox();

  const std::string& id() const { return id_; }
  const std::string& platform() const { return sentry_->platform(); }
  v1::SandboxState state() const;
  // Create's wall time, set once Create is done.
  void SetCreateLatency(absl::Duration d);
  // Appends a named, timed step to Timings.stages.
  void AddStage(Stage stage, absl::Duration d);
  void AddStage(absl::string_view name, absl::Duration d);
  void SetRestoreLatency(absl::Duration d);
  // Timings as Info has them, without Info's cgroup reads.
  v1::Timings timings() const;
  // Whether the sandbox is made from a checkpoint image (restored, or to be
  // restored at its start).
  bool restored() const ABSL_LOCKS_EXCLUDED(mu_);

  // CREATED -> RUNNING. FAILED_PRECONDITION in another state; the Sentry's
  // error (e.g. NOT_FOUND for a missing program) makes the sandbox FAILED.
  absl::Status Start();
  // Takes the init program's stdio (CREATED only, once), pins `*cursor`
  // on its output log (so the caller loses nothing), then starts it.
  // `size`: the terminal's size before the init starts (tty only; 0x0: keep).
  // `*attached` (may be null) tells whether this call took the stdio, even
  // when the start then failed.
  absl::StatusOr<ProcessRelay*> AttachAndStart(const uint64_t* cursor,
                                               const v1::ExecRequest::Resize& size = {},
                                               bool* attached = nullptr);
  // The init program's stdio and output log (valid for the sandbox's life).
  ProcessRelay& init_relay() { return *init_relay_; }

  // Waits until the init program has exited (or the sandbox failed), or
  // `deadline` passes (DEADLINE_EXCEEDED), or `cancelled` returns true
  // (checked a few times a second; CANCELLED).
  absl::StatusOr<v1::ExitStatus> AwaitExit(absl::Time deadline,
                                           const std::function<bool()>& cancelled);

  // A restored sandbox: waits until every page of its image is loaded
  // (control.proto WaitRestored), or `deadline` passes
  // (DEADLINE_EXCEEDED), or `cancelled` returns true (CANCELLED). The
  // loader's figures at the end (empty for an eager restore); the load's
  // error if a read failed; FAILED_PRECONDITION when the sandbox was not
  // restored, is not running, or ended before the load was done. The
  // figures go to the metrics too.
  absl::StatusOr<v1::RestoreProgress> AwaitRestored(absl::Time deadline,
                                                    const std::function<bool()>& cancelled);

  // To init, to process `pid` of the sandbox (when not 0), or to all.
  absl::Status Signal(int signal, bool all, int pid = 0);

  // Changes the RUNNING sandbox's limits (a 0 field keeps its limit): the
  // Sentry's (control.proto Update, which refuses a memory limit below
  // what the application uses), then its cgroup's, as Create sets them;
  // spec.limits (Info, the record) says the new ones. Returns them.
  // `lifted` names limits to remove (runc's -1): none of that kind from
  // then on, in the Sentry and the cgroup.
  absl::StatusOr<v1::Limits> Update(const v1::Limits& limits,
                                    const v1::LimitsLifted& lifted = {});

  // RUNNING -> PAUSED: SIGSTOP to every host process of the sandbox (the
  // Sentry, its stubs: SignalSentry); Resume: SIGCONT, PAUSED -> RUNNING.
  // FAILED_PRECONDITION in another state.
  absl::Status Pause();
  absl::Status Resume();

  // A terminal's new size, for process `pid` (1: the init): the daemon's
  // pty has it already (ProcessRelay::Resize); the process's terminal is a
  // pts of the sandbox's devpts, which only the Sentry can size
  // (control.proto Resize).
  absl::Status ResizeTerminal(int pid, uint32_t rows, uint32_t cols);

  // Attach to the RUNNING sandbox's init (docker attach): `*cursor` is set
  // to the end of its output log (what follows is the caller's); nothing
  // is pinned, so a slow reader cannot hold the program up.
  absl::StatusOr<ProcessRelay*> AttachRunning(uint64_t* cursor);
  // The init's stdin is at its end from now on (also the copy its Sentry
  // keeps for the next daemon).
  void CloseInitStdin();

  // Runs `process` in the RUNNING sandbox, with `*cursor` pinned on its
  // output log; the caller relays its stdio and calls AwaitExec. The
  // process gets the sandbox's env, cwd and user where it names none
  // (ExecDefaults).
  absl::StatusOr<std::shared_ptr<ExecProcess>> StartExec(
      const v1::ProcessSpec& process, const uint64_t* cursor,
      const v1::ExecRequest::Resize& size = {});
  // An Exec'd process the sandbox keeps; NOT_FOUND for another pid.
  absl::StatusOr<std::shared_ptr<ExecProcess>> FindExec(int pid);
  // How Exec'd process `pid` ended, as AwaitExit for the init.
  absl::StatusOr<v1::ExitStatus> AwaitExec(int pid, absl::Time deadline,
                                           const std::function<bool()>& cancelled);

  // Saves the RUNNING sandbox into the image directory `image`
  // (O_PATH|O_DIRECTORY, empty; `path` names it), then lets it run on or,
  // without `leave_running`, kills it: STOPPED (by SIGKILL) with
  // SandboxInfo.checkpoint naming PATH. The steps go to `resp`'s stages and are
  // appended to the sandbox's Timings.stages.
  absl::Status Checkpoint(int image, const std::string& path, bool leave_running,
                          v1::CheckpointResponse* resp);

  // Kills everything, releases the Sentry, cgroup and fds; returns how the
  // init program ended (or was killed).
  v1::ExitStatus Destroy();

  // With `live`, asks the Sentry for its live processes and usage.
  v1::SandboxInfo Info(bool live);
  // Reports usage, new unimplemented-syscall counts and the platform's
  // counters to the metrics (the service's stats polling, and Destroy).
  void CollectMetrics();
  // SIGKILLs the Sentry (its pid namespace's init) and everything in its
  // cgroup, on the host.
  void KillOnHost();
  // Ends NETWORK_MODE_SANDBOX's pasta, if any (blocks up to 2 s).
  void StopNetwork() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit Sandbox(Options o);
  absl::Status StartLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddStageLocked(absl::string_view name, absl::Duration d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WaitLoop();
  // `exec` completed from the init's spec, as docker exec does: the init's
  // env with the exec's names replacing it, the init's cwd and user unless
  // the exec gives its own.
  v1::ProcessSpec ExecDefaults(const v1::ProcessSpec& exec) const;
  // After the init's end: the last stats, the reply of a checkpoint in
  // flight, a restored sandbox's load error, the exec'd processes' ends,
  // then the Sentry is ended. An exited sandbox holds no process; its
  // state, exit, logs and cgroup stay until Destroy.
  void ReleaseSentry();
  // Records the Sentry's self-checkpoint reports (control.proto
  // WatchCheckpoints) until the Sentry is gone.
  void WatchCheckpointsLoop();
  // Records how the init program ended; the first report wins.
  void Finish(v1::ExitStatus exit, v1::SandboxState state);
  void OnSentryExit(bool crashed, const std::string& reason);
  void Changed();
  // Rewrites the state directory's record (not once destroyed).
  void SaveRecord();
  // A report of the Sentry's page loader: kept for Info, given to the
  // metrics.
  void NoteRestorePages(const control::RestorePageStats& st) ABSL_LOCKS_EXCLUDED(mu_);
  void NoteRestorePagesLocked(const control::RestorePageStats& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool RestoredLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !image_path_.empty() || timings_.has_restore_latency();
  }
  // Control.proto Persist: the Sentry keeps a socket and the output fds.
  absl::Status PersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for Exec'd process `e` to end (a thread per process) and
  // records how.
  void ExecWaitLoop(std::shared_ptr<ExecProcess> e);
  void StartExecWaiter(std::shared_ptr<ExecProcess> e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rewrites `e`'s record (not once destroyed).
  void SaveExecRecord(ExecProcess& e);
  // Forgets the oldest ended processes beyond kKeptEndedExecs.
  void PruneExecs();
  // The execs of an earlier daemon's record, re-adopted with the output
  // descriptors their Sentry kept (`kept`, by pid) when `running`.
  void AdoptExecs(bool running, std::map<int, std::vector<UniqueFd>> kept);
  // `sig` to every host process of the sandbox: those of its cgroup, twice
  // over (a process started while the first pass ran, e.g. a new stub, is
  // caught by the second), or without cgroups the Sentry's process group
  // (SentryProcess::SignalGroup).
  absl::Status SignalSentry(int sig);

  // Declared first: destroyed last (the Sentry's exit callback locks it).
  // save_mu_ keeps the record's writes in order.
  absl::Mutex save_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(SentryProcess::mu_, OutputLog::mu_, Pool::mu_);
  const std::string id_;
  v1::SandboxSpec spec_;
  Metrics* const metrics_;
  StateDir* const state_dir_;
  const std::function<void()> on_state_change_;

  v1::SandboxState state_ ABSL_GUARDED_BY(mu_) = v1::SANDBOX_STATE_CREATED;
  v1::ExitStatus exit_ ABSL_GUARDED_BY(mu_);
  bool destroyed_ ABSL_GUARDED_BY(mu_) = false;
  // KillOnHost ran: the Sentry's end is a kill, not a crash.
  bool host_killed_ ABSL_GUARDED_BY(mu_) = false;
  // NETWORK_MODE_SANDBOX's pasta (not running otherwise); StopNetwork
  // ends it once the Sentry is gone or going.
  sandbox_net::Pasta network_ ABSL_GUARDED_BY(mu_);
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  v1::Timings timings_ ABSL_GUARDED_BY(mu_);
  UniqueFd rootfs_ ABSL_GUARDED_BY(mu_);
  UniqueFd checkpoint_dir_ ABSL_GUARDED_BY(mu_);  // until the start
  std::vector<UniqueFd> binds_ ABSL_GUARDED_BY(mu_);  // until the start
  // SandboxInfo.self_checkpoints: the last kMaxSelfCheckpoints.
  std::vector<v1::SelfCheckpoint> self_checkpoints_ ABSL_GUARDED_BY(mu_);
  UniqueFd image_ ABSL_GUARDED_BY(mu_);  // a restore's, until its start
  std::string image_path_ ABSL_GUARDED_BY(mu_);
  const uint64_t restore_rate_;
  // Set while a Checkpoint that kills the sandbox is in flight, and after
  // it: the image its end is recorded with.
  std::string checkpoint_path_ ABSL_GUARDED_BY(mu_);
  // A Checkpoint's call to the Sentry is in flight: ReleaseSentry waits
  // for its reply (the Sentry may answer the init's Wait first).
  bool checkpoint_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // Set when the init's end was that checkpoint's (SandboxInfo.checkpoint).
  v1::CheckpointInfo checkpoint_ ABSL_GUARDED_BY(mu_);
  // The page loader's last report (SandboxInfo.restore); unset while
  // there is none.
  v1::RestoreProgress restore_ ABSL_GUARDED_BY(mu_);
  bool have_restore_ ABSL_GUARDED_BY(mu_) = false;
  // Why the page load failed, as the Sentry said before ReleaseSentry
  // ended it (AwaitRestored's answer once the sandbox has ended); OK when
  // it did not fail or nobody asked in time.
  absl::Status restore_error_ ABSL_GUARDED_BY(mu_);
  StdioPair init_stdio_ ABSL_GUARDED_BY(mu_);  // only `theirs` until Start
  // Last unimplemented-syscall counts reported, by number.
  std::map<uint32_t, uint64_t> unimplemented_seen_ ABSL_GUARDED_BY(mu_);
  // The Sentry answered Persist: it outlives the daemon, and keeps what
  // Exec.keep_fds hands it.
  bool persisted_ ABSL_GUARDED_BY(mu_) = false;
  bool stdin_kept_ ABSL_GUARDED_BY(mu_) = false;  // Persist.with_stdin
  std::map<int, std::shared_ptr<ExecProcess>> execs_ ABSL_GUARDED_BY(mu_);

  std::unique_ptr<ProcessRelay> init_relay_;
  std::thread waiter_;
  std::thread checkpoint_watcher_;  // with spec.checkpoint_dir
  // Destroyed first: its exit callback may still run while it is torn down.
  std::unique_ptr<WarmSentry> sentry_;
  friend class Service;  // names mu_ in its lock order annotation
};

// "NAME: want ..." checks of a spec, as INVALID_ARGUMENT naming the field.
absl::Status ValidateProcessSpec(const v1::ProcessSpec& p, const std::string& field);

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_SANDBOX_H_
