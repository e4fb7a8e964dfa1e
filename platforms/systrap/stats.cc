#include "platforms/systrap/stats.h"

#include "proto/platform_stats.pb.h"

namespace sandboxd::systrap {

namespace {

void SideToProto(const Stats& s, Side side, control::SystrapStats::Side* out) {
  const int i = static_cast<int>(side);
  out->set_spinning(s.spinning[i].load(std::memory_order_relaxed) != 0);
  out->set_enabled(s.enabled[i].load(std::memory_order_relaxed));
  out->set_disabled(s.disabled[i].load(std::memory_order_relaxed));
  for (const std::atomic<uint64_t>& b : s.latency[i]) {
    out->add_latency_log2_ns(b.load(std::memory_order_relaxed));
  }
}

}  // namespace

void ToProto(const Stats& s, control::SystrapStats* out) {
  SideToProto(s, Side::kSentry, out->mutable_sentry());
  SideToProto(s, Side::kStub, out->mutable_stub());
  out->set_evaluations(s.evaluations.load(std::memory_order_relaxed));
  out->set_idle_resets(s.idle_resets.load(std::memory_order_relaxed));
  out->set_stub_threads_awake(s.stub_threads_awake.load(std::memory_order_relaxed));
  out->set_contexts_queued(s.contexts_queued.load(std::memory_order_relaxed));
  out->set_patched_sites(s.patched_sites.load(std::memory_order_relaxed));
  out->set_patch_unserialized(
      s.patch_unserialized.load(std::memory_order_relaxed));
  out->set_compat_syscalls_refused(
      s.compat_syscalls_refused.load(std::memory_order_relaxed));
  out->set_workers_refused(s.workers_refused.load(std::memory_order_relaxed));
}

}  // namespace sandboxd::systrap
