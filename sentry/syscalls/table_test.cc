// Syscall handlers through Table::Invoke, with a task of a kernel whose
// platform is a fake (tasks are not started: handlers run on the test's
// thread, as they would on the task's own).
#include "sentry/syscalls/strace.h"
#include "sentry/syscalls/syscalls.h"

#include <asm/prctl.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sentry/kernel/testing/fakes.h"

namespace sandboxd::syscalls {
namespace {

using kernel::testing::EventOf;
using kernel::testing::FakeAddressSpace;
using kernel::testing::kSaRestorer;
using kernel::testing::NoFs;
using kernel::testing::FakePlatform;
using kernel::testing::IdleContext;

using kernel::SigAction;
using kernel::SigBit;
using kernel::SigSet;

constexpr uintptr_t kMin = kernel::testing::kMinUserAddr;
constexpr uintptr_t kMax = kernel::testing::kMaxUserAddr;
constexpr uint64_t kUnmapped = 0x20000000;  // nothing is ever mapped there

class TableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    kernel::KernelOptions opts;
    opts.hostname = "sbx-test-host";
    kernel_ = std::make_unique<kernel::Kernel>(
        std::move(mf).value(), std::make_unique<FakePlatform>(), &table_,
        opts);
    mm_ = std::make_shared<mm::MM>(&kernel_->memory_file(),
                                   std::make_unique<FakeAddressSpace>(), kMin,
                                   kMax);
    fds_ = std::make_shared<fs::FdTable>(1024);
    auto t = kernel_->CreateInit(mm_, fds_, NoFs(), platform::CpuState{});
    ASSERT_TRUE(t.ok()) << t.status();
    task_ = *t;
    int64_t buf = mm_->Mmap(0, 0x10000, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS);
    ASSERT_GT(buf, 0);
    buf_ = static_cast<uint64_t>(buf);
  }

  int64_t Call(uint64_t nr, uint64_t a0 = 0, uint64_t a1 = 0, uint64_t a2 = 0,
               uint64_t a3 = 0, uint64_t a4 = 0, uint64_t a5 = 0,
               kernel::Task* t = nullptr) {
    kernel::SyscallArgs args{nr, {a0, a1, a2, a3, a4, a5}};
    return table_.Invoke(t ? *t : *task_, args);
  }
  template <typename T>
  void Put(uint64_t addr, const T& v) {
    ASSERT_EQ(mm_->CopyOut(addr, &v, sizeof(v)),
              static_cast<int64_t>(sizeof(v)));
  }
  template <typename T>
  T Get(uint64_t addr) {
    T v{};
    EXPECT_EQ(mm_->CopyIn(addr, &v, sizeof(v)),
              static_cast<int64_t>(sizeof(v)));
    return v;
  }
  // Installs the write end of a new pipe at the lowest fd; returns the fd
  // and keeps the read end in *r.
  int InstallPipeWriter(UniqueFd* r) {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    r->reset(p[0]);
    return static_cast<int>(
        fds_->Install(std::make_shared<fs::HostFile>(UniqueFd(p[1])), false));
  }

  Table table_;
  std::unique_ptr<kernel::Kernel> kernel_;
  std::shared_ptr<mm::MM> mm_;
  std::shared_ptr<fs::FdTable> fds_;
  kernel::Task* task_ = nullptr;
  uint64_t buf_ = 0;
};

TEST_F(TableTest, UnknownSyscallsAreEnosysAndCounted) {
  EXPECT_EQ(Call(400), -ENOSYS);
  EXPECT_EQ(Call(400), -ENOSYS);
  EXPECT_EQ(Call(kMaxSyscall + 5), -ENOSYS);
  EXPECT_EQ(Call(~0ull), -ENOSYS);
  auto counts = kernel_->UnimplementedCounts();
  EXPECT_EQ(counts[400], 2u);
  EXPECT_EQ(counts[kMaxSyscall + 5], 1u);
  EXPECT_EQ(counts[~0ull], 1u);
  // Implemented calls are not counted.
  Call(SYS_getpid);
  EXPECT_EQ(kernel_->UnimplementedCounts().count(SYS_getpid), 0u);
  EXPECT_NE(table_.entry(SYS_getpid).fn, nullptr);
  EXPECT_STREQ(table_.entry(SYS_getpid).name, "getpid");
  EXPECT_EQ(table_.entry(400).fn, nullptr);
}

TEST_F(TableTest, StraceDecodesArgumentsAndResults) {
  const char path[] = "/no/such\tfile";
  ASSERT_EQ(mm_->CopyOut(buf_, path, sizeof(path)), static_cast<int64_t>(sizeof(path)));
  kernel::SyscallArgs open{SYS_openat,
                           {static_cast<uint64_t>(AT_FDCWD), buf_,
                            O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0, 0, 0}};
  EXPECT_EQ(TraceCall(*task_, open).Format(-ENOENT),
            "[1] openat(AT_FDCWD, \"/no/such\\tfile\", O_RDONLY|O_NOFOLLOW|O_CLOEXEC, 0) = "
            "-1 ENOENT (No such file or directory)");
  const std::string data(40, 'x');
  ASSERT_EQ(mm_->CopyOut(buf_ + 0x100, data.data(), data.size()), 40);
  kernel::SyscallArgs write{SYS_write, {1, buf_ + 0x100, 40, 0, 0, 0}};
  EXPECT_EQ(TraceCall(*task_, write).Format(40),
            "[1] write(1, \"" + std::string(32, 'x') + "\"..., 40) = 40");
  // What a read filled in is shown after the call, as long as its result.
  kernel::SyscallArgs read{SYS_read, {0, buf_ + 0x100, 4096, 0, 0, 0}};
  TraceCall r(*task_, read);
  ASSERT_EQ(mm_->CopyOut(buf_ + 0x100, "hi\n", 3), 3);
  EXPECT_EQ(r.Format(3), "[1] read(0, \"hi\\n\", 4096) = 3");
  kernel::SyscallArgs kill{SYS_kill, {1, SIGTERM, 0, 0, 0, 0}};
  EXPECT_EQ(TraceCall(*task_, kill).Format(0), "[1] kill(1, SIGTERM) = 0");
  // A syscall the Sentry lacks has its Linux name.
  kernel::SyscallArgs unknown{SYS_pkey_alloc, {0, 0, 0, 0, 0, 0}};
  EXPECT_EQ(TraceCall(*task_, unknown).Format(-ENOSYS),
            "[1] pkey_alloc(0, 0, 0, 0) = -1 ENOSYS (Function not implemented)");
  EXPECT_STREQ(SyscallName(SYS_pkey_alloc), "pkey_alloc");
  EXPECT_EQ(SyscallName(100000), nullptr);
}

TEST_F(TableTest, Identity) {
  EXPECT_EQ(Call(SYS_getpid), 1);
  EXPECT_EQ(Call(SYS_gettid), 1);
  EXPECT_EQ(Call(SYS_getppid), 0);
  auto t2 = kernel_->CreateThread(*task_, platform::CpuState{});
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(Call(SYS_getpid, 0, 0, 0, 0, 0, 0, *t2), 1);
  EXPECT_EQ(Call(SYS_gettid, 0, 0, 0, 0, 0, 0, *t2), 2);
  EXPECT_EQ(Call(SYS_getuid), 0);
  // Root of the sandbox's namespace may become anyone; then it may not
  // come back, and only the calling thread changed.
  EXPECT_EQ(Call(SYS_setuid, 1000), 0);
  EXPECT_EQ(Call(SYS_getuid), 1000);
  EXPECT_EQ(Call(SYS_geteuid), 1000);
  EXPECT_EQ(Call(SYS_setuid, 0), -EPERM);
  EXPECT_EQ(task_->creds()->cap_effective, 0u);
  EXPECT_EQ(Call(SYS_getuid, 0, 0, 0, 0, 0, 0, *t2), 0);
  EXPECT_EQ((*t2)->creds()->cap_effective, fs::kAllCaps);
}

TEST_F(TableTest, ClockSettimeIsRefusedAsInAContainer) {
  struct timespec ts = {1000, 0};
  Put(buf_, ts);
  EXPECT_EQ(Call(SYS_clock_settime, CLOCK_REALTIME, buf_), -EPERM);
  EXPECT_EQ(Call(SYS_clock_settime, CLOCK_MONOTONIC, buf_), -EINVAL);
  EXPECT_EQ(Call(SYS_clock_settime, CLOCK_REALTIME, kUnmapped), -EFAULT);
  EXPECT_EQ(Call(SYS_settimeofday, 0, 0), -EPERM);
}

TEST_F(TableTest, NiceValuesAreKeptPerTask) {
  EXPECT_EQ(Call(SYS_getpriority, PRIO_PROCESS, 0), 20);
  EXPECT_EQ(Call(SYS_setpriority, PRIO_PROCESS, 0, 5), 0);
  EXPECT_EQ(Call(SYS_getpriority, PRIO_PROCESS, 0), 15);
  EXPECT_EQ(Call(SYS_setpriority, PRIO_PROCESS, 0, -3), 0);  // root: CAP_SYS_NICE
  EXPECT_EQ(Call(SYS_getpriority, PRIO_PROCESS, 0), 23);
  EXPECT_EQ(Call(SYS_setpriority, 7, 0, 0), -EINVAL);
}

TEST_F(TableTest, UnameReportsTheConfiguredHostname) {
  ASSERT_EQ(Call(SYS_uname, buf_), 0);
  auto u = Get<struct utsname>(buf_);
  EXPECT_STREQ(u.nodename, "sbx-test-host");
  EXPECT_STREQ(u.sysname, "Linux");
  EXPECT_STREQ(u.machine, "x86_64");
  EXPECT_EQ(Call(SYS_uname, kUnmapped), -EFAULT);
}

TEST_F(TableTest, RtSigaction) {
  SigAction act;
  act.handler = 0x401000;
  act.flags = kSaRestorer | SA_SIGINFO;
  act.restorer = 0x401100;
  act.mask = SigBit(SIGUSR2) | SigBit(SIGKILL) | SigBit(SIGSTOP);
  Put(buf_, act);
  EXPECT_EQ(Call(SYS_rt_sigaction, SIGUSR1, buf_, 0, 8), 0);
  EXPECT_EQ(Call(SYS_rt_sigaction, SIGUSR1, 0, buf_ + 64, 8), 0);
  auto old = Get<SigAction>(buf_ + 64);
  EXPECT_EQ(old.handler, 0x401000u);
  EXPECT_EQ(old.restorer, 0x401100u);
  EXPECT_EQ(old.flags, static_cast<uint64_t>(kSaRestorer | SA_SIGINFO));
  EXPECT_EQ(old.mask, SigBit(SIGUSR2));  // KILL and STOP cannot be masked

  EXPECT_EQ(Call(SYS_rt_sigaction, SIGKILL, buf_, 0, 8), -EINVAL);
  EXPECT_EQ(Call(SYS_rt_sigaction, SIGSTOP, buf_, 0, 8), -EINVAL);
  EXPECT_EQ(task_->group().GetAction(SIGKILL).handler, kernel::kSigDfl);
  // Reading SIGKILL's action is allowed.
  EXPECT_EQ(Call(SYS_rt_sigaction, SIGKILL, 0, buf_ + 64, 8), 0);
  EXPECT_EQ(Call(SYS_rt_sigaction, 0, buf_, 0, 8), -EINVAL);
  EXPECT_EQ(Call(SYS_rt_sigaction, 65, buf_, 0, 8), -EINVAL);
  EXPECT_EQ(Call(SYS_rt_sigaction, SIGUSR1, buf_, 0, 4), -EINVAL);
  EXPECT_EQ(Call(SYS_rt_sigaction, SIGUSR1, buf_, 0, 16), -EINVAL);
  EXPECT_EQ(Call(SYS_rt_sigaction, SIGUSR1, kUnmapped, 0, 8), -EFAULT);
}

TEST_F(TableTest, RtSigprocmaskCannotBlockKillOrStop) {
  Put<SigSet>(buf_, SigBit(SIGKILL) | SigBit(SIGSTOP) | SigBit(SIGUSR1));
  EXPECT_EQ(Call(SYS_rt_sigprocmask, SIG_BLOCK, buf_, 0, 8), 0);
  EXPECT_EQ(task_->signal_mask(), SigBit(SIGUSR1));
  Put<SigSet>(buf_, SigBit(SIGUSR2));
  EXPECT_EQ(Call(SYS_rt_sigprocmask, SIG_BLOCK, buf_, buf_ + 8, 8), 0);
  EXPECT_EQ(Get<SigSet>(buf_ + 8), SigBit(SIGUSR1));
  Put<SigSet>(buf_, SigBit(SIGUSR1));
  EXPECT_EQ(Call(SYS_rt_sigprocmask, SIG_UNBLOCK, buf_, 0, 8), 0);
  EXPECT_EQ(task_->signal_mask(), SigBit(SIGUSR2));
  Put<SigSet>(buf_, ~0ull);
  EXPECT_EQ(Call(SYS_rt_sigprocmask, SIG_SETMASK, buf_, 0, 8), 0);
  EXPECT_EQ(task_->signal_mask(), ~kernel::kUnblockable);

  EXPECT_EQ(Call(SYS_rt_sigprocmask, 7, buf_, 0, 8), -EINVAL);
  EXPECT_EQ(Call(SYS_rt_sigprocmask, SIG_BLOCK, buf_, 0, 4), -EINVAL);
  EXPECT_EQ(Call(SYS_rt_sigprocmask, SIG_BLOCK, kUnmapped, 0, 8), -EFAULT);
}

TEST_F(TableTest, Prlimit64RoundTrip) {
  struct rlimit host;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &host), 0);
  struct rlimit lim = {16, 32};
  Put(buf_, lim);
  EXPECT_EQ(Call(SYS_prlimit64, 0, RLIMIT_NOFILE, buf_, buf_ + 64), 0);
  auto old = Get<struct rlimit>(buf_ + 64);
  EXPECT_EQ(old.rlim_cur, host.rlim_cur);
  EXPECT_EQ(old.rlim_max, host.rlim_max);
  EXPECT_EQ(Call(SYS_prlimit64, 1, RLIMIT_NOFILE, 0, buf_ + 64), 0);
  old = Get<struct rlimit>(buf_ + 64);
  EXPECT_EQ(old.rlim_cur, 16u);
  EXPECT_EQ(old.rlim_max, 32u);
  EXPECT_EQ(Call(SYS_getrlimit, RLIMIT_NOFILE, buf_ + 64), 0);
  EXPECT_EQ(Get<struct rlimit>(buf_ + 64).rlim_cur, 16u);
  // RLIMIT_NOFILE governs the descriptor table.
  UniqueFd r;
  int fd = InstallPipeWriter(&r);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Call(SYS_dup3, fd, 16, 0), -EBADF);
  EXPECT_EQ(Call(SYS_dup3, fd, 15, 0), 15);

  struct rlimit bad = {64, 32};
  Put(buf_, bad);
  EXPECT_EQ(Call(SYS_prlimit64, 0, RLIMIT_NOFILE, buf_, 0), -EINVAL);
  EXPECT_EQ(Call(SYS_prlimit64, 0, RLIM_NLIMITS, 0, buf_), -EINVAL);
  EXPECT_EQ(Call(SYS_prlimit64, 12345, RLIMIT_NOFILE, 0, buf_), -ESRCH);
  EXPECT_EQ(Call(SYS_prlimit64, 0, RLIMIT_NOFILE, kUnmapped, 0), -EFAULT);
}

TEST_F(TableTest, SchedGetaffinitySizeRules) {
  cpu_set_t host;
  ASSERT_EQ(sched_getaffinity(0, sizeof(host), &host), 0);
  int64_t n = Call(SYS_sched_getaffinity, 0, 128, buf_);
  ASSERT_GT(n, 0);
  EXPECT_EQ(n % 8, 0);
  EXPECT_LE(n, 128);
  cpu_set_t got;
  CPU_ZERO(&got);
  ASSERT_EQ(mm_->CopyIn(buf_, &got, n), n);
  EXPECT_TRUE(CPU_EQUAL(&got, &host));
  EXPECT_EQ(Call(SYS_sched_getaffinity, 0, 12, buf_), -EINVAL);
  EXPECT_EQ(Call(SYS_sched_getaffinity, 0, 7, buf_), -EINVAL);
  EXPECT_EQ(Call(SYS_sched_getaffinity, 0, 0, buf_), -EINVAL);
  EXPECT_EQ(Call(SYS_sched_getaffinity, 0, 128, kUnmapped), -EFAULT);
}

TEST_F(TableTest, ClockGettime) {
  EXPECT_EQ(Call(SYS_clock_gettime, 12345, buf_), -EINVAL);
  EXPECT_EQ(Call(SYS_clock_gettime, -1ull, buf_), -EINVAL);
  struct timespec before, after;
  clock_gettime(CLOCK_MONOTONIC, &before);
  ASSERT_EQ(Call(SYS_clock_gettime, CLOCK_MONOTONIC, buf_), 0);
  clock_gettime(CLOCK_MONOTONIC, &after);
  auto ts = Get<struct timespec>(buf_);
  auto ns = [](const timespec& t) { return t.tv_sec * 1000000000ll + t.tv_nsec; };
  EXPECT_GE(ns(ts), ns(before));
  EXPECT_LE(ns(ts), ns(after));
  EXPECT_EQ(Call(SYS_clock_gettime, CLOCK_REALTIME, kUnmapped), -EFAULT);
}

TEST_F(TableTest, WriteChecksFdAndBuffer) {
  EXPECT_EQ(Call(SYS_write, 99, buf_, 4), -EBADF);
  EXPECT_EQ(Call(SYS_write, -1ull, buf_, 4), -EBADF);
  UniqueFd r;
  int fd = InstallPipeWriter(&r);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Call(SYS_write, fd, kUnmapped, 4), -EFAULT);
  ASSERT_EQ(mm_->CopyOut(buf_, "ping", 4), 4);
  EXPECT_EQ(Call(SYS_write, fd, buf_, 4), 4);
  char got[8];
  ASSERT_EQ(read(r.get(), got, sizeof(got)), 4);
  EXPECT_EQ(std::string(got, 4), "ping");
  // Nothing was written for the faulting call.
  EXPECT_EQ(read(r.get(), got, sizeof(got)), -1);
  // After close, the fd is gone.
  EXPECT_EQ(Call(SYS_close, fd), 0);
  EXPECT_EQ(Call(SYS_write, fd, buf_, 4), -EBADF);
  EXPECT_EQ(Call(SYS_close, fd), -EBADF);
}

TEST_F(TableTest, FcntlAndDup) {
  UniqueFd r;
  int fd = InstallPipeWriter(&r);
  ASSERT_EQ(fd, 0);
  EXPECT_EQ(Call(SYS_fcntl, fd, F_DUPFD, 10), 10);
  EXPECT_EQ(Call(SYS_fcntl, 10, F_GETFD), 0);
  EXPECT_EQ(Call(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 10), 11);
  EXPECT_EQ(Call(SYS_fcntl, 11, F_GETFD), FD_CLOEXEC);
  EXPECT_EQ(Call(SYS_dup3, fd, 20, O_CLOEXEC), 20);
  EXPECT_EQ(Call(SYS_fcntl, 20, F_GETFD), FD_CLOEXEC);
  EXPECT_EQ(Call(SYS_dup3, fd, fd, 0), -EINVAL);
  EXPECT_EQ(Call(SYS_dup2, fd, fd), fd);
  EXPECT_EQ(Call(SYS_dup2, 5, 5), -EBADF);
  EXPECT_EQ(Call(SYS_dup, fd), 1);  // the lowest free fd
  EXPECT_EQ(Call(SYS_dup, fd), 2);
  EXPECT_EQ(Call(SYS_fcntl, 2, F_GETFD), 0);
  EXPECT_EQ(Call(SYS_fcntl, fd, F_GETFL) & O_ACCMODE, O_WRONLY);
  EXPECT_EQ(Call(SYS_fcntl, 77, F_GETFL), -EBADF);
}

TEST_F(TableTest, MmapFileWithBadFdIsEbadf) {
  EXPECT_EQ(Call(SYS_mmap, 0, 4096, PROT_READ, MAP_PRIVATE, 99, 0), -EBADF);
  EXPECT_EQ(Call(SYS_mmap, 0, 4096, PROT_READ, MAP_PRIVATE, -1ull, 0), -EBADF);
  int64_t a = Call(SYS_mmap, 0, 8192, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1ull, 0);
  ASSERT_GT(a, 0);
  EXPECT_EQ(a % 4096, 0);
  uint32_t v = 0x12345678;
  EXPECT_EQ(mm_->CopyOut(a + 4096, &v, 4), 4);
  EXPECT_EQ(Call(SYS_munmap, a, 8192), 0);
  EXPECT_EQ(mm_->CopyOut(a, &v, 4), -EFAULT);
  EXPECT_EQ(Call(SYS_mmap, 0, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1ull, 100),
            -EINVAL);
  // Linux checks the offset before the fd.
  EXPECT_EQ(Call(SYS_mmap, 0, 4096, PROT_READ, MAP_PRIVATE, 99, 100), -EINVAL);
  // A pipe cannot be mapped.
  UniqueFd r;
  int fd = InstallPipeWriter(&r);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Call(SYS_mmap, 0, 4096, PROT_READ, MAP_PRIVATE, fd, 0), -ENODEV);
}

TEST_F(TableTest, ArchPrctlSetsFsBase) {
  EXPECT_EQ(Call(SYS_arch_prctl, ARCH_SET_FS, 0x7f0000001000), 0);
  EXPECT_EQ(task_->cpu().regs.fs_base, 0x7f0000001000u);
  EXPECT_EQ(Call(SYS_arch_prctl, ARCH_GET_FS, buf_), 0);
  EXPECT_EQ(Get<uint64_t>(buf_), 0x7f0000001000u);
  EXPECT_EQ(Call(SYS_arch_prctl, ARCH_SET_GS, 0x5000), 0);
  EXPECT_EQ(task_->cpu().regs.gs_base, 0x5000u);
  EXPECT_EQ(Call(SYS_arch_prctl, ARCH_SET_FS, 0xffff800000000000), -EPERM);
  EXPECT_EQ(task_->cpu().regs.fs_base, 0x7f0000001000u);
  EXPECT_EQ(Call(SYS_arch_prctl, ARCH_GET_FS, kUnmapped), -EFAULT);
  EXPECT_EQ(Call(SYS_arch_prctl, 0x9999, 0), -EINVAL);
}

TEST_F(TableTest, FutexThroughTheTable) {
  Put<uint32_t>(buf_, 5);
  EXPECT_EQ(Call(SYS_futex, buf_, FUTEX_WAIT_PRIVATE, 6, 0), -EAGAIN);
  EXPECT_EQ(Call(SYS_futex, buf_ + 1, FUTEX_WAIT_PRIVATE, 5, 0), -EINVAL);
  EXPECT_EQ(Call(SYS_futex, kUnmapped, FUTEX_WAIT_PRIVATE, 5, 0), -EFAULT);
  EXPECT_EQ(Call(SYS_futex, buf_, FUTEX_WAKE_PRIVATE, 1), 0);
  struct timespec ts = {0, 20 * 1000 * 1000};
  Put(buf_ + 16, ts);
  EXPECT_EQ(Call(SYS_futex, buf_, FUTEX_WAIT_PRIVATE, 5, buf_ + 16),
            -ETIMEDOUT);
  struct timespec bad = {0, 1000000000};
  Put(buf_ + 16, bad);
  EXPECT_EQ(Call(SYS_futex, buf_, FUTEX_WAIT_PRIVATE, 5, buf_ + 16), -EINVAL);
  // FUTEX_WAKE_OP: *uaddr2 = 1 (SET), compare old == 0.
  Put<uint32_t>(buf_ + 4, 0);
  uint32_t op = (FUTEX_OP_SET << 28) | (FUTEX_OP_CMP_EQ << 24) | (1 << 12);
  EXPECT_EQ(Call(SYS_futex, buf_, FUTEX_WAKE_OP_PRIVATE, 1, 1, buf_ + 4, op), 0);
  EXPECT_EQ(Get<uint32_t>(buf_ + 4), 1u);
}

TEST_F(TableTest, FutexWakeOpArgumentsAreSigned12BitFields) {
  // Linux sign-extends oparg and cmparg (futex_atomic_op_inuser), and
  // takes a shift count modulo 32.
  Put<uint32_t>(buf_, 0);
  Put<uint32_t>(buf_ + 4, 5);
  uint32_t add_minus_one =
      (FUTEX_OP_ADD << 28) | (FUTEX_OP_CMP_EQ << 24) | (0xfff << 12);
  EXPECT_EQ(Call(SYS_futex, buf_, FUTEX_WAKE_OP_PRIVATE, 1, 1, buf_ + 4,
                 add_minus_one),
            0);
  EXPECT_EQ(Get<uint32_t>(buf_ + 4), 4u);  // 5 + (-1)
  uint32_t set_shift_33 = ((FUTEX_OP_SET | FUTEX_OP_OPARG_SHIFT) << 28) |
                          (FUTEX_OP_CMP_EQ << 24) | (33 << 12);
  EXPECT_EQ(Call(SYS_futex, buf_, FUTEX_WAKE_OP_PRIVATE, 1, 1, buf_ + 4,
                 set_shift_33),
            0);
  EXPECT_EQ(Get<uint32_t>(buf_ + 4), 2u);  // 1 << (33 & 31)
}

TEST_F(TableTest, SigaltstackRules) {
  kernel::SignalStack ss;
  ss.sp = buf_;
  ss.size = 1024;  // < MINSIGSTKSZ
  ss.flags = 0;
  Put(buf_ + 0x8000, ss);
  EXPECT_EQ(Call(SYS_sigaltstack, buf_ + 0x8000, 0), -ENOMEM);
  ss.size = 0x4000;
  Put(buf_ + 0x8000, ss);
  EXPECT_EQ(Call(SYS_sigaltstack, buf_ + 0x8000, 0), 0);
  EXPECT_EQ(Call(SYS_sigaltstack, 0, buf_ + 0x8100), 0);
  auto old = Get<kernel::SignalStack>(buf_ + 0x8100);
  EXPECT_EQ(old.sp, buf_);
  EXPECT_EQ(old.size, 0x4000u);
  EXPECT_EQ(old.flags, 0);
  // While running on it, it cannot be changed.
  task_->cpu().regs.rsp = buf_ + 0x100;
  EXPECT_EQ(Call(SYS_sigaltstack, buf_ + 0x8000, 0), -EPERM);
  EXPECT_EQ(Call(SYS_sigaltstack, 0, buf_ + 0x8100), 0);
  EXPECT_EQ(Get<kernel::SignalStack>(buf_ + 0x8100).flags, SS_ONSTACK);
}

TEST_F(TableTest, MemfdSealsAndSplice) {
  const char name[] = "t";
  Put(buf_, name);
  int64_t fd = Call(SYS_memfd_create, buf_, MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(Call(SYS_memfd_create, buf_, MFD_HUGETLB), -EINVAL);
  EXPECT_EQ(Call(SYS_memfd_create, kUnmapped, 0), -EFAULT);
  EXPECT_EQ(Call(SYS_fcntl, fd, F_GET_SEALS), 0);
  const char data[] = "hello";
  Put(buf_ + 64, data);
  EXPECT_EQ(Call(SYS_write, fd, buf_ + 64, 5), 5);
  EXPECT_EQ(Call(SYS_fcntl, fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW), 0);
  EXPECT_EQ(Call(SYS_write, fd, buf_ + 64, 1), -EPERM);
  EXPECT_EQ(Call(SYS_fcntl, 1, F_GET_SEALS), -EBADF);

  ASSERT_EQ(Call(SYS_pipe2, buf_ + 256, 0), 0);
  int p[2];
  p[0] = Get<int>(buf_ + 256);
  p[1] = Get<int>(buf_ + 260);
  Put<int64_t>(buf_ + 512, 1);
  EXPECT_EQ(Call(SYS_splice, fd, buf_ + 512, p[1], 0, 100, 0), 4);
  EXPECT_EQ(Get<int64_t>(buf_ + 512), 5);
  EXPECT_EQ(Call(SYS_splice, fd, 0, fd, 0, 1, 0), -EINVAL);  // no pipe
  EXPECT_EQ(Call(SYS_splice, p[0], buf_ + 512, fd, 0, 1, 0), -ESPIPE);
  EXPECT_EQ(Call(SYS_tee, p[0], p[1], 1, 0), -EINVAL);  // same pipe
  EXPECT_EQ(Call(SYS_read, p[0], buf_ + 128, 16), 4);
  char out[4];
  ASSERT_EQ(mm_->CopyIn(buf_ + 128, out, 4), 4);
  EXPECT_EQ(std::string(out, 4), "ello");
}

}  // namespace
}  // namespace sandboxd::syscalls
