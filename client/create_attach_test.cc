// Client::CreateAndAttach against a fake daemon (a gRPC server in the test
// on a private unix socket): a refused request is one call, never retried
// as a Create; and a plain start-only run half-closes the call with its
// first message.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"

namespace sandboxd {
namespace client {
namespace {

// The fake's base: Create gives "made-1"; Exec with an id runs the
// sandbox's init, which exits 7 once the client has half-closed.
class FakeBase : public v1::Sandboxes::Service {
 public:
  grpc::Status Create(grpc::ServerContext*, const v1::CreateRequest*,
                      v1::CreateResponse* resp) override {
    creates++;
    resp->set_id("made-1");
    return grpc::Status::OK;
  }

  std::atomic<int> creates{0};
  std::atomic<int> execs{0};
  // The client half-closed right after `start` (no close_stdin message).
  std::atomic<bool> start_only{false};

 protected:
  grpc::Status RunInit(const std::string& id,
                       grpc::ServerReaderWriter<v1::ExecResponse, v1::ExecRequest>* stream) {
    v1::ExecResponse r;
    r.set_pid(1);
    r.set_id(id);
    stream->Write(r);
    v1::ExecRequest m;
    bool more = false;
    while (stream->Read(&m)) more = true;
    start_only = !more;
    v1::ExecResponse e;
    e.mutable_exit()->set_code(7);
    stream->Write(e);
    return grpc::Status::OK;
  }
};

// A daemon with Start.create that refuses the request as a bad one.
class NewDaemon : public FakeBase {
 public:
  grpc::Status Exec(grpc::ServerContext*,
                    grpc::ServerReaderWriter<v1::ExecResponse, v1::ExecRequest>* stream) override {
    execs++;
    v1::ExecRequest first;
    if (!stream->Read(&first)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "none");
    if (first.start().create().spec().rootfs() != "/") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec.rootfs: bad");
    }
    return RunInit("new-1", stream);
  }
};

class Fake {
 public:
  explicit Fake(grpc::Service* service) {
    char tmpl[] = "/tmp/sbx_create_attach_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    socket_ = dir_ + "/s.sock";
    grpc::ServerBuilder b;
    b.AddListeningPort(absl::StrCat("unix:", socket_), grpc::InsecureServerCredentials());
    b.RegisterService(service);
    server_ = b.BuildAndStart();
  }
  ~Fake() {
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<Client> Connect() {
    ConnectOptions o;
    o.socket = socket_;
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }
  bool up() const { return server_ != nullptr; }

 private:
  std::string dir_, socket_;
  std::unique_ptr<grpc::Server> server_;
};

v1::CreateRequest Request(const std::string& rootfs) {
  v1::CreateRequest req;
  req.mutable_spec()->set_rootfs(rootfs);
  req.mutable_spec()->mutable_process()->add_argv("/bin/true");
  return req;
}

TEST(CreateAttachTest, BadRequestIsNotRetriedAsCreate) {
  NewDaemon d;
  Fake f(&d);
  ASSERT_TRUE(f.up());
  std::unique_ptr<Client> c = f.Connect();
  absl::StatusOr<v1::ExitStatus> exit = c->CreateAndAttach(Request("rel"), ExecIo());
  ASSERT_FALSE(exit.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(exit.status())) << exit.status();
  EXPECT_EQ(exit.status().message(), "spec.rootfs: bad");
  EXPECT_EQ(d.creates, 0);
  EXPECT_EQ(d.execs, 1);
}

TEST(CreateAttachTest, OneCallThatHalfClosesWithStart) {
  NewDaemon d;
  Fake f(&d);
  ASSERT_TRUE(f.up());
  std::unique_ptr<Client> c = f.Connect();
  ExecIo io;
  std::string id;
  io.on_id = [&](const std::string& i) { id = i; };
  absl::StatusOr<v1::ExitStatus> exit = c->CreateAndAttach(Request("/"), io);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_EQ(exit->code(), 7);
  EXPECT_EQ(id, "new-1");
  EXPECT_EQ(d.creates, 0);
  EXPECT_TRUE(d.start_only);

  // With data for stdin the call stays open for it.
  io.stdin_data = "x";
  exit = c->CreateAndAttach(Request("/"), io);
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_FALSE(d.start_only);
}

}  // namespace
}  // namespace client
}  // namespace sandboxd
