#include "daemon/state_dir.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

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

TEST(StateDirTest, KillStaleSparesTheKeptAndNamesTheCgroups) {
  const std::string dir = TempDir();
  pid_t kept = fork();
  if (kept == 0) {
    pause();
    _exit(0);
  }
  auto sd = StateDir::Open(dir);
  ASSERT_TRUE(sd.ok());
  ASSERT_TRUE((*sd)->Record(kept, "sentry-a-0").ok());
  ASSERT_TRUE((*sd)->Record(getpid(), "sentry-a-1").ok());
  // getpid() stands for a Sentry that is gone: its start time is wrong.
  FILE* f = fopen((dir + "/sentries/" + std::to_string(getpid())).c_str(), "w");
  fputs("1\nsentry-a-1\n", f);
  fclose(f);
  std::vector<std::string> cgroups;
  EXPECT_EQ((*sd)->KillStale({kept}, &cgroups), 0);
  EXPECT_EQ(cgroups, std::vector<std::string>{"sentry-a-1"});
  ASSERT_EQ((*sd)->Sentries().size(), 1u);
  EXPECT_EQ((*sd)->Sentries()[0].cgroup, "sentry-a-0");
  EXPECT_TRUE((*sd)->Sentries()[0].Alive());
  kill(kept, SIGKILL);
  waitpid(kept, nullptr, 0);
}

TEST(StateDirTest, SandboxRecordsRoundTripAndGo) {
  const std::string dir = TempDir();
  auto sd = StateDir::Open(dir);
  ASSERT_TRUE(sd.ok());
  v1::SandboxInfo info;
  info.set_id("box1");
  info.set_state(v1::SANDBOX_STATE_RUNNING);
  info.mutable_spec()->mutable_process()->add_argv("/bin/true");
  (*info.mutable_spec()->mutable_labels())["k"] = "v";
  info.add_sentry_pids(1234);
  ASSERT_TRUE((*sd)->SaveSandbox(info).ok());
  info.set_state(v1::SANDBOX_STATE_STOPPED);
  ASSERT_TRUE((*sd)->SaveSandbox(info).ok());
  ASSERT_EQ(mkdir((*sd)->SandboxDir("junk").c_str(), 0700), 0);
  std::vector<std::string> errors;
  std::vector<v1::SandboxInfo> all = (*sd)->LoadSandboxes(&errors);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(errors, std::vector<std::string>{"junk"});
  (*sd)->RemoveSandbox("junk");
  errors.clear();
  EXPECT_EQ(all[0].state(), v1::SANDBOX_STATE_STOPPED);
  EXPECT_EQ(all[0].spec().labels().at("k"), "v");
  EXPECT_EQ(all[0].sentry_pids(0), 1234);
  (*sd)->RemoveSandbox("box1");
  EXPECT_TRUE((*sd)->LoadSandboxes(&errors).empty());
  EXPECT_EQ(access((*sd)->SandboxDir("box1").c_str(), F_OK), -1);
}

TEST(StateDirTest, ControlSocketUnderALongPath) {
  // Longer than sun_path's 108 bytes.
  const std::string dir = TempDir() + "/" + std::string(100, 'd');
  auto sd = StateDir::Open(dir);
  ASSERT_TRUE(sd.ok()) << sd.status();
  absl::StatusOr<UniqueFd> l = (*sd)->Listen("box-with-a-long-name");
  ASSERT_TRUE(l.ok()) << l.status();
  absl::StatusOr<UniqueFd> c = (*sd)->Connect("box-with-a-long-name");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*sd)->Connect("other").ok());
}

TEST(StateDirTest, ExecRecordsRoundTripAndGo) {
  const std::string dir = TempDir();
  auto sd = StateDir::Open(dir);
  ASSERT_TRUE(sd.ok());
  v1::SandboxInfo box;
  box.set_id("box");
  ASSERT_TRUE((*sd)->SaveSandbox(box).ok());
  for (int pid : {2, 17}) {
    v1::ExecInfo e;
    e.set_pid(pid);
    e.mutable_process()->add_argv("/bin/true");
    e.set_running(pid == 17);
    ASSERT_TRUE((*sd)->SaveExec("box", e).ok());
  }
  FILE* f = fopen((*sd)->ExecLogPath("box", 2).c_str(), "w");
  fclose(f);
  std::vector<v1::ExecInfo> execs = (*sd)->LoadExecs("box");
  ASSERT_EQ(execs.size(), 2u);
  EXPECT_TRUE(execs[0].running() != execs[1].running());
  (*sd)->RemoveExec("box", 2);
  struct stat st;
  EXPECT_NE(stat((*sd)->ExecLogPath("box", 2).c_str(), &st), 0);
  execs = (*sd)->LoadExecs("box");
  ASSERT_EQ(execs.size(), 1u);
  EXPECT_EQ(execs[0].pid(), 17);
  // The sandbox's own record is not an exec's.
  EXPECT_EQ((*sd)->LoadSandboxes(nullptr).size(), 1u);
}

TEST(StateDirTest, WarmSocketMovesToItsSandbox) {
  const std::string dir = TempDir();
  auto sd = StateDir::Open(dir);
  ASSERT_TRUE(sd.ok());
  absl::StatusOr<UniqueFd> l = (*sd)->ListenWarm(4242);
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_TRUE((*sd)->MoveWarmSocket(4242, "box").ok());
  // The listening socket answers at its new name.
  absl::StatusOr<UniqueFd> c = (*sd)->Connect("box");
  EXPECT_TRUE(c.ok()) << c.status();
  struct stat st;
  EXPECT_NE(stat((dir + "/sockets/4242").c_str(), &st), 0);
  // A warm socket nobody records goes at the next start's clean-up.
  ASSERT_TRUE((*sd)->ListenWarm(4343).ok());
  (*sd)->KillStale();
  EXPECT_NE(stat((dir + "/sockets/4343").c_str(), &st), 0);
}

TEST(StateDirTest, CgroupParentOwnership) {
  const std::string dir = TempDir();
  auto sd = StateDir::Open(dir);
  ASSERT_TRUE(sd.ok());
  EXPECT_FALSE((*sd)->CreatedCgroupParent("sandboxd-x"));
  (*sd)->RecordCgroupParent("sandboxd-x");
  EXPECT_TRUE((*sd)->CreatedCgroupParent("sandboxd-x"));
  EXPECT_FALSE((*sd)->CreatedCgroupParent("sandboxd"));
  (*sd)->ForgetCgroupParent();
  EXPECT_FALSE((*sd)->CreatedCgroupParent("sandboxd-x"));
}

TEST(StateDirTest, NetworkRecordNamesALiveProcessOnce) {
  const std::string dir = TempDir();
  auto sd = StateDir::Open(dir);
  ASSERT_TRUE(sd.ok());
  EXPECT_EQ((*sd)->LoadNetwork("box").pid, 0);
  ASSERT_TRUE((*sd)->RecordNetwork("box", getpid()).ok());
  SentryRecord r = (*sd)->LoadNetwork("box");
  EXPECT_EQ(r.pid, getpid());
  EXPECT_TRUE(r.Alive());
  (*sd)->ForgetNetwork("box");
  EXPECT_EQ((*sd)->LoadNetwork("box").pid, 0);
  // A pid that is gone is refused, not recorded.
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE((*sd)->RecordNetwork("box", child).ok());
  EXPECT_EQ((*sd)->LoadNetwork("box").pid, 0);
  (*sd)->RemoveSandbox("box");
}

TEST(StateDirTest, ProcessStartTimeOfSelf) {
  EXPECT_FALSE(ProcessStartTime(getpid()).empty());
  EXPECT_TRUE(ProcessStartTime(0x7ffffff0).empty());
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
