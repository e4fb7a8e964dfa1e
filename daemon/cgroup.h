// Per-sandbox cgroups: one cgroup per Sentry, under a directory the daemon
// owns in each hierarchy, with memory, CPU and pids limits and usage counters.
//
// Two layouts are supported:
//   v2: one unified hierarchy (cgroup2). <root>/<parent>/<name>.
//   v1: one hierarchy per controller (memory, cpu, cpuacct, pids, freezer;
//       co-mounted ones such as "cpu,cpuacct" share a directory). A Cgroup is
//       then one directory per hierarchy, all with the same relative path.
// Auto-detection picks v2 only when memory, cpu and pids are all available
// in the unified hierarchy; a host with v1 controllers and a v2 hierarchy
// mounted beside them (systemd's "hybrid" layout) uses v1.
//
// Thread safety: CgroupManager is immutable after Create, and its methods may
// be called concurrently. A Cgroup may be used from several threads; it holds
// no state of its own beyond a "removed" flag (the kernel's files are
// the state).
#ifndef SANDBOXD_DAEMON_CGROUP_H_
#define SANDBOXD_DAEMON_CGROUP_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sandboxd {
namespace daemon {

// 0 = unlimited.
struct CgroupLimits {
  uint64_t memory_bytes = 0;  // v2 memory.max; v1 memory.limit_in_bytes (and memsw)
  uint64_t cpu_millis = 0;    // 1000 = one CPU; cpu.max / cpu.cfs_quota_us
  uint64_t pids = 0;          // pids.max: tasks (threads), not processes
};

// The host tasks (pids.max) a Sentry needs for a sandbox limited to
// `sandbox_tasks` tasks of its own (spec.limits.pids, which the Sentry
// enforces itself: clone beyond it gets EAGAIN). Each application task is
// at most four host tasks (its Sentry thread and, on systrap, a stub
// worker; a process adds its stub process's control thread and the
// Sentry's reaper of it), plus the Sentry's own threads and processes
// (timers, poller, runner, WaitPid threads, the stub template and its
// pool). With less, the host would refuse the Sentry before the sandbox
// reached its own limit. 0 stays 0 (no limit).
inline constexpr uint64_t kHostTasksPerSandboxTask = 4;
inline constexpr uint64_t kSentryHostTasks = 64;
inline uint64_t HostPidsFor(uint64_t sandbox_tasks) {
  if (sandbox_tasks == 0) return 0;
  return sandbox_tasks * kHostTasksPerSandboxTask + kSentryHostTasks;
}

struct CgroupUsage {
  uint64_t memory_bytes = 0;       // memory.current / memory.usage_in_bytes
  uint64_t memory_peak_bytes = 0;  // memory.peak / memory.max_usage_in_bytes
  absl::Duration cpu_user;
  absl::Duration cpu_system;
  uint32_t pids = 0;  // tasks (threads) in the cgroup
};

enum class CgroupVersion { kAuto, kV1, kV2 };

// cpu.weight's default and minimum (cgroup v2's scale).
inline constexpr uint32_t kCpuWeightDefault = 100;
inline constexpr uint32_t kCpuWeightIdle = 1;

struct CgroupOptions {
  // kV1 / kV2 force a layout (tests exercise both on a hybrid host); Create
  // fails when the forced layout is not mounted.
  CgroupVersion version = CgroupVersion::kAuto;
  // Where mounts are read from; tests point it at a fake mountinfo that maps
  // hierarchies onto plain directories.
  std::string mountinfo_path = "/proc/self/mountinfo";
  // v2 only: kill with cgroup.kill when the kernel has it (5.14+); false
  // makes KillAll freeze and kill pid by pid, as on older kernels.
  bool use_cgroup_kill = true;
};

class Cgroup;
struct CgroupLayout;  // defined in cgroup.cc

class CgroupManager {
 public:
  // `parent` is this daemon's own directory name under each hierarchy (e.g.
  // "sandboxd"; tests use a unique one). It is created if missing.
  static absl::StatusOr<std::unique_ptr<CgroupManager>> Create(
      const std::string& parent, const CgroupOptions& options = {});
  ~CgroupManager();

  CgroupVersion version() const;  // kV1 or kV2, never kAuto
  const std::string& parent() const;
  // For logs: "v1 (memory,cpu,cpuacct,pids,freezer at /sys/fs/cgroup/*/sandboxd)".
  std::string Describe() const;
  // Whether limits of this kind can be set ("memory", "cpu", "pids").
  bool HasController(const std::string& controller) const;

  // Whether Create made the parent directory (in some hierarchy) rather
  // than finding it: a daemon removes only a parent it made.
  bool created_parent() const;
  // Called (from New, on any thread) when New had to make the parent again
  // because it was gone: the parent is then this daemon's to remove, as if
  // Create had made it. Set before the first New.
  void set_on_parent_made(std::function<void()> f) { on_parent_made_ = std::move(f); }

  // Creates the cgroup `name` (one per Sentry) under the parent. Fails with
  // ALREADY_EXISTS when it exists (a stale one: call CleanupStale first).
  absl::StatusOr<std::unique_ptr<Cgroup>> New(const std::string& name);
  // The existing cgroup `name` under the parent (a re-adopted Sentry's, or
  // a stale one to kill and remove); NOT_FOUND when no hierarchy has it.
  absl::StatusOr<std::unique_ptr<Cgroup>> Open(const std::string& name);
  // Kills the processes in, and removes, every cgroup under the parent: the
  // leftovers of an earlier daemon. Call before the first New.
  absl::Status CleanupStale();
  // Removes the parent directories (after every Cgroup is gone): at shutdown
  // and in tests.
  absl::Status RemoveParent();

 private:
  explicit CgroupManager(std::shared_ptr<const CgroupLayout> layout);
  std::shared_ptr<const CgroupLayout> layout_;
  bool created_parent_ = false;
  std::function<void()> on_parent_made_;
};

// One sandbox's cgroup. May outlive its CgroupManager.
class Cgroup {
 public:
  ~Cgroup();  // KillAll + Remove, best effort (errors are logged)
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;

  const std::string& name() const { return name_; }

  // Moves a process (all of its threads) into the cgroup, in every hierarchy.
  absl::Status AddProcess(pid_t pid);
  // Sets all three limits; a zero field removes that limit. FAILED_PRECONDITION
  // when a non-zero limit needs a controller this host does not offer.
  absl::Status SetLimits(const CgroupLimits& limits);
  absl::StatusOr<CgroupUsage> Usage() const;
  // The cgroup's share of contended CPU, on the cgroup v2 scale (1..10000,
  // default kCpuWeightDefault): cpu.weight, or v1's cpu.shares (weight *
  // 1024 / 100). OK and nothing done without the cpu controller.
  absl::Status SetCpuWeight(uint32_t weight);
  // Processes (thread-group ids) in the cgroup.
  absl::StatusOr<std::vector<pid_t>> Procs() const;
  // SIGKILLs everything in the cgroup and waits until it is empty: cgroup.kill
  // on v2 when present; otherwise freeze, kill, thaw (so that a forking
  // process cannot escape), repeated until empty. DEADLINE_EXCEEDED after
  // `timeout` (e.g. a process stuck in an uninterruptible sleep).
  absl::Status KillAll(absl::Duration timeout = absl::Seconds(10));
  // Removes the cgroup's directories; fails (FAILED_PRECONDITION) while
  // processes are in it. Idempotent.
  absl::Status Remove();

 private:
  friend class CgroupManager;
  Cgroup(std::shared_ptr<const CgroupLayout> layout, std::string name);

  std::shared_ptr<const CgroupLayout> layout_;
  std::string name_;
  std::atomic<bool> removed_{false};
};

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_CGROUP_H_
