// systrap's counters, always on: plain atomics, written lock-free on the
// hand-over path and read by anyone through Systrap::stats().
// Systrap::ExportStats copies them (ToProto) into the SentryStats that
// sandboxd exports at /metrics (daemon/README.md, "platform metrics").
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_STATS_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_STATS_H_

#include <atomic>
#include <cstdint>

namespace sandboxd::control {
class SystrapStats;  // proto/platform_stats.proto
}  // namespace sandboxd::control

namespace sandboxd::systrap {

// Latency histograms: bucket i counts latencies in [2^i, 2^(i+1)) ns
// (bucket 0 also takes 0 ns; the last takes everything above).
inline constexpr int kLatencyBuckets = 32;

// Which waiting side a fast-path figure is about.
enum class Side {
  kSentry = 0,  // a Sentry thread waiting for its stub thread's next trap
  kStub = 1,    // a stub thread waiting for the Sentry's reply
};

struct Stats;
// Copies `s` into `out` (relaxed loads: each figure is exact, the set is not
// one atomic snapshot).
void ToProto(const Stats& s, control::SystrapStats* out);

struct Stats {
  // Fast path (fastpath.h), indexed by Side.
  std::atomic<uint32_t> spinning[2] = {};  // 1: that side spins before sleeping
  std::atomic<uint64_t> enabled[2] = {};   // times the side was turned on
  std::atomic<uint64_t> disabled[2] = {};  // times it was turned off
  std::atomic<uint64_t> evaluations{0};    // recording periods evaluated
  std::atomic<uint64_t> idle_resets{0};    // "on" reset after 2 idle periods
  // Hand-over latency, log2 ns buckets: [kSentry] from the stub publishing a
  // context to the Sentry seeing it; [kStub] from the Sentry publishing its
  // reply to the stub seeing it.
  std::atomic<uint64_t> latency[2][kLatencyBuckets] = {};

  // Gauges, sampled when Systrap::stats() is called: stub workers not
  // asleep on their ring (running application code, or spinning for the
  // next context), and contexts queued in the rings and not yet taken by
  // a worker (README.md, "The context queue").
  std::atomic<int64_t> stub_threads_awake{0};
  std::atomic<int64_t> contexts_queued{0};
  std::atomic<uint64_t> patched_sites{0};
  // Of those, written without the membarrier SYNC_CORE between the steps
  // (the host refused it: patching.cc).
  std::atomic<uint64_t> patch_unserialized{0};
  // Syscalls of another ABI (`int $0x80` from 64-bit code: the i386
  // table) refused with ENOSYS (context.cc).
  std::atomic<uint64_t> compat_syscalls_refused{0};
  // Stub workers the host refused (clone failed: its pids, threads or
  // memory limits); the context waited for a worker, or its clone got
  // EAGAIN (README.md, "A worker the host refuses").
  std::atomic<uint64_t> workers_refused{0};
};

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_STATS_H_
