// sentry: the application kernel's command line.
//
//   sentry run [FLAGS] [--] PROGRAM [ARGS...]
//     Runs one program in a sandbox. Exit status: the program's (128+N
//     when killed by signal N); 125 when the sentry's own arguments are
//     wrong or it fails to start; 126 when PROGRAM cannot be executed; 127
//     when it does not exist. --stats-json writes the platform's counters
//     (proto/platform_stats.proto as JSON) to PATH when the program is done.
//
//     With --checkpoint-after=DURATION --image=DIR it checkpoints the
//     sandbox that long after the start (sentry/state/image_dir.h), then
//     kills it (exit status 0 when the image was written) or, with
//     --leave-running, lets it run on.
//
//     With --checkpoint-dir=DIR the program may checkpoint itself
//     (sentry/self_checkpoint.h): a write to /proc/sandbox/checkpoint
//     saves an image into DIR/HOSTNAME.N and the sandbox runs on.
//
//   sentry restore --image=DIR [--rootfs=DIR] [FLAGS]
//     Runs a checkpointed sandbox on from its image, with the Sentry's own
//     stdio, to its init's exit; exit status as `sentry run`'s.
//
//   sentry serve --control-fd=N [FLAGS]
//     A warm Sentry for sandboxd (serve.h): prewarms, says Hello on the
//     control channel N, then takes its sandbox from the daemon.
//
// `sentry run --help` and `sentry serve --help` list the flags (base/
// flags.h); the platforms and their options come from platforms/registry.h.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/flags.h"
#include "base/thread.h"
#include "base/unique_fd.h"
#include "base/version.h"
#include "google/protobuf/util/json_util.h"
#include "platforms/registry.h"
#include "proto/platform_stats.pb.h"
#include "sentry/boot.h"
#include "sentry/self_checkpoint.h"
#include "sentry/fs/rootfs.h"
#include "proto/mount_spec.h"
#include "sentry/fs/tty/host_tty.h"
#include "sentry/kernel/kernel.h"
#include "sentry/isolation.h"
#include "sentry/mm/async_loader.h"
#include "sentry/serve.h"
#include "sentry/socket/sandbox_net.h"
#include "sentry/syscalls/strace.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd {
namespace {

constexpr int kExitUsage = 125;
[[noreturn]] void Die(int code, const std::string& msg) {
  fprintf(stderr, "sentry: %s\n", msg.c_str());
  fflush(stderr);
  _exit(code);
}

const char kCommands[] =
    "usage: sentry run [FLAGS] [--] PROGRAM [ARGS...]\n"
    "       sentry restore --image=DIR [FLAGS]\n"
    "       sentry serve --control-fd=N [FLAGS]\n"
    "       sentry --version\n"
    "`sentry run --help`, `sentry restore --help` and `sentry serve --help`\n"
    "list the flags.\n";

// Flags both commands take: the platform and its back-ends' options
// (platforms/registry.h), the vDSO, the Sentry's seccomp filter.
void PlatformFlags(flags::FlagSet& fs, std::string* platform,
                   platform::OptionValues* options, bool* vdso_tsc,
                   bool* sentry_seccomp) {
  const platform::Registry& reg = platform::Registry::Get();
  std::string platforms;
  for (const platform::Backend& b : reg.backends()) {
    absl::StrAppend(&platforms, "\n  ", b.name, ": ", b.description);
  }
  fs.Func(
      "platform", reg.NamesJoined("|"), "how application code runs",
      [platform](absl::string_view v) {
        absl::StatusOr<const platform::Backend*> b =
            platform::Registry::Get().Lookup(v);
        if (!b.ok()) return b.status();
        *platform = std::string(v);
        return absl::OkStatus();
      },
      reg.DefaultName());
  fs.Func(
      "vdso", "tsc|syscall",
      "clock_gettime from the TSC, or a system call each (for tests and "
      "benchmarks of the trapping path)",
      [vdso_tsc](absl::string_view v) {
        if (v != "tsc" && v != "syscall") {
          return absl::InvalidArgumentError(
              absl::StrCat("--vdso wants tsc or syscall, got: ", v));
        }
        *vdso_tsc = v == "tsc";
        return absl::OkStatus();
      },
      "tsc");
  fs.OnOff("sentry-seccomp", sentry_seccomp,
           "the seccomp filter on the Sentry's own host calls (off: for "
           "debugging)");
  for (const platform::Backend& b : reg.backends()) {
    for (const platform::OptionFlag& f : b.flags) {
      std::string name = f.name;
      fs.Func(
          f.name, f.values, absl::StrCat(b.name, ": ", f.help),
          [options, name, check = f.check](absl::string_view v) {
            if (check != nullptr) {
              if (absl::Status s = check(v); !s.ok()) return s;
            }
            (*options)[name] = std::string(v);
            return absl::OkStatus();
          },
          f.default_value);
    }
  }
  fs.set_footer(absl::StrCat("platforms:", platforms, "\n"));
}

// `sentry serve`'s flags; never returns.
[[noreturn]] void ServeMain(int argc, char** argv) {
  serve::Options o;
  flags::FlagSet fs(
      "sentry serve", "--control-fd=N [FLAGS]",
      "A warm Sentry for sandboxd (serve.h): prewarms, says Hello on the\n"
      "control channel N, then takes its sandbox from the daemon.");
  fs.Func("control-fd", "N", "one end of the daemon's SOCK_SEQPACKET socketpair",
          [&o](absl::string_view v) {
            if (!absl::SimpleAtoi(v, &o.control_fd) || o.control_fd < 0) {
              return absl::InvalidArgumentError(
                  absl::StrCat("--control-fd wants a descriptor, got: ", v));
            }
            return absl::OkStatus();
          });
  fs.OnOff("isolation", &o.isolate,
           "new namespaces, an empty root, no capabilities (off: for "
           "debugging)");
  fs.Func("network", "none|host",
          "none (the default): a network namespace of the Sentry's own "
          "with loopback only; host: the daemon's (NETWORK_MODE_HOST)",
          [&o](absl::string_view v) {
            if (v != "none" && v != "host") {
              return absl::InvalidArgumentError(
                  absl::StrCat("--network wants none or host, got: ", v));
            }
            o.host_network = v == "host";
            return absl::OkStatus();
          });
  PlatformFlags(fs, &o.platform, &o.platform_options, &o.vdso_tsc,
                &o.sentry_seccomp);
  std::vector<std::string> rest =
      fs.ParseOrExit(flags::Args(argc, argv, 2), kExitUsage);
  if (!rest.empty()) {
    Die(kExitUsage, absl::StrCat("serve takes no arguments, got: ", rest[0]));
  }
  if (o.control_fd < 0) Die(kExitUsage, "serve needs --control-fd=N");
  int status = serve::Serve(o);
  fflush(stderr);
  _exit(status);
}

struct Options {
  std::string platform = platform::Registry::Get().DefaultName();
  // --systrap-fastpath=..., --kvm-vcpu-pool=..., ...: the platforms'
  // options (platforms/registry.h).
  platform::OptionValues platform_options;
  std::string rootfs = "/";
  // -v, --mount, --tmpfs (proto/mount_spec.h), in order; --read-only.
  std::vector<v1::Mount> mounts;
  bool read_only = false;
  std::string cwd = "/";
  std::string hostname = "sandbox";
  // --user=UID[:GID[,GID...]]: the program's uid, gid and supplementary
  // groups inside the sandbox.
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  std::vector<std::string> env;
  std::vector<std::string> argv;
  bool log_unimplemented = false;
  bool strace = false;
  // --vdso=syscall: the vDSO makes every call a system call (for tests
  // and benchmarks of the trapping path); default: served from the TSC.
  bool vdso_tsc = true;
  // The limits a daemon's spec would carry, as the sandbox sees them
  // (/proc/meminfo, nproc, fork's EAGAIN); nothing enforces them on the host.
  boot::Limits limits;
  // --sentry-seccomp=off: no seccomp filter on the Sentry's own host
  // calls (host_filter.h), for debugging.
  bool sentry_seccomp = true;
  // --stats-json=PATH: where the platform's counters go at the end.
  std::string stats_json;
  // --contain=off: no pid namespace of its own (debugging).
  bool contain = true;
  // --container-init: the init is a container's (a pid namespace's init,
  // as runc gives it): a signal it has no handler for is ignored, but
  // SIGKILL and SIGSTOP (kernel::Kernel::set_container_init).
  bool container_init = false;
  // --network=host: the caller's network namespace instead of one of the
  // sandbox's own with loopback only (--network=none, the default);
  // --network=sandbox: the sandbox's own with an address, a route and
  // outbound access (pasta, sentry/socket/sandbox_net.h).
  bool host_network = false;
  bool sandbox_network = false;
  bool network_given = false;
  // -p [IP:]HOSTPORT:PORT[/tcp|/udp] (repeatable): published ports.
  std::vector<v1::PortMapping> ports;
  // sentry restore: the image to run on from.
  bool restore = false;
  // --image=DIR: where --checkpoint-after writes, what restore reads.
  std::string image;
  // --checkpoint-after=DURATION (run): when to checkpoint; 0: never.
  absl::Duration checkpoint_after = absl::ZeroDuration();
  bool leave_running = false;
  // --timings: the checkpoint's or restore's stages to stderr.
  bool timings = false;
  // restore --restore-pages=eager: memory read before the program runs;
  // default: loaded in the background while it runs.
  bool eager_pages = false;
  // restore --restore-wait, --restore-rate, --restore-threads.
  mm::AsyncLoadOptions page_loading;
  // restore --restore-stats: the page loader's counters at the end.
  bool restore_stats = false;
  // --checkpoint-dir=DIR: where self-checkpoints go; --checkpoint-limit.
  std::string checkpoint_dir;
  uint32_t checkpoint_limit = 0;
};

// "131000000", "131M", "1.5G" (powers of ten): bytes per second.
bool ParseRate(absl::string_view v, uint64_t* out) {
  double mult = 1;
  if (!v.empty()) {
    switch (v.back()) {
      case 'k': case 'K': mult = 1e3; break;
      case 'm': case 'M': mult = 1e6; break;
      case 'g': case 'G': mult = 1e9; break;
      default: break;
    }
    if (mult != 1) v.remove_suffix(1);
  }
  double d = 0;
  if (!absl::SimpleAtod(v, &d) || d < 0 || d * mult > 1e15) return false;
  *out = static_cast<uint64_t>(d * mult);
  return true;
}

Options ParseArgs(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) ServeMain(argc, argv);
  const bool restore = argc >= 2 && std::strcmp(argv[1], "restore") == 0;
  if (argc < 2 || (std::strcmp(argv[1], "run") != 0 && !restore)) {
    if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
      printf("sentry %s\n", kVersion);
      fflush(stdout);
      _exit(0);
    }
    if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 ||
                      std::strcmp(argv[1], "-h") == 0)) {
      fputs(kCommands, stdout);
      fflush(stdout);  // _exit does not flush stdio
      _exit(0);
    }
    fputs(kCommands, stderr);
    Die(kExitUsage, argc < 2 ? "missing command (want: run, restore or serve)"
                             : absl::StrCat("unknown command: ", argv[1]));
  }
  Options o;
  o.restore = restore;
  flags::FlagSet fs(
      restore ? "sentry restore" : "sentry run",
      restore ? "--image=DIR [FLAGS]" : "[FLAGS] [--] PROGRAM [ARGS...]",
      restore
          ? "Runs a checkpointed sandbox on from its image (the rootfs given\n"
            "again), with this process's stdio, until its init exits. Exit\n"
            "status: init's, as sentry run's; 125 when the image cannot be\n"
            "restored (the message names the file or field)."
          : "Runs one program in a sandbox. Exit status: the program's (128+N "
            "when\n"
            "killed by signal N); 125 when the sentry's own arguments are "
            "wrong or\n"
            "it fails to start; 126 when PROGRAM cannot be executed; 127 when "
            "it\n"
            "does not exist.");
  fs.String("image", &o.image, "DIR",
            restore ? "the checkpoint image to restore"
                    : "where --checkpoint-after writes the checkpoint image");
  fs.Bool("timings", &o.timings,
          "print the checkpoint's or restore's stage timings to stderr");
  if (restore) {
    fs.Func("restore-pages", "async|eager",
            "async (default): the program runs while its memory loads in "
            "the background; eager: all of it is read first",
            [&o](absl::string_view v) {
              if (v != "async" && v != "eager") {
                return absl::InvalidArgumentError(absl::StrCat(
                    "--restore-pages wants async or eager, got: ", v));
              }
              o.eager_pages = v == "eager";
              return absl::OkStatus();
            });
    fs.Func("restore-wait", "shared|exclusive",
            "how an access to memory not loaded yet waits: with the address "
            "space's lock shared (default) or exclusive (for the A/B)",
            [&o](absl::string_view v) -> absl::Status {
              auto w = mm::ParseRestoreWait(v);
              if (!w.ok()) return w.status();
              o.page_loading.wait = *w;
              return absl::OkStatus();
            });
    fs.Func("restore-rate", "BYTES",
            "the page loader's reads in bytes per second (131M: 131 MB/s), "
            "to model a network disk; 0 (default): unlimited",
            [&o](absl::string_view v) {
              if (!ParseRate(v, &o.page_loading.rate_limit)) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "--restore-rate wants bytes per second (131M), got: ", v));
              }
              return absl::OkStatus();
            });
    fs.Func("restore-threads", "N", "the page loader's reading threads (2)",
            [&o](absl::string_view v) {
              int n = 0;
              if (!absl::SimpleAtoi(v, &n) || n < 1 || n > 64) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "--restore-threads wants 1 to 64, got: ", v));
              }
              o.page_loading.threads = n;
              return absl::OkStatus();
            });
    fs.Bool("restore-stats", &o.restore_stats,
            "print the page loader's counters to stderr at the end");
  }
  if (!restore) {
    fs.Func("checkpoint-after", "DURATION",
            "checkpoint the sandbox into --image this long after its start "
            "(e.g. 300ms), then kill it unless --leave-running",
            [&o](absl::string_view v) {
              if (!absl::ParseDuration(v, &o.checkpoint_after) ||
                  o.checkpoint_after <= absl::ZeroDuration()) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "--checkpoint-after wants a duration (300ms), got: ", v));
              }
              return absl::OkStatus();
            });
    fs.Bool("leave-running", &o.leave_running,
            "after --checkpoint-after's checkpoint the sandbox runs on");
  }
  fs.String("checkpoint-dir", &o.checkpoint_dir, "DIR",
            "the program may checkpoint itself (a write to "
            "/proc/sandbox/checkpoint) into DIR/HOSTNAME.N");
  fs.Func("checkpoint-limit", "N",
          "the most self-checkpoints (default 16; more: EDQUOT)",
          [&o](absl::string_view v) {
            if (!absl::SimpleAtoi(v, &o.checkpoint_limit) ||
                o.checkpoint_limit == 0) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "--checkpoint-limit wants a positive number, got: ", v));
            }
            return absl::OkStatus();
          });
  fs.String("rootfs", &o.rootfs, "DIR", "the host directory that is the sandbox's root");
  auto add_mount = [&o](absl::StatusOr<v1::Mount> m) -> absl::Status {
    if (!m.ok()) return m.status();
    o.mounts.push_back(*std::move(m));
    return absl::OkStatus();
  };
  fs.Func("volume", "HOSTDIR:DIR[:ro|rw]",
          "bind-mount a host directory or file at DIR (writable unless :ro; "
          "repeatable)",
          [add_mount](absl::string_view v) { return add_mount(ParseVolumeFlag(v)); });
  fs.Alias("-v", "volume");
  fs.Func("mount", "type=bind|tmpfs,source=..,target=..[,readonly]",
          "a bind or tmpfs mount, docker's --mount syntax (repeatable)",
          [add_mount](absl::string_view v) { return add_mount(ParseMountFlag(v)); });
  fs.Func("tmpfs", "DIR[:size=..,mode=..]",
          "a tmpfs at DIR (ENOSPC beyond size; repeatable)",
          [add_mount](absl::string_view v) { return add_mount(ParseTmpfsFlag(v)); });
  fs.Bool("read-only", &o.read_only,
          "the root filesystem is read-only (EROFS); mounts stay writable");
  fs.String("cwd", &o.cwd, "DIR", "the program's working directory");
  fs.Func("env", "K=V", "an environment variable of the program (repeatable)",
          [&o](absl::string_view v) {
            if (v.find('=') == absl::string_view::npos || v[0] == '=') {
              return absl::InvalidArgumentError(
                  absl::StrCat("--env wants K=V, got: ", v));
            }
            o.env.emplace_back(v);
            return absl::OkStatus();
          });
  fs.String("hostname", &o.hostname, "NAME", "the sandbox's host name");
  fs.Func("user", "UID[:GID[,GID...]]",
          "the program's user, group (default: UID) and supplementary groups",
          [&o](absl::string_view v) {
            std::vector<std::string> parts = absl::StrSplit(v, absl::MaxSplits(':', 1));
            auto id = [](absl::string_view s, uint32_t* out) {
              return absl::SimpleAtoi(s, out) && *out != 0xffffffffu;
            };
            if (!id(parts[0], &o.uid)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("--user wants UID[:GID[,GID...]], got: ", v));
            }
            o.gid = o.uid;
            o.groups.clear();
            if (parts.size() == 2) {
              std::vector<std::string> gids = absl::StrSplit(parts[1], ',');
              for (size_t i = 0; i < gids.size(); i++) {
                uint32_t g = 0;
                if (!id(gids[i], &g)) {
                  return absl::InvalidArgumentError(
                      absl::StrCat("--user wants UID[:GID[,GID...]], got: ", v));
                }
                if (i == 0) {
                  o.gid = g;
                } else {
                  o.groups.push_back(g);
                }
              }
            }
            return absl::OkStatus();
          });
  fs.Bool("log-unimplemented", &o.log_unimplemented,
          "count the unimplemented syscalls and print them at the end");
  fs.Bool("strace", &o.strace,
          "print every syscall to stderr, decoded as strace(1) prints it");
  fs.Positive("memory", &o.limits.memory_bytes,
              "the memory limit in bytes, as the sandbox sees it");
  fs.Func("cpus", "N",
          "the CPU limit (e.g. 0.5), as the sandbox sees it: N rounded up "
          "CPUs, and CPU time counted by the host's CPU clocks; the quota "
          "itself is the caller's cgroup's",
          [&o](absl::string_view v) {
            double n = 0;
            if (!absl::SimpleAtod(v, &n) || !(n > 0) || n > 1e6) {
              return absl::InvalidArgumentError(
                  absl::StrCat("--cpus wants a positive number, got: ", v));
            }
            o.limits.cpu_millis =
                std::max<uint64_t>(1, static_cast<uint64_t>(n * 1000 + 0.5));
            return absl::OkStatus();
          });
  fs.Positive("pids", &o.limits.pids, "the most tasks at once");
  fs.String("stats-json", &o.stats_json, "PATH",
            "write the platform's counters (proto/platform_stats.proto as "
            "JSON) to PATH when the program is done");
  fs.Func("network", "none|host|sandbox",
          "none (the default): a network namespace of the sandbox's own, "
          "with loopback only; sandbox: one of its own with an address, a "
          "default route and outbound access through the host (pasta), the "
          "host's loopback at the gateway address; host: the caller's (an "
          "explicit opt-in). /etc/hosts and /etc/resolv.conf follow: "
          "localhost only, localhost and the host's name servers, or the "
          "host's",
          [&o](absl::string_view v) {
            if (v != "none" && v != "host" && v != "sandbox") {
              return absl::InvalidArgumentError(absl::StrCat(
                  "--network wants none, host or sandbox, got: ", v));
            }
            o.host_network = v == "host";
            o.sandbox_network = v == "sandbox";
            o.network_given = true;
            return absl::OkStatus();
          });
  fs.Func("publish", "[IP:]HOSTPORT:PORT[/tcp|/udp]",
          "publish the sandbox's PORT on the host's IP (default 127.0.0.1) "
          "and HOSTPORT (repeatable; implies --network=sandbox, refused "
          "with none or host)",
          [&o](absl::string_view v) -> absl::Status {
            absl::StatusOr<v1::PortMapping> p = ParsePublishFlag(v);
            if (!p.ok()) return p.status();
            o.ports.push_back(*std::move(p));
            return absl::OkStatus();
          });
  fs.Alias("-p", "publish");
  fs.Bool("container-init", &o.container_init,
          "the init is a container's, as a pid namespace's init: a signal "
          "it has no handler for is ignored, but SIGKILL and SIGSTOP");
  fs.OnOff("contain", &o.contain,
           "run the Sentry as the init of a pid namespace of its own, so "
           "that every host process of the sandbox ends with it");
  PlatformFlags(fs, &o.platform, &o.platform_options, &o.vdso_tsc,
                &o.sentry_seccomp);
  o.argv = fs.ParseOrExit(flags::Args(argc, argv, 2), kExitUsage);
  if (restore) {
    if (o.image.empty()) Die(kExitUsage, "restore needs --image=DIR");
    if (!o.argv.empty()) {
      Die(kExitUsage, absl::StrCat("restore takes no program, got: ", o.argv[0]));
    }
    if (!o.ports.empty() && !o.network_given) o.sandbox_network = true;
    if (!o.ports.empty() && !o.sandbox_network) {
      Die(kExitUsage, "-p needs --network=sandbox");
    }
    return o;
  }
  if (o.checkpoint_after > absl::ZeroDuration() && o.image.empty()) {
    Die(kExitUsage, "--checkpoint-after needs --image=DIR");
  }
  if (!o.ports.empty()) {
    // As docker's default bridge: publishing needs a namespace of the
    // sandbox's own that the host reaches.
    if (o.network_given && !o.sandbox_network) {
      Die(kExitUsage, "-p publishes into the sandbox's own network "
                      "namespace: it needs --network=sandbox (the default "
                      "with -p), not none or host");
    }
    o.sandbox_network = true;
  }
  if (o.sandbox_network && !o.contain) {
    Die(kExitUsage, "--network=sandbox needs the sandbox's own namespaces "
                    "(not --contain=off)");
  }
  if (o.argv.empty()) {
    Die(kExitUsage, "no program to run (sentry run [FLAGS] -- PROGRAM [ARGS...])");
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

// The --checkpoint-after thread's progress, read once the sandbox ended.
std::atomic<bool> checkpoint_started{false};
std::atomic<bool> checkpointed{false};
std::atomic<bool> checkpoint_failed{false};

// The restore's page loader's counters (mm::AsyncLoadStats) as one line.
void PrintLoaderStats(const char* when, const mm::AsyncLoader& l) {
  const mm::AsyncLoadStats st = l.Stats();
  std::string line = absl::StrFormat(
      "sentry: restore pages %s: bytes=%lu/%lu pages=%lu reads=%lu "
      "failed=%lu cancelled=%lu done=%d load=%.3fms waits=%lu waiting=%lu "
      "wait_total=%.3fms wait_us_hist=",
      when, st.bytes_loaded, st.bytes_total, st.pages_loaded, st.reads,
      st.bytes_failed, st.bytes_cancelled, st.done ? 1 : 0,
      st.load_ns / 1e6, st.waits, st.waiting, st.wait_ns_total / 1e6);
  // Only the buckets that count: "[2^i]=n" (waits of 2^i to 2^(i+1) us).
  bool any = false;
  for (int i = 0; i < mm::AsyncLoadStats::kBuckets; i++) {
    if (st.wait_hist[i] == 0) continue;
    absl::StrAppend(&line, any ? "," : "", i == 0 ? 0 : (1ull << i), ":",
                    st.wait_hist[i]);
    any = true;
  }
  if (!any) line += "-";
  line += "\n";
  fputs(line.c_str(), stderr);
}

void PrintStages(const char* what, const StageClock& c) {
  std::string line = absl::StrCat("sentry: ", what, " timings:");
  int64_t total = 0;
  for (const StageTime& t : c.stages()) {
    absl::StrAppend(&line, " ", StageName(t.stage), "=",
                    absl::StrFormat("%.3f", t.nanos / 1e6), "ms");
    total += t.nanos;
  }
  absl::StrAppend(&line, " total=", absl::StrFormat("%.3f", total / 1e6),
                  "ms\n");
  fputs(line.c_str(), stderr);
}

// /etc/hosts and /etc/resolv.conf of the network mode (sandbox_net.h).
std::vector<std::pair<std::string, std::string>> NetworkEtcFiles(
    const Options& o) {
  return sandbox_net::EtcFilesFor(o.sandbox_network ? v1::NETWORK_MODE_SANDBOX
                                  : o.host_network  ? v1::NETWORK_MODE_HOST
                                                    : v1::NETWORK_MODE_NONE,
                                  o.hostname);
}

// sentry run --network=sandbox: a helper process forked before the
// sandbox's namespaces are made, so that it stays in the caller's. Once
// the namespace exists (the Sentry writes to `go`), it starts pasta for it
// and answers on `result` ("" or pasta's error); when the sandbox ends
// (every holder of `go`'s write end, the Sentry and its supervisor, is
// gone) it ends pasta and exits. The terminal's signals are not its.
struct NetHelper {
  int go = -1;      // the write end
  int result = -1;  // the read end
};

NetHelper ForkNetHelper(const Options& o) {
  int go[2], result[2];
  if (pipe2(go, O_CLOEXEC) != 0 || pipe2(result, O_CLOEXEC) != 0) {
    Die(kExitUsage, absl::StrCat("--network=sandbox: pipe: ", strerror(errno)));
  }
  const pid_t target = getpid();  // the supervisor: in the new namespace soon
  const pid_t helper = fork();
  if (helper < 0) {
    Die(kExitUsage, absl::StrCat("--network=sandbox: fork: ", strerror(errno)));
  }
  if (helper > 0) {
    close(go[0]);
    close(result[1]);
    return NetHelper{go[1], result[0]};
  }
  close(go[1]);
  close(result[0]);
  for (int sig : {SIGINT, SIGQUIT, SIGHUP, SIGTSTP, SIGTERM, SIGUSR1,
                  SIGWINCH, SIGPIPE}) {
    signal(sig, SIG_IGN);
  }
  char c;
  ssize_t n;
  while ((n = read(go[0], &c, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) _exit(0);
  std::string answer;
  absl::StatusOr<sandbox_net::Pasta> pasta =
      sandbox_net::Pasta::StartForPid(target, o.ports);
  if (!pasta.ok()) answer = std::string(pasta.status().message());
  if (!answer.empty() &&
      write(result[1], answer.data(), answer.size()) < 0) {
    // The Sentry is gone: nothing to tell.
  }
  close(result[1]);
  for (;;) {
    n = read(go[0], &c, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  if (pasta.ok()) pasta->Stop();
  _exit(0);
}

// In the sandbox's namespace: has the helper start pasta, and waits.
void AttachNetHelper(const NetHelper& h) {
  const char go = 1;
  if (write(h.go, &go, 1) != 1) {
    Die(kExitUsage, absl::StrCat("--network=sandbox: the helper: ", strerror(errno)));
  }
  std::string answer;
  char buf[1024];
  ssize_t n;
  while ((n = read(h.result, buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    answer.append(buf, n);
  }
  close(h.result);
  if (!answer.empty()) Die(kExitUsage, absl::StrCat("--network=sandbox: ", answer));
}

int Run(const Options& o) {
  // First, while single-threaded: every host process of the sandbox in
  // one pid namespace, ended with the Sentry (isolation.h).
  // The network mode's /etc files, read while the host's are in reach.
  std::vector<std::pair<std::string, std::string>> etc_files =
      NetworkEtcFiles(o);
  NetHelper net_helper;
  if (o.sandbox_network) {
    if (absl::Status s = sandbox_net::CheckPortsFree(o.ports); !s.ok()) {
      Die(kExitUsage, std::string(s.message()));
    }
    net_helper = ForkNetHelper(o);
  }
  if (o.contain) {
    if (absl::Status s = isolation::ContainInPidNamespace(!o.host_network);
        !s.ok()) {
      fprintf(stderr,
              "sentry: not contained in a pid namespace of its own: %s\n",
              std::string(s.message()).c_str());
    }
  }
  if (o.sandbox_network) AttachNetHelper(net_helper);
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

  StageClock clock;
  boot::PrewarmOptions popts;
  popts.platform = o.platform;
  popts.vdso_tsc = o.vdso_tsc;
  popts.platform_options = o.platform_options;
  popts.sentry_seccomp = o.sentry_seccomp;
  if (o.restore) {
    // As a pooled Sentry is (sentry serve): what does not depend on the
    // image is done before it is opened, so that the restore's own stages
    // are the time a warm Sentry takes from the Restore call on.
    popts.wait_calibration = true;
    popts.prepare_address_space = true;
    popts.populate_bytes = 8ull << 20;
  }
  auto pw = boot::Prewarm(popts, &clock);
  if (!pw.ok()) Die(kExitUsage, std::string(pw.status().message()));

  auto root_fd = fs::OpenRootfs(o.rootfs);
  if (!root_fd.ok()) Die(kExitUsage, std::string(root_fd.status().message()));
  std::vector<boot::MountConfig> mounts;
  for (size_t i = 0; i < o.mounts.size(); i++) {
    const v1::Mount& m = o.mounts[i];
    boot::MountConfig c;
    c.target = m.target();
    c.read_only = m.read_only();
    if (m.type() == v1::Mount::TYPE_BIND) {
      c.type = boot::MountConfig::Type::kBind;
      c.source = m.source();
      auto fd = OpenBindSource(m, absl::StrCat("mount ", m.target()));
      if (!fd.ok()) Die(kExitUsage, std::string(fd.status().message()));
      c.host = *std::move(fd);
    } else {
      c.type = boot::MountConfig::Type::kTmpfs;
      c.options = m.options();
    }
    mounts.push_back(std::move(c));
  }
  // The Sentry's own stdio, shared with the sandbox; the host terminal,
  // when stdin is one, is the sandbox's console and its init's controlling
  // terminal.
  boot::Stdio stdio;
  stdio.terminal = on_tty;
  for (int fd = 0; fd < 3; fd++) {
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d >= 0) stdio.fds[fd] = UniqueFd(d);
  }
  absl::StatusOr<std::unique_ptr<boot::Sandbox>> sb;
  StageClock restore_clock;
  if (o.restore) {
    boot::RestoreConfig config;
    config.rootfs = std::move(*root_fd);
    config.mounts = std::move(mounts);
    config.image = o.image;
    config.hostname = o.hostname;
    config.strace = o.strace;
    config.limits = o.limits;
    config.eager_pages = o.eager_pages;
    config.page_loading = o.page_loading;
    config.container_init = o.container_init;
    sb = boot::Sandbox::Restore(std::move(*pw), std::move(config),
                                std::move(stdio), &restore_clock);
    if (!sb.ok()) {
      Die(kExitUsage, absl::StrCat("restore: ", sb.status().message()));
    }
  } else {
    boot::SandboxConfig config;
    config.rootfs = std::move(*root_fd);
    config.mounts = std::move(mounts);
    config.read_only_root = o.read_only;
    config.init.argv = o.argv;
    config.init.env = o.env;
    config.init.cwd = o.cwd;
    config.init.uid = o.uid;
    config.init.gid = o.gid;
    config.init.groups = o.groups;
    config.hostname = o.hostname;
    config.strace = o.strace;
    config.limits = o.limits;
    config.container_init = o.container_init;
    config.etc_files = std::move(etc_files);
    sb = boot::Sandbox::Create(std::move(*pw), std::move(config),
                               std::move(stdio), &clock);
    if (!sb.ok()) {
      Die(boot::ShellExitCodeFor(sb.status()),
          std::string(sb.status().message()));
    }
  }
  // Lives until _exit (boot.h).
  boot::Sandbox* sandbox = sb->release();
  kernel::Kernel& k = sandbox->kernel();
  std::shared_ptr<fs::tty::HostTerminal> console = sandbox->console();

  // Signals for the sandbox. What the host terminal generates (it sends
  // them to its foreground group, the Sentry's) goes to the sandbox's
  // foreground process group, a resize as SIGWINCH to it; the rest to init.
  absl::StatusOr<std::thread> forwarder = StartThread(
      "the signal forwarder", [&k, &fwd, console] {
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
  if (!forwarder.ok()) {
    Die(kExitUsage, std::string(forwarder.status().message()));
  }
  forwarder->detach();

  if (!o.checkpoint_dir.empty()) {
    boot::SelfCheckpointConfig sc;
    sc.dir = UniqueFd(open(o.checkpoint_dir.c_str(),
                           O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!sc.dir.valid()) {
      Die(kExitUsage, absl::StrCat("--checkpoint-dir: ", o.checkpoint_dir,
                                   ": ", strerror(errno)));
    }
    sc.dir_name = o.checkpoint_dir;
    sc.prefix = o.hostname;
    sc.limit = o.checkpoint_limit;
    const bool timings = o.timings;
    sc.done = [timings](const boot::SelfCheckpointReport& r) {
      if (!r.status.ok()) {
        fprintf(stderr, "sentry: self-checkpoint: %s\n",
                std::string(r.status.message()).c_str());
        return;
      }
      const off_t at = lseek(STDOUT_FILENO, 0, SEEK_CUR);
      fprintf(stderr,
              "sentry: self-checkpoint: %s: %lu bytes of state, %lu pages, "
              "stdout at %ld\n",
              r.path.c_str(), static_cast<unsigned long>(r.saved.state_bytes),
              static_cast<unsigned long>(r.saved.pages), static_cast<long>(at));
      if (timings) PrintStages("self-checkpoint", r.clock);
    };
    if (absl::Status s = boot::EnableSelfCheckpoint(sandbox, std::move(sc));
        !s.ok()) {
      Die(kExitUsage, std::string(s.message()));
    }
  }
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
  if (o.restore) {
    restore_clock.Mark(Stage::kRestoreStart);
    if (o.timings) {
      PrintStages("prewarm", clock);
      PrintStages("restore", restore_clock);
      if (const mm::AsyncLoader* l = k.memory_file().async_loader()) {
        PrintLoaderStats("at start", *l);
      }
    }
  }
  std::thread checkpointer;
  if (o.checkpoint_after > absl::ZeroDuration()) {
    absl::StatusOr<std::thread> t =
        StartThread("the checkpoint thread", [sandbox, &o] {
      absl::SleepFor(o.checkpoint_after);
      StageClock cc;
      checkpoint_started.store(true);
      // Where the saved run's stdout stood (a file: what a test splits
      // the uninterrupted run's output at), read before the sandbox goes
      // on and writes more.
      off_t at = -1;
      auto r = sandbox->Checkpoint(o.image, o.leave_running, "", &cc, [&at] {
        at = lseek(STDOUT_FILENO, 0, SEEK_CUR);
      });
      if (!r.ok()) {
        fprintf(stderr, "sentry: checkpoint: %s\n",
                std::string(r.status().message()).c_str());
        if (!o.leave_running) {
          sandbox->KillAll();
          checkpoint_failed.store(true);
        }
        return;
      }
      fprintf(stderr,
              "sentry: checkpoint: %s: %lu bytes of state, %lu pages, "
              "stdout at %ld\n",
              o.image.c_str(), static_cast<unsigned long>(r->state_bytes),
              static_cast<unsigned long>(r->pages), static_cast<long>(at));
      if (o.timings) PrintStages("checkpoint", cc);
      if (!o.leave_running) checkpointed.store(true);
    });
    if (!t.ok()) Die(kExitUsage, std::string(t.status().message()));
    checkpointer = *std::move(t);
  }
  kernel::ExitStatus st = sandbox->Wait();
  // The sandbox may end before the checkpoint's time: no checkpoint then.
  if (checkpointer.joinable()) {
    if (checkpoint_started.load()) {
      checkpointer.join();
    } else {
      checkpointer.detach();
    }
  }
  // Killed after its checkpoint: the image is the result.
  if (checkpointed.load()) return 0;
  if (checkpoint_failed.load()) return kExitUsage;
  if (st.signo == SIGKILL && k.init_oom_killed()) {
    fprintf(stderr,
            "sentry: out of memory: init was killed by the OOM killer (%llu "
            "bytes of memory for the application, %llu processes killed)\n",
            static_cast<unsigned long long>(k.memory_file().limit()),
            static_cast<unsigned long long>(k.oom_kills()));
  }
  if (stats_fd.valid()) WriteStatsJson(k.platform(), stats_fd.get());
  if (o.restore_stats) {
    if (const mm::AsyncLoader* l = k.memory_file().async_loader()) {
      PrintLoaderStats("at exit", *l);
    }
  }
  if (o.log_unimplemented) {
    for (const auto& [nr, count] : k.UnimplementedCounts()) {
      const char* name = syscalls::SyscallName(nr);
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
  // lock here, sentry/README.md, "absl's deadlock detector"), on the
  // syscall path. The unit tests keep it (they are where a lock-order bug
  // should show); the Sentry does not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sandboxd::Options o = sandboxd::ParseArgs(argc, argv);
  int status = sandboxd::Run(o);
  fflush(stdout);
  fflush(stderr);
  _exit(status);
}
