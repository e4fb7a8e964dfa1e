// The host side of a KVM virtual machine: /dev/kvm, the VM, its memory
// slots, vCPUs and a pool of them.
//
// Guest-physical layout (see README.md):
//   [0, memfile max)           the memory file: GPA == memory-file offset,
//                              in 1 GiB slots added on demand (KvmPlatform)
//   [kPrivateBase, +size)      platform-private memory: page tables and the
//                              stub page
//
// Lock order: VcpuPool::mu_ only (leaf).
#ifndef SANDBOXD_PLATFORMS_KVM_VM_H_
#define SANDBOXD_PLATFORMS_KVM_VM_H_

#include <linux/kvm.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/mapping.h"
#include "base/unique_fd.h"
#include "platforms/kvm/cpuid.h"
#include "platforms/kvm/flavour.h"
#include "platforms/kvm/page_tables.h"
#include "platforms/kvm/stats.h"

namespace sandboxd::kvm {

// Where platform-private memory starts in guest-physical space: above any
// memory file (at most 1 TiB) and below the 48-bit physical limit.
inline constexpr uint64_t kPrivateBase = 1ull << 40;

// Named, timed steps of bringing a VM up (nanoseconds, 0: not done).
struct VmTimings {
  uint64_t open_kvm_ns = 0;
  uint64_t create_vm_ns = 0;
  uint64_t supported_cpuid_ns = 0;
  uint64_t first_vcpu_ns = 0;  // KVM_CREATE_VCPU + mmap + KVM_SET_CPUID2
  uint64_t memfile_slot_ns = 0;
  uint64_t private_slot_ns = 0;
};

uint64_t MonotonicNs();

// Opens /dev/kvm and checks the API version.
absl::StatusOr<UniqueFd> OpenKvm();
// Opens /dev/kvm now, for OpenKvm to duplicate later: for a Sentry that
// pivots into an empty root (sentry serve) before it makes its VM.
absl::Status PreopenKvm();

// One vCPU: its fd and its kvm_run area. Used by one thread at a time.
class Vcpu {
 public:
  Vcpu(const Vcpu&) = delete;
  Vcpu& operator=(const Vcpu&) = delete;

  int id() const { return id_; }
  int fd() const { return fd_.get(); }
  kvm_run* run() const { return static_cast<kvm_run*>(run_map_.addr()); }

  // KVM_RUN once. Returns the exit reason, or an error (EINTR comes back as
  // KVM_EXIT_INTR, as if the kernel had reported it).
  absl::StatusOr<uint32_t> Run();

  absl::Status GetRegs(kvm_regs* r) const;
  absl::Status SetRegs(const kvm_regs& r) const;
  absl::Status GetSregs(kvm_sregs* s) const;
  absl::Status SetSregs(const kvm_sregs& s) const;
  absl::Status SetMsr(uint32_t index, uint64_t value) const;
  absl::StatusOr<uint64_t> GetMsr(uint32_t index) const;

 private:
  friend class Vm;
  Vcpu(int id, UniqueFd fd, Mapping run_map)
      : id_(id), fd_(std::move(fd)), run_map_(std::move(run_map)) {}

  const int id_;
  const UniqueFd fd_;
  const Mapping run_map_;
};

class Vm {
 public:
  // Opens /dev/kvm, creates the VM and reads the supported CPUID.
  static absl::StatusOr<std::unique_ptr<Vm>> Create(Flavour flavour);
  Vm(const Vm&) = delete;
  Vm& operator=(const Vm&) = delete;

  int kvm_fd() const { return kvm_.get(); }
  int fd() const { return vm_.get(); }
  Flavour flavour() const { return flavour_; }
  const CpuidEntries& cpuid() const { return cpuid_; }
  const VmTimings& timings() const { return timings_; }

  // KVM_SET_USER_MEMORY_REGION: [gpa, gpa+size) is `host`. Records the
  // time into *ns when given.
  absl::Status SetSlot(uint32_t slot, uint64_t gpa, void* host, uint64_t size,
                       uint64_t* ns = nullptr);

  // Creates vCPU `id` with the filtered CPUID installed.
  absl::StatusOr<std::unique_ptr<Vcpu>> CreateVcpu(int id);

  // Sets timings().first_vcpu_ns etc.; used by the pool and the probe.
  VmTimings& mutable_timings() { return timings_; }
  // The VM's counters (stats.h): any thread.
  Stats& stats() { return stats_; }

 private:
  Vm(UniqueFd kvm, UniqueFd vm, Flavour flavour)
      : kvm_(std::move(kvm)), vm_(std::move(vm)), flavour_(flavour) {}

  const UniqueFd kvm_;
  const UniqueFd vm_;
  const Flavour flavour_;
  CpuidEntries cpuid_;  // filtered, installed in every vCPU
  int vcpu_mmap_size_ = 0;
  VmTimings timings_;
  Stats stats_;
};

// vCPUs made ahead of need. The first is created synchronously (a task
// needs one at once); the rest on a background thread, so that creating
// them (tens of µs each) is off the start path. Take() hands one out and
// Give() takes it back; there is one vCPU per task thread in use.
class VcpuPool {
 public:
  // Creates vCPU 0 now and fills up to `target` in the background, or,
  // with `background` false, creates all `target` before returning.
  static absl::StatusOr<std::unique_ptr<VcpuPool>> Create(
      Vm* vm, size_t target, bool background = true);
  ~VcpuPool();

  // A free vCPU; creates one if the pool is empty.
  absl::StatusOr<std::unique_ptr<Vcpu>> Take();
  void Give(std::unique_ptr<Vcpu> v);
  // Waits for the background filler (before installing a seccomp filter
  // that would forbid its ioctls, and in tests).
  void JoinFiller();
  size_t free_count();

 private:
  VcpuPool(Vm* vm, size_t target) : vm_(vm), target_(target) {}
  void Fill();

  Vm* const vm_;
  const size_t target_;
  std::thread filler_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<Vcpu>> free_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fill_error_ ABSL_GUARDED_BY(mu_);
};

// Platform-private guest memory: one anonymous host mapping in a slot at
// kPrivateBase, handing out zeroed pages (page tables, stub code, vCPU
// structs). Also the TableAllocator of the page tables built in it.
//
// A freed table page is quarantined, not reused: KVM may still hold a
// shadow page built from it (PVM), reachable through stale links, and a new
// use of the gfn would make that shadow say something else. Quarantined
// pages come back (ReleaseQuarantine) after a flush of every shadow page;
// when nothing else is left, AllocPage asks for that flush (the reclaim
// callback) and retries.
class PrivateMemory : public TableAllocator {
 public:
  static absl::StatusOr<std::unique_ptr<PrivateMemory>> Create(Vm* vm,
                                                               uint32_t slot,
                                                               uint64_t size);

  absl::StatusOr<TablePage> AllocTable() override { return AllocPage(); }
  void FreeTable(TablePage page) override;
  uint64_t* HostOf(uint64_t phys) override;

  absl::StatusOr<TablePage> AllocPage() ABSL_LOCKS_EXCLUDED(mu_);
  uint8_t* host_base() const { return map_.bytes(); }
  uint64_t size() const { return map_.size(); }

  // Freed pages waiting for a shadow flush, and their release after one.
  size_t quarantined() ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseQuarantine() ABSL_LOCKS_EXCLUDED(mu_);
  // Called (without mu_) when no page is left but some are quarantined;
  // must flush every shadow page and call ReleaseQuarantine.
  void set_reclaim(std::function<absl::Status()> f) { reclaim_ = std::move(f); }

 private:
  explicit PrivateMemory(Mapping map) : map_(std::move(map)) {}

  const Mapping map_;
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;  // bump offset
  std::vector<uint64_t> free_ ABSL_GUARDED_BY(mu_);  // reusable page offsets
  std::vector<uint64_t> quarantine_ ABSL_GUARDED_BY(mu_);  // freed, not yet
  std::function<absl::Status()> reclaim_;
};

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_VM_H_
