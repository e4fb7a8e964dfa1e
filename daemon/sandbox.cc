#include "daemon/sandbox.h"

#include <fcntl.h>
#include <errno.h>
#include <signal.h>
#include <string.h>

#include <algorithm>

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "daemon/log.h"
#include "sentry/socket/sandbox_net.h"
#include "google/protobuf/util/time_util.h"

namespace sandboxd {
namespace daemon {
namespace {

using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(t));
}
google::protobuf::Duration ToProto(absl::Duration d) {
  return TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(d));
}
absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(t));
}

// How long the Sentry gets to answer a request that does not block.
constexpr absl::Duration kCallTimeout = absl::Seconds(10);
// ... and to save or load an image, which is as large as the memory.
constexpr absl::Duration kCheckpointTimeout = absl::Minutes(5);
// SandboxInfo.self_checkpoints keeps the last this many.
constexpr size_t kMaxSelfCheckpoints = 64;
// How long a released Sentry's exec waiters get to hear their processes'
// ends (the init's exit has killed them; the answers are on their way).
constexpr absl::Duration kReleaseExecWait = absl::Seconds(2);
// How long an exit waits for the process's output to reach its log (the
// relay ends at EOF, or 200 ms after the exit when a process it left
// behind still holds the pipe).
constexpr absl::Duration kOutputDrain = absl::Seconds(1);

// The descriptors of Exec'd processes a Reattached response says it holds.
size_t KeptFds(const control::Reattached& ra) {
  size_t n = 0;
  for (const control::KeptProcess& k : ra.processes()) n += k.fds();
  return n;
}

}  // namespace

std::string StateWord(v1::SandboxState s) {
  switch (s) {
    case v1::SANDBOX_STATE_CREATED: return "created";
    case v1::SANDBOX_STATE_RUNNING: return "running";
    case v1::SANDBOX_STATE_PAUSED: return "paused";
    case v1::SANDBOX_STATE_STOPPED: return "stopped";
    case v1::SANDBOX_STATE_FAILED: return "failed";
    default: return "unknown";
  }
}

std::string ExitReasonLabel(const v1::ExitStatus& e) {
  if (!e.error().empty()) return "failed";
  if (e.status_case() == v1::ExitStatus::kSignal) {
    return absl::StartsWith(e.reason(), "out of memory") ? "oom" : "signal";
  }
  return "exited";
}

ExecProcess::~ExecProcess() {
  if (!waiter.joinable()) return;
  // The waiter may hold the last reference itself.
  if (waiter.get_id() == std::this_thread::get_id()) {
    waiter.detach();
  } else {
    waiter.join();
  }
}

v1::ExecInfo ExecProcess::Info() {
  v1::ExecInfo info;
  info.set_pid(pid);
  *info.mutable_process() = process;
  *info.mutable_started() = ToProto(started);
  absl::MutexLock l(&mu);
  info.set_running(running);
  if (!running) {
    *info.mutable_exit() = exit;
    *info.mutable_exited() = ToProto(exited);
  }
  return info;
}

absl::Status ValidateProcessSpec(const v1::ProcessSpec& p, const std::string& field) {
  if (p.argv().empty() || p.argv(0).empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".argv: must name a program (argv[0] is empty)"));
  }
  for (int i = 0; i < p.env_size(); i++) {
    const std::string& e = p.env(i);
    if (e.find('=') == std::string::npos || e[0] == '=') {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".env[", i, "]: want NAME=value, got \"", e, "\""));
    }
  }
  if (!p.cwd().empty() && p.cwd()[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".cwd: must be absolute, got \"", p.cwd(), "\""));
  }
  // What execve accepts on Linux (with an 8 MiB stack limit): each string
  // up to MAX_ARG_STRLEN, and all of them with their pointers up to a
  // quarter of the stack; beyond, execve fails with E2BIG.
  constexpr size_t kMaxArgStrlen = 128 << 10;
  constexpr size_t kMaxArgBytes = 2 << 20;
  size_t total = 0;
  auto one = [&](const std::string& s, const char* what,
                 int i) -> absl::Status {
    if (s.size() + 1 > kMaxArgStrlen) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".", what, "[", i, "]: ", s.size() + 1,
          " bytes, more than execve takes in one string (", kMaxArgStrlen,
          ": E2BIG)"));
    }
    total += s.size() + 1 + sizeof(void*);
    return absl::OkStatus();
  };
  for (int i = 0; i < p.argv_size(); i++) {
    RETURN_IF_ERROR(one(p.argv(i), "argv", i));
  }
  for (int i = 0; i < p.env_size(); i++) {
    RETURN_IF_ERROR(one(p.env(i), "env", i));
  }
  if (total > kMaxArgBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".argv and ", field, ".env: ", total,
        " bytes with their pointers, more than execve takes (", kMaxArgBytes,
        ": E2BIG)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Sandbox>> Sandbox::Create(Options o) {
  ASSIGN_OR_RETURN(StdioPair stdio, StdioPair::Make(o.spec.process().tty()));
  std::shared_ptr<Sandbox> s(new Sandbox(std::move(o)));
  s->init_relay_ = std::make_unique<ProcessRelay>(&stdio, kInitLogBytes);
  {
    absl::MutexLock l(&s->mu_);
    s->init_stdio_ = std::move(stdio);
  }
  if (s->state_dir_ != nullptr) {
    s->SaveRecord();
    absl::Status p = s->init_relay_->log().PersistTo(s->state_dir_->OutputLogPath(s->id_));
    if (!p.ok()) Log("sandbox ", s->id_, ": keeping its output: ", p.ToString());
  }
  // The callback holds a raw pointer: the Sentry (and its reader thread)
  // dies before the rest of the sandbox.
  Sandbox* raw = s.get();
  s->sentry_->process().SetOnExit(
      [raw](bool crashed, const std::string& reason) { raw->OnSentryExit(crashed, reason); });
  if (s->sentry_->process().exited()) {
    s->OnSentryExit(true, s->sentry_->process().exit_reason());
  }
  return s;
}

Sandbox::Sandbox(Options o)
    : id_(std::move(o.id)),
      spec_(std::move(o.spec)),
      metrics_(o.metrics),
      state_dir_(o.state_dir),
      on_state_change_(std::move(o.on_state_change)),
      rootfs_(std::move(o.rootfs)),
      checkpoint_dir_(std::move(o.checkpoint_dir)),
      binds_(std::move(o.binds)),
      image_(std::move(o.image)),
      image_path_(std::move(o.image_path)),
      restore_rate_(o.restore_rate),
      sentry_(std::move(o.sentry)) {
  *timings_.mutable_created() = ToProto(o.created);
  timings_.set_pool_hit(o.pool_hit);
  network_ = std::move(o.network);
  if (network_.running() && state_dir_ != nullptr) {
    absl::Status s = state_dir_->RecordNetwork(id_, network_.pid());
    if (!s.ok()) Log("sandbox ", id_, ": recording its pasta: ", s.message());
  }
  for (const auto& [name, d] : o.restore_stages) AddStageLocked(name, d);
  for (const auto& [stage, d] : o.stages) AddStageLocked(StageName(stage), d);
}

void Sandbox::AddStage(Stage stage, absl::Duration d) {
  absl::MutexLock l(&mu_);
  AddStageLocked(StageName(stage), d);
}

void Sandbox::AddStage(absl::string_view name, absl::Duration d) {
  absl::MutexLock l(&mu_);
  AddStageLocked(name, d);
}

void Sandbox::SetRestoreLatency(absl::Duration d) {
  absl::MutexLock l(&mu_);
  *timings_.mutable_restore_latency() = ToProto(d);
}

void Sandbox::AddStageLocked(absl::string_view name, absl::Duration d) {
  v1::Stage* st = timings_.add_stages();
  st->set_name(std::string(name));
  *st->mutable_duration() = ToProto(d);
}

v1::Timings Sandbox::timings() const {
  absl::MutexLock l(&mu_);
  return timings_;
}

bool Sandbox::restored() const {
  absl::MutexLock l(&mu_);
  return RestoredLocked();
}

Sandbox::~Sandbox() { Destroy(); }

v1::SandboxState Sandbox::state() const {
  absl::MutexLock l(&mu_);
  return state_;
}

void Sandbox::SetCreateLatency(absl::Duration d) {
  absl::MutexLock l(&mu_);
  *timings_.mutable_create_latency() = ToProto(d);
}

void Sandbox::Changed() {
  SaveRecord();
  if (on_state_change_) on_state_change_();
}

void Sandbox::SaveRecord() {
  if (state_dir_ == nullptr) return;
  absl::MutexLock save(&save_mu_);
  v1::SandboxInfo info;
  {
    absl::MutexLock l(&mu_);
    if (destroyed_) return;
    info.set_id(id_);
    info.set_state(state_);
    *info.mutable_spec() = spec_;
    *info.mutable_timings() = timings_;
    *info.mutable_exit() = exit_;
    for (const v1::SelfCheckpoint& c : self_checkpoints_) *info.add_self_checkpoints() = c;
    if (checkpoint_.has_time()) *info.mutable_checkpoint() = checkpoint_;
    // Under mu_ with destroyed_ false: the Sentry's process is still there.
    info.add_sentry_pids(sentry_->process().pid());
  }
  if (absl::Status s = state_dir_->SaveSandbox(info); !s.ok()) {
    Log("sandbox ", id_, ": saving its record: ", s.ToString());
  }
}

absl::Status Sandbox::PersistLocked() {
  ASSIGN_OR_RETURN(UniqueFd listener, state_dir_->Listen(id_));
  std::vector<int> fds = {listener.get()};
  for (int fd : init_relay_->OutputFds()) fds.push_back(fd);
  control::Request req;
  req.mutable_persist();
  // An open stdin stays open while no daemon runs (a terminal's master,
  // kept already, is its stdin too).
  const int in =
      spec_.open_stdin() && !spec_.process().tty() ? init_relay_->StdinFd() : -1;
  if (in >= 0) {
    fds.push_back(in);
    req.mutable_persist()->set_with_stdin(true);
  }
  RETURN_IF_ERROR(sentry_->process().Call(req, fds, kCallTimeout).status());
  persisted_ = true;
  stdin_kept_ = in >= 0;
  return absl::OkStatus();
}

std::shared_ptr<Sandbox> Sandbox::Adopt(Options o, const v1::SandboxInfo& record) {
  o.id = record.id();
  o.spec = record.spec();
  std::shared_ptr<Sandbox> s(new Sandbox(std::move(o)));
  SentryProcess& p = s->sentry_->process();
  {
    absl::MutexLock l(&s->mu_);
    s->timings_ = record.timings();
    s->attached_ = true;  // its stdio went with the earlier daemon
    s->self_checkpoints_.assign(record.self_checkpoints().begin(),
                                record.self_checkpoints().end());
  }
  const bool ended = record.state() == v1::SANDBOX_STATE_STOPPED ||
                     record.state() == v1::SANDBOX_STATE_FAILED;
  StdioPair stdio;
  std::map<int, std::vector<UniqueFd>> kept;  // Exec'd processes' output
  std::string why;
  bool running = false;
  // A sandbox paused when the earlier daemon stopped runs on: its stopped
  // Sentry could not answer Reattach.
  if (record.state() == v1::SANDBOX_STATE_PAUSED && !p.exited()) {
    absl::Status r = s->SignalSentry(SIGCONT);
    Log("sandbox ", s->id_, ": paused by the earlier daemon, resumed: ", r.ToString());
  }
  if (p.exited()) {
    why = absl::StrCat("the sandbox's sentry (pid ", p.pid(), ") ", p.exit_reason());
  } else {
    control::Request req;
    req.mutable_reattach();
    std::vector<UniqueFd> fds;
    absl::StatusOr<control::Response> r = p.Call(req, &fds, kCallTimeout);
    const bool tty = record.spec().process().tty();
    // The init's output (and stdin), then each Exec'd process's.
    const size_t init_fds =
        (tty ? 1 : 2) + (r.ok() && r->reattached().stdin_kept() ? 1 : 0);
    if (!r.ok()) {
      why = absl::StrCat("reattaching its sentry: ", r.status().message());
    } else if (!r->reattached().started()) {
      why = "the sandbox had not started when the daemon stopped";
    } else if (fds.size() != init_fds + KeptFds(r->reattached())) {
      why = absl::StrCat("its sentry kept ", fds.size(), " descriptors, not ",
                         init_fds + KeptFds(r->reattached()));
    } else {
      const bool stdin_kept = r->reattached().stdin_kept();
      stdio.tty = tty;
      stdio.out = std::move(fds[0]);
      if (!tty) stdio.err = std::move(fds[1]);
      if (r->reattached().stdin_kept()) {
        stdio.in = std::move(fds[init_fds - 1]);
      } else if (tty && record.spec().open_stdin()) {
        stdio.in.reset(fcntl(stdio.out.get(), F_DUPFD_CLOEXEC, 0));
      }
      fds.erase(fds.begin(), fds.begin() + static_cast<std::ptrdiff_t>(init_fds));
      // The Exec'd processes' descriptors come in as many responses as
      // they need (control.proto, Reattach); a process whose descriptors
      // did not come is read by no one, and ends as its log says.
      for (;;) {
        if (fds.size() != KeptFds(r->reattached())) {
          Log("sandbox ", s->id_, ": its sentry sent ", fds.size(),
              " descriptors of exec'd processes, not ", KeptFds(r->reattached()));
          break;
        }
        size_t next = 0;
        for (const control::KeptProcess& k : r->reattached().processes()) {
          std::vector<UniqueFd>& mine = kept[k.pid()];
          for (uint32_t i = 0; i < k.fds(); i++) mine.push_back(std::move(fds[next++]));
        }
        if (!r->reattached().more()) break;
        // Each response must get further than the last (a Sentry is not
        // trusted to end the exchange on its own).
        const control::Reattached& ra = r->reattached();
        const int32_t last =
            ra.processes().empty() ? 0 : ra.processes(ra.processes_size() - 1).pid();
        if (last <= req.reattach().after_pid()) {
          Log("sandbox ", s->id_, ": its sentry said more processes kept descriptors, "
              "but sent none after pid ", req.reattach().after_pid());
          break;
        }
        req.mutable_reattach()->set_after_pid(last);
        fds.clear();
        r = p.Call(req, &fds, kCallTimeout);
        if (!r.ok()) {
          Log("sandbox ", s->id_, ": reattaching its sentry's exec'd processes after pid ",
              req.reattach().after_pid(), ": ", r.status().message());
          break;
        }
      }
      absl::MutexLock l(&s->mu_);
      s->persisted_ = true;
      s->stdin_kept_ = stdin_kept;
      running = true;
    }
  }
  if (!running && record.state() == v1::SANDBOX_STATE_CREATED) {
    // Its rootfs and stdio were the earlier daemon's, and its Sentry ended
    // with that daemon's channel (a record still saying CREATED whose
    // Sentry answers had started: the daemon died before writing RUNNING).
    why = "it had not been started, and only a started sandbox outlives its daemon";
  }
  s->init_relay_ = std::make_unique<ProcessRelay>(&stdio, kInitLogBytes);
  if (s->state_dir_ != nullptr) {
    const std::string path = s->state_dir_->OutputLogPath(s->id_);
    absl::Status ls = s->init_relay_->log().LoadFrom(path);
    if (ls.ok()) ls = s->init_relay_->log().PersistTo(path);
    if (!ls.ok()) Log("sandbox ", s->id_, ": its output log: ", ls.ToString());
  }
  Sandbox* raw = s.get();
  p.SetOnExit(
      [raw](bool crashed, const std::string& reason) { raw->OnSentryExit(crashed, reason); });
  {
    absl::MutexLock l(&s->mu_);
    if (ended) {
      s->state_ = record.state();
      s->exit_ = record.exit();
      s->checkpoint_ = record.checkpoint();
    } else if (running) {
      s->state_ = v1::SANDBOX_STATE_RUNNING;
    } else {
      s->state_ = v1::SANDBOX_STATE_FAILED;
      s->exit_.set_error(absl::StrCat("not recovered after a daemon restart: ", why));
      *s->timings_.mutable_exited() = ToProto(absl::Now());
    }
  }
  s->init_relay_->Start();
  if (running && !ended) {
    s->waiter_ = std::thread([raw] { raw->WaitLoop(); });
    // Reports made while no daemon listened are kept by the Sentry.
    if (!s->spec_.checkpoint_dir().empty()) {
      s->checkpoint_watcher_ = std::thread([raw] { raw->WatchCheckpointsLoop(); });
    }
  } else {
    s->init_relay_->ProcessExited();
  }
  s->AdoptExecs(running, std::move(kept));
  Log("sandbox ", s->id_, ": ",
      running ? "re-adopted its sentry (pid " : "could not re-adopt its sentry (pid ",
      p.pid(), ")", running ? "" : absl::StrCat(": ", why), "; ",
      StateWord(s->state()));
  s->SaveRecord();
  return s;
}

absl::Status Sandbox::Start() {
  absl::Status s;
  {
    absl::MutexLock l(&mu_);
    s = StartLocked();
    // Nobody attached: the program's stdin is at its end from the start,
    // unless it is kept open for a later attach.
    if (s.ok() && !attached_ && !spec_.open_stdin()) init_relay_->CloseStdin();
  }
  Changed();
  return s;
}

absl::StatusOr<ProcessRelay*> Sandbox::AttachAndStart(const uint64_t* cursor,
                                                      const v1::ExecRequest::Resize& size,
                                                      bool* attached) {
  if (attached != nullptr) *attached = false;
  absl::Status s;
  {
    absl::MutexLock l(&mu_);
    if (attached_ || state_ != v1::SANDBOX_STATE_CREATED) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, ": attach needs a created sandbox nobody has attached to (it is ",
          StateWord(state_), attached_ ? ", attached" : "", ")"));
    }
    attached_ = true;
    if (attached != nullptr) *attached = true;
    if (size.rows() > 0 && size.cols() > 0) {
      (void)init_relay_->Resize(size.rows(), size.cols());  // no terminal: nothing to size
    }
    init_relay_->log().Pin(cursor);
    s = StartLocked();
    if (!s.ok()) init_relay_->log().Unpin();  // the caller's cursor goes away
  }
  Changed();
  RETURN_IF_ERROR(s);
  return init_relay_.get();
}

absl::Status Sandbox::StartLocked() {
  if (state_ != v1::SANDBOX_STATE_CREATED || destroyed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sandbox ", id_, " is ", StateWord(state_), ", not created"));
  }
  control::Request req;
  std::vector<int> fds;
  const bool restore = image_.valid();
  if (restore) {
    control::Request::Restore* r = req.mutable_restore();
    r->set_sandbox_id(id_);
    // The Sentry names an empty hostname by the id; the spec goes as it
    // is, since it is what the sandbox's self-checkpoints record.
    *r->mutable_spec() = spec_;
    r->set_image_path(image_path_);
    r->set_page_rate(restore_rate_);
    fds.push_back(image_.get());
  } else {
    control::Request::Start* start = req.mutable_start();
    start->set_sandbox_id(id_);
    *start->mutable_spec() = spec_;
    // /etc/hosts and /etc/resolv.conf of the network mode, from this host
    // (a namespace by path has the host's, as HOST).
    const v1::NetworkMode etc_mode =
        spec_.network_namespace().empty() ? spec_.network() : v1::NETWORK_MODE_HOST;
    for (auto& [name, content] : sandbox_net::EtcFilesFor(
             etc_mode, spec_.hostname().empty() ? id_ : spec_.hostname())) {
      (*start->mutable_etc_files())[name] = std::move(content);
    }
  }
  fds.push_back(rootfs_.get());
  for (int fd : init_stdio_.TheirFds()) fds.push_back(fd);
  if (checkpoint_dir_.valid()) fds.push_back(checkpoint_dir_.get());
  for (const UniqueFd& b : binds_) fds.push_back(b.get());
  if (state_dir_ != nullptr) {
    // Without it the sandbox still runs, but dies with this daemon.
    const absl::Time persist = absl::Now();
    absl::Status p;
    if (sentry_->has_socket()) {
      // The warm Sentry listens already: the socket moves into place and
      // what it keeps comes with the start.
      p = state_dir_->MoveWarmSocket(sentry_->process().pid(), id_);
      if (p.ok()) {
        std::vector<int> keep = init_relay_->OutputFds();
        const int in =
            spec_.open_stdin() && !spec_.process().tty() ? init_relay_->StdinFd() : -1;
        if (in >= 0) keep.push_back(in);
        fds.insert(fds.end(), keep.begin(), keep.end());
        const uint32_t n = static_cast<uint32_t>(keep.size());
        if (restore) {
          req.mutable_restore()->set_keep_fds(n);
          req.mutable_restore()->set_keep_stdin(in >= 0);
        } else {
          req.mutable_start()->set_keep_fds(n);
          req.mutable_start()->set_keep_stdin(in >= 0);
        }
        persisted_ = true;
        stdin_kept_ = in >= 0;
      }
    } else {
      p = PersistLocked();
    }
    if (!p.ok()) Log("sandbox ", id_, ": it will not outlive the daemon: ", p.ToString());
    AddStageLocked(StageName(Stage::kStartPersist), absl::Now() - persist);
  }

  init_relay_->Start();
  const absl::Time begin = absl::Now();
  // A restore reads and checks the whole image: a large one takes
  // longer than a start.
  absl::StatusOr<control::Response> r = sentry_->process().Call(
      req, fds, restore ? kCheckpointTimeout : kCallTimeout);
  AddStageLocked(StageName(Stage::kStartSentryCall), absl::Now() - begin);
  if (r.ok()) {
    for (const control::StageTiming& t : r->timings()) {
      // The Sentry's restore steps are named restore.*: kept apart from a
      // start's.
      AddStageLocked(restore ? absl::StrCat("restore.sentry.",
                                            absl::string_view(t.name()).substr(
                                                t.name().rfind('.') + 1))
                             : absl::StrCat(kSentryStagePrefix, t.name()),
                     absl::Nanoseconds(t.nanos()));
    }
  }
  // The Sentry has its copies (or failed): ours only keep pipes open.
  init_stdio_.theirs.clear();
  rootfs_.reset();
  image_.reset();
  checkpoint_dir_.reset();
  binds_.clear();
  if (!r.ok()) {
    v1::ExitStatus exit;
    exit.set_error(absl::StrCat(restore ? "restore: " : "start: ",
                                r.status().message()));
    exit_ = exit;
    state_ = v1::SANDBOX_STATE_FAILED;
    *timings_.mutable_exited() = ToProto(absl::Now());
    init_relay_->ProcessExited();
    return absl::Status(r.status().code(),
                        absl::StrCat("sandbox ", id_, restore ? ": restore: " : ": start: ",
                                     r.status().message()));
  }
  state_ = v1::SANDBOX_STATE_RUNNING;
  *timings_.mutable_started() = ToProto(absl::Now());
  waiter_ = std::thread([this] { WaitLoop(); });
  if (!spec_.checkpoint_dir().empty()) {
    checkpoint_watcher_ = std::thread([this] { WatchCheckpointsLoop(); });
  }
  return absl::OkStatus();
}

void Sandbox::WatchCheckpointsLoop() {
  for (;;) {
    control::Request req;
    req.mutable_watch_checkpoints();
    absl::StatusOr<control::Response> r = sentry_->process().Call(req);
    if (!r.ok()) return;  // the Sentry is gone
    const control::SelfCheckpointed& done = r->self_checkpointed();
    v1::SelfCheckpoint c;
    if (!done.image_name().empty()) {
      c.set_image_dir(absl::StrCat(spec_.checkpoint_dir(), "/", done.image_name()));
    }
    *c.mutable_time() = ToProto(absl::Now());
    c.set_error(done.error());
    c.set_image_bytes(done.image().state_bytes() + done.image().pages_bytes());
    c.set_memory_bytes(done.image().memory_bytes());
    for (const control::StageTiming& t : r->timings()) {
      const std::string& n = t.name();
      v1::Stage* st = c.add_stages();
      st->set_name(absl::StrCat("checkpoint.sentry.", n.substr(n.rfind('.') + 1)));
      *st->mutable_duration() = ToProto(absl::Nanoseconds(t.nanos()));
    }
    if (c.error().empty()) {
      Log("sandbox ", id_, ": checkpointed itself to ", c.image_dir(), " (",
          c.image_bytes(), " bytes)");
    } else {
      Log("sandbox ", id_, ": its self-checkpoint failed: ", c.error());
    }
    {
      absl::MutexLock l(&mu_);
      if (destroyed_) return;
      self_checkpoints_.push_back(std::move(c));
      if (self_checkpoints_.size() > kMaxSelfCheckpoints) {
        self_checkpoints_.erase(self_checkpoints_.begin());
      }
    }
    Changed();
  }
}

void Sandbox::WaitLoop() {
  control::Request req;
  req.mutable_wait();
  absl::StatusOr<control::Response> r = sentry_->process().Call(req);
  if (r.ok()) {
    v1::ExitStatus exit = r->exit();
    {
      absl::MutexLock l(&mu_);
      if (!checkpoint_path_.empty()) {
        checkpoint_.set_image_dir(checkpoint_path_);
        *checkpoint_.mutable_time() = ToProto(absl::Now());
      }
    }
    // Its output first: `wait` then `logs` must find all of it.
    init_relay_->ProcessExited();
    init_relay_->AwaitOutputEnd(kOutputDrain);
    Finish(std::move(exit), v1::SANDBOX_STATE_STOPPED);
    ReleaseSentry();
    return;
  }
  // The Sentry is gone. OnSentryExit has the reason (a crash) or Destroy
  // does (a kill); this covers whichever comes later.
  bool destroyed, host_killed;
  {
    absl::MutexLock l(&mu_);
    destroyed = destroyed_;
    host_killed = host_killed_;
  }
  v1::ExitStatus exit;
  if (destroyed || host_killed) {
    exit.set_signal(SIGKILL);
    Finish(exit, v1::SANDBOX_STATE_STOPPED);
    return;
  }
  exit.set_error(std::string(r.status().message()));
  Finish(exit, v1::SANDBOX_STATE_FAILED);
}

void Sandbox::ReleaseSentry() {
  {
    absl::MutexLock l(&mu_);
    if (destroyed_) return;  // Destroy ends it
  }
  CollectMetrics();
  bool load_unfinished;
  {
    absl::MutexLock l(&mu_);
    // A checkpoint that ended the sandbox may be answered after the
    // init's Wait: its reply (the image's figures) comes first.
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !checkpoint_in_flight_; };
    mu_.AwaitWithDeadline(absl::Condition(&idle), absl::Now() + kCheckpointTimeout);
    load_unfinished = RestoredLocked() && !(have_restore_ && restore_.done() &&
                                            restore_.bytes_failed() == 0);
  }
  if (load_unfinished) {
    // Why a restore's page load failed is known only to the Sentry: asked
    // now, for wait --restored after the end.
    control::Request req;
    req.mutable_wait_restored();
    absl::StatusOr<control::Response> r =
        sentry_->process().Call(req, {}, kReleaseExecWait);
    if (r.ok() && r->has_restore_pages()) {
      NoteRestorePages(r->restore_pages());
    } else if (!r.ok() && !absl::IsDeadlineExceeded(r.status())) {
      absl::MutexLock l(&mu_);
      restore_error_ = absl::Status(r.status().code(), absl::StrCat("sandbox ", id_, ": ",
                                                                    r.status().message()));
    }
  }
  std::vector<std::shared_ptr<ExecProcess>> execs;
  {
    absl::MutexLock l(&mu_);
    for (auto& [pid, e] : execs_) execs.push_back(e);
  }
  const absl::Time deadline = absl::Now() + kReleaseExecWait;
  for (const std::shared_ptr<ExecProcess>& e : execs) {
    ExecProcess* raw = e.get();
    absl::MutexLock el(&raw->mu);
    auto done = [raw]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(raw->mu) { return !raw->running; };
    raw->mu.AwaitWithDeadline(absl::Condition(&done), deadline);
  }
  {
    absl::MutexLock l(&mu_);
    if (destroyed_) return;
  }
  Log("sandbox ", id_, ": its init has ended; ending its sentry (pid ",
      sentry_->process().pid(), ")");
  // A kill on the host: the Sentry has nothing left to say, and its
  // process namespace takes any stub with it.
  KillOnHost();
}

void Sandbox::Finish(v1::ExitStatus exit, v1::SandboxState state) {
  {
    absl::MutexLock l(&mu_);
    if (state_ == v1::SANDBOX_STATE_STOPPED || state_ == v1::SANDBOX_STATE_FAILED) return;
    // An init that ran and ended (not a start that failed, nor a
    // sandbox destroyed before its start).
    if (metrics_ != nullptr && (state_ == v1::SANDBOX_STATE_RUNNING ||
                                state_ == v1::SANDBOX_STATE_PAUSED)) {
      metrics_->IncSandboxExit(ExitReasonLabel(exit));
    }
    exit_ = std::move(exit);
    state_ = state;
    *timings_.mutable_exited() = ToProto(absl::Now());
  }
  init_relay_->ProcessExited();
  Changed();
}

void Sandbox::OnSentryExit(bool crashed, const std::string& reason) {
  if (!crashed) return;
  pid_t pid;
  {
    absl::MutexLock l(&mu_);
    if (destroyed_ || host_killed_) return;
    // Read now: a Destroy may begin once mu_ is released, and the
    // SentryProcess this runs on is then torn down (WarmSentry's process
    // is null while its destructor joins this thread).
    pid = sentry_->process().pid();
  }
  Log("sandbox ", id_, ": sentry (pid ", pid, ") ", reason);
  StopNetwork();
  if (metrics_ != nullptr) metrics_->IncSentryCrashes();
  v1::ExitStatus exit;
  exit.set_error(absl::StrCat("the sandbox's sentry (pid ", pid, ") ", reason));
  Finish(exit, v1::SANDBOX_STATE_FAILED);
}

absl::StatusOr<v1::ExitStatus> Sandbox::AwaitExit(absl::Time deadline,
                                                  const std::function<bool()>& cancelled) {
  absl::MutexLock l(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_ == v1::SANDBOX_STATE_STOPPED || state_ == v1::SANDBOX_STATE_FAILED;
  };
  for (;;) {
    const absl::Time step = std::min(deadline, absl::Now() + absl::Milliseconds(200));
    if (mu_.AwaitWithDeadline(absl::Condition(&done), step)) return exit_;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("sandbox ", id_, ": the init program is still running"));
    }
    if (cancelled && cancelled()) return absl::CancelledError("wait cancelled");
  }
}

void Sandbox::KillOnHost() {
  {
    absl::MutexLock l(&mu_);
    host_killed_ = true;
  }
  // The Sentry is the init of its pid namespace: when it dies the kernel
  // kills everything in it. Its cgroup is killed too (cgroup.kill, or
  // freeze and kill on v1), so that not even a process that left the
  // namespace's tracking survives. Nothing is asked of the Sentry.
  SentryProcess& p = sentry_->process();
  p.ExpectExit();
  p.Kill();
  if (Cgroup* cg = sentry_->cgroup()) {
    absl::Status s = cg->KillAll(absl::Seconds(1));
    if (!s.ok()) Log("sandbox ", id_, ": ", s.message());
  }
  StopNetwork();
}

void Sandbox::StopNetwork() {
  sandbox_net::Pasta pasta;
  {
    absl::MutexLock l(&mu_);
    pasta = std::move(network_);
  }
  if (pasta.running()) {
    Log("sandbox ", id_, ": ending its network (pasta, pid ", pasta.pid(), ")");
  }
  pasta.Stop();
  if (state_dir_ != nullptr) state_dir_->ForgetNetwork(id_);
}

absl::Status Sandbox::Signal(int signal, bool all, int pid) {
  {
    absl::MutexLock l(&mu_);
    // A paused sandbox can still be killed (on the host, below).
    const bool host_kill = signal == SIGKILL && (all || pid <= 1) &&
                           state_ == v1::SANDBOX_STATE_PAUSED;
    if (state_ != v1::SANDBOX_STATE_RUNNING && !host_kill) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, " is ", StateWord(state_), ", not running"));
    }
  }
  // SIGKILL of the init (or of everything) ends the sandbox: a host
  // SIGKILL of all its processes, which works whatever state the Sentry
  // or the application left the stubs in.
  if (signal == SIGKILL && (all || pid <= 1)) {
    KillOnHost();
    return absl::OkStatus();
  }
  control::Request req;
  req.mutable_signal()->set_signal(signal);
  req.mutable_signal()->set_all(all);
  req.mutable_signal()->set_pid(pid);
  absl::StatusOr<control::Response> r = sentry_->process().Call(req, {}, kCallTimeout);
  return r.status();
}

absl::StatusOr<v1::Limits> Sandbox::Update(const v1::Limits& limits,
                                           const v1::LimitsLifted& lifted) {
  v1::Limits merged;
  {
    absl::MutexLock l(&mu_);
    if (state_ != v1::SANDBOX_STATE_RUNNING || destroyed_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, " is ", StateWord(state_), ", not running"));
    }
    merged = spec_.limits();
  }
  if (limits.memory_bytes()) merged.set_memory_bytes(limits.memory_bytes());
  if (limits.cpu_millis()) merged.set_cpu_millis(limits.cpu_millis());
  if (limits.pids()) merged.set_pids(limits.pids());
  if (lifted.memory()) merged.set_memory_bytes(0);
  if (lifted.cpu()) merged.set_cpu_millis(0);
  if (lifted.pids()) merged.set_pids(0);
  control::Request req;
  *req.mutable_update()->mutable_limits() = limits;
  *req.mutable_update()->mutable_unlimited() = lifted;
  RETURN_IF_ERROR(
      Annotate(sentry_->process().Call(req, {}, kCallTimeout).status(), "update: the Sentry"));
  if (Cgroup* cg = sentry_->cgroup()) {
    CgroupLimits cl;
    cl.memory_bytes = merged.memory_bytes();
    cl.cpu_millis = merged.cpu_millis();
    cl.pids = HostPidsFor(merged.pids());
    RETURN_IF_ERROR(Annotate(cg->SetLimits(cl), "update: the sandbox's cgroup"));
  }
  {
    // spec_'s other fields are read without mu_ (they never change);
    // its limits change only here, under mu_.
    absl::MutexLock l(&mu_);
    *spec_.mutable_limits() = merged;
  }
  SaveRecord();
  return merged;
}

absl::Status Sandbox::SignalSentry(int sig) {
  Cgroup* cg = sentry_->cgroup();
  if (cg == nullptr) {
    // Without cgroups: the Sentry's process group, which its stubs never
    // leave (one kill(2), so no process forked meanwhile escapes it).
    return Annotate(sentry_->process().SignalGroup(sig), "the sentry's process group");
  }
  for (int pass = 0; pass < 2; pass++) {
    ASSIGN_OR_RETURN(std::vector<pid_t> procs, cg->Procs());
    for (pid_t p : procs) kill(p, sig);
  }
  return absl::OkStatus();
}

absl::Status Sandbox::Pause() {
  {
    absl::MutexLock l(&mu_);
    if (state_ != v1::SANDBOX_STATE_RUNNING || destroyed_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, " is ", StateWord(state_), ", not running"));
    }
    // First: the calls that would ask the stopped Sentry are refused from now.
    state_ = v1::SANDBOX_STATE_PAUSED;
  }
  if (absl::Status s = SignalSentry(SIGSTOP); !s.ok()) {
    (void)SignalSentry(SIGCONT);
    absl::MutexLock l(&mu_);
    if (state_ == v1::SANDBOX_STATE_PAUSED) state_ = v1::SANDBOX_STATE_RUNNING;
    return Annotate(s, "pause");
  }
  Changed();
  return absl::OkStatus();
}

absl::Status Sandbox::Resume() {
  {
    absl::MutexLock l(&mu_);
    if (state_ != v1::SANDBOX_STATE_PAUSED || destroyed_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, " is ", StateWord(state_), ", not paused"));
    }
  }
  RETURN_IF_ERROR(Annotate(SignalSentry(SIGCONT), "resume"));
  {
    absl::MutexLock l(&mu_);
    if (state_ == v1::SANDBOX_STATE_PAUSED) state_ = v1::SANDBOX_STATE_RUNNING;
  }
  Changed();
  return absl::OkStatus();
}

absl::Status Sandbox::ResizeTerminal(int pid, uint32_t rows, uint32_t cols) {
  {
    absl::MutexLock l(&mu_);
    if (state_ != v1::SANDBOX_STATE_RUNNING || destroyed_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, " is ", StateWord(state_), ", not running"));
    }
  }
  control::Request req;
  req.mutable_resize()->set_pid(pid);
  req.mutable_resize()->set_rows(rows);
  req.mutable_resize()->set_cols(cols);
  return sentry_->process().Call(req, {}, kCallTimeout).status();
}

absl::StatusOr<ProcessRelay*> Sandbox::AttachRunning(uint64_t* cursor) {
  absl::MutexLock l(&mu_);
  if (state_ != v1::SANDBOX_STATE_RUNNING || destroyed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sandbox ", id_, " is ", StateWord(state_),
        ": an attach follows a running init (or starts a created one)"));
  }
  *cursor = init_relay_->log().end();
  return init_relay_.get();
}

void Sandbox::CloseInitStdin() {
  init_relay_->CloseStdin();
  bool kept;
  {
    absl::MutexLock l(&mu_);
    kept = stdin_kept_;
    stdin_kept_ = false;
  }
  if (!kept) return;
  control::Request req;
  req.mutable_persist()->set_drop_stdin(true);
  absl::Status s = sentry_->process().Call(req, {}, kCallTimeout).status();
  if (!s.ok()) Log("sandbox ", id_, ": closing the stdin its sentry keeps: ", s.ToString());
}

v1::ProcessSpec Sandbox::ExecDefaults(const v1::ProcessSpec& exec) const {
  const v1::ProcessSpec& init = spec_.process();
  v1::ProcessSpec p = exec;
  // As docker exec: the sandbox's environment with the exec's on top (a
  // name the exec sets replaces the sandbox's), its working directory and
  // its user unless the exec names its own.
  p.clear_env();
  std::vector<std::string> env(init.env().begin(), init.env().end());
  for (const std::string& e : exec.env()) {
    const std::string name = e.substr(0, e.find('='));
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& have) {
                               return have.compare(0, have.find('='), name) == 0 &&
                                      have.find('=') == name.size();
                             }),
              env.end());
    env.push_back(e);
  }
  for (std::string& e : env) p.add_env(std::move(e));
  if (p.cwd().empty()) p.set_cwd(init.cwd());
  if (!exec.has_user()) {
    if (init.has_user()) *p.mutable_user() = init.user();
  }
  return p;
}

absl::StatusOr<std::shared_ptr<ExecProcess>> Sandbox::StartExec(
    const v1::ProcessSpec& exec_process, const uint64_t* cursor,
    const v1::ExecRequest::Resize& size) {
  const v1::ProcessSpec process = ExecDefaults(exec_process);
  bool keep;
  {
    absl::MutexLock l(&mu_);
    if (state_ != v1::SANDBOX_STATE_RUNNING || destroyed_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, " is ", StateWord(state_), ", not running"));
    }
    keep = persisted_ && state_dir_ != nullptr;
  }
  ASSIGN_OR_RETURN(StdioPair stdio, StdioPair::Make(process.tty()));
  auto e = std::make_shared<ExecProcess>();
  e->process = process;
  e->relay = std::make_unique<ProcessRelay>(&stdio, kInitLogBytes);
  if (process.tty() && size.rows() > 0 && size.cols() > 0) {
    RETURN_IF_ERROR(e->relay->Resize(size.rows(), size.cols()));
  }
  e->relay->log().Pin(cursor);
  control::Request req;
  *req.mutable_exec()->mutable_process() = process;
  std::vector<int> fds = stdio.TheirFds();
  if (keep) {
    // The Sentry keeps the output open while no daemon runs.
    const std::vector<int> out = e->relay->OutputFds();
    fds.insert(fds.end(), out.begin(), out.end());
    req.mutable_exec()->set_keep_fds(static_cast<uint32_t>(out.size()));
  }
  absl::StatusOr<control::Response> r = sentry_->process().Call(req, fds, kCallTimeout);
  if (!r.ok()) {
    e->relay->log().Unpin();
    // The code stays the Sentry's: NOT_FOUND for a missing program,
    // FAILED_PRECONDITION for one that cannot run (clients' 127 and 126).
    absl::string_view why = r.status().message();
    absl::ConsumePrefix(&why, "Exec: ");
    return absl::Status(r.status().code(), absl::StrCat("sandbox ", id_, ": exec: ", why));
  }
  e->pid = r->exec_pid();
  e->started = absl::Now();
  // The relay starts once the log has its file: nothing read goes only to
  // memory (the pipes hold what the process writes meanwhile).
  if (state_dir_ != nullptr) {
    absl::Status p = e->relay->log().PersistTo(state_dir_->ExecLogPath(id_, e->pid));
    if (!p.ok()) Log("sandbox ", id_, ": keeping process ", e->pid, "'s output: ", p.ToString());
    SaveExecRecord(*e);
  }
  e->relay->Start();
  {
    absl::MutexLock l(&mu_);
    execs_[e->pid] = e;
    StartExecWaiter(e);
  }
  PruneExecs();
  return e;
}

void Sandbox::StartExecWaiter(std::shared_ptr<ExecProcess> e) {
  ExecProcess* raw = e.get();
  raw->waiter = std::thread([this, e = std::move(e)] { ExecWaitLoop(e); });
}

void Sandbox::ExecWaitLoop(std::shared_ptr<ExecProcess> e) {
  control::Request req;
  req.mutable_wait_pid()->set_pid(e->pid);
  absl::StatusOr<control::Response> r = sentry_->process().Call(req);
  v1::ExitStatus exit;
  if (r.ok()) {
    exit = r->exit();
  } else {
    bool killed;
    {
      absl::MutexLock l(&mu_);
      killed = destroyed_ || host_killed_;
    }
    // The Sentry is gone: killed by the daemon (a kill of everything), or
    // its crash, which the error names.
    if (killed) {
      exit.set_signal(SIGKILL);
    } else {
      exit.set_error(std::string(r.status().message()));
    }
  }
  // Its output first: `wait --pid` then `logs --pid` must find all of it.
  e->relay->ProcessExited();
  e->relay->AwaitOutputEnd(kOutputDrain);
  {
    absl::MutexLock l(&e->mu);
    e->running = false;
    e->exit = exit;
    e->exited = absl::Now();
  }
  SaveExecRecord(*e);
  PruneExecs();
}

void Sandbox::SaveExecRecord(ExecProcess& e) {
  if (state_dir_ == nullptr) return;
  absl::MutexLock save(&save_mu_);
  {
    absl::MutexLock l(&mu_);
    if (destroyed_) return;
  }
  if (absl::Status s = state_dir_->SaveExec(id_, e.Info()); !s.ok()) {
    Log("sandbox ", id_, ": saving process ", e.pid, "'s record: ", s.ToString());
  }
}

void Sandbox::PruneExecs() {
  std::vector<std::shared_ptr<ExecProcess>> gone;
  {
    absl::MutexLock l(&mu_);
    std::vector<std::pair<absl::Time, int>> ended;
    for (auto& [pid, e] : execs_) {
      absl::MutexLock el(&e->mu);
      if (!e->running) ended.emplace_back(e->exited, pid);
    }
    if (ended.size() <= kKeptEndedExecs) return;
    std::sort(ended.begin(), ended.end());
    for (size_t i = 0; i + kKeptEndedExecs < ended.size(); i++) {
      auto it = execs_.find(ended[i].second);
      gone.push_back(std::move(it->second));
      execs_.erase(it);
    }
  }
  for (std::shared_ptr<ExecProcess>& e : gone) {
    // Its waiter has recorded the end (or is about to): after it, the
    // record goes. Never this thread's own: it ended last.
    if (e->waiter.joinable() && e->waiter.get_id() != std::this_thread::get_id()) {
      e->waiter.join();
    }
    if (state_dir_ != nullptr) {
      absl::MutexLock save(&save_mu_);
      state_dir_->RemoveExec(id_, e->pid);
    }
  }
}

void Sandbox::AdoptExecs(bool running, std::map<int, std::vector<UniqueFd>> kept) {
  if (state_dir_ == nullptr) return;
  for (v1::ExecInfo& info : state_dir_->LoadExecs(id_)) {
    auto e = std::make_shared<ExecProcess>();
    e->pid = info.pid();
    e->process = info.process();
    e->started = FromProto(info.started());
    const bool live = running && info.running();
    StdioPair stdio;
    stdio.tty = info.process().tty();
    // Without kept descriptors (its Sentry answered the earlier daemon's
    // WaitPid: the process has ended) the log has all there is.
    if (auto k = kept.find(e->pid); live && k != kept.end()) {
      std::vector<UniqueFd>& fds = k->second;
      if (!fds.empty()) stdio.out = std::move(fds[0]);
      if (!stdio.tty && fds.size() > 1) stdio.err = std::move(fds[1]);
    }
    e->relay = std::make_unique<ProcessRelay>(&stdio, kInitLogBytes);
    const std::string path = state_dir_->ExecLogPath(id_, e->pid);
    absl::Status ls = e->relay->log().LoadFrom(path);
    if (ls.ok() && live) ls = e->relay->log().PersistTo(path);
    if (!ls.ok()) Log("sandbox ", id_, ": process ", e->pid, "'s output log: ", ls.ToString());
    {
      absl::MutexLock el(&e->mu);
      e->running = live;
      if (!info.running()) {
        e->exit = info.exit();
        e->exited = FromProto(info.exited());
      } else if (!live) {
        e->exit.set_error(
            "not recovered after a daemon restart: its sandbox's sentry was not");
        e->exited = absl::Now();
      }
    }
    e->relay->Start();
    if (!live) e->relay->ProcessExited();
    {
      absl::MutexLock l(&mu_);
      execs_[e->pid] = e;
      if (live) StartExecWaiter(e);
    }
    if (info.running() && !live) SaveExecRecord(*e);
  }
  PruneExecs();
}

absl::StatusOr<std::shared_ptr<ExecProcess>> Sandbox::FindExec(int pid) {
  absl::MutexLock l(&mu_);
  auto it = execs_.find(pid);
  if (it == execs_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "sandbox ", id_, " has no process ", pid, " started by exec (the running ones and the last ",
        kKeptEndedExecs, " that ended are kept)"));
  }
  return it->second;
}

absl::StatusOr<v1::ExitStatus> Sandbox::AwaitExec(int pid, absl::Time deadline,
                                                  const std::function<bool()>& cancelled) {
  ASSIGN_OR_RETURN(std::shared_ptr<ExecProcess> e, FindExec(pid));
  ExecProcess* raw = e.get();
  absl::MutexLock l(&raw->mu);
  auto done = [raw]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(raw->mu) { return !raw->running; };
  for (;;) {
    const absl::Time step = std::min(deadline, absl::Now() + absl::Milliseconds(200));
    if (raw->mu.AwaitWithDeadline(absl::Condition(&done), step)) return raw->exit;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("sandbox ", id_, ": process ", pid, " is still running"));
    }
    if (cancelled && cancelled()) return absl::CancelledError("wait cancelled");
  }
}

absl::Status Sandbox::Checkpoint(int image, const std::string& path,
                                 bool leave_running,
                                 v1::CheckpointResponse* resp) {
  v1::SandboxSpec spec;
  {
    absl::MutexLock l(&mu_);
    if (state_ != v1::SANDBOX_STATE_RUNNING || destroyed_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, " is ", StateWord(state_), ", not running"));
    }
    spec = spec_;
    // Before the call: the Sentry may answer the init's Wait first.
    if (!leave_running) checkpoint_path_ = path;
    checkpoint_in_flight_ = true;
  }
  control::Request req;
  control::Request::Checkpoint* c = req.mutable_checkpoint();
  c->set_leave_running(leave_running);
  *c->mutable_spec() = std::move(spec);
  c->set_image_path(path);
  const int fds[] = {image};
  const absl::Time begin = absl::Now();
  absl::StatusOr<control::Response> r =
      sentry_->process().Call(req, fds, kCheckpointTimeout);
  absl::Cleanup answered = [this] {
    absl::MutexLock l(&mu_);
    checkpoint_in_flight_ = false;
  };
  auto stage = [resp](const std::string& name, absl::Duration d) {
    v1::Stage* st = resp->add_stages();
    st->set_name(name);
    *st->mutable_duration() = ToProto(d);
  };
  stage("checkpoint.sentry_call", absl::Now() - begin);
  if (!r.ok()) {
    absl::MutexLock l(&mu_);
    checkpoint_path_.clear();
    checkpoint_.Clear();  // an end meanwhile was not this checkpoint's
    return absl::Status(r.status().code(), absl::StrCat("sandbox ", id_, ": checkpoint: ",
                                                        r.status().message()));
  }
  for (const control::StageTiming& t : r->timings()) {
    const std::string& n = t.name();
    stage(absl::StrCat("checkpoint.sentry.", n.substr(n.rfind('.') + 1)),
          absl::Nanoseconds(t.nanos()));
  }
  const control::Checkpointed& done = r->checkpointed();
  resp->set_state_bytes(done.state_bytes());
  resp->set_pages(done.pages());
  resp->set_memory_bytes(done.memory_bytes());
  resp->set_image_bytes(resp->image_bytes() + done.state_bytes() + done.pages_bytes());
  // In the sandbox's Timings too, after its create's steps.
  {
    absl::MutexLock l(&mu_);
    for (const v1::Stage& st : resp->stages()) *timings_.add_stages() = st;
    if (leave_running) return absl::OkStatus();
    checkpoint_.set_image_dir(path);
    checkpoint_.set_image_bytes(resp->image_bytes());
    if (!checkpoint_.has_time()) *checkpoint_.mutable_time() = ToProto(absl::Now());
  }
  SaveRecord();
  return absl::OkStatus();
}

namespace {

v1::RestoreProgress ToProgress(const control::RestorePageStats& st) {
  v1::RestoreProgress p;
  p.set_bytes_total(st.bytes_total());
  p.set_bytes_loaded(st.bytes_loaded());
  p.set_pages_loaded(st.pages_loaded());
  p.set_bytes_failed(st.bytes_failed());
  p.set_waits(st.waits());
  p.set_waiting(static_cast<uint32_t>(st.waiting()));
  *p.mutable_wait_total() = ToProto(absl::Nanoseconds(st.wait_nanos_total()));
  *p.mutable_load() = ToProto(absl::Nanoseconds(st.load_nanos()));
  p.set_done(st.done());
  return p;
}

}  // namespace

void Sandbox::NoteRestorePages(const control::RestorePageStats& st) {
  absl::MutexLock l(&mu_);
  NoteRestorePagesLocked(st);
}

void Sandbox::NoteRestorePagesLocked(const control::RestorePageStats& st) {
  if (destroyed_) return;
  // Reports can cross (a Get's and the poll's): keep the latest figures.
  const bool stale = have_restore_ && (st.bytes_loaded() + st.bytes_failed() <
                                           restore_.bytes_loaded() + restore_.bytes_failed() ||
                                       (restore_.done() && !st.done()));
  if (!stale) {
    restore_ = ToProgress(st);
    have_restore_ = true;
  }
  if (metrics_ != nullptr) metrics_->SetRestorePages(id_, st);
}

absl::StatusOr<v1::RestoreProgress> Sandbox::AwaitRestored(
    absl::Time deadline, const std::function<bool()>& cancelled) {
  auto check = [this]() -> absl::Status {
    absl::MutexLock l(&mu_);
    if (!RestoredLocked()) {
      return absl::FailedPreconditionError(
          absl::StrCat("sandbox ", id_, " was not restored from an image"));
    }
    if (state_ != v1::SANDBOX_STATE_RUNNING || destroyed_) {
      if (!restore_error_.ok()) return restore_error_;  // the Sentry's word, kept
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id_, " is ", StateWord(state_), ", not running",
          have_restore_ && restore_.done() ? "" : " (it ended before its pages were loaded)"));
    }
    return absl::OkStatus();
  };
  // The Sentry answers when the load is done; the call is asked again
  // every few seconds so that a caller that went away, a deadline and the
  // sandbox's end are noticed (an unanswered call's reply is dropped).
  for (;;) {
    RETURN_IF_ERROR(check());
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("sandbox ", id_, ": its pages are still loading"));
    }
    if (cancelled && cancelled()) return absl::CancelledError("wait cancelled");
    control::Request req;
    req.mutable_wait_restored();
    absl::StatusOr<control::Response> r = sentry_->process().Call(
        req, {}, std::min(deadline - now, absl::Seconds(5)));
    if (r.ok()) {
      if (!r->has_restore_pages()) return v1::RestoreProgress();
      NoteRestorePages(r->restore_pages());
      return ToProgress(r->restore_pages());
    }
    if (absl::IsDeadlineExceeded(r.status())) continue;
    // The load's error (the Sentry's answer, even when the program has
    // died of it since), or the Sentry's end (the check says so once the
    // sandbox has left RUNNING).
    if (sentry_->process().exited()) RETURN_IF_ERROR(check());
    return absl::Status(r.status().code(), absl::StrCat("sandbox ", id_, ": ",
                                                        r.status().message()));
  }
}

v1::ExitStatus Sandbox::Destroy() {
  bool started;
  {
    absl::MutexLock l(&mu_);
    if (destroyed_) return exit_;
    // A paused Sentry would not answer.
    started = state_ != v1::SANDBOX_STATE_CREATED && state_ != v1::SANDBOX_STATE_PAUSED;
  }
  // The last word on unimplemented syscalls, while the Sentry still answers.
  if (started) CollectMetrics();
  {
    absl::MutexLock l(&mu_);
    destroyed_ = true;
  }
  SentryProcess& p = sentry_->process();
  p.ExpectExit();
  v1::ExitStatus killed;
  killed.set_signal(SIGKILL);
  if (!p.exited()) KillOnHost();
  StopNetwork();
  if (waiter_.joinable()) waiter_.join();  // its Wait ends with the Sentry
  if (checkpoint_watcher_.joinable()) checkpoint_watcher_.join();  // likewise
  std::map<int, std::shared_ptr<ExecProcess>> execs;
  {
    absl::MutexLock l(&mu_);
    execs.swap(execs_);
  }
  for (auto& [pid, e] : execs) {
    if (e->waiter.joinable()) e->waiter.join();  // their WaitPids too
    e->relay->Stop();
  }
  Finish(killed, v1::SANDBOX_STATE_STOPPED);  // unless it had ended already
  init_relay_->Stop();
  v1::ExitStatus exit;
  {
    absl::MutexLock l(&mu_);
    rootfs_.reset();
    init_stdio_.theirs.clear();
    exit = exit_;
  }
  if (metrics_ != nullptr) metrics_->RemoveSandbox(id_);
  if (state_dir_ != nullptr) {
    absl::MutexLock save(&save_mu_);  // after a SaveRecord in flight
    state_dir_->RemoveSandbox(id_);
  }
  return exit;
}

v1::SandboxInfo Sandbox::Info(bool live) {
  v1::SandboxInfo info;
  info.set_id(id_);
  info.add_sentry_pids(sentry_->process().pid());
  const control::Hello& hello = sentry_->process().hello();
  if (hello.sentry_pid() != 0 && hello.sentry_pid() != sentry_->process().pid()) {
    info.add_sentry_pids(hello.sentry_pid());
  }
  bool running;
  {
    absl::MutexLock l(&mu_);
    info.set_state(state_);
    *info.mutable_spec() = spec_;
    *info.mutable_timings() = timings_;
    for (const v1::SelfCheckpoint& c : self_checkpoints_) *info.add_self_checkpoints() = c;
    if (state_ == v1::SANDBOX_STATE_STOPPED || state_ == v1::SANDBOX_STATE_FAILED) {
      *info.mutable_exit() = exit_;
    }
    if (checkpoint_.has_time()) *info.mutable_checkpoint() = checkpoint_;
    if (have_restore_) *info.mutable_restore() = restore_;
    running = state_ == v1::SANDBOX_STATE_RUNNING && !destroyed_;
    std::vector<std::pair<absl::Time, ExecProcess*>> execs;
    for (auto& [pid, e] : execs_) execs.emplace_back(e->started, e.get());
    std::sort(execs.begin(), execs.end());
    for (auto& [t, e] : execs) *info.add_execs() = e->Info();
  }
  v1::ResourceUsage* u = info.mutable_usage();
  if (Cgroup* cg = sentry_->cgroup()) {
    absl::StatusOr<CgroupUsage> cu = cg->Usage();
    if (cu.ok()) {
      u->set_memory_bytes(cu->memory_bytes);
      u->set_memory_peak_bytes(cu->memory_peak_bytes);
      *u->mutable_cpu_user() = ToProto(cu->cpu_user);
      *u->mutable_cpu_system() = ToProto(cu->cpu_system);
      u->set_pids(cu->pids);
    }
  }
  if (live && running) {
    control::Request req;
    req.mutable_stats();
    absl::StatusOr<control::Response> r =
        sentry_->process().Call(req, {}, absl::Seconds(2));
    if (r.ok()) {
      const control::SentryStats& st = r->stats();
      for (int pid : st.pids()) info.add_pids(pid);
      // Without a cgroup, the Sentry's own accounting is what there is.
      if (sentry_->cgroup() == nullptr) {
        u->set_memory_bytes(st.memory_bytes());
        *u->mutable_cpu_user() = ToProto(absl::Nanoseconds(st.cpu_user_nanos()));
        *u->mutable_cpu_system() = ToProto(absl::Nanoseconds(st.cpu_system_nanos()));
        u->set_pids(st.tasks());
      }
      if (st.has_restore_pages()) {
        NoteRestorePages(st.restore_pages());
        *info.mutable_restore() = ToProgress(st.restore_pages());
      }
    }
  }
  return info;
}

void Sandbox::CollectMetrics() {
  if (metrics_ == nullptr) return;
  if (sentry_->process().exited()) return;
  control::Request req;
  req.mutable_stats();
  absl::StatusOr<control::Response> r = sentry_->process().Call(req, {}, absl::Seconds(2));
  if (r.ok()) {
    absl::MutexLock l(&mu_);
    for (const auto& [nr, count] : r->stats().unimplemented_syscalls()) {
      uint64_t& seen = unimplemented_seen_[nr];
      if (count > seen) metrics_->AddUnimplemented(static_cast<int>(nr), count - seen);
      seen = count;
    }
  }
  uint64_t mem = 0;
  double cpu = 0;
  if (Cgroup* cg = sentry_->cgroup()) {
    absl::StatusOr<CgroupUsage> cu = cg->Usage();
    if (cu.ok()) {
      mem = cu->memory_bytes;
      cpu = absl::ToDoubleSeconds(cu->cpu_user + cu->cpu_system);
    }
  } else if (r.ok()) {
    mem = r->stats().memory_bytes();
    cpu = (r->stats().cpu_user_nanos() + r->stats().cpu_system_nanos()) / 1e9;
  }
  absl::MutexLock l(&mu_);
  if (destroyed_) return;
  metrics_->SetSandboxUsage(id_, mem, cpu);
  if (r.ok()) metrics_->SetSentryStats(id_, r->stats());
  if (r.ok() && r->stats().has_restore_pages()) NoteRestorePagesLocked(r->stats().restore_pages());
}

}  // namespace daemon
}  // namespace sandboxd
