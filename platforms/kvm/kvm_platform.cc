#include "platforms/kvm/kvm_platform.h"

#include <linux/membarrier.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "platforms/kvm/cpuid.h"
#include "platforms/kvm/descriptors.h"
#include "platforms/kvm/guest_hw.h"
#include "platforms/kvm/guest_pvm.h"
#include "platforms/kvm/kvm_abi.h"
#include "platforms/kvm/stats.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd::kvm {

namespace {

// Private guest memory: page tables of every address space, the stub.
// Kept small: re-creating this slot is how the shadow MMU is flushed, and
// that costs more the larger the slot (256 MiB: ~12 ms; 16 MiB: 0.1-10 ms,
// mostly the SRCU grace period on a busy host). 32 MiB is 8192 table pages.
// Reserved, not committed: a page costs memory only once written.
constexpr uint64_t kPrivateBytes = 32ull << 20;

uint64_t HostXcr0() {
  uint32_t lo, hi;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

}  // namespace

absl::StatusOr<PoolMode> ParsePoolMode(absl::string_view s) {
  if (s == "background") return PoolMode::kBackground;
  if (s == "eager") return PoolMode::kEager;
  return absl::InvalidArgumentError(
      absl::StrCat("--kvm-vcpu-pool wants background or eager, got: ", s));
}

absl::Status ParseShadowMode(absl::string_view s, KvmOptions* o) {
  if (s != "zap" && s != "flush") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvm-shadow wants zap or flush, got: ", s));
  }
  o->zap_stale = s == "zap";
  return absl::OkStatus();
}

absl::Status ParseFpuMode(absl::string_view s, KvmOptions* o) {
  if (s != "lazy" && s != "eager") {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvm-fpu wants lazy or eager, got: ", s));
  }
  o->lazy_fp = s == "lazy";
  return absl::OkStatus();
}

size_t DefaultPoolSize() {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return 2 * static_cast<size_t>(cpus > 0 ? cpus : 1);
}

absl::StatusOr<std::unique_ptr<KvmPlatform>> KvmPlatform::Create(
    int memfile_fd, uint64_t memfile_max, KvmOptions opts) {
  std::unique_ptr<KvmPlatform> p(new KvmPlatform());
  if (opts.pool_size == 0) opts.pool_size = DefaultPoolSize();
  p->opts_ = opts;
  // Twenty round trips prove the path; the full figure is kvm_test's.
  absl::StatusOr<ProbeReport> probe = RunProbe(20);
  if (!probe.ok()) {
    return absl::Status(probe.status().code(),
                        absl::StrCat("--platform=kvm: the probe failed: ",
                                     probe.status().message()));
  }
  p->probe_ = *probe;
  ASSIGN_OR_RETURN(p->vm_, Vm::Create(probe->flavour.flavour));
  p->memfile_fd_ = memfile_fd;
  void* m = mmap(nullptr, memfile_max, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_NORESERVE, memfile_fd, 0);
  if (m == MAP_FAILED) return ErrnoStatus("kvm: mapping the memory file", errno);
  p->memfile_map_ = Mapping(m, memfile_max);
  p->memfile_max_ = memfile_max;
  ASSIGN_OR_RETURN(p->private_,
                   PrivateMemory::Create(p->vm_.get(), 1, kPrivateBytes));
  p->private_->set_reclaim([pl = p.get()] { return pl->FlushShadowNow(); });
  if (p->hardware()) {
    // The region for every vCPU the stub can hold (2 MiB), first in the
    // fresh private memory, hence contiguous.
    ASSIGN_OR_RETURN(p->stub_phys_, hw::AllocStubRegion(p->private_.get(),
                                                        hw::kMaxVcpus));
    opts.pool_size = std::min<size_t>(opts.pool_size, hw::kMaxVcpus);
    p->opts_ = opts;
  } else {
    ASSIGN_OR_RETURN(p->stub_phys_, WritePvmStubPage(p->private_.get()));
  }
  p->xsave_size_ = XsaveSize(p->vm_->cpuid());
  if (p->xsave_size_ > platform::kMaxFpStateSize - 4) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "kvm: xsave area of %u bytes does not fit CpuState", p->xsave_size_));
  }
  const kvm_cpuid_entry2* d = FindCpuid(p->vm_->cpuid(), 0xd, 0);
  const uint64_t supported =
      d ? (static_cast<uint64_t>(d->edx) << 32 | d->eax) : 3;
  p->xcr0_ = HostXcr0() & supported;
  if (opts.pool_mode == PoolMode::kBackground) {
    ASSIGN_OR_RETURN(p->pool_, VcpuPool::Create(p->vm_.get(), opts.pool_size));
    absl::StatusOr<std::thread> th =
        StartThread("kvm's membarrier registration", [pl = p.get()] {
          pl->membarrier_status_ = pl->RegisterMembarrier();
          pl->membarrier_done_.Notify();
        });
    if (!th.ok()) {
      // Registered on this thread instead.
      p->membarrier_status_ = p->RegisterMembarrier();
      p->membarrier_done_.Notify();
    } else {
      p->membarrier_thread_ = std::move(*th);
    }
  }
  InstallKickHandler();
  return p;
}

absl::Status KvmPlatform::RegisterMembarrier() {
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0,
              0) != 0) {
    return ErrnoStatus("membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED)",
                       errno);
  }
  return absl::OkStatus();
}

absl::Status KvmPlatform::FinishSetup() {
  if (opts_.pool_mode == PoolMode::kEager) {
    if (pool_ == nullptr) {
      ASSIGN_OR_RETURN(pool_, VcpuPool::Create(vm_.get(), opts_.pool_size,
                                               /*background=*/false));
    }
    if (!membarrier_done_.HasBeenNotified()) {
      membarrier_status_ = RegisterMembarrier();
      membarrier_done_.Notify();
    }
    return absl::OkStatus();
  }
  // The filler's vCPUs exist before the Sentry's filter and before the
  // program: nothing is created behind a running sandbox's back.
  pool_->JoinFiller();
  return absl::OkStatus();
}

absl::Status KvmPlatform::MemoryBarrier() {
  // The registration was issued at Create: this waits only if the program
  // asks within the grace period it takes.
  membarrier_done_.WaitForNotification();
  if (!membarrier_status_.ok()) return platform::Platform::MemoryBarrier();
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
    return ErrnoStatus("membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)", errno);
  }
  return absl::OkStatus();
}

absl::Status KvmPlatform::EnsureMemfileSlots(uint64_t end) {
  if (end > memfile_max_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kvm: memory-file offset %#x beyond its maximum %#x", end,
        memfile_max_));
  }
  const uint64_t want = (end + kMemfileChunk - 1) / kMemfileChunk;
  absl::MutexLock l(&slots_mu_);
  for (; memfile_slots_ < want; ++memfile_slots_) {
    const uint64_t gpa = memfile_slots_ * kMemfileChunk;
    const uint64_t size = std::min(kMemfileChunk, memfile_max_ - gpa);
    uint64_t ns = 0;
    // Slots 0 and 1 are the probe's and the private memory's.
    RETURN_IF_ERROR(vm_->SetSlot(2 + memfile_slots_, gpa,
                                 memfile_map_.bytes() + gpa, size, &ns));
    vm_->mutable_timings().memfile_slot_ns += ns;
    vm_->stats().CountSlotAdd(ns);
  }
  return absl::OkStatus();
}

void KvmPlatform::DropStale(std::vector<uint64_t> pages, bool large) {
  if (!opts_.zap_stale) {
    // --kvm-shadow=flush: any stale page means a full flush.
    if (!pages.empty() || large) MarkShadowStale();
    pages.clear();
  }
  if (!pages.empty()) {
    const uint64_t t0 = MonotonicNs();
    std::sort(pages.begin(), pages.end());
    // One madvise per run of contiguous pages: MADV_DONTNEED on the
    // platform's shared mapping of the memory file keeps the data (it is
    // the memfd's) and fires the MMU notifier, in which KVM zaps every
    // shadow entry mapping those gfns and flushes the vCPUs' TLBs before
    // madvise returns.
    size_t i = 0;
    while (i < pages.size()) {
      size_t j = i + 1;
      while (j < pages.size() && pages[j] <= pages[j - 1] + k4K) ++j;
      const uint64_t start = pages[i], end = pages[j - 1] + k4K;
      if (end <= memfile_max_ &&
          madvise(memfile_map_.bytes() + start, end - start, MADV_DONTNEED) !=
              0) {
        large = true;  // the full flush does it instead
      }
      i = j;
    }
    zaps_.fetch_add(1);
    zap_ns_.fetch_add(MonotonicNs() - t0);
  }
  // A large page's shadow is shared by every space mapping it: its stale
  // links go only with every shadow page. So do freed table pages, once
  // they are a good part of the private memory.
  if (large || private_->quarantined() * 4 > private_->size() / k4K) {
    MarkShadowStale();
  }
}

absl::Status KvmPlatform::FlushShadowNow() {
  MarkShadowStale();
  return FlushShadowIfStale();
}

absl::Status KvmPlatform::FlushShadowIfStale() {
  if (!ShadowFlushPending()) return absl::OkStatus();
  absl::MutexLock z(&zap_mu_);
  const uint64_t want = stale_.load(std::memory_order_acquire);
  if (flushed_.load() >= want) return absl::OkStatus();
  {
    absl::MutexLock c(&ctx_mu_);
    for (KvmContext* ctx : contexts_) ctx->Kick();
  }
  absl::MutexLock w(&run_mu_);  // every vCPU is out of KVM_RUN
  const uint64_t t0 = MonotonicNs();
  // Deleting the slot makes KVM zap every shadow page built from guest
  // page tables inside it; adding it back costs the next faults a walk.
  RETURN_IF_ERROR(Annotate(vm_->SetSlot(1, kPrivateBase, private_->host_base(),
                                        0),
                           "kvm: dropping the shadow page tables"));
  RETURN_IF_ERROR(Annotate(vm_->SetSlot(1, kPrivateBase, private_->host_base(),
                                        private_->size()),
                           "kvm: restoring the private slot"));
  // No vCPU ran since the slot went: no shadow page of a quarantined
  // table page exists any more.
  private_->ReleaseQuarantine();
  flush_ns_.fetch_add(MonotonicNs() - t0);
  flushes_.fetch_add(1);
  flushed_.store(want, std::memory_order_release);
  return absl::OkStatus();
}

const uint64_t* KvmPlatform::HardwareFrame(int vcpu) const {
  const auto* top = reinterpret_cast<const uint8_t*>(
                        private_->HostOf(stub_phys_)) +
                    (hw::StackTopVa(vcpu) - kStubVa);
  return reinterpret_cast<const uint64_t*>(top) - hw::kFrameWords;
}

KvmPlatform::~KvmPlatform() {
  if (membarrier_thread_.joinable()) membarrier_thread_.join();
}

absl::StatusOr<std::unique_ptr<platform::AddressSpace>>
KvmPlatform::NewAddressSpace() {
  ASSIGN_OR_RETURN(PageTables pt, PageTables::Create(private_.get()));
  if (hardware()) {
    RETURN_IF_ERROR(hw::MapStubRegion(&pt, stub_phys_, hw::kMaxVcpus));
  } else {
    RETURN_IF_ERROR(MapPvmStub(&pt, stub_phys_));
  }
  return std::unique_ptr<platform::AddressSpace>(
      new KvmAddressSpace(this, std::move(pt)));
}

absl::StatusOr<std::unique_ptr<platform::Context>> KvmPlatform::NewContext() {
  return std::unique_ptr<platform::Context>(new KvmContext(this));
}

void KvmPlatform::ExportStats(control::PlatformStats* out) {
  out->set_platform(Name());
  control::KvmStats* k = out->mutable_kvm();
  ToProto(vm_->stats(), k);
  k->set_flavour(FlavourName(vm_->flavour()));
  k->set_shadow_flushes(shadow_flushes());
  k->set_shadow_flush_nanos(shadow_flush_ns());
  k->set_vcpu_pool_free(static_cast<uint32_t>(pool_->free_count()));
}

}  // namespace sandboxd::kvm
