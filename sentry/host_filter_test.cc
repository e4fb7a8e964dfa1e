// The Sentry's seccomp filter, loaded in a death-test child: what it
// allows keeps working, anything else is named on stderr and aborts.
#include "sentry/host_filter.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace sandboxd::host_filter {
namespace {

void Load() {
  auto p = Build();
  if (!p.ok() || !Install(*p).ok()) _exit(3);
}

void ExecTrue() {
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  execv("/bin/true", argv);
}

TEST(HostFilterTest, BuildsOnce) {
  auto p = Build();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_GT(p->insns.size(), 10u);
}

TEST(HostFilterTest, AllowedCallsAndThreadsWork) {
  EXPECT_EXIT(
      {
        Load();
        // A thread: clone3 fails with ENOSYS, glibc falls back to clone
        // with CLONE_THREAD, which the filter allows.
        if (syscall(SYS_clone3, nullptr, 0) != -1 || errno != ENOSYS) _exit(4);
        std::atomic<int> ran{0};
        std::thread t([&] { ran = getpid() > 0 ? 1 : 2; });
        t.join();
        char buf[8];
        int fds[2];
        if (pipe2(fds, 0) != 0 || write(fds[1], "x", 1) != 1 ||
            read(fds[0], buf, 1) != 1) {
          _exit(5);
        }
        _exit(ran == 1 ? 0 : 6);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(HostFilterTest, AnUnlistedCallIsNamedAndAborts) {
  EXPECT_EXIT(
      {
        Load();
        syscall(SYS_getpgrp);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGABRT),
      "sentry: host syscall 111 \\(getpgrp\\) not in the Sentry's seccomp "
      "allow-list");
}

// A writable bind mount makes fifos and sockets on the host, never a
// device node: mknodat is allowed by the type in its mode.
TEST(HostFilterTest, MknodatOnlyForFifosAndSockets) {
  char dir[] = "/tmp/host_filter_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dfd, 0);
  EXPECT_EXIT(
      {
        Load();
        if (mknodat(dfd, "fifo", S_IFIFO | 0600, 0) != 0) _exit(4);
        if (mknodat(dfd, "sock", S_IFSOCK | 0600, 0) != 0) _exit(5);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        Load();
        mknodat(dfd, "null", S_IFCHR | 0600, makedev(1, 3));
        _exit(0);
      },
      ::testing::KilledBySignal(SIGABRT),
      "sentry: host syscall 259 \\(mknodat\\) not in the Sentry's seccomp");
  struct stat st;
  EXPECT_NE(fstatat(dfd, "null", &st, AT_SYMLINK_NOFOLLOW), 0);
  unlinkat(dfd, "fifo", 0);
  unlinkat(dfd, "sock", 0);
  close(dfd);
  rmdir(dir);
}

TEST(HostFilterTest, ForkAndExecTrap) {
  EXPECT_EXIT(
      {
        Load();
        fork();
        _exit(0);
      },
      ::testing::KilledBySignal(SIGABRT), "host syscall 56 \\(clone\\)");
  EXPECT_EXIT(
      {
        Load();
        ExecTrue();
        _exit(0);
      },
      ::testing::KilledBySignal(SIGABRT), "host syscall 59 \\(execve\\)");
}

// hostinet's families and option levels pass; other families, netlink
// protocols and levels trap.
TEST(HostFilterTest, SocketsByFamilyAndLevel) {
  EXPECT_EXIT(
      {
        Load();
        int s4 = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        int s6 = socket(AF_INET6, SOCK_DGRAM, 0);
        int nl = socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
        int one = 1;
        if (s4 < 0 || s6 < 0 || nl < 0) _exit(4);
        if (setsockopt(s4, IPPROTO_TCP, 1 /* TCP_NODELAY */, &one,
                       sizeof(one)) != 0) {
          _exit(5);
        }
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) _exit(6);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        Load();
        socket(AF_PACKET, SOCK_RAW, 0);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGABRT), "host syscall 41 \\(socket\\)");
  EXPECT_EXIT(
      {
        Load();
        socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGABRT), "host syscall 41 \\(socket\\)");
  EXPECT_EXIT(
      {
        Load();
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        int v = 0;
        setsockopt(s, SOL_RAW, 1, &v, sizeof(v));
        _exit(0);
      },
      ::testing::KilledBySignal(SIGABRT),
      "host syscall 54 \\(setsockopt\\)");
}

}  // namespace
}  // namespace sandboxd::host_filter
