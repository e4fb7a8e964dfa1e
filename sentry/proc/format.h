// The text of procfs files, from plain data: each function prints one file
// (or one line) exactly as Linux's fs/proc does, field order and spacing
// included, because procps (ps, top, free) and libc parse it. Nothing here
// touches the kernel, so that the formats are unit-tested on their own
// (format_test.cc); procfs.cc gathers the data.
#ifndef SANDBOXD_SENTRY_PROC_FORMAT_H_
#define SANDBOXD_SENTRY_PROC_FORMAT_H_

#include <sys/resource.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sentry/fs/credentials.h"

namespace sandboxd::fs::proc {

// USER_HZ: the unit of times in /proc/[pid]/stat and /proc/stat.
inline constexpr int64_t kClockTicksPerSecond = 100;
inline constexpr uint64_t kPageSize = 4096;

// Memory of one address space, in bytes.
struct MemoryUsage {
  uint64_t vm_size = 0;  // every VMA
  uint64_t rss = 0;      // backed by memory (Sentry's PMAs)
  uint64_t data = 0;     // private writable, not stack
  uint64_t stack = 0;    // [stack] and MAP_GROWSDOWN
  uint64_t exe = 0;      // executable file mappings
  uint64_t shared = 0;   // MAP_SHARED mappings (for statm)
};

// What /proc/[pid]/stat and status say about one task (a thread, or a
// process through its leader).
struct TaskStat {
  pid_t pid = 0;  // the tid for /proc/[pid]/task/[tid], else the tgid
  pid_t tgid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  uint32_t tty_nr = 0;  // the controlling terminal, new_encode_dev form
  pid_t tpgid = -1;     // its foreground process group; -1: no terminal
  std::string comm;
  char state = 'R';  // R, S, T, Z
  int num_threads = 1;
  int64_t start_ticks = 0;  // since the sandbox's boot, in clock ticks
  uint64_t utime_ticks = 0;
  uint64_t stime_ticks = 0;
  bool has_mm = true;  // false for zombies: memory fields are 0
  MemoryUsage mem;
  uint64_t rss_limit = UINT64_MAX;  // RLIMIT_RSS
  uint64_t start_code = 0, end_code = 0, start_stack = 0;
  uint64_t start_data = 0, end_data = 0, start_brk = 0;
  uint64_t arg_start = 0, arg_end = 0, env_start = 0, env_end = 0;
  uint64_t sig_pending = 0;  // the task's own pending set
  uint64_t shared_pending = 0;
  uint64_t sig_blocked = 0;
  uint64_t sig_ignored = 0;
  uint64_t sig_caught = 0;
  int exit_signal = 17;
  int exit_code = 0;  // wait status, for zombies
  uint32_t umask = 022;
  uint64_t fd_size = 64;
  uint64_t max_signals = 0;  // RLIMIT_SIGPENDING, for SigQ
  // Uid, Gid, Groups and Cap* (null: a zombie's, shown as root's).
  std::shared_ptr<const fs::Credentials> creds;
  bool no_new_privs = false;
  // stat's priority, nice, rt_priority and policy fields.
  struct Sched {
    int nice = 0;
    int policy = 0;
    int rt_priority = 0;
  } sched;
};

// /proc/[pid]/stat: one line of 52 fields.
std::string StatLine(const TaskStat& t);
// /proc/[pid]/status.
std::string StatusText(const TaskStat& t);
// /proc/[pid]/statm: seven page counts.
std::string StatmLine(const TaskStat& t);

// One line of /proc/[pid]/maps.
struct MapsEntry {
  uint64_t start = 0, end = 0;
  bool read = false, write = false, exec = false, is_private = true;
  uint64_t offset = 0;
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t ino = 0;
  std::string name;  // path, [stack], [heap], or empty
};
std::string MapsLine(const MapsEntry& e);

// /proc/[pid]/limits from RLIMIT_* values (index = resource).
std::string LimitsText(const std::array<rlimit, RLIM_NLIMITS>& limits);

// /proc/meminfo, in bytes.
struct MemInfo {
  uint64_t total = 0;
  uint64_t used = 0;   // what the sandbox's memory holds
  uint64_t shmem = 0;  // of which shared memory and tmpfs (not known: 0)
};
std::string MemInfoText(const MemInfo& m);

// /proc/vmstat: page counters (the ones procps reads), from MemInfo.
std::string VmStatText(const MemInfo& m);

// /proc/uptime: seconds since boot and the idle time of all CPUs.
std::string UptimeText(int64_t uptime_ns, int64_t idle_ns);

// /proc/loadavg.
std::string LoadAvgText(double l1, double l5, double l15, int running,
                        int total, pid_t last_pid);

// /proc/stat. CPU times are per CPU in clock ticks (user, nice, system,
// idle); `btime` is the boot time in seconds since the epoch.
struct CpuTimes {
  uint64_t user = 0, nice = 0, system = 0, idle = 0;
};
std::string StatText(const std::vector<CpuTimes>& cpus, int64_t btime,
                     uint64_t processes, int running, int blocked);

// /proc/[pid]/fdinfo/N.
std::string FdInfoText(int64_t pos, int flags, uint64_t mnt_id, uint64_t ino);

}  // namespace sandboxd::fs::proc

#endif  // SANDBOXD_SENTRY_PROC_FORMAT_H_
