#include "sentry/fs/eventfd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>

#include <thread>

#include "gtest/gtest.h"
#include "sentry/fs/testing/fake_blocker.h"

namespace sandboxd::fs {
namespace {

int64_t Add(EventFd& f, uint64_t v, FakeBlocker& b) {
  return f.Write(&v, sizeof(v), -1, b.io());
}
// The value read, or the negative error as a huge number.
uint64_t Take(EventFd& f, FakeBlocker& b) {
  uint64_t v = 0;
  int64_t r = f.Read(&v, sizeof(v), -1, b.io());
  return r < 0 ? static_cast<uint64_t>(r) : v;
}

TEST(EventFdTest, CounterAddsAndDrains) {
  FakeBlocker b;
  EventFd f(5, EFD_NONBLOCK);
  EXPECT_EQ(Add(f, 3, b), 8);
  EXPECT_EQ(Take(f, b), 8u);
  EXPECT_EQ(Take(f, b), static_cast<uint64_t>(-EAGAIN));
}

TEST(EventFdTest, SemaphoreTakesOneAtATime) {
  FakeBlocker b;
  EventFd f(2, EFD_NONBLOCK | EFD_SEMAPHORE);
  EXPECT_EQ(Take(f, b), 1u);
  EXPECT_EQ(Take(f, b), 1u);
  EXPECT_EQ(Take(f, b), static_cast<uint64_t>(-EAGAIN));
}

TEST(EventFdTest, BadSizesAndValues) {
  FakeBlocker b;
  EventFd f(0, 0);
  char small[4];
  EXPECT_EQ(f.Read(small, 4, -1, b.io()), -EINVAL);
  EXPECT_EQ(f.Write(small, 4, -1, b.io()), -EINVAL);
  EXPECT_EQ(Add(f, UINT64_MAX, b), -EINVAL);
  uint64_t v;
  EXPECT_EQ(f.Read(&v, 8, 0, b.io()), -ESPIPE);
}

TEST(EventFdTest, Readiness) {
  FakeBlocker b;
  EventFd f(0, EFD_NONBLOCK);
  EXPECT_EQ(f.Readiness(POLLIN | POLLOUT), static_cast<waiter::EventMask>(POLLOUT));
  Add(f, EventFd::kMax, b);
  EXPECT_EQ(f.Readiness(POLLIN | POLLOUT), static_cast<waiter::EventMask>(POLLIN));
  EXPECT_EQ(Add(f, 1, b), -EAGAIN);  // would overflow
}

TEST(EventFdTest, BlockedReaderIsWokenByWrite) {
  EventFd f(0, 0);
  FakeBlocker rb, wb;
  uint64_t got = 0;
  std::thread reader([&] { got = Take(f, rb); });
  rb.AwaitSleeps(1);
  Add(f, 42, wb);
  reader.join();
  EXPECT_EQ(got, 42u);
}

TEST(EventFdTest, OverflowingWriterBlocksUntilRead) {
  EventFd f(EventFd::kMax - 1, 0);
  FakeBlocker rb, wb;
  int64_t wrote = 0;
  std::thread writer([&] { wrote = Add(f, 5, wb); });
  wb.AwaitSleeps(1);
  EXPECT_EQ(Take(f, rb), EventFd::kMax - 1);
  writer.join();
  EXPECT_EQ(wrote, 8);
  EXPECT_EQ(f.value(), 5u);
}

TEST(EventFdTest, InterruptedRead) {
  EventFd f(0, 0);
  FakeBlocker b;
  b.Interrupt();
  EXPECT_EQ(Take(f, b), static_cast<uint64_t>(-EINTR));
}

}  // namespace
}  // namespace sandboxd::fs
