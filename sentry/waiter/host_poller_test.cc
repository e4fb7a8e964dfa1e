#include "sentry/waiter/host_poller.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <thread>

#include "absl/time/clock.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"
#include "sentry/waiter/testing/fake_blocker.h"

namespace sandboxd::waiter {
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

TEST(HostPollerTest, NotifiesOnEachChangeUntilRemoved) {
  auto poller = HostPoller::Create();
  ASSERT_TRUE(poller.ok()) << poller.status();
  HostPipe p;
  auto q = std::make_shared<WaitQueue>();
  CountingWaiter w;
  q->Add(&w, POLLIN);
  int64_t h = (*poller)->Add(p.r.get(), q);
  ASSERT_GT(h, 0);
  ASSERT_EQ(write(p.w.get(), "a", 1), 1);
  EXPECT_TRUE(w.AwaitCount(1, absl::Seconds(5)));
  EXPECT_TRUE(w.events() & POLLIN);
  ASSERT_EQ(write(p.w.get(), "b", 1), 1);  // edge-triggered: a new edge
  EXPECT_TRUE(w.AwaitCount(2, absl::Seconds(5)));

  (*poller)->Remove(p.r.get(), static_cast<uint64_t>(h));
  int before = w.count();
  ASSERT_EQ(write(p.w.get(), "c", 1), 1);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(w.count(), before);
  q->Remove(&w);
}

// On demand, the thread delivers only between NeedThread and
// DoneWithThread; otherwise a change waits in the host for Flush.
TEST(HostPollerTest, OnDemandThreadWatchesOnlyWhileNeeded) {
  auto poller = HostPoller::Create(/*on_demand=*/true);
  ASSERT_TRUE(poller.ok()) << poller.status();
  HostPipe p;
  auto q = std::make_shared<WaitQueue>();
  CountingWaiter w;
  q->Add(&w, POLLIN);
  int64_t h = (*poller)->Add(p.r.get(), q);
  ASSERT_GT(h, 0);
  ASSERT_EQ(write(p.w.get(), "a", 1), 1);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(w.count(), 0) << "delivered with nothing needing the thread";
  EXPECT_FALSE((*poller)->watching());
  // Flush takes what the host queued, on the calling thread.
  (*poller)->Flush();
  EXPECT_EQ(w.count(), 1);

  // Needed: a change is delivered by the thread, also one queued before.
  ASSERT_EQ(write(p.w.get(), "b", 1), 1);
  HostPoller::NeedThread();
  EXPECT_TRUE(w.AwaitCount(2, absl::Seconds(5)));
  ASSERT_EQ(write(p.w.get(), "c", 1), 1);
  EXPECT_TRUE(w.AwaitCount(3, absl::Seconds(5)));
  HostPoller::DoneWithThread();

  // No longer needed: the thread stops watching at its next wakeup (it
  // may deliver this change first, or leave it to Flush).
  ASSERT_EQ(write(p.w.get(), "d", 1), 1);
  for (int i = 0; i < 5000 && (*poller)->watching(); i++) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_FALSE((*poller)->watching());
  (*poller)->Flush();
  EXPECT_EQ(w.count(), 4);
  ASSERT_EQ(write(p.w.get(), "e", 1), 1);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(w.count(), 4);
  (*poller)->Remove(p.r.get(), static_cast<uint64_t>(h));
  q->Remove(&w);
}

TEST(HostPollerTest, RegularFilesAreRefused) {
  auto poller = HostPoller::Create();
  ASSERT_TRUE(poller.ok());
  char path[] = "/tmp/host_poller_test.XXXXXX";
  UniqueFd fd(mkstemp(path));
  ASSERT_TRUE(fd.valid());
  unlink(path);
  EXPECT_EQ((*poller)->Add(fd.get(), std::make_shared<WaitQueue>()), -EPERM);
}

// Remove is a barrier: a queue freed right after it is never touched.
TEST(HostPollerTest, RemoveRacesWithEvents) {
  auto poller = HostPoller::Create();
  ASSERT_TRUE(poller.ok());
  HostPipe p;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load()) {
      (void)!write(p.w.get(), "x", 1);
      char buf[64];
      fcntl(p.r.get(), F_SETFL, O_NONBLOCK);
      (void)!read(p.r.get(), buf, sizeof(buf));
    }
  });
  for (int i = 0; i < 200; i++) {
    auto q = std::make_shared<WaitQueue>();
    auto w = std::make_unique<CountingWaiter>();
    q->Add(w.get(), POLLIN);
    int64_t h = (*poller)->Add(p.r.get(), q);
    ASSERT_GT(h, 0);
    (*poller)->Remove(p.r.get(), static_cast<uint64_t>(h));
    q->Remove(w.get());
    w.reset();
  }
  stop = true;
  writer.join();
}

}  // namespace
}  // namespace sandboxd::waiter
