#include "platforms/registry.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sandboxd::platform {
namespace {

TEST(RegistryTest, HasEveryBackEndSystrapFirst) {
  const Registry& r = Registry::Get();
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"systrap", "kvm"}));
  EXPECT_EQ(r.DefaultName(), "systrap");
  EXPECT_EQ(r.NamesJoined("|"), "systrap|kvm");
  for (const Backend& b : r.backends()) {
    EXPECT_FALSE(b.description.empty()) << b.name;
    EXPECT_TRUE(b.probe != nullptr) << b.name;
    EXPECT_TRUE(b.create != nullptr) << b.name;
  }
}

TEST(RegistryTest, UnknownNamesListTheChoices) {
  auto b = Registry::Get().Lookup("ptrace");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(),
            "unknown platform: ptrace (available: systrap, kvm)");
  EXPECT_EQ(Registry::Get().Find(""), nullptr);
}

TEST(RegistryTest, OptionFlagsBelongToTheirBackEnd) {
  const Registry& r = Registry::Get();
  for (const char* f : {"systrap-fastpath", "systrap-patch"}) {
    ASSERT_NE(r.OwnerOfFlag(f), nullptr) << f;
    EXPECT_EQ(r.OwnerOfFlag(f)->name, "systrap") << f;
  }
  for (const char* f : {"kvm-vcpu-pool", "kvm-shadow", "kvm-fpu"}) {
    ASSERT_NE(r.OwnerOfFlag(f), nullptr) << f;
    EXPECT_EQ(r.OwnerOfFlag(f)->name, "kvm") << f;
  }
  EXPECT_EQ(r.OwnerOfFlag("platform"), nullptr);
  const Backend& systrap = *r.Find("systrap");
  EXPECT_TRUE(systrap.CheckOption("systrap-fastpath", "timer").ok());
  EXPECT_TRUE(systrap.CheckOption("systrap-patch", "off").ok());
  absl::Status bad = systrap.CheckOption("systrap-patch", "maybe");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--systrap-patch"), std::string::npos) << bad;
  EXPECT_FALSE(systrap.CheckOption("kvm-fpu", "lazy").ok());
  const Backend& kvm = *r.Find("kvm");
  EXPECT_TRUE(kvm.CheckOption("kvm-fpu", "eager").ok());
  EXPECT_FALSE(kvm.CheckOption("kvm-shadow", "lazy").ok());
  EXPECT_TRUE(kvm.preopen != nullptr);
}

TEST(RegistryTest, OptionsForOnePlatform) {
  const Registry& r = Registry::Get();
  const Backend& kvm = *r.Find("kvm");
  const Backend& systrap = *r.Find("systrap");
  OptionValues all = {{"kvm-vcpu-pool", "eager"}, {"systrap-fastpath", "off"}};
  auto k = r.OptionsFor(kvm, all);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*k, (OptionValues{{"kvm-vcpu-pool", "eager"}}));
  auto s = r.OptionsFor(systrap, all);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, (OptionValues{{"systrap-fastpath", "off"}}));
  // A feature asked of another platform is refused; its default is not.
  auto patch = r.OptionsFor(kvm, {{"systrap-patch", "on"}});
  EXPECT_EQ(patch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(r.OptionsFor(kvm, {{"systrap-patch", "off"}}).ok());
  EXPECT_EQ(r.OptionsFor(kvm, {{"kvm-fpu", "never"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.OptionsFor(kvm, {{"no-such", "1"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RegistryTest, SystrapIsUsableEverywhere) {
  EXPECT_TRUE(Registry::Get().Find("systrap")->probe().ok());
}

}  // namespace
}  // namespace sandboxd::platform
