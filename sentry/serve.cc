#include "sentry/serve.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/base/thread_annotations.h"
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
#include "sentry/isolation.h"
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
  // The Sentry's tasks are root (getuid() is 0); another identity would be
  // a lie until credentials exist.
  if (p.user().uid() != 0 || p.user().gid() != 0 ||
      p.user().additional_gids_size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process.user ", p.user().uid(), ":", p.user().gid(),
        " is not supported: processes in the sandbox run as uid 0"));
  }
  boot::ProcessConfig c;
  c.argv.assign(p.argv().begin(), p.argv().end());
  c.env.assign(p.env().begin(), p.env().end());
  c.cwd = p.cwd().empty() ? "/" : p.cwd();
  return c;
}

// The stdio descriptors that came with Start or Exec, from `first` on:
// stdin, stdout, stderr, or one pty replica for all three with `tty`.
absl::StatusOr<boot::Stdio> StdioFromFds(std::vector<UniqueFd>& fds,
                                         size_t first, bool tty) {
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
    return stdio;
  }
  for (int i = 0; i < 3; i++) stdio.fds[i] = std::move(fds[first + i]);
  return stdio;
}

class Server {
 public:
  Server(control::Channel ch, boot::Prewarmed pw, bool isolated,
         std::string platform)
      : ch_(std::make_unique<control::Channel>(std::move(ch))),
        pw_(std::move(pw)),
        isolated_(isolated),
        platform_(std::move(platform)) {}

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
  void SendOn(uint64_t generation, const Response& r) {
    absl::MutexLock l(&ch_mu_);
    if (generation == generation_) SendLocked(r, {});
  }
  void SendLocked(const Response& r, absl::Span<const int> fds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ch_mu_) {
    if (absl::Status s = ch_->Send(r, fds); !s.ok()) {
      Log(absl::StrCat("sending the response to request ", r.id(), ": ",
                       s.message()));
    }
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

  void OnStart(const Request& req, std::vector<UniqueFd> fds);
  void OnExec(const Request& req, std::vector<UniqueFd> fds);
  void OnCheckpoint(const Request& req, std::vector<UniqueFd> fds);
  void OnRestore(const Request& req, std::vector<UniqueFd> fds);
  void OnWaitPid(uint64_t id, pid_t pid);
  [[noreturn]] void OnDestroy(uint64_t id);
  void OnPersist(uint64_t id, std::vector<UniqueFd> fds);
  void OnReattach(uint64_t id);
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
  std::optional<boot::Prewarmed> pw_;  // consumed by Start
  const bool isolated_;                 // in namespaces of its own
  const std::string platform_;          // what Prewarm made (registry.h)
  // Lives until the process exits (boot.h); pending waits point into it.
  boot::Sandbox* sandbox_ = nullptr;
};

void Server::OnStart(const Request& req, std::vector<UniqueFd> fds) {
  const Request::Start& start = req.start();
  const v1::SandboxSpec& spec = start.spec();
  if (!pw_.has_value()) {
    SendError(req.id(), absl::FailedPreconditionError(
                            "this Sentry has already been given a sandbox"));
    return;
  }
  StageClock clock;
  auto build = [&]() -> absl::StatusOr<boot::Sandbox*> {
    const std::string& want = spec.platform().empty()
                                  ? platform::Registry::Get().DefaultName()
                                  : spec.platform();
    if (want != platform_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "platform ", want, " is not this Sentry's (", platform_, ")"));
    }
    if (spec.network() == v1::NETWORK_MODE_HOST) {
      return absl::InvalidArgumentError(
          "network=host is not available: a warm Sentry has its own network "
          "namespace");
    }
    ASSIGN_OR_RETURN(boot::ProcessConfig init, ProcessFromSpec(spec.process()));
    if (fds.empty()) {
      return absl::InvalidArgumentError("Start came without a rootfs descriptor");
    }
    struct stat st;
    if (fstat(fds[0].get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          "the rootfs descriptor is not a directory");
    }
    ASSIGN_OR_RETURN(boot::Stdio stdio,
                     StdioFromFds(fds, 1, spec.process().tty()));
    boot::SandboxConfig config;
    config.rootfs = std::move(fds[0]);
    config.init = std::move(init);
    config.hostname = !spec.hostname().empty()      ? spec.hostname()
                      : !start.sandbox_id().empty() ? start.sandbox_id()
                                                    : "sandbox";
    config.limits.memory_bytes = spec.limits().memory_bytes();
    config.limits.cpu_millis = spec.limits().cpu_millis();
    config.limits.pids = spec.limits().pids();
    if (isolated_) {
      RETURN_IF_ERROR(Annotate(isolation::SetHostname(config.hostname),
                               "uts namespace"));
      clock.Mark(Stage::kHostname);
    }
    boot::Prewarmed pw = std::move(*pw_);
    pw_.reset();
    ASSIGN_OR_RETURN(std::unique_ptr<boot::Sandbox> sb,
                     boot::Sandbox::Create(std::move(pw), std::move(config),
                                           std::move(stdio), &clock));
    return sb.release();
  };
  auto sb = build();
  if (!sb.ok()) {
    SendError(req.id(), Annotate(sb.status(), "Start"));
    return;
  }
  if (absl::Status s = (*sb)->Start(); !s.ok()) {
    SendError(req.id(), Annotate(s, "Start"));
    return;
  }
  sandbox_ = *sb;
  clock.Mark(Stage::kStart);
  Response r;
  r.set_id(req.id());
  r.set_init_pid(1);
  AddTimings(clock, &r);
  Send(r);
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
  if (!pw_.has_value()) {
    SendError(req.id(), absl::FailedPreconditionError(
                            "this Sentry has already been given a sandbox"));
    return;
  }
  StageClock clock;
  auto build = [&]() -> absl::StatusOr<boot::Sandbox*> {
    RETURN_IF_ERROR(CheckDirFd(fds, 0, "image directory"));
    RETURN_IF_ERROR(CheckDirFd(fds, 1, "rootfs"));
    ASSIGN_OR_RETURN(boot::Stdio stdio,
                     StdioFromFds(fds, 2, spec.process().tty()));
    boot::RestoreConfig config;
    config.image =
        restore.image_path().empty() ? "image" : restore.image_path();
    config.image_dir = std::move(fds[0]);
    config.rootfs = std::move(fds[1]);
    config.hostname = !spec.hostname().empty()        ? spec.hostname()
                      : !restore.sandbox_id().empty() ? restore.sandbox_id()
                                                      : "sandbox";
    config.limits.memory_bytes = spec.limits().memory_bytes();
    config.limits.cpu_millis = spec.limits().cpu_millis();
    config.limits.pids = spec.limits().pids();
    if (isolated_) {
      RETURN_IF_ERROR(Annotate(isolation::SetHostname(config.hostname),
                               "uts namespace"));
      clock.Mark(Stage::kHostname);
    }
    boot::Prewarmed pw = std::move(*pw_);
    pw_.reset();
    ASSIGN_OR_RETURN(std::unique_ptr<boot::Sandbox> sb,
                     boot::Sandbox::Restore(std::move(pw), std::move(config),
                                            std::move(stdio), &clock));
    return sb.release();
  };
  auto sb = build();
  if (!sb.ok()) {
    SendError(req.id(), Annotate(sb.status(), "Restore"));
    return;
  }
  if (absl::Status s = (*sb)->Start(); !s.ok()) {
    SendError(req.id(), Annotate(s, "Restore"));
    return;
  }
  sandbox_ = *sb;
  clock.Mark(Stage::kRestoreStart);
  Response r;
  r.set_id(req.id());
  r.set_init_pid(1);
  AddTimings(clock, &r);
  Send(r);
}

void Server::OnExec(const Request& req, std::vector<UniqueFd> fds) {
  auto run = [&]() -> absl::StatusOr<pid_t> {
    RETURN_IF_ERROR(CheckRunning());
    ASSIGN_OR_RETURN(boot::ProcessConfig p, ProcessFromSpec(req.exec().process()));
    ASSIGN_OR_RETURN(boot::Stdio stdio,
                     StdioFromFds(fds, 0, req.exec().process().tty()));
    return sandbox_->Exec(p, std::move(stdio));
  };
  auto pid = run();
  if (!pid.ok()) {
    SendError(req.id(), Annotate(pid.status(), "Exec"));
    return;
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
    SendOn(gen, r);
  });
  if (!waiter.ok()) {
    SendError(id, waiter.status());
    return;
  }
  waiter->detach();
}

void Server::OnPersist(uint64_t id, std::vector<UniqueFd> fds) {
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
  Response r;
  r.set_id(id);
  Send(r);
}

void Server::OnReattach(uint64_t id) {
  Response r;
  r.set_id(id);
  r.mutable_reattached()->set_started(sandbox_ != nullptr);
  std::vector<int> fds;
  for (const UniqueFd& f : kept_) fds.push_back(f.get());
  Send(r, fds);
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
      case Request::kWait:
        OnWaitPid(req.id(), 1);
        break;
      case Request::kWaitPid:
        OnWaitPid(req.id(), req.wait_pid().pid());
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
        OnPersist(req.id(), std::move(fds));
        break;
      case Request::kReattach:
        OnReattach(req.id());
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
        for (const auto& [nr, n] : st.unimplemented) {
          (*out->mutable_unimplemented_syscalls())[static_cast<uint32_t>(nr)] = n;
        }
        sandbox_->kernel().platform().ExportStats(out->mutable_platform());
        if (const mm::AsyncLoader* al =
                sandbox_->kernel().memory_file().async_loader()) {
          const mm::AsyncLoadStats ls = al->Stats();
          control::RestorePageStats* rp = out->mutable_restore_pages();
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
    popts.isolate = [](StageClock* clock) -> absl::Status {
      RETURN_IF_ERROR(Annotate(isolation::EnterNamespaces(), "namespaces"));
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
  Server* server = new Server(std::move(ch), std::move(*pw), o.isolate, o.platform);
  server->Loop();
}

}  // namespace sandboxd::serve
