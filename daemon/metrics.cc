#include "daemon/metrics.h"

#include <exception>
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

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
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
}

Metrics::~Metrics() {
  // Stop serving before the registry goes.
  exposer_.reset();
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(
    const std::string& listen_address) {
  std::unique_ptr<Metrics> m(new Metrics());
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

void Metrics::SetPoolSize(absl::string_view platform, int64_t n) {
  pool_size_->Add({{"platform", std::string(platform)}}).Set(static_cast<double>(n));
}

void Metrics::ObservePoolRefill(absl::string_view platform, absl::Duration d) {
  pool_refill_seconds_->Add({{"platform", std::string(platform)}}, LatencyBuckets())
      .Observe(absl::ToDoubleSeconds(d));
}

void Metrics::IncSentryCrashes() { sentry_crashes_->Increment(); }

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

void Metrics::RemoveSandbox(absl::string_view id) {
  absl::MutexLock lock(&mu_);
  auto it = sandboxes_by_id_.find(id);
  if (it == sandboxes_by_id_.end()) return;
  sandbox_memory_->Remove(it->second.memory);
  sandbox_cpu_->Remove(it->second.cpu);
  sandboxes_by_id_.erase(it);
}

}  // namespace daemon
}  // namespace sandboxd
