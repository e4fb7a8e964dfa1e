// kvm's counters, always on: plain atomics, written lock-free where the
// platform works (exits on the task's own thread, creation steps once) and
// read by KvmPlatform::ExportStats into the SentryStats that sandboxd
// exports at /metrics (daemon/README.md, "platform metrics").
//
// One Stats per VM, owned by the Vm (the pool and the platform both reach
// it from there).
#ifndef SANDBOXD_PLATFORMS_KVM_STATS_H_
#define SANDBOXD_PLATFORMS_KVM_STATS_H_

#include <atomic>
#include <cstdint>

namespace sandboxd::control {
class KvmStats;  // proto/platform_stats.proto
}  // namespace sandboxd::control

namespace sandboxd::kvm {

// What one return from KVM_RUN was, as the platform handles it.
enum class ExitKind {
  kSyscall,      // the stub's OUT to the syscall port
  kPageFault,    // PVM: KVM_EXIT_SHUTDOWN with vector 14
  kException,    // KVM_EXIT_SHUTDOWN with any other vector
  kInterrupted,  // KVM_EXIT_INTR (Interrupt, a signal) handed to the task
  kShadowFlush,  // KVM_EXIT_INTR from a shadow-flush kick: Switch runs on
  kOther,        // anything else (the task's context dies)
  kCount,
};

// The kind of a KVM_RUN exit that Switch returns for: `reason` is
// kvm_run's exit_reason, `io_port` kvm_run.io.port (KVM_EXIT_IO),
// `vector` the pending exception's vector (KVM_EXIT_SHUTDOWN).
ExitKind ClassifyExit(uint32_t reason, uint16_t io_port, uint8_t vector);

struct Stats {
  std::atomic<uint64_t> exits[static_cast<int>(ExitKind::kCount)] = {};

  // Creation steps (ns; 0: not done): the VM (/dev/kvm, KVM_CREATE_VM,
  // the supported CPUID), vCPU 0 (synchronous), the rest of the vCPU pool
  // (the background filler, from its start to its last vCPU).
  std::atomic<uint64_t> vm_create_ns{0};
  std::atomic<uint64_t> vcpu0_create_ns{0};
  std::atomic<uint64_t> vcpu_pool_fill_ns{0};
  // Memory slots added (the private slot, the memory file's chunks; not
  // the delete + re-add of a shadow flush) and their ioctl time.
  std::atomic<uint64_t> memslot_adds{0};
  std::atomic<uint64_t> memslot_add_ns{0};
  std::atomic<uint32_t> vcpus{0};  // vCPUs created
  // `int $0x80` from 64-bit code refused with ENOSYS (context.cc).
  std::atomic<uint64_t> compat_syscalls_refused{0};
  // vCPUs a context could not get (context.cc, Acquire): the host refused
  // KVM_CREATE_VCPU or its setup (KVM's vCPU limit, descriptors, memory).
  std::atomic<uint64_t> vcpus_refused{0};

  void CountExit(ExitKind k) {
    exits[static_cast<int>(k)].fetch_add(1, std::memory_order_relaxed);
  }
  void CountSlotAdd(uint64_t ns) {
    memslot_adds.fetch_add(1, std::memory_order_relaxed);
    memslot_add_ns.fetch_add(ns, std::memory_order_relaxed);
  }
};

// Copies `s` into `out` (relaxed loads). The figures Stats does not hold
// (flavour, shadow flushes, free vCPUs) are KvmPlatform::ExportStats's.
void ToProto(const Stats& s, control::KvmStats* out);

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_STATS_H_
