// The kvm platform: application threads run in user mode of a KVM guest
// (the PVM flavour; see README.md for what the stub does and why).
//
// One VM per sandbox. Guest-physical memory is the memory file at GPA ==
// file offset (slot 0, over this platform's own shared mapping of the
// memfd) plus PrivateMemory at kPrivateBase (page tables, the stub page).
// Each address space is one set of page tables; each context holds a vCPU
// from the pool while its task runs, and the task's own thread is the
// thread in KVM_RUN.
//
// Shadow coherence: PVM runs the guest on shadow page tables that KVM
// builds from the guest's tables and keeps coherent by write-protecting
// them against guest writes. The Sentry writes them from the host, which
// KVM does not see. Three rules keep the shadow right (README.md):
//  - a changed or cleared 4 KiB entry: the old page's shadow entries are
//    zapped at once (MADV_DONTNEED on the platform's mapping of the memory
//    file fires KVM's MMU notifier), so the next access walks the tables;
//  - a freed table page is quarantined (PrivateMemory), never reused
//    before a full flush: stale shadow links to it lead only to zapped
//    entries of the same address range;
//  - a changed, cleared or split large page (its shadow is shared by every
//    space mapping it), or a large quarantine: a full flush before the next
//    KVM_RUN, re-creating the private memory slot with every vCPU out of
//    KVM_RUN (run_mu_ held for writing).
//
// Lock order: KvmAddressSpace::mu_ > KvmPlatform::slots_mu_;
// KvmPlatform::zap_mu_ > KvmPlatform::ctx_mu_ >
// KvmContext::kick_mu_; KvmPlatform::run_mu_ (readers: vCPUs in
// KVM_RUN) is taken after the kicks; VcpuPool::mu_ is a leaf.
#ifndef SANDBOXD_PLATFORMS_KVM_KVM_PLATFORM_H_
#define SANDBOXD_PLATFORMS_KVM_KVM_PLATFORM_H_

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "base/mapping.h"
#include "platforms/kvm/page_tables.h"
#include "platforms/kvm/probe.h"
#include "platforms/kvm/stub_pvm.h"
#include "platforms/kvm/vm.h"
#include "platforms/platform.h"

namespace sandboxd::kvm {

class KvmPlatform;

// When the vCPU pool and the host's membarrier registration are made.
enum class PoolMode {
  // vCPU 0 in Create (the Sentry's prewarm); the other vCPUs and the
  // membarrier registration on background threads. FinishSetup joins the
  // vCPU filler; the first membarrier(2) waits for the registration.
  kBackground,
  // All of it synchronously in FinishSetup, on the sandbox's start path:
  // what the background mode saves, for benchmarks (--kvm-vcpu-pool=eager).
  kEager,
};
// "background" or "eager".
absl::StatusOr<PoolMode> ParsePoolMode(absl::string_view s);

struct KvmOptions {
  size_t pool_size = 0;  // 0: DefaultPoolSize()
  PoolMode pool_mode = PoolMode::kBackground;
  // The previous behaviours, kept for A/B benchmarks in one run:
  // zap_stale false: every page-table change that a shadow entry could
  // contradict flushes the whole shadow MMU (--kvm-shadow=flush);
  // lazy_fp false: KVM_SET_XSAVE and KVM_GET_XSAVE on every Switch
  // (--kvm-fpu=eager).
  bool zap_stale = true;
  bool lazy_fp = true;
};
// Parses --kvm-shadow=zap|flush and --kvm-fpu=lazy|eager into `o`.
absl::Status ParseShadowMode(absl::string_view s, KvmOptions* o);
absl::Status ParseFpuMode(absl::string_view s, KvmOptions* o);
// Twice the host's online CPUs: a vCPU per task thread in use, without
// creating one on a task's first Switch in the common case.
size_t DefaultPoolSize();

class KvmAddressSpace : public platform::AddressSpace {
 public:
  absl::Status MapFile(uintptr_t addr, int fd, off_t off, size_t len,
                       platform::Prot prot) override;
  void Unmap(uintptr_t addr, size_t len) override;

  uint64_t root() const { return root_; }
  // Whether the two bytes at `va` are `int $0x80` (cd 80), read through
  // the page tables from the memory file.
  bool IsInt80At(uint64_t va);

 private:
  friend class KvmPlatform;
  KvmAddressSpace(KvmPlatform* p, PageTables pt)
      : platform_(p), root_(pt.root()), pt_(std::move(pt)) {}

  KvmPlatform* const platform_;
  // pt_.root(), which never changes: Switch reads it without mu_.
  const uint64_t root_;
  absl::Mutex mu_;  // serializes MapFile/Unmap (mm holds its own locks too)
  PageTables pt_ ABSL_GUARDED_BY(mu_);

 public:
  ~KvmAddressSpace() override;
};

class KvmContext : public platform::Context {
 public:
  explicit KvmContext(KvmPlatform* p);
  ~KvmContext() override;

  platform::Event Switch(platform::AddressSpace& as,
                         platform::CpuState& cpu) override;
  void Interrupt() override;
  // Takes the context's vCPU from the pool ahead of its first Switch: a
  // vCPU the host refuses (KVM_CREATE_VCPU, its run mapping) fails the
  // clone with EAGAIN.
  absl::Status Prepare(platform::AddressSpace& as) override;
  void Release() override;
  void SyncFp(platform::CpuState& cpu) override;
  // Makes a KVM_RUN in progress return (for the shadow flush), without
  // making Switch return.
  void Kick();
  uint64_t xsave_loads() const { return xsave_loads_; }
  const Vcpu* vcpu() const { return vcpu_.get(); }  // null when released
  uint64_t xsave_saves() const { return xsave_saves_; }

 private:
  // Takes a vCPU from the pool (or a new one) and sets it up; a failure
  // is counted in Stats::vcpus_refused.
  absl::Status Acquire();
  absl::Status AcquireVcpu();
  absl::Status LoadFp(const platform::CpuState& cpu);
  absl::Status SaveFp(platform::CpuState& cpu);
  platform::Event Decode(uint32_t reason, platform::CpuState& cpu);
  platform::Event DecodeHardware(uint32_t reason, platform::CpuState& cpu);

  KvmPlatform* const platform_;
  std::unique_ptr<Vcpu> vcpu_;  // owned by the task's thread
  // The CpuState whose FPU state is live in vcpu_ and stale in its `fp`
  // (CpuState::fp_live == this): KVM_SET_XSAVE is skipped while it stays
  // so, KVM_GET_XSAVE waits for SyncFp or Release.
  platform::CpuState* live_cpu_ = nullptr;
  uint64_t xsave_loads_ = 0, xsave_saves_ = 0;  // ioctls made (tests)
  // What the vCPU's segment state was last loaded with; a mismatch (or a
  // triple fault, which leaves the vCPU needing a reload) means
  // KVM_SET_SREGS through the synced registers.
  bool sregs_valid_ = false;
  uint64_t loaded_root_ = 0;
  uint64_t loaded_fs_ = 0, loaded_gs_ = 0;
  // Hardware flavour: the vCPU stopped in the stub after a syscall, before
  // its SYSRETQ (guest_hw.h), at this RIP and RFLAGS.
  bool parked_ = false;
  uint64_t parked_rip_ = 0, parked_rflags_ = 0;

  absl::Mutex kick_mu_;
  bool running_ ABSL_GUARDED_BY(kick_mu_) = false;
  pthread_t thread_ ABSL_GUARDED_BY(kick_mu_){};
  std::atomic<bool> interrupt_{false};
};

class KvmPlatform : public platform::Platform {
 public:
  // Probes KVM (RunProbe) and builds the VM over the memory file `fd`,
  // whose size never exceeds `memfile_max`. Fails with one line when the
  // probe does.
  static absl::StatusOr<std::unique_ptr<KvmPlatform>> Create(
      int memfile_fd, uint64_t memfile_max, KvmOptions opts = {});
  ~KvmPlatform() override;

  std::string Name() const override { return "kvm"; }
  uintptr_t MaxUserAddress() const override { return kStubVa; }
  absl::StatusOr<std::unique_ptr<platform::AddressSpace>> NewAddressSpace()
      override;
  absl::StatusOr<std::unique_ptr<platform::Context>> NewContext() override;
  absl::Status FinishSetup() override;
  // MEMBARRIER_CMD_PRIVATE_EXPEDITED on the Sentry itself: the task
  // threads are its threads, in KVM_RUN or not. Waits for the
  // registration issued at Create (or made in FinishSetup when eager).
  absl::Status MemoryBarrier() override;
  // Vm::stats() with the flavour, shadow flushes and free vCPUs.
  void ExportStats(control::PlatformStats* out) override;

  const ProbeReport& probe() const { return probe_; }
  Vm* vm() const { return vm_.get(); }
  // Null until FinishSetup in the eager mode.
  VcpuPool* pool() const { return pool_.get(); }
  const KvmOptions& options() const { return opts_; }
  // The hardware (VMX/SVM) flavour's stub, not PVM's (the probe decided).
  bool hardware() const { return vm_->flavour() == Flavour::kHardware; }
  // Hardware flavour: the host view of vCPU `vcpu`'s exception frame
  // (hw::kFrameWords words at its stack top).
  const uint64_t* HardwareFrame(int vcpu) const;
  int memfile_fd() const { return memfile_fd_; }
  uint32_t xsave_size() const { return xsave_size_; }
  uint64_t xcr0() const { return xcr0_; }

  // See "Shadow coherence" above.
  void MarkShadowStale() { stale_.fetch_add(1, std::memory_order_acq_rel); }
  bool ShadowFlushPending() const {
    return flushed_.load(std::memory_order_acquire) <
           stale_.load(std::memory_order_acquire);
  }
  absl::Status FlushShadowIfStale() ABSL_LOCKS_EXCLUDED(zap_mu_, run_mu_);
  absl::Status FlushShadowNow() ABSL_LOCKS_EXCLUDED(zap_mu_, run_mu_);
  // After a page-table change: drops KVM's shadow entries for the 4 KiB
  // `pages` (memory-file offsets) at once, and asks for a full flush when
  // `large` (a large page changed) or when the quarantine of freed table
  // pages has grown.
  void DropStale(std::vector<uint64_t> pages, bool large);
  absl::Mutex& run_mu() ABSL_LOCK_RETURNED(run_mu_) { return run_mu_; }

  // The memory file is put into guest-physical memory in kMemfileChunk
  // slots, added when a mapping first reaches them: one 64 GiB slot would
  // cost ~75 ms at startup here, a 1 GiB one well under a millisecond.
  static constexpr uint64_t kMemfileChunk = 1ull << 30;
  absl::Status EnsureMemfileSlots(uint64_t end) ABSL_LOCKS_EXCLUDED(slots_mu_);
  uint64_t shadow_flushes() const { return flushes_.load(); }
  uint64_t shadow_flush_ns() const { return flush_ns_.load(); }
  // DropStale calls that zapped pages, and their time.
  uint64_t shadow_zaps() const { return zaps_.load(); }
  uint64_t shadow_zap_ns() const { return zap_ns_.load(); }

 private:
  KvmPlatform() = default;

  ProbeReport probe_;
  std::unique_ptr<Vm> vm_;
  int memfile_fd_ = -1;
  Mapping memfile_map_;
  std::unique_ptr<PrivateMemory> private_;
  uint64_t stub_phys_ = 0;  // the stub page, mapped into every space
  std::unique_ptr<VcpuPool> pool_;
  KvmOptions opts_;
  // MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: an RCU grace period in a
  // multi-threaded process, milliseconds here, so never on a start path.
  absl::Status RegisterMembarrier();
  std::thread membarrier_thread_;
  absl::Notification membarrier_done_;
  absl::Status membarrier_status_;  // written before membarrier_done_
  uint32_t xsave_size_ = 512;
  uint64_t xcr0_ = 3;

  friend class KvmContext;
  absl::Mutex slots_mu_;
  uint64_t memfile_slots_ ABSL_GUARDED_BY(slots_mu_) = 0;  // chunks added
  uint64_t memfile_max_ = 0;
  std::atomic<uint64_t> stale_{0}, flushed_{0};
  std::atomic<uint64_t> flushes_{0}, flush_ns_{0};
  std::atomic<uint64_t> zaps_{0}, zap_ns_{0};
  absl::Mutex zap_mu_;
  absl::Mutex ctx_mu_ ABSL_ACQUIRED_AFTER(zap_mu_);
  std::set<KvmContext*> contexts_ ABSL_GUARDED_BY(ctx_mu_);
  absl::Mutex run_mu_;
};

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_KVM_PLATFORM_H_
