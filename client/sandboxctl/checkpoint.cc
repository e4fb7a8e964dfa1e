// sandboxctl checkpoint ID --image=DIR [--leave-running]: the sandbox's
// image into DIR (made when missing, must be empty).
// sandboxctl restore --image=DIR [--name=ID] [-d] [...]: a new sandbox from
// the image, attached to like `run` (or, with -d, started and its id
// printed, like `run -d`).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/sandboxctl/sandboxctl.h"
#include "client/sandboxctl/sig_proxy.h"
#include "client/sandboxctl/terminal.h"
#include "google/protobuf/util/time_util.h"

namespace sandboxd::client::ctl {
namespace {

using google::protobuf::util::TimeUtil;

double Ms(const google::protobuf::Duration& d) {
  return TimeUtil::DurationToNanoseconds(d) / 1e6;
}

void Timing(const std::string& name, double ms) {
  fprintf(stderr, "sandboxctl: timing: %s %.3f ms\n", name.c_str(), ms);
}

// The daemon wants an absolute path; a relative one is the caller's.
std::string Absolute(const std::string& dir) {
  if (dir.empty() || dir[0] == '/') return dir;
  char* cwd = getcwd(nullptr, 0);
  if (cwd == nullptr) return dir;
  std::string abs = absl::StrCat(cwd, "/", dir);
  free(cwd);
  return abs;
}

// ParseFlags, with flags after the positional arguments too
// (`checkpoint ID --image=DIR`, as docker's and runsc's commands take
// them); "--" ends the flags.
std::vector<std::string> ParseAnywhere(flags::FlagSet& fs, std::vector<std::string> args) {
  std::vector<std::string> positional;
  for (;;) {
    std::vector<std::string> rest = ParseFlags(fs, std::move(args));
    if (rest.empty()) break;
    if (rest[0] == "--") {
      positional.insert(positional.end(), rest.begin() + 1, rest.end());
      break;
    }
    positional.push_back(rest[0]);
    args.assign(rest.begin() + 1, rest.end());
  }
  return positional;
}

// One line of a restore's page loading: "12.0/64.0 MiB (18%), 131.0 MB/s".
std::string ProgressText(const v1::RestoreProgress& p) {
  const double mib = 1024.0 * 1024.0;
  const double secs = TimeUtil::DurationToNanoseconds(p.load()) / 1e9;
  const double rate = secs > 0 ? p.bytes_loaded() / secs / 1e6 : 0;
  const int pct = p.bytes_total() > 0
                      ? static_cast<int>(100.0 * p.bytes_loaded() / p.bytes_total())
                      : 100;
  std::string t = absl::StrFormat("%.1f/%.1f MiB (%d%%), %.1f MB/s", p.bytes_loaded() / mib,
                                  p.bytes_total() / mib, pct, rate);
  if (p.bytes_failed() > 0) absl::StrAppend(&t, absl::StrFormat(", %.1f MiB failed",
                                                                p.bytes_failed() / mib));
  return t;
}

// The line on a terminal (stderr) that says how far a restored sandbox's
// memory has loaded. The program's output shares that terminal: the first
// of it ends the line (with its figures so far, on a line of their own) and
// no progress is drawn after it, so that output never lands on the line.
// Thread-safe: drawn from the progress thread, ended from the output
// callbacks.
class ProgressLine {
 public:
  explicit ProgressLine(std::string id) : id_(std::move(id)) {}

  // Redraws the line with `p`; false once the line has ended.
  bool Draw(const v1::RestoreProgress& p) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock l(&mu_);
    if (ended_) return false;
    last_ = p;
    shown_ = true;
    fprintf(stderr, "\r\033[Ksandboxctl: %s: loading memory: %s", id_.c_str(),
            ProgressText(p).c_str());
    fflush(stderr);
    return true;
  }

  // Ends the line, once: its last figures, if it was drawn at all.
  void End() ABSL_LOCKS_EXCLUDED(mu_) {
    if (ended_fast_.load(std::memory_order_acquire)) return;
    absl::MutexLock l(&mu_);
    if (ended_) return;
    ended_ = true;
    ended_fast_.store(true, std::memory_order_release);
    if (shown_) {
      fprintf(stderr, "\r\033[Ksandboxctl: %s: memory %s: %s\n", id_.c_str(),
              last_.done() ? "loaded" : "still loading", ProgressText(last_).c_str());
      fflush(stderr);
    }
  }

 private:
  const std::string id_;
  std::atomic<bool> ended_fast_{false};  // ended_, read without the lock
  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool shown_ ABSL_GUARDED_BY(mu_) = false;
  v1::RestoreProgress last_ ABSL_GUARDED_BY(mu_);
};

// On a terminal (stderr), `*line` redrawn a few times a second from Get
// until the load is done, the sandbox is no longer RUNNING, `*stop` is set
// or the line has ended; then ended. Nothing when stderr is not a
// terminal, or when the sandbox's pages were all there at its start.
void ShowRestoreProgress(Client& c, const std::string& id, const std::atomic<bool>* stop,
                         ProgressLine* line) {
  if (!isatty(STDERR_FILENO)) return;
  for (;;) {
    absl::StatusOr<v1::SandboxInfo> info = c.Get(id);
    if (!info.ok() || info->state() == v1::SANDBOX_STATE_STOPPED ||
        info->state() == v1::SANDBOX_STATE_FAILED) {
      break;
    }
    if (info->state() == v1::SANDBOX_STATE_RUNNING) {
      if (!info->has_restore()) break;  // nothing loads after the start
      if (!line->Draw(info->restore())) break;
      if (info->restore().done()) break;
    }
    for (int i = 0; i < 5 && !(stop && stop->load()); i++) absl::SleepFor(absl::Milliseconds(50));
    if (stop && stop->load()) break;
  }
  line->End();
}

}  // namespace

int Checkpoint(Client& c, std::vector<std::string> args) {
  v1::CheckpointRequest req;
  std::string image;
  bool leave_running = false, timings = false;
  flags::FlagSet fs("sandboxctl checkpoint", "ID --image=DIR",
                    "writes the sandbox's checkpoint image into DIR (made when\n"
                    "missing, must be empty), then stops the sandbox");
  fs.String("image", &image, "DIR", "where the image goes");
  fs.Bool("leave-running", &leave_running, "the sandbox runs on after the checkpoint");
  fs.Bool("timings", &timings, "print where the time went, on stderr");
  std::vector<std::string> rest = ParseAnywhere(fs, std::move(args));
  if (rest.empty()) Fail(kExitError, "checkpoint: which sandbox? (checkpoint ID --image=DIR)");
  req.set_id(rest[0]);
  // `checkpoint ID DIR` as well.
  if (image.empty() && rest.size() >= 2) image = rest[1];
  if (image.empty()) Fail(kExitError, "checkpoint: where to? (--image=DIR)");
  req.set_image_dir(Absolute(image));
  req.set_leave_running(leave_running);
  call_started = absl::Now();
  absl::StatusOr<v1::CheckpointResponse> r = c.Checkpoint(req);
  FailOn(r.status());
  if (timings) {
    Timing("client.checkpoint", absl::ToDoubleMilliseconds(absl::Now() - call_started));
    Timing("daemon.checkpoint_total", Ms(r->duration()));
    for (const v1::Stage& s : r->stages()) Timing("daemon." + s.name(), Ms(s.duration()));
    fprintf(stderr, "sandboxctl: image: %lu bytes (state %lu, %lu pages), memory %lu bytes\n",
            static_cast<unsigned long>(r->image_bytes()),
            static_cast<unsigned long>(r->state_bytes()),
            static_cast<unsigned long>(r->pages()),
            static_cast<unsigned long>(r->memory_bytes()));
  }
  return 0;
}

int Restore(Client& c, std::vector<std::string> args) {
  v1::RestoreRequest req;
  std::string image;
  bool detach = false, interactive = false, no_stdin = false, rm = false, timings = false;
  flags::FlagSet fs("sandboxctl restore", "--image=DIR [FLAGS]",
                    "a new sandbox from a checkpoint image, run on from where it\n"
                    "stopped; attached to (stdio, exit status) unless -d");
  fs.String("image", &image, "DIR", "the checkpoint image");
  v1::SandboxSpec* spec = req.mutable_spec();
  fs.Func("name", "ID", "the new sandbox's id (default: one is made up)",
          [&req](absl::string_view v) {
            req.set_id(std::string(v));
            return absl::OkStatus();
          });
  fs.Func("rootfs", "DIR", "the host directory that is the sandbox's root",
          [spec](absl::string_view v) {
            spec->set_rootfs(std::string(v));
            return absl::OkStatus();
          },
          "the image's");
  fs.Func("memory", "BYTES[k|m|g]", "the memory limit", [spec](absl::string_view v) {
    absl::StatusOr<uint64_t> n = ParseBytes(v);
    if (!n.ok()) return n.status();
    spec->mutable_limits()->set_memory_bytes(*n);
    return absl::OkStatus();
  }, "the image's");
  fs.Alias("-m", "memory");
  // The image's network mode and published ports unless these name others
  // (daemon/README.md, "Restore and the network").
  NetworkFlags(fs, spec);
  fs.Func("label", "K=V", "a label (repeatable)", [spec](absl::string_view v) {
    std::string k, val;
    if (!KeyValue(std::string(v), &k, &val)) {
      return absl::InvalidArgumentError(absl::StrCat("wants K=V, got ", v));
    }
    (*spec->mutable_labels())[k] = val;
    return absl::OkStatus();
  });
  fs.Bool("detach", &detach, "start it, print the id, do not wait");
  fs.Alias("-d", "detach");
  fs.Bool("interactive", &interactive,
          "send stdin to the program (without it: only when the saved sandbox kept its stdin "
          "open, created with -i)");
  fs.Alias("-i", "interactive");
  fs.Bool("no-stdin", &no_stdin, "do not send stdin, even to a sandbox created with -i");
  fs.Bool("rm", &rm, "destroy the sandbox when its program is done");
  fs.Bool("timings", &timings, "print where the time went, on stderr");
  std::vector<std::string> rest = ParseAnywhere(fs, std::move(args));
  if (image.empty() && !rest.empty()) image = rest[0];
  if (image.empty()) Fail(kExitError, "restore: from which image? (--image=DIR)");
  req.set_image_dir(Absolute(image));
  req.set_attach(!detach);
  call_started = absl::Now();
  absl::StatusOr<v1::RestoreResponse> r = c.Restore(req);
  FailOn(r.status());
  const std::string id = r->id();
  auto print_timings = [&](const v1::Timings& t) {
    if (!timings) return;
    Timing("daemon.restore_total", Ms(t.restore_latency()));
    for (const v1::Stage& s : t.stages()) Timing("daemon." + s.name(), Ms(s.duration()));
  };
  if (detach) {
    print_timings(r->info().timings());
    printf("%s\n", id.c_str());
    fflush(stdout);
    ProgressLine line(id);
    ShowRestoreProgress(c, id, nullptr, &line);
    return 0;
  }
  const bool tty = r->info().spec().process().tty();
  // Stdin goes to the program with -i, and when the saved sandbox kept its
  // stdin open for attaches (run -d -i, create -i), as `attach` sends it.
  // This call starts the program, as `run -i` does: the end of stdin here
  // is the program's.
  const bool kept_open = r->info().spec().open_stdin();
  ExecIo io = StdIo(interactive || (kept_open && !no_stdin), tty);
  io.remove = rm;
  ProgressLine line(id);
  if (!tty && isatty(STDERR_FILENO)) {
    io.on_stdout = [&line](absl::string_view d) {
      line.End();
      WriteAll(STDOUT_FILENO, d);
    };
    io.on_stderr = [&line](absl::string_view d) {
      line.End();
      WriteAll(STDERR_FILENO, d);
    };
  }
  ExecTrace trace;
  io.trace = &trace;
  if (!tty) {
    CatchSignalsForProxy();
    ProxySignalsTo(&c, id);
  }
  fprintf(stderr, "sandboxctl: restoring %s from %s\n", id.c_str(), image.c_str());
  // Not over a terminal the program owns (-t: raw mode, its own screen).
  std::atomic<bool> attach_done{false};
  std::thread progress;
  if (!tty) progress = std::thread([&c, &id, &attach_done, &line] {
    ShowRestoreProgress(c, id, &attach_done, &line);
  });
  absl::StatusOr<v1::ExitStatus> exit = c.Exec(id, /*attach=*/true, {}, std::move(io));
  attach_done = true;
  if (progress.joinable()) progress.join();
  RestoreTerminal();
  if (timings) {
    v1::Timings t = trace.timings;
    if (!trace.has_timings) {
      absl::StatusOr<v1::SandboxInfo> info = c.Get(id);
      if (info.ok()) t = info->timings();
    }
    print_timings(t);
  }
  if (rm && !trace.removed) (void)c.Destroy(id);
  if (!exit.ok()) Fail(kExitError, std::string(exit.status().message()));
  if (!exit->error().empty()) Fail(kExitError, absl::StrCat("sandbox ", id, ": ", exit->error()));
  return ExitCode(*exit);
}

}  // namespace sandboxd::client::ctl
