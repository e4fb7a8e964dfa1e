// sandboxctl: the command line of sandboxd.
//
//   sandboxctl [--socket=PATH | --tcp=HOST:PORT --ca-cert=FILE --token-file=FILE]
//              COMMAND [ARGS...]
//
// Commands: run, create, start, exec, ps (list), logs, kill, rm, inspect,
// wait, checkpoint. `sandboxctl help` lists their flags. The socket is
// --socket, else $SANDBOXD_SOCKET, else /run/sandboxd/sandboxd.sock.
//
// Exit status: run, exec and wait exit as the program did (128+N for signal
// N); 125 for an error of sandboxctl or the daemon (one line on stderr),
// 127 when the program to run does not exist, 126 when it cannot be run.
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "daemon/auth.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"

namespace sandboxd {
namespace client {
namespace {

constexpr int kExitError = 125;
constexpr int kExitCannotRun = 126;
constexpr int kExitNotFound = 127;

const char kUsage[] =
    "usage: sandboxctl [--socket=PATH | --tcp=HOST:PORT --ca-cert=FILE --token-file=FILE]\n"
    "                  COMMAND [ARGS...]\n"
    "\n"
    "commands:\n"
    "  run [--rm] [-i] [-t] [-d] [SPEC FLAGS] -- PROGRAM [ARGS...]\n"
    "                       create + start + attach + wait; exits as the program\n"
    "  create [SPEC FLAGS] -- PROGRAM [ARGS...]   prints the new sandbox's id\n"
    "  start ID\n"
    "  exec [-i] [-t] [--env=K=V] [--cwd=DIR] ID -- PROGRAM [ARGS...]\n"
    "  ps | list [--json] [-q] [--label=K=V]\n"
    "  logs [-f] ID         output of the init program (kept by the daemon, 1 MiB)\n"
    "  kill [-s SIGNAL] [--all | --pid=N] ID   (N: a pid inside the sandbox)\n"
    "  rm [-f] ID...        destroy (-f: also running ones)\n"
    "  inspect ID           the sandbox as JSON\n"
    "  wait ID              exits as the init program did\n"
    "  checkpoint ID DIR\n"
    "\n"
    "spec flags: --name=ID --rootfs=DIR (default /) --env=K=V (-e) --cwd=DIR\n"
    "  --platform=systrap|kvm --hostname=NAME --network=none|host --label=K=V\n"
    "  --memory=BYTES[k|m|g] --cpus=N (e.g. 0.5) --pids=N --user=UID[:GID]\n"
    "  --systrap-patch=on|off (default: the daemon's)\n";

void RestoreTerminal();

// Ends the process without tearing gRPC down: its shutdown joins its
// threads with sleeps of a millisecond and more, a cost every command
// would pay after its work is done. Nothing is lost: the output is flushed
// here, and the kernel closes the connection to the daemon.
[[noreturn]] void QuickExit(int code) {
  RestoreTerminal();
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

[[noreturn]] void Fail(int code, const std::string& msg) {
  fprintf(stderr, "sandboxctl: %s\n", msg.c_str());
  QuickExit(code);
}

void FailOn(const absl::Status& s, const std::string& what = "") {
  if (s.ok()) return;
  Fail(kExitError, what.empty() ? std::string(s.message())
                                : absl::StrCat(what, ": ", s.message()));
}

// A tiny argument reader: --name=value, --name value, short flags, "--".
class Args {
 public:
  Args(int argc, char** argv, int start) : argv_(argv + start, argv + argc) {}
  bool Done() const { return i_ >= argv_.size(); }
  const std::string& Peek() const { return argv_[i_]; }
  std::string Next() { return argv_[i_++]; }
  bool IsFlag() const { return !Done() && argv_[i_].size() > 1 && argv_[i_][0] == '-'; }
  // --name=value or --name value (also for a short alias like -e).
  bool Value(std::initializer_list<const char*> names, std::string* out) {
    if (Done()) return false;
    const std::string& a = argv_[i_];
    for (const char* n : names) {
      if (a == n) {
        if (i_ + 1 >= argv_.size()) Fail(kExitError, absl::StrCat(n, " wants a value"));
        *out = argv_[i_ + 1];
        i_ += 2;
        return true;
      }
      if (absl::StartsWith(a, absl::StrCat(n, "="))) {
        *out = a.substr(strlen(n) + 1);
        i_++;
        return true;
      }
    }
    return false;
  }
  bool Bool(std::initializer_list<const char*> names) {
    if (Done()) return false;
    for (const char* n : names) {
      if (argv_[i_] == n) {
        i_++;
        return true;
      }
    }
    return false;
  }
  std::vector<std::string> Rest() {
    std::vector<std::string> r(argv_.begin() + i_, argv_.end());
    i_ = argv_.size();
    return r;
  }

 private:
  std::vector<std::string> argv_;
  size_t i_ = 0;
};

uint64_t ParseBytes(const std::string& v) {
  std::string s = absl::AsciiStrToLower(v);
  uint64_t mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'k': mult = 1ULL << 10; break;
      case 'm': mult = 1ULL << 20; break;
      case 'g': mult = 1ULL << 30; break;
      default: break;
    }
    if (mult != 1) s.pop_back();
  }
  uint64_t n;
  if (!absl::SimpleAtoi(s, &n)) Fail(kExitError, absl::StrCat("--memory: not a size: ", v));
  return n * mult;
}

bool KeyValue(const std::string& kv, std::string* k, std::string* v) {
  size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  *k = kv.substr(0, eq);
  *v = kv.substr(eq + 1);
  return true;
}

// Flags shared by run and create; returns false when `a` is not one.
bool SpecFlag(Args& a, v1::CreateRequest* req) {
  v1::SandboxSpec* spec = req->mutable_spec();
  v1::ProcessSpec* p = spec->mutable_process();
  std::string v, k, val;
  if (a.Value({"--name"}, &v)) {
    req->set_id(v);
  } else if (a.Value({"--rootfs"}, &v)) {
    spec->set_rootfs(v);
  } else if (a.Value({"--env", "-e"}, &v)) {
    p->add_env(v);
  } else if (a.Value({"--cwd", "-w"}, &v)) {
    p->set_cwd(v);
  } else if (a.Value({"--platform"}, &v)) {
    spec->set_platform(v);
  } else if (a.Value({"--systrap-patch"}, &v)) {
    if (v == "on") {
      spec->mutable_systrap()->set_patch(v1::SYSTRAP_PATCH_ON);
    } else if (v == "off") {
      spec->mutable_systrap()->set_patch(v1::SYSTRAP_PATCH_OFF);
    } else {
      Fail(kExitError, absl::StrCat("--systrap-patch: want on or off, got ", v));
    }
  } else if (a.Value({"--hostname"}, &v)) {
    spec->set_hostname(v);
  } else if (a.Value({"--network"}, &v)) {
    if (v == "none") {
      spec->set_network(v1::NETWORK_MODE_NONE);
    } else if (v == "host") {
      spec->set_network(v1::NETWORK_MODE_HOST);
    } else {
      Fail(kExitError, absl::StrCat("--network: want none or host, got ", v));
    }
  } else if (a.Value({"--label", "-l"}, &v)) {
    if (!KeyValue(v, &k, &val)) Fail(kExitError, absl::StrCat("--label wants K=V, got ", v));
    (*spec->mutable_labels())[k] = val;
  } else if (a.Value({"--memory", "-m"}, &v)) {
    spec->mutable_limits()->set_memory_bytes(ParseBytes(v));
  } else if (a.Value({"--cpus"}, &v)) {
    double cpus;
    if (!absl::SimpleAtod(v, &cpus) || cpus <= 0) {
      Fail(kExitError, absl::StrCat("--cpus: want a positive number, got ", v));
    }
    spec->mutable_limits()->set_cpu_millis(static_cast<uint64_t>(cpus * 1000 + 0.5));
  } else if (a.Value({"--pids"}, &v)) {
    uint64_t n;
    if (!absl::SimpleAtoi(v, &n)) Fail(kExitError, absl::StrCat("--pids: not a number: ", v));
    spec->mutable_limits()->set_pids(n);
  } else if (a.Value({"--user", "-u"}, &v)) {
    uint32_t uid = 0, gid = 0;
    std::string u = v, g;
    if (size_t c = v.find(':'); c != std::string::npos) {
      u = v.substr(0, c);
      g = v.substr(c + 1);
    }
    if (!absl::SimpleAtoi(u, &uid) || (!g.empty() && !absl::SimpleAtoi(g, &gid))) {
      Fail(kExitError, absl::StrCat("--user: want UID[:GID], got ", v));
    }
    p->mutable_user()->set_uid(uid);
    p->mutable_user()->set_gid(g.empty() ? uid : gid);
  } else {
    return false;
  }
  return true;
}

// PROGRAM [ARGS...] after an optional "--".
std::vector<std::string> Program(Args& a, const char* cmd) {
  if (!a.Done() && a.Peek() == "--") a.Next();
  std::vector<std::string> argv = a.Rest();
  if (argv.empty()) Fail(kExitError, absl::StrCat(cmd, ": no program given (", cmd, " ... -- PROGRAM [ARGS...])"));
  return argv;
}

void DefaultEnv(v1::ProcessSpec* p, bool tty) {
  bool has_path = false, has_term = false;
  for (const std::string& e : p->env()) {
    has_path |= absl::StartsWith(e, "PATH=");
    has_term |= absl::StartsWith(e, "TERM=");
  }
  if (!has_path) p->add_env("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  if (tty && !has_term) {
    const char* term = getenv("TERM");
    p->add_env(absl::StrCat("TERM=", term != nullptr ? term : "xterm"));
  }
}

// ---------------------------------------------------------------- terminal

struct termios saved_termios;
bool raw_mode = false;
int winch_pipe[2] = {-1, -1};

void RestoreTerminal() {
  if (raw_mode) tcsetattr(STDIN_FILENO, TCSADRAIN, &saved_termios);
  raw_mode = false;
}

void OnWinch(int) {
  const char c = 0;
  (void)!write(winch_pipe[1], &c, 1);
}

// Raw mode on the local terminal and SIGWINCH -> resize, for -t.
void SetUpTty(ExecIo* io) {
  if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_termios) == 0) {
    struct termios raw = saved_termios;
    cfmakeraw(&raw);
    if (tcsetattr(STDIN_FILENO, TCSADRAIN, &raw) == 0) {
      raw_mode = true;
      atexit(RestoreTerminal);
    }
  }
  if (pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
    struct sigaction sa = {};
    sa.sa_handler = OnWinch;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGWINCH, &sa, nullptr);
    io->resize_fd = winch_pipe[0];
  }
  io->get_size = [](uint32_t* rows, uint32_t* cols) {
    struct winsize ws = {};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 &&
        ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) != 0) {
      return false;
    }
    *rows = ws.ws_row;
    *cols = ws.ws_col;
    return true;
  };
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

ExecIo StdIo(bool interactive, bool tty) {
  ExecIo io;
  if (interactive) io.stdin_fd = STDIN_FILENO;
  io.on_stdout = [](absl::string_view d) { WriteAll(STDOUT_FILENO, d); };
  io.on_stderr = [](absl::string_view d) { WriteAll(STDERR_FILENO, d); };
  if (tty) SetUpTty(&io);
  return io;
}

// Forwards SIGINT, SIGTERM and SIGHUP to the sandbox's init (not with -t:
// the terminal sends ^C as input), as `docker run` does.
void ProxySignals(Client* c, const std::string& id) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([c, id, set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) return;
      (void)c->Signal(id, sig);
    }
  }).detach();
}

// The exit code for a start that failed: the program is missing (127) or
// cannot be run (126); anything else is an error (125).
int StartFailureCode(const absl::Status& s) {
  // Only the start of the program itself, not an unknown sandbox id.
  if (!absl::StrContains(s.message(), ": start: ")) return kExitError;
  if (absl::IsNotFound(s)) return kExitNotFound;
  if (absl::IsPermissionDenied(s)) return kExitCannotRun;
  return kExitError;
}

std::string ExitText(const v1::ExitStatus& e) {
  if (!e.error().empty()) return absl::StrCat("failed: ", e.error());
  if (e.status_case() == v1::ExitStatus::kSignal) {
    return absl::StrCat("killed by signal ", e.signal());
  }
  return absl::StrCat("exited ", e.code());
}

// ---------------------------------------------------------------- commands

// For --timings: when main() was entered and when the command's first call
// began.
absl::Time main_entered;
absl::Time call_started;

// The process's own steps before its call: from $SANDBOXCTL_T0 (the
// caller's clock just before it started sandboxctl, in seconds since the
// epoch, e.g. bash's $EPOCHREALTIME; the step is left out without it) to
// main(): fork, exec, the loading and static initializers of the binary;
// then from main() to the call: arguments, gRPC's start-up, the channel.
void PrintProcessTimings() {
  auto line = [](const char* name, absl::Duration d) {
    fprintf(stderr, "sandboxctl: timing: %s %.3f ms\n", name, absl::ToDoubleMilliseconds(d));
  };
  const char* t0 = getenv("SANDBOXCTL_T0");
  double secs = 0;
  if (t0 != nullptr && absl::SimpleAtod(t0, &secs) && secs > 0) {
    line("client.t0_to_main", main_entered - absl::FromUnixNanos(static_cast<int64_t>(secs * 1e9)));
  }
  line("client.main_to_call", call_started - main_entered);
}

// --timings: where a run's time went, one "sandboxctl: timing: NAME MS"
// line per step on stderr: the client's call(s) and the steps of its Exec
// call, then the daemon's and the Sentry's steps (Timings.stages, from the
// exit message; from Get when the daemon did not send them).
void PrintTimings(Client& c, const std::string& id, bool separate_create, absl::Duration run,
                  const ExecTrace& trace) {
  auto line = [](const std::string& name, double ms) {
    fprintf(stderr, "sandboxctl: timing: %s %.3f ms\n", name.c_str(), ms);
  };
  PrintProcessTimings();
  if (separate_create && !trace.steps.empty()) {
    // Create, then Exec (an older daemon); the first step is the create.
    line("client.create", absl::ToDoubleMilliseconds(trace.steps[0].second));
    line("client.attach_run_exit", absl::ToDoubleMilliseconds(run - trace.steps[0].second));
  } else {
    // One Exec call created the sandbox too (Start.create).
    line("client.create_attach_run_exit", absl::ToDoubleMilliseconds(run));
  }
  for (size_t i = separate_create ? 1 : 0; i < trace.steps.size(); i++) {
    line(trace.steps[i].first, absl::ToDoubleMilliseconds(trace.steps[i].second));
  }
  v1::Timings t = trace.timings;
  if (!trace.has_timings) {
    absl::StatusOr<v1::SandboxInfo> info = c.Get(id);
    if (!info.ok()) return;
    t = info->timings();
  }
  line(t.pool_hit() ? "daemon.create_total.pool_hit" : "daemon.create_total.pool_miss",
       t.create_latency().seconds() * 1e3 + t.create_latency().nanos() / 1e6);
  for (const v1::Stage& s : t.stages()) {
    line(absl::StrCat("daemon.", s.name()),
         s.duration().seconds() * 1e3 + s.duration().nanos() / 1e6);
  }
  // From the Sentry's reply to Start to the init's exit, as the daemon saw it.
  if (t.has_started() && t.has_exited()) {
    using google::protobuf::util::TimeUtil;
    line("daemon.init_started_to_exited",
         TimeUtil::DurationToNanoseconds(t.exited() - t.started()) / 1e6);
  }
}

int Run(Client& c, Args& a, bool create_only) {
  v1::CreateRequest req;
  bool rm = false, interactive = false, tty = false, detach = false, timings = false;
  while (a.IsFlag() && a.Peek() != "--") {
    if (SpecFlag(a, &req)) continue;
    if (!create_only && a.Bool({"--rm"})) {
      rm = true;
    } else if (!create_only && a.Bool({"-i", "--interactive"})) {
      interactive = true;
    } else if (!create_only && a.Bool({"-t", "--tty"})) {
      tty = true;
    } else if (!create_only && (a.Bool({"-it", "-ti"}))) {
      interactive = tty = true;
    } else if (!create_only && a.Bool({"--timings"})) {
      timings = true;
    } else if (!create_only && a.Bool({"-d", "--detach"})) {
      detach = true;
    } else if (create_only && a.Bool({"-t", "--tty"})) {
      tty = true;
    } else {
      Fail(kExitError, absl::StrCat("unknown flag: ", a.Peek(), " (see sandboxctl help)"));
    }
  }
  v1::SandboxSpec* spec = req.mutable_spec();
  for (const std::string& s : Program(a, create_only ? "create" : "run")) {
    spec->mutable_process()->add_argv(s);
  }
  if (spec->rootfs().empty()) spec->set_rootfs("/");
  spec->mutable_process()->set_tty(tty);
  DefaultEnv(spec->mutable_process(), tty);

  const absl::Time t0 = absl::Now();
  call_started = t0;
  std::string id;
  auto create = [&] {
    absl::StatusOr<v1::CreateResponse> created = c.Create(req);
    FailOn(created.status());
    id = created->id();
  };
  auto remove = [&] {
    if (rm && !id.empty()) (void)c.Destroy(id);
  };
  if (create_only || detach) {
    create();
    if (create_only) {
      printf("%s\n", id.c_str());
      return 0;
    }
    absl::Status s = c.Start(id);
    if (!s.ok()) {
      remove();
      Fail(StartFailureCode(s), std::string(s.message()));
    }
    printf("%s\n", id.c_str());
    return 0;
  }
  ExecIo io = StdIo(interactive, tty);
  // With --rm the daemon destroys the sandbox once the call ends, off our
  // path; an older daemon that does not says so, and we destroy it here.
  io.remove = rm;
  ExecTrace trace;
  io.trace = &trace;
  io.on_id = [&](const std::string& new_id) {
    id = new_id;
    if (!tty) ProxySignals(&c, id);
  };
  // Create and attach in one call (Start.create), or two with an older
  // daemon.
  bool separate_create = false;
  absl::StatusOr<v1::ExitStatus> exit = c.CreateAndAttach(req, std::move(io), &separate_create);
  RestoreTerminal();
  const absl::Time t2 = absl::Now();
  if (timings) PrintTimings(c, id, separate_create, t2 - t0, trace);
  if (!trace.removed) {
    const absl::Time t3 = absl::Now();
    remove();
    if (timings && rm) {
      fprintf(stderr, "sandboxctl: timing: client.destroy %.3f ms\n",
              absl::ToDoubleMilliseconds(absl::Now() - t3));
    }
  }
  if (!exit.ok()) Fail(StartFailureCode(exit.status()), std::string(exit.status().message()));
  if (!exit->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", exit->error()));
  return ExitCode(*exit);
}

int Exec(Client& c, Args& a) {
  v1::ProcessSpec p;
  bool interactive = false, tty = false;
  std::string v;
  while (a.IsFlag() && a.Peek() != "--") {
    if (a.Bool({"-i", "--interactive"})) {
      interactive = true;
    } else if (a.Bool({"-t", "--tty"})) {
      tty = true;
    } else if (a.Bool({"-it", "-ti"})) {
      interactive = tty = true;
    } else if (a.Value({"--env", "-e"}, &v)) {
      p.add_env(v);
    } else if (a.Value({"--cwd", "-w"}, &v)) {
      p.set_cwd(v);
    } else {
      Fail(kExitError, absl::StrCat("unknown flag: ", a.Peek()));
    }
  }
  if (a.Done()) Fail(kExitError, "exec: which sandbox? (exec ID -- PROGRAM [ARGS...])");
  const std::string id = a.Next();
  for (const std::string& s : Program(a, "exec")) p.add_argv(s);
  p.set_tty(tty);
  DefaultEnv(&p, tty);
  ExecIo io = StdIo(interactive, tty);
  absl::StatusOr<v1::ExitStatus> exit = c.Exec(id, /*attach=*/false, p, std::move(io));
  RestoreTerminal();
  if (!exit.ok()) Fail(StartFailureCode(exit.status()), std::string(exit.status().message()));
  if (!exit->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", exit->error()));
  return ExitCode(*exit);
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

int Ps(Client& c, Args& a) {
  bool json = false, quiet = false;
  std::map<std::string, std::string> labels;
  std::string v, k, val;
  while (!a.Done()) {
    if (a.Bool({"--json"})) {
      json = true;
    } else if (a.Bool({"-q", "--quiet"})) {
      quiet = true;
    } else if (a.Value({"--label", "-l"}, &v)) {
      if (!KeyValue(v, &k, &val)) Fail(kExitError, absl::StrCat("--label wants K=V, got ", v));
      labels[k] = val;
    } else {
      Fail(kExitError, absl::StrCat("ps: unknown argument: ", a.Peek()));
    }
  }
  absl::StatusOr<std::vector<v1::SandboxInfo>> list = c.List(labels);
  FailOn(list.status());
  if (json) {
    v1::ListResponse r;
    for (auto& s : *list) *r.add_sandboxes() = s;
    std::string out = ToJson(r);
    // An empty list prints as {} (proto3 omits empty fields): spell it out.
    if (list->empty()) out = "{\n \"sandboxes\": []\n}\n";
    fputs(out.c_str(), stdout);
    return 0;
  }
  if (quiet) {
    for (auto& s : *list) printf("%s\n", s.id().c_str());
    return 0;
  }
  printf("%-14s %-8s %-8s %-10s %-12s %s\n", "ID", "STATE", "PLATFORM", "CREATED", "STATUS",
         "COMMAND");
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  for (auto& s : *list) {
    absl::string_view state_name = v1::SandboxState_Name(s.state());
    absl::ConsumePrefix(&state_name, "SANDBOX_STATE_");
    const std::string state(state_name);
    const int64_t age = now - s.timings().created().seconds();
    std::string created = age < 120 ? absl::StrCat(age, "s ago")
                          : age < 7200 ? absl::StrCat(age / 60, "m ago")
                                       : absl::StrCat(age / 3600, "h ago");
    std::string status = s.has_exit() ? ExitText(s.exit()) : "";
    printf("%-14s %-8s %-8s %-10s %-12s %s\n", s.id().c_str(),
           absl::AsciiStrToLower(state).c_str(), s.spec().platform().c_str(), created.c_str(),
           status.c_str(), absl::StrJoin(s.spec().process().argv(), " ").c_str());
  }
  return 0;
}

int Logs(Client& c, Args& a) {
  bool follow = a.Bool({"-f", "--follow"});
  if (a.Done()) Fail(kExitError, "logs: which sandbox? (logs [-f] ID)");
  const std::string id = a.Next();
  FailOn(c.Logs(id, follow, [](const v1::LogsResponse& m) {
    if (m.dropped_bytes() > 0) {
      fprintf(stderr, "sandboxctl: (%llu earlier bytes were dropped from the log)\n",
              static_cast<unsigned long long>(m.dropped_bytes()));
    }
    if (m.msg_case() == v1::LogsResponse::kStdout) WriteAll(STDOUT_FILENO, m.stdout());
    if (m.msg_case() == v1::LogsResponse::kStderr) WriteAll(STDERR_FILENO, m.stderr());
  }));
  return 0;
}

int ParseSignal(const std::string& v) {
  int n;
  if (absl::SimpleAtoi(v, &n)) return n;
  const std::string upper = absl::AsciiStrToUpper(v);
  absl::string_view name = upper;
  absl::ConsumePrefix(&name, "SIG");
  for (int s = 1; s < 32; s++) {
    const char* abbrev = sigabbrev_np(s);
    if (abbrev != nullptr && name == abbrev) return s;
  }
  Fail(kExitError, absl::StrCat("unknown signal: ", v));
}

int Kill(Client& c, Args& a) {
  int sig = SIGKILL;
  bool all = false;
  int pid = 0;
  std::string v;
  while (a.IsFlag()) {
    if (a.Value({"-s", "--signal"}, &v)) {
      sig = ParseSignal(v);
    } else if (a.Bool({"--all", "-a"})) {
      all = true;
    } else if (a.Value({"--pid", "-p"}, &v)) {
      if (!absl::SimpleAtoi(v, &pid) || pid <= 0) {
        Fail(kExitError, absl::StrCat("--pid: want a pid inside the sandbox, got ", v));
      }
    } else {
      Fail(kExitError, absl::StrCat("kill: unknown flag: ", a.Peek()));
    }
  }
  if (a.Done()) Fail(kExitError, "kill: which sandbox? (kill [-s SIGNAL] [--all | --pid=N] ID)");
  FailOn(c.Signal(a.Next(), sig, all, pid));
  return 0;
}

int Rm(Client& c, Args& a) {
  bool force = a.Bool({"-f", "--force"});
  if (a.Done()) Fail(kExitError, "rm: which sandbox? (rm [-f] ID...)");
  int rc = 0;
  for (const std::string& id : a.Rest()) {
    if (!force) {
      absl::StatusOr<v1::SandboxInfo> info = c.Get(id);
      if (info.ok() && info->state() == v1::SANDBOX_STATE_RUNNING) {
        fprintf(stderr, "sandboxctl: sandbox %s is running (stop it first, or rm -f)\n",
                id.c_str());
        rc = kExitError;
        continue;
      }
    }
    absl::StatusOr<v1::ExitStatus> e = c.Destroy(id);
    if (!e.ok()) {
      fprintf(stderr, "sandboxctl: %s\n", std::string(e.status().message()).c_str());
      rc = kExitError;
      continue;
    }
    printf("%s\n", id.c_str());
  }
  return rc;
}

int Inspect(Client& c, Args& a) {
  if (a.Done()) Fail(kExitError, "inspect: which sandbox? (inspect ID)");
  absl::StatusOr<v1::SandboxInfo> info = c.Get(a.Next());
  FailOn(info.status());
  fputs(ToJson(*info).c_str(), stdout);
  return 0;
}

int Wait(Client& c, Args& a) {
  if (a.Done()) Fail(kExitError, "wait: which sandbox? (wait ID)");
  const std::string id = a.Next();
  absl::StatusOr<v1::ExitStatus> e = c.Wait(id);
  FailOn(e.status());
  if (!e->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", e->error()));
  return ExitCode(*e);
}

int Checkpoint(Client& c, Args& a) {
  v1::CheckpointRequest req;
  if (a.Done()) Fail(kExitError, "checkpoint: which sandbox? (checkpoint ID DIR)");
  req.set_id(a.Next());
  if (a.Done()) Fail(kExitError, "checkpoint: where to? (checkpoint ID DIR)");
  req.set_image_dir(a.Next());
  FailOn(c.Checkpoint(req));
  return 0;
}

int Main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Args a(argc, argv, 1);
  ConnectOptions co;
  std::string socket, token_file, v;
  while (a.IsFlag()) {
    if (a.Bool({"--help", "-h"})) {
      fputs(kUsage, stdout);
      return 0;
    }
    if (a.Value({"--socket"}, &socket) || a.Value({"--tcp"}, &co.tcp_address) ||
        a.Value({"--ca-cert"}, &co.ca_cert_file) || a.Value({"--token-file"}, &token_file)) {
      continue;
    }
    fputs(kUsage, stderr);
    Fail(kExitError, absl::StrCat("unknown flag: ", a.Peek()));
  }
  if (a.Done()) {
    fputs(kUsage, stderr);
    return kExitError;
  }
  const std::string cmd = a.Next();
  if (cmd == "help") {
    fputs(kUsage, stdout);
    return 0;
  }
  co.socket = SocketFromEnv(socket);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = daemon::ReadTokenFile(token_file);
    FailOn(token.status());
    co.token = *token;
  }
  if (co.tcp_address.empty() && access(co.socket.c_str(), F_OK) != 0) {
    Fail(kExitError, absl::StrCat("sandboxd is not running (no socket at ", co.socket,
                                  "); start it with: sandboxd --socket=", co.socket));
  }
  co.connect_now = true;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(co);
  FailOn(c.status());
  // Never destroyed: the process ends with QuickExit, and destroying the
  // last channel would shut gRPC down, joining its threads (milliseconds).
  Client& client = *c->release();
  // Without connect_now's connection (TCP, or a failed connect), gRPC's
  // threads connect while this one reads the command's arguments.
  client.ConnectInBackground();
  if (cmd == "run") return Run(client, a, false);
  if (cmd == "create") return Run(client, a, true);
  if (cmd == "start") {
    if (a.Done()) Fail(kExitError, "start: which sandbox? (start ID)");
    absl::Status s = client.Start(a.Next());
    if (!s.ok()) Fail(StartFailureCode(s), std::string(s.message()));
    return 0;
  }
  if (cmd == "exec") return Exec(client, a);
  if (cmd == "ps" || cmd == "list" || cmd == "ls") return Ps(client, a);
  if (cmd == "logs") return Logs(client, a);
  if (cmd == "kill") return Kill(client, a);
  if (cmd == "rm") return Rm(client, a);
  if (cmd == "inspect") return Inspect(client, a);
  if (cmd == "wait") return Wait(client, a);
  if (cmd == "checkpoint") return Checkpoint(client, a);
  Fail(kExitError, absl::StrCat("unknown command: ", cmd, " (see sandboxctl help)"));
}

}  // namespace
}  // namespace client
}  // namespace sandboxd

int main(int argc, char** argv) {
  sandboxd::client::main_entered = absl::Now();
  // Debian's Abseil is built with its Mutex deadlock detection on: every
  // lock of gRPC's mutexes updated a lock graph (a few % of a command's
  // CPU). A client process that lives for one command does not need it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sandboxd::client::QuickExit(sandboxd::client::Main(argc, argv));
}
