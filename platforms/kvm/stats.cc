#include "platforms/kvm/stats.h"

#include <linux/kvm.h>

#include "platforms/kvm/stub_pvm.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd::kvm {

ExitKind ClassifyExit(uint32_t reason, uint16_t io_port, uint8_t vector) {
  switch (reason) {
    case KVM_EXIT_IO:
      return io_port == kSyscallPort ? ExitKind::kSyscall : ExitKind::kOther;
    case KVM_EXIT_SHUTDOWN:
      return vector == 14 ? ExitKind::kPageFault : ExitKind::kException;
    case KVM_EXIT_INTR:
      return ExitKind::kInterrupted;
    default:
      return ExitKind::kOther;
  }
}

void ToProto(const Stats& s, control::KvmStats* out) {
  auto exits = [&s](ExitKind k) {
    return s.exits[static_cast<int>(k)].load(std::memory_order_relaxed);
  };
  control::KvmStats::Exits* e = out->mutable_exits();
  e->set_syscall(exits(ExitKind::kSyscall));
  e->set_page_fault(exits(ExitKind::kPageFault));
  e->set_exception(exits(ExitKind::kException));
  e->set_interrupted(exits(ExitKind::kInterrupted));
  e->set_shadow_flush(exits(ExitKind::kShadowFlush));
  e->set_other(exits(ExitKind::kOther));
  out->set_vm_create_nanos(s.vm_create_ns.load(std::memory_order_relaxed));
  out->set_vcpu0_create_nanos(s.vcpu0_create_ns.load(std::memory_order_relaxed));
  out->set_vcpu_pool_fill_nanos(s.vcpu_pool_fill_ns.load(std::memory_order_relaxed));
  out->set_memslot_adds(s.memslot_adds.load(std::memory_order_relaxed));
  out->set_memslot_add_nanos(s.memslot_add_ns.load(std::memory_order_relaxed));
  out->set_vcpus(s.vcpus.load(std::memory_order_relaxed));
  out->set_compat_syscalls_refused(
      s.compat_syscalls_refused.load(std::memory_order_relaxed));
  out->set_vcpus_refused(s.vcpus_refused.load(std::memory_order_relaxed));
}

}  // namespace sandboxd::kvm
