// KvmAddressSpace: one application address space as guest page tables
// over the memory file, and the shadow invalidations its changes need.
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "platforms/kvm/kvm_platform.h"

namespace sandboxd::kvm {

absl::Status KvmAddressSpace::MapFile(uintptr_t addr, int fd, off_t off,
                                      size_t len, platform::Prot prot) {
  if (fd != platform_->memfile_fd()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kvm: MapFile of fd %d: only the memory file can be mapped", fd));
  }
  if (addr >= kStubVa || len > kStubVa - addr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kvm: MapFile at %#x+%#x reaches the stub at %#x", addr, len,
        kStubVa));
  }
  if (off < 0) return absl::InvalidArgumentError("kvm: MapFile: negative offset");
  RETURN_IF_ERROR(platform_->EnsureMemfileSlots(static_cast<uint64_t>(off) + len));
  absl::MutexLock l(&mu_);
  const uint64_t large = pt_.large_invalidations();
  absl::Status st;
  if (!prot.read && !prot.write && !prot.exec) {
    st = pt_.Unmap(addr, len);  // PROT_NONE: nothing is accessible
  } else {
    // x86 pages are always readable when present.
    st = pt_.Map(addr, static_cast<uint64_t>(off), len,
                 PteAccess{.write = prot.write, .exec = prot.exec});
  }
  platform_->DropStale(pt_.TakeStalePages(), pt_.large_invalidations() != large);
  return st;
}

bool KvmAddressSpace::IsInt80At(uint64_t va) {
  uint8_t code[2];
  absl::MutexLock l(&mu_);
  for (int i = 0; i < 2; i++) {
    if (va + i >= kStubVa) return false;
    std::optional<Translation> t = pt_.Lookup(va + i);
    // Guest-physical addresses are memory-file offsets.
    if (!t.has_value() ||
        pread(platform_->memfile_fd(), &code[i], 1,
              static_cast<off_t>(t->phys)) != 1) {
      return false;
    }
  }
  return code[0] == 0xcd && code[1] == 0x80;
}

void KvmAddressSpace::Unmap(uintptr_t addr, size_t len) {
  if (addr >= kStubVa) return;
  len = std::min<uint64_t>(len, kStubVa - addr);
  absl::MutexLock l(&mu_);
  const uint64_t large = pt_.large_invalidations();
  (void)pt_.Unmap(addr, len);  // fails only for unaligned input
  platform_->DropStale(pt_.TakeStalePages(), pt_.large_invalidations() != large);
}

KvmAddressSpace::~KvmAddressSpace() {
  // Nothing to drop: the table pages go to the quarantine, so no vCPU can
  // load this root or reach its shadow pages again before the next flush.
  // With --kvm-shadow=flush (zap_stale off) this still flushes.
  platform_->DropStale({}, !platform_->options().zap_stale);
}

}  // namespace sandboxd::kvm
