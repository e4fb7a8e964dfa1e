#include "sentry/fs/tty/pty.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/sysmacros.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sentry/fs/testing/fake_blocker.h"
#include "sentry/fs/vfs.h"

namespace sandboxd::fs::tty {
namespace {

// Records signals and hangups instead of reaching a kernel.
class FakeJobControl : public JobControl {
 public:
  void SignalProcessGroup(pid_t pgid, int signo) override {
    absl::MutexLock l(&mu_);
    signals.push_back({pgid, signo});
  }
  int CheckAccess(Terminal&, const IoContext&, int, bool) override { return 0; }
  void HangUp(std::shared_ptr<Terminal>, pid_t sid) override {
    absl::MutexLock l(&mu_);
    hangups.push_back(sid);
  }
  absl::Mutex mu_;
  std::vector<std::pair<pid_t, int>> signals;
  std::vector<pid_t> hangups;
};

class PtyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devpts_ = DevPts::Create(0x99, &jc_);
    std::shared_ptr<Inode> ptmx;
    ASSERT_EQ(devpts_->Lookup("ptmx", &ptmx), 0);
    ptmx_ = ptmx;
    std::shared_ptr<File> m;
    ASSERT_EQ(devpts_->OpenMaster(ptmx, O_RDWR, &m), 0);
    master_ = std::static_pointer_cast<PtyMasterFile>(m);
  }

  std::shared_ptr<File> OpenReplica(int flags = O_RDWR) {
    std::shared_ptr<Inode> node;
    if (devpts_->Lookup(std::to_string(master_->pty().index()), &node) != 0) {
      return nullptr;
    }
    std::shared_ptr<File> f;
    return node->Open(flags, &f) == 0 ? f : nullptr;
  }

  int64_t Write(File& f, const std::string& s) {
    return f.Write(s.data(), s.size(), -1, IoContext{-1, &blocker_});
  }
  std::string Read(File& f, size_t n = 256) {
    std::string buf(n, '\0');
    int64_t r = f.Read(buf.data(), n, -1, IoContext{-1, &blocker_});
    if (r < 0) return "error " + std::to_string(-r);
    buf.resize(r);
    return buf;
  }

  FakeJobControl jc_;
  FakeBlocker blocker_;
  std::shared_ptr<DevPts> devpts_;
  std::shared_ptr<Inode> ptmx_;
  std::shared_ptr<PtyMasterFile> master_;
};

TEST_F(PtyTest, LockedUntilUnlocked) {
  EXPECT_EQ(master_->pty().index(), 0u);
  EXPECT_EQ(OpenReplica(), nullptr);  // EIO while locked
  master_->pty().SetLocked(false);
  EXPECT_NE(OpenReplica(), nullptr);
}

TEST_F(PtyTest, NodeAppearsAndDisappears) {
  std::vector<DirEntry> entries;
  devpts_->ReadDir(&entries);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].name, "0");
  std::shared_ptr<Inode> node;
  ASSERT_EQ(devpts_->Lookup("0", &node), 0);
  Attr a;
  node->GetAttr(&a);
  EXPECT_EQ(a.mode, S_IFCHR | 0620u);
  EXPECT_EQ(a.rdev, makedev(136, 0));
  // A second pair gets the next index; the first index is reused after
  // both of its ends are gone.
  std::shared_ptr<File> m2;
  ASSERT_EQ(devpts_->OpenMaster(ptmx_, O_RDWR, &m2), 0);
  EXPECT_EQ(static_cast<PtyMasterFile&>(*m2).pty().index(), 1u);
  master_.reset();
  EXPECT_EQ(devpts_->Lookup("0", &node), -ENOENT);
  std::shared_ptr<File> m3;
  ASSERT_EQ(devpts_->OpenMaster(ptmx_, O_RDWR, &m3), 0);
  EXPECT_EQ(static_cast<PtyMasterFile&>(*m3).pty().index(), 0u);
}

TEST_F(PtyTest, CanonicalRoundTripWithEcho) {
  master_->pty().SetLocked(false);
  auto r = OpenReplica();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->Readiness(POLLIN | POLLOUT), static_cast<waiter::EventMask>(POLLOUT));
  EXPECT_EQ(Write(*master_, "hellp\x7fo\r"), 8);
  EXPECT_EQ(r->Readiness(POLLIN), static_cast<waiter::EventMask>(POLLIN));
  EXPECT_EQ(Read(*r), "hello\n");
  EXPECT_EQ(Read(*master_), "hellp\b \bo\r\n");
  EXPECT_EQ(Write(*r, "out\n"), 4);
  EXPECT_EQ(Read(*master_), "out\r\n");
}

TEST_F(PtyTest, BlockingReadWakesOnInput) {
  master_->pty().SetLocked(false);
  auto r = OpenReplica();
  std::string got;
  std::thread reader([&] { got = Read(*r); });
  while (blocker_.sleeps() == 0) absl::SleepFor(absl::Milliseconds(1));
  Write(*master_, "x\n");
  reader.join();
  EXPECT_EQ(got, "x\n");
}

TEST_F(PtyTest, NonblockingAndVminVtime) {
  master_->pty().SetLocked(false);
  auto r = OpenReplica(O_RDWR | O_NONBLOCK);
  EXPECT_EQ(Read(*r), "error " + std::to_string(EAGAIN));
  KernelTermios t;
  master_->pty().GetTermios(&t);
  t.c_lflag &= ~(ICANON | ECHO);
  t.c_cc[VMIN] = 0;
  t.c_cc[VTIME] = 0;
  master_->pty().SetTermios(t, false);
  EXPECT_EQ(Read(*r), "");  // MIN 0, TIME 0: at once, even empty
  r->SetStatusFlags(O_RDWR);
  t.c_cc[VTIME] = 1;  // 0.1 s
  master_->pty().SetTermios(t, false);
  absl::Time start = absl::Now();
  EXPECT_EQ(Read(*r), "");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  Write(*master_, "ab");
  t.c_cc[VMIN] = 2;
  t.c_cc[VTIME] = 0;
  master_->pty().SetTermios(t, false);
  EXPECT_EQ(Read(*r), "ab");
}

TEST_F(PtyTest, SignalsGoToTheForegroundGroup) {
  master_->pty().SetLocked(false);
  auto r = OpenReplica();
  master_->pty().SetSession(7, 9);
  Write(*master_, "\x03");
  ASSERT_EQ(jc_.signals.size(), 1u);
  EXPECT_EQ(jc_.signals[0], std::make_pair(9, SIGINT));
  struct winsize ws = {24, 80, 0, 0};
  master_->pty().SetWinsize(ws);
  ASSERT_EQ(jc_.signals.size(), 2u);
  EXPECT_EQ(jc_.signals[1], std::make_pair(9, SIGWINCH));
  master_->pty().SetWinsize(ws);  // unchanged: no signal
  EXPECT_EQ(jc_.signals.size(), 2u);
}

TEST_F(PtyTest, MasterCloseHangsUp) {
  master_->pty().SetLocked(false);
  auto r = OpenReplica();
  master_->pty().SetSession(5, 5);
  Write(*master_, "pending\n");
  master_.reset();
  EXPECT_EQ(jc_.hangups, std::vector<pid_t>{5});
  EXPECT_EQ(Read(*r), "");
  EXPECT_EQ(Write(*r, "x"), -EIO);
  EXPECT_EQ(r->Readiness(POLLIN) & (POLLIN | POLLHUP),
            static_cast<waiter::EventMask>(POLLIN | POLLHUP));
}

TEST_F(PtyTest, ReplicaCloseGivesMasterEio) {
  master_->pty().SetLocked(false);
  EXPECT_EQ(Write(*master_, "x\n"), 2);  // taken before any replica opens
  auto r = OpenReplica();
  EXPECT_EQ(Read(*r), "x\n");
  EXPECT_EQ(Read(*master_), "x\r\n");
  Write(*r, "bye");
  r.reset();
  EXPECT_EQ(Read(*master_), "bye");  // what was written stays readable
  EXPECT_EQ(Read(*master_), "error " + std::to_string(EIO));
  EXPECT_TRUE(master_->Readiness(POLLIN) & POLLHUP);
  EXPECT_EQ(Write(*master_, "y"), 1);
}

TEST_F(PtyTest, PacketMode) {
  master_->pty().SetLocked(false);
  auto r = OpenReplica();
  master_->pty().SetPacketMode(true);
  Write(*r, "d");
  EXPECT_EQ(Read(*master_), std::string("\0d", 2));
  master_->pty().Flush(TCIFLUSH);
  EXPECT_EQ(Read(*master_), std::string(1, TIOCPKT_FLUSHREAD));
}

// Path lookups see replicas come and go: devpts is never cached.
TEST_F(PtyTest, VfsLookupsFollowTheDirectory) {
  Vfs vfs(devpts_->Root(), "devpts", "devpts", false);
  FsContext ctx(vfs.Root(), vfs.Root());
  Location loc;
  EXPECT_EQ(vfs.Resolve(ctx, vfs.Root(), "/0", true, &loc), 0);
  EXPECT_EQ(vfs.Resolve(ctx, vfs.Root(), "/1", true, &loc), -ENOENT);
  master_.reset();
  EXPECT_EQ(vfs.Resolve(ctx, vfs.Root(), "/0", true, &loc), -ENOENT);
  std::shared_ptr<File> m;
  ASSERT_EQ(devpts_->OpenMaster(ptmx_, O_RDWR, &m), 0);
  ASSERT_EQ(vfs.Resolve(ctx, vfs.Root(), "/0", true, &loc), 0);
  Attr a;
  loc.inode().GetAttr(&a);
  EXPECT_EQ(a.rdev, makedev(136, 0));
}

}  // namespace
}  // namespace sandboxd::fs::tty
