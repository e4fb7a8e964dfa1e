// sandboxctl checkpoint ID --image=DIR [--leave-running]: the sandbox's
// image into DIR (made when missing, must be empty).
// sandboxctl restore --image=DIR [--name=ID] [-d] [...]: a new sandbox from
// the image, attached to like `run` (or, with -d, started and its id
// printed, like `run -d`).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/sandboxctl/sandboxctl.h"
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
  bool detach = false, interactive = false, rm = false, timings = false;
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
  fs.Bool("interactive", &interactive, "send stdin to the program");
  fs.Alias("-i", "interactive");
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
    return 0;
  }
  const bool tty = r->info().spec().process().tty();
  ExecIo io = StdIo(interactive, tty);
  io.remove = rm;
  ExecTrace trace;
  io.trace = &trace;
  if (!tty) ProxySignals(&c, id);
  fprintf(stderr, "sandboxctl: restored %s from %s\n", id.c_str(), image.c_str());
  absl::StatusOr<v1::ExitStatus> exit = c.Exec(id, /*attach=*/true, {}, std::move(io));
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
