#include "sentry/fs/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sentry/fs/rootfs.h"

namespace sandboxd::fs {
namespace {

// A File that only has an identity: FdTable never calls into its files.
class NullFile : public File {
 public:
  int64_t Read(void*, uint64_t, int64_t, const IoContext&) override {
    return -EINVAL;
  }
  int64_t Write(const void*, uint64_t, int64_t, const IoContext&) override {
    return -EINVAL;
  }
  int64_t Seek(int64_t, int) override { return -ESPIPE; }
  int64_t Stat(struct stat*) override { return -EINVAL; }
  int64_t Ioctl(uint64_t, void*) override { return -ENOTTY; }
  int StatusFlags() const override { return O_RDWR; }
  int64_t SetStatusFlags(int) override { return 0; }
};

std::shared_ptr<File> NewFile() { return std::make_shared<NullFile>(); }

// --- FdTable ----------------------------------------------------------------

TEST(FdTableTest, InstallTakesLowestFreeDescriptor) {
  FdTable t(16);
  auto a = NewFile(), b = NewFile(), c = NewFile();
  EXPECT_EQ(t.Install(a, false), 0);
  EXPECT_EQ(t.Install(b, false), 1);
  EXPECT_EQ(t.Install(c, false), 2);
  EXPECT_EQ(t.Get(0), a);
  EXPECT_EQ(t.Get(1), b);
  EXPECT_EQ(t.Get(2), c);
  ASSERT_EQ(t.Close(1), 0);
  EXPECT_EQ(t.Get(1), nullptr);
  auto d = NewFile();
  EXPECT_EQ(t.Install(d, false), 1);  // the hole, not 3
  EXPECT_EQ(t.Get(1), d);
  EXPECT_EQ(t.Install(NewFile(), false), 3);
}

TEST(FdTableTest, InstallHonoursMinFd) {
  FdTable t(16);
  EXPECT_EQ(t.Install(NewFile(), false, 5), 5);
  EXPECT_EQ(t.Install(NewFile(), false, 5), 6);
  EXPECT_EQ(t.Install(NewFile(), false), 0);  // below min_fd is still free
  EXPECT_EQ(t.Install(NewFile(), false, -1), -EINVAL);
  // F_DUPFD with arg >= RLIMIT_NOFILE is EINVAL on Linux.
  EXPECT_EQ(t.Install(NewFile(), false, 16), -EINVAL);
}

TEST(FdTableTest, InstallFailsWithEmfileAtTheLimit) {
  FdTable t(3);
  EXPECT_EQ(t.Install(NewFile(), false), 0);
  EXPECT_EQ(t.Install(NewFile(), false), 1);
  EXPECT_EQ(t.Install(NewFile(), false), 2);
  EXPECT_EQ(t.Install(NewFile(), false), -EMFILE);
  EXPECT_EQ(t.Get(3), nullptr);
  ASSERT_EQ(t.Close(0), 0);
  EXPECT_EQ(t.Install(NewFile(), false), 0);
  // Lowering the limit (setrlimit) keeps existing fds but stops new ones.
  FdTable u(8);
  for (int i = 0; i < 4; i++) ASSERT_EQ(u.Install(NewFile(), false), i);
  u.set_max_fds(4);
  EXPECT_EQ(u.Install(NewFile(), false), -EMFILE);
  EXPECT_NE(u.Get(3), nullptr);
  u.set_max_fds(5);
  EXPECT_EQ(u.Install(NewFile(), false), 4);
}

TEST(FdTableTest, InstallAtReplacesAndDropsTheOldFile) {
  FdTable t(16);
  auto a = NewFile(), b = NewFile();
  std::weak_ptr<File> weak_a = a;
  ASSERT_EQ(t.Install(std::move(a), false), 0);
  EXPECT_EQ(t.InstallAt(0, b, true), 0);
  EXPECT_EQ(t.Get(0), b);
  EXPECT_TRUE(weak_a.expired()) << "the replaced file must be released";
  EXPECT_EQ(t.GetCloexec(0), 1);
  // Beyond the current size, but within the limit.
  EXPECT_EQ(t.InstallAt(10, NewFile(), false), 10);
  EXPECT_NE(t.Get(10), nullptr);
  EXPECT_EQ(t.Get(9), nullptr);
  // The lowest free fd is still 1: InstallAt does not fill the gap.
  EXPECT_EQ(t.Install(NewFile(), false), 1);
  EXPECT_EQ(t.InstallAt(16, NewFile(), false), -EBADF);
  EXPECT_EQ(t.InstallAt(-1, NewFile(), false), -EBADF);
}

TEST(FdTableTest, CloseOfAnUnusedDescriptorIsEbadf) {
  FdTable t(16);
  EXPECT_EQ(t.Close(0), -EBADF);
  EXPECT_EQ(t.Close(-1), -EBADF);
  EXPECT_EQ(t.Close(1000), -EBADF);
  ASSERT_EQ(t.InstallAt(4, NewFile(), false), 4);
  EXPECT_EQ(t.Close(2), -EBADF);  // inside the vector, but empty
  EXPECT_EQ(t.Close(4), 0);
  EXPECT_EQ(t.Close(4), -EBADF);
  EXPECT_EQ(t.Get(4), nullptr);
}

TEST(FdTableTest, CloexecGetAndSet) {
  FdTable t(16);
  ASSERT_EQ(t.Install(NewFile(), true), 0);
  ASSERT_EQ(t.Install(NewFile(), false), 1);
  EXPECT_EQ(t.GetCloexec(0), 1);
  EXPECT_EQ(t.GetCloexec(1), 0);
  EXPECT_EQ(t.SetCloexec(1, true), 0);
  EXPECT_EQ(t.GetCloexec(1), 1);
  EXPECT_EQ(t.SetCloexec(0, false), 0);
  EXPECT_EQ(t.GetCloexec(0), 0);
  EXPECT_EQ(t.GetCloexec(2), -EBADF);
  EXPECT_EQ(t.SetCloexec(2, true), -EBADF);
  EXPECT_EQ(t.GetCloexec(-3), -EBADF);
  // A closed fd's flag does not leak into the next file installed there.
  ASSERT_EQ(t.SetCloexec(1, true), 0);
  ASSERT_EQ(t.Close(1), 0);
  EXPECT_EQ(t.GetCloexec(1), -EBADF);
  ASSERT_EQ(t.Install(NewFile(), false), 1);
  EXPECT_EQ(t.GetCloexec(1), 0);
}

// --- HostFile ---------------------------------------------------------------

struct Pipe {
  UniqueFd r, w;
};

Pipe MakePipe(int flags = 0) {
  int p[2];
  EXPECT_EQ(pipe2(p, O_CLOEXEC | flags), 0) << strerror(errno);
  return Pipe{UniqueFd(p[0]), UniqueFd(p[1])};
}

// Bazel gives each test its own scratch directory.
std::string TempDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d != nullptr && *d != '\0' ? d : "/tmp";
}

// A host temp file, removed at the end of the test.
class TempFile {
 public:
  TempFile() {
    std::string tmpl = TempDir() + "/sbx_file_test_XXXXXX";
    fd_ = UniqueFd(mkostemp(tmpl.data(), O_CLOEXEC));
    EXPECT_TRUE(fd_.valid()) << strerror(errno);
    path_ = tmpl;
  }
  ~TempFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  UniqueFd Open(int flags) const {
    return UniqueFd(open(path_.c_str(), flags | O_CLOEXEC));
  }
  UniqueFd TakeFd() { return std::move(fd_); }

 private:
  UniqueFd fd_;
  std::string path_;
};

TEST(HostFileTest, PipeReadWrite) {
  Pipe p = MakePipe();
  HostFile r(std::move(p.r)), w(std::move(p.w));
  IoContext io;
  EXPECT_EQ(w.Write("hello", 5, -1, io), 5);
  char buf[16] = {};
  EXPECT_EQ(r.Read(buf, sizeof(buf), -1, io), 5);
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_EQ(r.Seek(0, SEEK_SET), -ESPIPE);
  struct stat st;
  ASSERT_EQ(r.Stat(&st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(r.StatusFlags() & O_ACCMODE, O_RDONLY);
  EXPECT_EQ(w.StatusFlags() & O_ACCMODE, O_WRONLY);
}

TEST(HostFileTest, AccessModeIsChecked) {
  Pipe p = MakePipe();
  HostFile r(std::move(p.r)), w(std::move(p.w));
  IoContext io;
  char buf[4] = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(r.Write(buf, 4, -1, io), -EBADF);
  EXPECT_EQ(w.Read(buf, 4, -1, io), -EBADF);

  TempFile tf;
  HostFile ro(tf.Open(O_RDONLY)), wo(tf.Open(O_WRONLY));
  EXPECT_EQ(ro.Write(buf, 4, 0, io), -EBADF);
  EXPECT_EQ(wo.Read(buf, 4, 0, io), -EBADF);
  EXPECT_EQ(wo.Write(buf, 4, 0, io), 4);
  char got[4] = {};
  EXPECT_EQ(ro.Read(got, 4, 0, io), 4);
  EXPECT_EQ(std::memcmp(got, buf, 4), 0);
}

TEST(HostFileTest, RegularFileOffsetsAndStat) {
  TempFile tf;
  HostFile f(tf.TakeFd());
  IoContext io;
  EXPECT_EQ(f.StatusFlags() & O_ACCMODE, O_RDWR);
  EXPECT_EQ(f.Write("abcdef", 6, -1, io), 6);
  EXPECT_EQ(f.Seek(0, SEEK_CUR), 6);  // the file offset advanced
  EXPECT_EQ(f.Seek(1, SEEK_SET), 1);
  char buf[8] = {};
  EXPECT_EQ(f.Read(buf, 3, -1, io), 3);
  EXPECT_EQ(std::string(buf, 3), "bcd");
  // Positional I/O leaves the offset alone.
  EXPECT_EQ(f.Read(buf, 8, 4, io), 2);
  EXPECT_EQ(std::string(buf, 2), "ef");
  EXPECT_EQ(f.Write("XY", 2, 0, io), 2);
  EXPECT_EQ(f.Seek(0, SEEK_CUR), 4);
  EXPECT_EQ(f.Read(buf, 8, -1, io), 2);
  EXPECT_EQ(std::string(buf, 2), "ef");
  EXPECT_EQ(f.Read(buf, 8, -1, io), 0);  // EOF
  EXPECT_EQ(f.Seek(-2, SEEK_END), 4);
  EXPECT_EQ(f.Seek(-100, SEEK_SET), -EINVAL);

  struct stat st;
  ASSERT_EQ(f.Stat(&st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 6);
  struct stat host;
  ASSERT_EQ(stat(tf.path().c_str(), &host), 0);
  EXPECT_EQ(st.st_ino, host.st_ino);

  char whole[6];
  EXPECT_EQ(f.Read(whole, 6, 0, io), 6);
  EXPECT_EQ(std::string(whole, 6), "XYcdef");
}

TEST(HostFileTest, NonblockingReadOfAnEmptyPipeIsEagain) {
  Pipe p = MakePipe(O_NONBLOCK);
  HostFile r(std::move(p.r));
  EXPECT_NE(r.StatusFlags() & O_NONBLOCK, 0);
  char c;
  EXPECT_EQ(r.Read(&c, 1, -1, IoContext{}), -EAGAIN);
}

// Runs `f.Read` of one byte on another thread, and returns its future.
std::future<int64_t> ReadAsync(HostFile& f, const IoContext& io) {
  return std::async(std::launch::async, [&f, io] {
    char c;
    return f.Read(&c, 1, -1, io);
  });
}

// A blocked Read must come back with -EINTR once the task is interrupted
// (its eventfd becomes readable), or the Sentry cannot end a task that is
// reading its stdin. `unblock` is a write end of the pipe, used to free the
// thread if the Read does not return, so that a failure is not a hang.
void ExpectInterruptibleRead(HostFile& r, int unblock) {
  UniqueFd efd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  ASSERT_TRUE(efd.valid());
  IoContext io{efd.get()};
  std::future<int64_t> res = ReadAsync(r, io);
  // It blocks while nothing happens...
  EXPECT_EQ(res.wait_for(std::chrono::milliseconds(100)),
            std::future_status::timeout);
  // ... and returns -EINTR when the interrupt fd becomes readable.
  uint64_t one = 1;
  ASSERT_EQ(write(efd.get(), &one, sizeof(one)), 8);
  if (res.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "Read did not return after the interrupt";
    ASSERT_EQ(write(unblock, "x", 1), 1);
  }
  EXPECT_EQ(res.get(), -EINTR);
}

TEST(HostFileTest, BlockingReadIsInterruptedNonblockingHostFd) {
  // The host description is non-blocking; the sandbox sees a blocking file.
  Pipe p = MakePipe(O_NONBLOCK);
  HostFile r(std::move(p.r));
  ASSERT_EQ(r.SetStatusFlags(O_RDONLY), 0);
  EXPECT_EQ(r.StatusFlags() & O_NONBLOCK, 0);
  ExpectInterruptibleRead(r, p.w.get());
}

TEST(HostFileTest, BlockingReadIsInterruptedBlockingHostFd) {
  // The usual case: stdin inherited from a shell is a blocking pipe.
  Pipe p = MakePipe();
  HostFile r(std::move(p.r));
  ExpectInterruptibleRead(r, p.w.get());
}

TEST(HostFileTest, SandboxNonblockOverBlockingHostFdIsEagain) {
  // fcntl(F_SETFL, O_NONBLOCK) inside the sandbox on a blocking inherited
  // pipe: the read must not block the task.
  Pipe p = MakePipe();
  HostFile r(std::move(p.r));
  ASSERT_EQ(r.SetStatusFlags(O_RDONLY | O_NONBLOCK), 0);
  EXPECT_NE(r.StatusFlags() & O_NONBLOCK, 0);
  std::future<int64_t> res = ReadAsync(r, IoContext{});
  if (res.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    ADD_FAILURE() << "a read on an O_NONBLOCK file blocked";
    ASSERT_EQ(write(p.w.get(), "x", 1), 1);
  }
  EXPECT_EQ(res.get(), -EAGAIN);
}

TEST(HostFileTest, BlockedReadReturnsDataWhenItArrives) {
  Pipe p = MakePipe(O_NONBLOCK);
  HostFile r(std::move(p.r));
  ASSERT_EQ(r.SetStatusFlags(O_RDONLY), 0);
  UniqueFd efd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  std::future<int64_t> res = ReadAsync(r, IoContext{efd.get()});
  EXPECT_EQ(res.wait_for(std::chrono::milliseconds(50)),
            std::future_status::timeout);
  ASSERT_EQ(write(p.w.get(), "z", 1), 1);
  ASSERT_EQ(res.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(res.get(), 1);
}

TEST(HostFileTest, IoctlOnNonTerminals) {
  Pipe p = MakePipe();
  HostFile r(std::move(p.r));
  ASSERT_EQ(write(p.w.get(), "12345", 5), 5);
  int avail = -1;
  EXPECT_EQ(r.Ioctl(FIONREAD, &avail), 0);
  EXPECT_EQ(avail, 5);
  char tio[64];
  EXPECT_EQ(r.Ioctl(TCGETS, tio), -ENOTTY);
  pid_t pgrp;
  EXPECT_EQ(r.Ioctl(TIOCGPGRP, &pgrp), -ENOTTY);
  EXPECT_EQ(r.Ioctl(TIOCSTI, tio), -ENOTTY);  // not offered at all
}

// --- IoctlArgSize -------------------------------------------------------------

// The kernel's struct termios (asm-generic/termbits.h): four tcflag_t,
// c_line and c_cc[19]. glibc's struct termios is larger (60 bytes: c_cc[32]
// and two speeds); glibc's tcgetattr passes the kernel's 36-byte layout.
constexpr int64_t kKernelTermiosSize = 4 * 4 + 1 + 19;

TEST(IoctlArgSizeTest, KnownRequests) {
  bool in = true, out = false;
  EXPECT_EQ(IoctlArgSize(TIOCGWINSZ, &in, &out), 8);
  EXPECT_FALSE(in);
  EXPECT_TRUE(out);
  in = true, out = false;
  EXPECT_EQ(IoctlArgSize(FIONREAD, &in, &out), 4);
  EXPECT_FALSE(in);
  EXPECT_TRUE(out);
  in = true, out = false;
  EXPECT_EQ(IoctlArgSize(TIOCGPGRP, &in, &out), 4);
  EXPECT_FALSE(in);
  EXPECT_TRUE(out);
}

TEST(IoctlArgSizeTest, TcgetsUsesTheKernelTermiosSize) {
  // Copying out more than the kernel's struct writes past the buffer of a
  // glibc program (tcgetattr's struct __kernel_termios on its stack).
  bool in = true, out = false;
  EXPECT_EQ(IoctlArgSize(TCGETS, &in, &out), kKernelTermiosSize);
  EXPECT_FALSE(in);
  EXPECT_TRUE(out);
}

TEST(IoctlArgSizeTest, UnknownRequests) {
  bool in = true, out = true;
  EXPECT_EQ(IoctlArgSize(0xdeadbeef, &in, &out), -1);
  EXPECT_FALSE(in);
  EXPECT_FALSE(out);
  EXPECT_EQ(IoctlArgSize(TIOCSWINSZ, &in, &out), -1);
  EXPECT_EQ(IoctlArgSize(0, &in, &out), -1);
}

// --- OpenInRoot ---------------------------------------------------------------

class RootfsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = TempDir() + "/sbx_rootfs_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << strerror(errno);
    base_ = tmpl;
    root_ = base_ + "/root";
    outside_ = base_ + "/hostdir";
    ASSERT_EQ(mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(outside_.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((root_ + "/etc").c_str(), 0755), 0);
    WriteFile(root_ + "/file", "inside-file");
    WriteFile(root_ + "/outside", "inside-outside");
    WriteFile(outside_ + "/secret", "host-secret");
    auto root = OpenRootfs(root_);
    ASSERT_TRUE(root.ok()) << root.status();
    root_fd_ = std::move(root).value();
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + base_ + "'";
    (void)!system(cmd.c_str());
  }

  static void WriteFile(const std::string& path, const std::string& data) {
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                     0644));
    ASSERT_TRUE(fd.valid()) << path << ": " << strerror(errno);
    ASSERT_EQ(write(fd.get(), data.data(), data.size()),
              static_cast<ssize_t>(data.size()));
  }
  void Symlink(const std::string& target, const std::string& rel) {
    ASSERT_EQ(symlink(target.c_str(), (root_ + "/" + rel).c_str()), 0)
        << strerror(errno);
  }
  // Opens `path` in the root and returns its contents, or "errno:<n>".
  std::string ReadInRoot(const std::string& path) {
    int64_t fd = OpenInRoot(root_fd_.get(), path, O_RDONLY);
    if (fd < 0) return "errno:" + std::to_string(-fd);
    UniqueFd owned(static_cast<int>(fd));
    char buf[256];
    ssize_t n = read(owned.get(), buf, sizeof(buf));
    if (n < 0) return "read failed";
    return std::string(buf, n);
  }

  std::string base_, root_, outside_;
  UniqueFd root_fd_;
};

TEST_F(RootfsTest, OpensFilesRelativeOrAbsolute) {
  EXPECT_EQ(ReadInRoot("file"), "inside-file");
  EXPECT_EQ(ReadInRoot("/file"), "inside-file");
  EXPECT_EQ(ReadInRoot("//file"), "inside-file");
  int64_t fd = OpenInRoot(root_fd_.get(), "/", O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  UniqueFd dir(static_cast<int>(fd));
  struct stat a, b;
  ASSERT_EQ(fstat(dir.get(), &a), 0);
  ASSERT_EQ(stat(root_.c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_NE(fcntl(dir.get(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST_F(RootfsTest, MissingFileIsEnoent) {
  EXPECT_EQ(ReadInRoot("nope"), "errno:" + std::to_string(ENOENT));
  EXPECT_EQ(ReadInRoot("/etc/nope"), "errno:" + std::to_string(ENOENT));
}

TEST_F(RootfsTest, AbsoluteSymlinkResolvesInsideTheRoot) {
  Symlink("/outside", "etc/x");
  EXPECT_EQ(ReadInRoot("/etc/x"), "inside-outside");
  // A link naming a host path that exists must not reach the host file.
  Symlink(outside_ + "/secret", "etc/hostlink");
  EXPECT_EQ(ReadInRoot("/etc/hostlink"), "errno:" + std::to_string(ENOENT));
}

TEST_F(RootfsTest, DotDotCannotEscape) {
  // ".." at the root stays at the root.
  EXPECT_EQ(ReadInRoot("../file"), "inside-file");
  EXPECT_EQ(ReadInRoot("/../../../../file"), "inside-file");
  EXPECT_EQ(ReadInRoot("../hostdir/secret"), "errno:" + std::to_string(ENOENT));
  // Nor through a relative symlink.
  Symlink("../../../../../../../../" + outside_ + "/secret", "etc/up");
  EXPECT_EQ(ReadInRoot("etc/up"), "errno:" + std::to_string(ENOENT));
  Symlink("../../file", "etc/upfile");
  EXPECT_EQ(ReadInRoot("etc/upfile"), "inside-file");
}

TEST_F(RootfsTest, NeverCreatesFiles) {
  int64_t fd = OpenInRoot(root_fd_.get(), "created", O_WRONLY | O_CREAT);
  EXPECT_EQ(fd, -ENOENT);
  if (fd >= 0) close(static_cast<int>(fd));
  struct stat st;
  EXPECT_NE(stat((root_ + "/created").c_str(), &st), 0);
}

TEST(OpenRootfsTest, MissingDirectoryNamesThePath) {
  auto r = OpenRootfs("/nonexistent/sbx/rootfs");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              ::testing::HasSubstr("/nonexistent/sbx/rootfs"));
}

}  // namespace
}  // namespace sandboxd::fs
