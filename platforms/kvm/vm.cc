#include "platforms/kvm/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "platforms/kvm/kvm_abi.h"

namespace sandboxd::kvm {

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

namespace {
// /dev/kvm opened ahead of time by PreopenKvm (-1: not).
int g_preopened_kvm = -1;
}  // namespace

absl::Status PreopenKvm() {
  if (g_preopened_kvm >= 0) return absl::OkStatus();
  int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("opening /dev/kvm", errno);
  g_preopened_kvm = fd;
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenKvm() {
  UniqueFd kvm(g_preopened_kvm >= 0
                   ? fcntl(g_preopened_kvm, F_DUPFD_CLOEXEC, 0)
                   : open("/dev/kvm", O_RDWR | O_CLOEXEC));
  if (!kvm.valid()) return ErrnoStatus("opening /dev/kvm", errno);
  const int api = ioctl(kvm.get(), KVM_GET_API_VERSION, 0);
  if (api != KVM_API_VERSION) {
    return absl::FailedPreconditionError(
        absl::StrFormat("/dev/kvm: API version %d, want %d", api,
                        KVM_API_VERSION));
  }
  return kvm;
}

// ---- Vcpu ----

absl::StatusOr<uint32_t> Vcpu::Run() {
  if (ioctl(fd_.get(), KVM_RUN, 0) < 0) {
    if (errno == EINTR || errno == EAGAIN) return KVM_EXIT_INTR;
    return ErrnoStatus(absl::StrFormat("KVM_RUN (vcpu %d)", id_), errno);
  }
  return run()->exit_reason;
}

absl::Status Vcpu::GetRegs(kvm_regs* r) const {
  if (ioctl(fd_.get(), KVM_GET_REGS, r) < 0) {
    return ErrnoStatus("KVM_GET_REGS", errno);
  }
  return absl::OkStatus();
}

absl::Status Vcpu::SetRegs(const kvm_regs& r) const {
  if (ioctl(fd_.get(), KVM_SET_REGS, &r) < 0) {
    return ErrnoStatus("KVM_SET_REGS", errno);
  }
  return absl::OkStatus();
}

absl::Status Vcpu::GetSregs(kvm_sregs* s) const {
  if (ioctl(fd_.get(), KVM_GET_SREGS, s) < 0) {
    return ErrnoStatus("KVM_GET_SREGS", errno);
  }
  return absl::OkStatus();
}

absl::Status Vcpu::SetSregs(const kvm_sregs& s) const {
  if (ioctl(fd_.get(), KVM_SET_SREGS, &s) < 0) {
    return ErrnoStatus("KVM_SET_SREGS", errno);
  }
  return absl::OkStatus();
}


absl::Status Vcpu::SetMsr(uint32_t index, uint64_t value) const {
  KvmMsrsOne m;
  m.entry.index = index;
  m.entry.data = value;
  // KVM_SET_MSRS returns the number of MSRs it set.
  if (ioctl(fd_.get(), kKvmSetMsrs, &m) != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KVM_SET_MSRS: MSR %#x = %#x refused", index, value));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Vcpu::GetMsr(uint32_t index) const {
  KvmMsrsOne m;
  m.entry.index = index;
  if (ioctl(fd_.get(), kKvmGetMsrs, &m) != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KVM_GET_MSRS: MSR %#x unknown", index));
  }
  return m.entry.data;
}

// ---- Vm ----

absl::StatusOr<std::unique_ptr<Vm>> Vm::Create(Flavour flavour) {
  VmTimings t;
  uint64_t t0 = MonotonicNs();
  ASSIGN_OR_RETURN(UniqueFd kvm, OpenKvm());
  uint64_t t1 = MonotonicNs();
  t.open_kvm_ns = t1 - t0;
  UniqueFd vm(ioctl(kvm.get(), KVM_CREATE_VM, 0));
  if (!vm.valid()) return ErrnoStatus("KVM_CREATE_VM", errno);
  uint64_t t2 = MonotonicNs();
  t.create_vm_ns = t2 - t1;

  std::unique_ptr<Vm> v(new Vm(std::move(kvm), std::move(vm), flavour));
  v->vcpu_mmap_size_ = ioctl(v->kvm_.get(), KVM_GET_VCPU_MMAP_SIZE, 0);
  if (v->vcpu_mmap_size_ < static_cast<int>(sizeof(kvm_run))) {
    return ErrnoStatus("KVM_GET_VCPU_MMAP_SIZE", errno);
  }
  ASSIGN_OR_RETURN(CpuidEntries supported, SupportedCpuid(v->kvm_.get()));
  v->cpuid_ = FilterCpuid(std::move(supported), flavour);
  t.supported_cpuid_ns = MonotonicNs() - t2;
  v->timings_ = t;
  v->stats_.vm_create_ns = MonotonicNs() - t0;
  return v;
}

absl::Status Vm::SetSlot(uint32_t slot, uint64_t gpa, void* host,
                         uint64_t size, uint64_t* ns) {
  kvm_userspace_memory_region r = {};
  r.slot = slot;
  r.guest_phys_addr = gpa;
  r.memory_size = size;
  r.userspace_addr = reinterpret_cast<uint64_t>(host);
  const uint64_t t0 = MonotonicNs();
  if (ioctl(vm_.get(), KVM_SET_USER_MEMORY_REGION, &r) < 0) {
    return ErrnoStatus(absl::StrFormat("KVM_SET_USER_MEMORY_REGION slot %u "
                                       "gpa %#x size %#x",
                                       slot, gpa, size),
                       errno);
  }
  if (ns != nullptr) *ns = MonotonicNs() - t0;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Vcpu>> Vm::CreateVcpu(int id) {
  UniqueFd fd(ioctl(vm_.get(), KVM_CREATE_VCPU, id));
  if (!fd.valid()) {
    return ErrnoStatus(absl::StrFormat("KVM_CREATE_VCPU %d", id), errno);
  }
  void* run = mmap(nullptr, vcpu_mmap_size_, PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd.get(), 0);
  if (run == MAP_FAILED) {
    return ErrnoStatus(absl::StrFormat("mmap of kvm_run (vcpu %d)", id),
                       errno);
  }
  Mapping run_map(run, vcpu_mmap_size_);
  KvmCpuid2Buffer c(cpuid_.size());
  std::memcpy(c.entries(), cpuid_.data(),
              cpuid_.size() * sizeof(kvm_cpuid_entry2));
  if (ioctl(fd.get(), kKvmSetCpuid2, c.get()) < 0) {
    return ErrnoStatus(absl::StrFormat("KVM_SET_CPUID2 (vcpu %d)", id), errno);
  }
  stats_.vcpus.fetch_add(1, std::memory_order_relaxed);
  return std::unique_ptr<Vcpu>(new Vcpu(id, std::move(fd), std::move(run_map)));
}

// ---- VcpuPool ----

absl::StatusOr<std::unique_ptr<VcpuPool>> VcpuPool::Create(Vm* vm,
                                                           size_t target,
                                                           bool background) {
  std::unique_ptr<VcpuPool> p(new VcpuPool(vm, target));
  const uint64_t t0 = MonotonicNs();
  ASSIGN_OR_RETURN(std::unique_ptr<Vcpu> first, vm->CreateVcpu(0));
  vm->mutable_timings().first_vcpu_ns = MonotonicNs() - t0;
  vm->stats().vcpu0_create_ns = vm->timings().first_vcpu_ns;
  {
    absl::MutexLock l(&p->mu_);
    p->free_.push_back(std::move(first));
    p->next_id_ = 1;
  }
  if (target <= 1) return p;
  if (!background) {
    p->Fill();
    absl::MutexLock l(&p->mu_);
    RETURN_IF_ERROR(p->fill_error_);
    return p;
  }
  absl::StatusOr<std::thread> th =
      StartThread("kvm's vCPU pool filler", [pool = p.get()] { pool->Fill(); });
  if (!th.ok()) {
    p->Fill();  // on this thread instead
    absl::MutexLock l(&p->mu_);
    RETURN_IF_ERROR(p->fill_error_);
    return p;
  }
  p->filler_ = std::move(*th);
  return p;
}

VcpuPool::~VcpuPool() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  JoinFiller();
}

void VcpuPool::Fill() {
  const uint64_t t0 = MonotonicNs();
  for (;;) {
    int id;
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      if (static_cast<size_t>(next_id_) >= target_) {
        vm_->stats().vcpu_pool_fill_ns = MonotonicNs() - t0;
        return;
      }
      id = next_id_++;
    }
    auto v = vm_->CreateVcpu(id);
    absl::MutexLock l(&mu_);
    if (!v.ok()) {
      fill_error_ = v.status();
      return;
    }
    free_.push_back(std::move(*v));
  }
}

void VcpuPool::JoinFiller() {
  if (filler_.joinable()) filler_.join();
}

absl::StatusOr<std::unique_ptr<Vcpu>> VcpuPool::Take() {
  int id;
  {
    absl::MutexLock l(&mu_);
    if (!free_.empty()) {
      std::unique_ptr<Vcpu> v = std::move(free_.back());
      free_.pop_back();
      return v;
    }
    id = next_id_++;
  }
  return vm_->CreateVcpu(id);
}

void VcpuPool::Give(std::unique_ptr<Vcpu> v) {
  absl::MutexLock l(&mu_);
  free_.push_back(std::move(v));
}

size_t VcpuPool::free_count() {
  absl::MutexLock l(&mu_);
  return free_.size();
}

// ---- PrivateMemory ----

absl::StatusOr<std::unique_ptr<PrivateMemory>> PrivateMemory::Create(
    Vm* vm, uint32_t slot, uint64_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return ErrnoStatus("mmap of private guest memory", errno);
  Mapping map(p, size);
  RETURN_IF_ERROR(vm->SetSlot(slot, kPrivateBase, p, size,
                              &vm->mutable_timings().private_slot_ns));
  vm->stats().CountSlotAdd(vm->timings().private_slot_ns);
  return std::unique_ptr<PrivateMemory>(new PrivateMemory(std::move(map)));
}

absl::StatusOr<TablePage> PrivateMemory::AllocPage() {
  uint64_t off = 0;
  for (int attempt = 0;; ++attempt) {
    bool reclaimable;
    {
      absl::MutexLock l(&mu_);
      if (!free_.empty()) {
        off = free_.back();
        free_.pop_back();
        break;
      }
      if (next_ + k4K <= map_.size()) {
        off = next_;
        next_ += k4K;
        break;
      }
      reclaimable = !quarantine_.empty();
    }
    if (!reclaimable || attempt > 0 || !reclaim_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "kvm private memory: all %d KiB in use", map_.size() >> 10));
    }
    RETURN_IF_ERROR(reclaim_());
  }
  auto* host = reinterpret_cast<uint64_t*>(map_.bytes() + off);
  std::memset(host, 0, k4K);
  return TablePage{host, kPrivateBase + off};
}

void PrivateMemory::FreeTable(TablePage page) {
  absl::MutexLock l(&mu_);
  quarantine_.push_back(page.phys - kPrivateBase);
}

size_t PrivateMemory::quarantined() {
  absl::MutexLock l(&mu_);
  return quarantine_.size();
}

void PrivateMemory::ReleaseQuarantine() {
  absl::MutexLock l(&mu_);
  free_.insert(free_.end(), quarantine_.begin(), quarantine_.end());
  quarantine_.clear();
}

uint64_t* PrivateMemory::HostOf(uint64_t phys) {
  return reinterpret_cast<uint64_t*>(map_.bytes() + (phys - kPrivateBase));
}

}  // namespace sandboxd::kvm
