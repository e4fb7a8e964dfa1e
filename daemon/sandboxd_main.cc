// sandboxd: the sandbox daemon.
//
//   sandboxd [FLAGS]    (sandboxd --help lists them; exit 2 for a bad flag)
//
// Startup: take the state directory, cgroups, metrics; re-adopt the
// sandboxes an earlier instance recorded (killing its other Sentries and
// removing their cgroups); listen, then fill the pool in the background.
// SIGTERM/SIGINT: stop listening and kill the pool; the sandboxes keep
// running for the next daemon (as docker's live-restore), unless
// --shutdown-kill: then destroy every sandbox and remove the cgroup
// parent if this state directory's daemon created it.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "base/flags.h"
#include "base/version.h"
#include "daemon/auth.h"
#include "daemon/cgroup.h"
#include "daemon/log.h"
#include "daemon/metrics.h"
#include "daemon/pool.h"
#include "daemon/sentry_kind.h"
#include "daemon/service.h"
#include "daemon/spec_policy.h"
#include "daemon/state_dir.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
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
  std::string cgroup_parent;  // "": DefaultCgroupParent(state_dir)
  bool shutdown_kill = false;
  bool cgroups = true;
  int max_sandboxes = 1000;
  bool systrap_patch = false;  // --systrap-patch=on|off: the pool's default
  std::string default_rootfs;  // default: DefaultRootfs()
  std::vector<std::string> allowed_roots;
  std::vector<std::string> checkpoint_roots;
  v1::Limits default_limits;
  int max_connections = 1024;
  int max_connections_per_client = 128;
  int connection_idle_seconds = 300;
  uint64_t restore_rate = 0;  // --restore-rate: bytes/s, 0: none
};

[[noreturn]] void Die(int code, const std::string& msg) {
  fprintf(stderr, "sandboxd: %s\n", msg.c_str());
  exit(code);
}

// One cgroup parent per state directory, so that two daemons never share
// one: "sandboxd" for /run/sandboxd, "sandboxd-<FNV-1a of the path>" for
// any other (stable across builds: a restarted daemon finds its own).
std::string DefaultCgroupParent(const std::string& state_dir) {
  if (state_dir == "/run/sandboxd") return "sandboxd";
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : state_dir) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrCat("sandboxd-", absl::Hex(h, absl::kZeroPad16));
}

// The `sentry` next to this binary (out/bin/sentry beside out/bin/sandboxd).
std::string DefaultSentry() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "sentry";
  std::string self(buf, static_cast<size_t>(n));
  return self.substr(0, self.rfind('/') + 1) + "sentry";
}

// The image tools/build_rootfs.sh builds beside the binaries (out/rootfs
// for out/bin/sandboxd).
std::string DefaultRootfs() {
  std::string sentry = DefaultSentry();
  std::string dir = sentry.substr(0, sentry.rfind('/'));
  return dir.substr(0, dir.rfind('/') + 1) + "rootfs";
}

// Descriptors kept for the daemon's own work beyond the connections:
// per sandbox its rootfs, control channel, stdio pipes or pty, exec
// relays, cgroup files; and a base for gRPC, metrics, the pool.
constexpr int kFdReserveBase = 256;
constexpr int kFdReservePerSandbox = 16;

// RLIMIT_NOFILE's soft limit raised to the hard one; returns it.
rlim_t RaiseNofile() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    rlimit want = r;
    want.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) r = want;
  }
  return r.rlim_cur;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  const platform::Registry& reg = platform::Registry::Get();
  flags::FlagSet fs(
      "sandboxd", "[FLAGS]",
      "The sandbox daemon: serves sandboxd.v1.Sandboxes (proto/sandbox.proto)\n"
      "on a unix socket, with a pool of warm Sentries per platform.");
  fs.String("socket", &f.socket, "PATH", "the unix socket to listen on");
  fs.String("socket-group", &f.socket_group, "GROUP",
            "the group that may connect to the socket");
  fs.String("tcp", &f.tcp, "HOST:PORT",
            "also listen on TCP (needs --tls-cert, --tls-key, --token-file)");
  fs.String("tls-cert", &f.tls_cert, "FILE", "the TLS certificate for --tcp");
  fs.String("tls-key", &f.tls_key, "FILE", "the TLS key for --tcp");
  fs.String("token-file", &f.token_file, "FILE",
            "the bearer token TCP clients must present");
  fs.String("metrics-address", &f.metrics_address, "HOST:PORT",
            "serve Prometheus metrics at http://HOST:PORT/metrics");
  fs.Int("pool-size", &f.pool_size, "warm Sentries per platform");
  fs.Func(
      "platforms", reg.NamesJoined(","), "the platforms offered",
      [&f, &reg](absl::string_view v) {
        f.platforms.clear();
        for (absl::string_view p : absl::StrSplit(v, ',', absl::SkipEmpty())) {
          if (reg.Find(p) == nullptr) {
            return absl::InvalidArgumentError(absl::StrCat(
                "unknown platform \"", p, "\" (available: ", reg.NamesJoined(", "), ")"));
          }
          f.platforms.insert(std::string(p));
        }
        if (f.platforms.empty()) {
          return absl::InvalidArgumentError("wants at least one platform");
        }
        return absl::OkStatus();
      },
      reg.DefaultName());
  fs.String("sentry", &f.sentry, "PATH",
            "the sentry binary (default: the one beside sandboxd)");
  fs.String("state-dir", &f.state_dir, "DIR",
            "the daemon's lock and its records of sandboxes and Sentries "
            "(re-adopted by the next daemon)");
  fs.String("cgroup-parent", &f.cgroup_parent, "NAME",
            "the cgroup under which each sandbox gets its own (default: sandboxd for "
            "/run/sandboxd, else sandboxd-<hash of --state-dir>)");
  fs.BoolFunc("shutdown-kill",
              "at SIGTERM/SIGINT destroy every sandbox (default: they keep running "
              "and the next sandboxd re-adopts them)",
              [&f] { f.shutdown_kill = true; });
  fs.BoolFunc("no-cgroups", "no cgroups: sandbox limits are not enforced",
              [&f] { f.cgroups = false; });
  fs.Int("max-sandboxes", &f.max_sandboxes, "the most sandboxes at once");
  fs.OnOff(std::string(systrap::kPatchFlag), &f.systrap_patch,
           "systrap Sentries patch syscalls unless a spec says otherwise");
  fs.String("default-rootfs", &f.default_rootfs, "DIR",
            "the root of a sandbox whose spec names none (default: the image "
            "tools/build_rootfs.sh builds, ../rootfs beside sandboxd)");
  fs.Func(
      "allowed-roots", "DIR[,DIR]",
      "the host directories (and their subdirectories) a spec may name as "
      "its root; the default rootfs is always allowed",
      [&f](absl::string_view v) {
        f.allowed_roots.clear();
        for (absl::string_view d : absl::StrSplit(v, ',', absl::SkipEmpty())) {
          if (d[0] != '/') {
            return absl::InvalidArgumentError(
                absl::StrCat("want absolute paths, got ", d));
          }
          f.allowed_roots.emplace_back(d);
        }
        return absl::OkStatus();
      },
      "any");
  fs.Func(
      "checkpoint-roots", "DIR[,DIR]",
      "the host directories (and their subdirectories) where checkpoint "
      "images may be written (spec.checkpoint_dir, Checkpoint's image_dir)",
      [&f](absl::string_view v) {
        f.checkpoint_roots.clear();
        for (absl::string_view d : absl::StrSplit(v, ',', absl::SkipEmpty())) {
          if (d[0] != '/') {
            return absl::InvalidArgumentError(
                absl::StrCat("want absolute paths, got ", d));
          }
          f.checkpoint_roots.emplace_back(d);
        }
        return absl::OkStatus();
      },
      "any");
  fs.Func("default-memory", "BYTES[k|m|g]",
          "the memory limit of a sandbox whose spec names none",
          [&f](absl::string_view v) {
            absl::StatusOr<uint64_t> n = ParseByteSize(std::string(v));
            if (!n.ok()) return n.status();
            f.default_limits.set_memory_bytes(*n);
            return absl::OkStatus();
          },
          "none");
  fs.Func("default-cpus", "N",
          "the CPU limit of a sandbox whose spec names none (e.g. 0.5)",
          [&f](absl::string_view v) {
            double cpus;
            if (!absl::SimpleAtod(v, &cpus) || cpus <= 0 || cpus > 1e6) {
              return absl::InvalidArgumentError(
                  absl::StrCat("want a positive number, got ", v));
            }
            f.default_limits.set_cpu_millis(
                static_cast<uint64_t>(cpus * 1000 + 0.5));
            return absl::OkStatus();
          },
          "none");
  fs.Func("default-pids", "N",
          "the task limit of a sandbox whose spec names none",
          [&f](absl::string_view v) {
            uint64_t n;
            if (!absl::SimpleAtoi(v, &n)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("not a number: ", v));
            }
            f.default_limits.set_pids(n);
            return absl::OkStatus();
          },
          "none");
  fs.Func("restore-rate", "BYTES[k|m|g]",
          "the page loader's rate limit of every restore, per second (a "
          "network disk, for tests and benchmarks)",
          [&f](absl::string_view v) {
            absl::StatusOr<uint64_t> n = ParseByteSize(std::string(v));
            if (!n.ok()) return n.status();
            f.restore_rate = *n;
            return absl::OkStatus();
          },
          "none");
  fs.Int("max-connections", &f.max_connections,
         "connections at once (unix socket and TCP), in all (also bounded "
         "by the descriptors left beside the sandboxes' own)");
  fs.Int("max-connections-per-client", &f.max_connections_per_client,
         "connections at once per client: peer uid (unix socket), peer "
         "address (TCP)");
  fs.Int("connection-idle-timeout", &f.connection_idle_seconds,
         "seconds after which a connection with no call in flight is closed "
         "(clients reconnect); 0 for never");
  bool version = false;
  fs.Bool("version", &version, "print sandboxd's version and exit");
  std::vector<std::string> rest = fs.ParseOrExit(flags::Args(argc, argv), kExitUsage);
  if (version) {
    printf("sandboxd %s\n", kVersion);
    exit(0);
  }
  if (!rest.empty()) Die(kExitUsage, absl::StrCat("unknown argument: ", rest[0]));
  if (f.sentry.empty()) f.sentry = DefaultSentry();
  if (f.default_rootfs.empty()) f.default_rootfs = DefaultRootfs();
  if (f.default_rootfs[0] != '/') {
    Die(kExitUsage, "--default-rootfs: want an absolute path");
  }
  if (f.connection_idle_seconds < 0 || f.connection_idle_seconds > 86400) {
    Die(kExitUsage, "--connection-idle-timeout: want 0 to 86400 seconds");
  }
  if (f.max_connections < 1 || f.max_connections_per_client < 1) {
    Die(kExitUsage,
        "--max-connections, --max-connections-per-client: want >= 1");
  }
  const v1::Limits& dl = f.default_limits;
  if (absl::Status s = ValidateLimits(dl, HostRanges::Read(), "default limits");
      !s.ok()) {
    Die(kExitUsage, std::string(s.message()));
  }
  if (!f.cgroups && (dl.memory_bytes() || dl.cpu_millis() || dl.pids())) {
    Die(kExitUsage,
        "--default-memory/--default-cpus/--default-pids need cgroups "
        "(not with --no-cgroups)");
  }
  if (f.cgroup_parent.empty()) f.cgroup_parent = DefaultCgroupParent(f.state_dir);
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
  const rlim_t nofile = RaiseNofile();
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

  std::unique_ptr<CgroupManager> cgroups;
  if (flags.cgroups) {
    absl::StatusOr<std::unique_ptr<CgroupManager>> cm = CgroupManager::Create(flags.cgroup_parent);
    if (cm.ok()) {
      cgroups = std::move(*cm);
      // Only the cgroups the state directory records are this daemon's
      // to clean up (adopt.h), and the parent only when it made it.
      if (cgroups->created_parent()) (*state_dir)->RecordCgroupParent(flags.cgroup_parent);
      // A parent made again after another daemon removed it is this one's.
      StateDir* dir = state_dir->get();
      cgroups->set_on_parent_made(
          [dir, parent = flags.cgroup_parent] { dir->RecordCgroupParent(parent); });
      Log("cgroups: ", cgroups->Describe());
    } else {
      Log("no cgroups (sandbox limits unavailable): ", cm.status().ToString());
    }
  }

  // A platform is offered only when its back-end's probe passes on this
  // host (kvm: a real guest round trip, not the presence of /dev/kvm);
  // requests naming one that is not offered get the daemon's list.
  for (auto it = flags.platforms.begin(); it != flags.platforms.end();) {
    const platform::Backend* b = platform::Registry::Get().Find(*it);
    absl::Status probed = b != nullptr && b->probe ? b->probe() : absl::OkStatus();
    if (probed.ok()) {
      ++it;
      continue;
    }
    Log("platform ", *it, " not offered: ", probed.message());
    it = flags.platforms.erase(it);
  }
  if (flags.platforms.empty()) Die(1, "--platforms: none of them is usable on this host");

  // Only the offered platforms' metrics are exported.
  absl::StatusOr<std::unique_ptr<Metrics>> metrics =
      Metrics::Create(flags.metrics_address, flags.platforms);
  if (!metrics.ok()) Die(1, absl::StrCat("metrics: ", metrics.status().ToString()));
  // Said before the socket answers: whoever waits for the socket finds
  // the address in the log.
  if ((*metrics)->port() != 0) Log("metrics at http://", (*metrics)->address(), "/metrics");

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
  so.policy.default_rootfs = flags.default_rootfs;
  so.policy.allowed_roots = flags.allowed_roots;
  so.policy.checkpoint_roots = flags.checkpoint_roots;
  so.policy.default_memory_bytes = flags.default_limits.memory_bytes();
  so.policy.default_cpu_millis = flags.default_limits.cpu_millis();
  so.policy.default_pids = flags.default_limits.pids();
  so.policy.ranges = HostRanges::Read();
  if (access(flags.default_rootfs.c_str(), X_OK) != 0) {
    Log("the default rootfs ", flags.default_rootfs, " is missing (",
        strerror(errno), "): specs without a rootfs are refused; "
        "tools/build_rootfs.sh builds it");
  }
  if (cgroups == nullptr && (so.policy.default_memory_bytes ||
                             so.policy.default_cpu_millis ||
                             so.policy.default_pids)) {
    Log("no cgroups: the default limits are not applied");
  }
  so.state_dir = state_dir->get();
  so.restore_rate = flags.restore_rate;
  auto service = std::make_unique<Service>(so, pool.get(), metrics->get(), cgroups != nullptr);
  service->Readopt(&factory, cgroups.get());

  // grpc.health.v1 answers for "" and for the service by name, and server
  // reflection lets grpcurl and the like call the API without its .proto.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // No BDP probes: a PING sent with each burst of data costs both ends a
  // wakeup (on an Exec's exit, for one) and sizes nothing on a unix socket.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // A connection that holds no call (one that never sent anything too)
  // gives its place back: the connection limits count held ones.
  if (flags.connection_idle_seconds > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               flags.connection_idle_seconds * 1000);
  }
  ListenOptions lo;
  lo.unix_socket = flags.socket;
  lo.socket_group = flags.socket_group;
  lo.tcp_address = flags.tcp;
  lo.tls_cert_file = flags.tls_cert;
  lo.tls_key_file = flags.tls_key;
  lo.token_file = flags.token_file;
  // A TLS handshake gets 10 s, or the idle timeout when that is shorter.
  if (flags.connection_idle_seconds > 0) {
    lo.handshake_timeout_ms = std::min(10, flags.connection_idle_seconds) * 1000;
  }
  // The connections get what the sandboxes' own descriptors leave.
  const int64_t reserve =
      kFdReserveBase + int64_t{kFdReservePerSandbox} * flags.max_sandboxes;
  // A TCP connection takes three descriptors (the TCP socket, both ends of
  // the socketpair to gRPC), a unix one one.
  const int64_t room =
      (static_cast<int64_t>(nofile) - reserve) / (flags.tcp.empty() ? 1 : 3);
  lo.max_connections = static_cast<int>(
      std::max<int64_t>(16, std::min<int64_t>(flags.max_connections, room)));
  lo.max_connections_per_client =
      std::min(flags.max_connections_per_client, lo.max_connections);
  if (room < flags.max_connections) {
    Log("RLIMIT_NOFILE ", nofile, " with --max-sandboxes=", flags.max_sandboxes,
        " leaves room for ", lo.max_connections, " connections");
  }
  absl::StatusOr<std::unique_ptr<Listener>> listener = Listener::Prepare(lo, &builder);
  if (!listener.ok()) Die(1, listener.status().ToString());
  service->SetCallCheck([l = listener->get()](const grpc::ServerContext& ctx) {
    return l->CheckCall(ctx.peer(), ctx.client_metadata());
  });
  builder.RegisterService(service.get());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) Die(1, absl::StrCat("cannot listen on ", flags.socket));
  server->GetHealthCheckService()->SetServingStatus(v1::Sandboxes::service_full_name(), true);
  if (absl::Status s = (*listener)->AfterStart(server.get()); !s.ok()) {
    Die(1, s.ToString());
  }
  pool->Start();
  Log("listening on unix:", flags.socket,
      (*listener)->tcp_port() ? absl::StrCat(" and tcp port ", (*listener)->tcp_port()) : "",
      "; pool ", flags.pool_size, " per platform; default rootfs ",
      flags.default_rootfs);

  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    Log("signal ", sig, ": shutting down");
    server->GetHealthCheckService()->Shutdown();  // NOT_SERVING from now on
    (*listener)->Stop();
    // Calls in flight get a moment; the sandboxes die next anyway.
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  });
  server->Wait();
  stopper.join();
  if (!flags.shutdown_kill) {
    // The warm Sentries go (with their cgroups); the sandboxes' Sentries
    // see their channel end and wait for the next daemon, as after a
    // crash. Nothing of the sandboxes may be destroyed on the way out.
    pool.reset();
    unlink(flags.socket.c_str());
    Log("stopped; the sandboxes keep running for the next sandboxd "
        "(--shutdown-kill destroys them)");
    fflush(stderr);
    _exit(0);
  }
  service->DestroyAll();
  service.reset();
  pool.reset();
  if (cgroups != nullptr && (*state_dir)->CreatedCgroupParent(flags.cgroup_parent)) {
    if (cgroups->RemoveParent().ok()) (*state_dir)->ForgetCgroupParent();
  }
  unlink(flags.socket.c_str());
  Log("stopped");
  return 0;
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd

int main(int argc, char** argv) { return sandboxd::daemon::Main(argc, argv); }
