// sandboxctl's pieces (client/sandboxctl/): what every command shares, and
// the commands, one file each (run.cc, create.cc, exec.cc, ps.cc, logs.cc,
// kill.cc, stop.cc, rm.cc, inspect.cc, wait.cc, attach.cc, checkpoint.cc with restore); main.cc reads the
// global flags and picks the command; terminal.h is -t's raw mode and
// resizes.
//
// Exit status: run, exec and wait exit as the program did (128+N for signal
// N); 125 for an error of sandboxctl or the daemon (one line on stderr),
// 127 when the program to run does not exist, 126 when it cannot be run.
#ifndef SANDBOXD_CLIENT_SANDBOXCTL_SANDBOXCTL_H_
#define SANDBOXD_CLIENT_SANDBOXCTL_SANDBOXCTL_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/flags.h"
#include "client/client.h"
#include "google/protobuf/message.h"
#include "proto/sandbox.pb.h"

namespace sandboxd::client::ctl {

inline constexpr int kExitError = 125;
inline constexpr int kExitCannotRun = 126;
inline constexpr int kExitNotFound = 127;

// Ends the process without tearing gRPC down: its shutdown joins its
// threads with sleeps of a millisecond and more, a cost every command
// would pay after its work is done. Nothing is lost: the output is flushed
// here, and the kernel closes the connection to the daemon.
[[noreturn]] void QuickExit(int code);
// "sandboxctl: MSG" on stderr, then QuickExit(code).
[[noreturn]] void Fail(int code, const std::string& msg);
// Fail(kExitError, ...) when `s` is an error.
void FailOn(const absl::Status& s, const std::string& what = "");

// fs.Parse for a command: --help prints fs.Help() and exits 0; an error
// fails with kExitError. "-it" and "-ti" count as "-i -t". Then, when
// main found no daemon (no_daemon set), fails with that: a bad flag is
// reported before a missing daemon.
std::vector<std::string> ParseFlags(flags::FlagSet& fs,
                                    std::vector<std::string> args);

// PROGRAM [ARGS...] after an optional "--"; fails when there is none.
std::vector<std::string> Program(std::vector<std::string> rest, size_t first,
                                 const char* cmd);
// "K=V" into k and v; false without a key.
bool KeyValue(const std::string& kv, std::string* k, std::string* v);
// With `path`, PATH (and with a tty, TERM) when the process's env lacks
// them. exec passes no PATH: the sandbox's (or the Sentry's default) holds.
void DefaultEnv(v1::ProcessSpec* p, bool tty, bool path = true);
// --user/-u UID[:GID] into p's user (the gid defaults to the uid).
void UserFlag(flags::FlagSet& fs, v1::ProcessSpec* p);
// --network=none|sandbox|host and --publish/-p (repeatable) into spec.
void NetworkFlags(flags::FlagSet& fs, v1::SandboxSpec* spec);
// The exit code for a start, exec or create that failed on the program:
// it is missing (127) or cannot be run (126), in run and exec alike;
// anything else is an error (125).
int StartFailureCode(const absl::Status& s);
std::string ExitText(const v1::ExitStatus& e);
std::string ToJson(const google::protobuf::Message& m);
void WriteAll(int fd, absl::string_view data);
// The local stdio as an ExecIo: stdin with `interactive`, the terminal's
// raw mode and resizes with `tty` (terminal.h).
ExecIo StdIo(bool interactive, bool tty);
// --sig-proxy=true|false (docker's; default true) for run, exec, attach.
void SigProxyFlag(flags::FlagSet& fs, bool* on);

// For --timings: when main() was entered and when the command's first call
// began.
extern absl::Time main_entered;
extern absl::Time call_started;
// Non-empty: why there is no daemon to call, reported by ParseFlags.
extern std::string no_daemon;

// The commands. `args` are the command's own arguments (after its name).
int Run(Client& c, std::vector<std::string> args);
int Create(Client& c, std::vector<std::string> args);
int Start(Client& c, std::vector<std::string> args);
int Exec(Client& c, std::vector<std::string> args);
int Ps(Client& c, std::vector<std::string> args);
int Logs(Client& c, std::vector<std::string> args);
int Kill(Client& c, std::vector<std::string> args);
int Stop(Client& c, std::vector<std::string> args);
int Rm(Client& c, std::vector<std::string> args);
int Inspect(Client& c, std::vector<std::string> args);
int Wait(Client& c, std::vector<std::string> args);
int Update(Client& c, std::vector<std::string> args);
int Pause(Client& c, std::vector<std::string> args);
int Unpause(Client& c, std::vector<std::string> args);
int Attach(Client& c, std::vector<std::string> args);
int Checkpoint(Client& c, std::vector<std::string> args);

int Restore(Client& c, std::vector<std::string> args);
int Version(Client& c, std::vector<std::string> args);
// "512m", "2g", "4096": bytes (run.cc).
absl::StatusOr<uint64_t> ParseBytes(absl::string_view v);
// run's and create's flags that fill the CreateRequest (run.cc).
void SpecFlags(flags::FlagSet& fs, v1::CreateRequest* req);
// What run and create do after their flags: the program and defaults.
void FinishSpec(v1::CreateRequest* req, std::vector<std::string> program,
                bool tty);

}  // namespace sandboxd::client::ctl

#endif  // SANDBOXD_CLIENT_SANDBOXCTL_SANDBOXCTL_H_
