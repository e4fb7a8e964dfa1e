// sandboxctl run: create + start + attach + wait, in one Exec call
// (Start.create); exits as the program did. Also the spec flags that run
// and create share.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/stage_clock.h"
#include "client/sandboxctl/sandboxctl.h"
#include "client/sandboxctl/sig_proxy.h"
#include "client/sandboxctl/terminal.h"
#include "proto/mount_spec.h"
#include "google/protobuf/util/time_util.h"

namespace sandboxd::client::ctl {

absl::StatusOr<uint64_t> ParseBytes(absl::string_view v) {
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
  if (!absl::SimpleAtoi(s, &n)) {
    return absl::InvalidArgumentError(absl::StrCat("not a size: ", v));
  }
  return n * mult;
}

namespace {


// The process's own steps before its call: from $SANDBOXCTL_T0 (the
// caller's clock just before it started sandboxctl, in seconds since the
// epoch, e.g. bash's $EPOCHREALTIME; the step is left out without it) to
// main(): fork, exec, the loading and static initializers of the binary;
// then from main() to the call: arguments, gRPC's start-up, the channel.
void PrintProcessTimings() {
  auto line = [](Stage s, absl::Duration d) {
    fprintf(stderr, "sandboxctl: timing: %s %.3f ms\n", std::string(StageName(s)).c_str(),
            absl::ToDoubleMilliseconds(d));
  };
  const char* t0 = getenv("SANDBOXCTL_T0");
  double secs = 0;
  if (t0 != nullptr && absl::SimpleAtod(t0, &secs) && secs > 0) {
    line(Stage::kClientT0ToMain, main_entered - absl::FromUnixNanos(static_cast<int64_t>(secs * 1e9)));
  }
  line(Stage::kClientMainToCall, call_started - main_entered);
}

// --timings: where a run's time went, one "sandboxctl: timing: NAME MS"
// line per step on stderr: the client's call and the steps of its Exec
// call, then the daemon's and the Sentry's steps (Timings.stages, from the
// exit message; from Get when the daemon did not send them).
void PrintTimings(Client& c, const std::string& id, absl::Duration run,
                  const ExecTrace& trace) {
  auto line = [](const std::string& name, double ms) {
    fprintf(stderr, "sandboxctl: timing: %s %.3f ms\n", name.c_str(), ms);
  };
  PrintProcessTimings();
  // One Exec call created the sandbox too (Start.create).
  line(std::string(StageName(Stage::kClientCreateAttachRunExit)),
       absl::ToDoubleMilliseconds(run));
  for (const auto& [name, d] : trace.steps) {
    line(name, absl::ToDoubleMilliseconds(d));
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

bool ReadFileToString(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f),
              std::istreambuf_iterator<char>());
  return !f.bad();
}

}  // namespace

void SpecFlags(flags::FlagSet& fs, v1::CreateRequest* req) {
  v1::SandboxSpec* spec = req->mutable_spec();
  v1::ProcessSpec* p = spec->mutable_process();
  auto set = [](auto f) {
    return [f](absl::string_view v) {
      f(std::string(v));
      return absl::OkStatus();
    };
  };
  fs.Func("name", "ID", "the sandbox's id (default: one is made up)",
          set([req](const std::string& v) { req->set_id(v); }));
  fs.Func("rootfs", "DIR", "the host directory that is the sandbox's root",
          set([spec](const std::string& v) { spec->set_rootfs(v); }),
          "the daemon's image, --default-rootfs");
  auto add_mount = [spec](absl::StatusOr<v1::Mount> m) -> absl::Status {
    if (!m.ok()) return m.status();
    *spec->add_mounts() = *std::move(m);
    return absl::OkStatus();
  };
  fs.Func("volume", "HOSTDIR:DIR[:ro|rw]",
          "bind-mount a host directory or file (writable unless :ro; "
          "repeatable)",
          [add_mount](absl::string_view v) { return add_mount(ParseVolumeFlag(v)); });
  fs.Alias("-v", "volume");
  fs.Func("mount", "type=bind|tmpfs,source=..,target=..[,readonly]",
          "a bind or tmpfs mount, docker's syntax (repeatable)",
          [add_mount](absl::string_view v) { return add_mount(ParseMountFlag(v)); });
  fs.Func("tmpfs", "DIR[:size=..,mode=..]", "a tmpfs mount (repeatable)",
          [add_mount](absl::string_view v) { return add_mount(ParseTmpfsFlag(v)); });
  fs.BoolFunc("read-only", "the root filesystem is read-only",
              [spec] { spec->set_read_only(true); });
  fs.Func("env", "K=V", "an environment variable (repeatable)",
          set([p](const std::string& v) { p->add_env(v); }));
  fs.Alias("-e", "env");
  // Docker's --env-file: one K=V a line (blank lines and # comments
  // skipped). Strings longer than the host's own execve takes (128 KiB)
  // can reach the sandbox only this way.
  fs.Func("env-file", "FILE", "environment variables, one K=V a line",
          [p](absl::string_view v) -> absl::Status {
            std::string text;
            if (!ReadFileToString(std::string(v), &text)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("--env-file: cannot read ", v));
            }
            for (absl::string_view line : absl::StrSplit(text, '\n')) {
              if (line.empty() || line[0] == '#') continue;
              p->add_env(std::string(line));
            }
            return absl::OkStatus();
          });
  fs.Func("cwd", "DIR", "the program's working directory",
          set([p](const std::string& v) { p->set_cwd(v); }));
  fs.Alias("-w", "cwd");
  fs.Func("platform", "NAME", "the platform, one of the daemon's --platforms",
          set([spec](const std::string& v) { spec->set_platform(v); }),
          "the daemon's default");
  fs.Func(
      "systrap-patch", "on|off", "systrap: patch hot syscall sites",
      [spec](absl::string_view v) {
        if (v == "on") {
          spec->mutable_systrap()->set_patch(v1::SYSTRAP_PATCH_ON);
        } else if (v == "off") {
          spec->mutable_systrap()->set_patch(v1::SYSTRAP_PATCH_OFF);
        } else {
          return absl::InvalidArgumentError(absl::StrCat("want on or off, got ", v));
        }
        return absl::OkStatus();
      },
      "the daemon's");
  fs.Func("checkpoint-dir", "DIR",
          "the program may checkpoint itself (a write to "
          "/proc/sandbox/checkpoint) into DIR/ID.N",
          [spec](absl::string_view v) {
            std::string dir(v);
            // The daemon wants an absolute path; a relative one is ours.
            if (!dir.empty() && dir[0] != '/') {
              char* cwd = getcwd(nullptr, 0);
              if (cwd != nullptr) {
                dir = absl::StrCat(cwd, "/", dir);
                free(cwd);
              }
            }
            spec->set_checkpoint_dir(dir);
            return absl::OkStatus();
          });
  fs.Func("checkpoint-limit", "N", "the most self-checkpoints (more: EDQUOT)",
          [spec](absl::string_view v) {
            uint32_t n;
            if (!absl::SimpleAtoi(v, &n) || n == 0) {
              return absl::InvalidArgumentError(
                  absl::StrCat("want a positive number, got ", v));
            }
            spec->set_checkpoint_limit(n);
            return absl::OkStatus();
          },
          "16");
  fs.Func("hostname", "NAME", "the sandbox's host name",
          set([spec](const std::string& v) { spec->set_hostname(v); }));
  NetworkFlags(fs, spec);
  fs.Func("label", "K=V", "a label (repeatable)", [spec](absl::string_view v) {
    std::string k, val;
    if (!KeyValue(std::string(v), &k, &val)) {
      return absl::InvalidArgumentError(absl::StrCat("wants K=V, got ", v));
    }
    (*spec->mutable_labels())[k] = val;
    return absl::OkStatus();
  });
  fs.Alias("-l", "label");
  fs.Func("memory", "BYTES[k|m|g]", "the memory limit", [spec](absl::string_view v) {
    absl::StatusOr<uint64_t> n = ParseBytes(v);
    if (!n.ok()) return n.status();
    spec->mutable_limits()->set_memory_bytes(*n);
    return absl::OkStatus();
  });
  fs.Alias("-m", "memory");
  fs.Func("cpus", "N", "the CPU limit (e.g. 0.5)", [spec](absl::string_view v) {
    double cpus;
    if (!absl::SimpleAtod(v, &cpus) || cpus <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("want a positive number, got ", v));
    }
    spec->mutable_limits()->set_cpu_millis(static_cast<uint64_t>(cpus * 1000 + 0.5));
    return absl::OkStatus();
  });
  fs.Func("pids", "N", "the most tasks at once", [spec](absl::string_view v) {
    uint64_t n;
    if (!absl::SimpleAtoi(v, &n)) {
      return absl::InvalidArgumentError(absl::StrCat("not a number: ", v));
    }
    spec->mutable_limits()->set_pids(n);
    return absl::OkStatus();
  });
  UserFlag(fs, p);
}

void FinishSpec(v1::CreateRequest* req, std::vector<std::string> program,
                bool tty) {
  v1::SandboxSpec* spec = req->mutable_spec();
  for (std::string& s : program) spec->mutable_process()->add_argv(std::move(s));
  spec->mutable_process()->set_tty(tty);
  DefaultEnv(spec->mutable_process(), tty);
}

int Run(Client& c, std::vector<std::string> args) {
  v1::CreateRequest req;
  bool rm = false, interactive = false, tty = false, detach = false, timings = false;
  flags::FlagSet fs("sandboxctl run", "[FLAGS] [--] PROGRAM [ARGS...]",
                    "create + start + attach + wait; exits as the program");
  fs.Bool("rm", &rm, "destroy the sandbox when the program is done");
  fs.Bool("interactive", &interactive, "send stdin to the program");
  fs.Alias("-i", "interactive");
  fs.Bool("tty", &tty, "give the program a terminal");
  fs.Alias("-t", "tty");
  fs.Bool("detach", &detach, "create and start, print the id, do not wait");
  fs.Alias("-d", "detach");
  fs.Bool("timings", &timings, "print where the time went, on stderr");
  bool sig_proxy = true;
  SigProxyFlag(fs, &sig_proxy);
  SpecFlags(fs, &req);
  // Parsed first: FinishSpec reads the flags' values.
  std::vector<std::string> program = Program(ParseFlags(fs, std::move(args)), 0, "run");
  FinishSpec(&req, std::move(program), tty);

  const absl::Time t0 = absl::Now();
  call_started = t0;
  std::string id;
  auto remove = [&] {
    if (rm && !id.empty()) (void)c.Destroy(id);
  };
  if (detach) {
    // -d -i: the init's stdin stays open for `attach`.
    req.mutable_spec()->set_open_stdin(interactive);
    absl::StatusOr<v1::CreateResponse> created = c.Create(req);
    FailOn(created.status());
    id = created->id();
    absl::Status s = c.Start(id);
    if (!s.ok()) {
      remove();
      Fail(StartFailureCode(s), std::string(s.message()));
    }
    printf("%s\n", id.c_str());
    return 0;
  }
  // Keys reach the sandbox's terminal only with -i; -t alone leaves the
  // local terminal as it is, so that ^C is a signal here, proxied.
  const bool proxy = sig_proxy && !(tty && interactive);
  // Caught from before the create: a ^C that comes before the id goes to
  // the program as soon as it exists, never ends this client alone.
  if (proxy) CatchSignalsForProxy();
  ExecIo io = StdIo(interactive, tty);
  if (tty && !interactive) RestoreTerminal();  // resizes still followed
  // With --rm the daemon destroys the sandbox once the call ends, off our
  // path, and says so (ExecTrace.removed); when it could not, we do.
  io.remove = rm;
  ExecTrace trace;
  io.trace = &trace;
  io.on_id = [&](const std::string& new_id) {
    id = new_id;
    if (proxy) ProxySignalsTo(&c, id);
  };
  absl::StatusOr<v1::ExitStatus> exit = c.CreateAndAttach(req, std::move(io));
  RestoreTerminal();
  const absl::Time t2 = absl::Now();
  if (timings) PrintTimings(c, id, t2 - t0, trace);
  if (!trace.removed) {
    const absl::Time t3 = absl::Now();
    remove();
    if (timings && rm) {
      fprintf(stderr, "sandboxctl: timing: %s %.3f ms\n",
              std::string(StageName(Stage::kClientDestroy)).c_str(),
              absl::ToDoubleMilliseconds(absl::Now() - t3));
    }
  }
  if (!exit.ok()) Fail(StartFailureCode(exit.status()), std::string(exit.status().message()));
  if (!exit->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", exit->error()));
  if (!exit->reason().empty()) {
    fprintf(stderr, "sandboxctl: sandbox %s: %s\n", id.c_str(), exit->reason().c_str());
  }
  return ExitCode(*exit);
}

}  // namespace sandboxd::client::ctl
