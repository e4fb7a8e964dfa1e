// The command-line spellings of SandboxSpec.mounts (docker's -v, --mount,
// --tmpfs) and OpenBindSource.
#include "proto/mount_spec.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace sandboxd {
namespace {

TEST(MountSpecTest, Volume) {
  auto m = ParseVolumeFlag("/srv/data:/data");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->type(), v1::Mount::TYPE_BIND);
  EXPECT_EQ(m->source(), "/srv/data");
  EXPECT_EQ(m->target(), "/data");
  EXPECT_FALSE(m->read_only()) << "writable by default, as docker's -v";
  EXPECT_TRUE(ParseVolumeFlag("/srv/data:/data:ro")->read_only());
  EXPECT_FALSE(ParseVolumeFlag("/srv/data:/data:rw")->read_only());
  for (const char* bad : {"/srv/data", "/srv:/data:rx", "relative:/data",
                          "/srv:data", "/srv:/", ":/data", "/a:/b:ro:x"}) {
    SCOPED_TRACE(bad);
    auto r = ParseVolumeFlag(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(MountSpecTest, Mount) {
  auto m = ParseMountFlag("type=bind,source=/srv,target=/data,readonly");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->type(), v1::Mount::TYPE_BIND);
  EXPECT_EQ(m->source(), "/srv");
  EXPECT_EQ(m->target(), "/data");
  EXPECT_TRUE(m->read_only());
  m = ParseMountFlag("type=bind,src=/srv,dst=/data,readonly=false");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(m->read_only());
  m = ParseMountFlag("type=tmpfs,destination=/scratch,tmpfs-size=65536,tmpfs-mode=700");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->type(), v1::Mount::TYPE_TMPFS);
  EXPECT_EQ(m->target(), "/scratch");
  EXPECT_EQ(m->options(), "size=65536,mode=700");
  for (const char* bad :
       {"source=/srv,target=/data", "type=volume,source=x,target=/data",
        "type=bind,target=/data", "type=bind,source=rel,target=/data",
        "type=tmpfs,source=/srv,target=/x", "type=bind,source=/s,target=/d,tmpfs-size=1",
        "type=bind,source=/s,target=/d,readonly=maybe",
        "type=bind,source=/s,target=/d,propagation=shared", "type=tmpfs,target=/"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(ParseMountFlag(bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(MountSpecTest, Tmpfs) {
  auto m = ParseTmpfsFlag("/scratch:size=64m,mode=1777");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->type(), v1::Mount::TYPE_TMPFS);
  EXPECT_EQ(m->target(), "/scratch");
  EXPECT_EQ(m->options(), "size=64m,mode=1777");
  m = ParseTmpfsFlag("/tmp");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->options(), "");
  EXPECT_FALSE(ParseTmpfsFlag("tmp").ok());
  EXPECT_FALSE(ParseTmpfsFlag("/").ok());
}

class OpenBindSourceTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mount_spec_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(mkdir((dir_ + "/d").c_str(), 0755), 0);
    int fd = open((dir_ + "/f").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    close(fd);
    ASSERT_EQ(symlink((dir_ + "/d").c_str(), (dir_ + "/l").c_str()), 0);
    ASSERT_EQ(symlink((dir_ + "/f").c_str(), (dir_ + "/lf").c_str()), 0);
    ASSERT_EQ(symlink((dir_ + "/p").c_str(), (dir_ + "/lp").c_str()), 0);
    ASSERT_EQ(mkfifo((dir_ + "/p").c_str(), 0644), 0);
  }
  void TearDown() override {
    ASSERT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
  }
  absl::StatusOr<UniqueFd> Open(const std::string& rel, bool ro) {
    v1::Mount m;
    m.set_type(v1::Mount::TYPE_BIND);
    m.set_source(rel.empty() ? "" : dir_ + "/" + rel);
    m.set_read_only(ro);
    return OpenBindSource(m, "spec.mounts[3]");
  }
  std::string dir_;
};

TEST_F(OpenBindSourceTest, DirectoryAndFile) {
  auto d = Open("d", false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_NE(fcntl(d->get(), F_GETFL) & O_PATH, 0);
  auto rw = Open("f", false);
  ASSERT_TRUE(rw.ok()) << rw.status();
  EXPECT_EQ(fcntl(rw->get(), F_GETFL) & (O_ACCMODE | O_PATH | O_NONBLOCK), O_RDWR);
  auto ro = Open("f", true);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_EQ(fcntl(ro->get(), F_GETFL) & (O_ACCMODE | O_PATH | O_NONBLOCK), O_RDONLY);
}

// A symlink as the source is followed, as docker resolves one at create:
// the directory or file it names now.
TEST_F(OpenBindSourceTest, SymlinkSourcesAreFollowed) {
  struct stat want, got;
  auto l = Open("l", false);
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(stat((dir_ + "/d").c_str(), &want), 0);
  ASSERT_EQ(fstat(l->get(), &got), 0);
  EXPECT_EQ(got.st_ino, want.st_ino);
  auto lf = Open("lf", false);
  ASSERT_TRUE(lf.ok()) << lf.status();
  EXPECT_EQ(fcntl(lf->get(), F_GETFL) & (O_ACCMODE | O_PATH), O_RDWR);
  ASSERT_EQ(stat((dir_ + "/f").c_str(), &want), 0);
  ASSERT_EQ(fstat(lf->get(), &got), 0);
  EXPECT_EQ(got.st_ino, want.st_ino);
}

TEST_F(OpenBindSourceTest, RefusedSourcesNameTheField) {
  // A symlink to a fifo is refused as the fifo is.
  for (const char* rel : {"lp", "p", "missing", ""}) {
    SCOPED_TRACE(rel);
    auto r = Open(rel, false);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(r.status().message(), "spec.mounts[3].source"))
        << r.status();
  }
}

TEST(MountSpecTest, Publish) {
  auto p = ParsePublishFlag("8080:80");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->host_ip(), "");
  EXPECT_EQ(p->host_port(), 8080u);
  EXPECT_EQ(p->container_port(), 80u);
  EXPECT_EQ(p->protocol(), v1::PortMapping::PROTOCOL_TCP);
  EXPECT_EQ(PortMappingString(*p), "127.0.0.1:8080:80/tcp");
  p = ParsePublishFlag("0.0.0.0:53:5353/udp");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->host_ip(), "0.0.0.0");
  EXPECT_EQ(p->protocol(), v1::PortMapping::PROTOCOL_UDP);
  EXPECT_EQ(PortMappingString(*p), "0.0.0.0:53:5353/udp");
  p = ParsePublishFlag("[::1]:8443:443/tcp");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->host_ip(), "::1");
  EXPECT_EQ(PortMappingString(*p), "[::1]:8443:443/tcp");
  for (const char* bad : {"80", "0:80", "80:0", "65536:80", "a:80", "80:80/sctp",
                          "1.2.3:80:80", "::1:80:80", "[::1]80:80", "1:2:3:4"}) {
    SCOPED_TRACE(bad);
    auto r = ParsePublishFlag(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(r.status().message(), "-p wants")) << r.status();
  }
}

}  // namespace
}  // namespace sandboxd
