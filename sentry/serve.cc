#include "sentry/serve.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "base/unique_fd.h"
#include "platforms/registry.h"
#include "proto/control.pb.h"
#include "proto/control_channel.h"
#include "sentry/boot.h"
#include "sentry/fs/credentials.h"
#include "sentry/isolation.h"
#include "sentry/self_checkpoint.h"
#include "sentry/state/image_dir.h"

namespace sandboxd::serve {
namespace {

constexpr uint32_t kProtocolVersion = 1;

using control::Request;
using control::Response;

void Log(const std::string& msg) {
  fprintf(stderr, "sentry serve: %s\n", msg.c_str());
  fflush(stderr);
}

void AddTimings(const StageClock& clock, Response* r) {
  for (const StageTime& s : clock.stages()) {
    control::StageTiming* t = r->add_timings();
    t->set_name(std::string(StageName(s.stage)));
    t->set_nanos(s.nanos);
  }
}

void SetExit(const kernel::ExitStatus& st, v1::ExitStatus* out) {
  if (st.signo != 0) {
    out->set_signal(st.signo);
    out->set_core_dumped(st.core);
  } else {
    out->set_code(st.code & 0xff);
  }
}

// The page loader's counters as SentryStats and WaitRestored carry them.
void SetRestorePages(const mm::AsyncLoadStats& ls,
                     control::RestorePageStats* rp) {
  rp->set_bytes_total(ls.bytes_total);
  rp->set_bytes_loaded(ls.bytes_loaded);
  rp->set_pages_loaded(ls.pages_loaded);
  rp->set_bytes_failed(ls.bytes_failed);
  rp->set_reads(ls.reads);
  rp->set_waits(ls.waits);
  rp->set_waiting(ls.waiting);
  rp->set_wait_nanos_total(ls.wait_ns_total);
  rp->set_load_nanos(ls.load_ns);
  rp->set_done(ls.done);
  for (uint64_t n : ls.wait_hist) rp->add_wait_hist(n);
}

// The exit reason of a sandbox whose init the OOM killer ended.
std::string OutOfMemoryReason(kernel::Kernel& k) {
  return absl::StrCat("out of memory: the sandbox's init was killed by the "
                      "OOM killer (",
                      k.memory_file().limit(),
                      " bytes of memory for the application, ",
                      k.oom_kills(), " processes killed)");
}

absl::StatusOr<boot::ProcessConfig> ProcessFromSpec(const v1::ProcessSpec& p) {
  if (p.argv_size() == 0 || p.argv(0).empty()) {
    return absl::InvalidArgumentError("process.argv is empty");
  }
  boot::ProcessConfig c;
  // The process's identity inside the sandbox's user namespace.
  c.uid = p.user().uid();
  c.gid = p.user().gid();
  c.groups.assign(p.user().additional_gids().begin(),
                  p.user().additional_gids().end());
  if (c.uid == 0xffffffffu || c.gid == 0xffffffffu) {
    return absl::InvalidArgumentError("process.user: 4294967295 is not a valid id");
  }
  if (c.groups.size() > fs::kNgroupsMax) {
    return absl::InvalidArgumentError("process.user.additional_gids: more than 65536");
  }
  c.argv.assign(p.argv().begin(), p.argv().end());
  c.env.assign(p.env().begin(), p.env().end());
  c.cwd = p.cwd().empty() ? "/" : p.cwd();
  // A sandbox's processes get docker's PATH, HOSTNAME and HOME when the
  // spec names none.
  c.default_env = true;
  return c;
}

// The stdio descriptors that came with Start or Exec, from `first` on:
// stdin, stdout, stderr, or one pty replica for all three with `tty`.
// With `relay`, that replica is only the host side of a terminal of the
// sandbox's own devpts (boot::Stdio::relay_terminal).
absl::StatusOr<boot::Stdio> StdioFromFds(std::vector<UniqueFd>& fds,
                                         size_t first, bool tty,
                                         bool relay = false) {
  boot::Stdio stdio;
  const size_t want = first + (tty ? 1 : 3);
  if (fds.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", want, " descriptors with the request (",
        tty ? "one pty replica" : "stdin, stdout, stderr", "), got ",
        fds.size()));
  }
  if (tty) {
    if (isatty(fds[first].get()) != 1) {
      return absl::InvalidArgumentError(
          "process.tty is set but the descriptor is not a terminal");
    }
    // stderr is merged into stdout: all three are the terminal.
    for (int i = 0; i < 3; i++) {
      int d = fcntl(fds[first].get(), F_DUPFD_CLOEXEC, 3);
      if (d < 0) return ErrnoStatus("duplicating the pty descriptor", errno);
      stdio.fds[i] = UniqueFd(d);
    }
    stdio.terminal = true;
    stdio.relay_terminal = relay;
    return stdio;
  }
  for (int i = 0; i < 3; i++) stdio.fds[i] = std::move(fds[first + i]);
  return stdio;
}

class Server {
 public:
  Server(control::Channel ch, boot::Prewarmed pw, bool isolated,
         std::string platform, bool host_network)
      : ch_(std::make_unique<control::Channel>(std::move(ch))),
        pw_(std::move(pw)),
        isolated_(isolated),
        platform_(std::move(platform)),
        host_network_(host_network) {}

  // Serves requests until Destroy or the channel's end; never returns.
  [[noreturn]] void Loop();

 private:
  // Which channel a request came on: a response to one of an earlier
  // channel is dropped (the daemon that asked is gone, and the next one
  // numbers its requests afresh).
  uint64_t generation() {
    absl::MutexLock l(&ch_mu_);
    return generation_;
  }
  void Send(const Response& r, absl::Span<const int> fds = {}) {
    absl::MutexLock l(&ch_mu_);
    SendLocked(r, fds);
  }
  // Whether `r` went out (on the channel of `generation`, still up).
  bool SendOn(uint64_t generation, const Response& r) {
    absl::MutexLock l(&ch_mu_);
    return generation == generation_ && SendLocked(r, {});
  }
  bool SendLocked(const Response& r, absl::Span<const int> fds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ch_mu_) {
    if (absl::Status s = ch_->Send(r, fds); !s.ok()) {
      Log(absl::StrCat("sending the response to request ", r.id(), ": ",
                       s.message()));
      return false;
    }
    return true;
  }
  static Response ErrorResponse(uint64_t id, const absl::Status& s) {
    Response r;
    r.set_id(id);
    r.set_code(static_cast<int>(s.code()));
    r.set_message(std::string(s.message()));
    return r;
  }
  void SendError(uint64_t id, const absl::Status& s) {
    Send(ErrorResponse(id, s));
  }
  absl::Status CheckRunning() const {
    if (sandbox_ == nullptr) {
      return absl::FailedPreconditionError("no sandbox: Start first");
    }
    return absl::OkStatus();
  }

  // Start and Restore: the Sentry's one sandbox. `prepare` checks the
  // request and fills what `create` needs; then the hostname is set,
  // `create` builds the sandbox from the prewarmed state, its init starts
  // and the reply carries init_pid and the steps (`started` last). Errors
  // are prefixed with `what`.
  void LoadSandbox(uint64_t id, const char* what, const std::string& hostname,
                   Stage started, absl::FunctionRef<absl::Status()> prepare,
                   absl::FunctionRef<absl::StatusOr<std::unique_ptr<boot::Sandbox>>(
                       boot::Prewarmed, StageClock*)>
                       create);
  void OnStart(const Request& req, std::vector<UniqueFd> fds);
  void OnExec(const Request& req, std::vector<UniqueFd> fds);
  void OnCheckpoint(const Request& req, std::vector<UniqueFd> fds);
  void OnRestore(const Request& req, std::vector<UniqueFd> fds);
  void OnWaitPid(uint64_t id, pid_t pid);
  void OnWaitRestored(uint64_t id);
  // Start's and Restore's keep_fds: the last `n` of `fds` become what
  // Persist keeps.
  absl::Status TakeKept(std::vector<UniqueFd>& fds, uint32_t n, bool with_stdin);
  [[noreturn]] void OnDestroy(uint64_t id);
  void OnPersist(uint64_t id, const Request::Persist& p, std::vector<UniqueFd> fds);
  // Self-checkpoints (self_checkpoint.h): the spec's checkpoint directory,
  // the last descriptor of Start or Restore (before the kept ones) when
  // spec.checkpoint_dir is set, is taken off `fds`; EnableSelfCheckpoints
  // then lets the sandbox use it. Their reports answer WatchCheckpoints.
  absl::StatusOr<UniqueFd> TakeCheckpointDir(const v1::SandboxSpec& spec,
                                             std::vector<UniqueFd>& fds);
  absl::Status EnableSelfCheckpoints(boot::Sandbox* sb, UniqueFd dir,
                                     const v1::SandboxSpec& spec,
                                     const std::string& sandbox_id);
  void OnWatchCheckpoints(uint64_t id);
  void OnSelfCheckpoint(const boot::SelfCheckpointReport& r);
  void OnReattach(uint64_t id, const Request::Reattach& req);
  // After the channel's end: true with the next daemon's channel in ch_,
  // false when the sandbox does not outlive its daemon.
  bool AwaitNextDaemon();

  // Replaced (under ch_mu_, by Loop) when the next daemon connects.
  absl::Mutex ch_mu_;
  std::unique_ptr<control::Channel> ch_ ABSL_GUARDED_BY(ch_mu_);
  uint64_t generation_ ABSL_GUARDED_BY(ch_mu_) = 0;
  // Persist's: the socket the next daemon connects to, and what the
  // Sentry keeps for it. Loop's thread only.
  UniqueFd listener_;
  std::vector<UniqueFd> kept_;
  bool stdin_kept_ = false;  // kept_.back() is the init's stdin
  // Exec'd processes' output descriptors (Exec.keep_fds), by pid, until
  // their WaitPid has been answered.
  std::map<pid_t, std::vector<UniqueFd>> kept_execs_ ABSL_GUARDED_BY(ch_mu_);
  std::optional<boot::Prewarmed> pw_;  // consumed by Start
  const bool isolated_;                 // in namespaces of its own
  const std::string platform_;          // what Prewarm made (registry.h)
  const bool host_network_;             // serve --network=host
  // Lives until the process exits (boot.h); pending waits point into it.
  boot::Sandbox* sandbox_ = nullptr;

  // WatchCheckpoints: the pending request (id, channel generation) or the
  // reports nobody has asked for yet. watch_mu_ > ch_mu_.
  absl::Mutex watch_mu_ ABSL_ACQUIRED_BEFORE(ch_mu_);
  bool watching_ ABSL_GUARDED_BY(watch_mu_) = false;
  uint64_t watch_id_ ABSL_GUARDED_BY(watch_mu_) = 0;
  uint64_t watch_generation_ ABSL_GUARDED_BY(watch_mu_) = 0;
  std::deque<Response> reports_ ABSL_GUARDED_BY(watch_mu_);
};

// The spec's mounts, their host descriptors taken off the end of `fds`
// (one per bind mount, in order; Start and Restore send them after the
// checkpoint directory and before the kept descriptors).
absl::StatusOr<std::vector<boot::MountConfig>> TakeMounts(
    const v1::SandboxSpec& spec, std::vector<UniqueFd>& fds) {
  std::vector<boot::MountConfig> out;
  size_t binds = 0;
  for (const v1::Mount& m : spec.mounts()) {
    if (m.type() == v1::Mount::TYPE_BIND) binds++;
  }
  if (binds > fds.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.mounts has ", binds, " bind mounts but only ", fds.size(),
        " descriptors came"));
  }
  size_t next = fds.size() - binds;
  for (int i = 0; i < spec.mounts_size(); i++) {
    const v1::Mount& m = spec.mounts(i);
    boot::MountConfig c;
    c.target = m.target();
    c.read_only = m.read_only();
    if (m.type() == v1::Mount::TYPE_BIND) {
      c.type = boot::MountConfig::Type::kBind;
      c.source = m.source();
      c.host = std::move(fds[next++]);
    } else if (m.type() == v1::Mount::TYPE_TMPFS) {
      c.type = boot::MountConfig::Type::kTmpfs;
      c.options = m.options();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.mounts[", i, "].type: bind or tmpfs"));
    }
    out.push_back(std::move(c));
  }
  fds.resize(fds.size() - binds);
  return out;
}

absl::StatusOr<UniqueFd> Server::TakeCheckpointDir(const v1::SandboxSpec& spec,
                                                   std::vector<UniqueFd>& fds) {
  if (spec.checkpoint_dir().empty()) return UniqueFd();
  struct stat st;
  if (fds.empty() || fstat(fds.back().get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        "spec.checkpoint_dir is set but the last descriptor is not a directory");
  }
  UniqueFd dir = std::move(fds.back());
  fds.pop_back();
  return dir;
}

absl::Status Server::EnableSelfCheckpoints(boot::Sandbox* sb, UniqueFd dir,
                                           const v1::SandboxSpec& spec,
                                           const std::string& sandbox_id) {
  if (!dir.valid()) return absl::OkStatus();
  boot::SelfCheckpointConfig c;
  c.dir = std::move(dir);
  c.dir_name = spec.checkpoint_dir();
  c.prefix = sandbox_id.empty() ? "sandbox" : sandbox_id;
  c.limit = spec.checkpoint_limit();
  if (!spec.SerializeToString(&c.spec)) {
    return absl::InvalidArgumentError("the spec cannot be serialized");
  }
  c.done = [this](const boot::SelfCheckpointReport& r) { OnSelfCheckpoint(r); };
  return boot::EnableSelfCheckpoint(sb, std::move(c));
}

void Server::OnSelfCheckpoint(const boot::SelfCheckpointReport& rep) {
  Response r;
  control::SelfCheckpointed* sc = r.mutable_self_checkpointed();
  sc->set_image_name(rep.name);
  if (!rep.status.ok()) {
    sc->set_error(std::string(rep.status.message()));
  } else {
    control::Checkpointed* c = sc->mutable_image();
    c->set_state_bytes(rep.saved.state_bytes);
    c->set_pages(rep.saved.pages);
    c->set_pages_bytes(rep.saved.pages_bytes);
    c->set_memory_bytes(rep.saved.memory_bytes);
  }
  AddTimings(rep.clock, &r);
  Log(rep.status.ok() ? absl::StrCat("self-checkpoint: ", rep.path)
                      : absl::StrCat("self-checkpoint: ", rep.status.message()));
  absl::MutexLock l(&watch_mu_);
  if (watching_ && watch_generation_ == generation()) {
    watching_ = false;
    r.set_id(watch_id_);
    absl::MutexLock cl(&ch_mu_);
    if (ch_->Send(r).ok()) return;
    // The daemon went away meanwhile: the next one gets it.
    r.set_id(0);
  }
  watching_ = false;  // an earlier daemon's: it is gone
  reports_.push_back(std::move(r));
  while (reports_.size() > 64) reports_.pop_front();
}

void Server::OnWatchCheckpoints(uint64_t id) {
  absl::MutexLock l(&watch_mu_);
  if (!reports_.empty()) {
    Response r = std::move(reports_.front());
    reports_.pop_front();
    r.set_id(id);
    Send(r);
    return;
  }
  watching_ = true;
  watch_id_ = id;
  watch_generation_ = generation();
}

// A directory descriptor that came with a request, or an error naming it.
absl::Status CheckDirFd(const std::vector<UniqueFd>& fds, size_t i,
                        const char* what) {
  struct stat st;
  if (fds.size() <= i) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request came without the ", what, " descriptor"));
  }
  if (fstat(fds[i].get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " descriptor is not a directory"));
  }
  return absl::OkStatus();
}

// The hostname a sandbox gets: the spec's, else its id.
std::string HostnameFor(const v1::SandboxSpec& spec, const std::string& sandbox_id) {
  return !spec.hostname().empty()   ? spec.hostname()
         : !sandbox_id.empty()      ? sandbox_id
                                    : "sandbox";
}

boot::Limits LimitsFrom(const v1::SandboxSpec& spec) {
  boot::Limits l;
  l.memory_bytes = spec.limits().memory_bytes();
  l.cpu_millis = spec.limits().cpu_millis();
  l.pids = spec.limits().pids();
  return l;
}

void Server::LoadSandbox(uint64_t id, const char* what, const std::string& hostname,
                         Stage started, absl::FunctionRef<absl::Status()> prepare,
                         absl::FunctionRef<absl::StatusOr<std::unique_ptr<boot::Sandbox>>(
                             boot::Prewarmed, StageClock*)>
                             create) {
  if (!pw_.has_value()) {
    SendError(id, absl::FailedPreconditionError(
                      "this Sentry has already been given a sandbox"));
    return;
  }
  StageClock clock;
  auto build = [&]() -> absl::StatusOr<boot::Sandbox*> {
    RETURN_IF_ERROR(prepare());
    if (isolated_) {
      RETURN_IF_ERROR(Annotate(isolation::SetHostname(hostname), "uts namespace"));
      clock.Mark(Stage::kHostname);
    }
    boot::Prewarmed pw = std::move(*pw_);
    pw_.reset();
    ASSIGN_OR_RETURN(std::unique_ptr<boot::Sandbox> sb, create(std::move(pw), &clock));
    return sb.release();
  };
  auto sb = build();
  if (!sb.ok()) {
    SendError(id, Annotate(sb.status(), what));
    return;
  }
  if (absl::Status s = (*sb)->Start(); !s.ok()) {
    SendError(id, Annotate(s, what));
    return;
  }
  sandbox_ = *sb;
  clock.Mark(started);
  Response r;
  r.set_id(id);
  r.set_init_pid(1);
  AddTimings(clock, &r);
  Send(r);
}

absl::Status Server::TakeKept(std::vector<UniqueFd>& fds, uint32_t n, bool with_stdin) {
  if (n == 0) return absl::OkStatus();
  if (n > fds.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keep_fds is ", n, " but only ", fds.size(), " descriptors came"));
  }
  kept_.clear();
  for (size_t i = fds.size() - n; i < fds.size(); i++) kept_.push_back(std::move(fds[i]));
  fds.resize(fds.size() - n);
  stdin_kept_ = with_stdin;
  return absl::OkStatus();
}

void Server::OnStart(const Request& req, std::vector<UniqueFd> fds) {
  const Request::Start& start = req.start();
  const v1::SandboxSpec& spec = start.spec();
  if (absl::Status s = TakeKept(fds, start.keep_fds(), start.keep_stdin()); !s.ok()) {
    SendError(req.id(), Annotate(s, "Start"));
    return;
  }
  boot::SandboxConfig config;
  boot::Stdio stdio;
  UniqueFd checkpoint_dir;
  config.hostname = HostnameFor(spec, start.sandbox_id());
  config.etc_hostname = true;
  for (const char* name : {"hosts", "resolv.conf"}) {
    auto it = start.etc_files().find(name);
    if (it != start.etc_files().end()) config.etc_files.emplace_back(name, it->second);
  }
  config.limits = LimitsFrom(spec);
  config.container_init = spec.container_init();
  auto prepare = [&]() -> absl::Status {
    const std::string& want = spec.platform().empty()
                                  ? platform::Registry::Get().DefaultName()
                                  : spec.platform();
    if (want != platform_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "platform ", want, " is not this Sentry's (", platform_, ")"));
    }
    // A namespace by path (network_namespace): the daemon started this
    // Sentry in it, with --network=host.
    if ((spec.network() == v1::NETWORK_MODE_HOST || !spec.network_namespace().empty()) !=
        host_network_) {
      return absl::InvalidArgumentError(
          host_network_ ? "this Sentry is in the network namespace it was started "
                          "in (serve --network=host): it serves only network=host "
                          "or a network_namespace"
                        : "network=host (or a network_namespace) needs a Sentry "
                          "started with --network=host: this one has its own "
                          "network namespace");
    }
    ASSIGN_OR_RETURN(config.init, ProcessFromSpec(spec.process()));
    ASSIGN_OR_RETURN(config.mounts, TakeMounts(spec, fds));
    config.read_only_root = spec.read_only();
    ASSIGN_OR_RETURN(checkpoint_dir, TakeCheckpointDir(spec, fds));
    if (fds.empty()) {
      return absl::InvalidArgumentError("Start came without a rootfs descriptor");
    }
    RETURN_IF_ERROR(CheckDirFd(fds, 0, "rootfs"));
    ASSIGN_OR_RETURN(stdio, StdioFromFds(fds, 1, spec.process().tty(), /*relay=*/true));
    config.rootfs = std::move(fds[0]);
    return absl::OkStatus();
  };
  LoadSandbox(req.id(), "Start", config.hostname, Stage::kStart, prepare,
              [&](boot::Prewarmed pw, StageClock* clock)
                  -> absl::StatusOr<std::unique_ptr<boot::Sandbox>> {
                ASSIGN_OR_RETURN(std::unique_ptr<boot::Sandbox> sb,
                                 boot::Sandbox::Create(std::move(pw), std::move(config),
                                                       std::move(stdio), clock));
                RETURN_IF_ERROR(EnableSelfCheckpoints(sb.get(), std::move(checkpoint_dir),
                                                      spec, start.sandbox_id()));
                return sb;
              });
}

// The Loop's thread waits for the save: the daemon sends nothing else
// meanwhile, and the tasks are stopped for its length anyway.
void Server::OnCheckpoint(const Request& req, std::vector<UniqueFd> fds) {
  StageClock clock;
  auto run = [&]() -> absl::StatusOr<state::SaveResult> {
    RETURN_IF_ERROR(CheckRunning());
    RETURN_IF_ERROR(CheckDirFd(fds, 0, "image directory"));
    std::string spec;
    if (!req.checkpoint().spec().SerializeToString(&spec)) {
      return absl::InvalidArgumentError("the spec cannot be serialized");
    }
    const std::string& name = req.checkpoint().image_path();
    return sandbox_->Checkpoint(
        state::ImageDir(fds[0].get(), name.empty() ? "image" : name),
                                req.checkpoint().leave_running(), spec,
                                &clock);
  };
  auto saved = run();
  if (!saved.ok()) {
    SendError(req.id(), Annotate(saved.status(), "Checkpoint"));
    return;
  }
  Response r;
  r.set_id(req.id());
  control::Checkpointed* c = r.mutable_checkpointed();
  c->set_state_bytes(saved->state_bytes);
  c->set_pages(saved->pages);
  c->set_pages_bytes(saved->pages_bytes);
  c->set_memory_bytes(saved->memory_bytes);
  AddTimings(clock, &r);
  Send(r);
}

void Server::OnRestore(const Request& req, std::vector<UniqueFd> fds) {
  const Request::Restore& restore = req.restore();
  const v1::SandboxSpec& spec = restore.spec();
  if (absl::Status s = TakeKept(fds, restore.keep_fds(), restore.keep_stdin()); !s.ok()) {
    SendError(req.id(), Annotate(s, "Restore"));
    return;
  }
  boot::RestoreConfig config;
  boot::Stdio stdio;
  UniqueFd checkpoint_dir;
  config.hostname = HostnameFor(spec, restore.sandbox_id());
  config.limits = LimitsFrom(spec);
  config.container_init = spec.container_init();
  config.page_loading.rate_limit = restore.page_rate();
  auto prepare = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(config.mounts, TakeMounts(spec, fds));
    ASSIGN_OR_RETURN(checkpoint_dir, TakeCheckpointDir(spec, fds));
    RETURN_IF_ERROR(CheckDirFd(fds, 0, "image directory"));
    RETURN_IF_ERROR(CheckDirFd(fds, 1, "rootfs"));
    ASSIGN_OR_RETURN(stdio, StdioFromFds(fds, 2, spec.process().tty()));
    config.image = restore.image_path().empty() ? "image" : restore.image_path();
    config.image_dir = std::move(fds[0]);
    config.rootfs = std::move(fds[1]);
    return absl::OkStatus();
  };
  LoadSandbox(req.id(), "Restore", config.hostname, Stage::kRestoreStart, prepare,
              [&](boot::Prewarmed pw, StageClock* clock)
                  -> absl::StatusOr<std::unique_ptr<boot::Sandbox>> {
                ASSIGN_OR_RETURN(std::unique_ptr<boot::Sandbox> sb,
                                 boot::Sandbox::Restore(std::move(pw), std::move(config),
                                                        std::move(stdio), clock));
                RETURN_IF_ERROR(EnableSelfCheckpoints(sb.get(), std::move(checkpoint_dir),
                                                      spec, restore.sandbox_id()));
                return sb;
              });
}

void Server::OnExec(const Request& req, std::vector<UniqueFd> fds) {
  std::vector<UniqueFd> keep;
  auto run = [&]() -> absl::StatusOr<pid_t> {
    RETURN_IF_ERROR(CheckRunning());
    const size_t n = req.exec().keep_fds();
    if (n > fds.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "keep_fds is ", n, " but only ", fds.size(), " descriptors came"));
    }
    for (size_t i = fds.size() - n; i < fds.size(); i++) keep.push_back(std::move(fds[i]));
    fds.resize(fds.size() - n);
    ASSIGN_OR_RETURN(boot::ProcessConfig p, ProcessFromSpec(req.exec().process()));
    ASSIGN_OR_RETURN(boot::Stdio stdio,
                     StdioFromFds(fds, 0, req.exec().process().tty(), /*relay=*/true));
    return sandbox_->Exec(p, std::move(stdio));
  };
  auto pid = run();
  if (!pid.ok()) {
    SendError(req.id(), Annotate(pid.status(), "Exec"));
    return;
  }
  if (!keep.empty()) {
    absl::MutexLock l(&ch_mu_);
    kept_execs_[*pid] = std::move(keep);
  }
  Response r;
  r.set_id(req.id());
  r.set_exec_pid(*pid);
  Send(r);
}

// Answers from a thread of its own: the wait may last as long as the
// sandbox, and other requests go on meanwhile.
void Server::OnWaitPid(uint64_t id, pid_t pid) {
  if (absl::Status s = CheckRunning(); !s.ok()) {
    SendError(id, s);
    return;
  }
  boot::Sandbox* sb = sandbox_;
  const uint64_t gen = generation();
  absl::StatusOr<std::thread> waiter =
      StartThread("a WaitPid thread", [this, sb, id, pid, gen] {
    auto st = sb->WaitPid(pid);
    if (!st.ok()) {
      SendOn(gen, ErrorResponse(id, st.status()));
      return;
    }
    Response r;
    r.set_id(id);
    SetExit(*st, r.mutable_exit());
    if (pid == 1 && st->signo == SIGKILL && sb->kernel().init_oom_killed()) {
      r.mutable_exit()->set_reason(OutOfMemoryReason(sb->kernel()));
    }
    if (SendOn(gen, r) && pid != 1) {
      // A daemon has the exit: it needs the kept output ends no more.
      absl::MutexLock l(&ch_mu_);
      kept_execs_.erase(pid);
    }
  });
  if (!waiter.ok()) {
    SendError(id, waiter.status());
    return;
  }
  waiter->detach();
}

// From a thread of its own, as WaitPid: a rate-limited load of a large
// image takes minutes.
void Server::OnWaitRestored(uint64_t id) {
  if (absl::Status s = CheckRunning(); !s.ok()) {
    SendError(id, s);
    return;
  }
  mm::AsyncLoader* al = sandbox_->kernel().memory_file().async_loader();
  if (al == nullptr) {  // nothing loads after the start
    Response r;
    r.set_id(id);
    Send(r);
    return;
  }
  const uint64_t gen = generation();
  absl::StatusOr<std::thread> waiter =
      StartThread("a WaitRestored thread", [this, al, id, gen] {
    absl::Status st = al->WaitAllOrError();
    if (!st.ok()) {
      SendOn(gen, ErrorResponse(id, st));
      return;
    }
    Response r;
    r.set_id(id);
    SetRestorePages(al->Stats(), r.mutable_restore_pages());
    SendOn(gen, r);
  });
  if (!waiter.ok()) {
    SendError(id, waiter.status());
    return;
  }
  waiter->detach();
}

void Server::OnPersist(uint64_t id, const Request::Persist& p,
                       std::vector<UniqueFd> fds) {
  if (p.drop_stdin()) {
    if (stdin_kept_) kept_.pop_back();
    stdin_kept_ = false;
    Response r;
    r.set_id(id);
    Send(r);
    return;
  }
  int type = 0, listening = 0;
  socklen_t len = sizeof(type);
  if (fds.empty() ||
      getsockopt(fds[0].get(), SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      type != SOCK_SEQPACKET ||
      getsockopt(fds[0].get(), SOL_SOCKET, SO_ACCEPTCONN, &listening,
                 &len) != 0 ||
      !listening) {
    SendError(id, absl::InvalidArgumentError(
                      "Persist: the first descriptor must be a listening "
                      "SOCK_SEQPACKET socket"));
    return;
  }
  listener_ = std::move(fds[0]);
  kept_.clear();
  for (size_t i = 1; i < fds.size(); i++) kept_.push_back(std::move(fds[i]));
  stdin_kept_ = p.with_stdin() && kept_.size() > 0;
  Response r;
  r.set_id(id);
  Send(r);
}

void Server::OnReattach(uint64_t id, const Request::Reattach& req) {
  Response r;
  r.set_id(id);
  control::Reattached* ra = r.mutable_reattached();
  ra->set_started(sandbox_ != nullptr);
  ra->set_stdin_kept(stdin_kept_);
  // The first response brings Persist's descriptors, then as many Exec'd
  // processes' as fit in one message; the daemon asks for the rest after
  // the last pid it got (`more`).
  std::vector<int> fds;
  if (req.after_pid() == 0) {
    for (const UniqueFd& f : kept_) fds.push_back(f.get());
  }
  absl::MutexLock l(&ch_mu_);
  for (auto it = kept_execs_.upper_bound(req.after_pid()); it != kept_execs_.end(); ++it) {
    const std::vector<UniqueFd>& kept = it->second;
    if (fds.size() + kept.size() > control::kMaxFds) {
      ra->set_more(true);
      break;
    }
    control::KeptProcess* k = ra->add_processes();
    k->set_pid(it->first);
    k->set_fds(static_cast<uint32_t>(kept.size()));
    for (const UniqueFd& f : kept) fds.push_back(f.get());
  }
  SendLocked(r, fds);
}

bool Server::AwaitNextDaemon() {
  if (!listener_.valid() || sandbox_ == nullptr) return false;
  Log("the daemon's channel ended; the sandbox runs on, waiting for the "
      "next daemon");
  for (;;) {
    int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      Log(absl::StrCat("accepting the next daemon: ", strerror(errno)));
      return false;
    }
    absl::MutexLock l(&ch_mu_);
    ch_ = std::make_unique<control::Channel>(UniqueFd(fd));
    generation_++;
    return true;
  }
}

void Server::OnDestroy(uint64_t id) {
  Response r;
  r.set_id(id);
  if (sandbox_ != nullptr) {
    sandbox_->KillAll();
    SetExit(sandbox_->Wait(), r.mutable_exit());
  } else {
    r.mutable_exit()->set_error("the sandbox was never started");
  }
  Send(r);
  fflush(stderr);
  _exit(0);
}

void Server::Loop() {
  for (;;) {
    Request req;
    std::vector<UniqueFd> fds;
    control::Channel* ch;
    {
      absl::MutexLock l(&ch_mu_);
      ch = ch_.get();  // replaced only on this thread
    }
    absl::Status s = ch->Receive(&req, &fds);
    if (absl::IsUnavailable(s)) {
      {
        // Its pending WatchCheckpoints will never be read.
        absl::MutexLock l(&watch_mu_);
        watching_ = false;
      }
      if (AwaitNextDaemon()) continue;
      // The daemon is gone: nobody will ever wait for this sandbox.
      if (sandbox_ != nullptr) sandbox_->KillAll();
      _exit(0);
    }
    if (!s.ok()) {
      Log(absl::StrCat("dropping a malformed request: ", s.message()));
      continue;
    }
    switch (req.msg_case()) {
      case Request::kStart:
        OnStart(req, std::move(fds));
        break;
      case Request::kSignal: {
        absl::Status st = CheckRunning();
        if (st.ok()) {
          st = sandbox_->Signal(req.signal().signal(), req.signal().all(), req.signal().pid());
        }
        if (!st.ok()) {
          SendError(req.id(), Annotate(st, "Signal"));
        } else {
          Response r;
          r.set_id(req.id());
          Send(r);
        }
        break;
      }
      case Request::kResize: {
        absl::Status st = CheckRunning();
        const Request::Resize& rz = req.resize();
        if (st.ok() && (rz.rows() == 0 || rz.cols() == 0 || rz.rows() > 0xffff ||
                        rz.cols() > 0xffff)) {
          st = absl::InvalidArgumentError("rows and cols must be 1..65535");
        }
        if (st.ok()) {
          st = sandbox_->ResizeTerminal(rz.pid() == 0 ? 1 : rz.pid(),
                                        static_cast<uint16_t>(rz.rows()),
                                        static_cast<uint16_t>(rz.cols()));
        }
        if (!st.ok()) {
          SendError(req.id(), Annotate(st, "Resize"));
        } else {
          Response r;
          r.set_id(req.id());
          Send(r);
        }
        break;
      }
      case Request::kWait:
        OnWaitPid(req.id(), 1);
        break;
      case Request::kWaitPid:
        OnWaitPid(req.id(), req.wait_pid().pid());
        break;
      case Request::kWaitRestored:
        OnWaitRestored(req.id());
        break;
      case Request::kDestroy:
        OnDestroy(req.id());
      case Request::kExec:
        OnExec(req, std::move(fds));
        break;
      case Request::kCheckpoint:
        OnCheckpoint(req, std::move(fds));
        break;
      case Request::kRestore:
        OnRestore(req, std::move(fds));
        break;
      case Request::kPersist:
        OnPersist(req.id(), req.persist(), std::move(fds));
        break;
      case Request::kReattach:
        OnReattach(req.id(), req.reattach());
        break;
      case Request::kWatchCheckpoints:
        OnWatchCheckpoints(req.id());
        break;
      case Request::kStats: {
        if (absl::Status st = CheckRunning(); !st.ok()) {
          SendError(req.id(), st);
          break;
        }
        boot::Stats st = sandbox_->GetStats();
        Response r;
        r.set_id(req.id());
        control::SentryStats* out = r.mutable_stats();
        for (pid_t p : st.pids) out->add_pids(p);
        out->set_tasks(st.tasks);
        out->set_memory_bytes(st.memory_bytes);
        out->set_cpu_user_nanos(st.cpu_user_nanos);
        out->set_cpu_system_nanos(st.cpu_system_nanos);
        out->set_oom_kills(st.oom_kills);
        out->set_memory_limit_refusals(st.memory_limit_refusals);
        out->set_memory_limit_bytes(st.memory_limit_bytes);
        const boot::Limits lim = sandbox_->CurrentLimits();
        out->set_limit_memory_bytes(lim.memory_bytes);
        out->set_limit_pids(lim.pids);
        out->set_limit_cpus(lim.cpu_millis / 1000);
        for (const auto& [nr, n] : st.unimplemented) {
          (*out->mutable_unimplemented_syscalls())[static_cast<uint32_t>(nr)] = n;
        }
        sandbox_->kernel().platform().ExportStats(out->mutable_platform());
        if (const mm::AsyncLoader* al =
                sandbox_->kernel().memory_file().async_loader()) {
          SetRestorePages(al->Stats(), out->mutable_restore_pages());
        }
        Send(r);
        break;
      }
      case Request::kUpdate: {
        absl::Status st = CheckRunning();
        if (st.ok()) {
          boot::Limits lim;
          lim.memory_bytes = req.update().limits().memory_bytes();
          lim.cpu_millis = req.update().limits().cpu_millis();
          lim.pids = req.update().limits().pids();
          const v1::LimitsLifted& u = req.update().unlimited();
          boot::LimitsLifted lifted;
          lifted.memory = u.memory();
          lifted.cpu = u.cpu();
          lifted.pids = u.pids();
          st = sandbox_->UpdateLimits(lim, lifted);
        }
        if (!st.ok()) {
          SendError(req.id(), st);
          break;
        }
        Response r;
        r.set_id(req.id());
        Send(r);
        break;
      }
      case Request::MSG_NOT_SET:
        SendError(req.id(), absl::InvalidArgumentError("empty request"));
        break;
    }
  }
}

// The Sentry's pid in the pid namespace of the mounted /proc (the host's,
// or the daemon's), which /proc/self names.
pid_t HostPid() {
  char buf[32];
  ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);
  int pid = 0;
  if (n > 0) {
    buf[n] = '\0';
    if (absl::SimpleAtoi(buf, &pid) && pid > 0) return pid;
  }
  return getpid();
}

}  // namespace

int Serve(const Options& o) {
  // Before anything maps large ranges or starts threads.
  if (absl::Status s = platform::Registry::Get().InitProcess(); !s.ok()) {
    Log(std::string(s.message()));
    return 125;
  }
  signal(SIGPIPE, SIG_IGN);
  int fl = fcntl(o.control_fd, F_GETFD);
  if (fl < 0) {
    Log(absl::StrCat("--control-fd=", o.control_fd, ": not an open descriptor"));
    return 125;
  }
  fcntl(o.control_fd, F_SETFD, fl | FD_CLOEXEC);
  control::Channel ch{UniqueFd(o.control_fd)};

  // Hello carries the host's pid; spawned into a pid namespace of its own,
  // the Sentry is 1 there. The host's /proc (gone after isolation) says.
  pid_t host_pid = HostPid();
  if (getpid() != 1) {
    Log("not the init of a pid namespace of its own: the platform's "
        "processes share the daemon's (spawn the Sentry with CLONE_NEWPID)");
  }

  StageClock clock;
  boot::PrewarmOptions popts;
  popts.platform = o.platform;
  popts.vdso_tsc = o.vdso_tsc;
  popts.platform_options = o.platform_options;
  popts.wait_calibration = true;
  popts.prepare_address_space = true;
  // A dynamic /bin/true uses ~3 MiB. The pages count against the
  // sandbox's memory limit from the start (they are the Sentry's), so
  // not much more.
  popts.populate_bytes = 8ull << 20;
  popts.sentry_seccomp = o.sentry_seccomp;
  if (o.isolate) {
    const bool own_network = !o.host_network;
    popts.isolate = [own_network](StageClock* clock) -> absl::Status {
      RETURN_IF_ERROR(
          Annotate(isolation::EnterNamespaces(own_network), "namespaces"));
      clock->Mark(Stage::kNamespaces);
      RETURN_IF_ERROR(Annotate(isolation::PivotToEmptyRoot(), "empty root"));
      clock->Mark(Stage::kPivotRoot);
      RETURN_IF_ERROR(Annotate(isolation::DropCapabilities(), "capabilities"));
      clock->Mark(Stage::kCapabilities);
      return absl::OkStatus();
    };
  }
  auto pw = boot::Prewarm(popts, &clock);
  if (!pw.ok()) {
    // The daemon hears of it as the channel's end before any Hello.
    Log(absl::StrCat("prewarm: ", pw.status().message()));
    return 125;
  }

  Response hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_platform(o.platform);
  hello.mutable_hello()->set_sentry_pid(host_pid);
  AddTimings(clock, &hello);
  if (absl::Status s = ch.Send(hello); !s.ok()) {
    Log(absl::StrCat("sending Hello: ", s.message()));
    return 125;
  }
  // Lives until _exit: request threads may outlive Loop's stack frame.
  Server* server = new Server(std::move(ch), std::move(*pw), o.isolate, o.platform,
                              o.host_network);
  server->Loop();
}

}  // namespace sandboxd::serve
