// SentryProcess's handling of Sentries that never get as far as a Hello:
// the "sentry" here is a shell script (the arguments are ignored), so the
// failures are real processes failing, not a fake channel.
#include "daemon/sentry_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace sandboxd {
namespace daemon {
namespace {

std::string Script(const std::string& body) {
  char tmpl[] = "/tmp/sentry_process_test.XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string path = dir + "/sentry";
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  chmod(path.c_str(), 0755);
  return path;
}

TEST(SentryProcessTest, ExitBeforeHelloSaysHow) {
  SentrySpawnOptions o;
  o.sentry_path = Script("exit 3");
  o.platform = "systrap";
  auto p = SentryProcess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::Status s = (*p)->AwaitHello(absl::Seconds(30));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "exited with status 3")) << s;
  EXPECT_TRUE((*p)->exited());
  // Calls to a dead Sentry fail at once.
  control::Request req;
  req.mutable_stats();
  EXPECT_EQ((*p)->Call(req).status().code(), absl::StatusCode::kUnavailable);
}

TEST(SentryProcessTest, KilledSentryIsReportedAsACrash) {
  SentrySpawnOptions o;
  o.sentry_path = Script("exec sleep 600");
  o.platform = "systrap";
  auto p = SentryProcess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->AwaitHello(absl::Milliseconds(100)).code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::Mutex mu;
  bool called = false, crashed = false;
  std::string reason;
  (*p)->SetOnExit([&](bool c, const std::string& r) {
    absl::MutexLock l(&mu);
    called = true;
    crashed = c;
    reason = r;
  });
  // A pending call fails when the Sentry dies.
  std::thread caller([&] {
    control::Request req;
    req.mutable_wait();
    absl::Status s = (*p)->Call(req).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "killed by signal 9")) << s;
  });
  absl::SleepFor(absl::Milliseconds(50));
  ASSERT_EQ(kill((*p)->pid(), SIGKILL), 0);
  caller.join();
  absl::MutexLock l(&mu);
  mu.Await(absl::Condition(&called));
  EXPECT_TRUE(crashed);
  EXPECT_TRUE(absl::StrContains(reason, "killed by signal 9")) << reason;
}

TEST(SentryProcessTest, BeforeExecRunsFirstAndItsErrorKillsTheChild) {
  SentrySpawnOptions o;
  o.sentry_path = Script("exec sleep 600");
  o.platform = "systrap";
  pid_t seen = 0;
  o.before_exec = [&](pid_t pid) {
    seen = pid;
    return absl::PermissionDeniedError("no cgroup for you");
  };
  auto p = SentryProcess::Spawn(o);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(absl::StrContains(p.status().message(), "no cgroup for you"));
  ASSERT_GT(seen, 0);
  // Reaped by the time Spawn returned (its SentryProcess was destroyed).
  EXPECT_NE(kill(seen, 0), 0);
}

TEST(SentryProcessTest, ExpectedExitIsNotACrash) {
  SentrySpawnOptions o;
  o.sentry_path = Script("exec sleep 600");
  o.platform = "systrap";
  auto p = SentryProcess::Spawn(o);
  ASSERT_TRUE(p.ok());
  absl::Mutex mu;
  bool called = false, crashed = true;
  (*p)->SetOnExit([&](bool c, const std::string&) {
    absl::MutexLock l(&mu);
    called = true;
    crashed = c;
  });
  (*p)->ExpectExit();
  (*p)->Kill();
  absl::MutexLock l(&mu);
  mu.Await(absl::Condition(&called));
  EXPECT_FALSE(crashed);
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
