#include "sentry/fs/file.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <thread>

#include "absl/time/clock.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"
#include "sentry/fs/epoll.h"
#include "sentry/fs/testing/fake_blocker.h"

namespace sandboxd::fs {
namespace {

struct HostPipe {
  HostPipe() {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    r.reset(p[0]);
    w.reset(p[1]);
  }
  UniqueFd r, w;
};

TEST(HostFileTest, ReadinessAndEpollOnAHostPipe) {
  HostPipe p;
  auto rf = std::make_shared<HostFile>(UniqueFd(dup(p.r.get())));
  EXPECT_EQ(rf->Readiness(POLLIN), 0u);
  ASSERT_NE(rf->event_queue(), nullptr);

  EpollFile ep;
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = 9;
  ASSERT_EQ(ep.Ctl(EPOLL_CTL_ADD, 0, rf, ev), 0);
  FakeBlocker b;
  struct epoll_event out[1];
  EXPECT_EQ(ep.Wait(out, 1, absl::InfinitePast(), b.io()), 0);

  int64_t n = -1;
  std::thread waiter([&] { n = ep.Wait(out, 1, absl::Now() + absl::Seconds(10), b.io()); });
  b.AwaitSleeps(1);
  ASSERT_EQ(write(p.w.get(), "x", 1), 1);
  waiter.join();
  EXPECT_EQ(n, 1);
  EXPECT_EQ(out[0].data.u64, 9u);
  EXPECT_EQ(rf->Readiness(POLLIN), static_cast<waiter::EventMask>(POLLIN));

  p.w.reset();
  EXPECT_EQ(rf->Readiness(POLLIN) & POLLHUP, static_cast<waiter::EventMask>(POLLHUP));
  ASSERT_EQ(ep.Ctl(EPOLL_CTL_DEL, 0, rf, ev), 0);
}

TEST(HostFileTest, RegularFilesAreAlwaysReadyAndNotWatchable) {
  char path[] = "/tmp/host_file_test.XXXXXX";
  UniqueFd fd(mkstemp(path));
  ASSERT_TRUE(fd.valid());
  unlink(path);
  auto f = std::make_shared<HostFile>(std::move(fd));
  EXPECT_EQ(f->Readiness(POLLIN | POLLOUT), static_cast<waiter::EventMask>(POLLIN | POLLOUT));
  EXPECT_EQ(f->event_queue(), nullptr);
  EpollFile ep;
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  EXPECT_EQ(ep.Ctl(EPOLL_CTL_ADD, 0, f, ev), -EPERM);
}

}  // namespace
}  // namespace sandboxd::fs
