#include "platforms/systrap/stats.h"

#include "gtest/gtest.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd::systrap {
namespace {

TEST(StatsTest, ToProtoCopiesEveryCounter) {
  Stats s;
  s.spinning[static_cast<int>(Side::kStub)] = 1;
  s.enabled[static_cast<int>(Side::kSentry)] = 3;
  s.disabled[static_cast<int>(Side::kSentry)] = 2;
  s.enabled[static_cast<int>(Side::kStub)] = 5;
  s.disabled[static_cast<int>(Side::kStub)] = 4;
  s.evaluations = 100;
  s.idle_resets = 7;
  s.latency[static_cast<int>(Side::kSentry)][10] = 11;
  s.latency[static_cast<int>(Side::kStub)][kLatencyBuckets - 1] = 1;
  s.stub_threads_awake = 2;
  s.contexts_queued = 1;
  s.patched_sites = 9;

  control::SystrapStats p;
  ToProto(s, &p);
  EXPECT_FALSE(p.sentry().spinning());
  EXPECT_TRUE(p.stub().spinning());
  EXPECT_EQ(p.sentry().enabled(), 3u);
  EXPECT_EQ(p.sentry().disabled(), 2u);
  EXPECT_EQ(p.stub().enabled(), 5u);
  EXPECT_EQ(p.stub().disabled(), 4u);
  EXPECT_EQ(p.evaluations(), 100u);
  EXPECT_EQ(p.idle_resets(), 7u);
  ASSERT_EQ(p.sentry().latency_log2_ns_size(), kLatencyBuckets);
  ASSERT_EQ(p.stub().latency_log2_ns_size(), kLatencyBuckets);
  EXPECT_EQ(p.sentry().latency_log2_ns(10), 11u);
  EXPECT_EQ(p.sentry().latency_log2_ns(9), 0u);
  EXPECT_EQ(p.stub().latency_log2_ns(kLatencyBuckets - 1), 1u);
  EXPECT_EQ(p.stub_threads_awake(), 2);
  EXPECT_EQ(p.contexts_queued(), 1);
  EXPECT_EQ(p.patched_sites(), 9u);
}

}  // namespace
}  // namespace sandboxd::systrap
