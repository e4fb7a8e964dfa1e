#include "daemon/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "proto/control.pb.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd {
namespace daemon {
namespace {

// GET `path` from 127.0.0.1:port over HTTP/1.0; returns the whole response.
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "connect to port " << port << ": " << strerror(errno);
    close(fd);
    return "";
  }
  std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fd);
  return out;
}

// The samples of a text-format exposition: "name{labels}" -> value.
// Also checks that every sample line has the shape "series value".
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    size_t space = line.rfind(' ');
    EXPECT_NE(space, absl::string_view::npos) << line;
    double v;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &v)) << line;
    samples[std::string(line.substr(0, space))] = v;
  }
  return samples;
}

void Exercise(Metrics& m) {
  m.SetSandboxes("running", 3);
  m.SetSandboxes("stopped", 1);
  m.ObserveCreate(true, "systrap", absl::Milliseconds(2));
  m.ObserveCreate(true, "systrap", absl::Milliseconds(4));
  m.ObserveCreate(false, "systrap", absl::Milliseconds(300));
  m.SetPoolSize("systrap", 4);
  m.ObservePoolRefill("systrap", absl::Milliseconds(40));
  m.IncSentryCrashes();
  m.AddUnimplemented(165, 2);
  m.AddUnimplemented(165, 1);
  m.SetSandboxUsage("box1", 1 << 20, 0.5);
  m.SetSandboxUsage("box1", 2 << 20, 1.25);
  m.SetSandboxUsage("box2", 4096, 0.1);
}

TEST(MetricsTest, ServesTextFormatOverHttp) {
  auto m = Metrics::Create("127.0.0.1:0");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_GT((*m)->port(), 0);
  EXPECT_EQ((*m)->address(), absl::StrCat("127.0.0.1:", (*m)->port()));
  Exercise(**m);

  std::string resp = HttpGet((*m)->port(), "/metrics");
  ASSERT_TRUE(absl::StartsWith(resp, "HTTP/1.1 200") || absl::StartsWith(resp, "HTTP/1.0 200"))
      << resp.substr(0, 200);
  size_t body_at = resp.find("\r\n\r\n");
  ASSERT_NE(body_at, std::string::npos);
  std::string body = resp.substr(body_at + 4);

  EXPECT_TRUE(absl::StrContains(body, "# TYPE sandboxd_create_seconds histogram\n"));
  EXPECT_TRUE(absl::StrContains(body, "# TYPE sandboxd_sentry_crashes_total counter\n"));
  EXPECT_TRUE(absl::StrContains(body, "# TYPE sandboxd_sandboxes gauge\n"));
  EXPECT_TRUE(absl::StrContains(body, "# HELP sandboxd_pool_size "));

  std::map<std::string, double> s = ParseSamples(body);
  EXPECT_EQ(s["sandboxd_sandboxes{state=\"running\"}"], 3);
  EXPECT_EQ(s["sandboxd_sandboxes{state=\"stopped\"}"], 1);
  EXPECT_EQ(s["sandboxd_create_seconds_count{platform=\"systrap\",pool=\"hit\"}"], 2);
  EXPECT_DOUBLE_EQ(s["sandboxd_create_seconds_sum{platform=\"systrap\",pool=\"hit\"}"], 0.006);
  EXPECT_EQ(s["sandboxd_create_seconds_count{platform=\"systrap\",pool=\"miss\"}"], 1);
  // Cumulative buckets: both hits are under 5ms, neither under 1ms.
  EXPECT_EQ(s["sandboxd_create_seconds_bucket{platform=\"systrap\",pool=\"hit\",le=\"0.001\"}"], 0);
  EXPECT_EQ(s["sandboxd_create_seconds_bucket{platform=\"systrap\",pool=\"hit\",le=\"0.005\"}"], 2);
  EXPECT_EQ(s["sandboxd_create_seconds_bucket{platform=\"systrap\",pool=\"hit\",le=\"+Inf\"}"], 2);
  EXPECT_EQ(s["sandboxd_pool_size{platform=\"systrap\"}"], 4);
  EXPECT_EQ(s["sandboxd_pool_refill_seconds_count{platform=\"systrap\"}"], 1);
  EXPECT_EQ(s["sandboxd_sentry_crashes_total"], 1);
  EXPECT_EQ(s["sandboxd_unimplemented_syscalls_total{nr=\"165\"}"], 3);
  EXPECT_EQ(s["sandboxd_sandbox_memory_bytes{id=\"box1\"}"], 2 << 20);
  EXPECT_DOUBLE_EQ(s["sandboxd_sandbox_cpu_seconds_total{id=\"box1\"}"], 1.25);
  EXPECT_EQ(s["sandboxd_sandbox_memory_bytes{id=\"box2\"}"], 4096);

  // A destroyed sandbox's series disappear; the others stay.
  (*m)->RemoveSandbox("box1");
  (*m)->RemoveSandbox("never-seen");
  resp = HttpGet((*m)->port(), "/metrics");
  s = ParseSamples(resp.substr(resp.find("\r\n\r\n") + 4));
  EXPECT_EQ(s.count("sandboxd_sandbox_memory_bytes{id=\"box1\"}"), 0u);
  EXPECT_EQ(s.count("sandboxd_sandbox_cpu_seconds_total{id=\"box1\"}"), 0u);
  EXPECT_EQ(s.count("sandboxd_sandbox_memory_bytes{id=\"box2\"}"), 1u);
}

TEST(MetricsTest, CpuCounterNeverGoesBackwards) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->SetSandboxUsage("b", 0, 2.0);
  (*m)->SetSandboxUsage("b", 0, 1.5);  // a stale reading
  std::map<std::string, double> s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_sandbox_cpu_seconds_total{id=\"b\"}"], 2.0);
}

TEST(MetricsTest, CheckpointsAndRestoresByOutcome) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->ObserveCheckpoint(true, absl::Milliseconds(4));
  (*m)->ObserveCheckpoint(false, absl::Milliseconds(1));
  (*m)->ObserveRestore(true, absl::Milliseconds(3));
  (*m)->ObserveRestore(true, absl::Milliseconds(5));
  (*m)->ObserveRestore(false, absl::Milliseconds(2));
  std::map<std::string, double> s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_checkpoint_seconds_count{outcome=\"ok\"}"], 1);
  EXPECT_EQ(s["sandboxd_checkpoint_seconds_count{outcome=\"error\"}"], 1);
  EXPECT_DOUBLE_EQ(s["sandboxd_checkpoint_seconds_sum{outcome=\"ok\"}"], 0.004);
  EXPECT_EQ(s["sandboxd_restore_seconds_count{outcome=\"ok\"}"], 2);
  EXPECT_EQ(s["sandboxd_restore_seconds_count{outcome=\"error\"}"], 1);
  EXPECT_DOUBLE_EQ(s["sandboxd_restore_seconds_sum{outcome=\"ok\"}"], 0.008);
}

// A systrap report: `scale` times a fixed set of counts.
control::PlatformStats SystrapReport(uint64_t scale, bool stub_spinning) {
  control::PlatformStats st;
  st.set_platform("systrap");
  control::SystrapStats* s = st.mutable_systrap();
  for (control::SystrapStats::Side* side : {s->mutable_sentry(), s->mutable_stub()}) {
    for (int i = 0; i < 32; i++) side->add_latency_log2_ns(0);
  }
  s->mutable_sentry()->set_enabled(2 * scale);
  s->mutable_sentry()->set_disabled(1 * scale);
  s->mutable_stub()->set_spinning(stub_spinning);
  s->mutable_stub()->set_enabled(3 * scale);
  // To the Sentry: 3 at [1024, 2048) ns, 1 at [2^20, 2^21) ns, 1 under
  // 128 ns (bucket 3), 1 beyond 2^31 ns (the last).
  s->mutable_sentry()->set_latency_log2_ns(10, 3 * scale);
  s->mutable_sentry()->set_latency_log2_ns(20, 1 * scale);
  s->mutable_sentry()->set_latency_log2_ns(3, 1 * scale);
  s->mutable_sentry()->set_latency_log2_ns(31, 1 * scale);
  s->mutable_stub()->set_latency_log2_ns(12, 5 * scale);
  s->set_evaluations(40 * scale);
  s->set_idle_resets(1 * scale);
  s->set_stub_threads_awake(2);
  s->set_contexts_queued(1);
  s->set_patched_sites(4 * scale);
  s->set_patch_unserialized(scale);
  return st;
}

control::PlatformStats KvmReport(uint64_t scale, bool pool_filled) {
  control::PlatformStats st;
  st.set_platform("kvm");
  control::KvmStats* k = st.mutable_kvm();
  k->set_flavour("pvm");
  k->mutable_exits()->set_syscall(100 * scale);
  k->mutable_exits()->set_page_fault(10 * scale);
  k->mutable_exits()->set_exception(1 * scale);
  k->mutable_exits()->set_interrupted(2 * scale);
  k->mutable_exits()->set_shadow_flush(3 * scale);
  k->set_vm_create_nanos(250000);
  k->set_vcpu0_create_nanos(300000);
  if (pool_filled) k->set_vcpu_pool_fill_nanos(4000000);
  k->set_memslot_adds(2 * scale);
  k->set_memslot_add_nanos(100000 * scale);
  k->set_shadow_flushes(3 * scale);
  k->set_shadow_flush_nanos(2000000 * scale);
  k->set_vcpus(4);
  k->set_vcpu_pool_free(3);
  return st;
}

// The value of the histogram bucket of `series` (name{labels,) whose le is
// `le` seconds, compared as numbers (the text form of 2^-k is the
// serializer's); -1 if there is none.
double Bucket(const std::map<std::string, double>& s, const std::string& prefix, double le) {
  for (const auto& [name, v] : s) {
    if (!absl::StartsWith(name, prefix + "le=\"")) continue;
    std::string text = name.substr(prefix.size() + 4);
    text = text.substr(0, text.find('"'));
    double b;
    if (absl::SimpleAtod(text, &b) && std::abs(b - le) <= le * 1e-9) return v;
  }
  return -1;
}

TEST(MetricsTest, SystrapPlatformStats) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->SetPlatformStats("a", SystrapReport(1, true));
  (*m)->SetPlatformStats("a", SystrapReport(2, false));
  (*m)->SetPlatformStats("a", SystrapReport(1, false));  // stale: moves nothing
  (*m)->SetPlatformStats("b", SystrapReport(1, true));
  const std::string text = (*m)->Scrape();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_systrap_handover_seconds histogram\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_systrap_fastpath_enabled_total counter\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_systrap_fastpath_spinning gauge\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_systrap_stub_threads_awake gauge\n"));
  std::map<std::string, double> s = ParseSamples(text);

  EXPECT_EQ(s["sandboxd_sandbox_platform_info{flavour=\"\",id=\"a\",platform=\"systrap\"}"], 1);
  // Gauges: per sandbox, the last report's.
  EXPECT_EQ(s["sandboxd_systrap_fastpath_spinning{id=\"a\",side=\"stub\"}"], 0);
  EXPECT_EQ(s["sandboxd_systrap_fastpath_spinning{id=\"b\",side=\"stub\"}"], 1);
  EXPECT_EQ(s.count("sandboxd_systrap_fastpath_spinning{id=\"a\",side=\"sentry\"}"), 1u);
  EXPECT_EQ(s["sandboxd_systrap_stub_threads_awake{id=\"a\"}"], 2);
  EXPECT_EQ(s["sandboxd_systrap_contexts_queued{id=\"b\"}"], 1);
  // Counters: daemon-wide, a's highest report (scale 2) plus b's (scale 1).
  EXPECT_EQ(s["sandboxd_systrap_fastpath_enabled_total{side=\"sentry\"}"], 6);
  EXPECT_EQ(s["sandboxd_systrap_fastpath_disabled_total{side=\"sentry\"}"], 3);
  EXPECT_EQ(s["sandboxd_systrap_fastpath_enabled_total{side=\"stub\"}"], 9);
  EXPECT_EQ(s["sandboxd_systrap_fastpath_evaluations_total"], 120);
  EXPECT_EQ(s["sandboxd_systrap_fastpath_idle_resets_total"], 3);
  EXPECT_EQ(s["sandboxd_systrap_patched_sites_total"], 12);
  EXPECT_EQ(s["sandboxd_systrap_patch_unserialized_total"], 3);
  // Histograms: to="sentry" saw 3 * (3 + 1 + 1 + 1) = 18 hand-overs.
  const std::string to_sentry = "sandboxd_systrap_handover_seconds_bucket{to=\"sentry\",";
  EXPECT_EQ(s["sandboxd_systrap_handover_seconds_count{to=\"sentry\"}"], 18);
  EXPECT_EQ(Bucket(s, to_sentry, 128e-9), 3);      // bucket 3: under 128 ns
  EXPECT_EQ(Bucket(s, to_sentry, 1024e-9), 3);     // nothing in [128, 1024) ns
  EXPECT_EQ(Bucket(s, to_sentry, 2048e-9), 12);    // + bucket 10
  EXPECT_EQ(Bucket(s, to_sentry, 1048576e-9), 12); // bucket 20 ends at 2^21
  EXPECT_EQ(Bucket(s, to_sentry, 2097152e-9), 15);
  EXPECT_EQ(Bucket(s, to_sentry, 2147483648e-9), 15);  // the last edge, 2^31 ns
  EXPECT_EQ(s["sandboxd_systrap_handover_seconds_bucket{to=\"sentry\",le=\"+Inf\"}"], 18);
  // _sum at the buckets' midpoints: 3 * (1.5 * (8 + 3 * 1024 + 2^20 + 2^31)) ns.
  EXPECT_NEAR(s["sandboxd_systrap_handover_seconds_sum{to=\"sentry\"}"],
              3 * 1.5 * (8 + 3 * 1024 + 1048576 + 2147483648.0) / 1e9, 1e-12);
  EXPECT_EQ(s["sandboxd_systrap_handover_seconds_count{to=\"stub\"}"], 15);
  EXPECT_EQ(Bucket(s, "sandboxd_systrap_handover_seconds_bucket{to=\"stub\",", 4096e-9), 0);
  EXPECT_EQ(Bucket(s, "sandboxd_systrap_handover_seconds_bucket{to=\"stub\",", 8192e-9), 15);

  // Destroyed: a's gauges go, what it counted stays.
  (*m)->RemoveSandbox("a");
  s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s.count("sandboxd_systrap_fastpath_spinning{id=\"a\",side=\"stub\"}"), 0u);
  EXPECT_EQ(s.count("sandboxd_systrap_stub_threads_awake{id=\"a\"}"), 0u);
  EXPECT_EQ(s.count("sandboxd_sandbox_platform_info{flavour=\"\",id=\"a\",platform=\"systrap\"}"), 0u);
  EXPECT_EQ(s.count("sandboxd_systrap_stub_threads_awake{id=\"b\"}"), 1u);
  EXPECT_EQ(s["sandboxd_systrap_fastpath_evaluations_total"], 120);
  EXPECT_EQ(s["sandboxd_systrap_handover_seconds_count{to=\"sentry\"}"], 18);
  // A sandbox id used again starts from zero.
  (*m)->SetPlatformStats("a", SystrapReport(1, false));
  s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_systrap_fastpath_evaluations_total"], 160);
}

TEST(MetricsTest, KvmPlatformStats) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->SetPlatformStats("k", KvmReport(1, false));
  (*m)->SetPlatformStats("k", KvmReport(3, true));
  (*m)->SetPlatformStats("k", KvmReport(3, true));  // again: nothing new
  const std::string text = (*m)->Scrape();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_kvm_exits_total counter\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_kvm_vm_create_seconds histogram\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_kvm_vcpus gauge\n"));
  std::map<std::string, double> s = ParseSamples(text);
  EXPECT_EQ(s["sandboxd_sandbox_platform_info{flavour=\"pvm\",id=\"k\",platform=\"kvm\"}"], 1);
  EXPECT_EQ(s["sandboxd_kvm_exits_total{reason=\"syscall\"}"], 300);
  EXPECT_EQ(s["sandboxd_kvm_exits_total{reason=\"page_fault\"}"], 30);
  EXPECT_EQ(s["sandboxd_kvm_exits_total{reason=\"exception\"}"], 3);
  EXPECT_EQ(s["sandboxd_kvm_exits_total{reason=\"interrupted\"}"], 6);
  EXPECT_EQ(s["sandboxd_kvm_exits_total{reason=\"shadow_flush\"}"], 9);
  EXPECT_EQ(s["sandboxd_kvm_exits_total{reason=\"other\"}"], 0);
  // One VM: each creation time observed once, the pool's when it was done.
  EXPECT_EQ(s["sandboxd_kvm_vm_create_seconds_count"], 1);
  EXPECT_DOUBLE_EQ(s["sandboxd_kvm_vm_create_seconds_sum"], 0.00025);
  EXPECT_EQ(s["sandboxd_kvm_vm_create_seconds_bucket{le=\"0.0001\"}"], 0);
  EXPECT_EQ(s["sandboxd_kvm_vm_create_seconds_bucket{le=\"0.00025\"}"], 1);
  EXPECT_EQ(s["sandboxd_kvm_vcpu0_create_seconds_count"], 1);
  EXPECT_EQ(s["sandboxd_kvm_vcpu_pool_fill_seconds_count"], 1);
  EXPECT_DOUBLE_EQ(s["sandboxd_kvm_vcpu_pool_fill_seconds_sum"], 0.004);
  EXPECT_EQ(s["sandboxd_kvm_memslot_adds_total"], 6);
  EXPECT_DOUBLE_EQ(s["sandboxd_kvm_memslot_add_seconds_total"], 0.0003);
  EXPECT_EQ(s["sandboxd_kvm_shadow_flushes_total"], 9);
  EXPECT_DOUBLE_EQ(s["sandboxd_kvm_shadow_flush_seconds_total"], 0.006);
  EXPECT_EQ(s["sandboxd_kvm_vcpus{id=\"k\"}"], 4);
  EXPECT_EQ(s["sandboxd_kvm_vcpu_pool_free{id=\"k\"}"], 3);
  (*m)->RemoveSandbox("k");
  s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s.count("sandboxd_kvm_vcpus{id=\"k\"}"), 0u);
  EXPECT_EQ(s.count("sandboxd_kvm_vcpu_pool_free{id=\"k\"}"), 0u);
  EXPECT_EQ(s["sandboxd_kvm_exits_total{reason=\"syscall\"}"], 300);
}

// A page loader's cumulative counters after `waits` waits in bucket 3
// ([8, 16) µs) and one in bucket 12 ([4, 8) ms).
control::RestorePageStats RestoreReport(uint64_t mib_loaded, uint64_t waits, bool done,
                                        uint64_t failed = 0) {
  control::RestorePageStats st;
  st.set_bytes_total(64ull << 20);
  st.set_bytes_loaded(mib_loaded << 20);
  st.set_pages_loaded((mib_loaded << 20) / 4096);
  st.set_bytes_failed(failed);
  st.set_waits(waits + 1);
  st.set_waiting(done ? 0 : 2);
  st.set_wait_nanos_total(waits * 10000 + 5000000);
  st.set_load_nanos(1500000000);
  st.set_done(done);
  for (int i = 0; i < 32; i++) st.add_wait_hist(i == 3 ? waits : i == 12 ? 1 : 0);
  return st;
}

// A platform the daemon does not offer exports no family, and a report
// of it (which such a daemon never gets) moves nothing.
TEST(MetricsTest, OnlyOfferedPlatformsAreExported) {
  auto systrap_only = Metrics::Create("", {"systrap"});
  ASSERT_TRUE(systrap_only.ok()) << systrap_only.status();
  (*systrap_only)->SetPlatformStats("k", KvmReport(1, false));
  std::string text = (*systrap_only)->Scrape();
  EXPECT_TRUE(absl::StrContains(text, "sandboxd_systrap_patched_sites_total 0\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "sandboxd_kvm_")) << text;

  auto kvm_only = Metrics::Create("", {"kvm"});
  ASSERT_TRUE(kvm_only.ok()) << kvm_only.status();
  (*kvm_only)->SetPlatformStats("s", SystrapReport(1, true));
  text = (*kvm_only)->Scrape();
  EXPECT_TRUE(absl::StrContains(text, "sandboxd_kvm_memslot_adds_total 0\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "sandboxd_systrap_")) << text;
}

TEST(MetricsTest, RestorePageLoading) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->SetRestorePages("r1", RestoreReport(16, 2, false));
  (*m)->SetRestorePages("r2", RestoreReport(8, 0, false));
  std::map<std::string, double> s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_restore_loads_in_progress"], 2);
  EXPECT_EQ(s["sandboxd_restore_page_waiters{id=\"r1\"}"], 2);
  EXPECT_EQ(s.count("sandboxd_restore_load_seconds_count{outcome=\"ok\"}"), 0u);

  (*m)->SetRestorePages("r1", RestoreReport(64, 5, true));
  (*m)->SetRestorePages("r1", RestoreReport(64, 5, true));  // again: nothing new
  (*m)->SetRestorePages("r1", RestoreReport(32, 2, false));  // stale: nothing
  s = ParseSamples((*m)->Scrape());
  // Counters: r1's highest report plus r2's.
  EXPECT_EQ(s["sandboxd_restore_bytes_loaded_total"], (64 + 8) << 20);
  EXPECT_EQ(s["sandboxd_restore_pages_loaded_total"], ((64 + 8) << 20) / 4096);
  EXPECT_EQ(s["sandboxd_restore_page_waits_total"], 6 + 1);
  // The histogram: exact at the loader's bucket edges.
  const std::string b = "sandboxd_restore_page_wait_seconds_bucket{";
  EXPECT_EQ(s["sandboxd_restore_page_wait_seconds_count"], 7);
  EXPECT_EQ(Bucket(s, b, 8e-6), 0);
  EXPECT_EQ(Bucket(s, b, 16e-6), 5);
  EXPECT_EQ(Bucket(s, b, 4096e-6), 5);
  EXPECT_EQ(Bucket(s, b, 8192e-6), 7);
  EXPECT_EQ(s[b + "le=\"+Inf\"}"], 7);
  EXPECT_NEAR(s["sandboxd_restore_page_wait_seconds_sum"], 0.01005, 1e-9);
  // r1 is done: observed once, no longer in progress, no waiters.
  EXPECT_EQ(s["sandboxd_restore_loads_in_progress"], 1);
  EXPECT_EQ(s["sandboxd_restore_load_seconds_count{outcome=\"ok\"}"], 1);
  EXPECT_DOUBLE_EQ(s["sandboxd_restore_load_seconds_sum{outcome=\"ok\"}"], 1.5);
  EXPECT_EQ(s["sandboxd_restore_page_waiters{id=\"r1\"}"], 0);

  // A load with failed pages; a removed sandbox leaves the gauges.
  (*m)->SetRestorePages("r3", RestoreReport(60, 0, true, 4 << 20));
  (*m)->RemoveSandbox("r2");
  s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_restore_load_seconds_count{outcome=\"error\"}"], 1);
  EXPECT_EQ(s["sandboxd_restore_bytes_failed_total"], 4 << 20);
  EXPECT_EQ(s["sandboxd_restore_loads_in_progress"], 0);
  EXPECT_EQ(s.count("sandboxd_restore_page_waiters{id=\"r2\"}"), 0u);
  EXPECT_EQ(s["sandboxd_restore_bytes_loaded_total"], (64 + 8 + 60) << 20);
}

// The refusals a Stats report carries: the Sentry's OOM kills and memory
// limit refusals, systrap's refused stub workers, kvm's refused vCPUs.
TEST(MetricsTest, SentryStatsRefusalsAndOomKills) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  auto report = [](const char* platform, uint64_t n) {
    control::SentryStats st;
    st.set_oom_kills(n);
    st.set_memory_limit_refusals(10 * n);
    st.mutable_platform()->set_platform(platform);
    if (std::string(platform) == "kvm") {
      st.mutable_platform()->mutable_kvm()->set_vcpus_refused(3 * n);
    } else {
      st.mutable_platform()->mutable_systrap()->set_workers_refused(2 * n);
    }
    return st;
  };
  (*m)->SetSentryStats("s", report("systrap", 1));
  (*m)->SetSentryStats("s", report("systrap", 4));
  (*m)->SetSentryStats("s", report("systrap", 2));  // stale: moves nothing
  (*m)->SetSentryStats("k", report("kvm", 5));
  const std::string text = (*m)->Scrape();
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_oom_kills_total counter\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_memory_limit_refusals_total counter\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_systrap_workers_refused_total counter\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE sandboxd_kvm_vcpus_refused_total counter\n"));
  std::map<std::string, double> s = ParseSamples(text);
  EXPECT_EQ(s["sandboxd_oom_kills_total"], 4 + 5);
  EXPECT_EQ(s["sandboxd_memory_limit_refusals_total"], 40 + 50);
  EXPECT_EQ(s["sandboxd_systrap_workers_refused_total"], 8);
  EXPECT_EQ(s["sandboxd_kvm_vcpus_refused_total"], 15);
  // The platform's own series come with it.
  EXPECT_EQ(s["sandboxd_sandbox_platform_info{flavour=\"\",id=\"s\",platform=\"systrap\"}"], 1);
  // A destroyed sandbox's share stays; its id used again starts from zero.
  (*m)->RemoveSandbox("s");
  (*m)->SetSentryStats("s", report("systrap", 1));
  s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_oom_kills_total"], 4 + 5 + 1);
  EXPECT_EQ(s["sandboxd_systrap_workers_refused_total"], 10);
}

TEST(MetricsTest, NotServedWithEmptyAddress) {
  auto m = Metrics::Create("");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->port(), 0);
  EXPECT_EQ((*m)->address(), "");
  Exercise(**m);
  std::map<std::string, double> s = ParseSamples((*m)->Scrape());
  EXPECT_EQ(s["sandboxd_sentry_crashes_total"], 1);
}

TEST(MetricsTest, BusyPortIsAnError) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto m = Metrics::Create(absl::StrCat("127.0.0.1:", ntohs(addr.sin_port)));
  EXPECT_FALSE(m.ok());
  EXPECT_TRUE(absl::StrContains(m.status().message(), "cannot serve")) << m.status();
  close(fd);

  EXPECT_EQ(Metrics::Create("nonsense").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
