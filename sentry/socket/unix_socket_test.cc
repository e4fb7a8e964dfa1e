#include "sentry/socket/unix_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/un.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/fs/epoll.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/mm/memory_file.h"

namespace sandboxd::socket {
namespace {

// A Blocker for tests: sleeps until the queue is notified, the deadline
// passes or Interrupt() is called (the task's signal).
class FakeBlocker : public waiter::Blocker {
 public:
  int Wait(waiter::WaitQueue& q, waiter::EventMask mask,
           const std::function<bool()>& ready, absl::Time deadline) override {
    struct Wakeup : waiter::Waiter {
      FakeBlocker* b;
      void Notify(waiter::EventMask) override {
        absl::MutexLock l(&b->mu_);
        b->seq_++;
      }
    } w;
    w.b = this;
    q.Add(&w, mask);
    {
      absl::MutexLock l(&mu_);
      waits_++;
    }
    int r = 0;
    for (;;) {
      uint64_t seq;
      {
        absl::MutexLock l(&mu_);
        seq = seq_;
      }
      if (ready()) break;
      absl::MutexLock l(&mu_);
      auto woken = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return seq_ != seq || interrupted_;
      };
      if (!mu_.AwaitWithDeadline(absl::Condition(&woken), deadline)) {
        r = -ETIMEDOUT;
        break;
      }
      if (interrupted_) {
        r = -EINTR;
        break;
      }
    }
    q.Remove(&w);
    return r;
  }
  void Interrupt() {
    absl::MutexLock l(&mu_);
    interrupted_ = true;
  }
  int waits() {
    absl::MutexLock l(&mu_);
    return waits_;
  }

 private:
  absl::Mutex mu_;
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  int waits_ ABSL_GUARDED_BY(mu_) = 0;
};

// A file that counts its live instances (for SCM_RIGHTS).
class CountedFile : public fs::File {
 public:
  static std::atomic<int> live;
  CountedFile() { live++; }
  ~CountedFile() override { live--; }
  int64_t Read(void*, uint64_t, int64_t, const fs::IoContext&) override { return 0; }
  int64_t Write(const void*, uint64_t n, int64_t, const fs::IoContext&) override {
    return n;
  }
  int64_t Seek(int64_t, int) override { return -ESPIPE; }
  int64_t Stat(struct stat*) override { return 0; }
  int64_t Ioctl(uint64_t, void*) override { return -ENOTTY; }
  int StatusFlags() const override { return O_RDWR; }
  int64_t SetStatusFlags(int) override { return 0; }
};
std::atomic<int> CountedFile::live{0};

// A waiter that remembers what it was told.
struct RecordingWaiter : waiter::Waiter {
  std::atomic<waiter::EventMask> seen{0};
  void Notify(waiter::EventMask events) override { seen |= events; }
};

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

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(64ull << 20);
    ASSERT_TRUE(mf.ok()) << mf.status();
    mf_ = std::move(mf).value();
    tmpfs_ = std::make_unique<fs::TmpFs>(mf_.get(), fs::TmpFsOptions{});
    vfs_ = std::make_unique<fs::Vfs>(tmpfs_->Root(), "tmpfs", "none", false);
    fsctx_ = std::make_unique<fs::FsContext>(vfs_->Root(), vfs_->Root());
    ctx_.io.blocker = &blocker_;
    ctx_.creds = Credentials{42, 0, 0};
    ctx_.vfs = vfs_.get();
    ctx_.fs = fsctx_.get();
    ctx_.unix_ns = &ns_;
  }

  std::shared_ptr<UnixSocket> New(int type, bool nonblocking = false) {
    std::shared_ptr<UnixSocket> s;
    EXPECT_EQ(UnixSocket::New(&ns_, type, 0, nonblocking, ctx_.creds, &s), 0);
    return s;
  }
  void Pair(int type, std::shared_ptr<UnixSocket>* a,
            std::shared_ptr<UnixSocket>* b, bool nonblocking = true) {
    ASSERT_EQ(UnixSocket::NewPair(&ns_, type, 0, nonblocking, ctx_.creds, a, b), 0);
  }

  int64_t Send(Socket& s, const std::string& data, int flags = 0,
               std::vector<std::shared_ptr<fs::File>> rights = {},
               const std::string& to = "") {
    BufferSource src(data.data(), data.size());
    SendRequest req;
    req.data = &src;
    req.flags = flags;
    req.rights = std::move(rights);
    req.address = to;
    bool sigpipe = false;
    int64_t r = s.SendMsg(ctx_, req, &sigpipe);
    last_sigpipe_ = sigpipe;
    return r;
  }
  // Receives up to n bytes into *out; returns the syscall's result.
  int64_t Recv(Socket& s, size_t n, std::string* out, int flags = 0,
               RecvRequest* full = nullptr) {
    std::string buf(n, '\0');
    BufferSink sink(buf.data(), n);
    RecvRequest req;
    req.data = &sink;
    req.flags = flags;
    req.want_address = true;
    int64_t r = s.RecvMsg(ctx_, req);
    buf.resize(sink.written());
    if (out != nullptr) *out = buf;
    if (full != nullptr) {
      full->address = req.address;
      full->msg_flags = req.msg_flags;
      full->rights = std::move(req.rights);
      full->creds = req.creds;
    }
    return r;
  }

  std::unique_ptr<mm::MemoryFile> mf_;
  std::unique_ptr<fs::TmpFs> tmpfs_;
  std::unique_ptr<fs::Vfs> vfs_;
  std::unique_ptr<fs::FsContext> fsctx_;
  UnixNamespace ns_;
  FakeBlocker blocker_;
  SocketContext ctx_;
  bool last_sigpipe_ = false;
};

TEST_F(UnixSocketTest, StreamPairMergesWritesAndReadsPartially) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b);
  EXPECT_EQ(Send(*a, "hello"), 5);
  EXPECT_EQ(Send(*a, " world"), 6);
  std::string got;
  EXPECT_EQ(Recv(*b, 3, &got), 3);
  EXPECT_EQ(got, "hel");
  EXPECT_EQ(Recv(*b, 100, &got, MSG_PEEK), 8);
  EXPECT_EQ(got, "lo world");
  EXPECT_EQ(Recv(*b, 100, &got), 8);
  EXPECT_EQ(got, "lo world");
  EXPECT_EQ(Recv(*b, 100, &got), -EAGAIN);
}

TEST_F(UnixSocketTest, DatagramAndSeqpacketKeepBoundaries) {
  for (int type : {SOCK_DGRAM, SOCK_SEQPACKET}) {
    std::shared_ptr<UnixSocket> a, b;
    Pair(type, &a, &b);
    EXPECT_EQ(Send(*a, "one"), 3);
    EXPECT_EQ(Send(*a, "second"), 6);
    EXPECT_EQ(Send(*a, ""), 0);
    std::string got;
    RecvRequest res;
    EXPECT_EQ(Recv(*b, 100, &got), 3);
    EXPECT_EQ(got, "one");
    // Truncated: the rest of the datagram is gone; MSG_TRUNC tells the size.
    EXPECT_EQ(Recv(*b, 2, &got, MSG_TRUNC, &res), 6);
    EXPECT_EQ(got, "se");
    EXPECT_EQ(res.msg_flags & MSG_TRUNC, MSG_TRUNC);
    EXPECT_EQ(Recv(*b, 100, &got), 0);  // the empty message
    EXPECT_EQ(Recv(*b, 100, &got), -EAGAIN);
  }
}

TEST_F(UnixSocketTest, ListenConnectAcceptAbstract) {
  auto l = New(SOCK_STREAM, /*nonblocking=*/true);
  EXPECT_EQ(l->Listen(ctx_, 1), -EINVAL);  // unbound
  ASSERT_EQ(l->Bind(ctx_, Abstract("srv")), 0);
  EXPECT_EQ(l->Bind(ctx_, Abstract("other")), -EINVAL);
  ASSERT_EQ(l->Listen(ctx_, 0), 0);
  auto c = New(SOCK_STREAM, /*nonblocking=*/true);
  EXPECT_EQ(c->Readiness(POLLOUT | POLLHUP), POLLOUT | POLLHUP);
  ASSERT_EQ(c->Connect(ctx_, Abstract("srv")), 0);
  EXPECT_EQ(l->Readiness(POLLIN), POLLIN);
  // Backlog 0 holds one connection; the next would wait.
  auto c2 = New(SOCK_STREAM, /*nonblocking=*/true);
  EXPECT_EQ(c2->Connect(ctx_, Abstract("srv")), -EAGAIN);
  // Linux looks at the listener first: full, then "already connected".
  EXPECT_EQ(c->Connect(ctx_, Abstract("srv")), -EAGAIN);
  // Data may flow before accept.
  EXPECT_EQ(Send(*c, "early"), 5);
  std::shared_ptr<Socket> s;
  std::string peer;
  ASSERT_EQ(l->Accept(ctx_, false, &s, &peer), 0);
  EXPECT_EQ(peer.size(), sizeof(sa_family_t));  // the client is unnamed
  std::string name;
  ASSERT_EQ(s->GetSockName(&name), 0);
  EXPECT_EQ(name, Abstract("srv"));
  ASSERT_EQ(c->GetPeerName(&name), 0);
  EXPECT_EQ(name, Abstract("srv"));
  std::string got;
  EXPECT_EQ(Recv(*s, 10, &got), 5);
  EXPECT_EQ(got, "early");
  EXPECT_EQ(l->Accept(ctx_, false, &s, &peer), -EAGAIN);
  EXPECT_EQ(c->Connect(ctx_, Abstract("srv")), -EISCONN);
  // The name is free again once the listener is gone.
  l.reset();
  auto c3 = New(SOCK_STREAM, true);
  EXPECT_EQ(c3->Connect(ctx_, Abstract("srv")), -ECONNREFUSED);
  // Abstract names are per type: a datagram socket's is invisible here.
  auto d = New(SOCK_DGRAM);
  EXPECT_EQ(d->Bind(ctx_, Abstract("srv")), 0);
  EXPECT_EQ(c3->Connect(ctx_, Abstract("srv")), -ECONNREFUSED);
}

TEST_F(UnixSocketTest, PathBindCreatesSocketInode) {
  auto l = New(SOCK_SEQPACKET, true);
  ASSERT_EQ(l->Bind(ctx_, PathAddr("/sock")), 0);
  fs::Location loc;
  ASSERT_EQ(vfs_->Resolve(*fsctx_, vfs_->Root(), "/sock", true, &loc), 0);
  EXPECT_EQ(loc.inode().Type(), static_cast<uint32_t>(S_IFSOCK));
  auto other = New(SOCK_SEQPACKET, true);
  EXPECT_EQ(other->Bind(ctx_, PathAddr("/sock")), -EADDRINUSE);
  EXPECT_EQ(l->Bind(ctx_, PathAddr("/sock")), -EADDRINUSE);  // name first
  EXPECT_EQ(l->Bind(ctx_, PathAddr("/sock2")), -EINVAL);
  auto dg = New(SOCK_DGRAM, true);
  EXPECT_EQ(dg->Connect(ctx_, PathAddr("/sock")), -EPROTOTYPE);
  EXPECT_EQ(other->Connect(ctx_, PathAddr("/sock")), -ECONNREFUSED);  // not listening
  ASSERT_EQ(l->Listen(ctx_, 5), 0);
  EXPECT_EQ(other->Connect(ctx_, PathAddr("/nonexistent")), -ENOENT);
  ASSERT_EQ(other->Connect(ctx_, PathAddr("/sock")), 0);
  std::shared_ptr<Socket> s;
  std::string peer;
  ASSERT_EQ(l->Accept(ctx_, false, &s, &peer), 0);
  EXPECT_EQ(Send(*s, "abc"), 3);
  EXPECT_EQ(Send(*s, "de"), 2);
  std::string got;
  EXPECT_EQ(Recv(*other, 10, &got), 3);
  EXPECT_EQ(Recv(*other, 10, &got), 2);
  // Unlinking the name leaves the socket bound but unreachable by path.
  ASSERT_EQ(vfs_->Unlink(vfs_->Root(), "sock", false), 0);
  auto late = New(SOCK_SEQPACKET, true);
  EXPECT_EQ(late->Connect(ctx_, PathAddr("/sock")), -ENOENT);
}

TEST_F(UnixSocketTest, ShutdownGivesEofAndEpipe) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b);
  EXPECT_EQ(Send(*a, "last"), 4);
  ASSERT_EQ(a->Shutdown(SHUT_WR), 0);
  EXPECT_EQ(Send(*a, "x"), -EPIPE);
  EXPECT_TRUE(last_sigpipe_);
  EXPECT_EQ(Send(*a, "x", MSG_NOSIGNAL), -EPIPE);
  EXPECT_FALSE(last_sigpipe_);
  EXPECT_EQ(b->Readiness(POLLIN | POLLRDHUP), POLLIN | POLLRDHUP);
  std::string got;
  EXPECT_EQ(Recv(*b, 10, &got), 4);
  EXPECT_EQ(Recv(*b, 10, &got), 0);  // end of file
  EXPECT_EQ(Send(*b, "back"), 4);    // the other direction still works
  EXPECT_EQ(Recv(*a, 10, &got), 4);
  EXPECT_EQ(a->Shutdown(7), -EINVAL);
}

TEST_F(UnixSocketTest, CloseWithUnreadDataResetsPeer) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b);
  EXPECT_EQ(Send(*a, "unread"), 6);
  b.reset();  // closes b with a's data in its queue
  EXPECT_EQ(a->Readiness(POLLIN | POLLOUT), POLLIN | POLLOUT | POLLHUP | POLLERR);
  std::string got;
  EXPECT_EQ(Recv(*a, 10, &got), -ECONNRESET);
  EXPECT_EQ(Recv(*a, 10, &got), 0);
  EXPECT_EQ(Send(*a, "x"), -EPIPE);
}

TEST_F(UnixSocketTest, PassesFilesAndClosesUnreceivedOnes) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b);
  {
    auto f = std::make_shared<CountedFile>();
    EXPECT_EQ(Send(*a, "x", 0, {f, f}), 1);
  }
  EXPECT_EQ(CountedFile::live.load(), 1);  // in flight
  EXPECT_EQ(Send(*a, "yz"), 2);
  RecvRequest res;
  std::string got;
  // The read stops after the bytes that carried the files.
  EXPECT_EQ(Recv(*b, 10, &got, 0, &res), 1);
  ASSERT_EQ(res.rights.size(), 2u);
  EXPECT_EQ(res.rights[0], res.rights[1]);
  res.rights.clear();
  EXPECT_EQ(CountedFile::live.load(), 0);
  EXPECT_EQ(Recv(*b, 10, &got), 2);

  // Files queued on a socket that is closed unread are closed with it.
  EXPECT_EQ(Send(*a, "w", 0, {std::make_shared<CountedFile>()}), 1);
  EXPECT_EQ(CountedFile::live.load(), 1);
  b.reset();
  EXPECT_EQ(CountedFile::live.load(), 0);
}

TEST_F(UnixSocketTest, CredentialsWithPasscred) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_DGRAM, &a, &b);
  std::vector<uint8_t> on = {1, 0, 0, 0};
  ASSERT_EQ(b->SetSockOpt(ctx_, SOL_SOCKET, SO_PASSCRED, on), 0);
  EXPECT_EQ(Send(*a, "m"), 1);
  RecvRequest res;
  EXPECT_EQ(Recv(*b, 10, nullptr, 0, &res), 1);
  ASSERT_TRUE(res.creds.has_value());
  EXPECT_EQ(res.creds->pid, 42);
  // Without SO_PASSCRED, none.
  EXPECT_EQ(Send(*b, "m"), 1);
  EXPECT_EQ(Recv(*a, 10, nullptr, 0, &res), 1);
  res.creds.reset();
  EXPECT_FALSE(res.creds.has_value());
  std::vector<uint8_t> val(12);
  ASSERT_EQ(a->GetSockOpt(ctx_, SOL_SOCKET, SO_PEERCRED, &val), 0);
  struct ucred uc;
  std::memcpy(&uc, val.data(), sizeof(uc));
  EXPECT_EQ(uc.pid, 42);
  // An unconnected socket has no peer credentials.
  auto lone = New(SOCK_STREAM);
  ASSERT_EQ(lone->GetSockOpt(ctx_, SOL_SOCKET, SO_PEERCRED, &val), 0);
  std::memcpy(&uc, val.data(), sizeof(uc));
  EXPECT_EQ(uc.pid, 0);
  EXPECT_EQ(uc.uid, ~0u);
}

TEST_F(UnixSocketTest, StreamWithPasscredDoesNotMergeWriters) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b);
  std::vector<uint8_t> on = {1, 0, 0, 0};
  ASSERT_EQ(b->SetSockOpt(ctx_, SOL_SOCKET, SO_PASSCRED, on), 0);
  EXPECT_EQ(Send(*a, "aa"), 2);
  ctx_.creds.pid = 43;
  EXPECT_EQ(Send(*a, "bb"), 2);
  RecvRequest res;
  EXPECT_EQ(Recv(*b, 10, nullptr, 0, &res), 2);
  EXPECT_EQ(res.creds->pid, 42);
  EXPECT_EQ(Recv(*b, 10, nullptr, 0, &res), 2);
  EXPECT_EQ(res.creds->pid, 43);
}

TEST_F(UnixSocketTest, ReadinessAndNotifications) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b);
  const waiter::EventMask all = POLLIN | POLLOUT | POLLRDHUP;
  EXPECT_EQ(b->Readiness(all), POLLOUT);
  RecordingWaiter w;
  b->EventRegister(&w, POLLIN);
  EXPECT_EQ(Send(*a, "x"), 1);
  EXPECT_TRUE(w.seen.load() & POLLIN);
  EXPECT_EQ(b->Readiness(all), POLLIN | POLLOUT);
  a.reset();
  EXPECT_TRUE(w.seen.load() & POLLHUP);
  EXPECT_EQ(b->Readiness(all), POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
  b->EventUnregister(&w);
}

TEST_F(UnixSocketTest, EpollWatchesSocketsEdgeAndLevel) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b);
  ASSERT_NE(b->event_queue(), nullptr);
  auto ep = std::make_shared<fs::EpollFile>();
  struct epoll_event ev = {};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.u64 = 7;
  ASSERT_EQ(ep->Ctl(EPOLL_CTL_ADD, 3, b, ev), 0);
  fs::IoContext io;  // no blocker: epoll_wait does not block
  struct epoll_event out[2];
  EXPECT_EQ(ep->Wait(out, 2, absl::InfinitePast(), io), 0);
  EXPECT_EQ(Send(*a, "x"), 1);
  ASSERT_EQ(ep->Wait(out, 2, absl::InfinitePast(), io), 1);
  EXPECT_EQ(out[0].events, static_cast<uint32_t>(EPOLLIN));
  EXPECT_EQ(out[0].data.u64, 7u);
  // Edge-triggered: not again until new data arrives.
  EXPECT_EQ(ep->Wait(out, 2, absl::InfinitePast(), io), 0);
  EXPECT_EQ(Send(*a, "y"), 1);
  EXPECT_EQ(ep->Wait(out, 2, absl::InfinitePast(), io), 1);
  a.reset();  // the peer hangs up: a new edge
  ASSERT_EQ(ep->Wait(out, 2, absl::InfinitePast(), io), 1);
  EXPECT_EQ(out[0].events, static_cast<uint32_t>(EPOLLIN | EPOLLHUP));
}

TEST_F(UnixSocketTest, DatagramReceiverQueueLimit) {
  auto r = New(SOCK_DGRAM, true);
  ASSERT_EQ(r->Bind(ctx_, Abstract("q")), 0);
  auto s = New(SOCK_DGRAM, true);
  ASSERT_EQ(s->Connect(ctx_, Abstract("q")), 0);
  int sent = 0;
  while (Send(*s, "d") == 1) sent++;
  EXPECT_EQ(sent, static_cast<int>(kMaxDgramQlen) + 1);
  EXPECT_EQ(Send(*s, "d"), -EAGAIN);
  EXPECT_EQ(s->Readiness(POLLOUT), 0u);
  RecordingWaiter w;
  s->EventRegister(&w, POLLOUT);
  EXPECT_EQ(Recv(*r, 10, nullptr), 1);
  EXPECT_TRUE(w.seen.load() & POLLOUT);
  EXPECT_EQ(s->Readiness(POLLOUT), static_cast<waiter::EventMask>(POLLOUT));
  s->EventUnregister(&w);
  // Closing the receiver: the sender learns on its next send.
  r.reset();
  EXPECT_EQ(Send(*s, "d"), -ECONNREFUSED);
  EXPECT_EQ(Send(*s, "d"), -ENOTCONN);
}

TEST_F(UnixSocketTest, BlockingRecvWakesOnDataAndIsInterruptible) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b, /*nonblocking=*/false);
  std::thread writer([&] {
    while (blocker_.waits() == 0) absl::SleepFor(absl::Milliseconds(1));
    absl::SleepFor(absl::Milliseconds(10));
    EXPECT_EQ(Send(*a, "wake"), 4);
  });
  std::string got;
  EXPECT_EQ(Recv(*b, 4, &got, MSG_WAITALL), 4);
  EXPECT_EQ(got, "wake");
  writer.join();

  std::thread interrupter([&] {
    while (blocker_.waits() < 2) absl::SleepFor(absl::Milliseconds(1));
    blocker_.Interrupt();
  });
  EXPECT_EQ(Recv(*b, 4, &got), -EINTR);
  interrupter.join();
}

TEST_F(UnixSocketTest, SendBufferBlocksWriters) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_STREAM, &a, &b);
  std::vector<uint8_t> small = {0, 0x10, 0, 0};  // 4096: doubled to 8192
  ASSERT_EQ(a->SetSockOpt(ctx_, SOL_SOCKET, SO_SNDBUF, small), 0);
  std::vector<uint8_t> val(4);
  ASSERT_EQ(a->GetSockOpt(ctx_, SOL_SOCKET, SO_SNDBUF, &val), 0);
  int v;
  std::memcpy(&v, val.data(), 4);
  EXPECT_EQ(v, 8192);
  std::string big(100000, 'x');
  int64_t n = Send(*a, big);
  ASSERT_GT(n, 0);
  EXPECT_LT(n, 100000);
  EXPECT_EQ(Send(*a, "more"), -EAGAIN);
  EXPECT_EQ(a->Readiness(POLLOUT), 0u);
  std::string got;
  EXPECT_EQ(Recv(*b, 200000, &got), n);
  EXPECT_EQ(a->Readiness(POLLOUT), static_cast<waiter::EventMask>(POLLOUT));
}

TEST_F(UnixSocketTest, BlockingConnectWaitsForBacklog) {
  auto l = New(SOCK_STREAM, true);
  ASSERT_EQ(l->Bind(ctx_, Abstract("bl")), 0);
  ASSERT_EQ(l->Listen(ctx_, 0), 0);
  auto c1 = New(SOCK_STREAM, true);
  ASSERT_EQ(c1->Connect(ctx_, Abstract("bl")), 0);
  auto c2 = New(SOCK_STREAM, false);
  std::thread acceptor([&] {
    while (blocker_.waits() == 0) absl::SleepFor(absl::Milliseconds(1));
    std::shared_ptr<Socket> s;
    std::string peer;
    EXPECT_EQ(l->Accept(ctx_, false, &s, &peer), 0);
  });
  EXPECT_EQ(c2->Connect(ctx_, Abstract("bl")), 0);
  acceptor.join();
  // Closing the listener resets connections it never accepted.
  l.reset();
  std::vector<uint8_t> val(4);
  ASSERT_EQ(c2->GetSockOpt(ctx_, SOL_SOCKET, SO_ERROR, &val), 0);
  int err;
  std::memcpy(&err, val.data(), 4);
  EXPECT_EQ(err, ECONNRESET);
}

TEST_F(UnixSocketTest, AutobindAndAddresses) {
  auto s = New(SOCK_DGRAM);
  std::string name;
  ASSERT_EQ(s->GetSockName(&name), 0);
  EXPECT_EQ(name.size(), sizeof(sa_family_t));
  ASSERT_EQ(s->Bind(ctx_, std::string("\x01\x00", 2)), 0);  // AF_UNIX only
  ASSERT_EQ(s->GetSockName(&name), 0);
  EXPECT_EQ(name.size(), 8u);  // family, NUL, five hex digits
  EXPECT_EQ(name[2], '\0');
  EXPECT_EQ(s->Bind(ctx_, std::string("\x01\x00", 2)), 0);  // no-op
  EXPECT_EQ(s->Bind(ctx_, std::string("\x02\x00x", 3)), -EINVAL);
  auto p = New(SOCK_DGRAM);
  ASSERT_EQ(p->Bind(ctx_, PathAddr("rel")), 0);  // relative to the cwd
  ASSERT_EQ(p->GetSockName(&name), 0);
  EXPECT_EQ(name, PathAddr("rel"));
  EXPECT_EQ(name.size(), sizeof(sa_family_t) + 4);
  // An unnamed sender shows no address to the receiver.
  auto u = New(SOCK_DGRAM);
  EXPECT_EQ(Send(*u, "hi", 0, {}, PathAddr("rel")), 2);
  RecvRequest res;
  EXPECT_EQ(Recv(*p, 10, nullptr, 0, &res), 2);
  EXPECT_TRUE(res.address.empty());
  EXPECT_EQ(Send(*s, "hi", 0, {}, PathAddr("rel")), 2);
  EXPECT_EQ(Recv(*p, 10, nullptr, 0, &res), 2);
  EXPECT_EQ(res.address.size(), 8u);
  // (The Vfs's dentry cache keeps parent and child alive in a cycle; a
  // name left behind would leak the test's filesystem.)
  ASSERT_EQ(vfs_->Unlink(vfs_->Root(), "rel", false), 0);
}

TEST_F(UnixSocketTest, SocketOptions) {
  auto s = New(SOCK_SEQPACKET);
  std::vector<uint8_t> val(4);
  int v;
  ASSERT_EQ(s->GetSockOpt(ctx_, SOL_SOCKET, SO_TYPE, &val), 0);
  std::memcpy(&v, val.data(), 4);
  EXPECT_EQ(v, SOCK_SEQPACKET);
  val.resize(2);  // a short buffer gets what fits
  ASSERT_EQ(s->GetSockOpt(ctx_, SOL_SOCKET, SO_DOMAIN, &val), 0);
  EXPECT_EQ(val.size(), 2u);
  val.resize(4);
  EXPECT_EQ(s->GetSockOpt(ctx_, SOL_SOCKET, SO_LINGER, &val), -ENOPROTOOPT);
  EXPECT_EQ(s->SetSockOpt(ctx_, SOL_SOCKET, SO_TYPE, {1, 0, 0, 0}), -ENOPROTOOPT);
  EXPECT_EQ(s->SetSockOpt(ctx_, SOL_SOCKET, SO_PASSCRED, {1, 0}), -EINVAL);
  EXPECT_EQ(s->GetSockOpt(ctx_, SOL_IP, 1, &val), -EOPNOTSUPP);
  std::shared_ptr<UnixSocket> raw;
  ASSERT_EQ(UnixSocket::New(&ns_, SOCK_RAW, 0, false, ctx_.creds, &raw), 0);
  EXPECT_EQ(raw->type(), SOCK_DGRAM);
  EXPECT_EQ(UnixSocket::New(&ns_, SOCK_STREAM, 2, false, ctx_.creds, &raw),
            -EPROTONOSUPPORT);
  EXPECT_EQ(UnixSocket::New(&ns_, SOCK_RDM, 0, false, ctx_.creds, &raw),
            -ESOCKTNOSUPPORT);
}

TEST_F(UnixSocketTest, ReceiveTimeout) {
  std::shared_ptr<UnixSocket> a, b;
  Pair(SOCK_DGRAM, &a, &b, /*nonblocking=*/false);
  struct timeval tv = {0, 20000};
  std::vector<uint8_t> val(sizeof(tv));
  std::memcpy(val.data(), &tv, sizeof(tv));
  ASSERT_EQ(b->SetSockOpt(ctx_, SOL_SOCKET, SO_RCVTIMEO, val), 0);
  absl::Time start = absl::Now();
  EXPECT_EQ(Recv(*b, 10, nullptr), -EAGAIN);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(15));
}

}  // namespace
}  // namespace sandboxd::socket
