#include "client/oci/cgroup.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sandboxd::oci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

bool IsDir(const std::string& p) {
  struct stat sb;
  return stat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
}

// A directory standing in for /sys/fs/cgroup (plain directories: mkdir and
// rmdir behave as in a cgroup hierarchy for what is checked here).
std::string Mount() {
  std::string t = "/tmp/oci_cgroup_test.XXXXXX";
  EXPECT_NE(mkdtemp(t.data()), nullptr);
  char real[PATH_MAX];
  EXPECT_NE(realpath(t.c_str(), real), nullptr);
  return real;
}

TEST(AccountingCgroups, V1MakesCpuCpuacctMemoryPidsAndRemovesTheLeaf) {
  const std::string m = Mount();
  for (const char* h : {"cpu", "cpuacct", "memory", "pids", "freezer"}) {
    ASSERT_EQ(mkdir((m + "/" + h).c_str(), 0755), 0);
  }
  auto made = MakeAccountingCgroups("/default/c1", m);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_THAT(*made, ElementsAre(m + "/cpu/default/c1", m + "/cpuacct/default/c1",
                                 m + "/memory/default/c1", m + "/pids/default/c1"));
  EXPECT_FALSE(IsDir(m + "/freezer/default"));
  RemoveCgroups(*made);
  EXPECT_FALSE(IsDir(m + "/memory/default/c1"));
  EXPECT_TRUE(IsDir(m + "/memory/default"));  // the parent stays, as runc leaves it
  std::filesystem::remove_all(m);
}

TEST(AccountingCgroups, CpuAndCpuacctAsOneHierarchyAreMadeOnce) {
  const std::string m = Mount();
  ASSERT_EQ(mkdir((m + "/cpu,cpuacct").c_str(), 0755), 0);
  ASSERT_EQ(symlink("cpu,cpuacct", (m + "/cpu").c_str()), 0);
  ASSERT_EQ(symlink("cpu,cpuacct", (m + "/cpuacct").c_str()), 0);
  auto made = MakeAccountingCgroups("/x", m);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_THAT(*made, ElementsAre(m + "/cpu,cpuacct/x"));
  std::filesystem::remove_all(m);
}

TEST(AccountingCgroups, V2MakesOneDirectory) {
  const std::string m = Mount();
  std::ofstream(m + "/cgroup.controllers") << "cpu memory pids\n";
  auto made = MakeAccountingCgroups("/a/b", m);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_THAT(*made, ElementsAre(m + "/a/b"));
  EXPECT_TRUE(IsDir(m + "/a/b"));
  std::filesystem::remove_all(m);
}

TEST(AccountingCgroups, SystemdFormAndDotDotAreRefusedNamingTheField) {
  const std::string m = Mount();
  auto sd = MakeAccountingCgroups("system.slice:cri-containerd:c1", m);
  EXPECT_TRUE(absl::IsInvalidArgument(sd.status()));
  EXPECT_THAT(std::string(sd.status().message()), HasSubstr("linux.cgroupsPath"));
  auto up = MakeAccountingCgroups("/a/../../etc", m);
  EXPECT_TRUE(absl::IsInvalidArgument(up.status()));
  std::filesystem::remove_all(m);
}

}  // namespace
}  // namespace sandboxd::oci
