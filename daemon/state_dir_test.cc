#include "daemon/state_dir.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace sandboxd {
namespace daemon {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/state_dir_test.XXXXXX";
  return mkdtemp(tmpl);
}

TEST(StateDirTest, SecondOpenFailsWhileLocked) {
  const std::string dir = TempDir();
  auto a = StateDir::Open(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = StateDir::Open(dir);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
  a->reset();
  EXPECT_TRUE(StateDir::Open(dir).ok());
}

TEST(StateDirTest, RelativePathIsRejected) {
  EXPECT_EQ(StateDir::Open("relative").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StateDirTest, KillStaleKillsRecordedLiveProcessesOnly) {
  const std::string dir = TempDir();
  pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  {
    auto sd = StateDir::Open(dir);
    ASSERT_TRUE(sd.ok());
    ASSERT_TRUE((*sd)->Record(child).ok());
  }  // the "daemon" goes away without forgetting its Sentry
  // A record whose start time does not match (a recycled pid) is left alone.
  FILE* f = fopen((dir + "/sentries/" + std::to_string(getpid())).c_str(), "w");
  fputs("1\n", f);
  fclose(f);

  auto sd = StateDir::Open(dir);
  ASSERT_TRUE(sd.ok());
  EXPECT_EQ((*sd)->KillStale(), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ((*sd)->KillStale(), 0);  // records are gone
}

TEST(StateDirTest, ProcessStartTimeOfSelf) {
  EXPECT_FALSE(ProcessStartTime(getpid()).empty());
  EXPECT_TRUE(ProcessStartTime(0x7ffffff0).empty());
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
