// C++ client of sandboxd's gRPC API (sandboxd.v1.Sandboxes), used by
// sandboxctl and the tests: connection set-up (unix socket, or TCP with TLS
// and a bearer token), unary calls as absl::StatusOr, and Exec/attach with
// the local side of the stdio given as callbacks.
//
// Thread safety: a Client may be used from several threads at once.
#ifndef SANDBOXD_CLIENT_CLIENT_H_
#define SANDBOXD_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/sandbox.grpc.pb.h"

namespace sandboxd {
namespace client {

inline constexpr char kDefaultSocket[] = "/run/sandboxd/sandboxd.sock";

struct ConnectOptions {
  // Unix socket path (the default transport).
  std::string socket = kDefaultSocket;
  // "host:port": TCP with TLS instead of the socket; needs the token.
  std::string tcp_address;
  std::string ca_cert_file;  // trusted CA (the server's cert when self-signed)
  std::string token;         // bearer token
  // Unix socket only, for a client that lives for one command: Connect
  // connects now, before gRPC starts up (so that the daemon's accept and
  // HTTP/2 settings overlap gRPC's start-up), and the channel runs on that
  // one connection (gRPC's "direct" channel: no resolver, load balancer,
  // connectivity wait or reconnect). When the connect fails, the channel
  // is the usual one, which reports the failure at the first call.
  bool connect_now = false;
};

// The socket to use: `flag` when set, else $SANDBOXD_SOCKET, else the default.
std::string SocketFromEnv(const std::string& flag);

// What an Exec call tells besides the exit status.
struct ExecTrace {
  // The client's steps of the call by wire name (base/stage_clock.h),
  // timed, in order: client.exec.open (the call and its first message),
  // client.exec.pid (until the first response: the start),
  // client.exec.exit (until the exit message), client.exec.finish (until
  // the call's status).
  std::vector<std::pair<std::string, absl::Duration>> steps;
  // With the exit of an attach: the sandbox's timings (ExecResponse.timings).
  bool has_timings = false;
  v1::Timings timings;
  // The daemon destroys the sandbox (it honoured ExecIo::remove).
  bool removed = false;
};

// The local side of an Exec's stdio.
struct ExecIo {
  // stdin: read from `stdin_fd` until its end (-1: none), or, when
  // `stdin_fd` is -1, `stdin_data` is sent; then close_stdin.
  int stdin_fd = -1;
  std::string stdin_data;
  // Terminal resizes (tty only): when `resize_fd` becomes readable (a
  // self-pipe written by a SIGWINCH handler) it is drained and `get_size`
  // gives the size to send. `get_size` also gives the initial size.
  int resize_fd = -1;
  std::function<bool(uint32_t* rows, uint32_t* cols)> get_size;
  // Output, in order, on the calling thread.
  std::function<void(absl::string_view)> on_stdout;
  std::function<void(absl::string_view)> on_stderr;
  // The process's pid inside the sandbox, once known.
  std::function<void(int pid)> on_pid;
  // Attach only: the daemon destroys the sandbox when the call ends
  // (ExecRequest.Start.remove); see ExecTrace::removed.
  bool remove = false;
  // Attach only: the sandbox is created by the same call
  // (ExecRequest.Start.create; Exec's `id` is unused), and `on_id` gets
  // its id with the first response, before `on_pid`.
  const v1::CreateRequest* create = nullptr;
  std::function<void(const std::string& id)> on_id;
  // Filled in when set.
  ExecTrace* trace = nullptr;
  // At the end of `stdin_fd` nothing is sent (no close_stdin): an attach
  // to a running init leaves its stdin open for the next one.
  bool keep_stdin_open = false;
  // The bytes ^P ^Q in `stdin_fd` end the call without an exit status
  // (the process runs on): Exec then returns CANCELLED and sets
  // `*detached` (may be null). A ^P not followed by ^Q is sent on.
  bool detach_keys = false;
  bool* detached = nullptr;
  // The call ends once the pid is known (`sandboxctl exec -d`): Exec
  // returns an empty status, the process runs on.
  bool detach_after_pid = false;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ConnectOptions& o);

  // UNAVAILABLE with a one-line hint when the daemon is not there.
  absl::Status Health(absl::Duration timeout = absl::Seconds(5));

  absl::StatusOr<v1::CreateResponse> Create(const v1::CreateRequest& req);
  absl::Status Start(const std::string& id);
  absl::StatusOr<v1::ExitStatus> Wait(const std::string& id,
                                      absl::Duration timeout = absl::InfiniteDuration());
  // Until every page of restored sandbox `id` is loaded (WaitRequest.restored):
  // the loader's figures, or the load's error.
  absl::StatusOr<v1::RestoreProgress> WaitRestored(
      const std::string& id, absl::Duration timeout = absl::InfiniteDuration());
  // How Exec'd process `pid` of the sandbox ended (WaitRequest.pid).
  absl::StatusOr<v1::ExitStatus> WaitPid(const std::string& id, int pid,
                                         absl::Duration timeout = absl::InfiniteDuration());
  // To the init, to process `pid` of the sandbox (when not 0), or to all.
  absl::Status Signal(const std::string& id, int signal, bool all = false, int pid = 0);
  absl::StatusOr<v1::ExitStatus> Destroy(const std::string& id);
  absl::StatusOr<std::vector<v1::SandboxInfo>> List(
      const std::map<std::string, std::string>& labels = {});
  // Changes a running sandbox's limits (0 fields keep theirs, `lifted`
  // ones are removed); returns them as they are now.
  absl::StatusOr<v1::Limits> Update(const std::string& id, const v1::Limits& limits,
                                    const v1::LimitsLifted& lifted = {});
  // docker pause / unpause: every process of the sandbox stopped / continued.
  absl::Status Pause(const std::string& id);
  absl::Status Resume(const std::string& id);
  absl::StatusOr<v1::SandboxInfo> Get(const std::string& id);
  absl::StatusOr<v1::CheckpointResponse> Checkpoint(const v1::CheckpointRequest& req);
  absl::StatusOr<v1::RestoreResponse> Restore(const v1::RestoreRequest& req);
  absl::StatusOr<v1::CapabilitiesResponse> Capabilities();
  // Starts connecting to the daemon now, in gRPC's threads, so that the
  // connection set-up overlaps what the caller does before its first call.
  void ConnectInBackground();

  // Runs `process` in a RUNNING sandbox (attach=false), or attaches to and
  // starts a CREATED sandbox's init (process ignored), relaying stdio
  // through `io` until the exit status arrives.
  absl::StatusOr<v1::ExitStatus> Exec(const std::string& id, bool attach,
                                      const v1::ProcessSpec& process, ExecIo io);

  // A whole run: creates the sandbox from `req` and attaches to its init
  // (Exec with attach=true), in one call (Start.create). `io.on_id` gets
  // the new sandbox's id.
  absl::StatusOr<v1::ExitStatus> CreateAndAttach(const v1::CreateRequest& req, ExecIo io);

  // The init program's buffered output (an Exec'd process's with `pid`);
  // with `follow`, until it ends.
  absl::Status Logs(const std::string& id, bool follow,
                    const std::function<void(const v1::LogsResponse&)>& on_chunk,
                    int pid = 0);

  const std::string& target() const { return target_; }

 private:
  Client(std::string target, std::shared_ptr<grpc::Channel> channel, bool direct);
  absl::Status Convert(const grpc::Status& s) const;
  // The Wait call that Wait, WaitRestored and WaitPid make.
  absl::StatusOr<v1::WaitResponse> CallWait(const v1::WaitRequest& req, absl::Duration timeout);

  const std::string target_;
  std::shared_ptr<grpc::Channel> channel_;
  // On one connection made by Connect (ConnectOptions::connect_now).
  const bool direct_;
  std::unique_ptr<v1::Sandboxes::Stub> stub_;
};

// sandboxctl's exit code for how a program ended: its code, or 128+N for
// signal N; 125 when the sandbox failed (status.error).
int ExitCode(const v1::ExitStatus& status);

}  // namespace client
}  // namespace sandboxd

#endif  // SANDBOXD_CLIENT_CLIENT_H_
