// The daemon's Prometheus metrics, served at /metrics in the text format.
//
// Every instrument is declared once, in metrics.cc's constructor, with its
// name, unit and help; label values are bounded (states, platforms, "hit" or
// "miss", syscall numbers, and the ids of live sandboxes, which RemoveSandbox
// drops when a sandbox is destroyed).
//
//   sandboxd_sandboxes{state}                        gauge
//   sandboxd_create_seconds{pool="hit|miss",platform} histogram
//   sandboxd_checkpoint_seconds{outcome="ok|error"}  histogram
//   sandboxd_restore_seconds{outcome="ok|error"}     histogram
//   sandboxd_pool_size{platform}                     gauge
//   sandboxd_pool_refill_seconds{platform}           histogram
//   sandboxd_sentry_crashes_total                    counter
//   sandboxd_sandbox_exits_total{reason}             counter
//   sandboxd_unimplemented_syscalls_total{nr}        counter
//   sandboxd_sandbox_memory_bytes{id}                gauge
//   sandboxd_sandbox_cpu_seconds_total{id}           counter
//   sandboxd_restore_bytes_loaded_total              counter
//   sandboxd_restore_pages_loaded_total              counter
//   sandboxd_restore_bytes_failed_total              counter
//   sandboxd_restore_page_waits_total                counter
//   sandboxd_restore_page_wait_seconds               histogram
//   sandboxd_restore_page_waiters{id}                gauge
//   sandboxd_restore_loads_in_progress               gauge
//   sandboxd_restore_load_seconds{outcome="ok|error"} histogram
//
// and the platforms' counters (SetPlatformStats; daemon/README.md has the
// table): sandboxd_sandbox_platform_info, sandboxd_systrap_*, sandboxd_kvm_*.
//
// Thread safety: every method may be called from any thread.
#ifndef SANDBOXD_DAEMON_METRICS_H_
#define SANDBOXD_DAEMON_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace sandboxd {
namespace control {
class PlatformStats;     // proto/platform_stats.proto
class RestorePageStats;  // proto/control.proto
class SentryStats;       // proto/control.proto
}  // namespace control

namespace daemon {

class Metrics {
 public:
  // `listen_address` is "host:port" for the HTTP server ("127.0.0.1:0" picks
  // a free port), or "" to keep the metrics in memory only (Scrape still
  // works). Fails when the address cannot be bound. `platforms`: those the
  // daemon offers; only their families (sandboxd_systrap_*,
  // sandboxd_kvm_*) are registered, so a platform that is not enabled
  // exports nothing.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(
      const std::string& listen_address,
      const std::set<std::string>& platforms = {"systrap", "kvm"});
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The bound HTTP port (the real one when 0 was asked for); 0 when not served.
  int port() const { return port_; }
  // "host:port" actually bound, e.g. "127.0.0.1:39211"; "" when not served.
  const std::string& address() const { return address_; }

  // For instruments declared elsewhere (platform metrics). The registry lives
  // as long as this object.
  prometheus::Registry& Registry() { return *registry_; }

  // The current metrics in the Prometheus text format, as /metrics serves them.
  std::string Scrape() const;

  // sandboxd_sandboxes{state}: number of sandboxes in `state` ("created",
  // "running", "paused", "stopped", "failed").
  void SetSandboxes(absl::string_view state, int64_t n);
  // sandboxd_create_seconds{pool,platform}: wall time of one Create call.
  void ObserveCreate(bool pool_hit, absl::string_view platform, absl::Duration d);
  // sandboxd_checkpoint_seconds{outcome} and sandboxd_restore_seconds
  // {outcome}: wall time of one Checkpoint or Restore call that reached
  // its sandbox or image (a malformed request is not counted); the
  // histograms' _count series count the calls by outcome.
  void ObserveCheckpoint(bool ok, absl::Duration d);
  void ObserveRestore(bool ok, absl::Duration d);
  // sandboxd_pool_size{platform}: warm Sentries ready in the pool.
  void SetPoolSize(absl::string_view platform, int64_t n);
  // sandboxd_pool_refill_seconds{platform}: time to start one warm Sentry.
  void ObservePoolRefill(absl::string_view platform, absl::Duration d);
  // sandboxd_sentry_crashes_total: Sentries that died without being asked to.
  void IncSentryCrashes();
  // sandboxd_sandbox_exits_total{reason}: a sandbox's init ended, by how
  // (Sandbox's ExitReasonLabel: exited, signal, oom, failed).
  void IncSandboxExit(absl::string_view reason);
  // sandboxd_unimplemented_syscalls_total{nr}: ENOSYS returns, as reported by
  // the Sentries.
  void AddUnimplemented(int nr, uint64_t n);
  // sandboxd_sandbox_memory_bytes{id} and sandboxd_sandbox_cpu_seconds_total{id}
  // from the sandbox's cgroup. cpu_seconds is the cgroup's cumulative figure;
  // the counter advances by the difference (it never goes backwards).
  void SetSandboxUsage(absl::string_view id, uint64_t memory_bytes,
                       double cpu_seconds);
  // A report of sandbox `id`'s platform counters (cumulative since its
  // Sentry started). The daemon-wide counters and histograms advance by
  // what is new since the last report of `id` (a stale report moves
  // nothing); per-sandbox gauges are set; the one-off creation times
  // (kvm) are observed the first time they are reported.
  void SetPlatformStats(absl::string_view id, const control::PlatformStats& st);
  // A whole Stats report of sandbox `id`: its platform's counters as
  // SetPlatformStats, and the Sentry's own (sandboxd_oom_kills_total,
  // sandboxd_memory_limit_refusals_total), moved the same way by what is
  // new since the last report of `id`.
  void SetSentryStats(absl::string_view id, const control::SentryStats& st);
  // A report of restored sandbox `id`'s page loader (cumulative since its
  // restore): the daemon-wide counters and the wait histogram advance by
  // what is new since the last report of `id`; its waiters gauge is set;
  // the load's duration is observed once, in the first report that says
  // it is done (outcome "error" when pages failed to load); a load that
  // is not done counts in sandboxd_restore_loads_in_progress until it is,
  // or until RemoveSandbox.
  void SetRestorePages(absl::string_view id, const control::RestorePageStats& st);
  // Drops the per-sandbox series of `id` (at Destroy).
  void RemoveSandbox(absl::string_view id);

 private:
  explicit Metrics(const std::set<std::string>& platforms);
  absl::Status Serve(const std::string& listen_address);

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;  // null when not served
  int port_ = 0;
  std::string address_;

  // Families are owned by registry_.
  prometheus::Family<prometheus::Gauge>* sandboxes_;
  prometheus::Family<prometheus::Histogram>* create_seconds_;
  prometheus::Family<prometheus::Histogram>* checkpoint_seconds_;
  prometheus::Family<prometheus::Histogram>* restore_seconds_;
  prometheus::Family<prometheus::Gauge>* pool_size_;
  prometheus::Family<prometheus::Histogram>* pool_refill_seconds_;
  prometheus::Counter* sentry_crashes_;
  prometheus::Family<prometheus::Counter>* sandbox_exits_;
  prometheus::Family<prometheus::Counter>* unimplemented_;
  prometheus::Family<prometheus::Gauge>* sandbox_memory_;
  prometheus::Family<prometheus::Counter>* sandbox_cpu_;

  // Platform metrics (SetPlatformStats). Daemon-wide counters and
  // histograms: a destroyed sandbox's share stays in them. A platform's
  // are null when the daemon does not offer it (Create's `platforms`).
  prometheus::Family<prometheus::Gauge>* platform_info_;
  prometheus::Family<prometheus::Gauge>* systrap_spinning_ = nullptr;
  prometheus::Family<prometheus::Counter>* systrap_enabled_ = nullptr;
  prometheus::Family<prometheus::Counter>* systrap_disabled_ = nullptr;
  prometheus::Counter* systrap_evaluations_ = nullptr;
  prometheus::Counter* systrap_idle_resets_ = nullptr;
  prometheus::Family<prometheus::Histogram>* systrap_handover_ = nullptr;
  prometheus::Family<prometheus::Gauge>* systrap_awake_ = nullptr;
  prometheus::Family<prometheus::Gauge>* systrap_queued_ = nullptr;
  prometheus::Counter* systrap_patched_sites_ = nullptr;
  prometheus::Counter* systrap_patch_unserialized_ = nullptr;
  prometheus::Family<prometheus::Counter>* kvm_exits_ = nullptr;
  prometheus::Histogram* kvm_vm_create_ = nullptr;
  prometheus::Histogram* kvm_vcpu0_create_ = nullptr;
  prometheus::Histogram* kvm_pool_fill_ = nullptr;
  prometheus::Counter* kvm_memslot_adds_ = nullptr;
  prometheus::Counter* kvm_memslot_add_seconds_ = nullptr;
  prometheus::Counter* kvm_shadow_flushes_ = nullptr;
  prometheus::Counter* kvm_shadow_flush_seconds_ = nullptr;
  prometheus::Counter* kvm_vcpus_refused_ = nullptr;
  prometheus::Counter* systrap_workers_refused_ = nullptr;
  prometheus::Counter* oom_kills_ = nullptr;
  prometheus::Counter* memory_limit_refusals_ = nullptr;
  prometheus::Family<prometheus::Gauge>* kvm_vcpus_ = nullptr;
  prometheus::Family<prometheus::Gauge>* kvm_pool_free_ = nullptr;

  // Restore page loading (SetRestorePages).
  prometheus::Counter* restore_bytes_loaded_;
  prometheus::Counter* restore_pages_loaded_;
  prometheus::Counter* restore_bytes_failed_;
  prometheus::Counter* restore_waits_;
  prometheus::Histogram* restore_wait_seconds_;
  prometheus::Family<prometheus::Gauge>* restore_waiters_;
  prometheus::Gauge* restore_in_progress_;
  prometheus::Family<prometheus::Histogram>* restore_load_seconds_;

  // Per-sandbox series, so that RemoveSandbox can drop them.
  struct SandboxSeries {
    prometheus::Gauge* memory;
    prometheus::Counter* cpu;
  };
  // What SetPlatformStats keeps per sandbox: the last cumulative value of
  // each counter (in the order SetPlatformStats visits them), which
  // one-off times were observed, and the gauges to drop at RemoveSandbox.
  struct PlatformSeries {
    std::vector<uint64_t> last;
    bool vm_create_seen = false;
    bool vcpu0_seen = false;
    bool pool_fill_seen = false;
    std::vector<std::pair<prometheus::Family<prometheus::Gauge>*, prometheus::Gauge*>> gauges;
  };
  void SetPlatformGauge(PlatformSeries& ps, prometheus::Family<prometheus::Gauge>* family,
                        const std::map<std::string, std::string>& labels, double value);
  // What SetRestorePages keeps per sandbox.
  struct RestoreSeries {
    std::vector<uint64_t> last;
    bool in_progress = false;  // counted in restore_in_progress_
    bool done_seen = false;    // the load's duration observed
    prometheus::Gauge* waiters = nullptr;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, SandboxSeries> sandboxes_by_id_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, PlatformSeries> platform_by_id_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, RestoreSeries> restore_by_id_ ABSL_GUARDED_BY(mu_);
  // SetSentryStats's last cumulative values per sandbox.
  absl::flat_hash_map<std::string, std::vector<uint64_t>> sentry_last_by_id_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_METRICS_H_
