// Real gRPC servers and clients, with the standard health service as the
// trivial service, and certificates made by the openssl command.
#include "daemon/auth.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/byte_buffer.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"

namespace sandboxd {
namespace daemon {
namespace {

void Spit(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path, std::ios::trunc) << text;
  ASSERT_EQ(chmod(path.c_str(), mode), 0);
}

// grpc.health.v1.Health/Check with an empty request; a SERVING reply is the
// protobuf bytes 08 01 (field 1, varint 1).
grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel,
                         std::string* reply = nullptr) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request(nullptr, 0);
  grpc::ByteBuffer response;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  if (status.ok() && reply != nullptr) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(response.Dump(&slices).ok());
    reply->clear();
    for (const grpc::Slice& s : slices) {
      reply->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return status;
}

// gRPC will not start a server without a service of its own; the health
// service is added only at start. This one answers UNIMPLEMENTED to all.
class NoService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext*) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      Reactor() { Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")); }
      void OnDone() override { delete this; }
    };
    return new Reactor;
  }
};

class AuthTest : public testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // as sandboxd: the TLS relay writes to clients
    char tmpl[] = "/tmp/sbx-auth-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    cert_ = dir_ + "/cert.pem";
    key_ = dir_ + "/key.pem";
    token_file_ = dir_ + "/token";
    // A self-signed certificate for localhost and 127.0.0.1.
    std::string cmd = absl::StrCat(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes",
        " -keyout ", key_, " -out ", cert_, " -days 1 -subj /CN=localhost",
        " -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>", dir_, "/openssl.log");
    ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
    Spit(token_file_, "s3cret-token\n", 0600);
  }
  void TearDown() override {
    if (listener_ != nullptr) listener_->Stop();
    if (server_ != nullptr) server_->Shutdown();
    std::string cmd = absl::StrCat("rm -rf ", dir_);
    ASSERT_EQ(system(cmd.c_str()), 0);
  }

  // Starts a health-check-only server; returns the listener's status.
  absl::Status Start(const ListenOptions& options) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.RegisterCallbackGenericService(&no_service_);
    auto listener = Listener::Prepare(options, &builder);
    if (!listener.ok()) return listener.status();
    listener_ = std::move(*listener);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr) return absl::InternalError("BuildAndStart failed");
    return listener_->AfterStart(server_.get());
  }

  // A group other than ours that a file can be given to: "nogroup" on a
  // normal host; inside a user namespace that does not map it (Bazel's
  // sandbox) our own group, so that the chgrp path still runs.
  std::string ChownableGroup() {
    std::string probe = dir_ + "/probe";
    Spit(probe, "", 0600);
    struct group* g = getgrnam("nogroup");
    if (g != nullptr && chown(probe.c_str(), -1, g->gr_gid) == 0) return "nogroup";
    g = getgrgid(getegid());
    return g != nullptr ? g->gr_name : "root";
  }

  ListenOptions TcpOptions() {
    ListenOptions o;
    o.tcp_address = "127.0.0.1:0";
    o.tls_cert_file = cert_;
    o.tls_key_file = key_;
    o.token_file = token_file_;
    return o;
  }

  std::shared_ptr<grpc::Channel> TlsChannel(const std::string& token) {
    auto creds = ClientCredentials(cert_, token);
    EXPECT_TRUE(creds.ok()) << creds.status();
    return grpc::CreateChannel(absl::StrCat("localhost:", listener_->tcp_port()), *creds);
  }

  std::string dir_, cert_, key_, token_file_;
  NoService no_service_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(AuthTest, TcpNeedsTheToken) {
  absl::Status started = Start(TcpOptions());
  ASSERT_TRUE(started.ok()) << started;
  ASSERT_GT(listener_->tcp_port(), 0);

  // With the token: served.
  std::string reply;
  grpc::Status s = HealthCheck(TlsChannel("s3cret-token"), &reply);
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  EXPECT_EQ(reply, std::string("\x08\x01", 2)) << "SERVING";

  // A wrong token: refused.
  s = HealthCheck(TlsChannel("s3cret-tokem"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "wrong bearer token"))
      << s.error_message();

  // TLS but no token at all: refused.
  grpc::SslCredentialsOptions tls;
  std::ifstream in(cert_);
  tls.pem_root_certs.assign(std::istreambuf_iterator<char>(in), {});
  s = HealthCheck(grpc::CreateChannel(absl::StrCat("localhost:", listener_->tcp_port()),
                                      grpc::SslCredentials(tls)));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();

  // Plain text to the TLS port: no connection.
  s = HealthCheck(grpc::CreateChannel(absl::StrCat("127.0.0.1:", listener_->tcp_port()),
                                      grpc::InsecureChannelCredentials()));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(AuthTest, TcpWithoutTlsOrTokenIsRefused) {
  for (int missing = 0; missing < 3; ++missing) {
    ListenOptions o = TcpOptions();
    (missing == 0 ? o.tls_cert_file : missing == 1 ? o.tls_key_file : o.token_file) = "";
    grpc::ServerBuilder builder;
    auto l = Listener::Prepare(o, &builder);
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument) << missing;
  }
  grpc::ServerBuilder builder;
  EXPECT_EQ(Listener::Prepare(ListenOptions{}, &builder).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "no address at all";
}

TEST_F(AuthTest, TokenFileChecks) {
  EXPECT_EQ(*ReadTokenFile(token_file_), "s3cret-token");
  Spit(token_file_, "s3cret-token\n", 0644);
  auto t = ReadTokenFile(token_file_);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "readable by every user"));
  Spit(token_file_, " \n", 0600);
  EXPECT_EQ(ReadTokenFile(token_file_).status().code(), absl::StatusCode::kInvalidArgument);
  Spit(token_file_, "two words", 0600);
  EXPECT_EQ(ReadTokenFile(token_file_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile(dir_ + "/missing").status().code(), absl::StatusCode::kNotFound);

  // Listener refuses a bad token file too, and a key that is not PEM.
  ListenOptions o = TcpOptions();
  grpc::ServerBuilder builder;
  EXPECT_EQ(Listener::Prepare(o, &builder).status().code(),
            absl::StatusCode::kInvalidArgument);
  Spit(token_file_, "ok", 0600);
  Spit(key_, "not a key", 0600);
  grpc::ServerBuilder builder2;
  auto l = Listener::Prepare(o, &builder2);
  EXPECT_TRUE(absl::StrContains(l.status().message(), "not a PEM file")) << l.status();
}

TEST_F(AuthTest, UnixSocketModeAndGroup) {
  ListenOptions o;
  o.unix_socket = dir_ + "/sandboxd.sock";
  o.socket_group = ChownableGroup();  // the default, "sandboxd", rarely exists here
  absl::Status started = Start(o);
  ASSERT_TRUE(started.ok()) << started;
  struct stat st;
  ASSERT_EQ(stat(o.unix_socket.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  struct group* g = getgrnam(o.socket_group.c_str());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(st.st_gid, g->gr_gid);

  std::string reply;
  grpc::Status s = HealthCheck(
      grpc::CreateChannel(absl::StrCat("unix:", o.unix_socket),
                          grpc::InsecureChannelCredentials()),
      &reply);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply, std::string("\x08\x01", 2));

  // A second daemon on the same socket: refused while the first is alive.
  grpc::ServerBuilder builder;
  auto second = Listener::Prepare(o, &builder);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition)
      << second.status();
  EXPECT_TRUE(absl::StrContains(second.status().message(), "is listening")) << second.status();
}

TEST_F(AuthTest, StaleSocketIsReplaced) {
  // What a killed daemon leaves: a socket file nobody listens on.
  std::string path = dir_ + "/sandboxd.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);

  ListenOptions o;
  o.unix_socket = path;
  absl::Status s = Start(o);
  ASSERT_TRUE(s.ok()) << s;
  grpc::Status h = HealthCheck(grpc::CreateChannel(absl::StrCat("unix:", path),
                                                   grpc::InsecureChannelCredentials()));
  EXPECT_TRUE(h.ok()) << h.error_message();
}

TEST_F(AuthTest, NonSocketFileIsNotRemoved) {
  std::string path = dir_ + "/sandboxd.sock";
  Spit(path, "precious", 0600);
  ListenOptions o;
  o.unix_socket = path;
  grpc::ServerBuilder builder;
  auto l = Listener::Prepare(o, &builder);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition) << l.status();
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << "still there";
}

// Both listeners on one server: the unix socket needs no token.
TEST_F(AuthTest, UnixAndTcpTogether) {
  ListenOptions o = TcpOptions();
  o.unix_socket = dir_ + "/sandboxd.sock";
  absl::Status started = Start(o);
  ASSERT_TRUE(started.ok()) << started;
  EXPECT_TRUE(HealthCheck(grpc::CreateChannel(absl::StrCat("unix:", o.unix_socket),
                                              grpc::InsecureChannelCredentials()))
                  .ok());
  EXPECT_TRUE(HealthCheck(TlsChannel("s3cret-token")).ok());
  EXPECT_EQ(HealthCheck(TlsChannel("nope")).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

// A unix connection that never sends anything.
UniqueFd IdleConnection(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strcpy(addr.sun_path, path.c_str());
  EXPECT_EQ(
      connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << strerror(errno);
  return fd;
}

// Waits until the accept loop has seen `n` connections in all.
ListenerStats AwaitSeen(Listener& l, uint64_t n) {
  ListenerStats st;
  for (int i = 0; i < 500; ++i) {
    st = l.stats();
    if (st.accepted + st.refused + st.dropped_no_fd >= n) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return st;
}

grpc::Status UnixHealthCheck(const std::string& path) {
  return HealthCheck(grpc::CreateChannel(absl::StrCat("unix:", path),
                                         grpc::InsecureChannelCredentials()));
}

TEST_F(AuthTest, UnixConnectionsPerClientAreBounded) {
  ListenOptions o;
  o.unix_socket = dir_ + "/sandboxd.sock";
  o.max_connections = 8;
  o.max_connections_per_client = 4;
  ASSERT_TRUE(Start(o).ok());
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(IdleConnection(o.unix_socket));
  ListenerStats st = AwaitSeen(*listener_, 20);
  EXPECT_EQ(st.accepted, 4u);
  EXPECT_EQ(st.refused, 16u);
  EXPECT_EQ(st.connections, 4);
  // The idle ones gone, the same client is served again: once gRPC has
  // closed its ends, which it does on its own threads (a connection that
  // comes before is refused, as the limit says).
  idle.clear();
  grpc::Status h;
  for (int i = 0; i < 100; ++i) {
    h = UnixHealthCheck(o.unix_socket);
    if (h.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(h.ok()) << h.error_message();
  st = listener_->stats();
  EXPECT_LE(st.connections, 1);
}

// The accept loop outlives running out of descriptors: a pending
// connection is dropped, and once descriptors are free again it accepts.
TEST_F(AuthTest, UnixListenerRecoversFromEmfile) {
  ListenOptions o;
  o.unix_socket = dir_ + "/sandboxd.sock";
  o.max_connections = 100000;
  o.max_connections_per_client = 100000;
  ASSERT_TRUE(Start(o).ok());
  ASSERT_TRUE(UnixHealthCheck(o.unix_socket).ok());
  // A soft limit a little above what is open (a host's may be 1M).
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  int open_now = 0;
  for (int fd = 0; fd < 65536; ++fd) open_now += fcntl(fd, F_GETFD) >= 0;
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, open_now + 200);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  struct Restore {
    rlimit r;
    ~Restore() { setrlimit(RLIMIT_NOFILE, &r); }
  } restore{saved};
  // Use up every descriptor but a few, then connect (the client ends are
  // made first, while there is room).
  std::vector<UniqueFd> clients;
  for (int i = 0; i < 40; ++i) {
    UniqueFd c(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(c.valid());
    clients.push_back(std::move(c));
  }
  std::vector<UniqueFd> filler;
  for (;;) {
    UniqueFd f(open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!f.valid()) break;
    filler.push_back(std::move(f));
  }
  ASSERT_EQ(errno, EMFILE);
  // Room for the accept loop's first few only.
  for (int i = 0; i < 3 && !filler.empty(); ++i) filler.pop_back();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strcpy(addr.sun_path, o.unix_socket.c_str());
  for (UniqueFd& c : clients) {
    ASSERT_EQ(
        connect(c.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << strerror(errno);
  }
  ListenerStats st = AwaitSeen(*listener_, 1 + clients.size());
  EXPECT_GT(st.dropped_no_fd, 0u) << "descriptors ran out in accept";
  filler.clear();
  clients.clear();
  grpc::Status h = UnixHealthCheck(o.unix_socket);
  EXPECT_TRUE(h.ok()) << "accepting again after EMFILE: " << h.error_message();
}

// A TCP connection that never starts a TLS handshake.
UniqueFd BareTcpConnection(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << strerror(errno);
  return fd;
}

// The TCP port has the unix socket's limits: per client (address) and in
// all, counted until the connection is gone.
TEST_F(AuthTest, TcpConnectionsPerClientAreBounded) {
  ListenOptions o = TcpOptions();
  o.max_connections = 8;
  o.max_connections_per_client = 4;
  ASSERT_TRUE(Start(o).ok());
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 20; ++i) idle.push_back(BareTcpConnection(listener_->tcp_port()));
  ListenerStats st = AwaitSeen(*listener_, 20);
  EXPECT_EQ(st.accepted, 4u);
  EXPECT_EQ(st.refused, 16u);
  EXPECT_EQ(st.connections, 4);
  EXPECT_EQ(st.tcp_connections, 4);
  idle.clear();
  grpc::Status h;
  for (int i = 0; i < 100; ++i) {  // until the relay has seen them go
    h = HealthCheck(TlsChannel("s3cret-token"));
    if (h.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(h.ok()) << h.error_message();
}

// A TCP connection whose TLS handshake does not come is closed.
TEST_F(AuthTest, TcpHandshakeTimesOut) {
  ListenOptions o = TcpOptions();
  o.handshake_timeout_ms = 200;
  ASSERT_TRUE(Start(o).ok());
  UniqueFd c = BareTcpConnection(listener_->tcp_port());
  pollfd p{c.get(), POLLIN, 0};
  // The relay looks at handshakes at least once a second.
  ASSERT_EQ(poll(&p, 1, 5000), 1) << "still open after 5 s";
  char b;
  EXPECT_LE(recv(c.get(), &b, 1, 0), 0) << "closed by the daemon";
}

// Only a connection the unix socket's loop handed over goes without the
// token; any other peer (a relayed TCP connection, a descriptor not in
// the table, a peer of another form) must carry it.
TEST_F(AuthTest, CheckCallDemandsTheTokenOfAnyOtherPeer) {
  ListenOptions o = TcpOptions();
  o.unix_socket = dir_ + "/sandboxd.sock";
  ASSERT_TRUE(Start(o).ok());
  const std::multimap<grpc::string_ref, grpc::string_ref> none;
  for (const char* peer : {"fd:0", "fd:99999", "fd:", "ipv4:127.0.0.1:5", "unix:x", ""}) {
    EXPECT_EQ(listener_->CheckCall(peer, none).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << peer;
  }
  std::multimap<grpc::string_ref, grpc::string_ref> with;
  with.emplace("authorization", "Bearer s3cret-token");
  EXPECT_TRUE(listener_->CheckCall("fd:99999", with).ok());
  std::multimap<grpc::string_ref, grpc::string_ref> wrong;
  wrong.emplace("authorization", "Bearer s3cret-tokem");
  EXPECT_EQ(listener_->CheckCall("fd:99999", wrong).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
