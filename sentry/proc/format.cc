#include "sentry/proc/format.h"

#include <sys/resource.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sandboxd::fs::proc {
namespace {

uint64_t Pages(uint64_t bytes) { return bytes / kPageSize; }
uint64_t KiB(uint64_t bytes) { return bytes / 1024; }

const char* StateName(char state) {
  switch (state) {
    case 'R':
      return "R (running)";
    case 'S':
      return "S (sleeping)";
    case 'D':
      return "D (disk sleep)";
    case 'T':
      return "T (stopped)";
    case 'Z':
      return "Z (zombie)";
    default:
      return "R (running)";
  }
}

}  // namespace

std::string StatLine(const TaskStat& t) {
  const MemoryUsage& m = t.mem;
  const bool mm = t.has_mm;
  // fs/proc/array.c do_task_stat. The flags are PF_RANDOMIZE, which every
  // user process has; tty_nr 0 and tpgid -1: no controlling terminal.
  std::string s = absl::StrFormat(
      "%d (%s) %c %d %d %d %u %d 4194304 0 0 0 0 %u %u 0 0 %d %d %d 0 %d %u "
      "%u %u",
      t.pid, t.comm, t.state, t.ppid, t.pgid, t.sid, t.tty_nr, t.tpgid,
      t.utime_ticks, t.stime_ticks,
      // task_prio: 20 + nice for the fair policies, -1 - rt_priority for RT.
      t.sched.rt_priority > 0 ? -1 - t.sched.rt_priority : 20 + t.sched.nice,
      t.sched.nice, t.num_threads, t.start_ticks, mm ? m.vm_size : 0,
      mm ? Pages(m.rss) : 0, t.rss_limit);
  // startcode endcode startstack kstkesp kstkeip signal blocked sigignore
  // sigcatch wchan nswap cnswap exit_signal processor rt_priority policy
  // delayacct_blkio_ticks guest_time cguest_time.
  absl::StrAppendFormat(&s, " %u %u %u 0 0 %u %u %u %u %d 0 0 %d 0 %d %d 0 0 0",
                        mm ? t.start_code : 0, mm ? t.end_code : 0,
                        mm ? t.start_stack : 0, t.sig_pending, t.sig_blocked,
                        t.sig_ignored, t.sig_caught, t.state == 'S' ? 1 : 0,
                        t.exit_signal, t.sched.rt_priority, t.sched.policy);
  absl::StrAppendFormat(&s, " %u %u %u %u %u %u %u %d\n", mm ? t.start_data : 0,
                        mm ? t.end_data : 0, mm ? t.start_brk : 0,
                        mm ? t.arg_start : 0, mm ? t.arg_end : 0,
                        mm ? t.env_start : 0, mm ? t.env_end : 0,
                        t.state == 'Z' ? t.exit_code : 0);
  return s;
}

std::string StatusText(const TaskStat& t) {
  std::string s;
  absl::StrAppendFormat(&s, "Name:\t%s\n", t.comm);
  absl::StrAppendFormat(&s, "Umask:\t%04o\n", t.umask);
  absl::StrAppendFormat(&s, "State:\t%s\n", StateName(t.state));
  absl::StrAppendFormat(&s, "Tgid:\t%d\nNgid:\t0\nPid:\t%d\nPPid:\t%d\n",
                        t.tgid, t.pid, t.ppid);
  const fs::Credentials& c =
      t.creds != nullptr ? *t.creds : *fs::Credentials::Root();
  absl::StrAppendFormat(&s, "TracerPid:\t0\nUid:\t%u\t%u\t%u\t%u\n", c.ruid,
                        c.euid, c.suid, c.fsuid);
  absl::StrAppendFormat(&s, "Gid:\t%u\t%u\t%u\t%u\n", c.rgid, c.egid, c.sgid,
                        c.fsgid);
  absl::StrAppendFormat(&s, "FDSize:\t%u\nGroups:\t", t.fd_size);
  for (uint32_t g : c.groups) absl::StrAppendFormat(&s, "%u ", g);
  s += c.groups.empty() ? " \n" : "\n";
  absl::StrAppendFormat(&s,
                        "NStgid:\t%d\nNSpid:\t%d\nNSpgid:\t%d\nNSsid:\t%d\n",
                        t.tgid, t.pid, t.pgid, t.sid);
  s += "Kthread:\t0\n";
  if (t.has_mm) {
    const MemoryUsage& m = t.mem;
    auto kb = [&s](const char* name, uint64_t bytes) {
      absl::StrAppendFormat(&s, "%s:\t%8u kB\n", name, KiB(bytes));
    };
    kb("VmPeak", m.vm_size);
    kb("VmSize", m.vm_size);
    kb("VmLck", 0);
    kb("VmPin", 0);
    kb("VmHWM", m.rss);
    kb("VmRSS", m.rss);
    kb("RssAnon", m.rss);
    kb("RssFile", 0);
    kb("RssShmem", 0);
    kb("VmData", m.data);
    kb("VmStk", m.stack);
    kb("VmExe", m.exe);
    kb("VmLib", 0);
    kb("VmPTE", 0);
    kb("VmSwap", 0);
    kb("HugetlbPages", 0);
    s += "CoreDumping:\t0\nTHP_enabled:\t1\n";
  }
  absl::StrAppendFormat(&s, "Threads:\t%d\n", t.num_threads);
  absl::StrAppendFormat(&s, "SigQ:\t0/%u\n", t.max_signals);
  absl::StrAppendFormat(&s, "SigPnd:\t%016x\nShdPnd:\t%016x\n", t.sig_pending,
                        t.shared_pending);
  absl::StrAppendFormat(&s, "SigBlk:\t%016x\nSigIgn:\t%016x\nSigCgt:\t%016x\n",
                        t.sig_blocked, t.sig_ignored, t.sig_caught);
  absl::StrAppendFormat(&s,
                        "CapInh:\t%016x\nCapPrm:\t%016x\nCapEff:\t%016x\n"
                        "CapBnd:\t%016x\nCapAmb:\t%016x\n",
                        c.cap_inheritable, c.cap_permitted, c.cap_effective,
                        c.cap_bounding, c.cap_ambient);
  absl::StrAppendFormat(&s, "NoNewPrivs:\t%d\nSeccomp:\t0\nSeccomp_filters:\t0\n",
                        t.no_new_privs ? 1 : 0);
  s += "voluntary_ctxt_switches:\t0\nnonvoluntary_ctxt_switches:\t0\n";
  return s;
}

std::string StatmLine(const TaskStat& t) {
  if (!t.has_mm) return "0 0 0 0 0 0 0\n";
  const MemoryUsage& m = t.mem;
  // size resident shared text lib data dt; lib and dt are always 0.
  return absl::StrFormat("%u %u %u %u 0 %u 0\n", Pages(m.vm_size), Pages(m.rss),
                         Pages(m.shared), Pages(m.exe),
                         Pages(m.data + m.stack));
}

std::string MapsLine(const MapsEntry& e) {
  std::string s = absl::StrFormat(
      "%08x-%08x %c%c%c%c %08x %02x:%02x %u ", e.start, e.end,
      e.read ? 'r' : '-', e.write ? 'w' : '-', e.exec ? 'x' : '-',
      e.is_private ? 'p' : 's', e.offset, e.dev_major, e.dev_minor, e.ino);
  if (!e.name.empty()) {
    // seq_pad: the header is padded to 72 columns (25 + 6 * sizeof(void*)
    // - 1), then one space and the name.
    constexpr size_t kNameColumn = 72;
    if (s.size() < kNameColumn) s.resize(kNameColumn, ' ');
    s += ' ';
    s += e.name;
  }
  s += '\n';
  return s;
}

std::string LimitsText(const std::array<rlimit, RLIM_NLIMITS>& limits) {
  struct Row {
    const char* name;
    const char* unit;  // null: none
  };
  // fs/proc/base.c lnames[], by RLIMIT_* index.
  static constexpr Row kRows[] = {
      {"Max cpu time", "seconds"},        {"Max file size", "bytes"},
      {"Max data size", "bytes"},         {"Max stack size", "bytes"},
      {"Max core file size", "bytes"},    {"Max resident set", "bytes"},
      {"Max processes", "processes"},     {"Max open files", "files"},
      {"Max locked memory", "bytes"},     {"Max address space", "bytes"},
      {"Max file locks", "locks"},        {"Max pending signals", "signals"},
      {"Max msgqueue size", "bytes"},     {"Max nice priority", nullptr},
      {"Max realtime priority", nullptr}, {"Max realtime timeout", "us"},
  };
  static_assert(sizeof(kRows) / sizeof(kRows[0]) == RLIM_NLIMITS);
  std::string s = absl::StrFormat("%-25s %-20s %-20s %-10s\n", "Limit",
                                  "Soft Limit", "Hard Limit", "Units");
  auto value = [](rlim_t v) {
    return v == RLIM_INFINITY ? absl::StrFormat("%-20s ", "unlimited")
                              : absl::StrFormat("%-20u ", v);
  };
  for (int i = 0; i < RLIM_NLIMITS; i++) {
    absl::StrAppendFormat(&s, "%-25s ", kRows[i].name);
    s += value(limits[i].rlim_cur);
    s += value(limits[i].rlim_max);
    if (kRows[i].unit != nullptr) {
      absl::StrAppendFormat(&s, "%-10s\n", kRows[i].unit);
    } else {
      s += "\n";
    }
  }
  return s;
}

std::string MemInfoText(const MemInfo& m) {
  const uint64_t used = m.used < m.total ? m.used : m.total;
  const uint64_t free = m.total - used;
  std::string s;
  // fs/proc/meminfo.c show_val_kb: the label padded to 16 columns, the
  // value right-aligned in 8.
  auto kb = [&s](const char* label, uint64_t bytes) {
    absl::StrAppendFormat(&s, "%-16s%8u kB\n", label, KiB(bytes));
  };
  kb("MemTotal:", m.total);
  kb("MemFree:", free);
  kb("MemAvailable:", free);
  kb("Buffers:", 0);
  kb("Cached:", m.shmem);
  kb("SwapCached:", 0);
  kb("Active:", used);
  kb("Inactive:", 0);
  kb("Active(anon):", used);
  kb("Inactive(anon):", 0);
  kb("Active(file):", 0);
  kb("Inactive(file):", 0);
  kb("Unevictable:", 0);
  kb("Mlocked:", 0);
  kb("SwapTotal:", 0);
  kb("SwapFree:", 0);
  kb("Dirty:", 0);
  kb("Writeback:", 0);
  kb("AnonPages:", used - (m.shmem < used ? m.shmem : used));
  kb("Mapped:", 0);
  kb("Shmem:", m.shmem);
  kb("KReclaimable:", 0);
  kb("Slab:", 0);
  kb("SReclaimable:", 0);
  kb("SUnreclaim:", 0);
  kb("KernelStack:", 0);
  kb("PageTables:", 0);
  kb("CommitLimit:", m.total);
  kb("Committed_AS:", used);
  kb("VmallocTotal:", 0);
  kb("VmallocUsed:", 0);
  kb("VmallocChunk:", 0);
  return s;
}

std::string VmStatText(const MemInfo& m) {
  const uint64_t used = m.used < m.total ? m.used : m.total;
  std::string s;
  auto line = [&s](const char* name, uint64_t v) {
    absl::StrAppend(&s, name, " ", v, "\n");
  };
  line("nr_free_pages", Pages(m.total - used));
  line("nr_inactive_anon", 0);
  line("nr_active_anon", Pages(used));
  line("nr_inactive_file", 0);
  line("nr_active_file", 0);
  line("nr_unevictable", 0);
  line("nr_mlock", 0);
  line("nr_anon_pages", Pages(used));
  line("nr_mapped", 0);
  line("nr_file_pages", 0);
  line("nr_dirty", 0);
  line("nr_writeback", 0);
  line("nr_shmem", Pages(m.shmem));
  // Event counters: not accounted.
  for (const char* name :
       {"pgpgin", "pgpgout", "pswpin", "pswpout", "pgalloc_normal", "pgfree",
        "pgfault", "pgmajfault"}) {
    line(name, 0);
  }
  return s;
}

std::string UptimeText(int64_t uptime_ns, int64_t idle_ns) {
  auto secs = [](int64_t ns) {
    return absl::StrFormat("%d.%02d", ns / 1000000000,
                           (ns % 1000000000) / 10000000);
  };
  return absl::StrCat(secs(uptime_ns), " ", secs(idle_ns), "\n");
}

std::string LoadAvgText(double l1, double l5, double l15, int running,
                        int total, pid_t last_pid) {
  return absl::StrFormat("%.2f %.2f %.2f %d/%d %d\n", l1, l5, l15, running,
                         total, last_pid);
}

std::string StatText(const std::vector<CpuTimes>& cpus, int64_t btime,
                     uint64_t processes, int running, int blocked) {
  CpuTimes sum;
  for (const CpuTimes& c : cpus) {
    sum.user += c.user;
    sum.nice += c.nice;
    sum.system += c.system;
    sum.idle += c.idle;
  }
  // user nice system idle iowait irq softirq steal guest guest_nice.
  auto line = [](const std::string& name, const CpuTimes& c) {
    return absl::StrFormat("%s %u %u %u %u 0 0 0 0 0 0\n", name, c.user, c.nice,
                           c.system, c.idle);
  };
  std::string s = line("cpu ", sum);
  for (size_t i = 0; i < cpus.size(); i++) {
    s += line(absl::StrCat("cpu", i), cpus[i]);
  }
  absl::StrAppendFormat(&s,
                        "intr 0\nctxt 0\nbtime %d\nprocesses %u\n"
                        "procs_running %d\nprocs_blocked %d\nsoftirq 0 0 0 0 "
                        "0 0 0 0 0 0 0\n",
                        btime, processes, running, blocked);
  return s;
}

std::string FdInfoText(int64_t pos, int flags, uint64_t mnt_id, uint64_t ino) {
  return absl::StrFormat("pos:\t%d\nflags:\t0%o\nmnt_id:\t%u\nino:\t%u\n", pos,
                         flags, mnt_id, ino);
}

}  // namespace sandboxd::fs::proc
