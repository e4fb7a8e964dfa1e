#include "sentry/fs/epoll.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/fs/eventfd.h"
#include "sentry/fs/pipe.h"
#include "sentry/fs/testing/fake_blocker.h"

namespace sandboxd::fs {
namespace {

struct epoll_event Ev(uint32_t events, uint64_t data) {
  struct epoll_event ev = {};
  ev.events = events;
  ev.data.u64 = data;
  return ev;
}

class EpollTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto [r, w] = PipeEnd::Create(0);
    r_ = std::move(r);
    w_ = std::move(w);
  }
  // Non-blocking epoll_wait: the number of events; the first in *first.
  int Poll(EpollFile& ep, struct epoll_event* first = nullptr, int max = 8) {
    struct epoll_event evs[8] = {};
    int64_t n = ep.Wait(evs, max, absl::InfinitePast(), b_.io());
    if (first != nullptr) *first = evs[0];
    return static_cast<int>(n);
  }
  void Put() { ASSERT_EQ(w_->Write("x", 1, -1, b_.io()), 1); }
  void Drain() {
    char buf[64];
    r_->SetStatusFlags(O_NONBLOCK);
    while (r_->Read(buf, sizeof(buf), -1, b_.io()) > 0) {
    }
    r_->SetStatusFlags(0);
  }

  FakeBlocker b_;
  std::shared_ptr<PipeEnd> r_, w_;
  EpollFile ep_;
};

TEST_F(EpollTest, LevelTriggeredReportsWhileReady) {
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN, 0x1234567890abcdefull)), 0);
  EXPECT_EQ(Poll(ep_), 0);
  Put();
  struct epoll_event ev;
  EXPECT_EQ(Poll(ep_, &ev), 1);
  EXPECT_EQ(ev.events, static_cast<uint32_t>(EPOLLIN));
  EXPECT_EQ(ev.data.u64, 0x1234567890abcdefull);
  EXPECT_EQ(Poll(ep_), 1);
  Drain();
  EXPECT_EQ(Poll(ep_), 0);
}

TEST_F(EpollTest, EdgeTriggeredReportsEachChangeOnce) {
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN | EPOLLET, 1)), 0);
  Put();
  EXPECT_EQ(Poll(ep_), 1);
  EXPECT_EQ(Poll(ep_), 0);  // still readable, but no new edge
  Put();
  EXPECT_EQ(Poll(ep_), 1);
  EXPECT_EQ(Poll(ep_), 0);
}

TEST_F(EpollTest, OneShotUntilModified) {
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN | EPOLLONESHOT, 1)), 0);
  Put();
  EXPECT_EQ(Poll(ep_), 1);
  Put();
  EXPECT_EQ(Poll(ep_), 0);
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_MOD, 3, r_, Ev(EPOLLIN, 2)), 0);
  struct epoll_event ev;
  EXPECT_EQ(Poll(ep_, &ev), 1);
  EXPECT_EQ(ev.data.u64, 2u);
}

TEST_F(EpollTest, CtlErrors) {
  EXPECT_EQ(ep_.Ctl(EPOLL_CTL_MOD, 3, r_, Ev(EPOLLIN, 0)), -ENOENT);
  EXPECT_EQ(ep_.Ctl(EPOLL_CTL_DEL, 3, r_, Ev(0, 0)), -ENOENT);
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN, 0)), 0);
  EXPECT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN, 0)), -EEXIST);
  // The same file under another fd number is another interest.
  EXPECT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 4, r_, Ev(EPOLLIN, 0)), 0);
  EXPECT_EQ(ep_.Ctl(EPOLL_CTL_MOD, 3, r_, Ev(EPOLLIN | EPOLLEXCLUSIVE, 0)), -EINVAL);
  EXPECT_EQ(ep_.Ctl(42, 3, r_, Ev(EPOLLIN, 0)), -EINVAL);
  EXPECT_EQ(ep_.Ctl(EPOLL_CTL_DEL, 3, r_, Ev(0, 0)), 0);
  EXPECT_EQ(ep_.Ctl(EPOLL_CTL_DEL, 3, r_, Ev(0, 0)), -ENOENT);
}

TEST_F(EpollTest, ClosedFileIsDropped) {
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN, 0)), 0);
  Put();
  r_.reset();  // the last reference: the interest goes with it
  EXPECT_EQ(Poll(ep_), 0);
  // The write end still works (EPIPE: no reader any more).
  EXPECT_EQ(w_->Write("x", 1, -1, b_.io()), -EPIPE);
}

TEST_F(EpollTest, HangupAndErrorAreAlwaysReported) {
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(0, 1)), 0);
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 4, w_, Ev(EPOLLOUT, 2)), 0);
  struct epoll_event ev;
  ASSERT_EQ(Poll(ep_, &ev), 1);
  EXPECT_EQ(ev.data.u64, 2u);
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_DEL, 4, w_, Ev(0, 0)), 0);
  w_.reset();
  ASSERT_EQ(Poll(ep_, &ev), 1);
  EXPECT_EQ(ev.events, static_cast<uint32_t>(EPOLLHUP));
}

TEST_F(EpollTest, NestedEpollAndLoops) {
  auto inner = std::make_shared<EpollFile>();
  auto outer = std::make_shared<EpollFile>();
  ASSERT_EQ(inner->Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN, 1)), 0);
  ASSERT_EQ(outer->Ctl(EPOLL_CTL_ADD, 5, inner, Ev(EPOLLIN, 2)), 0);
  EXPECT_EQ(inner->Ctl(EPOLL_CTL_ADD, 6, outer, Ev(EPOLLIN, 3)), -ELOOP);
  EXPECT_EQ(Poll(*outer), 0);
  EXPECT_EQ(inner->Readiness(POLLIN), 0u);
  Put();
  EXPECT_EQ(inner->Readiness(POLLIN), static_cast<waiter::EventMask>(POLLIN));
  struct epoll_event ev;
  EXPECT_EQ(Poll(*outer, &ev), 1);
  EXPECT_EQ(ev.data.u64, 2u);
}

TEST_F(EpollTest, WaitBlocksUntilReadyOrDeadline) {
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN, 7)), 0);
  struct epoll_event evs[4];
  absl::Time start = absl::Now();
  EXPECT_EQ(ep_.Wait(evs, 4, start + absl::Milliseconds(30), b_.io()), 0);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(25));

  int64_t n = -1;
  std::thread waiter([&] { n = ep_.Wait(evs, 4, absl::InfiniteFuture(), b_.io()); });
  b_.AwaitSleeps(2);  // one sleep was the timed wait above
  FakeBlocker wb;
  ASSERT_EQ(w_->Write("x", 1, -1, wb.io()), 1);
  waiter.join();
  EXPECT_EQ(n, 1);
  EXPECT_EQ(evs[0].data.u64, 7u);
}

TEST_F(EpollTest, WaitIsInterrupted) {
  ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 3, r_, Ev(EPOLLIN, 7)), 0);
  struct epoll_event evs[1];
  b_.Interrupt();
  EXPECT_EQ(ep_.Wait(evs, 1, absl::InfiniteFuture(), b_.io()), -EINTR);
}

TEST_F(EpollTest, SmallMaxeventsRotates) {
  std::vector<std::shared_ptr<EventFd>> fds;
  for (int i = 0; i < 6; i++) {
    fds.push_back(std::make_shared<EventFd>(1, EFD_NONBLOCK));
    ASSERT_EQ(ep_.Ctl(EPOLL_CTL_ADD, 10 + i, fds.back(), Ev(EPOLLIN, i)), 0);
  }
  uint32_t seen = 0;
  for (int round = 0; round < 3; round++) {
    struct epoll_event evs[2];
    ASSERT_EQ(ep_.Wait(evs, 2, absl::InfinitePast(), b_.io()), 2);
    for (auto& e : evs) seen |= 1u << e.data.u64;
  }
  EXPECT_EQ(seen, 0x3fu);
}

}  // namespace
}  // namespace sandboxd::fs
