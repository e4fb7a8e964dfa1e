#include "daemon/sentry_kind.h"

#include "gtest/gtest.h"

namespace sandboxd {
namespace daemon {
namespace {

v1::SandboxSpec Spec(const std::string& platform, v1::SystrapPatch patch) {
  v1::SandboxSpec s;
  s.set_platform(platform);
  s.mutable_systrap()->set_patch(patch);
  return s;
}

TEST(SentryKindTest, KeysRoundTrip) {
  for (const SentryKind& k : {SentryKind{"systrap", false}, SentryKind{"systrap", true},
                              SentryKind{"kvm", false}}) {
    EXPECT_EQ(SentryKind::FromKey(k.Key()), k) << k.Key();
  }
  EXPECT_EQ((SentryKind{"systrap", false}).Key(), "systrap");
  EXPECT_EQ((SentryKind{"systrap", true}).Key(), "systrap+patch");
  EXPECT_EQ((SentryKind{"systrap", true}).ServeFlags(),
            std::vector<std::string>{"--systrap-patch=on"});
  EXPECT_TRUE((SentryKind{"systrap", false}).ServeFlags().empty());
}

TEST(SentryKindTest, HostNetworkIsAKindOfItsOwn) {
  const SentryKind host{"systrap", true, true};
  EXPECT_EQ(host.Key(), "systrap+patch+hostnet");
  EXPECT_EQ(SentryKind::FromKey(host.Key()), host);
  EXPECT_EQ(SentryKind::FromKey("kvm+hostnet"), (SentryKind{"kvm", false, true}));
  EXPECT_EQ(host.ServeFlags(),
            (std::vector<std::string>{"--systrap-patch=on", "--network=host"}));
  v1::SandboxSpec spec = Spec("kvm", v1::SYSTRAP_PATCH_DEFAULT);
  spec.set_network(v1::NETWORK_MODE_HOST);
  auto k = KindForSpec(spec, false);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->host_network);
  EXPECT_EQ(k->Key(), "kvm+hostnet");
  spec.set_network(v1::NETWORK_MODE_NONE);
  EXPECT_FALSE(KindForSpec(spec, false)->host_network);
  // The sandbox mode is pasta attached to a warm Sentry's own namespace
  // at Create: the same kind as NONE, a pool hit.
  spec.set_network(v1::NETWORK_MODE_SANDBOX);
  EXPECT_EQ(KindForSpec(spec, false)->Key(), "kvm");
}

TEST(SentryKindTest, TheSpecOrTheDaemonsDefault) {
  const bool can = SystrapPatchUnavailable().empty();
  auto off = KindForSpec(Spec("systrap", v1::SYSTRAP_PATCH_OFF), true);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->systrap_patch);
  auto dflt = KindForSpec(Spec("systrap", v1::SYSTRAP_PATCH_DEFAULT), false);
  ASSERT_TRUE(dflt.ok());
  EXPECT_FALSE(dflt->systrap_patch);
  for (auto [patch, def] : {std::pair{v1::SYSTRAP_PATCH_ON, false},
                            std::pair{v1::SYSTRAP_PATCH_DEFAULT, true}}) {
    auto on = KindForSpec(Spec("systrap", patch), def);
    if (can) {
      ASSERT_TRUE(on.ok()) << on.status();
      EXPECT_TRUE(on->systrap_patch);
    } else {
      EXPECT_EQ(on.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(on.status().message().find("spec.systrap.patch"), std::string::npos);
    }
  }
}

TEST(SentryKindTest, PatchingIsASystrapOption) {
  auto kvm = KindForSpec(Spec("kvm", v1::SYSTRAP_PATCH_ON), false);
  EXPECT_EQ(kvm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(kvm.status().message().find("spec.systrap.patch"), std::string::npos);
  // The daemon's default is systrap's: a kvm sandbox just has none.
  auto kvm_default = KindForSpec(Spec("kvm", v1::SYSTRAP_PATCH_DEFAULT), true);
  ASSERT_TRUE(kvm_default.ok());
  EXPECT_EQ(kvm_default->Key(), "kvm");
  auto bad = KindForSpec(Spec("systrap", static_cast<v1::SystrapPatch>(7)), false);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace daemon
}  // namespace sandboxd
