#include "platforms/kvm/flavour.h"

#include "gtest/gtest.h"

namespace sandboxd::kvm {
namespace {

TEST(Flavour, VmxOrSvmMeansHardware) {
  EXPECT_EQ(ClassifyFlavour(true, false, std::nullopt).flavour,
            Flavour::kHardware);
  EXPECT_EQ(ClassifyFlavour(false, true, kPvmSignature).flavour,
            Flavour::kHardware);
}

TEST(Flavour, PvmSignature) {
  FlavourInfo f = ClassifyFlavour(false, false, kPvmSignature);
  EXPECT_EQ(f.flavour, Flavour::kPvm);
  EXPECT_NE(f.reason.find("PVM signature"), std::string::npos);
}

TEST(Flavour, NeitherIsNone) {
  EXPECT_EQ(ClassifyFlavour(false, false, std::nullopt).flavour,
            Flavour::kNone);
  FlavourInfo f = ClassifyFlavour(false, false, 0x1234);
  EXPECT_EQ(f.flavour, Flavour::kNone);
  EXPECT_NE(f.reason.find("0x1234"), std::string::npos);
}

TEST(Flavour, Names) {
  EXPECT_STREQ(FlavourName(Flavour::kPvm), "pvm");
  EXPECT_STREQ(FlavourName(Flavour::kHardware), "hardware");
  EXPECT_STREQ(FlavourName(Flavour::kNone), "none");
}

}  // namespace
}  // namespace sandboxd::kvm
