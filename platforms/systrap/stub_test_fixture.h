// A gtest fixture for tests that run machine code in real stub processes:
// one Systrap per test binary over a memory file of two pages, code (page
// 0, mapped at kCode) and data (page 1, at kData). Shared by systrap_test
// and ring_test.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_STUB_TEST_FIXTURE_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_STUB_TEST_FIXTURE_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "platforms/systrap/systrap.h"

namespace sandboxd::systrap {

class StubFixture : public ::testing::Test {
 protected:
  static constexpr uintptr_t kCode = 0x10000;
  static constexpr uintptr_t kData = 0x20000;

  // Once per test binary (every suite deriving from this one shares it):
  // the template must be forked while the process is (nearly)
  // single-threaded.
  static void SetUpTestSuite() {
    if (platform_ != nullptr) return;
    memfd_ = memfd_create("systrap-test", 0);
    ASSERT_GE(memfd_, 0);
    ASSERT_EQ(ftruncate(memfd_, 2 * 4096), 0);
    auto p = Systrap::Create(memfd_);
    ASSERT_TRUE(p.ok()) << p.status();
    platform_ = p->release();
  }

  // Writes `code` at the start of the code page and `data_word` at
  // kData + 8.
  static void LoadCode(const std::vector<uint8_t>& code,
                       uint64_t data_word = 0) {
    ASSERT_EQ(pwrite(memfd_, code.data(), code.size(), 0),
              static_cast<ssize_t>(code.size()));
    ASSERT_EQ(pwrite(memfd_, &data_word, 8, 4096 + 8), 8);
  }

  // A new address space with the code page (r-x) and the data page (rw-).
  std::unique_ptr<platform::AddressSpace> NewSpace() {
    using platform::Prot;
    auto as = platform_->NewAddressSpace();
    EXPECT_TRUE(as.ok()) << as.status();
    EXPECT_TRUE(
        (*as)->MapFile(kCode, memfd_, 0, 4096, Prot{true, false, true}).ok());
    EXPECT_TRUE(
        (*as)->MapFile(kData, memfd_, 4096, 4096, Prot{true, true, false}).ok());
    return std::move(*as);
  }

  // A fresh thread at `rip`, its stack at the top of the data page.
  static platform::CpuState StartAt(uintptr_t rip) {
    platform::CpuState cpu;
    cpu.regs.rip = rip;
    cpu.regs.rsp = kData + 4096 - 64;
    cpu.regs.eflags = 0x202;
    return cpu;
  }

  static inline int memfd_ = -1;
  static inline Systrap* platform_ = nullptr;
};

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_STUB_TEST_FIXTURE_H_
