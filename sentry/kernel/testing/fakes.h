// Test doubles for kernel tests: a platform whose address spaces accept any
// mapping and whose contexts must never run, and helpers to build tasks
// without a filesystem or a syscall table. Header-only, for *_test.cc.
#ifndef SANDBOXD_SENTRY_KERNEL_TESTING_FAKES_H_
#define SANDBOXD_SENTRY_KERNEL_TESTING_FAKES_H_

#include <errno.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "platforms/platform.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/task.h"

namespace sandboxd::kernel::testing {

inline constexpr uintptr_t kMinUserAddr = 0x10000;
inline constexpr uintptr_t kMaxUserAddr = 0x7ffffffff000;

// The kernel's SA_RESTORER (glibc's <signal.h> does not export it).
inline constexpr uint64_t kSaRestorer = 0x04000000;

// Tasks that resolve no paths: a process root and cwd that are not set.
inline std::shared_ptr<fs::FsContext> NoFs() {
  return std::make_shared<fs::FsContext>(fs::Location{}, fs::Location{});
}

// An Event of `kind` with the other fields defaulted.
inline platform::Event EventOf(platform::Event::Kind kind) {
  platform::Event ev;
  ev.kind = kind;
  return ev;
}

class FakeAddressSpace : public platform::AddressSpace {
 public:
  absl::Status MapFile(uintptr_t, int, off_t, size_t,
                       platform::Prot) override {
    return absl::OkStatus();
  }
  void Unmap(uintptr_t, size_t) override {}
};

// For tasks that are never started: Switch is a test failure.
class IdleContext : public platform::Context {
 public:
  platform::Event Switch(platform::AddressSpace&, platform::CpuState&) override {
    ADD_FAILURE() << "Switch called on a task that was not started";
    return EventOf(platform::Event::Kind::kDead);
  }
  void Interrupt() override {}
};

class FakePlatform : public platform::Platform {
 public:
  std::string Name() const override { return "fake"; }
  uintptr_t MaxUserAddress() const override { return kMaxUserAddr; }
  absl::StatusOr<std::unique_ptr<platform::AddressSpace>> NewAddressSpace()
      override {
    return std::make_unique<FakeAddressSpace>();
  }
  absl::StatusOr<std::unique_ptr<platform::Context>> NewContext() override {
    return std::make_unique<IdleContext>();
  }
};

class NoSyscalls : public SyscallTable {
 public:
  int64_t Invoke(Task&, const SyscallArgs&) override { return -ENOSYS; }
};

}  // namespace sandboxd::kernel::testing

#endif  // SANDBOXD_SENTRY_KERNEL_TESTING_FAKES_H_
