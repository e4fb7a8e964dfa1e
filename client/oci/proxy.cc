#include "client/oci/proxy.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "client/oci/state.h"
#include "daemon/sentry_process.h"
#include "proto/control_channel.h"
#include "proto/mount_spec.h"

namespace sandboxd::oci {
namespace {

// What the proxies forward to the sandbox. SIGKILL and SIGSTOP cannot be
// caught: SIGKILL of the init proxy ends the sandbox with the channel.
constexpr int kForwarded[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1, SIGUSR2,
                              SIGALRM, SIGTERM, SIGCONT, SIGTSTP, SIGWINCH,
                              SIGTTIN, SIGTTOU, SIGPWR};

sigset_t ForwardedSet() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : kForwarded) sigaddset(&s, sig);
  return s;
}

int ShellStatus(const v1::ExitStatus& e) {
  if (e.status_case() == v1::ExitStatus::kSignal) return 128 + e.signal();
  return e.code() & 0xff;
}

void PutAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string ProxySocket(const std::string& root, const std::string& id) {
  return ContainerDir(root, id) + "/proxy.sock";
}

absl::StatusOr<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": longer than a unix socket's path may be (--root)"));
  }
  memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

control::Response ErrorResponse(uint64_t id, const absl::Status& s) {
  control::Response r;
  r.set_id(id);
  r.set_code(static_cast<int>(s.code()));
  r.set_message(std::string(s.message()));
  return r;
}

// One connection of the runtime's commands: each request is forwarded on
// a thread of its own (a WaitPid stays pending while a Signal passes).
void ServeConnection(daemon::SentryProcess* sentry, UniqueFd fd) {
  auto ch = std::make_shared<control::Channel>(std::move(fd));
  for (;;) {
    control::Request req;
    std::vector<UniqueFd> fds;
    if (!ch->Receive(&req, &fds).ok()) return;
    std::thread([sentry, ch, req = std::move(req), fds = std::move(fds)]() mutable {
      const uint64_t id = req.id();
      std::vector<int> raw;
      for (const UniqueFd& f : fds) raw.push_back(f.get());
      absl::StatusOr<control::Response> r = sentry->Call(req, raw);
      control::Response out = r.ok() ? *std::move(r) : ErrorResponse(id, r.status());
      out.set_id(id);
      (void)ch->Send(out);
    }).detach();
  }
}

v1::Mount MountOf(const std::string& flag) {
  absl::StatusOr<v1::Mount> m =
      absl::StartsWith(flag, "--volume=")
          ? ParseVolumeFlag(flag.substr(sizeof("--volume=") - 1))
          : ParseTmpfsFlag(flag.substr(sizeof("--tmpfs=") - 1));
  return m.ok() ? *m : v1::Mount();
}

}  // namespace

v1::ProcessSpec ProcessSpecOf(const LaunchSpec& s) {
  v1::ProcessSpec p;
  for (const std::string& a : s.args) p.add_argv(a);
  for (const std::string& e : s.env) p.add_env(e);
  p.set_cwd(s.cwd);
  p.mutable_user()->set_uid(s.uid);
  p.mutable_user()->set_gid(s.gid);
  for (uint32_t g : s.groups) p.mutable_user()->add_additional_gids(g);
  p.set_tty(s.terminal);
  return p;
}

void RunInitProxy(const InitProxyOptions& o) {
  UniqueFd report(o.report_fd);
  auto fail_early = [&report](const absl::Status& s) {
    PutAll(report.get(), std::string(s.message()));
    _exit(125);
  };
  // Blocked before any thread starts, so that every thread inherits it; a
  // thread below takes them.
  sigset_t fwd = ForwardedSet();
  pthread_sigmask(SIG_BLOCK, &fwd, nullptr);
  signal(SIGPIPE, SIG_IGN);

  daemon::SentrySpawnOptions so;
  so.sentry_path = o.sentry;
  so.platform = "systrap";
  if (o.spec.network != LaunchSpec::Network::kOwn) so.flags.push_back("--network=host");
  absl::StatusOr<std::unique_ptr<daemon::SentryProcess>> sp =
      daemon::SentryProcess::Spawn(so);
  if (!sp.ok()) fail_early(Annotate(sp.status(), "starting the sentry"));
  daemon::SentryProcess* sentry = sp->get();
  if (absl::Status s = sentry->AwaitHello(absl::Seconds(30)); !s.ok()) {
    fail_early(Annotate(s, absl::StrCat("the sentry ", o.sentry, " did not start")));
  }
  // What the Start needs, opened while create can still report failures.
  v1::SandboxSpec spec;
  spec.set_rootfs(o.spec.rootfs);
  *spec.mutable_process() = ProcessSpecOf(o.spec);
  spec.mutable_limits()->set_memory_bytes(o.spec.memory_bytes);
  spec.mutable_limits()->set_cpu_millis(o.spec.cpus * 1000);
  spec.mutable_limits()->set_pids(o.spec.pids);
  spec.set_network(o.spec.network == LaunchSpec::Network::kOwn ? v1::NETWORK_MODE_NONE
                                                               : v1::NETWORK_MODE_HOST);
  spec.set_hostname(o.spec.hostname);
  spec.set_read_only(o.spec.read_only_root);
  spec.set_container_init(true);
  std::vector<UniqueFd> binds;
  for (const std::string& f : o.spec.mount_flags) {
    v1::Mount m = MountOf(f);
    if (m.type() == v1::Mount::TYPE_BIND) {
      absl::StatusOr<UniqueFd> b =
          OpenBindSource(m, absl::StrCat("mounts (", m.target(), ")"));
      if (!b.ok()) fail_early(b.status());
      binds.push_back(*std::move(b));
    }
    *spec.add_mounts() = std::move(m);
  }
  UniqueFd image;
  if (!o.spec.restore_image.empty()) {
    image = UniqueFd(open(o.spec.restore_image.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!image.valid()) {
      fail_early(absl::InvalidArgumentError(absl::StrCat(
          "--image-path ", o.spec.restore_image, ": ", strerror(errno))));
    }
  }
  UniqueFd rootfs(open(o.spec.rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!rootfs.valid()) {
    fail_early(absl::InvalidArgumentError(
        absl::StrCat("root.path: ", o.spec.rootfs, ": ", strerror(errno))));
  }
  const std::string sock_path = ProxySocket(o.root, o.id);
  absl::StatusOr<sockaddr_un> addr = Address(sock_path);
  if (!addr.ok()) fail_early(addr.status());
  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  unlink(sock_path.c_str());
  if (!listener.valid() ||
      bind(listener.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0 ||
      listen(listener.get(), 16) != 0) {
    fail_early(absl::InternalError(absl::StrCat(sock_path, ": ", strerror(errno))));
  }

  std::atomic<bool> started{false};
  std::thread([sentry, &started, fwd] {
    for (;;) {
      int sig = sigwaitinfo(&fwd, nullptr);
      if (sig <= 0) continue;
      if (!started.load()) {
        // A created container that is signalled ends, as runc's init would
        // before its exec (SIGWINCH and SIGCONT do nothing there either).
        if (sig == SIGWINCH || sig == SIGCONT) continue;
        _exit(128 + sig);
      }
      control::Request req;
      req.mutable_signal()->set_signal(sig);
      (void)sentry->Call(req, {}, absl::Seconds(10));
    }
  }).detach();

  // Everything that can fail at create has been done: EOF tells `create`.
  report.reset();
  const std::string fifo = FifoPath(o.root, o.id);
  int f;
  while ((f = open(fifo.c_str(), O_WRONLY | O_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (f < 0) _exit(125);
  UniqueFd start_fd(f);

  control::Request req;
  std::vector<int> fds;
  if (image.valid()) {
    // restore: the sandbox runs on from the image (its tasks, not
    // process.args), with the bundle's rootfs, stdio and bind mounts.
    req.mutable_restore()->set_sandbox_id(o.id);
    *req.mutable_restore()->mutable_spec() = spec;
    req.mutable_restore()->set_image_path(o.spec.restore_image);
    fds.push_back(image.get());
  } else {
    req.mutable_start()->set_sandbox_id(o.id);
    *req.mutable_start()->mutable_spec() = spec;
  }
  fds.push_back(rootfs.get());
  if (o.spec.terminal) {
    fds.push_back(0);
  } else {
    for (int i = 0; i < 3; i++) fds.push_back(i);
  }
  for (const UniqueFd& b : binds) fds.push_back(b.get());
  absl::StatusOr<control::Response> r = sentry->Call(req, fds, absl::Seconds(60));
  if (!r.ok()) {
    // `start` reports it; the shim then sees this exit status.
    PutAll(start_fd.get(), absl::StrCat("1", r.status().message()));
    _exit(absl::IsNotFound(r.status())           ? 127
          : absl::IsPermissionDenied(r.status()) ? 126
                                                 : 125);
  }
  started.store(true);
  PutAll(start_fd.get(), "0");
  start_fd.reset();
  image.reset();
  rootfs.reset();
  binds.clear();
  // The runtime's other commands.
  std::thread([sentry, l = listener.release()] {
    for (;;) {
      int c = accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;
      }
      std::thread(ServeConnection, sentry, UniqueFd(c)).detach();
    }
  }).detach();

  control::Request wait;
  wait.mutable_wait();
  absl::StatusOr<control::Response> w = sentry->Call(wait);
  // The sandbox's processes end with the channel; the Sentry exits.
  int status = 137;
  if (w.ok()) {
    status = ShellStatus(w->exit());
    if (!w->exit().error().empty()) {
      PutAll(2, absl::StrCat("sandboxd-oci: ", w->exit().error(), "\n"));
    }
  } else {
    PutAll(2, absl::StrCat("sandboxd-oci: the sandbox: ", w.status().message(), "\n"));
  }
  _exit(status);
}

absl::StatusOr<UniqueFd> ConnectProxy(const std::string& root, const std::string& id) {
  const std::string path = ProxySocket(root, id);
  ASSIGN_OR_RETURN(sockaddr_un addr, Address(path));
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid() ||
      connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("container ", id, ": its init proxy (", path, "): ", strerror(errno)));
  }
  return fd;
}

absl::StatusOr<control::Response> ProxyCall(int fd, const control::Request& req,
                                            absl::Span<const int> fds) {
  control::Channel ch{UniqueFd(dup(fd))};
  RETURN_IF_ERROR(ch.Send(req, fds));
  control::Response r;
  RETURN_IF_ERROR(ch.Receive(&r));
  if (r.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
  }
  return r;
}

void RunExecProxy(int fd, int pid) {
  sigset_t fwd = ForwardedSet();
  sigprocmask(SIG_BLOCK, &fwd, nullptr);
  signal(SIGPIPE, SIG_IGN);
  UniqueFd sfd(signalfd(-1, &fwd, SFD_CLOEXEC));
  control::Channel ch{UniqueFd(fd)};
  control::Request wait;
  wait.set_id(1);
  wait.mutable_wait_pid()->set_pid(pid);
  if (!ch.Send(wait).ok()) _exit(137);
  uint64_t next = 2;
  for (;;) {
    pollfd p[2] = {{ch.fd(), POLLIN, 0}, {sfd.get(), POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(125);
    }
    if (p[1].revents & POLLIN) {
      signalfd_siginfo si;
      if (read(sfd.get(), &si, sizeof(si)) == sizeof(si)) {
        control::Request s;
        s.set_id(next++);
        s.mutable_signal()->set_signal(static_cast<int>(si.ssi_signo));
        s.mutable_signal()->set_pid(pid);
        (void)ch.Send(s);
      }
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      control::Response r;
      // The init proxy is gone: the sandbox and this process with it.
      if (!ch.Receive(&r).ok()) _exit(137);
      if (r.id() != 1) continue;
      if (r.code() != 0) _exit(137);
      _exit(ShellStatus(r.exit()));
    }
  }
}

}  // namespace sandboxd::oci
