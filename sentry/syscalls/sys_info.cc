// Identity, limits, wall-clock time, randomness, scheduling and arch_prctl.
// (Clocks, sleeps, timers and CPU usage: sys_time.cc.)
#include <asm/prctl.h>
#include <errno.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "sentry/syscalls/args.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

int64_t SysGetpid(Task& t, const SyscallArgs&) { return t.group().tgid(); }
int64_t SysGettid(Task& t, const SyscallArgs&) { return t.tid(); }

int64_t SysUname(Task& t, const SyscallArgs& a) {
  struct utsname u;
  std::memset(&u, 0, sizeof(u));
  std::strncpy(u.sysname, "Linux", sizeof(u.sysname) - 1);
  std::strncpy(u.nodename, t.kernel().options().hostname.c_str(),
               sizeof(u.nodename) - 1);
  std::strncpy(u.release, "6.1.0", sizeof(u.release) - 1);
  std::strncpy(u.version, "#1 SMP sandboxd", sizeof(u.version) - 1);
  std::strncpy(u.machine, "x86_64", sizeof(u.machine) - 1);
  std::strncpy(u.domainname, "(none)", sizeof(u.domainname) - 1);
  return CopyOutObj(t, a.a[0], u);
}

int64_t Prlimit(Task& t, pid_t pid, uint64_t resource, uint64_t new_addr,
                uint64_t old_addr) {
  if (resource >= RLIM_NLIMITS) return -EINVAL;
  std::shared_ptr<kernel::ThreadGroup> g = t.group_ptr();
  if (pid != 0 && pid != t.group().tgid()) {
    std::shared_ptr<kernel::Task> other = t.kernel().FindTask(pid);
    if (other == nullptr) return -ESRCH;
    g = other->group_ptr();
  }
  rlimit old = g->GetLimit(static_cast<int>(resource));
  if (new_addr != 0) {
    rlimit next;
    RETURN_IF_ERRNO(CopyInObj(t, new_addr, &next));
    if (next.rlim_cur > next.rlim_max) return -EINVAL;
    if (resource == RLIMIT_NOFILE && next.rlim_max > 1048576) return -EPERM;
    g->SetLimit(static_cast<int>(resource), next);
  }
  if (old_addr != 0) RETURN_IF_ERRNO(CopyOutObj(t, old_addr, old));
  return 0;
}

int64_t SysPrlimit64(Task& t, const SyscallArgs& a) {
  return Prlimit(t, static_cast<pid_t>(a.a[0]), a.a[1], a.a[2], a.a[3]);
}
int64_t SysGetrlimit(Task& t, const SyscallArgs& a) {
  return Prlimit(t, 0, a.a[0], 0, a.a[1]);
}
int64_t SysSetrlimit(Task& t, const SyscallArgs& a) {
  return Prlimit(t, 0, a.a[0], a.a[1], 0);
}

int64_t SysGetrandom(Task& t, const SyscallArgs& a) {
  if (a.a[2] & ~(GRND_NONBLOCK | GRND_RANDOM | 0x4 /* GRND_INSECURE */)) {
    return -EINVAL;
  }
  uint64_t n = std::min<uint64_t>(a.a[1], 33554431);
  uint8_t buf[4096];
  uint64_t done = 0;
  while (done < n) {
    size_t want = std::min<uint64_t>(sizeof(buf), n - done);
    ssize_t r = getrandom(buf, want, 0);
    if (r < 0) return done > 0 ? done : -errno;
    int64_t c = t.mm().CopyOut(a.a[0] + done, buf, r);
    if (c < 0) return done > 0 ? done : c;
    done += c;
    if (c < r) break;
  }
  return done;
}

int64_t SysGettimeofday(Task& t, const SyscallArgs& a) {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  if (a.a[0] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[0], tv));
  if (a.a[1] != 0) {
    struct timezone tz = {0, 0};
    RETURN_IF_ERRNO(CopyOutObj(t, a.a[1], tz));
  }
  return 0;
}

int64_t SysTime(Task& t, const SyscallArgs& a) {
  int64_t now = ::time(nullptr);
  if (a.a[0] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[0], now));
  return now;
}

int64_t SysSchedYield(Task&, const SyscallArgs&) {
  sched_yield();
  return 0;
}

// The CPUs the sandbox may see: the host's affinity mask, cut to the first
// KernelOptions::max_cpus of them (a CPU quota of N, rounded up, shows N
// CPUs, so that nproc and thread pools size themselves to it).
int VisibleCpus(kernel::Kernel& k, cpu_set_t* set) {
  CPU_ZERO(set);
  if (sched_getaffinity(0, sizeof(*set), set) != 0) return -errno;
  const int max = k.max_cpus();
  int seen = 0;
  for (int i = 0; i < CPU_SETSIZE; i++) {
    if (!CPU_ISSET(i, set)) continue;
    if (max > 0 && seen >= max) CPU_CLR(i, set);
    seen++;
  }
  return 0;
}

// The task sched_getaffinity/sched_setaffinity name (0: the caller).
std::shared_ptr<kernel::Task> AffinityTarget(Task& t, uint64_t arg) {
  const pid_t pid = static_cast<pid_t>(arg);
  if (pid == 0) return t.shared_from_this();
  if (pid < 0) return nullptr;
  return t.kernel().FindTask(pid);
}

// The task's mask (sched_setaffinity's) within the CPUs the sandbox sees.
int TaskCpus(Task& t, kernel::Task& p, cpu_set_t* set) {
  if (int r = VisibleCpus(t.kernel(), set); r < 0) return r;
  std::array<uint64_t, kernel::Task::SchedState::kAffinityWords> mask;
  t.kernel().WithTasklistLock([&] { mask = p.sched.affinity; });
  static_assert(sizeof(mask) == sizeof(cpu_set_t));
  cpu_set_t m;
  std::memcpy(&m, mask.data(), sizeof(m));
  CPU_AND(set, set, &m);
  return 0;
}

int64_t SysSchedGetaffinity(Task& t, const SyscallArgs& a) {
  cpu_set_t set;
  if (int r = VisibleCpus(t.kernel(), &set); r < 0) return r;
  // The kernel copies out cpumask_size(): whole longs covering nr_cpu_ids.
  int ncpu = 0;
  for (int i = 0; i < CPU_SETSIZE; i++) {
    if (CPU_ISSET(i, &set)) ncpu = i + 1;
  }
  uint64_t size = ((ncpu + 63) / 64) * 8;
  if (a.a[1] < size || (a.a[1] & 7) != 0) return -EINVAL;
  std::shared_ptr<kernel::Task> p = AffinityTarget(t, a.a[0]);
  if (p == nullptr) return -ESRCH;
  if (int r = TaskCpus(t, *p, &set); r < 0) return r;
  RETURN_IF_ERRNO(CopyOutBytes(t, a.a[2], &set, size));
  return size;
}

// Linux keeps the mask and reports it back (sched_getaffinity, the
// Cpus_allowed lines of /proc/PID/status); placement of the Sentry's
// threads on the host stays the host's business. A mask without any CPU
// the sandbox sees is EINVAL.
int64_t SysSchedSetaffinity(Task& t, const SyscallArgs& a) {
  cpu_set_t want, have;
  CPU_ZERO(&want);
  uint64_t n = std::min<uint64_t>(a.a[1], sizeof(want));
  RETURN_IF_ERRNO(CopyInBytes(t, a.a[2], &want, n));
  std::shared_ptr<kernel::Task> p = AffinityTarget(t, a.a[0]);
  if (p == nullptr) return -ESRCH;
  VisibleCpus(t.kernel(), &have);
  CPU_AND(&want, &want, &have);
  if (CPU_COUNT(&want) == 0) return -EINVAL;
  std::array<uint64_t, kernel::Task::SchedState::kAffinityWords> mask;
  std::memcpy(mask.data(), &want, sizeof(want));
  t.kernel().WithTasklistLock([&] { p->sched.affinity = mask; });
  return 0;
}

int64_t SysGetcpu(Task& t, const SyscallArgs& a) {
  unsigned cpu = 0, node = 0;
  if (getcpu(&cpu, &node) != 0) return -errno;
  if (a.a[0] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[0], cpu));
  if (a.a[1] != 0) RETURN_IF_ERRNO(CopyOutObj(t, a.a[1], node));
  return 0;
}

// The host's memory total (or the sandbox's limit); the sandbox's own uptime, memory use and task
// count, as its /proc/uptime, /proc/meminfo and /proc/loadavg say.
int64_t SysSysinfo(Task& t, const SyscallArgs& a) {
  struct sysinfo si;
  if (sysinfo(&si) != 0) return -errno;
  kernel::Kernel& k = t.kernel();
  si.uptime = (kernel::MonotonicNanos() - k.boot_ns()) / 1000000000;
  si.loads[0] = si.loads[1] = si.loads[2] = 0;  // no load average yet
  const uint64_t unit = si.mem_unit != 0 ? si.mem_unit : 1;
  if (k.memory_limit() != 0) {
    si.totalram = std::min<uint64_t>(si.totalram, k.memory_limit() / unit);
  }
  const uint64_t used = k.memory_file().AllocatedBytes() / unit;
  si.freeram = si.totalram > used ? si.totalram - used : 0;
  si.sharedram = si.bufferram = 0;
  si.totalswap = si.freeswap = 0;
  si.totalhigh = si.freehigh = 0;
  int procs = 0;
  for (const auto& g : k.ThreadGroups()) {
    k.WithTasklistLock([&] {
      if (!g->zombie) procs += static_cast<int>(g->Tasks().size());
    });
  }
  si.procs = static_cast<uint16_t>(procs);
  return CopyOutObj(t, a.a[0], si);
}

int64_t SysArchPrctl(Task& t, const SyscallArgs& a) {
  platform::Regs& r = t.cpu().regs;
  const uint64_t max = t.kernel().platform().MaxUserAddress();
  switch (a.a[0]) {
    case ARCH_SET_FS:
      if (a.a[1] >= max) return -EPERM;
      r.fs_base = a.a[1];
      return 0;
    case ARCH_SET_GS:
      if (a.a[1] >= max) return -EPERM;
      r.gs_base = a.a[1];
      return 0;
    case ARCH_GET_FS:
      return CopyOutObj(t, a.a[1], r.fs_base);
    case ARCH_GET_GS:
      return CopyOutObj(t, a.a[1], r.gs_base);
    default:
      // CET, CPUID faulting, AMX permissions: not offered.
      return -EINVAL;
  }
}

}  // namespace

void RegisterInfo(Entry* table) {
  table[SYS_getpid] = {SysGetpid, "getpid"};
  table[SYS_gettid] = {SysGettid, "gettid"};
  table[SYS_uname] = {SysUname, "uname"};
  table[SYS_prlimit64] = {SysPrlimit64, "prlimit64"};
  table[SYS_getrlimit] = {SysGetrlimit, "getrlimit"};
  table[SYS_setrlimit] = {SysSetrlimit, "setrlimit"};
  table[SYS_getrandom] = {SysGetrandom, "getrandom"};
  table[SYS_gettimeofday] = {SysGettimeofday, "gettimeofday"};
  table[SYS_time] = {SysTime, "time"};
  table[SYS_sched_yield] = {SysSchedYield, "sched_yield"};
  table[SYS_sched_getaffinity] = {SysSchedGetaffinity, "sched_getaffinity"};
  table[SYS_sched_setaffinity] = {SysSchedSetaffinity, "sched_setaffinity"};
  table[SYS_getcpu] = {SysGetcpu, "getcpu"};
  table[SYS_sysinfo] = {SysSysinfo, "sysinfo"};
  table[SYS_arch_prctl] = {SysArchPrctl, "arch_prctl"};
}

}  // namespace sandboxd::syscalls
