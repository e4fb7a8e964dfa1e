#include "client/oci/daemon_proxy.h"

#include <fcntl.h>
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "client/client.h"
#include "client/oci/proxy.h"
#include "client/oci/state.h"
#include "proto/mount_spec.h"

namespace sandboxd::oci {
namespace {

constexpr int kForwarded[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1, SIGUSR2,
                              SIGALRM, SIGTERM, SIGCONT, SIGTSTP, SIGWINCH,
                              SIGTTIN, SIGTTOU, SIGPWR};

sigset_t ForwardedSet() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : kForwarded) sigaddset(&s, sig);
  return s;
}

void PutAll(int fd, absl::string_view s) {
  while (!s.empty()) {
    ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

absl::StatusOr<std::unique_ptr<client::Client>> Connect(const std::string& socket) {
  client::ConnectOptions co;
  co.socket = socket;
  return client::Client::Connect(co);
}

int StatusFor(const absl::Status& s) {
  return absl::IsNotFound(s) ? 127 : absl::IsPermissionDenied(s) ? 126 : 125;
}

int ShellStatus(const v1::ExitStatus& e) {
  if (e.status_case() == v1::ExitStatus::kSignal) return 128 + e.signal();
  if (!e.error().empty()) return 125;
  return e.code() & 0xff;
}

// The process's stdio through the client: our own 0, 1, 2 (a terminal's
// output all comes as stdout).
client::ExecIo StdioIo() {
  client::ExecIo io;
  io.stdin_fd = 0;
  io.on_stdout = [](absl::string_view b) { PutAll(1, b); };
  io.on_stderr = [](absl::string_view b) { PutAll(2, b); };
  return io;
}

// The console pty's slave passes bytes as they are: the line discipline
// is the sandbox's own terminal's.
void MakeRaw(int fd) {
  termios t;
  if (tcgetattr(fd, &t) != 0) return;
  cfmakeraw(&t);
  tcsetattr(fd, TCSANOW, &t);
}

}  // namespace

void RunDaemonInitProxy(const DaemonProxyOptions& o) {
  UniqueFd report(o.report_fd);
  auto fail_early = [&report](const absl::Status& s) {
    PutAll(report.get(), s.message());
    _exit(125);
  };
  sigset_t fwd = ForwardedSet();
  pthread_sigmask(SIG_BLOCK, &fwd, nullptr);
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<std::unique_ptr<client::Client>> c = Connect(o.socket);
  if (!c.ok()) fail_early(Annotate(c.status(), absl::StrCat("sandboxd at ", o.socket)));
  client::Client* cl = c->get();
  v1::CreateRequest req;
  req.set_id(o.id);
  v1::SandboxSpec* spec = req.mutable_spec();
  spec->set_rootfs(o.spec.rootfs);
  *spec->mutable_process() = ProcessSpecOf(o.spec);
  spec->mutable_limits()->set_memory_bytes(o.spec.memory_bytes);
  spec->mutable_limits()->set_cpu_millis(o.spec.cpus * 1000);
  spec->mutable_limits()->set_pids(o.spec.pids);
  if (o.spec.network == LaunchSpec::Network::kJoin) {
    // This proxy has joined the namespace (create's child setns's before
    // its exec): the daemon opens it through our /proc entry, which names
    // it whatever the config's path is relative to.
    spec->set_network(v1::NETWORK_MODE_NONE);
    spec->set_network_namespace(absl::StrCat("/proc/", getpid(), "/ns/net"));
  } else {
    spec->set_network(o.spec.network == LaunchSpec::Network::kOwn ? v1::NETWORK_MODE_NONE
                                                                  : v1::NETWORK_MODE_HOST);
  }
  spec->set_hostname(o.spec.hostname);
  spec->set_read_only(o.spec.read_only_root);
  spec->set_container_init(true);
  for (const std::string& f : o.spec.mount_flags) {
    absl::StatusOr<v1::Mount> m =
        absl::StartsWith(f, "--volume=") ? ParseVolumeFlag(f.substr(9))
                                         : ParseTmpfsFlag(f.substr(8));
    if (!m.ok()) fail_early(Annotate(m.status(), "mounts"));
    *spec->add_mounts() = *std::move(m);
  }
  (*spec->mutable_labels())["io.sandboxd.oci.bundle-id"] = o.id;
  std::string sandbox;
  if (o.spec.restore_image.empty()) {
    absl::StatusOr<v1::CreateResponse> created = cl->Create(req);
    if (!created.ok()) fail_early(Annotate(created.status(), "sandboxd: Create"));
    sandbox = created->id();
  } else {
    // restore: the image's sandbox, with the bundle's rootfs, limits,
    // network and host name over the recorded ones, left CREATED for the
    // attach below to start, as a created one.
    v1::RestoreRequest rr;
    rr.set_image_dir(o.spec.restore_image);
    rr.set_id(o.id);
    *rr.mutable_spec() = std::move(*spec);
    rr.set_attach(true);
    absl::StatusOr<v1::RestoreResponse> restored = cl->Restore(rr);
    if (!restored.ok()) fail_early(Annotate(restored.status(), "sandboxd: Restore"));
    sandbox = restored->id();
  }

  std::atomic<bool> started{false};
  std::thread([cl, sandbox, &started, fwd] {
    for (;;) {
      int sig = sigwaitinfo(&fwd, nullptr);
      if (sig <= 0) continue;
      if (!started.load()) {
        if (sig == SIGWINCH || sig == SIGCONT) continue;
        (void)cl->Destroy(sandbox);
        _exit(128 + sig);
      }
      (void)cl->Signal(sandbox, sig);
    }
  }).detach();

  report.reset();
  const std::string fifo = FifoPath(o.root, o.id);
  int f;
  while ((f = open(fifo.c_str(), O_WRONLY | O_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (f < 0) _exit(125);
  UniqueFd start_fd(f);
  if (o.spec.terminal) MakeRaw(0);
  client::ExecIo io = StdioIo();
  io.remove = true;
  io.on_pid = [&start_fd, &started](int) {
    started.store(true);
    PutAll(start_fd.get(), "0");
    start_fd.reset();
  };
  absl::StatusOr<v1::ExitStatus> st = cl->Exec(sandbox, /*attach=*/true, {}, std::move(io));
  if (!st.ok()) {
    if (start_fd.valid()) {
      PutAll(start_fd.get(), absl::StrCat("1", st.status().message()));
      (void)cl->Destroy(sandbox);
    } else {
      PutAll(2, absl::StrCat("sandboxd-oci: ", st.status().message(), "\n"));
    }
    _exit(StatusFor(st.status()));
  }
  if (!st->error().empty()) PutAll(2, absl::StrCat("sandboxd-oci: ", st->error(), "\n"));
  _exit(ShellStatus(*st));
}

void RunDaemonExecProxy(const std::string& socket, const std::string& id,
                        const LaunchSpec& process, int report_fd) {
  UniqueFd report(report_fd);
  setsid();
  sigset_t fwd = ForwardedSet();
  pthread_sigmask(SIG_BLOCK, &fwd, nullptr);
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<std::unique_ptr<client::Client>> c = Connect(socket);
  if (!c.ok()) {
    PutAll(report.get(), c.status().message());
    _exit(125);
  }
  client::Client* cl = c->get();
  std::atomic<int> pid{0};
  std::thread([cl, id, &pid, fwd] {
    for (;;) {
      int sig = sigwaitinfo(&fwd, nullptr);
      if (sig <= 0) continue;
      if (pid.load() == 0) _exit(128 + sig);
      (void)cl->Signal(id, sig, false, pid.load());
    }
  }).detach();
  if (process.terminal) MakeRaw(0);
  client::ExecIo io = StdioIo();
  io.on_pid = [&report, &pid](int p) {
    pid.store(p);
    PutAll(report.get(), "0");
    report.reset();
  };
  absl::StatusOr<v1::ExitStatus> st = cl->Exec(id, /*attach=*/false, ProcessSpecOf(process),
                                               std::move(io));
  if (!st.ok()) {
    if (report.valid()) PutAll(report.get(), st.status().message());
    _exit(StatusFor(st.status()));
  }
  _exit(ShellStatus(*st));
}

absl::Status DaemonSignal(const std::string& socket, const std::string& id, int sig,
                          bool all) {
  absl::StatusOr<std::unique_ptr<client::Client>> c = Connect(socket);
  if (!c.ok()) return c.status();
  return (*c)->Signal(id, sig, all);
}

absl::Status DaemonUpdate(const std::string& socket, const std::string& id,
                          const v1::Limits& limits, const v1::LimitsLifted& lifted) {
  absl::StatusOr<std::unique_ptr<client::Client>> c = Connect(socket);
  if (!c.ok()) return c.status();
  return (*c)->Update(id, limits, lifted).status();
}

absl::Status DaemonPause(const std::string& socket, const std::string& id, bool pause) {
  absl::StatusOr<std::unique_ptr<client::Client>> c = Connect(socket);
  if (!c.ok()) return c.status();
  return pause ? (*c)->Pause(id) : (*c)->Resume(id);
}

absl::Status DaemonCheckpoint(const std::string& socket, const std::string& id,
                              const std::string& image_dir, bool leave_running) {
  absl::StatusOr<std::unique_ptr<client::Client>> c = Connect(socket);
  if (!c.ok()) return c.status();
  v1::CheckpointRequest req;
  req.set_id(id);
  req.set_image_dir(image_dir);
  req.set_leave_running(leave_running);
  return (*c)->Checkpoint(req).status();
}

absl::Status DaemonDestroy(const std::string& socket, const std::string& id) {
  absl::StatusOr<std::unique_ptr<client::Client>> c = Connect(socket);
  if (!c.ok()) return c.status();
  return (*c)->Destroy(id).status();
}

absl::StatusOr<v1::SandboxInfo> DaemonGet(const std::string& socket, const std::string& id) {
  absl::StatusOr<std::unique_ptr<client::Client>> c = Connect(socket);
  if (!c.ok()) return c.status();
  return (*c)->Get(id);
}

}  // namespace sandboxd::oci
