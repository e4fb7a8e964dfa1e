#include "daemon/service.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <algorithm>
#include <random>
#include <tuple>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "base/version.h"
#include "daemon/adopt.h"
#include "daemon/log.h"
#include "sentry/socket/sandbox_net.h"
#include "daemon/sentry_kind.h"
#include "google/protobuf/util/time_util.h"
#include "sentry/state/state.pb.h"

namespace sandboxd {
namespace daemon {
namespace {

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) {
      return false;
    }
  }
  return true;
}

std::string NewId() {
  ABSL_CONST_INIT static absl::Mutex mu(absl::kConstInit);
  static std::mt19937_64 rng ABSL_GUARDED_BY(mu){std::random_device{}()};
  absl::MutexLock l(&mu);
  return absl::StrCat(absl::Hex(rng() & 0xffffffffffffULL, absl::kZeroPad12));
}

using google::protobuf::util::TimeUtil;

// Checkpoint's image_dir: made when missing (not its parents), refused
// unless empty, opened O_PATH for the Sentry (whose root is empty).
absl::StatusOr<UniqueFd> OpenEmptyImageDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("image_dir: creating ", path), errno);
  }
  UniqueFd dir(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
  if (!dir.valid()) return ErrnoStatus(absl::StrCat("image_dir: ", path), errno);
  DIR* d = fdopendir(dup(dir.get()));
  if (d == nullptr) return ErrnoStatus(absl::StrCat("image_dir: ", path), errno);
  std::string first;
  while (dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      first = e->d_name;
      break;
    }
  }
  closedir(d);
  if (!first.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "image_dir: ", path, " is not empty (it holds ", first,
        "): a checkpoint goes into an empty or new directory"));
  }
  return dir;
}

// The spec an image's manifest.pb recorded (empty when it recorded none:
// `sentry run`'s). Only read here: the Sentry checks the whole image
// against the manifest's checksums before it loads anything.
absl::StatusOr<v1::SandboxSpec> ReadImageSpec(int dir, const std::string& path) {
  const std::string mpath = absl::StrCat(path, "/manifest.pb");
  UniqueFd fd(openat(dir, "manifest.pb", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::NotFoundError(absl::StrCat(mpath, ": cannot be read (", strerror(errno),
                                            "): not a checkpoint image"));
  }
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StrCat("reading ", mpath), errno);
    if (n == 0) break;
    data.append(buf, n);
    if (data.size() > (16 << 20)) {
      return absl::DataLossError(absl::StrCat(mpath, ": larger than 16 MiB"));
    }
  }
  // sentry/state/image.h: magic, version, CRC-32C, payload length.
  constexpr size_t kHeader = 24;
  uint64_t len = 0;
  if (data.size() >= kHeader) memcpy(&len, data.data() + 16, 8);
  if (data.size() < kHeader || data.compare(0, 8, "SBXMANIF") != 0) {
    return absl::DataLossError(absl::StrCat(mpath, ": not a manifest (bad magic)"));
  }
  if (len != data.size() - kHeader) {
    return absl::DataLossError(absl::StrCat(mpath, ": payload is ", data.size() - kHeader,
                                            " bytes, header says ", len, " (truncated?)"));
  }
  state::v1::Manifest m;
  if (!m.ParseFromArray(data.data() + kHeader, static_cast<int>(len))) {
    return absl::DataLossError(absl::StrCat(mpath, ": malformed Manifest"));
  }
  v1::SandboxSpec spec;
  if (!spec.ParseFromString(m.spec())) {
    return absl::DataLossError(absl::StrCat(mpath, ": spec: malformed SandboxSpec"));
  }
  return spec;
}

absl::Status CheckId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("id: must not be empty");
  return absl::OkStatus();
}

// Shared by Exec's two ends: the stream may be read by one thread and
// written by another, but each side by one thread only.
void WriteChunks(grpc::ServerReaderWriter<v1::ExecResponse, v1::ExecRequest>* stream,
                 std::vector<OutputChunk>& chunks, bool* ok) {
  for (OutputChunk& c : chunks) {
    v1::ExecResponse r;
    if (c.stream == OutputStream::kStdout) {
      r.set_stdout(std::move(c.data));
    } else {
      r.set_stderr(std::move(c.data));
    }
    if (*ok && !stream->Write(r)) *ok = false;
  }
}

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

Service::Service(ServiceOptions options, Pool* pool, Metrics* metrics, bool have_cgroups)
    : options_(std::move(options)), pool_(pool), metrics_(metrics), have_cgroups_(have_cgroups) {
  if (metrics_ != nullptr) {
    UpdateStateMetrics();
    metrics_thread_ = std::thread([this] { MetricsLoop(); });
  }
  reaper_ = std::thread([this] { ReapLoop(); });
}

Service::~Service() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  if (metrics_thread_.joinable()) metrics_thread_.join();
  reaper_.join();  // after the removed sandboxes are destroyed
  DestroyAll();
}

void Service::Remove(const std::shared_ptr<Sandbox>& sandbox) {
  {
    absl::MutexLock l(&mu_);
    auto it = sandboxes_.find(sandbox->id());
    if (it == sandboxes_.end() || it->second != sandbox) return;  // Destroy had it
    sandboxes_.erase(it);
    doomed_.push_back(sandbox);
  }
  UpdateStateMetrics();
}

void Service::ReapLoop() {
  for (;;) {
    std::vector<std::shared_ptr<Sandbox>> batch;
    {
      absl::MutexLock l(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !doomed_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (doomed_.empty()) return;  // stopping, and nothing left
      batch.swap(doomed_);
    }
    for (std::shared_ptr<Sandbox>& s : batch) s->Destroy();
  }
}

void Service::DestroyAll() {
  std::map<std::string, std::shared_ptr<Sandbox>> all;
  {
    absl::MutexLock l(&mu_);
    for (auto it = sandboxes_.begin(); it != sandboxes_.end();) {
      if (it->second != nullptr) {
        all.insert(*it);
        it = sandboxes_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [id, s] : all) s->Destroy();
  all.clear();
  UpdateStateMetrics();
}

void Service::Readopt(SentryFactory* factory, CgroupManager* cgroups) {
  if (options_.state_dir == nullptr) return;
  AdoptOptions ao;
  ao.state_dir = options_.state_dir;
  ao.factory = factory;
  ao.cgroups = cgroups;
  ao.metrics = metrics_;
  ao.on_state_change = [this] { UpdateStateMetrics(); };
  for (std::shared_ptr<Sandbox>& s : AdoptSandboxes(ao)) {
    absl::MutexLock l(&mu_);
    sandboxes_[s->id()] = std::move(s);
  }
  UpdateStateMetrics();
}

void Service::MetricsLoop() {
  for (;;) {
    std::vector<std::shared_ptr<Sandbox>> running;
    {
      absl::MutexLock l(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), options_.metrics_interval)) return;
      for (auto& [id, s] : sandboxes_) {
        if (s != nullptr) running.push_back(s);
      }
    }
    for (auto& s : running) {
      if (s->state() == v1::SANDBOX_STATE_RUNNING) s->CollectMetrics();
    }
  }
}

void Service::UpdateStateMetrics() {
  if (metrics_ == nullptr) return;
  std::map<v1::SandboxState, int64_t> counts;
  {
    absl::MutexLock l(&mu_);
    for (auto& [id, s] : sandboxes_) {
      if (s != nullptr) counts[s->state()]++;
    }
  }
  const std::pair<v1::SandboxState, const char*> names[] = {
      {v1::SANDBOX_STATE_CREATED, "created"}, {v1::SANDBOX_STATE_RUNNING, "running"},
      {v1::SANDBOX_STATE_PAUSED, "paused"},   {v1::SANDBOX_STATE_STOPPED, "stopped"},
      {v1::SANDBOX_STATE_FAILED, "failed"}};
  for (const auto& [state, name] : names) metrics_->SetSandboxes(name, counts[state]);
}

absl::StatusOr<std::shared_ptr<Sandbox>> Service::Find(const std::string& id) {
  RETURN_IF_ERROR(CheckId(id));
  absl::MutexLock l(&mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second == nullptr) {
    return absl::NotFoundError(absl::StrCat("no sandbox with id \"", id, "\""));
  }
  return it->second;
}

absl::Status Service::CreateSandbox(
    const v1::CreateRequest& req, v1::CreateResponse* resp, UniqueFd image,
    const std::string& image_path,
    std::vector<std::pair<std::string, absl::Duration>> restore_stages) {
  const absl::Time begin = absl::Now();
  // Each step of Create, named and timed (Timings.stages).
  std::vector<std::pair<Stage, absl::Duration>> stages;
  absl::Time step = begin;
  auto stage = [&](Stage s) {
    const absl::Time now = absl::Now();
    stages.emplace_back(s, now - step);
    step = now;
  };
  v1::SandboxSpec spec = req.spec();
  // Validation first, field by field.
  RETURN_IF_ERROR(ValidateProcessSpec(spec.process(), "spec.process"));
  if (spec.platform().empty()) {
    spec.set_platform(platform::Registry::Get().DefaultName());
  }
  if (options_.platforms.count(spec.platform()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.platform: unknown or unavailable platform \"", spec.platform(),
                     "\" (this daemon offers: ", absl::StrJoin(options_.platforms, ", "), ")"));
  }
  ASSIGN_OR_RETURN(const SentryKind kind,
                   KindForSpec(spec, options_.systrap_patch));
  if (!v1::NetworkMode_IsValid(spec.network())) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.network: unknown network mode ", spec.network()));
  }
  // Published ports need a namespace of the sandbox's own that the host
  // reaches: they imply SANDBOX (as docker's default bridge) and are
  // refused with NONE or HOST.
  if (spec.ports_size() > 0 && spec.network() == v1::NETWORK_MODE_UNSPECIFIED) {
    spec.set_network(v1::NETWORK_MODE_SANDBOX);
  }
  if (spec.ports_size() > 0 && spec.network() != v1::NETWORK_MODE_SANDBOX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.ports: publishing needs the sandbox network mode, not ",
        absl::AsciiStrToLower(
            absl::StripPrefix(v1::NetworkMode_Name(spec.network()), "NETWORK_MODE_"))));
  }
  const sandbox_net::Ports ports(spec.ports().begin(), spec.ports().end());
  RETURN_IF_ERROR(Annotate(sandbox_net::CheckPortsFree(ports), "spec.ports"));
  const v1::Limits& lim = spec.limits();
  RETURN_IF_ERROR(ValidateLimits(lim, options_.policy.ranges, "spec.limits"));
  if (!have_cgroups_ && (lim.memory_bytes() || lim.cpu_millis() || lim.pids())) {
    return absl::FailedPreconditionError(
        "spec.limits: this daemon runs without cgroups, so it cannot enforce limits");
  }
  if (have_cgroups_) ApplyDefaultLimits(options_.policy, spec.mutable_limits());
  RETURN_IF_ERROR(ValidateLabels(spec));
  if (!req.id().empty() && !ValidId(req.id())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id: want 1 to 64 of [a-zA-Z0-9_.-], got \"", req.id(), "\""));
  }
  stage(Stage::kCreateValidate);
  // The daemon's image unless the spec names a (permitted) host directory.
  ASSIGN_OR_RETURN(UniqueFd rootfs, OpenRootfs(options_.policy, &spec));
  // A fresh sandbox's overlay is empty: what its init needs of the rootfs
  // is known now (a restore's processes are in its image).
  if (!image.valid()) {
    RETURN_IF_ERROR(CheckProcessInRootfs(rootfs.get(), spec.process(), "spec.process"));
  }
  ASSIGN_OR_RETURN(UniqueFd checkpoint_dir, OpenCheckpointDir(options_.policy, spec));
  ASSIGN_OR_RETURN(std::vector<UniqueFd> binds, OpenBindMounts(options_.policy, spec));
  ASSIGN_OR_RETURN(const UniqueFd netns, OpenNetworkNamespace(spec));
  stage(Stage::kCreateOpenRootfs);

  // Reserve the id (a null entry), within the limit.
  std::string id = req.id();
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return absl::UnavailableError("sandboxd is shutting down");
    if (static_cast<int>(sandboxes_.size()) >= options_.max_sandboxes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this daemon already holds ", sandboxes_.size(),
          " sandboxes (--max-sandboxes=", options_.max_sandboxes, "); destroy some first"));
    }
    if (id.empty()) {
      do {
        id = NewId();
      } while (sandboxes_.count(id));
    } else if (sandboxes_.count(id)) {
      return absl::AlreadyExistsError(absl::StrCat("a sandbox with id \"", id, "\" exists"));
    }
    sandboxes_[id] = nullptr;
  }
  auto unreserve = absl::MakeCleanup([this, &id] {
    absl::MutexLock l(&mu_);
    auto it = sandboxes_.find(id);
    if (it != sandboxes_.end() && it->second == nullptr) sandboxes_.erase(it);
  });

  bool hit = false;
  absl::StatusOr<std::unique_ptr<WarmSentry>> warm =
      netns.valid() ? pool_->SpawnIn(kind.Key(), netns.get()) : pool_->Take(kind.Key(), &hit);
  if (!warm.ok()) return Annotate(warm.status(), "create");
  stage(hit ? Stage::kCreatePoolTake : Stage::kCreateSpawnSentry);
  if (Cgroup* cg = (*warm)->cgroup()) {
    CgroupLimits cl;
    cl.memory_bytes = spec.limits().memory_bytes();
    cl.cpu_millis = spec.limits().cpu_millis();
    // The Sentry enforces spec.limits().pids itself; the host's limit
    // leaves room for its own threads and stubs.
    cl.pids = HostPidsFor(spec.limits().pids());
    RETURN_IF_ERROR(Annotate(cg->SetLimits(cl), "spec.limits"));
    stage(Stage::kCreateCgroupLimits);
  }
  Sandbox::Options o;
  if (spec.network() == v1::NETWORK_MODE_SANDBOX) {
    // The Sentry's own namespace (every warm Sentry but a hostnet one has
    // one) gets its address, route and ports now.
    ASSIGN_OR_RETURN(o.network, Annotate(sandbox_net::Pasta::StartForPid(
                                             (*warm)->process().pid(), ports),
                                         "spec.network"));
    stage(Stage::kCreateNetwork);
  }
  o.id = id;
  o.spec = spec;
  o.sentry = std::move(*warm);
  o.rootfs = std::move(rootfs);
  o.checkpoint_dir = std::move(checkpoint_dir);
  o.binds = std::move(binds);
  o.pool_hit = hit;
  o.created = begin;
  o.stages = std::move(stages);
  o.image = std::move(image);
  o.image_path = image_path;
  o.restore_rate = options_.restore_rate;
  o.restore_stages = std::move(restore_stages);
  o.metrics = metrics_;
  o.state_dir = options_.state_dir;
  o.on_state_change = [this] { UpdateStateMetrics(); };
  const absl::Time before_stdio = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sandbox, Sandbox::Create(std::move(o)));
  sandbox->AddStage(Stage::kCreateStdio, absl::Now() - before_stdio);
  const absl::Duration latency = absl::Now() - begin;
  sandbox->SetCreateLatency(latency);
  {
    absl::MutexLock l(&mu_);
    sandboxes_[id] = sandbox;
  }
  if (metrics_ != nullptr && image_path.empty()) {
    metrics_->ObserveCreate(hit, spec.platform(), latency);
  }
  UpdateStateMetrics();
  resp->set_id(id);
  *resp->mutable_info() = sandbox->Info(false);
  return absl::OkStatus();
}

grpc::Status Service::Create(grpc::ServerContext* ctx, const v1::CreateRequest* req,
                             v1::CreateResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  return ToGrpc(CreateSandbox(*req, resp));
}

grpc::Status Service::Start(grpc::ServerContext* ctx, const v1::StartRequest* req,
                            v1::StartResponse*) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  absl::StatusOr<std::shared_ptr<Sandbox>> s = Find(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  return ToGrpc((*s)->Start());
}

grpc::Status Service::Exec(grpc::ServerContext* ctx,
                           grpc::ServerReaderWriter<v1::ExecResponse, v1::ExecRequest>* stream) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  return ToGrpc(ExecStream(ctx, stream));
}

absl::Status Service::ExecStream(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::ExecResponse, v1::ExecRequest>* stream) {
  const absl::Time entered = absl::Now();
  v1::ExecRequest first;
  if (!stream->Read(&first)) return absl::InvalidArgumentError("start: no first message");
  if (!first.has_start()) {
    return absl::InvalidArgumentError("start: the first message must carry start");
  }
  const absl::Time read_start = absl::Now();
  const v1::ExecRequest::Start& start = first.start();
  const bool attach = start.target_case() == v1::ExecRequest::Start::kAttach && start.attach();
  // Start.create: Create and attach in one call.
  std::string id = start.id();
  if (start.has_create()) {
    if (!attach) return absl::InvalidArgumentError("start.create: only with attach=true");
    v1::CreateResponse created;
    RETURN_IF_ERROR(CreateSandbox(start.create(), &created));
    id = created.id();
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sandbox, Find(id));

  // Start.remove, once this call has taken the init's stdio: the sandbox
  // goes however the call ends.
  bool remove = false;
  auto removal = absl::MakeCleanup([&] {
    if (remove) Remove(sandbox);
  });

  ProcessRelay* relay = nullptr;
  std::shared_ptr<ExecProcess> exec;  // an Exec'd process: the sandbox's
  int pid = 0;
  // Pinned on the process's output before it starts (not for an attach
  // to a running init: it reads from now on, unpinned).
  uint64_t cursor = 0;
  bool pinned = true;
  // An attach to a running init (docker attach) leaves its stdin open
  // when the call ends.
  bool follow = false;
  if (attach && !start.has_create() &&
      sandbox->state() == v1::SANDBOX_STATE_RUNNING) {
    if (start.remove()) {
      // Refused, and the sandbox left alone, as any refused attach.
      return absl::FailedPreconditionError(absl::StrCat(
          "sandbox ", id, " is running: start.remove is only for an attach that starts it"));
    }
    ASSIGN_OR_RETURN(relay, sandbox->AttachRunning(&cursor));
    pid = 1;
    pinned = false;
    follow = true;
  } else if (attach) {
    bool attached = false;
    absl::StatusOr<ProcessRelay*> r = sandbox->AttachAndStart(&cursor, start.size(), &attached);
    remove = attached && start.remove();
    // A restore whose image the Sentry refused leaves nothing behind, as
    // Restore without attach does (the sandbox never ran).
    if (!r.ok() && attached && sandbox->restored()) remove = true;
    RETURN_IF_ERROR(r.status());
    relay = *r;
    pid = 1;
  } else if (start.target_case() == v1::ExecRequest::Start::kProcess) {
    RETURN_IF_ERROR(ValidateProcessSpec(start.process(), "start.process"));
    ASSIGN_OR_RETURN(exec, sandbox->StartExec(start.process(), &cursor, start.size()));
    relay = exec->relay.get();
    pid = exec->pid;
  } else {
    return absl::InvalidArgumentError("start: want process or attach=true");
  }
  const absl::Time started = absl::Now();

  // How the process ends: the init's through the sandbox, as an Exec'd
  // one's (whose waiter is the sandbox's: it outlives this call).
  v1::ExitStatus exit;
  auto cleanup = absl::MakeCleanup([&] {
    if (pinned) relay->log().Unpin();
  });

  bool ok = true;
  {
    v1::ExecResponse r;
    r.set_pid(pid);
    if (start.has_create()) r.set_id(id);
    ok = stream->Write(r);
  }
  const absl::Time pid_sent = absl::Now();

  // Client messages: stdin, resizes, close_stdin. Ends when the client
  // half-closes or the call ends.
  absl::Notification input_done;
  std::thread input([&] {
    v1::ExecRequest m;
    bool closed = false;
    while (stream->Read(&m)) {
      if (m.has_resize()) {
        if (relay->Resize(m.resize().rows(), m.resize().cols()).ok()) {
          // The process's terminal is inside the sandbox (a restored
          // sandbox's console reads the size from the daemon's pty itself).
          (void)sandbox->ResizeTerminal(pid, m.resize().rows(), m.resize().cols());
        }
      } else if (m.msg_case() == v1::ExecRequest::kStdin && !closed) {
        (void)relay->WriteStdin(m.stdin());
      } else if (m.msg_case() == v1::ExecRequest::kCloseStdin && m.close_stdin()) {
        if (exec != nullptr) {
          relay->CloseStdin();
        } else {
          sandbox->CloseInitStdin();
        }
        closed = true;
      }
    }
    // A client that goes away leaves the program with stdin at its end
    // (a followed init keeps its stdin for the next attach).
    if (exec != nullptr) {
      relay->CloseStdin();
    } else if (!follow && !closed) {
      sandbox->CloseInitStdin();
    }
    input_done.Notify();
  });

  // Output until it ends (or the client is gone: the program goes on).
  for (;;) {
    OutputLog::ReadResult r = relay->log().Read(&cursor, absl::Milliseconds(200));
    WriteChunks(stream, r.chunks, &ok);
    if (r.eof || !ok || ctx->IsCancelled()) break;
  }
  const absl::Time output_end = absl::Now();
  if (pinned) relay->log().Unpin();
  pinned = false;
  {
    auto cancelled = [ctx] { return ctx->IsCancelled(); };
    absl::StatusOr<v1::ExitStatus> e =
        exec != nullptr ? sandbox->AwaitExec(pid, absl::InfiniteFuture(), cancelled)
                        : sandbox->AwaitExit(absl::InfiniteFuture(), cancelled);
    if (e.ok()) exit = *e;
  }
  const absl::Time have_exit = absl::Now();
  if (ok && !ctx->IsCancelled()) {
    v1::ExecResponse r;
    *r.mutable_exit() = exit;
    if (attach && !follow) {
      // Where the call's time went besides the start and the program's
      // run (which Timings has already): the exit's way back is
      // Sentry -> daemon (the exited timestamp) -> end of output -> here.
      sandbox->AddStage(Stage::kAttachFirstMessage, read_start - entered);
      sandbox->AddStage(Stage::kAttachPidSent, pid_sent - started);
      v1::Timings t = sandbox->timings();
      if (t.has_exited()) {
        const absl::Time exited = absl::FromUnixNanos(
            google::protobuf::util::TimeUtil::TimestampToNanoseconds(t.exited()));
        sandbox->AddStage(Stage::kExitOutputEndAfterExited,
                          std::max(absl::ZeroDuration(), output_end - exited));
      }
      sandbox->AddStage(Stage::kExitStatusAfterOutputEnd, have_exit - output_end);
      *r.mutable_timings() = sandbox->timings();
    }
    if (remove) {
      // Out of List before the client hears of the exit.
      Remove(sandbox);
      remove = false;
      r.set_removed(true);
    }
    if (input_done.HasBeenNotified()) {
      // The client has half-closed: the exit goes out with the call's
      // status, in one write, and the call is over.
      stream->WriteLast(r, grpc::WriteOptions());
    } else {
      ok = stream->Write(r);
    }
  }
  // The client half-closes once it has nothing more to send (at the
  // latest once it has the exit status); one that does not is cut off.
  if (!input_done.WaitForNotificationWithTimeout(absl::Seconds(1))) ctx->TryCancel();
  input.join();
  return absl::OkStatus();
}

grpc::Status Service::Wait(grpc::ServerContext* ctx, const v1::WaitRequest* req,
                           v1::WaitResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  absl::StatusOr<std::shared_ptr<Sandbox>> s = Find(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  const auto deadline = ctx->deadline();
  absl::Time until = absl::InfiniteFuture();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    until = absl::FromChrono(deadline);
  }
  if (req->restored()) {
    absl::StatusOr<v1::RestoreProgress> p =
        (*s)->AwaitRestored(until, [ctx] { return ctx->IsCancelled(); });
    if (!p.ok()) return ToGrpc(p.status());
    *resp->mutable_restore() = *p;
    return grpc::Status::OK;
  }
  auto cancelled = [ctx] { return ctx->IsCancelled(); };
  absl::StatusOr<v1::ExitStatus> e = req->pid() != 0
                                         ? (*s)->AwaitExec(req->pid(), until, cancelled)
                                         : (*s)->AwaitExit(until, cancelled);
  if (!e.ok()) return ToGrpc(e.status());
  *resp->mutable_exit() = *e;
  return grpc::Status::OK;
}

grpc::Status Service::Signal(grpc::ServerContext* ctx, const v1::SignalRequest* req,
                             v1::SignalResponse*) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  if (req->signal() < 1 || req->signal() > 64) {
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat("signal: want a Linux signal number (1-64), got ", req->signal())));
  }
  if (req->pid() < 0 || (req->pid() != 0 && req->all())) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
        "pid: want a process of the sandbox (> 0, and not with all), got ", req->pid())));
  }
  absl::StatusOr<std::shared_ptr<Sandbox>> s = Find(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  return ToGrpc((*s)->Signal(req->signal(), req->all(), req->pid()));
}

grpc::Status Service::Update(grpc::ServerContext* ctx, const v1::UpdateRequest* req,
                             v1::UpdateResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  v1::Limits lim = req->limits();
  v1::LimitsLifted lifted = req->unlimited();
  for (const auto& [given, name, lift] :
       {std::tuple(lim.memory_bytes() != 0, "memory_bytes", lifted.memory()),
        std::tuple(lim.cpu_millis() != 0, "cpu_millis", lifted.cpu()),
        std::tuple(lim.pids() != 0, "pids", lifted.pids())}) {
    if (given && lift) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "limits.", name, ": both a limit and unlimited (lift it or set it, not both)")));
    }
  }
  if (!lim.memory_bytes() && !lim.cpu_millis() && !lim.pids() && !lifted.memory() &&
      !lifted.cpu() && !lifted.pids()) {
    return ToGrpc(absl::InvalidArgumentError(
        "limits: nothing to change (memory_bytes, cpu_millis and pids are all 0, none "
        "lifted)"));
  }
  if (absl::Status s = ValidateLimits(lim, options_.policy.ranges, "limits"); !s.ok()) {
    return ToGrpc(s);
  }
  // A lifted limit is what a Create without it gets: the daemon's default
  // when it has one (with cgroups), else none.
  if (have_cgroups_) {
    v1::Limits defaults;
    ApplyDefaultLimits(options_.policy, &defaults);
    if (lifted.memory() && defaults.memory_bytes()) {
      lim.set_memory_bytes(defaults.memory_bytes());
      lifted.set_memory(false);
    }
    if (lifted.cpu() && defaults.cpu_millis()) {
      lim.set_cpu_millis(defaults.cpu_millis());
      lifted.set_cpu(false);
    }
    if (lifted.pids() && defaults.pids()) {
      lim.set_pids(defaults.pids());
      lifted.set_pids(false);
    }
  }
  absl::StatusOr<std::shared_ptr<Sandbox>> s = Find(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  absl::StatusOr<v1::Limits> now = (*s)->Update(lim, lifted);
  if (!now.ok()) return ToGrpc(now.status());
  *resp->mutable_limits() = *std::move(now);
  return grpc::Status::OK;
}

grpc::Status Service::Pause(grpc::ServerContext* ctx, const v1::PauseRequest* req,
                            v1::PauseResponse*) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  absl::StatusOr<std::shared_ptr<Sandbox>> s = Find(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  return ToGrpc((*s)->Pause());
}

grpc::Status Service::Resume(grpc::ServerContext* ctx, const v1::ResumeRequest* req,
                             v1::ResumeResponse*) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  absl::StatusOr<std::shared_ptr<Sandbox>> s = Find(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  return ToGrpc((*s)->Resume());
}

grpc::Status Service::Checkpoint(grpc::ServerContext* ctx, const v1::CheckpointRequest* req,
                                 v1::CheckpointResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  return ToGrpc(CheckpointSandbox(*req, resp));
}

absl::Status Service::CheckpointSandbox(const v1::CheckpointRequest& req,
                                        v1::CheckpointResponse* resp) {
  const absl::Time begin = absl::Now();
  ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sandbox, Find(req.id()));
  const std::string& path = req.image_dir();
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "image_dir: want an absolute host path, got \"", path, "\""));
  }
  auto observe = absl::MakeCleanup([&] {
    if (metrics_ != nullptr) metrics_->ObserveCheckpoint(false, absl::Now() - begin);
  });
  RETURN_IF_ERROR(CheckCheckpointTarget(options_.policy, "image_dir", path));
  ASSIGN_OR_RETURN(UniqueFd dir, OpenEmptyImageDir(path));
  RETURN_IF_ERROR(CheckCheckpointRoot(options_.policy, dir.get(), "image_dir", path));
  const absl::Duration open = absl::Now() - begin;
  v1::Stage* st = resp->add_stages();
  st->set_name("checkpoint.open_image");
  *st->mutable_duration() = TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(open));
  RETURN_IF_ERROR(sandbox->Checkpoint(dir.get(), path, req.leave_running(), resp));
  const absl::Duration d = absl::Now() - begin;
  *resp->mutable_duration() = TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(d));
  std::move(observe).Cancel();
  if (metrics_ != nullptr) metrics_->ObserveCheckpoint(true, d);
  Log("sandbox ", req.id(), ": checkpointed to ", path, " in ", absl::FormatDuration(d),
      req.leave_running() ? " (left running)" : "");
  UpdateStateMetrics();
  return absl::OkStatus();
}

grpc::Status Service::Restore(grpc::ServerContext* ctx, const v1::RestoreRequest* req,
                              v1::RestoreResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  return ToGrpc(RestoreSandbox(*req, resp));
}

absl::Status Service::RestoreSandbox(const v1::RestoreRequest& req,
                                     v1::RestoreResponse* resp) {
  const absl::Time begin = absl::Now();
  const std::string& path = req.image_dir();
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "image_dir: want an absolute host path, got \"", path, "\""));
  }
  auto observe = absl::MakeCleanup([&] {
    if (metrics_ != nullptr) metrics_->ObserveRestore(false, absl::Now() - begin);
  });
  std::vector<std::pair<std::string, absl::Duration>> stages;
  absl::Time step = begin;
  auto stage = [&](const char* name) {
    const absl::Time now = absl::Now();
    stages.emplace_back(name, now - step);
    step = now;
  };
  UniqueFd dir(open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    return absl::NotFoundError(absl::StrCat("image_dir: ", path, ": ", strerror(errno)));
  }
  stage("restore.open_image");
  ASSIGN_OR_RETURN(v1::SandboxSpec recorded, ReadImageSpec(dir.get(), path));
  stage("restore.read_manifest");
  // The recorded spec, with the request's overrides.
  v1::CreateRequest create;
  create.set_id(req.id());
  v1::SandboxSpec* spec = create.mutable_spec();
  *spec = recorded;
  const v1::SandboxSpec& o = req.spec();
  if (!o.rootfs().empty()) spec->set_rootfs(o.rootfs());
  if (o.process().argv_size() > 0) *spec->mutable_process() = o.process();
  if (o.process().tty()) spec->mutable_process()->set_tty(true);
  v1::Limits* lim = spec->mutable_limits();
  if (o.limits().memory_bytes()) lim->set_memory_bytes(o.limits().memory_bytes());
  if (o.limits().cpu_millis()) lim->set_cpu_millis(o.limits().cpu_millis());
  if (o.limits().pids()) lim->set_pids(o.limits().pids());
  if (!o.platform().empty()) spec->set_platform(o.platform());
  if (!o.hostname().empty()) spec->set_hostname(o.hostname());
  for (const auto& [k, v] : o.labels()) (*spec->mutable_labels())[k] = v;
  if (o.has_systrap()) *spec->mutable_systrap() = o.systrap();
  if (!o.checkpoint_dir().empty()) spec->set_checkpoint_dir(o.checkpoint_dir());
  if (o.checkpoint_limit()) spec->set_checkpoint_limit(o.checkpoint_limit());
  // The network: the recorded mode and published ports (a restored
  // listener is reached where it was), unless the request names a mode or
  // ports: ports given replace the recorded ones (copies of one image,
  // each on host ports of its own), a mode given alone drops them. A
  // recorded port still held on the host (the checkpointed sandbox runs
  // on) fails as at Create, FAILED_PRECONDITION naming it.
  if (o.network() != v1::NETWORK_MODE_UNSPECIFIED || o.ports_size() > 0) {
    spec->set_network(o.network());
    *spec->mutable_ports() = o.ports();
  }
  // The init is not run again, but a spec is checked as Create checks it.
  if (spec->process().argv_size() == 0) spec->mutable_process()->add_argv("(restored)");
  v1::CreateResponse created;
  RETURN_IF_ERROR(
      Annotate(CreateSandbox(create, &created, std::move(dir), path, std::move(stages)),
               "restore"));
  ASSIGN_OR_RETURN(std::shared_ptr<Sandbox> sandbox, Find(created.id()));
  if (!req.attach()) {
    if (absl::Status s = sandbox->Start(); !s.ok()) {
      // The Sentry that refused the image is of no further use; nor is a
      // sandbox that never ran.
      Remove(sandbox);
      return s;
    }
  }
  const absl::Duration d = absl::Now() - begin;
  sandbox->SetRestoreLatency(d);
  std::move(observe).Cancel();
  if (metrics_ != nullptr) metrics_->ObserveRestore(true, d);
  Log("sandbox ", created.id(), ": restored from ", path, " in ", absl::FormatDuration(d));
  UpdateStateMetrics();
  resp->set_id(created.id());
  *resp->mutable_info() = sandbox->Info(false);
  return absl::OkStatus();
}

grpc::Status Service::Destroy(grpc::ServerContext* ctx, const v1::DestroyRequest* req,
                              v1::DestroyResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  if (absl::Status s = CheckId(req->id()); !s.ok()) return ToGrpc(s);
  std::shared_ptr<Sandbox> sandbox;
  {
    absl::MutexLock l(&mu_);
    auto it = sandboxes_.find(req->id());
    if (it == sandboxes_.end() || it->second == nullptr) {
      return ToGrpc(absl::NotFoundError(absl::StrCat("no sandbox with id \"", req->id(), "\"")));
    }
    sandbox = std::move(it->second);
    sandboxes_.erase(it);
  }
  *resp->mutable_exit() = sandbox->Destroy();
  sandbox.reset();
  UpdateStateMetrics();
  return grpc::Status::OK;
}

grpc::Status Service::List(grpc::ServerContext* ctx, const v1::ListRequest* req,
                           v1::ListResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  std::vector<std::shared_ptr<Sandbox>> all;
  {
    absl::MutexLock l(&mu_);
    for (auto& [id, s] : sandboxes_) {
      if (s != nullptr) all.push_back(s);
    }
  }
  for (auto& s : all) {
    v1::SandboxInfo info = s->Info(false);
    bool match = true;
    for (const auto& [k, v] : req->label_selector()) {
      auto it = info.spec().labels().find(k);
      if (it == info.spec().labels().end() || it->second != v) match = false;
    }
    if (match) *resp->add_sandboxes() = std::move(info);
  }
  return grpc::Status::OK;
}

grpc::Status Service::Get(grpc::ServerContext* ctx, const v1::GetRequest* req,
                          v1::GetResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  absl::StatusOr<std::shared_ptr<Sandbox>> s = Find(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  *resp->mutable_info() = (*s)->Info(true);
  return grpc::Status::OK;
}

grpc::Status Service::Capabilities(grpc::ServerContext* ctx, const v1::CapabilitiesRequest*,
                                   v1::CapabilitiesResponse* resp) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  resp->set_exec_create(true);
  resp->set_exec_remove(true);
  resp->set_version(kVersion);
  resp->set_self_checkpoint(true);
  resp->set_update(true);
  resp->set_pause(true);
  resp->set_resume(true);
  return grpc::Status::OK;
}

grpc::Status Service::Logs(grpc::ServerContext* ctx, const v1::LogsRequest* req,
                           grpc::ServerWriter<v1::LogsResponse>* writer) {
  if (grpc::Status a = CheckCall(*ctx); !a.ok()) return a;
  absl::StatusOr<std::shared_ptr<Sandbox>> s = Find(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  std::shared_ptr<ExecProcess> exec;  // holds its log
  if (req->pid() != 0) {
    absl::StatusOr<std::shared_ptr<ExecProcess>> e = (*s)->FindExec(req->pid());
    if (!e.ok()) return ToGrpc(e.status());
    exec = std::move(*e);
  }
  OutputLog& log = exec != nullptr ? exec->relay->log() : (*s)->init_relay().log();
  uint64_t cursor = 0;
  // Without follow: what is there now.
  const uint64_t end = log.end();
  for (;;) {
    OutputLog::ReadResult r =
        log.Read(&cursor, req->follow() ? absl::Milliseconds(200) : absl::ZeroDuration());
    uint64_t dropped = r.dropped;
    for (OutputChunk& c : r.chunks) {
      v1::LogsResponse m;
      m.set_dropped_bytes(dropped);
      dropped = 0;
      if (c.stream == OutputStream::kStdout) {
        m.set_stdout(std::move(c.data));
      } else {
        m.set_stderr(std::move(c.data));
      }
      if (!writer->Write(m)) return grpc::Status::OK;
    }
    if (r.eof || ctx->IsCancelled()) break;
    if (!req->follow() && cursor >= end) break;
  }
  return grpc::Status::OK;
}

}  // namespace daemon
}  // namespace sandboxd
