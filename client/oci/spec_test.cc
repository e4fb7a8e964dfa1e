#include "client/oci/spec.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sandboxd::oci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A config.json like `runc spec` makes, edited; each replacement swaps the
// text of one key's value ("user", "rlimits", "mounts", "namespaces") or
// adds keys ("+process", "+linux", "+top").
std::string Config(std::map<std::string, std::string> r = {}) {
  auto get = [&r](const std::string& k, const std::string& d) {
    auto it = r.find(k);
    return it == r.end() ? d : it->second;
  };
  return R"({"ociVersion": "1.0.2-dev",
    "process": {"terminal": false, "user": )" +
         get("user", R"({"uid": 1000, "gid": 100, "additionalGids": [5, 6]})") +
         R"(, "args": ["sh", "-c", "true"],
      "env": ["PATH=/bin", "TERM=xterm"], "cwd": "/tmp",
      "capabilities": {"bounding": ["CAP_KILL"]},
      "rlimits": )" +
         get("rlimits", R"([{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 512}])") +
         R"(, "noNewPrivileges": true)" + get("+process", "") + R"(},
    "root": {"path": "rootfs", "readonly": true},
    "hostname": "box",
    "mounts": )" + get("mounts", R"([
      {"destination": "/proc", "type": "proc", "source": "proc"},
      {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]},
      {"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
      {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["ro"]},
      {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "ro"]},
      {"destination": "/scratch", "type": "tmpfs", "source": "tmpfs", "options": ["size=65536k", "mode=1777", "nosuid"]}
    ])") + R"(,
    "annotations": {"a": "b"},
    "linux": {"namespaces": )" +
         get("namespaces", R"([{"type": "pid"}, {"type": "network"}, {"type": "mount"}])") +
         R"(, "resources": {"memory": {"limit": 268435456}, "cpu": {"quota": 150000, "period": 100000},
        "pids": {"limit": 64}, "devices": [{"allow": false, "access": "rwm"}]},
      "maskedPaths": ["/proc/kcore"])" + get("+linux", "") + "}" + get("+top", "") + "}";
}

TEST(OciSpec, CarriesWhatTheSentryRuns) {
  auto s = ParseConfig(Config(), "/b");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rootfs, "/b/rootfs");
  EXPECT_TRUE(s->read_only_root);
  EXPECT_THAT(s->args, ElementsAre("sh", "-c", "true"));
  EXPECT_THAT(s->env, ElementsAre("PATH=/bin", "TERM=xterm"));
  EXPECT_EQ(s->cwd, "/tmp");
  EXPECT_EQ(s->uid, 1000u);
  EXPECT_EQ(s->gid, 100u);
  EXPECT_THAT(s->groups, ElementsAre(5u, 6u));
  EXPECT_EQ(s->hostname, "box");
  EXPECT_THAT(s->mount_flags,
              ElementsAre("--volume=/srv/data:/data:ro",
                          "--tmpfs=/scratch:size=65536k,mode=1777"));
  EXPECT_EQ(s->memory_bytes, 268435456u);
  EXPECT_EQ(s->cpus, 2u);
  EXPECT_EQ(s->pids, 64u);
  EXPECT_EQ(s->network, LaunchSpec::Network::kOwn);
  ASSERT_EQ(s->rlimits.size(), 1u);
  EXPECT_EQ(s->rlimits[0].second.rlim_cur, 512u);
  EXPECT_EQ(s->annotations.at("a"), "b");
}

TEST(OciSpec, ErrorsNameTheField) {
  struct Case {
    std::string json, field;
  } cases[] = {
      {Config({{"rlimits", R"([{"type": "RLIMIT_CPU", "hard": 1, "soft": 1}])"}}),
       "process.rlimits[0].type"},
      {Config({{"+linux", R"(, "sysctl": {"net.ipv4.ip_forward": "1"})"}}),
       "linux.sysctl.net.ipv4.ip_forward"},
      {Config({{"namespaces", R"([{"type": "pid", "path": "/proc/1/ns/pid"}])"}}),
       "linux.namespaces[0].path"},
      {Config({{"namespaces", R"([{"type": "network"}])"}}), "linux.namespaces"},
      {Config({{"+top", R"(, "hooks": {"prestart": [{"path": "/bin/true"}]})"}}),
       "hooks.prestart"},
      {Config({{"mounts", R"([{"destination": "/x", "type": "nfs"}])"}}),
       "mounts[0].type"},
      {Config({{"user", R"({"uid": -1})"}}), "process.user.uid"},
      {Config({{"+top", R"(, "solaris": {"x": 1})"}}), "solaris"},
  };
  for (const Case& c : cases) {
    auto s = ParseConfig(c.json, "/b");
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.field + ":"));
  }
}

TEST(OciSpec, NetworkNamespace) {
  auto host = ParseConfig(Config({{"namespaces", R"([{"type": "pid"}])"}}), "/b");
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(host->network, LaunchSpec::Network::kHost);
  auto join = ParseConfig(
      Config({{"namespaces",
               R"([{"type": "pid"}, {"type": "network", "path": "/run/netns/x"}])"}}),
      "/b");
  ASSERT_TRUE(join.ok()) << join.status();
  EXPECT_EQ(join->network, LaunchSpec::Network::kJoin);
  EXPECT_EQ(join->netns_path, "/run/netns/x");
}

TEST(OciSpec, PodNamespacesAndNotes) {
  // A CRI container of a pod: uts and network by path, ipc by path noted.
  auto s = ParseConfig(
      Config({{"namespaces",
               R"([{"type": "pid"}, {"type": "ipc", "path": "/proc/9/ns/ipc"},
                   {"type": "uts", "path": "/proc/9/ns/uts"},
                   {"type": "network", "path": "/proc/9/ns/net"}])"},
              {"+top", R"(, "solaris": null)"}}) ,
      "/b");
  ASSERT_FALSE(s.ok());  // no CRI annotation: the ipc path is refused
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("linux.namespaces[1].path:"));
  std::string cri = Config({{"namespaces",
                             R"([{"type": "pid"}, {"type": "ipc", "path": "/proc/9/ns/ipc"},
                                 {"type": "uts", "path": "/proc/9/ns/uts"}])"}});
  const std::string from = R"("annotations": {"a": "b"})";
  cri.replace(cri.find(from), from.size(),
              R"("annotations": {"a": "b", "io.kubernetes.cri.container-type": "container"})");
  s = ParseConfig(cri, "/b");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->utsns_path, "/proc/9/ns/uts");
  ASSERT_EQ(s->notes.size(), 1u);
  EXPECT_THAT(s->notes[0], HasSubstr("linux.namespaces[1].path"));
  auto shares = ParseConfig(
      Config({{"+linux", R"(, "sysctl": {"net.ipv4.ping_group_range": "0 0"})"}}), "/b");
  ASSERT_TRUE(shares.ok()) << shares.status();
}

TEST(OciSpec, Process) {
  auto p = ParseProcess(R"({"args": ["ls"], "cwd": "/", "env": ["A=1"], "terminal": true})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->terminal);
  EXPECT_THAT(p->args, ElementsAre("ls"));
  EXPECT_FALSE(ParseProcess(R"({"args": [], "cwd": "/"})").ok());
}

}  // namespace
}  // namespace sandboxd::oci
