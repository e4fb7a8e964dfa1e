#include "platforms/platform.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "base/status_macros.h"
#include "proto/platform_stats.pb.h"

namespace sandboxd::platform {

void Platform::ExportStats(control::PlatformStats* out) { out->set_platform(Name()); }

int Prot::ToHost() const {
  return (read ? PROT_READ : 0) | (write ? PROT_WRITE : 0) |
         (exec ? PROT_EXEC : 0);
}

Prot Prot::FromHost(int prot) {
  return Prot{(prot & PROT_READ) != 0, (prot & PROT_WRITE) != 0,
              (prot & PROT_EXEC) != 0};
}

absl::Status Platform::MemoryBarrier() {
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) != 0) {
    return ErrnoStatus("membarrier(MEMBARRIER_CMD_GLOBAL)", errno);
  }
  return absl::OkStatus();
}

void CpuState::ResetFp() {
  fp_live = nullptr;  // the state below replaces whatever was live
  if (fp_size == 0) return;
  // Legacy fxsave area: bytes 0..463 hold registers; 464..511 hold the
  // kernel's software-reserved bytes (magic, sizes), which must survive.
  uint32_t mxcsr_mask;
  std::memcpy(&mxcsr_mask, fp + 28, sizeof(mxcsr_mask));
  std::memset(fp, 0, 464);
  uint16_t fcw = 0x37f;
  uint32_t mxcsr = 0x1f80;
  std::memcpy(fp + 0, &fcw, sizeof(fcw));
  std::memcpy(fp + 24, &mxcsr, sizeof(mxcsr));
  std::memcpy(fp + 28, &mxcsr_mask, sizeof(mxcsr_mask));
  if (fp_size > 576) {
    // xsave header: XSTATE_BV = x87|SSE (the rest in init state), XCOMP_BV = 0.
    uint64_t xstate_bv = 0x3;
    std::memset(fp + 512, 0, 64);
    std::memcpy(fp + 512, &xstate_bv, sizeof(xstate_bv));
    // Extended components (AVX, AVX-512...) up to the trailing magic word.
    if (fp_size > 576 + 4) std::memset(fp + 576, 0, fp_size - 576 - 4);
  }
}

}  // namespace sandboxd::platform
