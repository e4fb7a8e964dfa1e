// sentry: the application kernel's command line.
//
//   sentry run [--platform=systrap|kvm] [--rootfs=DIR] [--cwd=DIR]
//              [--env=K=V ...] [--hostname=NAME] [--log-unimplemented]
//              [--strace] [--vdso=tsc|syscall]
//              [--memory=BYTES] [--cpus=N] [--pids=N] [--sentry-seccomp=on|off]
//              [--kvm-vcpu-pool=background|eager] [--kvm-shadow=zap|flush]
//              [--kvm-fpu=lazy|eager] [--stats-json=PATH] -- PROGRAM [ARGS...]
//     Runs one program in a sandbox. Exit status: the program's (128+N
//     when killed by signal N); 125 when the sentry's own arguments are
//     wrong or it fails to start; 126 when PROGRAM cannot be executed; 127
//     when it does not exist. --stats-json writes the platform's counters
//     (proto/platform_stats.proto as JSON) to PATH when the program is done.
//
//   sentry serve --control-fd=N [--platform=systrap|kvm] [--vdso=tsc|syscall]
//                [--isolation=on|off] [--sentry-seccomp=on|off]
//                [--kvm-vcpu-pool=background|eager]
//     A warm Sentry for sandboxd (serve.h): prewarms, says Hello on the
//     control channel N, then takes its sandbox from the daemon.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"
#include "google/protobuf/util/json_util.h"
#include "platforms/registry.h"
#include "proto/platform_stats.pb.h"
#include "sentry/boot.h"
#include "sentry/fs/rootfs.h"
#include "sentry/fs/tty/host_tty.h"
#include "sentry/kernel/task.h"
#include "sentry/serve.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd {
namespace {

constexpr int kExitUsage = 125;
[[noreturn]] void Die(int code, const std::string& msg) {
  fprintf(stderr, "sentry: %s\n", msg.c_str());
  fflush(stderr);
  _exit(code);
}

void Usage() {
  fprintf(stderr,
          "usage: sentry run [--platform=systrap|kvm] [--rootfs=DIR] [--cwd=DIR] "
          "[--env=K=V ...] [--hostname=NAME] [--memory=BYTES] [--cpus=N] "
          "[--pids=N] [--sentry-seccomp=on|off] [--systrap-patch=on|off] "
          "[--kvm-vcpu-pool=background|eager] "
          "[--kvm-shadow=zap|flush] [--kvm-fpu=lazy|eager] [--stats-json=PATH] -- PROGRAM [ARGS...]\n"
          "       sentry serve --control-fd=N [--platform=systrap|kvm] "
          "[--isolation=on|off] [--sentry-seccomp=on|off] "
          "[--kvm-vcpu-pool=background|eager] [--systrap-patch=on|off]\n");
}

// --NAME=VALUE for an option of a platform back-end (registry.h): checked
// and kept in `out`. False for any other argument.
bool PlatformOption(absl::string_view a, platform::OptionValues* out) {
  if (!absl::ConsumePrefix(&a, "--")) return false;
  size_t eq = a.find('=');
  if (eq == absl::string_view::npos) return false;
  absl::string_view name = a.substr(0, eq), value = a.substr(eq + 1);
  const platform::Backend* b = platform::Registry::Get().OwnerOfFlag(name);
  if (b == nullptr) return false;
  if (absl::Status s = b->CheckOption(name, value); !s.ok()) {
    Die(kExitUsage, std::string(s.message()));
  }
  (*out)[std::string(name)] = std::string(value);
  return true;
}

// `sentry serve`'s flags; never returns.
[[noreturn]] void ServeMain(int argc, char** argv) {
  serve::Options o;
  for (int i = 2; i < argc; i++) {
    std::string a = argv[i];
    if (absl::StartsWith(a, "--control-fd=")) {
      if (!absl::SimpleAtoi(a.substr(13), &o.control_fd) || o.control_fd < 0) {
        Die(kExitUsage, absl::StrCat("--control-fd wants a descriptor, got: ",
                                     a.substr(13)));
      }
    } else if (absl::StartsWith(a, "--platform=")) {
      o.platform = a.substr(11);
    } else if (a == "--sentry-seccomp=on" || a == "--sentry-seccomp=off") {
      o.sentry_seccomp = a == "--sentry-seccomp=on";
    } else if (a == "--isolation=on" || a == "--isolation=off") {
      o.isolate = a == "--isolation=on";
    } else if (a == "--vdso=tsc" || a == "--vdso=syscall") {
      o.vdso_tsc = a == "--vdso=tsc";
    } else if (PlatformOption(a, &o.platform_options)) {
    } else {
      Usage();
      Die(kExitUsage, absl::StrCat("unknown flag: ", a));
    }
  }
  if (o.control_fd < 0) {
    Usage();
    Die(kExitUsage, "serve needs --control-fd=N");
  }
  if (auto b = platform::Registry::Get().Lookup(o.platform); !b.ok()) {
    Die(kExitUsage, std::string(b.status().message()));
  }
  int status = serve::Serve(o);
  fflush(stderr);
  _exit(status);
}

struct Options {
  std::string platform = platform::Registry::Get().DefaultName();
  std::string rootfs = "/";
  std::string cwd = "/";
  std::string hostname = "sandbox";
  std::vector<std::string> env;
  std::vector<std::string> argv;
  bool log_unimplemented = false;
  bool strace = false;
  // --vdso=syscall: the vDSO makes every call a system call (for tests
  // and benchmarks of the trapping path); default: served from the TSC.
  bool vdso_tsc = true;
  // --systrap-fastpath=..., --kvm-vcpu-pool=..., ...: the platforms'
  // options (platforms/registry.h).
  platform::OptionValues platform_options;
  // The limits a daemon's spec would carry, as the sandbox sees them
  // (/proc/meminfo, nproc, fork's EAGAIN); nothing enforces them on the host.
  boot::Limits limits;
  // --sentry-seccomp=off: no seccomp filter on the Sentry's own host
  // calls (host_filter.h), for debugging.
  bool sentry_seccomp = true;
  // --stats-json=PATH: where the platform's counters go at the end.
  std::string stats_json;
};

Options ParseArgs(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) ServeMain(argc, argv);
  if (argc < 2 || (std::strcmp(argv[1], "run") != 0)) {
    Usage();
    if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 ||
                      std::strcmp(argv[1], "-h") == 0)) {
      _exit(0);
    }
    Die(kExitUsage, argc < 2 ? "missing command (want: run or serve)"
                             : absl::StrCat("unknown command: ", argv[1]));
  }
  Options o;
  int i = 2;
  for (; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--") {
      i++;
      break;
    }
    auto value = [&](absl::string_view name, std::string* out) {
      std::string prefix = absl::StrCat(name, "=");
      if (absl::StartsWith(a, prefix)) {
        *out = a.substr(prefix.size());
        return true;
      }
      return false;
    };
    std::string v;
    if (value("--platform", &o.platform) || value("--rootfs", &o.rootfs) ||
        value("--cwd", &o.cwd) || value("--hostname", &o.hostname) ||
        value("--stats-json", &o.stats_json)) {
      continue;
    }
    if (value("--env", &v)) {
      if (v.find('=') == std::string::npos || v[0] == '=') {
        Die(kExitUsage, absl::StrCat("--env wants K=V, got: ", v));
      }
      o.env.push_back(v);
      continue;
    }
    if (a == "--log-unimplemented") {
      o.log_unimplemented = true;
      continue;
    }
    if (a == "--strace") {
      o.strace = true;
      continue;
    }
    if (value("--memory", &v) || value("--cpus", &v) || value("--pids", &v)) {
      uint64_t n = 0;
      if (!absl::SimpleAtoi(v, &n) || n == 0) {
        Die(kExitUsage, absl::StrCat(a.substr(0, a.find('=')),
                                     " wants a positive number, got: ", v));
      }
      if (absl::StartsWith(a, "--memory=")) o.limits.memory_bytes = n;
      if (absl::StartsWith(a, "--cpus=")) o.limits.cpu_millis = n * 1000;
      if (absl::StartsWith(a, "--pids=")) o.limits.pids = n;
      continue;
    }
    if (a == "--sentry-seccomp=on" || a == "--sentry-seccomp=off") {
      o.sentry_seccomp = a == "--sentry-seccomp=on";
      continue;
    }
    if (value("--vdso", &v)) {
      if (v != "tsc" && v != "syscall") {
        Die(kExitUsage, absl::StrCat("--vdso wants tsc or syscall, got: ", v));
      }
      o.vdso_tsc = v == "tsc";
      continue;
    }
    if (PlatformOption(a, &o.platform_options)) continue;
    if (absl::StartsWith(a, "-")) {
      Usage();
      Die(kExitUsage, absl::StrCat("unknown flag: ", a));
    }
    break;  // the program, without "--"
  }
  for (; i < argc; i++) o.argv.push_back(argv[i]);
  if (o.argv.empty()) {
    Usage();
    Die(kExitUsage, "no program to run");
  }
  if (auto b = platform::Registry::Get().Lookup(o.platform); !b.ok()) {
    Die(kExitUsage, std::string(b.status().message()));
  }
  return o;
}

// The platform's counters as one JSON object (field names as in the proto)
// into `fd`, opened before the Sentry's seccomp filter forbids opening files.
void WriteStatsJson(platform::Platform& p, int fd) {
  control::PlatformStats st;
  p.ExportStats(&st);
  std::string json;
  google::protobuf::util::JsonPrintOptions jo;
  jo.always_print_primitive_fields = true;
  jo.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(st, &json, jo).ok()) return;
  json += "\n";
  for (size_t done = 0; done < json.size();) {
    ssize_t n = write(fd, json.data() + done, json.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fprintf(stderr, "sentry: --stats-json: write: %s\n", strerror(errno));
      return;
    }
    done += n;
  }
}

int Run(const Options& o) {
  // Before anything maps large ranges or starts threads.
  if (absl::Status s = platform::Registry::Get().InitProcess(); !s.ok()) {
    Die(kExitUsage, std::string(s.message()));
  }
  // Terminal and termination signals are the sandbox's: a thread below
  // forwards them to its init. Blocked here so every thread inherits that.
  sigset_t fwd;
  sigemptyset(&fwd);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGWINCH}) {
    sigaddset(&fwd, s);
  }
  // On a host terminal ^Z is the sandbox's too: it stops the sandbox's
  // foreground job, not the Sentry.
  const bool on_tty = isatty(STDIN_FILENO) == 1;
  if (on_tty) sigaddset(&fwd, SIGTSTP);
  pthread_sigmask(SIG_BLOCK, &fwd, nullptr);
  signal(SIGPIPE, SIG_IGN);

  boot::StageClock clock;
  boot::PrewarmOptions popts;
  popts.platform = o.platform;
  popts.vdso_tsc = o.vdso_tsc;
  popts.platform_options = o.platform_options;
  popts.sentry_seccomp = o.sentry_seccomp;
  auto pw = boot::Prewarm(popts, &clock);
  if (!pw.ok()) Die(kExitUsage, std::string(pw.status().message()));

  boot::SandboxConfig config;
  auto root_fd = fs::OpenRootfs(o.rootfs);
  if (!root_fd.ok()) Die(kExitUsage, std::string(root_fd.status().message()));
  config.rootfs = std::move(*root_fd);
  config.init.argv = o.argv;
  config.init.env = o.env;
  config.init.cwd = o.cwd;
  config.hostname = o.hostname;
  config.strace = o.strace;
  config.limits = o.limits;
  // The Sentry's own stdio, shared with the sandbox; the host terminal,
  // when stdin is one, is the sandbox's console and its init's controlling
  // terminal.
  boot::Stdio stdio;
  stdio.terminal = on_tty;
  for (int fd = 0; fd < 3; fd++) {
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d >= 0) stdio.fds[fd] = UniqueFd(d);
  }
  auto sb = boot::Sandbox::Create(std::move(*pw), std::move(config),
                                  std::move(stdio), &clock);
  if (!sb.ok()) {
    Die(boot::ShellExitCodeFor(sb.status()), std::string(sb.status().message()));
  }
  // Lives until _exit (boot.h).
  boot::Sandbox* sandbox = sb->release();
  kernel::Kernel& k = sandbox->kernel();
  std::shared_ptr<fs::tty::HostTerminal> console = sandbox->console();

  // Signals for the sandbox. What the host terminal generates (it sends
  // them to its foreground group, the Sentry's) goes to the sandbox's
  // foreground process group, a resize as SIGWINCH to it; the rest to init.
  std::thread forwarder([&k, &fwd, console] {
    for (;;) {
      int sig = sigwaitinfo(&fwd, nullptr);
      if (sig <= 0) continue;
      if (console != nullptr) {
        pid_t fg = console->foreground();
        if (sig == SIGWINCH) {
          console->HostResized();
          continue;
        }
        if ((sig == SIGINT || sig == SIGQUIT || sig == SIGTSTP) && fg > 0) {
          k.SignalPgrp(fg, sig);
          continue;
        }
      }
      std::shared_ptr<kernel::Task> t = k.FindTask(1);
      if (t != nullptr) t->SendSignal(sig, 0);
    }
  });
  forwarder.detach();

  UniqueFd stats_fd;
  if (!o.stats_json.empty()) {
    stats_fd = UniqueFd(open(o.stats_json.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!stats_fd.valid()) {
      Die(kExitUsage, absl::StrCat("--stats-json: ", o.stats_json, ": ", strerror(errno)));
    }
  }
  if (absl::Status s = sandbox->Start(); !s.ok()) {
    Die(kExitUsage, std::string(s.message()));
  }
  kernel::ExitStatus st = sandbox->Wait();
  if (stats_fd.valid()) WriteStatsJson(k.platform(), stats_fd.get());
  if (o.log_unimplemented) {
    for (const auto& [nr, count] : k.UnimplementedCounts()) {
      const char* name =
          nr < syscalls::kMaxSyscall ? sandbox->table().entry(nr).name : nullptr;
      fprintf(stderr, "sentry: unimplemented syscall %lu%s%s: %lu calls\n",
              static_cast<unsigned long>(nr), name ? " " : "", name ? name : "",
              static_cast<unsigned long>(count));
    }
  }
  return st.ShellStatus();
}

}  // namespace
}  // namespace sandboxd

int main(int argc, char** argv) {
  // Debian's Abseil is built without NDEBUG, so absl::Mutex keeps its
  // deadlock detector on: every lock updates a global lock graph (~27 ns a
  // lock here, bench/README.md), on the syscall path. The unit tests keep it
  // (they are where a lock-order bug should show); the Sentry does not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sandboxd::Options o = sandboxd::ParseArgs(argc, argv);
  int status = sandboxd::Run(o);
  fflush(stdout);
  fflush(stderr);
  _exit(status);
}
