#include "sentry/fs/tty/pty_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <termios.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/fs/testing/fake_blocker.h"

namespace sandboxd::fs::tty {
namespace {

class FakeJobControl : public JobControl {
 public:
  void SignalProcessGroup(pid_t pgid, int signo) override {
    absl::MutexLock l(&mu);
    signals.push_back({pgid, signo});
  }
  int CheckAccess(Terminal&, const IoContext&, int, bool) override { return 0; }
  void HangUp(std::shared_ptr<Terminal>, pid_t sid) override {
    absl::MutexLock l(&mu);
    hangups.push_back(sid);
  }
  absl::Mutex mu;
  std::vector<std::pair<pid_t, int>> signals ABSL_GUARDED_BY(mu);
  std::vector<pid_t> hangups ABSL_GUARDED_BY(mu);
};

// A host pty stands for the daemon's: the test is its master side, the
// relay gets the replica.
class PtyRelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    host_master_.reset(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
    ASSERT_TRUE(host_master_.valid());
    ASSERT_EQ(grantpt(host_master_.get()), 0);
    ASSERT_EQ(unlockpt(host_master_.get()), 0);
    struct winsize ws = {};
    ws.ws_row = 33;
    ws.ws_col = 99;
    ASSERT_EQ(ioctl(host_master_.get(), TIOCSWINSZ, &ws), 0);
    UniqueFd host_replica(open(ptsname(host_master_.get()), O_RDWR | O_NOCTTY | O_CLOEXEC));
    ASSERT_TRUE(host_replica.valid());

    devpts_ = DevPts::Create(0x99, &jc_);
    std::shared_ptr<Inode> ptmx;
    ASSERT_EQ(devpts_->Lookup("ptmx", &ptmx), 0);
    std::shared_ptr<File> m;
    ASSERT_EQ(devpts_->OpenMaster(ptmx, O_RDWR, &m), 0);
    pty_ = &static_cast<PtyMasterFile*>(m.get())->pty();
    pty_->SetLocked(false);
    std::shared_ptr<Inode> node;
    ASSERT_EQ(devpts_->Lookup("0", &node), 0);
    ASSERT_EQ(node->Open(O_RDWR, &replica_), 0);
    auto relay = PtyRelay::Start(std::move(m), std::move(host_replica));
    ASSERT_TRUE(relay.ok()) << relay.status();
    relay_ = std::move(*relay);
    // As boot does: the process's session takes the terminal after the
    // relay has set its first size.
    pty_->SetSession(7, 9);
  }

  // What the host master reads within `secs`, until it contains `want`.
  std::string HostRead(const std::string& want, double secs = 5) {
    std::string got;
    const absl::Time end = absl::Now() + absl::Seconds(secs);
    while (got.find(want) == std::string::npos && absl::Now() < end) {
      pollfd p = {host_master_.get(), POLLIN, 0};
      if (poll(&p, 1, 50) != 1) continue;
      char buf[256];
      ssize_t n = read(host_master_.get(), buf, sizeof(buf));
      if (n <= 0) break;
      got.append(buf, n);
    }
    return got;
  }
  void HostWrite(const std::string& s) {
    ASSERT_EQ(write(host_master_.get(), s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  std::string ReplicaRead() {
    std::string buf(256, '\0');
    int64_t r = replica_->Read(buf.data(), buf.size(), -1, IoContext{-1, &blocker_});
    if (r < 0) return "error " + std::to_string(-r);
    buf.resize(r);
    return buf;
  }

  FakeJobControl jc_;
  FakeBlocker blocker_;
  UniqueFd host_master_;
  std::shared_ptr<DevPts> devpts_;
  Pty* pty_ = nullptr;
  std::shared_ptr<File> replica_;
  std::unique_ptr<PtyRelay> relay_;
};

TEST_F(PtyRelayTest, BytesBothWaysThroughTheSandboxLineDiscipline) {
  HostWrite("hello\r");
  // The sandbox's line discipline: ICRNL for the reader, the echo back.
  EXPECT_EQ(ReplicaRead(), "hello\n");
  EXPECT_NE(HostRead("hello\r\n").find("hello\r\n"), std::string::npos);
  ASSERT_EQ(replica_->Write("out\n", 4, -1, IoContext{-1, &blocker_}), 4);
  EXPECT_NE(HostRead("out\r\n").find("out\r\n"), std::string::npos);  // ONLCR here, once
}

TEST_F(PtyRelayTest, ControlCharactersAreSignalsOfTheSandbox) {
  HostWrite("\x03");
  const absl::Time end = absl::Now() + absl::Seconds(5);
  for (;;) {
    {
      absl::MutexLock l(&jc_.mu);
      if (!jc_.signals.empty()) {
        EXPECT_EQ(jc_.signals[0], std::make_pair(9, SIGINT));
        break;
      }
    }
    ASSERT_LT(absl::Now(), end) << "no SIGINT";
    absl::SleepFor(absl::Milliseconds(10));
  }
}

TEST_F(PtyRelayTest, SizeFromTheHostThenResize) {
  struct winsize ws = {};
  ASSERT_EQ(pty_->GetWinsize(&ws), 0);
  EXPECT_EQ(ws.ws_row, 33);
  EXPECT_EQ(ws.ws_col, 99);
  relay_->Resize(40, 120);
  ASSERT_EQ(pty_->GetWinsize(&ws), 0);
  EXPECT_EQ(ws.ws_row, 40);
  EXPECT_EQ(ws.ws_col, 120);
  absl::MutexLock l(&jc_.mu);
  ASSERT_EQ(jc_.signals.size(), 1u);
  EXPECT_EQ(jc_.signals[0], std::make_pair(9, SIGWINCH));
}

TEST_F(PtyRelayTest, HostHangUpEndsTheRelayAndHangsTheReplicaUp) {
  host_master_.reset();
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (!relay_->done()) {
    ASSERT_LT(absl::Now(), end) << "the relay did not end";
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(ReplicaRead(), "");  // EOF after the hang-up
  absl::MutexLock l(&jc_.mu);
  ASSERT_EQ(jc_.hangups.size(), 1u);
  EXPECT_EQ(jc_.hangups[0], 7);
}

}  // namespace
}  // namespace sandboxd::fs::tty
