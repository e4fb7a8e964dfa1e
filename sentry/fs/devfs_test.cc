#include "sentry/fs/devfs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sentry/fs/vfs.h"

namespace sandboxd::fs {
namespace {

using ::testing::ElementsAre;

constexpr uint64_t kDev = 0x123;

class DevFsTest : public ::testing::Test {
 protected:
  std::shared_ptr<Inode> Get(DevFs& fs, const std::string& name) {
    std::shared_ptr<Inode> out;
    EXPECT_EQ(fs.Root()->Lookup(name, &out), 0) << name;
    return out;
  }
  std::shared_ptr<Inode> Get(const std::string& name) { return Get(fs_, name); }

  std::shared_ptr<File> Open(const std::string& name, int flags) {
    std::shared_ptr<File> f;
    EXPECT_EQ(Get(name)->Open(flags, &f), 0) << name;
    return f;
  }

  static DevFsOptions Options() {
    DevFsOptions o;
    o.dev = kDev;
    return o;
  }

  DevFs fs_{Options()};
  IoContext io_;
};

TEST_F(DevFsTest, RootListsTheFixedNames) {
  std::vector<DirEntry> entries;
  ASSERT_EQ(fs_.Root()->ReadDir(&entries), 0);
  std::vector<std::string> names;
  for (const DirEntry& e : entries) names.push_back(e.name);
  EXPECT_THAT(names, ElementsAre("fd", "full", "null", "pts", "random", "shm",
                                 "stderr", "stdin", "stdout", "tty", "urandom",
                                 "zero"));
  Attr a;
  ASSERT_EQ(fs_.Root()->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFDIR | 0755u);
  EXPECT_EQ(a.nlink, 4u);  // ".", "..", pts/.., shm/..
  EXPECT_EQ(a.dev, kDev);
  std::shared_ptr<Inode> none;
  EXPECT_EQ(fs_.Root()->Lookup("ptmx", &none), -ENOENT);
}

TEST_F(DevFsTest, DevicesStatAsCharDevicesWithLinuxNumbers) {
  struct Want {
    const char* name;
    unsigned major, minor;
  };
  for (const Want& w : {Want{"null", 1, 3}, Want{"zero", 1, 5},
                        Want{"full", 1, 7}, Want{"random", 1, 8},
                        Want{"urandom", 1, 9}, Want{"tty", 5, 0}}) {
    SCOPED_TRACE(w.name);
    std::shared_ptr<Inode> i = Get(w.name);
    EXPECT_EQ(i->Type(), static_cast<uint32_t>(S_IFCHR));
    Attr a;
    ASSERT_EQ(i->GetAttr(&a), 0);
    EXPECT_EQ(a.mode, S_IFCHR | 0666u);
    EXPECT_EQ(a.rdev, makedev(w.major, w.minor));
    EXPECT_EQ(a.dev, kDev);
    EXPECT_NE(a.ino, 0u);
  }
}

TEST_F(DevFsTest, Null) {
  auto f = Open("null", O_RDWR);
  char buf[16];
  EXPECT_EQ(f->Read(buf, sizeof(buf), -1, io_), 0);
  EXPECT_EQ(f->Write("hello", 5, -1, io_), 5);
  EXPECT_EQ(f->Write("hello", 5, 1000, io_), 5);
  EXPECT_EQ(f->Seek(100, SEEK_SET), 0);
  struct stat st;
  ASSERT_EQ(f->Stat(&st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
  EXPECT_EQ(f->Readiness(POLLIN | POLLOUT), POLLIN | POLLOUT);
  EXPECT_EQ(f->inode(), Get("null"));
}

TEST_F(DevFsTest, ZeroAndFull) {
  char buf[4096];
  auto zero = Open("zero", O_RDWR);
  std::memset(buf, 0xff, sizeof(buf));
  ASSERT_EQ(zero->Read(buf, sizeof(buf), -1, io_), 4096);
  EXPECT_EQ(std::count(buf, buf + sizeof(buf), 0), 4096);
  EXPECT_EQ(zero->Write(buf, 10, -1, io_), 10);

  auto full = Open("full", O_RDWR);
  std::memset(buf, 0xff, sizeof(buf));
  ASSERT_EQ(full->Read(buf, 100, 12345, io_), 100);
  EXPECT_EQ(std::count(buf, buf + 100, 0), 100);
  EXPECT_EQ(full->Write(buf, 1, -1, io_), -ENOSPC);
}

TEST_F(DevFsTest, RandomReadsDiffer) {
  for (const char* name : {"random", "urandom"}) {
    auto f = Open(name, O_RDONLY);
    unsigned char a[32], b[32];
    ASSERT_EQ(f->Read(a, sizeof(a), -1, io_), 32);
    ASSERT_EQ(f->Read(b, sizeof(b), -1, io_), 32);
    EXPECT_NE(std::memcmp(a, b, sizeof(a)), 0) << name;
    // Writes are accepted (Linux mixes them in; nothing observable).
    auto w = Open(name, O_WRONLY);
    EXPECT_EQ(w->Write(a, sizeof(a), -1, io_), 32);
  }
}

TEST_F(DevFsTest, AccessModeIsEnforced) {
  char c;
  EXPECT_EQ(Open("zero", O_WRONLY)->Read(&c, 1, -1, io_), -EBADF);
  EXPECT_EQ(Open("null", O_RDONLY)->Write(&c, 1, -1, io_), -EBADF);
  // O_PATH opens a descriptor that does no I/O.
  auto path = Open("zero", O_PATH);
  EXPECT_EQ(path->Read(&c, 1, -1, io_), -EBADF);
}

TEST_F(DevFsTest, TtyWithoutTerminalIsENXIO) {
  std::shared_ptr<File> f;
  EXPECT_EQ(Get("tty")->Open(O_RDWR, &f), -ENXIO);
  EXPECT_EQ(Get("tty")->Open(O_PATH, &f), 0);
}

TEST_F(DevFsTest, TtyOpensWhatTheOpenerGives) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  UniqueFd keep_write(p[1]);
  int opens = 0;
  DevFsOptions o = Options();
  o.open_tty = [&](std::shared_ptr<File>* out) -> int64_t {
    opens++;
    int d = dup(p[0]);
    if (d < 0) return -errno;
    *out = std::make_shared<HostFile>(UniqueFd(d));
    return 0;
  };
  DevFs fs(o);
  std::shared_ptr<File> f;
  ASSERT_EQ(Get(fs, "tty")->Open(O_RDWR | O_NONBLOCK, &f), 0);
  EXPECT_EQ(opens, 1);
  EXPECT_NE(f->StatusFlags() & O_NONBLOCK, 0);
  char c;
  EXPECT_EQ(f->Read(&c, 1, -1, io_), -EAGAIN);
  close(p[0]);

  o.open_tty = [](std::shared_ptr<File>*) -> int64_t { return -EIO; };
  DevFs failing(o);
  EXPECT_EQ(Get(failing, "tty")->Open(O_RDWR, &f), -EIO);
}

TEST_F(DevFsTest, ConsolePtmxAndPtsWhenGiven) {
  DevFsOptions o = Options();
  int ptmx_opens = 0;
  o.open_ptmx = [&](std::shared_ptr<Inode> node, int flags,
                    std::shared_ptr<File>* out) -> int64_t {
    ptmx_opens++;
    *out = std::make_shared<InodeFile>(std::move(node), flags);
    return 0;
  };
  o.open_console = [](std::shared_ptr<File>*) -> int64_t { return -EIO; };
  auto pts = DevFs(Options()).Root();  // any directory will do
  o.pts = pts;
  DevFs fs(o);
  Attr a;
  ASSERT_EQ(Get(fs, "ptmx")->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFCHR | 0666u);
  EXPECT_EQ(a.rdev, kDevPtmx);
  ASSERT_EQ(Get(fs, "console")->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFCHR | 0600u);
  EXPECT_EQ(a.rdev, kDevConsole);
  std::shared_ptr<File> f;
  EXPECT_EQ(Get(fs, "ptmx")->Open(O_RDWR, &f), 0);
  EXPECT_EQ(ptmx_opens, 1);
  EXPECT_EQ(Get(fs, "console")->Open(O_RDWR, &f), -EIO);
  EXPECT_EQ(Get(fs, "pts"), pts);
}

TEST_F(DevFsTest, Symlinks) {
  struct Want {
    const char* name;
    const char* target;
  };
  for (const Want& w : {Want{"fd", "/proc/self/fd"},
                        Want{"stdin", "/proc/self/fd/0"},
                        Want{"stdout", "/proc/self/fd/1"},
                        Want{"stderr", "/proc/self/fd/2"}}) {
    std::shared_ptr<Inode> i = Get(w.name);
    EXPECT_EQ(i->Type(), static_cast<uint32_t>(S_IFLNK));
    std::string target;
    ASSERT_EQ(i->Readlink(&target), 0);
    EXPECT_EQ(target, w.target);
    Attr a;
    ASSERT_EQ(i->GetAttr(&a), 0);
    EXPECT_EQ(a.size, std::strlen(w.target));
  }
}

TEST_F(DevFsTest, PtsAndShmAreEmptyDirectories) {
  for (const char* name : {"pts", "shm"}) {
    std::shared_ptr<Inode> d = Get(name);
    EXPECT_EQ(d->Type(), static_cast<uint32_t>(S_IFDIR));
    std::vector<DirEntry> entries;
    ASSERT_EQ(d->ReadDir(&entries), 0);
    EXPECT_TRUE(entries.empty());
  }
  Attr a;
  ASSERT_EQ(Get("shm")->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFDIR | 01777u);
}

TEST_F(DevFsTest, NamesAreFixed) {
  CreateRequest req;
  std::shared_ptr<Inode> out;
  EXPECT_EQ(fs_.Root()->Create("new", req, &out), -EPERM);
  EXPECT_EQ(fs_.Root()->Create("null", req, &out), -EEXIST);
  EXPECT_EQ(fs_.Root()->Unlink("null", false), -EPERM);
  EXPECT_EQ(fs_.Root()->Unlink("nothing", false), -ENOENT);
  EXPECT_EQ(fs_.Root()->Link("null2", Get("null")), -EPERM);
  EXPECT_EQ(fs_.Root()->Rename("null", *fs_.Root(), "null2", 0), -EPERM);
}

TEST_F(DevFsTest, ChmodIsKept) {
  SetAttrRequest req;
  req.set_mode = true;
  req.mode = 0600;
  ASSERT_EQ(Get("null")->SetAttr(req), 0);
  Attr a;
  ASSERT_EQ(Get("null")->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFCHR | 0600u);
  SetAttrRequest trunc;
  trunc.set_size = true;
  EXPECT_EQ(Get("null")->SetAttr(trunc), -EINVAL);
}

TEST_F(DevFsTest, ResolvesThroughTheVfs) {
  Vfs vfs(fs_.Root(), "devtmpfs", "devtmpfs", false);
  FsContext ctx(vfs.Root(), vfs.Root());
  Location loc;
  ASSERT_EQ(vfs.Resolve(ctx, vfs.Root(), "/zero", true, &loc), 0);
  EXPECT_EQ(loc.dentry->inode(), Get("zero"));
  ASSERT_EQ(vfs.Resolve(ctx, vfs.Root(), "/shm/", true, &loc), 0);
  // /dev/fd leads to procfs, which this tree does not have.
  EXPECT_EQ(vfs.Resolve(ctx, vfs.Root(), "/fd/0", true, &loc), -ENOENT);
}

}  // namespace
}  // namespace sandboxd::fs
