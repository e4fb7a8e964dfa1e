#include "client/client.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/stage_clock.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "daemon/auth.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/create_channel_posix.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"

namespace sandboxd {
namespace client {
namespace {

// Data per stdin message: large enough for throughput, small enough to
// stay far below gRPC's 4 MiB message limit.
constexpr size_t kStdinChunk = 64 << 10;

// Finds docker's detach sequence, ^P ^Q, in the stdin an attach sends.
class DetachScanner {
 public:
  // Rewrites `*data` to what is to be sent now: everything before the
  // sequence when it is complete (then true), else all but a ^P at the
  // end, which waits for the next chunk (a ^P held from the last chunk
  // goes first unless a ^Q completes it).
  bool Scan(std::string* data) {
    std::string out;
    for (char c : *data) {
      if (held_) {
        held_ = false;
        if (c == kCtrlQ) {
          *data = std::move(out);
          return true;
        }
        out.push_back(kCtrlP);
      }
      if (c == kCtrlP) {
        held_ = true;
      } else {
        out.push_back(c);
      }
    }
    *data = std::move(out);
    return false;
  }

 private:
  static constexpr char kCtrlP = 0x10, kCtrlQ = 0x11;
  bool held_ = false;
};

// The channel's arguments. BDP probes (a PING sent with a burst of data,
// to size the flow-control window for a long, fat link) only cost both
// ends a wakeup on a unix socket; with retries off, gRPC does not keep a
// copy of every message sent on a stream in case it must replay it.
// Channelz (per-channel, subchannel and socket nodes and counters kept for
// an introspection service) has no reader in a client that lives for one
// command; there is no proxy between us and the daemon, and no service
// config to look up in a resolver. (A channel of its own subchannels,
// grpc.use_local_subchannel_pool, is slower to find a restarted daemon:
// client_test's restart waited out a reconnect backoff.)
grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_ENABLE_CHANNELZ, 0);
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  args.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
  return args;
}

// A connected unix stream socket, or an invalid fd.
UniqueFd ConnectUnix(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return UniqueFd();
  memcpy(addr.sun_path, path.data(), path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return UniqueFd();
  }
  return fd;
}

}  // namespace

std::string SocketFromEnv(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = getenv("SANDBOXD_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  return kDefaultSocket;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ConnectOptions& o) {
  if (!o.tcp_address.empty()) {
    if (o.token.empty()) {
      return absl::InvalidArgumentError("TCP connections need a bearer token (--token-file)");
    }
    ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> creds,
                     daemon::ClientCredentials(o.ca_cert_file, o.token));
    return std::unique_ptr<Client>(new Client(
        o.tcp_address, grpc::CreateCustomChannel(o.tcp_address, creds, ChannelArgs()),
        /*direct=*/false));
  }
  if (o.socket.empty()) return absl::InvalidArgumentError("no socket path");
  const std::string target = absl::StrCat("unix:", o.socket);
  if (o.connect_now) {
    UniqueFd fd = ConnectUnix(o.socket);
    if (fd.valid()) {
      return std::unique_ptr<Client>(new Client(
          o.socket, grpc::CreateCustomInsecureChannelFromFd(target, fd.release(), ChannelArgs()),
          /*direct=*/true));
    }
  }
  return std::unique_ptr<Client>(new Client(
      o.socket,
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), ChannelArgs()),
      /*direct=*/false));
}

Client::Client(std::string target, std::shared_ptr<grpc::Channel> channel, bool direct)
    : target_(std::move(target)),
      channel_(std::move(channel)),
      direct_(direct),
      stub_(v1::Sandboxes::NewStub(channel_)) {}

absl::Status Client::Convert(const grpc::Status& s) const {
  if (s.ok()) return absl::OkStatus();
  // UNAVAILABLE from the transport (no daemon) or from the daemon itself
  // (a Sentry that could not start): only a channel that is not connected
  // means the former.
  // A direct channel has no connectivity state: whether the daemon still
  // listens tells.
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
      (direct_ ? !ConnectUnix(target_).valid()
               : channel_->GetState(false) != GRPC_CHANNEL_READY)) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach sandboxd at ", target_,
        " (is it running? start it with: sandboxd --socket=", target_, ")"));
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::Status Client::Health(absl::Duration timeout) {
  // grpc.health.v1.Health/Check with an empty request (service ""): the
  // reply's field 1 is the serving status, SERVING = 1.
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::CompletionQueue cq;
  auto call = generic.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  RETURN_IF_ERROR(Convert(status));
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes != std::string("\x08\x01", 2)) {
    return absl::UnavailableError(absl::StrCat("sandboxd at ", target_, " is not serving"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::CreateResponse> Client::Create(const v1::CreateRequest& req) {
  grpc::ClientContext ctx;
  v1::CreateResponse resp;
  RETURN_IF_ERROR(Convert(stub_->Create(&ctx, req, &resp)));
  return resp;
}

absl::Status Client::Start(const std::string& id) {
  grpc::ClientContext ctx;
  v1::StartRequest req;
  req.set_id(id);
  v1::StartResponse resp;
  return Convert(stub_->Start(&ctx, req, &resp));
}

absl::StatusOr<v1::WaitResponse> Client::CallWait(const v1::WaitRequest& req,
                                                  absl::Duration timeout) {
  grpc::ClientContext ctx;
  if (timeout != absl::InfiniteDuration()) {
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  v1::WaitResponse resp;
  RETURN_IF_ERROR(Convert(stub_->Wait(&ctx, req, &resp)));
  return resp;
}

absl::StatusOr<v1::ExitStatus> Client::Wait(const std::string& id, absl::Duration timeout) {
  v1::WaitRequest req;
  req.set_id(id);
  ASSIGN_OR_RETURN(v1::WaitResponse resp, CallWait(req, timeout));
  return resp.exit();
}

absl::StatusOr<v1::RestoreProgress> Client::WaitRestored(const std::string& id,
                                                         absl::Duration timeout) {
  v1::WaitRequest req;
  req.set_id(id);
  req.set_restored(true);
  ASSIGN_OR_RETURN(v1::WaitResponse resp, CallWait(req, timeout));
  return resp.restore();
}

absl::StatusOr<v1::ExitStatus> Client::WaitPid(const std::string& id, int pid,
                                               absl::Duration timeout) {
  v1::WaitRequest req;
  req.set_id(id);
  req.set_pid(pid);
  ASSIGN_OR_RETURN(v1::WaitResponse resp, CallWait(req, timeout));
  return resp.exit();
}

absl::Status Client::Signal(const std::string& id, int signal, bool all, int pid) {
  grpc::ClientContext ctx;
  v1::SignalRequest req;
  req.set_id(id);
  req.set_signal(signal);
  req.set_all(all);
  req.set_pid(pid);
  v1::SignalResponse resp;
  return Convert(stub_->Signal(&ctx, req, &resp));
}

absl::StatusOr<v1::Limits> Client::Update(const std::string& id, const v1::Limits& limits,
                                          const v1::LimitsLifted& lifted) {
  grpc::ClientContext ctx;
  v1::UpdateRequest req;
  req.set_id(id);
  *req.mutable_limits() = limits;
  *req.mutable_unlimited() = lifted;
  v1::UpdateResponse resp;
  RETURN_IF_ERROR(Convert(stub_->Update(&ctx, req, &resp)));
  return resp.limits();
}

absl::Status Client::Pause(const std::string& id) {
  grpc::ClientContext ctx;
  v1::PauseRequest req;
  req.set_id(id);
  v1::PauseResponse resp;
  return Convert(stub_->Pause(&ctx, req, &resp));
}

absl::Status Client::Resume(const std::string& id) {
  grpc::ClientContext ctx;
  v1::ResumeRequest req;
  req.set_id(id);
  v1::ResumeResponse resp;
  return Convert(stub_->Resume(&ctx, req, &resp));
}

absl::StatusOr<v1::ExitStatus> Client::Destroy(const std::string& id) {
  grpc::ClientContext ctx;
  v1::DestroyRequest req;
  req.set_id(id);
  v1::DestroyResponse resp;
  RETURN_IF_ERROR(Convert(stub_->Destroy(&ctx, req, &resp)));
  return resp.exit();
}

absl::StatusOr<std::vector<v1::SandboxInfo>> Client::List(
    const std::map<std::string, std::string>& labels) {
  grpc::ClientContext ctx;
  v1::ListRequest req;
  for (const auto& [k, v] : labels) (*req.mutable_label_selector())[k] = v;
  v1::ListResponse resp;
  RETURN_IF_ERROR(Convert(stub_->List(&ctx, req, &resp)));
  return std::vector<v1::SandboxInfo>(resp.sandboxes().begin(), resp.sandboxes().end());
}

absl::StatusOr<v1::SandboxInfo> Client::Get(const std::string& id) {
  grpc::ClientContext ctx;
  v1::GetRequest req;
  req.set_id(id);
  v1::GetResponse resp;
  RETURN_IF_ERROR(Convert(stub_->Get(&ctx, req, &resp)));
  return resp.info();
}

absl::StatusOr<v1::CheckpointResponse> Client::Checkpoint(
    const v1::CheckpointRequest& req) {
  grpc::ClientContext ctx;
  v1::CheckpointResponse resp;
  RETURN_IF_ERROR(Convert(stub_->Checkpoint(&ctx, req, &resp)));
  return resp;
}

absl::StatusOr<v1::RestoreResponse> Client::Restore(const v1::RestoreRequest& req) {
  grpc::ClientContext ctx;
  v1::RestoreResponse resp;
  RETURN_IF_ERROR(Convert(stub_->Restore(&ctx, req, &resp)));
  return resp;
}

absl::StatusOr<v1::CapabilitiesResponse> Client::Capabilities() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::CapabilitiesResponse resp;
  RETURN_IF_ERROR(Convert(stub_->Capabilities(&ctx, v1::CapabilitiesRequest(), &resp)));
  return resp;
}

void Client::ConnectInBackground() {
  if (!direct_) (void)channel_->GetState(/*try_to_connect=*/true);
}

absl::Status Client::Logs(const std::string& id, bool follow,
                          const std::function<void(const v1::LogsResponse&)>& on_chunk,
                          int pid) {
  grpc::ClientContext ctx;
  v1::LogsRequest req;
  req.set_id(id);
  req.set_follow(follow);
  req.set_pid(pid);
  std::unique_ptr<grpc::ClientReader<v1::LogsResponse>> reader = stub_->Logs(&ctx, req);
  v1::LogsResponse m;
  while (reader->Read(&m)) on_chunk(m);
  return Convert(reader->Finish());
}

absl::StatusOr<v1::ExitStatus> Client::Exec(const std::string& id, bool attach,
                                            const v1::ProcessSpec& process, ExecIo io) {
  absl::Time step = absl::Now();
  auto mark = [&](Stage s) {
    if (io.trace == nullptr) return;
    const absl::Time now = absl::Now();
    io.trace->steps.emplace_back(std::string(StageName(s)), now - step);
    step = now;
  };
  grpc::ClientContext ctx;
  // The call's headers wait for its first message and go out with it, in
  // one write, rather than on their own.
  ctx.set_initial_metadata_corked(true);
  auto stream = stub_->Exec(&ctx);

  v1::ExecRequest first;
  first.mutable_start()->set_id(id);
  if (attach) {
    first.mutable_start()->set_attach(true);
    first.mutable_start()->set_remove(io.remove);
    if (io.create != nullptr) *first.mutable_start()->mutable_create() = *io.create;
  } else {
    *first.mutable_start()->mutable_process() = process;
  }
  // The terminal's size goes with `start`, so that it is set before the
  // program runs (an init created without a terminal ignores it).
  {
    uint32_t rows = 0, cols = 0;
    if (io.get_size && io.get_size(&rows, &cols) && rows > 0 && cols > 0) {
      first.mutable_start()->mutable_size()->set_rows(rows);
      first.mutable_start()->mutable_size()->set_cols(cols);
    }
  }
  // Nothing to send after `start` (no stdin, no terminal to resize, e.g.
  // `sandboxctl run` without -i or -t): `start` half-closes the call too,
  // which the daemon takes as the end of stdin, so that the whole request
  // is one write and no writer thread is needed.
  const bool start_only =
      io.stdin_fd < 0 && io.stdin_data.empty() && io.resize_fd < 0 && !io.get_size;
  if (start_only) {
    if (!stream->Write(first, grpc::WriteOptions().set_last_message())) {
      return Convert(stream->Finish());
    }
  } else if (!stream->Write(first)) {
    return Convert(stream->Finish());
  }
  mark(Stage::kClientExecOpen);

  // Else one writer thread: the initial size, stdin, resizes, then
  // close_stdin. It half-closes as soon as it has nothing more to send
  // (stdin at its end, no terminal to resize), so that the daemon can end
  // the call with the exit status; else once the exit status is in (stop).
  UniqueFd stop;
  std::thread writer;
  DetachScanner escape;
  std::atomic<bool> detached{false};
  if (!start_only) {
    stop = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop.valid()) {
      ctx.TryCancel();
      (void)stream->Finish();
      return absl::InternalError("eventfd failed");
    }
  }
  if (!start_only) writer = std::thread([&] {
    auto send_size = [&] {
      uint32_t rows = 0, cols = 0;
      if (io.get_size && io.get_size(&rows, &cols) && rows > 0 && cols > 0) {
        v1::ExecRequest m;
        m.mutable_resize()->set_rows(rows);
        m.mutable_resize()->set_cols(cols);
        return stream->Write(m);
      }
      return true;
    };
    bool ok = send_size();
    bool in_open = io.stdin_fd >= 0;
    if (ok && !in_open) {
      for (size_t off = 0; ok && off < io.stdin_data.size(); off += kStdinChunk) {
        v1::ExecRequest m;
        m.set_stdin(io.stdin_data.substr(off, kStdinChunk));
        ok = stream->Write(m);
      }
      v1::ExecRequest m;
      m.set_close_stdin(true);
      if (ok) ok = stream->Write(m);
    }
    std::string buf(kStdinChunk, '\0');
    while (ok && (in_open || io.resize_fd >= 0)) {
      pollfd p[3] = {{stop.get(), POLLIN, 0},
                     {in_open ? io.stdin_fd : -1, POLLIN, 0},
                     {io.resize_fd, POLLIN, 0}};
      if (poll(p, 3, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (p[0].revents) break;
      if (p[2].revents) {
        char drain[64];
        (void)!read(io.resize_fd, drain, sizeof(drain));
        ok = send_size();
      }
      if (p[1].revents) {
        ssize_t n = read(io.stdin_fd, buf.data(), buf.size());
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        v1::ExecRequest m;
        if (n <= 0) {
          in_open = false;
          if (io.keep_stdin_open) continue;
          m.set_close_stdin(true);
        } else {
          std::string data = buf.substr(0, static_cast<size_t>(n));
          if (io.detach_keys && escape.Scan(&data)) {
            if (!data.empty()) {
              m.set_stdin(std::move(data));
              (void)stream->Write(m);
            }
            detached.store(true);
            ctx.TryCancel();
            break;
          }
          if (data.empty()) continue;  // a ^P held back
          m.set_stdin(std::move(data));
        }
        ok = stream->Write(m);
      }
    }
    stream->WritesDone();
  });

  v1::ExitStatus exit;
  bool have_exit = false;
  v1::ExecResponse r;
  bool first_response = true;
  while (stream->Read(&r)) {
    if (first_response) {
      first_response = false;
      mark(Stage::kClientExecPid);
      if (!r.id().empty() && io.on_id) io.on_id(r.id());
      if (io.on_pid) io.on_pid(r.pid());
      if (io.detach_after_pid) {
        ctx.TryCancel();
        break;
      }
    }
    switch (r.msg_case()) {
      case v1::ExecResponse::kStdout:
        if (io.on_stdout) io.on_stdout(r.stdout());
        break;
      case v1::ExecResponse::kStderr:
        if (io.on_stderr) io.on_stderr(r.stderr());
        break;
      case v1::ExecResponse::kExit:
        exit = r.exit();
        have_exit = true;
        mark(Stage::kClientExecExit);
        if (io.trace != nullptr) {
          io.trace->has_timings = r.has_timings();
          io.trace->timings = r.timings();
          io.trace->removed = r.removed();
        }
        break;
      default:
        break;
    }
    if (have_exit) break;
  }
  if (writer.joinable()) {
    const uint64_t one = 1;
    (void)!write(stop.get(), &one, sizeof(one));
    writer.join();
  }
  if (have_exit) {
    // Drain to the end of the stream so that Finish sees the status.
    while (stream->Read(&r)) {
    }
  }
  grpc::Status s = stream->Finish();
  mark(Stage::kClientExecFinish);
  if (io.detached != nullptr) *io.detached = detached.load();
  if (io.detach_after_pid && !first_response) return v1::ExitStatus();
  if (detached.load()) return absl::CancelledError("detached (^P ^Q)");
  if (!s.ok()) return Convert(s);
  if (!have_exit) return absl::InternalError("Exec ended without an exit status");
  return exit;
}

absl::StatusOr<v1::ExitStatus> Client::CreateAndAttach(const v1::CreateRequest& req,
                                                       ExecIo io) {
  io.create = &req;
  return Exec("", /*attach=*/true, {}, std::move(io));
}

int ExitCode(const v1::ExitStatus& status) {
  if (!status.error().empty()) return 125;
  if (status.status_case() == v1::ExitStatus::kSignal) return 128 + status.signal();
  return status.code();
}

}  // namespace client
}  // namespace sandboxd
