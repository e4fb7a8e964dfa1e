// The systrap platform: application threads run as threads of stub
// processes; every syscall and fault becomes a host signal in the stub,
// whose handler hands the thread's state to the Sentry through shared memory
// (layout.h) and waits for the reply.
//
// Processes: the Sentry forks a *template* early, while it has one thread.
// For every new address space the template clones a stub process (a child
// of the Sentry, by CLONE_PARENT) that maps the stub region, installs the
// seccomp filter, unmaps everything else and runs the stub's control thread.
// Application threads are further threads of that stub, made by the control
// thread on the Sentry's request.
//
// Lock order: Systrap::template_mu_ > StubProcess::control_mu_ >
// StubProcess::slots_mu_.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_SYSTRAP_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_SYSTRAP_H_

#include <sys/types.h>

#include <atomic>
#include <bitset>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/mapping.h"
#include "base/unique_fd.h"
#include "platforms/platform.h"
#include "platforms/systrap/layout.h"

namespace sandboxd::systrap {

class Systrap;

// One stub process: the host side of one application address space.
class StubProcess : public platform::AddressSpace {
 public:
  ~StubProcess() override;

  absl::Status MapFile(uintptr_t addr, int fd, off_t off, size_t len,
                       platform::Prot prot) override;
  void Unmap(uintptr_t addr, size_t len) override;

  pid_t pid() const { return pid_; }
  bool dead() const { return dead_.load(std::memory_order_acquire); }
  StubShared* shared() const { return shared_; }
  // Why the process ended (valid once dead()).
  std::string DeathReason() const;

  // Runs one request on the control thread; returns its result or -errno.
  int64_t Control(ControlOp op, uint64_t a0 = 0, uint64_t a1 = 0,
                  uint64_t a2 = 0, uint64_t a3 = 0, uint64_t a4 = 0,
                  uint64_t a5 = 0);

  // Makes a new stub thread in a free slot and waits until it is ready.
  // Returns the slot index; *tid is its host tid.
  absl::StatusOr<int> NewThread(pid_t* tid);
  // Makes the thread in `slot` exit and frees the slot.
  void ReleaseThread(int slot);

  // Waits until *owner == kOwnerSentry or the process died. Returns false
  // if it died.
  bool WaitForSentry(uint32_t* owner, uint32_t* sentry_sleeping);
  // Hands *owner to the stub and wakes it if it sleeps.
  static void HandToStub(uint32_t* owner, uint32_t* stub_sleeping);

 private:
  friend class Systrap;
  StubProcess(Systrap* platform, pid_t pid, UniqueFd shared_fd,
              Mapping shared_map);
  void Reap();

  Systrap* const platform_;
  const pid_t pid_;
  UniqueFd shared_fd_;
  Mapping shared_map_;
  StubShared* const shared_;
  std::atomic<bool> dead_{false};
  std::atomic<int> exit_status_{0};
  std::thread reaper_;

  absl::Mutex control_mu_;
  absl::Mutex slots_mu_;
  std::bitset<kMaxThreads> used_slots_ ABSL_GUARDED_BY(slots_mu_);
  // Slots handed out at least once: the only ones a Sentry thread can be
  // waiting on, and the only ones whose pages of the shared area exist.
  std::bitset<kMaxThreads> ever_used_ ABSL_GUARDED_BY(slots_mu_);
};

// One application thread's binding to a stub thread.
class SystrapContext : public platform::Context {
 public:
  explicit SystrapContext(Systrap* platform) : platform_(platform) {}
  ~SystrapContext() override { Release(); }

  platform::Event Switch(platform::AddressSpace& as,
                         platform::CpuState& cpu) override;
  void Interrupt() override;
  void Release() override;

 private:
  Systrap* const platform_;
  // Owned by the task's host thread (Switch/Release); Interrupt reads
  // stub_ and tid_ only while running_ is set.
  StubProcess* stub_ = nullptr;
  int slot_ = -1;
  std::atomic<pid_t> tid_{0};
  std::atomic<bool> running_{false};
  std::atomic<bool> interrupt_{false};
};

// Reserves the stub window in the calling process (PROT_NONE), so that
// nothing else is mapped there and stubs forked later can map it with
// MAP_FIXED. Call it first thing in main(), before large mappings; Create
// calls it too. Idempotent.
absl::Status ReserveStubWindow();

class Systrap : public platform::Platform {
 public:
  // Forks the stub template. Must be called while the calling process has
  // a single thread. `memfile_fd` is the sandbox's memory file.
  static absl::StatusOr<std::unique_ptr<Systrap>> Create(int memfile_fd);
  ~Systrap() override;

  std::string Name() const override { return "systrap"; }
  uintptr_t MaxUserAddress() const override { return kStubBase; }
  absl::StatusOr<std::unique_ptr<platform::AddressSpace>> NewAddressSpace()
      override;
  absl::StatusOr<std::unique_ptr<platform::Context>> NewContext() override;

  uint64_t spin_cycles() const { return spin_cycles_; }

  // How many stub processes to keep made ahead of need (default
  // kDefaultPoolSize; 0: none). The pool starts at the second
  // NewAddressSpace (the program's first fork or exec: a program that
  // never makes a process pays nothing), and a background thread refills it
  // whenever NewAddressSpace takes one, so that fork and execve do not wait
  // for the template's clone, the shared area and the reaper thread.
  static constexpr size_t kDefaultPoolSize = 2;
  void set_pool_size(size_t n);

 private:
  Systrap() = default;
  // Makes one stub process through the template.
  absl::StatusOr<std::unique_ptr<StubProcess>> CreateStub();
  void RefillLoop();

  absl::Mutex pool_mu_;
  std::vector<std::unique_ptr<StubProcess>> pool_ ABSL_GUARDED_BY(pool_mu_);
  size_t pool_size_ ABSL_GUARDED_BY(pool_mu_) = kDefaultPoolSize;
  uint64_t address_spaces_made_ ABSL_GUARDED_BY(pool_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(pool_mu_) = false;
  std::thread refiller_;  // started with the pool

  pid_t template_pid_ = -1;
  absl::Mutex template_mu_;
  UniqueFd template_sock_ ABSL_GUARDED_BY(template_mu_);
  uint64_t spin_cycles_ = 0;
  bool has_fsgsbase_ = false;
};

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_SYSTRAP_H_
