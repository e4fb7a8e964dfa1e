#include "daemon/spec_policy.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sandboxd {
namespace daemon {
namespace {

void ExpectInvalid(const absl::Status& s, const std::string& field,
                   const std::string& range) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), field)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), range)) << s;
}

TEST(SpecPolicyTest, HostRangesAreThisHosts) {
  HostRanges r = HostRanges::Read();
  EXPECT_GE(r.max_memory_bytes, uint64_t{64} << 20);
  EXPECT_EQ(r.max_cpu_millis % 1000, 0u);
  EXPECT_GE(r.max_cpu_millis, 1000u);
  EXPECT_GE(r.max_pids, 300u);
  EXPECT_EQ(r.min_cpu_millis, 10u);
}

TEST(SpecPolicyTest, LimitsOutOfRange) {
  HostRanges r;
  r.max_memory_bytes = uint64_t{8} << 30;
  r.max_cpu_millis = 2000;
  r.max_pids = 4194304;
  v1::Limits l;
  EXPECT_TRUE(ValidateLimits(l, r, "spec.limits").ok()) << "0 is no limit";
  l.set_memory_bytes(4096);  // --memory=4k
  ExpectInvalid(ValidateLimits(l, r, "spec.limits"), "spec.limits.memory_bytes",
                "from 16 MiB to 8192 MiB");
  l.set_memory_bytes(uint64_t{1} << 40);
  ExpectInvalid(ValidateLimits(l, r, "spec.limits"), "spec.limits.memory_bytes",
                "got 1099511627776");
  l.set_memory_bytes(uint64_t{256} << 20);
  EXPECT_TRUE(ValidateLimits(l, r, "spec.limits").ok());
  l.set_cpu_millis(100000000);  // --cpus=100000
  ExpectInvalid(ValidateLimits(l, r, "spec.limits"), "spec.limits.cpu_millis",
                "to 2000 (2 online CPUs)");
  l.set_cpu_millis(5);
  ExpectInvalid(ValidateLimits(l, r, "spec.limits"), "spec.limits.cpu_millis",
                "from 10");
  l.set_cpu_millis(500);
  l.set_pids(uint64_t{1} << 40);
  ExpectInvalid(ValidateLimits(l, r, "spec.limits"), "spec.limits.pids",
                "to 4194304");
  l.set_pids(50);
  EXPECT_TRUE(ValidateLimits(l, r, "spec.limits").ok());
}

TEST(SpecPolicyTest, Labels) {
  v1::SandboxSpec spec;
  for (int i = 0; i < 64; ++i)
    (*spec.mutable_labels())[absl::StrCat("k", i)] = "v";
  EXPECT_TRUE(ValidateLabels(spec).ok());
  for (int i = 64; i < 10000; ++i) {
    (*spec.mutable_labels())[absl::StrCat("k", i)] = "v";
  }
  ExpectInvalid(ValidateLabels(spec), "spec.labels",
                "at most 64 labels, got 10000");
  spec.clear_labels();
  (*spec.mutable_labels())[std::string(129, 'k')] = "v";
  ExpectInvalid(ValidateLabels(spec), "spec.labels",
                "1 to 128 bytes, got one of 129");
  spec.clear_labels();
  (*spec.mutable_labels())["k"] = std::string(1025, 'v');
  ExpectInvalid(ValidateLabels(spec), "spec.labels[k]", "at most 1024 bytes");
  spec.clear_labels();
  (*spec.mutable_labels())["a=b"] = "v";
  ExpectInvalid(ValidateLabels(spec), "spec.labels", "without spaces or '='");
  spec.clear_labels();
  (*spec.mutable_labels())[""] = "v";
  ExpectInvalid(ValidateLabels(spec), "spec.labels", "1 to 128 bytes");
}

TEST(SpecPolicyTest, DefaultLimitsFillOnlyWhatIsUnset) {
  SpecPolicy p;
  p.default_memory_bytes = 512 << 20;
  p.default_cpu_millis = 1000;
  p.default_pids = 100;
  v1::Limits l;
  l.set_pids(7);
  ApplyDefaultLimits(p, &l);
  EXPECT_EQ(l.memory_bytes(), 512u << 20);
  EXPECT_EQ(l.cpu_millis(), 1000u);
  EXPECT_EQ(l.pids(), 7u);
}

class RootfsTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sbx-spec-policy-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(mkdir((dir_ + "/image").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir_ + "/allowed").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir_ + "/allowed/sub").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((dir_ + "/other").c_str(), 0755), 0);
    ASSERT_EQ(
        symlink((dir_ + "/other").c_str(), (dir_ + "/allowed/link").c_str()),
        0);
    p_.default_rootfs = dir_ + "/image";
  }
  void TearDown() override {
    ASSERT_EQ(system(absl::StrCat("rm -rf ", dir_).c_str()), 0);
  }
  absl::Status Open(const std::string& rootfs,
                    std::string* resolved = nullptr) {
    v1::SandboxSpec spec;
    spec.set_rootfs(rootfs);
    absl::StatusOr<UniqueFd> fd = OpenRootfs(p_, &spec);
    if (resolved != nullptr) *resolved = spec.rootfs();
    return fd.status();
  }
  std::string dir_;
  SpecPolicy p_;
};

TEST_F(RootfsTest, EmptyIsTheDefaultImageNeverTheHostRoot) {
  std::string resolved;
  ASSERT_TRUE(Open("", &resolved).ok());
  EXPECT_EQ(resolved, dir_ + "/image");
  p_.default_rootfs = dir_ + "/missing";
  absl::Status s = Open("");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "build_rootfs.sh")) << s;
  p_.default_rootfs = "";
  EXPECT_EQ(Open("").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RootfsTest, AnyHostDirectoryWithoutAllowedRoots) {
  EXPECT_TRUE(Open("/").ok());
  EXPECT_TRUE(Open(dir_ + "/other").ok());
  EXPECT_EQ(Open("relative").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Open(dir_ + "/nonexistent").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RootfsTest, AllowedRootsRestrict) {
  p_.allowed_roots = {dir_ + "/allowed"};
  EXPECT_TRUE(Open(dir_ + "/allowed").ok());
  EXPECT_TRUE(Open(dir_ + "/allowed/sub").ok());
  EXPECT_TRUE(Open(dir_ + "/image").ok()) << "the default image";
  absl::Status s = Open("/");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--allowed-roots")) << s;
  EXPECT_EQ(Open(dir_ + "/other").code(), absl::StatusCode::kPermissionDenied);
  // What was opened counts, not the string.
  EXPECT_EQ(Open(dir_ + "/allowed/link").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Open(dir_ + "/allowed/../other").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Open(dir_ + "/allowedx").code(),
            absl::StatusCode::kInvalidArgument);
}

// What an init needs of the rootfs, judged inside it: an absolute symlink
// is the rootfs's, not the host's.
TEST_F(RootfsTest, ProcessInRootfs) {
  const std::string root = dir_ + "/image";
  ASSERT_EQ(mkdir((root + "/bin").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((root + "/etc").c_str(), 0755), 0);
  ASSERT_EQ(system(absl::StrCat("printf '#!/bin/sh\\n' >", root, "/bin/sbxprog && chmod 755 ",
                                root, "/bin/sbxprog && touch ", root, "/etc/file")
                       .c_str()),
            0);
  ASSERT_EQ(symlink("/bin", (root + "/lnk").c_str()), 0);
  UniqueFd fd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  auto check = [&](const std::string& cwd, const std::string& prog,
                   const std::string& path_env = "") {
    v1::ProcessSpec p;
    p.set_cwd(cwd);
    p.add_argv(prog);
    if (!path_env.empty()) p.add_env(path_env);
    return CheckProcessInRootfs(fd.get(), p, "spec.process");
  };
  EXPECT_TRUE(check("/", "/bin/sbxprog").ok());
  EXPECT_TRUE(check("", "sbxprog").ok()) << "the default PATH has /bin";
  EXPECT_TRUE(check("/bin", "./sbxprog").ok());
  EXPECT_TRUE(check("/", "/lnk/sbxprog").ok()) << "/lnk is the rootfs's /bin";
  EXPECT_TRUE(check("/", "/proc/self/exe").ok()) << "the Sentry's /proc is not judged";

  absl::Status s = check("/nope", "/bin/sbxprog");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "spec.process.cwd: \"/nope\" does not exist")) << s;
  s = check("/etc/file", "/bin/sbxprog");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "is not a directory")) << s;
  s = check("/", "sbxprog", "PATH=/usr/bin");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "spec.process.argv[0]")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "searched PATH=/usr/bin")) << s;
  s = check("/", "/etc/file");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "not an executable file")) << s;
  // The host's /bin/sh is not the rootfs's.
  EXPECT_EQ(check("/", "/bin/sh").code(), absl::StatusCode::kNotFound);
}

v1::Mount Bind(const std::string& source, const std::string& target,
               bool read_only = false) {
  v1::Mount m;
  m.set_type(v1::Mount::TYPE_BIND);
  m.set_source(source);
  m.set_target(target);
  m.set_read_only(read_only);
  return m;
}

TEST_F(RootfsTest, BindMountsOpenTheirSources) {
  ASSERT_EQ(system(absl::StrCat("echo x > ", dir_, "/other/file").c_str()), 0);
  v1::SandboxSpec spec;
  *spec.add_mounts() = Bind(dir_ + "/other", "/data");
  *spec.add_mounts() = Bind(dir_ + "/other/file", "/etc/file");
  *spec.add_mounts() = Bind(dir_ + "/other/file", "/etc/ro", true);
  v1::Mount* t = spec.add_mounts();
  t->set_type(v1::Mount::TYPE_TMPFS);
  t->set_target("/scratch");
  t->set_options("size=64k");
  absl::StatusOr<std::vector<UniqueFd>> fds = OpenBindMounts(p_, spec);
  ASSERT_TRUE(fds.ok()) << fds.status();
  ASSERT_EQ(fds->size(), 3u) << "one per bind mount, none for the tmpfs";
  // A directory O_PATH; a file open for its I/O, O_RDWR unless read-only.
  EXPECT_NE(fcntl((*fds)[0].get(), F_GETFL) & O_PATH, 0);
  EXPECT_EQ(fcntl((*fds)[1].get(), F_GETFL) & (O_ACCMODE | O_PATH), O_RDWR);
  EXPECT_EQ(fcntl((*fds)[2].get(), F_GETFL) & (O_ACCMODE | O_PATH), O_RDONLY);
}

TEST_F(RootfsTest, BadBindMountsNameTheField) {
  auto status = [&](v1::Mount m, bool second = false) {
    v1::SandboxSpec spec;
    if (second) *spec.add_mounts() = Bind(dir_ + "/other", "/ok");
    *spec.add_mounts() = std::move(m);
    return OpenBindMounts(p_, spec).status();
  };
  ExpectInvalid(status(Bind(dir_ + "/other", "/")), "spec.mounts[0].target", "/");
  ExpectInvalid(status(Bind(dir_ + "/other", "rel")), "spec.mounts[0].target", "rel");
  ExpectInvalid(status(Bind("relative", "/x"), true), "spec.mounts[1].source",
                "absolute");
  ExpectInvalid(status(Bind(dir_ + "/missing", "/x"), true),
                "spec.mounts[1].source", "No such file");
  // A symlink as the last name is followed (as docker does): to a
  // directory, as that directory; to a device, refused.
  EXPECT_TRUE(status(Bind(dir_ + "/allowed/link", "/x")).ok());
  ASSERT_EQ(symlink("/dev/null", (dir_ + "/allowed/null").c_str()), 0);
  ExpectInvalid(status(Bind(dir_ + "/allowed/null", "/x")),
                "spec.mounts[0].source", "neither a directory nor a regular file");
  v1::Mount m = Bind(dir_ + "/other", "/x");
  m.set_options("size=1m");
  ExpectInvalid(status(m), "spec.mounts[0].options", "TMPFS");
  m = Bind(dir_ + "/other", "/x");
  m.set_type(v1::Mount::TYPE_UNSPECIFIED);
  ExpectInvalid(status(m), "spec.mounts[0].type", "TYPE_BIND");
  m.set_type(v1::Mount::TYPE_TMPFS);
  ExpectInvalid(status(m), "spec.mounts[0].source", "tmpfs");
}

TEST_F(RootfsTest, AllowedRootsRestrictBindSources) {
  p_.allowed_roots = {dir_ + "/allowed"};
  v1::SandboxSpec spec;
  *spec.add_mounts() = Bind(dir_ + "/allowed/sub", "/data");
  EXPECT_TRUE(OpenBindMounts(p_, spec).ok());
  // allowed/link is a symlink to other: where it leads is what counts.
  for (const std::string& src :
       {dir_ + "/other", dir_ + "/allowed/../other", std::string("/etc"),
        dir_ + "/allowed/link"}) {
    SCOPED_TRACE(src);
    spec.mutable_mounts(0)->set_source(src);
    absl::Status s = OpenBindMounts(p_, spec).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "spec.mounts[0].source")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "--allowed-roots")) << s;
  }
}

TEST(SpecPolicyTest, NetworkNamespace) {
  v1::SandboxSpec spec;
  absl::StatusOr<UniqueFd> fd = OpenNetworkNamespace(spec);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_FALSE(fd->valid());  // none named
  spec.set_network_namespace("/proc/self/ns/net");
  fd = OpenNetworkNamespace(spec);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(fd->valid());
  auto refused = [&spec](const std::string& path, v1::NetworkMode mode,
                         const std::string& why) {
    v1::SandboxSpec s = spec;
    s.set_network_namespace(path);
    s.set_network(mode);
    absl::StatusOr<UniqueFd> r = OpenNetworkNamespace(s);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << path << ": " << r.status();
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "spec.network_namespace: ")) << r.status();
    EXPECT_TRUE(absl::StrContains(r.status().message(), why)) << r.status();
  };
  refused("proc/self/ns/net", v1::NETWORK_MODE_NONE, "an absolute path");
  refused("/proc/self/ns/pid", v1::NETWORK_MODE_NONE, "not a network namespace");
  refused("/proc/self/status", v1::NETWORK_MODE_NONE, "not a namespace file");
  refused("/no/such/ns", v1::NETWORK_MODE_NONE, "No such file");
  refused("/proc/self/ns/net", v1::NETWORK_MODE_HOST, "not with network host");
  refused("/proc/self/ns/net", v1::NETWORK_MODE_SANDBOX, "not with network sandbox");
}

TEST(SpecPolicyTest, ParseByteSize) {
  EXPECT_EQ(*ParseByteSize("4k"), 4096u);
  EXPECT_EQ(*ParseByteSize("256m"), 256u << 20);
  EXPECT_EQ(*ParseByteSize("2G"), uint64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("12345"), 12345u);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("m").ok());
  EXPECT_FALSE(ParseByteSize("99999999999999999999").ok());
  EXPECT_FALSE(ParseByteSize("100000000000t").ok());
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
