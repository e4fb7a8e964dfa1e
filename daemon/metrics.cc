#include "daemon/metrics.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "proto/control.pb.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd {
namespace daemon {

namespace {

// Latencies from a warm-pool hit (around a millisecond) to a cold Sentry on
// a loaded machine (seconds).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *b;
}

// One-off creation steps of a platform: a KVM VM or vCPU (hundreds of µs)
// up to a vCPU pool on a loaded host (tens of ms).
const prometheus::Histogram::BucketBoundaries& CreationBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25};
  return *b;
}

// systrap's hand-over histograms come as log2 ns buckets (platforms/systrap/
// stats.h: bucket i counts [2^i, 2^(i+1)) ns, the last one all above). The
// exported buckets are their upper edges, le = 2^k ns for k in
// [kFirstEdgeLog2, kLastEdgeLog2] (128 ns .. 2.1 s); the log2 buckets below
// 128 ns fold into the first, the last one is +Inf. Cumulative counts are
// exact at every edge.
constexpr int kFirstEdgeLog2 = 7;
constexpr int kLastEdgeLog2 = 31;

const prometheus::Histogram::BucketBoundaries& HandOverBuckets() {
  static const auto* b = [] {
    auto* v = new prometheus::Histogram::BucketBoundaries;
    for (int k = kFirstEdgeLog2; k <= kLastEdgeLog2; k++) v->push_back(std::ldexp(1.0, k) / 1e9);
    return v;
  }();
  return *b;
}

// A restore's page waits come as log2 µs buckets (mm::AsyncLoadStats:
// [0] < 2 µs, [i] in [2^i, 2^(i+1)) µs). The exported buckets are their
// upper edges, le = 2^k µs for k in [1, kLastWaitEdgeLog2] (2 µs .. 16.8 s);
// the buckets above fold into +Inf. Cumulative counts are exact.
constexpr int kLastWaitEdgeLog2 = 24;

const prometheus::Histogram::BucketBoundaries& PageWaitBuckets() {
  static const auto* b = [] {
    auto* v = new prometheus::Histogram::BucketBoundaries;
    for (int k = 1; k <= kLastWaitEdgeLog2; k++) v->push_back(std::ldexp(1.0, k) / 1e6);
    return v;
  }();
  return *b;
}

// A restore's whole page load: an idle image (ms) to gigabytes read at a
// network disk's rate (minutes).
const prometheus::Histogram::BucketBoundaries& LoadBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
  return *b;
}

// Walks the counters of one report in a fixed order, pairing each with its
// last value in `last`: Next gives what is new (0 for a stale or repeated
// report) and remembers the larger value.
class Differences {
 public:
  explicit Differences(std::vector<uint64_t>* last) : last_(last) {}
  uint64_t Next(uint64_t now) {
    if (last_->size() <= i_) last_->push_back(0);
    uint64_t& last = (*last_)[i_++];
    if (now <= last) return 0;
    const uint64_t d = now - last;
    last = now;
    return d;
  }

 private:
  std::vector<uint64_t>* last_;
  size_t i_ = 0;
};

void AddTo(prometheus::Counter* c, uint64_t n, double scale = 1) {
  if (n > 0) c->Increment(static_cast<double>(n) * scale);
}

// Adds the new part of one log2 histogram to `h`. The _sum is an estimate:
// each latency counts as its bucket's midpoint (1.5 * 2^i ns), since the
// platform keeps counts only.
void AddLog2Histogram(const google::protobuf::RepeatedField<uint64_t>& log2_ns,
                      Differences* d, prometheus::Histogram* h) {
  std::vector<double> increments(HandOverBuckets().size() + 1, 0);
  double sum = 0;
  bool any = false;
  for (int i = 0; i < log2_ns.size(); i++) {
    const uint64_t n = d->Next(log2_ns[i]);
    if (n == 0) continue;
    any = true;
    const int edge = std::max(i + 1, kFirstEdgeLog2);  // bucket i ends at 2^(i+1)
    increments[std::min(edge, kLastEdgeLog2 + 1) - kFirstEdgeLog2] += static_cast<double>(n);
    sum += static_cast<double>(n) * (i == 0 ? 1.0 : 1.5 * std::ldexp(1.0, i)) / 1e9;
  }
  if (any) h->ObserveMultiple(increments, sum);
}

}  // namespace

Metrics::Metrics(const std::set<std::string>& platforms)
    : registry_(std::make_shared<prometheus::Registry>()) {
  // Every instrument of the daemon, in one place.
  prometheus::Registry& r = *registry_;
  sandboxes_ = &prometheus::BuildGauge()
                    .Name("sandboxd_sandboxes")
                    .Help("Sandboxes known to the daemon, by state.")
                    .Register(r);
  create_seconds_ = &prometheus::BuildHistogram()
                         .Name("sandboxd_create_seconds")
                         .Help("Wall time of Create calls, by whether a warm Sentry "
                               "from the pool served them (pool=\"hit\") or not.")
                         .Register(r);
  checkpoint_seconds_ =
      &prometheus::BuildHistogram()
           .Name("sandboxd_checkpoint_seconds")
           .Help("Wall time of Checkpoint calls, by outcome (\"ok\" or "
                 "\"error\").")
           .Register(r);
  restore_seconds_ =
      &prometheus::BuildHistogram()
           .Name("sandboxd_restore_seconds")
           .Help("Wall time of Restore calls, from the call to the restored "
                 "sandbox running, by outcome (\"ok\" or \"error\").")
           .Register(r);
  pool_size_ = &prometheus::BuildGauge()
                    .Name("sandboxd_pool_size")
                    .Help("Warm Sentries ready in the pool.")
                    .Register(r);
  pool_refill_seconds_ = &prometheus::BuildHistogram()
                              .Name("sandboxd_pool_refill_seconds")
                              .Help("Time to start one warm Sentry for the pool.")
                              .Register(r);
  sentry_crashes_ = &prometheus::BuildCounter()
                         .Name("sandboxd_sentry_crashes_total")
                         .Help("Sentries that exited without being asked to.")
                         .Register(r)
                         .Add({});
  sandbox_exits_ = &prometheus::BuildCounter()
                        .Name("sandboxd_sandbox_exits_total")
                        .Help("Sandboxes whose init program ended, by how: exited (a "
                              "code), signal, oom (killed by the Sentry's out-of-memory "
                              "kill at the memory limit), failed (its Sentry failed).")
                        .Register(r);
  for (const char* reason : {"exited", "signal", "oom", "failed"}) {
    sandbox_exits_->Add({{"reason", reason}});
  }
  oom_kills_ = &prometheus::BuildCounter()
                    .Name("sandboxd_oom_kills_total")
                    .Help("Processes the Sentries' OOM killers ended for their "
                          "sandbox's memory limit (SentryStats.oom_kills).")
                    .Register(r)
                    .Add({});
  memory_limit_refusals_ =
      &prometheus::BuildCounter()
           .Name("sandboxd_memory_limit_refusals_total")
           .Help("Memory-file allocations a sandbox's memory limit refused "
                 "(SentryStats.memory_limit_refusals).")
           .Register(r)
           .Add({});
  unimplemented_ = &prometheus::BuildCounter()
                        .Name("sandboxd_unimplemented_syscalls_total")
                        .Help("System calls that returned ENOSYS because the Sentry "
                              "does not implement them, by number (x86-64).")
                        .Register(r);
  sandbox_memory_ = &prometheus::BuildGauge()
                         .Name("sandboxd_sandbox_memory_bytes")
                         .Help("Memory charged to a sandbox's cgroup.")
                         .Register(r);
  sandbox_cpu_ = &prometheus::BuildCounter()
                      .Name("sandboxd_sandbox_cpu_seconds_total")
                      .Help("CPU time (user + system) used by a sandbox's cgroup.")
                      .Register(r);

  // The platforms' own counters, as each sandbox's Sentry reports them.
  platform_info_ = &prometheus::BuildGauge()
                        .Name("sandboxd_sandbox_platform_info")
                        .Help("1 for each sandbox, labelled with its platform and, for "
                              "kvm, the flavour (pvm or hardware).")
                        .Register(r);
  // A platform's families only when the daemon offers it: a scrape shows
  // no series of a platform that cannot run here.
  if (platforms.count("systrap") != 0) {
    systrap_spinning_ = &prometheus::BuildGauge()
                             .Name("sandboxd_systrap_fastpath_spinning")
                             .Help("1 while the hand-over fast path of a side is on (its "
                                   "waiters spin before they sleep): side=\"sentry\" waits "
                                   "for the stub's trap, side=\"stub\" for the Sentry's reply.")
                             .Register(r);
    systrap_enabled_ = &prometheus::BuildCounter()
                            .Name("sandboxd_systrap_fastpath_enabled_total")
                            .Help("Times the fast path of a side was turned on.")
                            .Register(r);
    systrap_disabled_ = &prometheus::BuildCounter()
                             .Name("sandboxd_systrap_fastpath_disabled_total")
                             .Help("Times the fast path of a side was turned off.")
                             .Register(r);
    systrap_evaluations_ = &prometheus::BuildCounter()
                                .Name("sandboxd_systrap_fastpath_evaluations_total")
                                .Help("Fast-path recording periods evaluated.")
                                .Register(r)
                                .Add({});
    systrap_idle_resets_ = &prometheus::BuildCounter()
                                .Name("sandboxd_systrap_fastpath_idle_resets_total")
                                .Help("Fast paths reset to off after two idle periods.")
                                .Register(r)
                                .Add({});
    systrap_handover_ = &prometheus::BuildHistogram()
                             .Name("sandboxd_systrap_handover_seconds")
                             .Help("Hand-over latency through the shared-memory context queue: "
                                   "to=\"sentry\" from a stub publishing a trap to the Sentry "
                                   "seeing it, to=\"stub\" from the Sentry's reply to the stub "
                                   "seeing it. Buckets are exact; _sum counts each hand-over "
                                   "at its log2 bucket's midpoint.")
                             .Register(r);
    systrap_awake_ = &prometheus::BuildGauge()
                          .Name("sandboxd_systrap_stub_threads_awake")
                          .Help("Application (stub) threads not asleep on their futex: "
                                "running application code or spinning for the Sentry.")
                          .Register(r);
    systrap_queued_ = &prometheus::BuildGauge()
                           .Name("sandboxd_systrap_contexts_queued")
                           .Help("Contexts handed to the Sentry whose Sentry thread is "
                                 "still asleep.")
                           .Register(r);
    systrap_patch_unserialized_ =
        &prometheus::BuildCounter()
             .Name("sandboxd_systrap_patch_unserialized_total")
             .Help("Patched syscall sites written without membarrier SYNC_CORE "
                   "between the steps (the host refused it).")
             .Register(r)
             .Add({});
    systrap_workers_refused_ =
        &prometheus::BuildCounter()
             .Name("sandboxd_systrap_workers_refused_total")
             .Help("Stub workers the host refused (clone failed); the context "
                   "waited for another, or the application's clone got EAGAIN.")
             .Register(r)
             .Add({});
    systrap_patched_sites_ = &prometheus::BuildCounter()
                                  .Name("sandboxd_systrap_patched_sites_total")
                                  .Help("Syscall sites patched to enter the stub without a "
                                        "signal.")
                                  .Register(r)
                                  .Add({});
  }
  if (platforms.count("kvm") != 0) {
    kvm_exits_ = &prometheus::BuildCounter()
                      .Name("sandboxd_kvm_exits_total")
                      .Help("Exits from KVM_RUN, by reason: syscall, page_fault, exception, "
                            "interrupted, shadow_flush (a kick for a shadow-page-table "
                            "flush), other.")
                      .Register(r);
    kvm_vm_create_ = &prometheus::BuildHistogram()
                          .Name("sandboxd_kvm_vm_create_seconds")
                          .Help("Creating a Sentry's VM: /dev/kvm, KVM_CREATE_VM, the "
                                "supported CPUID.")
                          .Register(r)
                          .Add({}, CreationBuckets());
    kvm_vcpu0_create_ = &prometheus::BuildHistogram()
                             .Name("sandboxd_kvm_vcpu0_create_seconds")
                             .Help("Creating a VM's vCPU 0 (on the start path).")
                             .Register(r)
                             .Add({}, CreationBuckets());
    kvm_pool_fill_ = &prometheus::BuildHistogram()
                          .Name("sandboxd_kvm_vcpu_pool_fill_seconds")
                          .Help("Filling a VM's vCPU pool in the background, after vCPU 0.")
                          .Register(r)
                          .Add({}, CreationBuckets());
    kvm_memslot_adds_ = &prometheus::BuildCounter()
                             .Name("sandboxd_kvm_memslot_adds_total")
                             .Help("KVM memory slots added (private memory, memory-file "
                                   "chunks).")
                             .Register(r)
                             .Add({});
    kvm_memslot_add_seconds_ = &prometheus::BuildCounter()
                                    .Name("sandboxd_kvm_memslot_add_seconds_total")
                                    .Help("Time spent adding KVM memory slots.")
                                    .Register(r)
                                    .Add({});
    kvm_shadow_flushes_ = &prometheus::BuildCounter()
                               .Name("sandboxd_kvm_shadow_flushes_total")
                               .Help("Shadow page-table flushes (private slot re-created).")
                               .Register(r)
                               .Add({});
    kvm_shadow_flush_seconds_ = &prometheus::BuildCounter()
                                     .Name("sandboxd_kvm_shadow_flush_seconds_total")
                                     .Help("Time spent in shadow page-table flushes.")
                                     .Register(r)
                                     .Add({});
    kvm_vcpus_refused_ = &prometheus::BuildCounter()
                              .Name("sandboxd_kvm_vcpus_refused_total")
                              .Help("vCPUs the host refused a task; the application's "
                                    "clone or fork got EAGAIN.")
                              .Register(r)
                              .Add({});
    kvm_vcpus_ = &prometheus::BuildGauge()
                      .Name("sandboxd_kvm_vcpus")
                      .Help("vCPUs a sandbox's VM has created.")
                      .Register(r);
    kvm_pool_free_ = &prometheus::BuildGauge()
                          .Name("sandboxd_kvm_vcpu_pool_free")
                          .Help("vCPUs idle in a sandbox's pool, ready for a new task.")
                          .Register(r);
  }

  // Restored sandboxes' page loading, as each one's Sentry reports it.
  restore_bytes_loaded_ = &prometheus::BuildCounter()
                               .Name("sandboxd_restore_bytes_loaded_total")
                               .Help("Bytes of memory read from restore images while "
                                     "the restored programs ran.")
                               .Register(r)
                               .Add({});
  restore_pages_loaded_ = &prometheus::BuildCounter()
                               .Name("sandboxd_restore_pages_loaded_total")
                               .Help("Memory pages read from restore images.")
                               .Register(r)
                               .Add({});
  restore_bytes_failed_ = &prometheus::BuildCounter()
                               .Name("sandboxd_restore_bytes_failed_total")
                               .Help("Bytes of restored memory whose read failed (the "
                                     "program gets EIO or SIGBUS there).")
                               .Register(r)
                               .Add({});
  restore_waits_ = &prometheus::BuildCounter()
                        .Name("sandboxd_restore_page_waits_total")
                        .Help("Accesses of restored programs (faults, copies, file "
                              "reads) that waited for their pages to arrive.")
                        .Register(r)
                        .Add({});
  restore_wait_seconds_ = &prometheus::BuildHistogram()
                               .Name("sandboxd_restore_page_wait_seconds")
                               .Help("How long an access waited for its restored pages. "
                                     "Buckets are exact (the loader's power-of-two "
                                     "microsecond buckets).")
                               .Register(r)
                               .Add({}, PageWaitBuckets());
  restore_waiters_ = &prometheus::BuildGauge()
                          .Name("sandboxd_restore_page_waiters")
                          .Help("Accesses of a restored sandbox waiting for their pages now.")
                          .Register(r);
  restore_in_progress_ = &prometheus::BuildGauge()
                              .Name("sandboxd_restore_loads_in_progress")
                              .Help("Restored sandboxes whose memory is still loading.")
                              .Register(r)
                              .Add({});
  restore_load_seconds_ = &prometheus::BuildHistogram()
                               .Name("sandboxd_restore_load_seconds")
                               .Help("A restore's page load, from the loader's start to "
                                     "its last read, by outcome (\"error\": some pages "
                                     "failed to load).")
                               .Register(r);
}


Metrics::~Metrics() {
  // Stop serving before the registry goes.
  exposer_.reset();
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(
    const std::string& listen_address, const std::set<std::string>& platforms) {
  std::unique_ptr<Metrics> m(new Metrics(platforms));
  if (!listen_address.empty()) {
    absl::Status s = m->Serve(listen_address);
    if (!s.ok()) return s;
  }
  return m;
}

absl::Status Metrics::Serve(const std::string& listen_address) {
  size_t colon = listen_address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics: listen address \"", listen_address, "\" is not host:port"));
  }
  try {
    // civetweb reports a failed bind by throwing.
    exposer_ = std::make_unique<prometheus::Exposer>(listen_address, /*num_threads=*/1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot serve on ", listen_address, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty() || ports[0] == 0) {
    exposer_.reset();
    return absl::InternalError(absl::StrCat(
        "metrics: serving on ", listen_address, " but the bound port is unknown"));
  }
  port_ = ports[0];
  address_ = absl::StrCat(listen_address.substr(0, colon), ":", port_);
  return absl::OkStatus();
}

std::string Metrics::Scrape() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

void Metrics::SetSandboxes(absl::string_view state, int64_t n) {
  sandboxes_->Add({{"state", std::string(state)}}).Set(static_cast<double>(n));
}

void Metrics::ObserveCreate(bool pool_hit, absl::string_view platform,
                            absl::Duration d) {
  create_seconds_
      ->Add({{"pool", pool_hit ? "hit" : "miss"}, {"platform", std::string(platform)}},
            LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(d));
}

void Metrics::ObserveCheckpoint(bool ok, absl::Duration d) {
  checkpoint_seconds_->Add({{"outcome", ok ? "ok" : "error"}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(d));
}

void Metrics::ObserveRestore(bool ok, absl::Duration d) {
  restore_seconds_->Add({{"outcome", ok ? "ok" : "error"}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(d));
}

void Metrics::SetPoolSize(absl::string_view platform, int64_t n) {
  pool_size_->Add({{"platform", std::string(platform)}}).Set(static_cast<double>(n));
}

void Metrics::ObservePoolRefill(absl::string_view platform, absl::Duration d) {
  pool_refill_seconds_->Add({{"platform", std::string(platform)}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(d));
}

void Metrics::IncSentryCrashes() { sentry_crashes_->Increment(); }

void Metrics::IncSandboxExit(absl::string_view reason) {
  sandbox_exits_->Add({{"reason", std::string(reason)}}).Increment();
}

void Metrics::AddUnimplemented(int nr, uint64_t n) {
  unimplemented_->Add({{"nr", absl::StrCat(nr)}}).Increment(static_cast<double>(n));
}

void Metrics::SetSandboxUsage(absl::string_view id, uint64_t memory_bytes,
                              double cpu_seconds) {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_by_id_.find(id);
  if (it == sandboxes_by_id_.end()) {
    prometheus::Labels labels{{"id", std::string(id)}};
    SandboxSeries series{&sandbox_memory_->Add(labels), &sandbox_cpu_->Add(labels)};
    it = sandboxes_by_id_.emplace(std::string(id), series).first;
  }
  it->second.memory->Set(static_cast<double>(memory_bytes));
  // A counter only moves forward: add what is new since the last reading.
  double delta = cpu_seconds - it->second.cpu->Value();
  if (delta > 0) it->second.cpu->Increment(delta);
}

void Metrics::SetPlatformGauge(PlatformSeries& ps,
                               prometheus::Family<prometheus::Gauge>* family,
                               const std::map<std::string, std::string>& labels,
                               double value) {
  prometheus::Gauge& g = family->Add(labels);
  g.Set(value);
  for (const auto& [f, known] : ps.gauges) {
    if (known == &g) return;
  }
  ps.gauges.emplace_back(family, &g);
}

void Metrics::SetPlatformStats(absl::string_view id, const control::PlatformStats& st) {
  if (st.platform().empty()) return;  // a Sentry that reports none
  absl::MutexLock lock(&mu_);
  PlatformSeries& ps = platform_by_id_[id];
  const std::string sid(id);
  std::string flavour;
  if (st.has_kvm()) flavour = st.kvm().flavour();
  SetPlatformGauge(ps, platform_info_,
                   {{"id", sid}, {"platform", st.platform()}, {"flavour", flavour}}, 1);
  Differences d(&ps.last);
  if (st.has_systrap() && systrap_spinning_ != nullptr) {
    const control::SystrapStats& s = st.systrap();
    const std::pair<const char*, const control::SystrapStats::Side*> sides[] = {
        {"sentry", &s.sentry()}, {"stub", &s.stub()}};
    for (const auto& [name, side] : sides) {
      SetPlatformGauge(ps, systrap_spinning_, {{"id", sid}, {"side", name}},
                       side->spinning() ? 1 : 0);
      AddTo(&systrap_enabled_->Add({{"side", name}}), d.Next(side->enabled()));
      AddTo(&systrap_disabled_->Add({{"side", name}}), d.Next(side->disabled()));
      AddLog2Histogram(side->latency_log2_ns(), &d,
                       &systrap_handover_->Add({{"to", name}}, HandOverBuckets()));
    }
    AddTo(systrap_evaluations_, d.Next(s.evaluations()));
    AddTo(systrap_idle_resets_, d.Next(s.idle_resets()));
    AddTo(systrap_patched_sites_, d.Next(s.patched_sites()));
    AddTo(systrap_patch_unserialized_, d.Next(s.patch_unserialized()));
    AddTo(systrap_workers_refused_, d.Next(s.workers_refused()));
    SetPlatformGauge(ps, systrap_awake_, {{"id", sid}},
                     static_cast<double>(s.stub_threads_awake()));
    SetPlatformGauge(ps, systrap_queued_, {{"id", sid}},
                     static_cast<double>(s.contexts_queued()));
  }
  if (st.has_kvm() && kvm_exits_ != nullptr) {
    const control::KvmStats& k = st.kvm();
    const std::pair<const char*, uint64_t> exits[] = {
        {"syscall", k.exits().syscall()},         {"page_fault", k.exits().page_fault()},
        {"exception", k.exits().exception()},     {"interrupted", k.exits().interrupted()},
        {"shadow_flush", k.exits().shadow_flush()}, {"other", k.exits().other()}};
    for (const auto& [reason, n] : exits) {
      AddTo(&kvm_exits_->Add({{"reason", reason}}), d.Next(n));
    }
    AddTo(kvm_memslot_adds_, d.Next(k.memslot_adds()));
    AddTo(kvm_memslot_add_seconds_, d.Next(k.memslot_add_nanos()), 1e-9);
    AddTo(kvm_shadow_flushes_, d.Next(k.shadow_flushes()));
    AddTo(kvm_shadow_flush_seconds_, d.Next(k.shadow_flush_nanos()), 1e-9);
    AddTo(kvm_vcpus_refused_, d.Next(k.vcpus_refused()));
    // Once per VM, the first time each is known.
    const std::tuple<uint64_t, bool*, prometheus::Histogram*> once[] = {
        {k.vm_create_nanos(), &ps.vm_create_seen, kvm_vm_create_},
        {k.vcpu0_create_nanos(), &ps.vcpu0_seen, kvm_vcpu0_create_},
        {k.vcpu_pool_fill_nanos(), &ps.pool_fill_seen, kvm_pool_fill_}};
    for (const auto& [ns, seen, h] : once) {
      if (ns == 0 || *seen) continue;
      *seen = true;
      h->Observe(static_cast<double>(ns) / 1e9);
    }
    SetPlatformGauge(ps, kvm_vcpus_, {{"id", sid}}, k.vcpus());
    SetPlatformGauge(ps, kvm_pool_free_, {{"id", sid}}, k.vcpu_pool_free());
  }
}

void Metrics::SetSentryStats(absl::string_view id, const control::SentryStats& st) {
  SetPlatformStats(id, st.platform());
  absl::MutexLock lock(&mu_);
  Differences d(&sentry_last_by_id_[id]);
  AddTo(oom_kills_, d.Next(st.oom_kills()));
  AddTo(memory_limit_refusals_, d.Next(st.memory_limit_refusals()));
}

void Metrics::SetRestorePages(absl::string_view id, const control::RestorePageStats& st) {
  absl::MutexLock lock(&mu_);
  RestoreSeries& rs = restore_by_id_[id];
  Differences d(&rs.last);
  AddTo(restore_bytes_loaded_, d.Next(st.bytes_loaded()));
  AddTo(restore_pages_loaded_, d.Next(st.pages_loaded()));
  AddTo(restore_bytes_failed_, d.Next(st.bytes_failed()));
  AddTo(restore_waits_, d.Next(st.waits()));
  // The histogram: new waits per loader bucket, and their exact total.
  const uint64_t wait_ns = d.Next(st.wait_nanos_total());
  std::vector<double> increments(PageWaitBuckets().size() + 1, 0);
  bool any = false;
  for (int i = 0; i < st.wait_hist_size(); i++) {
    const uint64_t n = d.Next(st.wait_hist(i));
    if (n == 0) continue;
    any = true;
    // Loader bucket i ends at 2^(i+1) µs: exported edge index i.
    increments[std::min<size_t>(i, PageWaitBuckets().size())] += static_cast<double>(n);
  }
  if (any) restore_wait_seconds_->ObserveMultiple(increments, static_cast<double>(wait_ns) / 1e9);
  if (rs.waiters == nullptr) rs.waiters = &restore_waiters_->Add({{"id", std::string(id)}});
  // A report can come late (a Get's and the poll's cross): once the load
  // is done nobody waits.
  rs.waiters->Set(rs.done_seen || st.done() ? 0 : static_cast<double>(st.waiting()));
  if (!st.done() && !rs.in_progress && !rs.done_seen) {
    rs.in_progress = true;
    restore_in_progress_->Increment();
  }
  if (st.done() && !rs.done_seen) {
    rs.done_seen = true;
    if (rs.in_progress) restore_in_progress_->Decrement();
    rs.in_progress = false;
    restore_load_seconds_
        ->Add({{"outcome", st.bytes_failed() > 0 ? "error" : "ok"}}, LoadBuckets())
        .Observe(static_cast<double>(st.load_nanos()) / 1e9);
  }
}

void Metrics::RemoveSandbox(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  if (auto r = restore_by_id_.find(id); r != restore_by_id_.end()) {
    if (r->second.waiters != nullptr) restore_waiters_->Remove(r->second.waiters);
    if (r->second.in_progress) restore_in_progress_->Decrement();
    restore_by_id_.erase(r);
  }
  sentry_last_by_id_.erase(id);
  if (auto p = platform_by_id_.find(id); p != platform_by_id_.end()) {
    for (const auto& [family, gauge] : p->second.gauges) family->Remove(gauge);
    platform_by_id_.erase(p);
  }
  auto it = sandboxes_by_id_.find(id);
  if (it == sandboxes_by_id_.end()) return;
  sandbox_memory_->Remove(it->second.memory);
  sandbox_cpu_->Remove(it->second.cpu);
  sandboxes_by_id_.erase(it);
}

}  // namespace daemon
}  // namespace sandboxd
