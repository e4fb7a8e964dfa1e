// What every sandboxctl command shares (sandboxctl.h).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/sandboxctl/sandboxctl.h"
#include "client/sandboxctl/terminal.h"
#include "proto/mount_spec.h"
#include "google/protobuf/util/json_util.h"

namespace sandboxd::client::ctl {

absl::Time main_entered;
std::string no_daemon;
absl::Time call_started;

void QuickExit(int code) {
  RestoreTerminal();
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

void Fail(int code, const std::string& msg) {
  fprintf(stderr, "sandboxctl: %s\n", msg.c_str());
  QuickExit(code);
}

void FailOn(const absl::Status& s, const std::string& what) {
  if (s.ok()) return;
  Fail(kExitError, what.empty() ? std::string(s.message())
                                : absl::StrCat(what, ": ", s.message()));
}

std::vector<std::string> ParseFlags(flags::FlagSet& fs,
                                    std::vector<std::string> args) {
  // -it and -ti: -i and -t, as docker spells them; only among the flags.
  for (size_t i = 0; i < args.size(); i++) {
    if (args[i] == "--" || args[i].empty() || args[i][0] != '-') break;
    if (args[i] == "-it" || args[i] == "-ti") {
      args[i] = "-i";
      args.insert(args.begin() + i + 1, "-t");
    }
  }
  absl::StatusOr<std::vector<std::string>> rest = fs.Parse(args);
  if (fs.help_requested()) {
    fputs(fs.Help().c_str(), stdout);
    QuickExit(0);
  }
  FailOn(rest.status());
  if (!no_daemon.empty()) Fail(kExitError, no_daemon);
  return *std::move(rest);
}

std::vector<std::string> Program(std::vector<std::string> rest, size_t first,
                                 const char* cmd) {
  if (first < rest.size() && rest[first] == "--") first++;
  std::vector<std::string> argv(rest.begin() + std::min(first, rest.size()),
                                rest.end());
  if (argv.empty()) {
    Fail(kExitError, absl::StrCat(cmd, ": no program given (", cmd,
                                  " ... -- PROGRAM [ARGS...])"));
  }
  return argv;
}

bool KeyValue(const std::string& kv, std::string* k, std::string* v) {
  size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  *k = kv.substr(0, eq);
  *v = kv.substr(eq + 1);
  return true;
}

void DefaultEnv(v1::ProcessSpec* p, bool tty, bool path) {
  bool has_path = false, has_term = false;
  for (const std::string& e : p->env()) {
    has_path |= absl::StartsWith(e, "PATH=");
    has_term |= absl::StartsWith(e, "TERM=");
  }
  if (path && !has_path) {
    p->add_env("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  }
  if (tty && !has_term) {
    const char* term = getenv("TERM");
    p->add_env(absl::StrCat("TERM=", term != nullptr ? term : "xterm"));
  }
}

void NetworkFlags(flags::FlagSet& fs, v1::SandboxSpec* spec) {
  fs.Func("network", "none|sandbox|host",
          "the sandbox's network: loopback only (the default); its own "
          "address, route and outbound access (pasta); or the host's",
          [spec](absl::string_view v) {
            if (v == "none") {
              spec->set_network(v1::NETWORK_MODE_NONE);
            } else if (v == "sandbox") {
              spec->set_network(v1::NETWORK_MODE_SANDBOX);
            } else if (v == "host") {
              spec->set_network(v1::NETWORK_MODE_HOST);
            } else {
              return absl::InvalidArgumentError(
                  absl::StrCat("want none, sandbox or host, got ", v));
            }
            return absl::OkStatus();
          });
  fs.Func("publish", "[IP:]HOSTPORT:PORT[/tcp|/udp]",
          "publish the sandbox's PORT on the host's IP (default 127.0.0.1) "
          "and HOSTPORT (repeatable; implies --network=sandbox)",
          [spec](absl::string_view v) -> absl::Status {
            absl::StatusOr<v1::PortMapping> p = ParsePublishFlag(v);
            if (!p.ok()) return p.status();
            *spec->add_ports() = *std::move(p);
            return absl::OkStatus();
          });
  fs.Alias("-p", "publish");
}

void UserFlag(flags::FlagSet& fs, v1::ProcessSpec* p) {
  fs.Func("user", "UID[:GID]", "the program's user", [p](absl::string_view v) {
    uint32_t uid = 0, gid = 0;
    absl::string_view u = v, g;
    if (size_t c = v.find(':'); c != absl::string_view::npos) {
      u = v.substr(0, c);
      g = v.substr(c + 1);
    }
    if (!absl::SimpleAtoi(u, &uid) || (!g.empty() && !absl::SimpleAtoi(g, &gid))) {
      return absl::InvalidArgumentError(absl::StrCat("want UID[:GID], got ", v));
    }
    p->mutable_user()->set_uid(uid);
    p->mutable_user()->set_gid(g.empty() ? uid : gid);
    return absl::OkStatus();
  });
  fs.Alias("-u", "user");
}

int StartFailureCode(const absl::Status& s) {
  // Only the program itself: its start (run's), its exec, or the create's
  // check of it (the field named); never an unknown sandbox id.
  const bool program = absl::StrContains(s.message(), ": start: ") ||
                       absl::StrContains(s.message(), ": exec: ") ||
                       absl::StrContains(s.message(), "process.argv[0]: ");
  if (!program) return kExitError;
  if (absl::IsNotFound(s)) return kExitNotFound;
  // The Sentry's word for a program it cannot run (boot.h ShellExitCodeFor).
  if (absl::IsPermissionDenied(s) || absl::IsFailedPrecondition(s)) return kExitCannotRun;
  return kExitError;
}

std::string ExitText(const v1::ExitStatus& e) {
  if (!e.error().empty()) return absl::StrCat("failed: ", e.error());
  if (e.status_case() == v1::ExitStatus::kSignal) {
    return absl::StrCat("killed by signal ", e.signal(),
                        e.reason().empty() ? "" : absl::StrCat(" (", e.reason(), ")"));
  }
  return absl::StrCat("exited ", e.code());
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
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

void SigProxyFlag(flags::FlagSet& fs, bool* on) {
  fs.Func("sig-proxy", "true|false",
          "pass the signals sandboxctl gets (INT TERM HUP QUIT USR1 USR2) to the program",
          [on](absl::string_view v) {
            if (v == "true" || v == "1") {
              *on = true;
            } else if (v == "false" || v == "0") {
              *on = false;
            } else {
              return absl::InvalidArgumentError(absl::StrCat("want true or false, got ", v));
            }
            return absl::OkStatus();
          },
          "true");
}

}  // namespace sandboxd::client::ctl
