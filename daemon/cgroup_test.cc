// Runs against the host's real cgroupfs (as root), once with the v1 layout and
// once with v2, plus a fake v2 tree for the limit files that this host's v2
// hierarchy lacks controllers for.
#include "daemon/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace sandboxd {
namespace daemon {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(ss.str()));
}

void Spit(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// A name no other test run (or engineer) uses at the same time.
std::string UniqueParent() {
  return absl::StrCat("sbx-test-", getpid(), "-", absl::ToUnixNanos(absl::Now()) % 100000);
}

// A forked child that waits for a byte on a pipe, then runs `body` and exits
// with its result. Lets the parent put it in a cgroup before it does anything.
class Child {
 public:
  template <typename F>
  explicit Child(F body) {
    int p[2];
    if (pipe(p) != 0) abort();
    pid_ = fork();
    if (pid_ == 0) {
      close(p[1]);
      char c;
      if (read(p[0], &c, 1) != 1) _exit(100);
      _exit(body());
    }
    close(p[0]);
    go_ = p[1];
  }
  ~Child() {
    if (go_ >= 0) close(go_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void Go() {
    ASSERT_EQ(write(go_, "x", 1), 1);
    close(go_);
    go_ = -1;
  }
  int Wait() {
    int status = 0;
    EXPECT_EQ(waitpid(pid_, &status, 0), pid_);
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  bool reaped_ = false;
};

int SleepForever() {
  for (;;) pause();
}

const char* VersionName(CgroupVersion v) { return v == CgroupVersion::kV1 ? "v1" : "v2"; }

// ------------------------------------------------ real cgroupfs, v1 and v2

struct Mode {
  CgroupVersion version;
  bool use_cgroup_kill;
};

class CgroupTest : public testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
    CgroupOptions opts;
    opts.version = GetParam().version;
    opts.use_cgroup_kill = GetParam().use_cgroup_kill;
    auto m = CgroupManager::Create(UniqueParent(), opts);
    if (!m.ok()) GTEST_SKIP() << "no usable cgroupfs: " << m.status();
    manager_ = std::move(*m);
  }
  void TearDown() override {
    if (manager_ != nullptr) {
      EXPECT_TRUE(manager_->CleanupStale().ok());
      EXPECT_TRUE(manager_->RemoveParent().ok());
    }
  }
  // The v1 directory of `controller` or the v2 directory, of cgroup `name`.
  std::string Dir(const std::string& controller, const std::string& name) {
    return GetParam().version == CgroupVersion::kV1
               ? absl::StrCat("/sys/fs/cgroup/", controller, "/", parent(), "/", name)
               : absl::StrCat("/sys/fs/cgroup/unified/", parent(), "/", name);
  }
  const std::string& parent() { return manager_->parent(); }

  std::unique_ptr<CgroupManager> manager_;
};

TEST_P(CgroupTest, CreateDescribeNewRemove) {
  EXPECT_EQ(manager_->version(), GetParam().version);
  EXPECT_TRUE(absl::StartsWith(manager_->Describe(), VersionName(GetParam().version)))
      << manager_->Describe();
  auto cg = manager_->New("a");
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ((*cg)->name(), "a");
  struct stat st;
  EXPECT_EQ(stat(Dir("memory", "a").c_str(), &st), 0) << Dir("memory", "a");
  EXPECT_EQ(manager_->New("a").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(manager_->New("../x").status().code(), absl::StatusCode::kInvalidArgument);
  // The parent is not removable while a cgroup is in it.
  EXPECT_EQ(manager_->RemoveParent().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*cg)->Remove().ok());
  EXPECT_NE(stat(Dir("memory", "a").c_str(), &st), 0);
  EXPECT_TRUE((*cg)->Remove().ok()) << "Remove is idempotent";
}

TEST_P(CgroupTest, MemoryLimit) {
  auto cg = manager_->New("mem");
  ASSERT_TRUE(cg.ok()) << cg.status();
  CgroupLimits limits;
  limits.memory_bytes = 64 << 20;
  absl::Status s = (*cg)->SetLimits(limits);
  if (!manager_->HasController("memory")) {
    // This host's v2 hierarchy has no memory controller: an honest refusal.
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "memory controller")) << s;
    return;
  }
  ASSERT_TRUE(s.ok()) << s;
  bool v1 = GetParam().version == CgroupVersion::kV1;
  std::string file = Dir("memory", "mem") + (v1 ? "/memory.limit_in_bytes" : "/memory.max");
  EXPECT_EQ(Slurp(file), absl::StrCat(64 << 20));
  ASSERT_TRUE((*cg)->SetLimits(CgroupLimits{}).ok());
  EXPECT_EQ(Slurp(file), v1 ? "9223372036854771712" : "max");
}

TEST_P(CgroupTest, CpuLimit) {
  auto cg = manager_->New("cpu");
  ASSERT_TRUE(cg.ok()) << cg.status();
  CgroupLimits limits;
  limits.cpu_millis = 5;
  if (!manager_->HasController("cpu")) {
    limits.cpu_millis = 500;
    EXPECT_EQ((*cg)->SetLimits(limits).code(), absl::StatusCode::kFailedPrecondition);
    return;
  }
  EXPECT_EQ((*cg)->SetLimits(limits).code(), absl::StatusCode::kInvalidArgument)
      << "under the kernel's 1ms minimum quota";
  limits.cpu_millis = 500;
  ASSERT_TRUE((*cg)->SetLimits(limits).ok());
  if (GetParam().version == CgroupVersion::kV1) {
    EXPECT_EQ(Slurp(Dir("cpu", "cpu") + "/cpu.cfs_quota_us"), "50000");
    EXPECT_EQ(Slurp(Dir("cpu", "cpu") + "/cpu.cfs_period_us"), "100000");
  } else {
    EXPECT_EQ(Slurp(Dir("cpu", "cpu") + "/cpu.max"), "50000 100000");
  }
}

TEST_P(CgroupTest, CpuWeight) {
  auto cg = manager_->New("weight");
  ASSERT_TRUE(cg.ok()) << cg.status();
  if (!manager_->HasController("cpu")) {
    EXPECT_TRUE((*cg)->SetCpuWeight(kCpuWeightIdle).ok()) << "nothing to do, and OK";
    return;
  }
  const bool v1 = GetParam().version == CgroupVersion::kV1;
  const std::string file = Dir("cpu", "weight") + (v1 ? "/cpu.shares" : "/cpu.weight");
  ASSERT_TRUE((*cg)->SetCpuWeight(kCpuWeightIdle).ok());
  // The kernel rounds the smallest share up (this one reads 2 back as 10).
  int idle = 0;
  ASSERT_TRUE(absl::SimpleAtoi(Slurp(file), &idle)) << Slurp(file);
  EXPECT_LE(idle, v1 ? 10 : 1);
  ASSERT_TRUE((*cg)->SetCpuWeight(kCpuWeightDefault).ok());
  EXPECT_EQ(Slurp(file), v1 ? "1024" : "100");
}

TEST_P(CgroupTest, AddProcessProcsAndKillAll) {
  auto cg = manager_->New("procs");
  ASSERT_TRUE(cg.ok()) << cg.status();
  Child child(SleepForever);
  EXPECT_EQ((*cg)->AddProcess(0).code(), absl::StatusCode::kInvalidArgument)
      << "0 would mean the daemon itself";
  EXPECT_EQ((*cg)->AddProcess(-1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*cg)->AddProcess(child.pid()).ok());
  auto procs = (*cg)->Procs();
  ASSERT_TRUE(procs.ok()) << procs.status();
  EXPECT_EQ(*procs, std::vector<pid_t>{child.pid()});
  // The process is in every hierarchy (v1) and in the cgroup's tasks.
  std::string self = Slurp(absl::StrCat("/proc/", child.pid(), "/cgroup"));
  EXPECT_TRUE(absl::StrContains(self, absl::StrCat("/", parent(), "/procs"))) << self;
  auto usage = (*cg)->Usage();
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->pids, 1u);

  // A process still inside keeps the cgroup from being removed.
  EXPECT_EQ((*cg)->Remove().code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE((*cg)->KillAll().ok());
  int status = child.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  procs = (*cg)->Procs();
  ASSERT_TRUE(procs.ok());
  EXPECT_TRUE(procs->empty());
  EXPECT_TRUE((*cg)->Remove().ok());
}

// Processes that keep forking are all killed: the cgroup ends up empty.
TEST_P(CgroupTest, KillAllCatchesForks) {
  auto cg = manager_->New("forker");
  ASSERT_TRUE(cg.ok()) << cg.status();
  Child child([] {
    // A chain of 21 processes, each forking the next: only the first is the
    // test's child; the cgroup finds the rest.
    for (int i = 0; i < 20; ++i) {
      pid_t p = fork();
      if (p < 0) break;
      if (p == 0) continue;
      SleepForever();
    }
    return SleepForever();
  });
  ASSERT_TRUE((*cg)->AddProcess(child.pid()).ok());
  child.Go();
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  size_t n = 0;
  while (absl::Now() < deadline) {
    auto procs = (*cg)->Procs();
    ASSERT_TRUE(procs.ok());
    n = procs->size();
    if (n >= 21) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(n, 21u);
  ASSERT_TRUE((*cg)->KillAll().ok());
  child.Wait();
  auto procs = (*cg)->Procs();
  ASSERT_TRUE(procs.ok());
  EXPECT_TRUE(procs->empty());
}

TEST_P(CgroupTest, PidsLimitMakesForkFail) {
  auto cg = manager_->New("pids");
  ASSERT_TRUE(cg.ok()) << cg.status();
  CgroupLimits limits;
  limits.pids = 1;
  if (!manager_->HasController("pids")) {
    EXPECT_EQ((*cg)->SetLimits(limits).code(), absl::StatusCode::kFailedPrecondition);
    return;
  }
  Child child([] {
    pid_t p = fork();
    if (p == 0) _exit(0);
    if (p > 0) return 1;  // the limit did not hold
    return errno == EAGAIN ? 0 : 2;
  });
  ASSERT_TRUE((*cg)->AddProcess(child.pid()).ok());
  ASSERT_TRUE((*cg)->SetLimits(limits).ok());
  EXPECT_EQ(Slurp(Dir("pids", "pids") + "/pids.max"), "1");
  child.Go();
  int status = child.Wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: fork succeeded; 2: fork failed, not EAGAIN";
}

TEST_P(CgroupTest, UsageCountersMove) {
  auto cg = manager_->New("usage");
  ASSERT_TRUE(cg.ok()) << cg.status();
  int done[2];
  ASSERT_EQ(pipe(done), 0);
  Child child([&] {
    // 32 MiB touched and 200ms of CPU (the process's own clock: the machine
    // may be busy), then report and wait to be killed.
    constexpr size_t kBytes = 32 << 20;
    volatile char* p = static_cast<volatile char*>(malloc(kBytes));
    for (size_t i = 0; i < kBytes; i += 4096) p[i] = 1;
    struct timespec ts;
    do {
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    } while (ts.tv_sec == 0 && ts.tv_nsec < 200 * 1000 * 1000);
    if (write(done[1], "x", 1) != 1) return 1;
    return SleepForever();
  });
  close(done[1]);
  ASSERT_TRUE((*cg)->AddProcess(child.pid()).ok());
  auto before = (*cg)->Usage();
  ASSERT_TRUE(before.ok()) << before.status();
  child.Go();
  char c;
  ASSERT_EQ(read(done[0], &c, 1), 1);
  close(done[0]);
  auto after = (*cg)->Usage();
  ASSERT_TRUE(after.ok()) << after.status();
  absl::Duration cpu = (after->cpu_user + after->cpu_system) -
                       (before->cpu_user + before->cpu_system);
  EXPECT_GE(cpu, absl::Milliseconds(150)) << cpu;
  if (manager_->HasController("memory")) {
    EXPECT_GE(after->memory_bytes, 24u << 20);
    EXPECT_GE(after->memory_peak_bytes, after->memory_bytes);
  }
  EXPECT_EQ(after->pids, 1u);
  ASSERT_TRUE((*cg)->KillAll().ok());
  child.Wait();
}

// An earlier daemon's cgroup, with a process in it, is emptied and removed.
TEST_P(CgroupTest, CleanupStaleRemovesLeftovers) {
  Child child(SleepForever);
  {
    auto cg = manager_->New("stale");
    ASSERT_TRUE(cg.ok()) << cg.status();
    ASSERT_TRUE((*cg)->AddProcess(child.pid()).ok());
    (void)cg->release();  // the "crashed daemon" never destroys it
  }
  CgroupOptions opts;
  opts.version = GetParam().version;
  opts.use_cgroup_kill = GetParam().use_cgroup_kill;
  auto next = CgroupManager::Create(parent(), opts);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE((*next)->CleanupStale().ok());
  int status = child.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  struct stat st;
  EXPECT_NE(stat(Dir("memory", "stale").c_str(), &st), 0);
  EXPECT_TRUE((*next)->New("stale").ok()) << "the name is free again";
}

// The destructor kills and removes.
TEST_P(CgroupTest, DestructorCleansUp) {
  Child child(SleepForever);
  {
    auto cg = manager_->New("dtor");
    ASSERT_TRUE(cg.ok()) << cg.status();
    ASSERT_TRUE((*cg)->AddProcess(child.pid()).ok());
  }
  int status = child.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  struct stat st;
  EXPECT_NE(stat(Dir("memory", "dtor").c_str(), &st), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CgroupTest,
    testing::Values(Mode{CgroupVersion::kV1, true}, Mode{CgroupVersion::kV2, true},
                    Mode{CgroupVersion::kV2, false}),
    [](const testing::TestParamInfo<Mode>& info) {
      return absl::StrCat(VersionName(info.param.version),
                          info.param.use_cgroup_kill ? "" : "_freeze");
    });

// ------------------------------------------------ fake trees

class FakeTree : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sbx-cgroup-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::string cmd = absl::StrCat("rm -rf ", root_);
    ASSERT_EQ(system(cmd.c_str()), 0);
  }
  void Mountinfo(const std::string& lines) { Spit(root_ + "/mountinfo", lines); }
  CgroupOptions Options(CgroupVersion v = CgroupVersion::kAuto) {
    CgroupOptions o;
    o.version = v;
    o.mountinfo_path = root_ + "/mountinfo";
    return o;
  }
  std::string root_;
};

// v2 with every controller (which this host's v2 hierarchy does not have):
// the limit files get the kernel's formats, and usage is parsed from them.
TEST_F(FakeTree, V2LimitAndUsageFiles) {
  std::string v2 = root_ + "/unified";
  ASSERT_EQ(mkdir(v2.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((v2 + "/sbx").c_str(), 0755), 0);
  for (const std::string& d : {v2, v2 + "/sbx"}) {
    Spit(d + "/cgroup.controllers", "cpuset cpu io memory pids");
    Spit(d + "/cgroup.subtree_control", "cpu memory pids");  // already on
  }
  // Hybrid layout with complete v2 controllers: auto-detection picks v2.
  Mountinfo(absl::StrCat(
      "30 25 0:26 / ", root_, "/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n",
      "35 25 0:30 / ", v2, " rw,relatime shared:14 - cgroup2 cgroup2 rw\n"));
  auto m = CgroupManager::Create("sbx", Options());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->version(), CgroupVersion::kV2);
  EXPECT_EQ((*m)->Describe(), absl::StrCat("v2 (memory,cpu,pids at ", v2, "/sbx)"));
  auto cg = (*m)->New("box");
  ASSERT_TRUE(cg.ok()) << cg.status();
  std::string dir = v2 + "/sbx/box";
  for (const char* f : {"memory.max", "memory.swap.max", "cpu.max", "pids.max", "cpu.weight"}) {
    Spit(dir + "/" + f, "");
  }
  ASSERT_TRUE((*cg)->SetCpuWeight(kCpuWeightIdle).ok());
  EXPECT_EQ(Slurp(dir + "/cpu.weight"), "1");
  ASSERT_TRUE((*cg)->SetLimits({256 << 20, 1500, 64}).ok());
  EXPECT_EQ(Slurp(dir + "/memory.max"), "268435456");
  EXPECT_EQ(Slurp(dir + "/memory.swap.max"), "0");
  EXPECT_EQ(Slurp(dir + "/cpu.max"), "150000 100000");
  EXPECT_EQ(Slurp(dir + "/pids.max"), "64");

  Spit(dir + "/memory.current", "1000\n");
  Spit(dir + "/memory.peak", "5000\n");
  Spit(dir + "/cpu.stat", "usage_usec 3500\nuser_usec 2000\nsystem_usec 1500\n");
  Spit(dir + "/pids.current", "3\n");
  auto u = (*cg)->Usage();
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->memory_bytes, 1000u);
  EXPECT_EQ(u->memory_peak_bytes, 5000u);
  EXPECT_EQ(u->cpu_user, absl::Microseconds(2000));
  EXPECT_EQ(u->cpu_system, absl::Microseconds(1500));
  EXPECT_EQ(u->pids, 3u);
  (void)cg->release();  // a plain directory tree: nothing to kill or rmdir
}

// v1 with cpu and cpuacct co-mounted, as systemd does: one directory for both.
TEST_F(FakeTree, V1CoMountedControllers) {
  for (const char* d : {"/cpu,cpuacct", "/memory", "/pids"}) {
    ASSERT_EQ(mkdir((root_ + d).c_str(), 0755), 0);
  }
  Mountinfo(absl::StrCat(
      "30 25 0:26 / ", root_, "/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
      "31 25 0:27 / ", root_, "/memory rw - cgroup cgroup rw,memory\n",
      "32 25 0:28 / ", root_, "/pids rw - cgroup cgroup rw,pids\n",
      "33 25 0:29 / /elsewhere/memory rw - cgroup cgroup rw,memory\n",  // a bind mount
      "34 25 0:30 / ", root_, "/unified rw - cgroup2 cgroup2 rw\n"));
  auto m = CgroupManager::Create("sbx", Options());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->version(), CgroupVersion::kV1);
  EXPECT_EQ((*m)->Describe(),
            absl::StrCat("v1 (cpu,cpuacct,memory,pids at ", root_, "/*/sbx)"));
  EXPECT_FALSE((*m)->HasController("freezer"));
  auto cg = (*m)->New("box");
  ASSERT_TRUE(cg.ok()) << cg.status();
  std::string cpu = root_ + "/cpu,cpuacct/sbx/box";
  Spit(cpu + "/cpuacct.usage_user", "2000000\n");
  Spit(cpu + "/cpuacct.usage_sys", "1000000\n");
  Spit(root_ + "/memory/sbx/box/memory.usage_in_bytes", "4096\n");
  Spit(root_ + "/memory/sbx/box/memory.max_usage_in_bytes", "8192\n");
  Spit(root_ + "/pids/sbx/box/pids.current", "2\n");
  auto u = (*cg)->Usage();
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->cpu_user, absl::Milliseconds(2));
  EXPECT_EQ(u->cpu_system, absl::Milliseconds(1));
  EXPECT_EQ(u->memory_bytes, 4096u);
  EXPECT_EQ(u->memory_peak_bytes, 8192u);
  EXPECT_EQ(u->pids, 2u);
  (void)cg->release();
}

// A restarted daemon opens its recorded cgroups and tells a parent it
// made from one it found.
TEST_F(FakeTree, OpenFindsExistingCgroupsAndCreatedParentSaysWho) {
  for (const char* d : {"/memory", "/pids"}) {
    ASSERT_EQ(mkdir((root_ + d).c_str(), 0755), 0);
  }
  Mountinfo(absl::StrCat(
      "31 25 0:27 / ", root_, "/memory rw - cgroup cgroup rw,memory\n",
      "32 25 0:28 / ", root_, "/pids rw - cgroup cgroup rw,pids\n"));
  auto m = CgroupManager::Create("sbx", Options());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE((*m)->created_parent());
  auto cg = (*m)->New("box");
  ASSERT_TRUE(cg.ok()) << cg.status();
  (void)cg->release();
  auto again = CgroupManager::Create("sbx", Options());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE((*again)->created_parent());
  auto opened = (*again)->Open("box");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->name(), "box");
  (void)opened->release();
  EXPECT_EQ((*again)->Open("other").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*again)->Open("../x").status().code(), absl::StatusCode::kInvalidArgument);
}

// Removed while the daemon runs (by the daemon that made it, or by hand):
// the next cgroup makes the parent again.
TEST_P(CgroupTest, MissingParentIsMadeAgain) {
  ASSERT_TRUE(manager_->RemoveParent().ok());
  struct stat st;
  ASSERT_NE(stat(Dir("memory", "").c_str(), &st), 0);
  auto cg = manager_->New("after");
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(stat(Dir("memory", "after").c_str(), &st), 0);
  ASSERT_TRUE((*cg)->Remove().ok());
}

TEST_F(FakeTree, NoCgroupMountsIsAnError) {
  Mountinfo("22 1 0:21 / /proc rw - proc proc rw\n");
  auto m = CgroupManager::Create("sbx", Options());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();
  EXPECT_EQ(CgroupManager::Create("sbx", Options(CgroupVersion::kV2)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
