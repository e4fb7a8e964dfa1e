// Round trips of AF_UNIX sockets: build sockets in one namespace and
// mount tree, save them, load them into another and check that the loaded
// ones behave as the originals would: queued data with its boundaries and
// the files it carries, the connection between two ends, a listener's
// pending connection, names that new connections find. And hostinet
// sockets (on the host's loopback): what a load makes of a listener, a
// connection and a bound UDP socket.
#include "sentry/state/socket_state.h"

#include <fcntl.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "sentry/fs/eventfd.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/socket/host_socket.h"
#include "sentry/mm/memory_file.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/pages.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::state {
namespace {

using socket::BufferSink;
using socket::BufferSource;
using socket::Credentials;
using socket::RecvRequest;
using socket::SendRequest;
using socket::Socket;
using socket::UnixAddress;
using socket::UnixSocket;

std::string Abstract(const std::string& name) {
  UnixAddress a;
  a.name = std::string(1, '\0') + name;
  return a.ToSockaddr().substr(0, sizeof(sa_family_t) + a.name.size());
}

std::string PathAddr(const std::string& path) {
  UnixAddress a;
  a.name = path;
  return a.ToSockaddr();
}

// Every socket here is non-blocking: a wait is a test failure.
class NoBlocking : public waiter::Blocker {
 public:
  int Wait(waiter::WaitQueue&, waiter::EventMask, const std::function<bool()>& ready,
           absl::Time) override {
    if (ready()) return 0;
    ADD_FAILURE() << "a non-blocking socket waited";
    return -EAGAIN;
  }
};

// One sandbox's side: a memory file, a tmpfs mount tree and an AF_UNIX
// namespace.
struct Side {
  Side() {
    auto m = mm::MemoryFile::Create(64ull << 20);
    EXPECT_TRUE(m.ok()) << m.status();
    mf = std::move(m).value();
    fs::TmpFs tmp(mf.get(), fs::TmpFsOptions{});
    Use(std::make_shared<fs::Vfs>(tmp.Root(), "tmpfs", "none", false));
  }
  void Use(std::shared_ptr<fs::Vfs> v) {
    vfs = std::move(v);
    fsctx = std::make_unique<fs::FsContext>(vfs->Root(), vfs->Root());
    ctx.io.blocker = &blocker;
    ctx.creds = Credentials{42, 1000, 100};
    ctx.vfs = vfs.get();
    ctx.fs = fsctx.get();
    ctx.unix_ns = &ns;
  }
  std::shared_ptr<UnixSocket> New(int type) {
    std::shared_ptr<UnixSocket> s;
    EXPECT_EQ(UnixSocket::New(&ns, type, 0, true, ctx.creds, &s), 0);
    return s;
  }
  int64_t Send(Socket& s, const std::string& data,
               std::vector<std::shared_ptr<fs::File>> rights = {}) {
    BufferSource src(data.data(), data.size());
    SendRequest req;
    req.data = &src;
    req.rights = std::move(rights);
    bool sigpipe = false;
    return s.SendMsg(ctx, req, &sigpipe);
  }
  int64_t Recv(Socket& s, size_t n, std::string* out,
               RecvRequest* full = nullptr) {
    std::string buf(n, '\0');
    BufferSink sink(buf.data(), n);
    RecvRequest local;
    RecvRequest& req = full != nullptr ? *full : local;
    req.data = &sink;
    int64_t r = s.RecvMsg(ctx, req);
    out->assign(buf.data(), sink.written());
    return r;
  }

  std::unique_ptr<mm::MemoryFile> mf;
  socket::UnixNamespace ns;
  std::shared_ptr<fs::Vfs> vfs;
  std::unique_ptr<fs::FsContext> fsctx;
  NoBlocking blocker;
  socket::SocketContext ctx;
};

class SocketStateTest : public ::testing::Test {
 protected:
  // Saves `a`'s mount tree and `files`, then loads both into `b`.
  absl::StatusOr<std::vector<std::shared_ptr<fs::File>>> RoundTrip(
      Side& a, const std::vector<std::shared_ptr<fs::File>>& files, Side& b,
      bool with_namespace = true) {
    pb::State st;
    MemoryPages pages(a.mf->Internal(0));
    std::vector<uint64_t> ids;
    {
      Saver s(&st, &pages);
      RETURN_IF_ERROR(FsState::SaveVfs(s, *a.vfs));
      for (const auto& f : files) {
        ASSIGN_OR_RETURN(uint64_t id, FsState::SaveFile(s, *a.vfs, f));
        ids.push_back(id);
      }
    }
    state_ = st;
    Loader l(&st, &pages, b.mf.get());
    if (with_namespace) l.set_unix_namespace(&b.ns);
    ASSIGN_OR_RETURN(std::unique_ptr<fs::Vfs> vfs, FsState::LoadVfs(l));
    b.Use(std::shared_ptr<fs::Vfs>(std::move(vfs)));
    std::vector<std::shared_ptr<fs::File>> out;
    for (uint64_t id : ids) {
      ASSIGN_OR_RETURN(auto f, FsState::LoadFile(l, *b.vfs, id));
      out.push_back(std::move(f));
    }
    return out;
  }

  pb::State state_;
};

UnixSocket& AsSocket(const std::shared_ptr<fs::File>& f) {
  return dynamic_cast<UnixSocket&>(*f);
}

TEST_F(SocketStateTest, PairsWithQueuedDataAndFilesInFlight) {
  Side a;
  // A seqpacket pair: two records, the first carrying an eventfd, and one
  // record the other way; a stream pair with a partly read write.
  std::shared_ptr<UnixSocket> sa, sb, ta, tb;
  ASSERT_EQ(UnixSocket::NewPair(&a.ns, SOCK_SEQPACKET, 0, true, a.ctx.creds,
                                &sa, &sb),
            0);
  ASSERT_EQ(UnixSocket::NewPair(&a.ns, SOCK_STREAM, 0, true, a.ctx.creds,
                                &ta, &tb),
            0);
  auto efd = std::make_shared<fs::EventFd>(5, 0);
  std::vector<uint8_t> on = {1, 0, 0, 0};
  ASSERT_EQ(sb->SetSockOpt(a.ctx, SOL_SOCKET, SO_PASSCRED, on), 0);
  ASSERT_EQ(a.Send(*sa, "one", {efd}), 3);
  ASSERT_EQ(a.Send(*sa, "two three"), 9);
  ASSERT_EQ(a.Send(*sb, "back"), 4);
  ASSERT_EQ(a.Send(*ta, "abcdef"), 6);
  std::string got;
  ASSERT_EQ(a.Recv(*tb, 2, &got), 2);
  ASSERT_EQ(tb->Shutdown(SHUT_WR), 0);
  const waiter::EventMask sa_ready = sa->Readiness(POLLIN | POLLOUT);

  Side b;
  auto loaded = RoundTrip(a, {sa, sb, ta, tb}, b);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  UnixSocket& la = AsSocket((*loaded)[0]);
  UnixSocket& lb = AsSocket((*loaded)[1]);
  UnixSocket& lta = AsSocket((*loaded)[2]);
  UnixSocket& ltb = AsSocket((*loaded)[3]);
  EXPECT_EQ(la.type(), SOCK_SEQPACKET);
  EXPECT_TRUE(la.StatusFlags() & O_NONBLOCK);
  EXPECT_EQ(la.Readiness(POLLIN | POLLOUT), sa_ready);

  // Records with their boundaries, the file with the first.
  RecvRequest first;
  ASSERT_EQ(b.Recv(lb, 100, &got, &first), 3);
  EXPECT_EQ(got, "one");
  ASSERT_EQ(first.rights.size(), 1u);
  auto* loaded_efd = dynamic_cast<fs::EventFd*>(first.rights[0].get());
  ASSERT_NE(loaded_efd, nullptr);
  uint64_t count = 0;
  EXPECT_EQ(loaded_efd->Read(&count, sizeof(count), -1, fs::IoContext{}), 8);
  EXPECT_EQ(count, 5u);
  // SO_PASSCRED is on: the sender's credentials came along.
  ASSERT_TRUE(first.creds.has_value());
  EXPECT_EQ(first.creds->uid, 1000u);
  ASSERT_EQ(b.Recv(lb, 100, &got), 9);
  EXPECT_EQ(got, "two three");
  EXPECT_EQ(b.Recv(lb, 100, &got), -EAGAIN);
  ASSERT_EQ(b.Recv(la, 100, &got), 4);
  EXPECT_EQ(got, "back");
  // Still connected to each other.
  ASSERT_EQ(b.Send(lb, "after the load"), 14);
  ASSERT_EQ(b.Recv(la, 100, &got), 14);
  EXPECT_EQ(got, "after the load");

  // The stream: the unread rest, and the shutdown.
  ASSERT_EQ(b.Recv(ltb, 100, &got), 4);
  EXPECT_EQ(got, "cdef");
  EXPECT_EQ(b.Send(ltb, "x"), -EPIPE);
  ASSERT_EQ(b.Send(lta, "more"), 4);
  ASSERT_EQ(b.Recv(ltb, 100, &got), 4);
  EXPECT_EQ(got, "more");
  EXPECT_EQ(b.Recv(lta, 100, &got), 0);  // EOF: the peer shut down writing
}

TEST_F(SocketStateTest, ListenerWithPendingConnectionAcceptsAfterLoad) {
  Side a;
  auto abstract = a.New(SOCK_STREAM);
  ASSERT_EQ(abstract->Bind(a.ctx, Abstract("srv")), 0);
  ASSERT_EQ(abstract->Listen(a.ctx, 4), 0);
  auto path = a.New(SOCK_STREAM);
  ASSERT_EQ(path->Bind(a.ctx, PathAddr("/sock")), 0);
  ASSERT_EQ(path->Listen(a.ctx, 4), 0);
  auto client = a.New(SOCK_STREAM);
  ASSERT_EQ(client->Connect(a.ctx, Abstract("srv")), 0);
  ASSERT_EQ(a.Send(*client, "hello"), 5);

  Side b;
  auto loaded = RoundTrip(a, {abstract, path, client}, b);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  UnixSocket& la = AsSocket((*loaded)[0]);
  UnixSocket& lp = AsSocket((*loaded)[1]);
  UnixSocket& lc = AsSocket((*loaded)[2]);
  EXPECT_EQ(la.Readiness(POLLIN), POLLIN);
  std::shared_ptr<Socket> server;
  std::string peer;
  ASSERT_EQ(la.Accept(b.ctx, true, &server, &peer), 0);
  std::string got;
  ASSERT_EQ(b.Recv(*server, 100, &got), 5);
  EXPECT_EQ(got, "hello");
  ASSERT_EQ(b.Send(*server, "hi"), 2);
  ASSERT_EQ(b.Recv(lc, 100, &got), 2);
  EXPECT_EQ(got, "hi");
  std::string name;
  ASSERT_EQ(lc.GetPeerName(&name), 0);
  EXPECT_EQ(name, Abstract("srv"));

  // Both names are in the loading namespace: new clients find them.
  for (const std::string& addr : {Abstract("srv"), PathAddr("/sock")}) {
    auto c = b.New(SOCK_STREAM);
    ASSERT_EQ(c->Connect(b.ctx, addr), 0) << addr.substr(2);
  }
  ASSERT_EQ(lp.Accept(b.ctx, true, &server, &peer), 0);
  ASSERT_EQ(la.Accept(b.ctx, true, &server, &peer), 0);
  EXPECT_EQ(la.Accept(b.ctx, true, &server, &peer), -EAGAIN);
}

TEST_F(SocketStateTest, LoadNeedsANamespace) {
  Side a;
  auto s = a.New(SOCK_DGRAM);
  Side b;
  auto loaded = RoundTrip(a, {s}, b, /*with_namespace=*/false);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition)
      << loaded.status();
}

// hostinet: loopback of the host running the test; every socket is
// non-blocking and waited for with a host poll.

std::string Loopback4() {
  sockaddr_in in = {};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return std::string(reinterpret_cast<const char*>(&in), sizeof(in));
}

std::shared_ptr<socket::HostSocket> NewHost(int type) {
  std::shared_ptr<socket::HostSocket> s;
  EXPECT_EQ(socket::HostSocket::New(AF_INET, type, 0, true, &s), 0);
  return s;
}

// Saves `s`, drops it (the host socket closes) and loads the record.
std::shared_ptr<socket::HostSocket> RoundTrip(
    std::shared_ptr<socket::HostSocket>& s, pb::HostSocketFile* rec) {
  EXPECT_TRUE(SocketState::SaveHostSocket(*s, rec).ok());
  s.reset();
  absl::StatusOr<std::shared_ptr<fs::File>> f =
      SocketState::LoadHostSocket(*rec);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return nullptr;
  return std::dynamic_pointer_cast<socket::HostSocket>(*f);
}

void WaitReadable(socket::HostSocket& s) {
  for (int i = 0; i < 500 && !(s.Readiness(POLLIN | POLLERR) & (POLLIN | POLLERR)); i++) {
    usleep(2000);
  }
}

TEST(HostSocketStateTest, ListenerListensAgainOnItsAddress) {
  socket::SocketContext ctx;
  auto lst = NewHost(SOCK_STREAM);
  ASSERT_EQ(lst->Bind(ctx, Loopback4()), 0);
  ASSERT_EQ(lst->Listen(ctx, 7), 0);
  std::string name;
  ASSERT_EQ(lst->GetSockName(&name), 0);
  pb::HostSocketFile rec;
  auto loaded = RoundTrip(lst, &rec);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(rec.restore(), pb::HOST_SOCKET_LISTENING);
  EXPECT_EQ(rec.backlog(), 7);
  std::string again;
  ASSERT_EQ(loaded->GetSockName(&again), 0);
  EXPECT_EQ(again, name);
  // A new client connects and is accepted.
  int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(c, 0);
  ASSERT_EQ(::connect(c, reinterpret_cast<const sockaddr*>(name.data()),
                      name.size()), 0);
  WaitReadable(*loaded);
  std::shared_ptr<socket::Socket> conn;
  std::string peer;
  EXPECT_EQ(loaded->Accept(ctx, true, &conn, &peer), 0);
  EXPECT_NE(conn, nullptr);
  ::close(c);
}

TEST(HostSocketStateTest, ConnectionIsResetAtLoad) {
  socket::SocketContext ctx;
  auto lst = NewHost(SOCK_STREAM);
  ASSERT_EQ(lst->Bind(ctx, Loopback4()), 0);
  ASSERT_EQ(lst->Listen(ctx, 1), 0);
  std::string name;
  ASSERT_EQ(lst->GetSockName(&name), 0);
  auto client = NewHost(SOCK_STREAM);
  int64_t r = client->Connect(ctx, name);
  ASSERT_TRUE(r == 0 || r == -EINPROGRESS) << r;
  WaitReadable(*lst);
  std::shared_ptr<socket::Socket> conn;
  std::string peer;
  ASSERT_EQ(lst->Accept(ctx, true, &conn, &peer), 0);
  ASSERT_EQ(conn->Write("data", 4, -1, fs::IoContext{}), 4);
  pb::HostSocketFile rec;
  auto loaded = RoundTrip(client, &rec);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(rec.restore(), pb::HOST_SOCKET_RESET);
  EXPECT_TRUE(loaded->Readiness(POLLIN) & POLLERR);
  char buf[8];
  EXPECT_EQ(loaded->Read(buf, sizeof(buf), -1, fs::IoContext{}), -ECONNRESET);
  EXPECT_EQ(loaded->Read(buf, sizeof(buf), -1, fs::IoContext{}), 0);
  std::string p;
  EXPECT_EQ(loaded->GetPeerName(&p), -ENOTCONN);
}

TEST(HostSocketStateTest, BoundUdpSocketIsBoundAgain) {
  socket::SocketContext ctx;
  auto u = NewHost(SOCK_DGRAM);
  ASSERT_EQ(u->Bind(ctx, Loopback4()), 0);
  std::vector<uint8_t> one = {1, 0, 0, 0};
  ASSERT_EQ(u->SetSockOpt(ctx, SOL_SOCKET, SO_BROADCAST, one), 0);
  // An option that makes receives carry a control message comes back too.
  ASSERT_EQ(u->SetSockOpt(ctx, IPPROTO_IP, IP_PKTINFO, one), 0);
  std::string name;
  ASSERT_EQ(u->GetSockName(&name), 0);
  pb::HostSocketFile rec;
  auto loaded = RoundTrip(u, &rec);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(rec.restore(), pb::HOST_SOCKET_BOUND);
  std::vector<uint8_t> v(4);
  ASSERT_EQ(loaded->GetSockOpt(ctx, SOL_SOCKET, SO_BROADCAST, &v), 0);
  EXPECT_EQ(v[0], 1);
  v.assign(4, 0);
  ASSERT_EQ(loaded->GetSockOpt(ctx, IPPROTO_IP, IP_PKTINFO, &v), 0);
  EXPECT_EQ(v[0], 1);
  int c = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(c, 0);
  ASSERT_EQ(::sendto(c, "dg", 2, 0, reinterpret_cast<const sockaddr*>(name.data()),
                     name.size()), 2);
  WaitReadable(*loaded);
  char buf[8];
  EXPECT_EQ(loaded->Read(buf, sizeof(buf), -1, fs::IoContext{}), 2);
  ::close(c);
}

TEST(HostSocketStateTest, UnboundSocketIsANewOne) {
  auto s = NewHost(SOCK_STREAM);
  pb::HostSocketFile rec;
  auto loaded = RoundTrip(s, &rec);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(rec.restore(), pb::HOST_SOCKET_FRESH);
  EXPECT_EQ(loaded->type(), SOCK_STREAM);
}

TEST(HostSocketStateTest, BadRecordsAreRefused) {
  pb::HostSocketFile rec;
  rec.set_family(AF_PACKET);
  rec.set_type(SOCK_RAW);
  EXPECT_FALSE(SocketState::LoadHostSocket(rec).ok());
  rec.set_family(AF_INET);
  rec.set_type(SOCK_DGRAM);
  rec.set_restore(pb::HOST_SOCKET_RESET);
  EXPECT_FALSE(SocketState::LoadHostSocket(rec).ok());
}

}  // namespace
}  // namespace sandboxd::state
