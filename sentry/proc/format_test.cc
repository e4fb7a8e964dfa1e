#include "sentry/proc/format.h"

#include <sys/resource.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace sandboxd::fs::proc {
namespace {

TaskStat Sample() {
  TaskStat t;
  t.pid = 7;
  t.tgid = 7;
  t.ppid = 1;
  t.pgid = 7;
  t.sid = 1;
  t.comm = "my prog";
  t.state = 'S';
  t.num_threads = 3;
  t.start_ticks = 250;
  t.mem.vm_size = 10 * 4096;
  t.mem.rss = 4 * 4096;
  t.mem.data = 2 * 4096;
  t.mem.stack = 4096;
  t.mem.exe = 3 * 4096;
  t.arg_start = 0x1000;
  t.arg_end = 0x1010;
  t.env_start = 0x1010;
  t.env_end = 0x1020;
  t.sig_blocked = 1ull << 9;
  t.sig_caught = 1ull << 1;
  return t;
}

TEST(StatLine, FieldsInLinuxOrder) {
  std::string line = StatLine(Sample());
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  line.pop_back();
  // The comm may hold spaces; parsers split after the last ')'.
  size_t close = line.rfind(')');
  ASSERT_NE(close, std::string::npos);
  EXPECT_EQ(line.substr(0, close + 1), "7 (my prog)");
  std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ');
  // Fields 3..52 of proc(5).
  ASSERT_EQ(f.size(), 50u);
  auto field = [&f](int n) { return f[n - 3]; };
  EXPECT_EQ(field(3), "S");
  EXPECT_EQ(field(4), "1");       // ppid
  EXPECT_EQ(field(5), "7");       // pgrp
  EXPECT_EQ(field(6), "1");       // session
  EXPECT_EQ(field(8), "-1");      // tpgid
  EXPECT_EQ(field(18), "20");     // priority
  EXPECT_EQ(field(19), "0");      // nice
  EXPECT_EQ(field(20), "3");      // num_threads
  EXPECT_EQ(field(22), "250");    // starttime
  EXPECT_EQ(field(23), "40960");  // vsize in bytes
  EXPECT_EQ(field(24), "4");      // rss in pages
  EXPECT_EQ(field(25), "18446744073709551615");
  EXPECT_EQ(field(32), "512");   // blocked: SIGUSR1
  EXPECT_EQ(field(34), "2");     // sigcatch: SIGINT
  EXPECT_EQ(field(38), "17");    // exit_signal
  EXPECT_EQ(field(48), "4096");  // arg_start
  EXPECT_EQ(field(51), "4128");  // env_end
  EXPECT_EQ(field(52), "0");
}

TEST(StatLine, ZombieHasNoMemory) {
  TaskStat t = Sample();
  t.state = 'Z';
  t.has_mm = false;
  t.exit_code = 3 << 8;
  std::string line = StatLine(t);
  std::vector<std::string> f =
      absl::StrSplit(line.substr(line.rfind(')') + 2), ' ');
  EXPECT_EQ(f[0], "Z");
  EXPECT_EQ(f[23 - 3], "0");
  EXPECT_EQ(f[48 - 3], "0");
  EXPECT_EQ(f[52 - 3], "768\n");
}

TEST(StatusText, LinesAndSpacing) {
  std::string s = StatusText(Sample());
  EXPECT_EQ(s.substr(0, s.find('\n', s.find("State"))),
            "Name:\tmy prog\nUmask:\t0022\nState:\tS (sleeping)");
  EXPECT_NE(s.find("\nTgid:\t7\nNgid:\t0\nPid:\t7\nPPid:\t1\n"),
            std::string::npos);
  EXPECT_NE(s.find("\nUid:\t0\t0\t0\t0\n"), std::string::npos);
  EXPECT_NE(s.find("\nVmSize:\t      40 kB\n"), std::string::npos);
  EXPECT_NE(s.find("\nVmRSS:\t      16 kB\n"), std::string::npos);
  EXPECT_NE(s.find("\nThreads:\t3\n"), std::string::npos);
  EXPECT_NE(s.find("\nSigBlk:\t0000000000000200\n"), std::string::npos);
  EXPECT_NE(s.find("\nSigCgt:\t0000000000000002\n"), std::string::npos);
}

TEST(StatmLine, Pages) { EXPECT_EQ(StatmLine(Sample()), "10 4 0 3 0 3 0\n"); }

TEST(MapsLine, NamePaddedToColumn) {
  MapsEntry e;
  e.start = 0x400000;
  e.end = 0x401000;
  e.read = true;
  e.exec = true;
  e.offset = 0x2000;
  e.dev_major = 0xfe;
  e.ino = 247134;
  e.name = "/usr/bin/cat";
  EXPECT_EQ(MapsLine(e),
            "00400000-00401000 r-xp 00002000 fe:00 247134"
            "                             /usr/bin/cat\n");
  e.name.clear();
  e.write = true;
  e.exec = false;
  e.ino = 0;
  e.dev_major = 0;
  e.offset = 0;
  EXPECT_EQ(MapsLine(e), "00400000-00401000 rw-p 00000000 00:00 0 \n");
  // Addresses wider than 8 digits push the name out, by one space at least.
  e.start = 0x7ffd4a9e1000;
  e.end = 0x7ffd4aa02000;
  e.name = "[stack]";
  EXPECT_EQ(MapsLine(e),
            "7ffd4a9e1000-7ffd4aa02000 rw-p 00000000 00:00 0"
            "                          [stack]\n");
}

TEST(LimitsText, Table) {
  std::array<rlimit, RLIM_NLIMITS> l;
  for (auto& r : l) r = {RLIM_INFINITY, RLIM_INFINITY};
  l[RLIMIT_NOFILE] = {1024, 4096};
  std::string s = LimitsText(l);
  std::vector<std::string> lines = absl::StrSplit(s, '\n');
  ASSERT_EQ(lines.size(), RLIM_NLIMITS + 2u);
  EXPECT_EQ(lines[0],
            "Limit                     Soft Limit           Hard Limit      "
            "     Units     ");
  EXPECT_EQ(lines[1 + RLIMIT_NOFILE],
            "Max open files            1024                 4096            "
            "     files     ");
  EXPECT_EQ(lines[1 + RLIMIT_NICE],
            "Max nice priority         unlimited            unlimited       "
            "     ");
}

TEST(MemInfoText, KibColumns) {
  MemInfo m;
  m.total = 1024ull * 1024 * 1024;
  m.used = 100ull * 1024 * 1024;
  std::string s = MemInfoText(m);
  EXPECT_EQ(s.substr(0, s.find('\n', s.find("MemFree")) + 1),
            "MemTotal:        1048576 kB\nMemFree:          946176 kB\n");
  EXPECT_NE(s.find("\nMemAvailable:     946176 kB\n"), std::string::npos);
  EXPECT_NE(s.find("\nSwapTotal:             0 kB\n"), std::string::npos);
}

TEST(VmStatText, FreeAndAnonPages) {
  MemInfo m;
  m.total = 100 * 4096;
  m.used = 30 * 4096;
  std::string s = VmStatText(m);
  EXPECT_EQ(s.substr(0, s.find('\n') + 1), "nr_free_pages 70\n");
  EXPECT_NE(s.find("\nnr_anon_pages 30\n"), std::string::npos);
  EXPECT_NE(s.find("\npgfault 0\n"), std::string::npos);
}

TEST(OtherFiles, Formats) {
  EXPECT_EQ(UptimeText(12345670000000, 0), "12345.67 0.00\n");
  EXPECT_EQ(LoadAvgText(0, 0, 0, 1, 3, 42), "0.00 0.00 0.00 1/3 42\n");
  EXPECT_EQ(FdInfoText(5, 02100002, 7, 99),
            "pos:\t5\nflags:\t02100002\nmnt_id:\t7\nino:\t99\n");
  std::string st =
      StatText({CpuTimes{1, 2, 3, 4}, CpuTimes{}}, 1700000000, 9, 1, 0);
  EXPECT_EQ(st.substr(0, st.find("intr")),
            "cpu  1 2 3 4 0 0 0 0 0 0\ncpu0 1 2 3 4 0 0 0 0 0 0\n"
            "cpu1 0 0 0 0 0 0 0 0 0 0\n");
  EXPECT_NE(st.find("\nbtime 1700000000\nprocesses 9\nprocs_running 1\n"),
            std::string::npos);
}

}  // namespace
}  // namespace sandboxd::fs::proc
