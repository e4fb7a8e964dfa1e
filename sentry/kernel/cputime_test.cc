// CPU-time accounting: the stretches of a task's loop, the sums, and the
// CPU clock ids of clock_getcpuclockid/pthread_getcpuclockid.
#include "sentry/kernel/cputime.h"

#include <time.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace sandboxd::kernel {
namespace {

TEST(TaskCpuTimeTest, SwitchIsUserTimeTheRestIsSystemTimeBlockingIsNeither) {
  TaskCpuTime c;
  c.Start(1000);
  c.EnterApp(1100);      // 100 in the Sentry
  c.LeaveApp(1350);      // 250 in the application
  c.StartBlocking(1400); // 50 in the Sentry
  c.StopBlocking(9000);  // asleep: nobody's time
  c.EnterApp(9020);      // 20 in the Sentry
  c.LeaveApp(9030);      // 10 in the application
  c.Stop(9035);          // 5 in the Sentry
  Usage u = c.Read(20000);
  EXPECT_EQ(u.user_ns, 260);
  EXPECT_EQ(u.sys_ns, 175);
}

TEST(TaskCpuTimeTest, ReadCountsTheCurrentStretch) {
  TaskCpuTime c;
  c.Start(0);
  EXPECT_EQ(c.Read(30).sys_ns, 30);
  c.EnterApp(40);
  Usage u = c.Read(100);
  EXPECT_EQ(u.user_ns, 60);
  EXPECT_EQ(u.sys_ns, 40);
  c.StartBlocking(100);  // not a real sequence; the clock just stops
  EXPECT_EQ(c.Read(500).total_ns(), 100);
}

// Under a CPU quota (KernelOptions::thread_cpu_clocks) a stretch counts
// what the CPU clock of the thread that ran it says, at most its length.
TEST(TaskCpuTimeTest, CpuClocksCountOnlyTheTimeRun) {
  TaskCpuTime c;
  c.Start(1000, 50);
  c.EnterApp(1100, 80);          // 100 long, the thread ran 30
  c.LeaveApp(2100, 90, 200);     // 1000 long, the stub worker ran 200
  c.EnterApp(2200, 110);         // 100 long, ran 20
  c.LeaveApp(2300, 500, -1);     // kvm: this thread ran 390, more than 100
  c.StartBlocking(2400, 600);    // 100 long, ran 100
  c.StopBlocking(9000, 601);     // asleep
  c.Stop(9100, 602);             // 100 long, ran 1
  Usage u = c.Read(20000);
  EXPECT_EQ(u.user_ns, 200 + 100);
  EXPECT_EQ(u.sys_ns, 30 + 20 + 100 + 1);
}

// A read from another thread counts the current stretch by its length;
// when the stretch then counts for less, later reads do not go back.
TEST(TaskCpuTimeTest, ReadsNeverGoBack) {
  TaskCpuTime c;
  c.Start(0, 0);
  c.EnterApp(0, 0);
  EXPECT_EQ(c.Read(1000).user_ns, 1000);
  c.LeaveApp(1000, 0, 200);  // throttled: it ran 200 of the 1000
  EXPECT_EQ(c.Read(1000).user_ns, 1000);
  c.EnterApp(1000, 0);
  c.LeaveApp(3000, 0, 1500);
  EXPECT_EQ(c.Read(3000).user_ns, 1700);
}

TEST(TaskCpuTimeTest, NothingCountsBeforeStart) {
  TaskCpuTime c;
  c.StartBlocking(5000);  // a task blocked before its loop ran
  c.StopBlocking(6000);
  EXPECT_EQ(c.Read(6500).total_ns(), 500);
}

TEST(TaskCpuTimeTest, CountsFaultsAndVoluntarySwitches) {
  TaskCpuTime c;
  c.CountMinorFault();
  c.CountMinorFault();
  c.CountVoluntarySwitch();
  Usage u = c.Read(0);
  EXPECT_EQ(u.minflt, 2u);
  EXPECT_EQ(u.nvcsw, 1u);
}

// Readers on other threads never see the clock go backwards while the
// owner moves between states (the sequence count keeps snapshots whole).
TEST(TaskCpuTimeTest, ConcurrentReadsAreMonotonic) {
  TaskCpuTime c;
  c.Start(MonotonicNowNs());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 200000; i++) {
      c.EnterApp(MonotonicNowNs());
      c.LeaveApp(MonotonicNowNs());
    }
    stop = true;
  });
  int64_t prev = 0;
  int backwards = 0;
  while (!stop) {
    int64_t v = c.Read(MonotonicNowNs()).total_ns();
    if (v < prev) backwards++;
    prev = v;
  }
  writer.join();
  EXPECT_EQ(backwards, 0);
}

TEST(UsageTest, SumsTimesAndCountsKeepsTheLargestRss) {
  Usage a, b;
  a.user_ns = 1500000000;
  a.sys_ns = 2000;
  a.minflt = 3;
  a.maxrss_kb = 100;
  b.user_ns = 500000000;
  b.sys_ns = 1000;
  b.minflt = 4;
  b.maxrss_kb = 50;
  a += b;
  EXPECT_EQ(a.user_ns, 2000000000);
  EXPECT_EQ(a.sys_ns, 3000);
  EXPECT_EQ(a.minflt, 7u);
  EXPECT_EQ(a.maxrss_kb, 100u);
  struct rusage ru = a.ToRusage();
  EXPECT_EQ(ru.ru_utime.tv_sec, 2);
  EXPECT_EQ(ru.ru_utime.tv_usec, 0);
  EXPECT_EQ(ru.ru_stime.tv_sec, 0);
  EXPECT_EQ(ru.ru_stime.tv_usec, 3);
  EXPECT_EQ(ru.ru_maxrss, 100);
  EXPECT_EQ(ru.ru_minflt, 7);
}

// glibc's MAKE_PROCESS_CPUCLOCK and MAKE_THREAD_CPUCLOCK.
clockid_t ProcessClock(pid_t pid, int which) {
  return static_cast<clockid_t>((~static_cast<unsigned>(pid) << 3) | which);
}
clockid_t ThreadClock(pid_t tid, int which) {
  return static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 4 | which);
}

TEST(DecodeCpuClockTest, GlibcEncodings) {
  CpuClockId id;
  ASSERT_TRUE(DecodeCpuClock(ProcessClock(1234, 2), &id));
  EXPECT_EQ(id.pid, 1234);
  EXPECT_FALSE(id.thread);
  EXPECT_EQ(id.which, CpuWhich::kSched);
  ASSERT_TRUE(DecodeCpuClock(ThreadClock(77, 0), &id));
  EXPECT_EQ(id.pid, 77);
  EXPECT_TRUE(id.thread);
  EXPECT_EQ(id.which, CpuWhich::kProf);
  ASSERT_TRUE(DecodeCpuClock(ProcessClock(0, 1), &id));
  EXPECT_EQ(id.pid, 0);
  EXPECT_EQ(id.which, CpuWhich::kVirt);
}

TEST(DecodeCpuClockTest, SelfClocksAndRejects) {
  CpuClockId id;
  ASSERT_TRUE(DecodeCpuClock(CLOCK_PROCESS_CPUTIME_ID, &id));
  EXPECT_EQ(id.pid, 0);
  EXPECT_FALSE(id.thread);
  ASSERT_TRUE(DecodeCpuClock(CLOCK_THREAD_CPUTIME_ID, &id));
  EXPECT_TRUE(id.thread);
  EXPECT_FALSE(DecodeCpuClock(CLOCK_MONOTONIC, &id));
  EXPECT_FALSE(DecodeCpuClock(ProcessClock(5, 3), &id));  // which == 3
}

TEST(CpuClockValueTest, VirtIsUserOnly) {
  Usage u;
  u.user_ns = 7;
  u.sys_ns = 5;
  EXPECT_EQ(CpuClockValue(u, CpuWhich::kVirt), 7);
  EXPECT_EQ(CpuClockValue(u, CpuWhich::kProf), 12);
  EXPECT_EQ(CpuClockValue(u, CpuWhich::kSched), 12);
}

}  // namespace
}  // namespace sandboxd::kernel
