#include "proto/control_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "proto/control.pb.h"

namespace sandboxd::control {
namespace {

TEST(ChannelTest, MessageAndFdsArriveTogether) {
  auto pair = Channel::Pair();
  ASSERT_TRUE(pair.ok()) << pair.status();
  auto& [a, b] = *pair;

  int p[2];
  ASSERT_EQ(pipe(p), 0);
  Request req;
  req.set_id(7);
  req.mutable_start()->set_sandbox_id("box");
  req.mutable_start()->mutable_spec()->mutable_process()->add_argv("/bin/true");
  ASSERT_TRUE(a.Send(req, {p[0], p[1]}).ok());
  close(p[0]);
  close(p[1]);

  Request got;
  std::vector<UniqueFd> fds;
  ASSERT_TRUE(b.Receive(&got, &fds).ok());
  EXPECT_EQ(got.id(), 7u);
  EXPECT_EQ(got.start().sandbox_id(), "box");
  EXPECT_EQ(got.start().spec().process().argv(0), "/bin/true");
  ASSERT_EQ(fds.size(), 2u);
  EXPECT_NE(fcntl(fds[0].get(), F_GETFD) & FD_CLOEXEC, 0);
  // The two descriptors are still the two ends of one pipe, in order.
  ASSERT_EQ(write(fds[1].get(), "x", 1), 1);
  char c = 0;
  ASSERT_EQ(read(fds[0].get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST(ChannelTest, EmptyMessageIsStillAPacket) {
  auto pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  Response empty;  // serializes to zero bytes: only the header is sent
  ASSERT_TRUE(pair->first.Send(empty).ok());
  Response got;
  got.set_id(3);
  ASSERT_TRUE(pair->second.Receive(&got).ok());
  EXPECT_EQ(got.id(), 0u);
}

TEST(ChannelTest, PeerCloseIsUnavailable) {
  auto pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  pair->first.release_fd().reset();
  Response got;
  absl::Status s = pair->second.Receive(&got);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  s = pair->second.Send(got);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST(ChannelTest, MalformedPacketsAreDataLoss) {
  auto pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  int raw = pair->first.fd();
  // Too short for the header.
  ASSERT_EQ(send(raw, "ab", 2, 0), 2);
  // A header that disagrees with the packet's length.
  const char bad_len[] = {10, 0, 0, 0, 1};
  ASSERT_EQ(send(raw, bad_len, sizeof(bad_len), 0), 5);
  // Garbage that is not a Response.
  const char garbage[] = {3, 0, 0, 0, '\xff', '\xff', '\xff'};
  ASSERT_EQ(send(raw, garbage, sizeof(garbage), 0), 7);
  // Larger than any valid packet (the sender's buffer must take it).
  int sndbuf = 1 << 20;
  ASSERT_EQ(setsockopt(raw, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
  std::string huge(4 + kMaxPacketBytes + 10, '\0');
  ASSERT_EQ(send(raw, huge.data(), huge.size(), 0), static_cast<ssize_t>(huge.size()));
  Response got;
  for (int i = 0; i < 4; i++) {
    absl::Status s = pair->second.Receive(&got);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << i << ": " << s;
  }
  // The channel still works after them.
  Response ok;
  ok.set_id(9);
  ASSERT_TRUE(pair->first.Send(ok).ok());
  ASSERT_TRUE(pair->second.Receive(&got).ok());
  EXPECT_EQ(got.id(), 9u);
}

TEST(ChannelTest, TooLargeToSend) {
  auto pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  Response r;
  r.set_message(std::string(kMaxMessageBytes + 1, 'x'));
  EXPECT_EQ(pair->first.Send(r).code(), absl::StatusCode::kInvalidArgument);
}

// A message of many packets (a spec with 3 MiB of environment): the
// receiver reassembles it, fds come with it, and the next message follows.
TEST(ChannelTest, LargeMessageInManyPackets) {
  auto pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  Response big;
  big.set_id(5);
  std::string text(3 << 20, 'e');
  for (size_t i = 0; i < text.size(); i += 4093) text[i] = 'a' + i % 26;
  big.set_message(text);
  Response small;
  small.set_id(6);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::thread sender([&] {
    EXPECT_TRUE(pair->first.Send(big, {fds[0]}).ok());
    EXPECT_TRUE(pair->first.Send(small).ok());
  });
  Response got;
  std::vector<UniqueFd> got_fds;
  ASSERT_TRUE(pair->second.Receive(&got, &got_fds).ok());
  EXPECT_EQ(got.id(), 5u);
  EXPECT_TRUE(got.message() == text);
  EXPECT_EQ(got_fds.size(), 1u);
  ASSERT_TRUE(pair->second.Receive(&got).ok());
  EXPECT_EQ(got.id(), 6u);
  sender.join();
  close(fds[0]);
  close(fds[1]);
}

TEST(ChannelTest, ConcurrentSendersNeverInterleave) {
  auto pair = Channel::Pair();
  ASSERT_TRUE(pair.ok());
  constexpr int kPerThread = 200;
  auto sender = [&](int base) {
    for (int i = 0; i < kPerThread; i++) {
      Response r;
      r.set_id(base + i);
      r.set_message(std::string(1000, 'a' + base / 1000));
      ASSERT_TRUE(pair->first.Send(r).ok());
    }
  };
  std::thread t1(sender, 1000), t2(sender, 2000);
  int seen1 = 0, seen2 = 0;
  for (int i = 0; i < 2 * kPerThread; i++) {
    Response r;
    ASSERT_TRUE(pair->second.Receive(&r).ok());
    ASSERT_EQ(r.message(), std::string(1000, 'a' + r.id() / 1000));
    (r.id() < 2000 ? seen1 : seen2)++;
  }
  t1.join();
  t2.join();
  EXPECT_EQ(seen1, kPerThread);
  EXPECT_EQ(seen2, kPerThread);
}

}  // namespace
}  // namespace sandboxd::control
