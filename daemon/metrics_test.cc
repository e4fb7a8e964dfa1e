#include "daemon/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace sandboxd {
namespace daemon {
namespace {

// GET `path` from 127.0.0.1:port over HTTP/1.0; returns the whole response.
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "connect to port " << port << ": " << strerror(errno);
    close(fd);
    return "";
  }
  std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

// The samples of a text-format exposition: "name{labels}" -> value.
// Also checks that every sample line has the shape "series value".
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    size_t space = line.rfind(' ');
    EXPECT_NE(space, absl::string_view::npos) << line;
    double v;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &v)) << line;
    samples[std::string(line.substr(0, space))] = v;
  }
  return samples;
}

void Exercise(Metrics& m) {
  m.SetSandboxes("running", 3);
  m.SetSandboxes("stopped", 1);
  m.ObserveCreate(true, "systrap", absl::Milliseconds(2));
  m.ObserveCreate(true, "systrap", absl::Milliseconds(4));
  m.ObserveCreate(false, "systrap", absl::Milliseconds(300));
  m.SetPoolSize("systrap", 4);
  m.ObservePoolRefill("systrap", absl::Milliseconds(40));
  m.IncSentryCrashes();
  m.AddUnimplemented(165, 2);
  m.AddUnimplemented(165, 1);
  m.SetSandboxUsage("box1", 1 << 20, 0.5);
  m.SetSandboxUsage("box1", 2 << 20, 1.25);
  m.SetSandboxUsage("box2", 4096, 0.1);
}

TEST(MetricsTest, ServesTextFormatOverHttp) {
  auto m = Metrics::Create("127.0.0.1:0");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_GT((*m)->port(), 0);
  EXPECT_EQ((*m)->address(), absl::StrCat("127.0.0.1:", (*m)->port()));
  Exercise(**m);

  std::string resp = HttpGet((*m)->port(), "/metrics");
  ASSERT_TRUE(absl::StartsWith(resp, "HTTP/1.1 200") || absl::StartsWith(resp, "HTTP/1.0 200"))
      << resp.substr(0, 200);
  size_t body_at = resp.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos);
  std::string body = resp.substr(body_at + 4);

  EXPECT_TRUE(absl::StrContains(body, "# TYPE sandboxd_create_seconds histogram\n"));
  EXPECT_TRUE(absl::StrContains(body, "# TYPE sandboxd_sentry_crashes_total counter\n"));
  EXPECT_TRUE(absl::StrContains(body, "# TYPE sandboxd_sandboxes gauge\n"));
  EXPECT_TRUE(absl::StrContains(body, "# HELP sandboxd_pool_size "));

  std::map<std::string, double> s = ParseSamples(body);
  EXPECT_EQ(s["sandboxd_sandboxes{state=\"running\"}"], 3);
  EXPECT_EQ(s["sandboxd_sandboxes{state=\"stopped\"}"], 1);
  EXPECT_EQ(s["sandboxd_create_seconds_count{platform=\"systrap\",pool=\"hit\"}"], 2);
  EXPECT_DOUBLE_EQ(s["sandboxd_create_seconds_sum{platform=\"systrap\",pool=\"hit\"}"], 0.006);
  EXPECT_EQ(s["sandboxd_create_seconds_count{platform=\"systrap\",pool=\"miss\"}"], 1);
  // Cumulative buckets: both hits are under 5ms, neither under 1ms.
  EXPECT_EQ(s["sandboxd_create_seconds_bucket{platform=\"systrap\",pool=\"hit\",le=\"0.001\"}"], 0);
  EXPECT_EQ(s["sandboxd_create_seconds_bucket{platform=\"systrap\",pool=\"hit\",le=\"0.005\"}"], 2);
  EXPECT_EQ(s["sandboxd_create_seconds_bucket{platform=\"systrap\",pool=\"hit\",le=\"+Inf\"}"], 2);
  EXPECT_EQ(s["sandboxd_pool_size{platform=\"systrap\"}"], 4);
  EXPECT_EQ(s["sandboxd_pool_refill_seconds_count{platform=\"systrap\"}"], 1);
  EXPECT_EQ(s["sandboxd_sentry_crashes_total"], 1);
  EXPECT_EQ(s["sandboxd_unimplemented_syscalls_total{nr=\"165\"}"], 3);
  EXPECT_EQ(s["sandboxd_sandbox_memory_bytes{id=\"box1\"}"], 2 << 20);
  EXPECT_DOUBLE_EQ(s["sandboxd_sandbox_cpu_seconds_total{id=\"box1\"}"], 1.25);
  EXPECT_EQ(s["sandboxd_sandbox_memory_bytes{id=\"box2\"}"], 4096);

  // A destroyed sandbox's series disappear; the others stay.
  (*m)->RemoveSandbox("box1");
  (*m)->RemoveSandbox("never-seen");
  resp = HttpGet((*m)->port(), "/metrics");
  s = ParseSamples(resp.substr(resp.find("\r\n\r\n") + 4));
  EXPECT_EQ(s.count("sandboxd_sandbox_memory_bytes{id=\"box1\"}"), 0u);
  EXPECT_EQ(s.count("sandboxd_sandbox_cpu_seconds_total{id=\"box1\"}"), 0u);
  EXPECT_EQ(s.count("sandboxd_sandbox_memory_bytes{id=\"box2\"}"), 1u);
}

TEST(MetricsTest, CpuCounterNeverGoesBackwards) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->SetSandboxUsage("b", 0, 2.0);
  (*m)->SetSandboxUsage("b", 0, 1.5);  // a stale reading
  std::map<std::string, double> s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_sandbox_cpu_seconds_total{id=\"b\"}"], 2.0);
}

TEST(MetricsTest, NotServedWithEmptyAddress) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->port(), 0);
  EXPECT_EQ((*m)->address(), "");
  Exercise(**m);
  std::map<std::string, double> s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_sentry_crashes_total"], 1);
}

TEST(MetricsTest, BusyPortIsAnError) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto m = Metrics::Create(absl::StrCat("127.0.0.1:", ntohs(addr.sin_port)));
  EXPECT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "cannot serve")) << m.status();
  close(fd);

  EXPECT_EQ(Metrics::Create("nonsense").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
