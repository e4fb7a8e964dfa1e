// sandbox_net: pasta's command line, the check of published ports, and the
// /etc files of the sandbox mode. Running pasta is the shell suites' part
// (test/network_test.sh, test/servers_test.sh).
#include "sentry/socket/sandbox_net.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace sandboxd::sandbox_net {
namespace {

v1::PortMapping Port(const std::string& ip, uint32_t host, uint32_t port,
                     bool udp = false) {
  v1::PortMapping p;
  p.set_host_ip(ip);
  p.set_host_port(host);
  p.set_container_port(port);
  if (udp) p.set_protocol(v1::PortMapping::PROTOCOL_UDP);
  return p;
}

TEST(SandboxNetTest, PastaArgsForwardOnlyPublishedPorts) {
  const std::string args = absl::StrJoin(
      PastaArgs({Port("", 8080, 80), Port("::1", 5353, 53, true)}, 5, -1,
                "/proc/self/fd/7"),
      " ");
  EXPECT_TRUE(absl::StrContains(args, "--config-net")) << args;
  EXPECT_TRUE(absl::StrContains(args, "-t 127.0.0.1/8080:80")) << args;
  EXPECT_TRUE(absl::StrContains(args, "-u ::1/5353:53")) << args;
  EXPECT_TRUE(absl::StrContains(args, "-T none -U none")) << args;
  EXPECT_TRUE(absl::StrContains(args, "--netns /proc/self/fd/5 --netns-only"))
      << args;
  EXPECT_FALSE(absl::StrContains(args, "--userns")) << args;

  const std::string none = absl::StrJoin(PastaArgs({}, 5, 6, "p"), " ");
  EXPECT_TRUE(absl::StrContains(none, "-t none -u none")) << none;
  EXPECT_TRUE(absl::StrContains(none, "--userns /proc/self/fd/6")) << none;
  EXPECT_FALSE(absl::StrContains(none, "--netns-only")) << none;
}

TEST(SandboxNetTest, PortInUseIsAClearError) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(s, 1), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const uint32_t port = ntohs(a.sin_port);

  absl::Status st = CheckPortsFree({Port("", port, 80)});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "already in use")) << st;
  // The same port over UDP, or on another address family, is another one.
  EXPECT_TRUE(CheckPortsFree({Port("", port, 80, true)}).ok());
  close(s);
  EXPECT_TRUE(CheckPortsFree({Port("", port, 80)}).ok());

  st = CheckPortsFree({Port("", port, 80), Port("127.0.0.1", port, 81)});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(CheckPortsFree({Port("nowhere", 1, 1)}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPortsFree({Port("", 1, 0)}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SandboxNetTest, EtcFilesFollowTheMode) {
  auto none = EtcFilesFor(v1::NETWORK_MODE_NONE, "box");
  ASSERT_EQ(none.size(), 2u);
  EXPECT_TRUE(absl::StrContains(none[0].second, "127.0.1.1\tbox\n"));
  EXPECT_FALSE(absl::StrContains(none[1].second, "nameserver"));
  auto files = EtcFilesFor(v1::NETWORK_MODE_SANDBOX, "box");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].first, "hosts");
  EXPECT_TRUE(absl::StrContains(files[0].second, "127.0.0.1\tlocalhost\n"));
  EXPECT_TRUE(absl::StrContains(files[0].second, "127.0.1.1\tbox\n"));
  EXPECT_EQ(files[1].first, "resolv.conf");
  EXPECT_TRUE(absl::StrContains(files[1].second, "nameserver ")) << files[1].second;
  EXPECT_FALSE(absl::StrContains(files[1].second, "nameserver 127."))
      << files[1].second;
}

}  // namespace
}  // namespace sandboxd::sandbox_net
