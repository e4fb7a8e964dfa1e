// sandboxd: the sandbox daemon.
//
//   sandboxd [--socket=PATH] [--metrics-address=HOST:PORT] [--pool-size=N]
//            [--platforms=systrap[,kvm]] [--sentry=PATH] [--state-dir=DIR]
//            [--cgroup-parent=NAME | --no-cgroups] [--max-sandboxes=N]
//            [--tcp=HOST:PORT --tls-cert=FILE --tls-key=FILE --token-file=FILE]
//            [--socket-group=GROUP]
//
// Startup: take the state directory (killing the Sentries an earlier
// instance left), clean stale cgroups, start metrics, listen, then fill the
// pool in the background. SIGTERM/SIGINT: stop listening, destroy every
// sandbox, kill the pool, remove the cgroups and the socket.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "daemon/auth.h"
#include "daemon/cgroup.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/pool.h"
#include "daemon/sentry_kind.h"
#include "daemon/service.h"
#include "daemon/state_dir.h"
#include "grpcpp/health_check_service_interface.h"
#include "platforms/registry.h"
#include "platforms/systrap/register.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace sandboxd {
namespace daemon {
namespace {

constexpr int kExitUsage = 2;

struct Flags {
  std::string socket = "/run/sandboxd/sandboxd.sock";
  std::string socket_group = "sandboxd";
  std::string tcp, tls_cert, tls_key, token_file;
  std::string metrics_address;
  int pool_size = 2;
  std::set<std::string> platforms = {platform::Registry::Get().DefaultName()};
  std::string sentry;
  std::string state_dir = "/run/sandboxd";
  std::string cgroup_parent = "sandboxd";
  bool cgroups = true;
  int max_sandboxes = 1000;
  bool systrap_patch = false;  // --systrap-patch=on|off: the pool's default
};

[[noreturn]] void Die(int code, const std::string& msg) {
  fprintf(stderr, "sandboxd: %s\n", msg.c_str());
  exit(code);
}

const char kUsage[] =
    "usage: sandboxd [--socket=PATH] [--metrics-address=HOST:PORT] [--pool-size=N]\n"
    "                [--platforms=systrap[,kvm]] [--sentry=PATH] [--state-dir=DIR]\n"
    "                [--cgroup-parent=NAME | --no-cgroups] [--max-sandboxes=N]\n"
    "                [--tcp=HOST:PORT --tls-cert=FILE --tls-key=FILE --token-file=FILE]\n"
    "                [--socket-group=GROUP] [--systrap-patch=on|off]\n";

// The `sentry` next to this binary (out/bin/sentry beside out/bin/sandboxd).
std::string DefaultSentry() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "sentry";
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + "sentry";
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i++) {
    absl::string_view a = argv[i];
    auto value = [&](absl::string_view name, std::string* out) {
      if (!absl::ConsumePrefix(&a, name)) return false;
      if (!absl::ConsumePrefix(&a, "=")) Die(kExitUsage, absl::StrCat(name, " wants a value"));
      *out = std::string(a);
      return true;
    };
    auto number = [&](absl::string_view name, int* out) {
      std::string v;
      if (!value(name, &v)) return false;
      if (!absl::SimpleAtoi(v, out) || *out < 0) {
        Die(kExitUsage, absl::StrCat(name, " wants a non-negative number, got \"", v, "\""));
      }
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      fputs(kUsage, stdout);
      exit(0);
    }
    if (a == "--no-cgroups") {
      f.cgroups = false;
      continue;
    }
    if (value("--socket-group", &f.socket_group) || value("--socket", &f.socket) ||
        value("--tcp", &f.tcp) || value("--tls-cert", &f.tls_cert) ||
        value("--tls-key", &f.tls_key) || value("--token-file", &f.token_file) ||
        value("--metrics-address", &f.metrics_address) || value("--sentry", &f.sentry) ||
        value("--state-dir", &f.state_dir) || value("--cgroup-parent", &f.cgroup_parent) ||
        number("--pool-size", &f.pool_size) || number("--max-sandboxes", &f.max_sandboxes)) {
      continue;
    }
    if (value("--systrap-patch", &v)) {
      if (v != "on" && v != "off") {
        Die(kExitUsage, absl::StrCat("--systrap-patch wants on or off, got \"", v, "\""));
      }
      f.systrap_patch = v == "on";
      continue;
    }
    if (value("--platforms", &v)) {
      f.platforms.clear();
      for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
        if (platform::Registry::Get().Find(p) == nullptr) {
          Die(kExitUsage, absl::StrCat("--platforms: unknown platform \"", p,
                                       "\" (available: ",
                                       platform::Registry::Get().NamesJoined(", "), ")"));
        }
        f.platforms.insert(std::string(p));
      }
      if (f.platforms.empty()) Die(kExitUsage, "--platforms wants at least one platform");
      continue;
    }
    fputs(kUsage, stderr);
    Die(kExitUsage, absl::StrCat("unknown argument: ", argv[i]));
  }
  if (f.sentry.empty()) f.sentry = DefaultSentry();
  if (f.systrap_patch) {
    if (std::string why = SystrapPatchUnavailable(); !why.empty()) {
      Die(kExitUsage, absl::StrCat("--systrap-patch=on: syscall patching is not available "
                                   "on this host: ", why));
    }
  }
  return f;
}

int Main(int argc, char** argv) {
  // Debian's Abseil keeps absl::Mutex's deadlock detector on (no NDEBUG):
  // a global lock graph updated at every lock, gRPC's included. The unit
  // tests keep it; the daemon does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Descriptors 0-2 exist (a Sentry's fds must never land on them).
  int fd;
  while ((fd = open("/dev/null", O_RDWR)) >= 0 && fd <= 2) {
  }
  if (fd > 2) close(fd);
  Flags flags = ParseFlags(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  // SIGTERM and SIGINT are taken by a thread with sigwait; every other
  // thread (gRPC's too) inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (access(flags.sentry.c_str(), X_OK) != 0) {
    Die(1, absl::StrCat("the sentry binary ", flags.sentry,
                        " is not executable (build it, or pass --sentry=PATH)"));
  }
  absl::StatusOr<std::unique_ptr<StateDir>> state_dir = StateDir::Open(flags.state_dir);
  if (!state_dir.ok()) Die(1, state_dir.status().ToString());
  if (int n = (*state_dir)->KillStale(); n > 0) {
    Log("killed ", n, " sentries left by an earlier sandboxd");
  }

  std::unique_ptr<CgroupManager> cgroups;
  if (flags.cgroups) {
    absl::StatusOr<std::unique_ptr<CgroupManager>> cm = CgroupManager::Create(flags.cgroup_parent);
    if (cm.ok()) {
      cgroups = std::move(*cm);
      if (absl::Status s = cgroups->CleanupStale(); !s.ok()) {
        Log("cleaning stale cgroups: ", s.ToString());
      }
      Log("cgroups: ", cgroups->Describe());
    } else {
      Log("no cgroups (sandbox limits unavailable): ", cm.status().ToString());
    }
  }

  absl::StatusOr<std::unique_ptr<Metrics>> metrics = Metrics::Create(flags.metrics_address);
  if (!metrics.ok()) Die(1, absl::StrCat("metrics: ", metrics.status().ToString()));

  std::map<std::string, int> targets;
  // Warm Sentries per kind: systrap's with the daemon's --systrap-patch.
  for (const std::string& p : flags.platforms) {
    targets[SentryKind{p, p == systrap::kPlatformName && flags.systrap_patch}.Key()] =
        flags.pool_size;
  }
  SentryFactory factory(flags.sentry, cgroups.get(), state_dir->get());
  auto pool = std::make_unique<Pool>(&factory, metrics->get(), targets);

  ServiceOptions so;
  so.platforms = flags.platforms;
  so.systrap_patch = flags.systrap_patch;
  so.max_sandboxes = flags.max_sandboxes;
  auto service = std::make_unique<Service>(so, pool.get(), metrics->get(), cgroups != nullptr);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // No BDP probes: a PING sent with each burst of data costs both ends a
  // wakeup (on an Exec's exit, for one) and sizes nothing on a unix socket.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  ListenOptions lo;
  lo.unix_socket = flags.socket;
  lo.socket_group = flags.socket_group;
  lo.tcp_address = flags.tcp;
  lo.tls_cert_file = flags.tls_cert;
  lo.tls_key_file = flags.tls_key;
  lo.token_file = flags.token_file;
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Prepare(lo, &builder);
  if (!listener.ok()) Die(1, listener.status().ToString());
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) Die(1, absl::StrCat("cannot listen on ", flags.socket));
  if (absl::Status s = (*listener)->AfterStart(); !s.ok()) Die(1, s.ToString());
  pool->Start();
  Log("listening on unix:", flags.socket,
      (*listener)->tcp_port() ? absl::StrCat(" and tcp port ", (*listener)->tcp_port()) : "",
      (*metrics)->port() ? absl::StrCat("; metrics at http://", (*metrics)->address(), "/metrics")
                         : "",
      "; pool ", flags.pool_size, " per platform");

  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    Log("signal ", sig, ": shutting down");
    // Calls in flight get a moment; the sandboxes die next anyway.
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  });
  server->Wait();
  stopper.join();
  service->DestroyAll();
  service.reset();
  pool.reset();
  if (cgroups != nullptr) (void)cgroups->RemoveParent();
  unlink(flags.socket.c_str());
  Log("stopped");
  return 0;
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd

int main(int argc, char** argv) { return sandboxd::daemon::Main(argc, argv); }
