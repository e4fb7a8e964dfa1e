// sandboxctl: the command line of sandboxd.
//
//   sandboxctl [--socket=PATH | --tcp=HOST:PORT --ca-cert=FILE --token-file=FILE]
//              COMMAND [ARGS...]
//
// Commands: run, create, start, exec, attach, ps (list), logs, kill, stop, rm,
// inspect, wait, checkpoint and restore (one file each beside this one; restore
// beside checkpoint). `sandboxctl help`
// lists them, `sandboxctl COMMAND --help` a command's flags. The socket is
// --socket, else $SANDBOXD_SOCKET, else /run/sandboxd/sandboxd.sock.
// Exit status: sandboxctl.h.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/flags.h"
#include "base/version.h"
#include "client/client.h"
#include "client/sandboxctl/sandboxctl.h"
#include "daemon/auth.h"

namespace sandboxd::client::ctl {
namespace {

const char kCommands[] =
    "commands:\n"
    "  run [--rm] [-i] [-t] [-d] [SPEC FLAGS] -- PROGRAM [ARGS...]\n"
    "                       create + start + attach + wait; exits as the program\n"
    "  create [SPEC FLAGS] -- PROGRAM [ARGS...]   prints the new sandbox's id\n"
    "  start ID\n"
    "  exec [-d] [-i] [-t] [--env=K=V] [--cwd=DIR] ID -- PROGRAM [ARGS...]\n"
    "                       (-d: print its pid, do not wait; wait/logs --pid=N)\n"
    "  attach [--no-stdin] ID   follow a running init (^P ^Q detaches with -t)\n"
    "  ps | list [--json] [-q] [--label=K=V]\n"
    "  logs [-f] [--pid=N] ID   output of the init (or of exec'd process N), 1 MiB\n"
    "  kill [-s SIGNAL] [--all | --pid=N] ID   (N: a pid inside the sandbox)\n"
    "  stop [-t SECS] ID... SIGTERM to the init, SIGKILL after SECS (10)\n"
    "  rm [-f] ID...        destroy (-f: also running ones)\n"
    "  inspect ID           the sandbox as JSON\n"
    "  update [--memory=BYTES] [--cpus=N] [--pids-limit=N] ID...\n"
    "                       a running sandbox's limits (docker update)\n"
    "  pause ID... | unpause ID...   every process stopped / continued\n"
    "  wait [--pid=N] ID    exits as the init program (or exec'd process N) did\n"
    "  wait --restored ID   returns once a restored sandbox's memory is loaded\n"
    "  checkpoint [--leave-running] ID --image=DIR\n"
    "  restore --image=DIR [--name=ID] [-d] [-i] [--memory=BYTES] [-p ...]\n"
    "                       a new sandbox from a checkpoint image\n"
    "  version              sandboxctl's version and the daemon's\n"
    "\n"
    "`sandboxctl COMMAND --help` lists a command's flags (run's and create's\n"
    "spec flags: --name --rootfs --env --cwd --platform --hostname --network\n"
    "--label --memory --cpus --pids --user --systrap-patch --checkpoint-dir\n"
    "--checkpoint-limit).\n";

using Command = int (*)(Client&, std::vector<std::string>);

const std::map<std::string, Command>& Commands() {
  static const auto* commands = new std::map<std::string, Command>{
      {"run", Run},         {"create", Create},   {"start", Start},
      {"exec", Exec},       {"ps", Ps},           {"list", Ps},
      {"ls", Ps},           {"logs", Logs},       {"kill", Kill},
      {"rm", Rm},           {"inspect", Inspect}, {"wait", Wait},
      {"stop", Stop},       {"update", Update},   {"pause", Pause},
      {"unpause", Unpause},
      {"checkpoint", Checkpoint}, {"restore", Restore}, {"attach", Attach},
      {"version", Version},
  };
  return *commands;
}

int Main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  ConnectOptions co;
  std::string socket, token_file;
  flags::FlagSet fs("sandboxctl", "[FLAGS] COMMAND [ARGS...]");
  fs.String("socket", &socket, "PATH",
            "the daemon's unix socket (default: $SANDBOXD_SOCKET, else "
            "/run/sandboxd/sandboxd.sock)");
  fs.String("tcp", &co.tcp_address, "HOST:PORT", "the daemon over TCP with TLS");
  fs.String("ca-cert", &co.ca_cert_file, "FILE", "the CA that signed the daemon's certificate");
  fs.String("token-file", &token_file, "FILE", "the bearer token for --tcp");
  bool version = false;
  fs.Bool("version", &version, "print sandboxctl's version and exit");
  fs.set_footer(kCommands);
  absl::StatusOr<std::vector<std::string>> rest = fs.Parse(flags::Args(argc, argv));
  if (fs.help_requested()) {
    fputs(fs.Help().c_str(), stdout);
    return 0;
  }
  if (version && rest.ok()) {
    printf("sandboxctl %s\n", kVersion);
    return 0;
  }
  if (!rest.ok()) {
    fputs(fs.Help().c_str(), stderr);
    Fail(kExitError, std::string(rest.status().message()));
  }
  if (rest->empty()) {
    fputs(fs.Help().c_str(), stderr);
    return kExitError;
  }
  const std::string cmd = (*rest)[0];
  std::vector<std::string> args(rest->begin() + 1, rest->end());
  if (cmd == "help") {
    fputs(fs.Help().c_str(), stdout);
    return 0;
  }
  auto it = Commands().find(cmd);
  if (it == Commands().end()) {
    Fail(kExitError, absl::StrCat("unknown command: ", cmd, " (see sandboxctl help)"));
  }
  // COMMAND --help needs no daemon: the command prints its flags before
  // its first call.
  bool help = false;
  for (const std::string& a : args) {
    if (a == "--") break;
    help |= a == "--help" || a == "-h";
  }
  co.socket = SocketFromEnv(socket);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = daemon::ReadTokenFile(token_file);
    FailOn(token.status());
    co.token = *token;
  }
  if (!help && co.tcp_address.empty() && access(co.socket.c_str(), F_OK) != 0) {
    // Reported once the command's flags have been read (ParseFlags).
    no_daemon = absl::StrCat("sandboxd is not running (no socket at ", co.socket,
                             "); start it with: sandboxd --socket=", co.socket);
  }
  co.connect_now = !help && no_daemon.empty();
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(co);
  FailOn(c.status());
  // Never destroyed: the process ends with QuickExit, and destroying the
  // last channel would shut gRPC down, joining its threads (milliseconds).
  Client& client = *c->release();
  // Without connect_now's connection (TCP, or a failed connect), gRPC's
  // threads connect while this one reads the command's arguments.
  client.ConnectInBackground();
  return it->second(client, std::move(args));
}

}  // namespace
}  // namespace sandboxd::client::ctl

int main(int argc, char** argv) {
  sandboxd::client::ctl::main_entered = absl::Now();
  // Debian's Abseil is built with its Mutex deadlock detection on: every
  // lock of gRPC's mutexes updated a lock graph (a few % of a command's
  // CPU). A client process that lives for one command does not need it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sandboxd::client::ctl::QuickExit(sandboxd::client::ctl::Main(argc, argv));
}
