// The Sentry's side of syscall patching (README.md, "Syscall patching"):
// which sites to patch, what to write, and the SIGILLs that patching can
// cause. The memory side (private copies, the table's mapping, undoing
// patches on munmap and mremap) is the memory manager's, behind
// platform::CodePatcher (platforms/code_patcher.h); the stub's side is
// stub/patch_entry_amd64.cc.
#include <cpuid.h>
#include <errno.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <sys/auxv.h>

#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "platforms/systrap/register.h"
#include "platforms/systrap/stub/stub.h"
#include "platforms/systrap/systrap.h"

namespace sandboxd::systrap {
namespace {

constexpr uint64_t kNrRestartSyscall = 219;
constexpr uint32_t kFpXstateMagic1 = 0x46505853;

uint64_t Xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// The xsave feature mask the patched entry uses for a thread whose FPU
// image (as in a signal frame) is `fp`: the features the kernel put in
// the frame (its software bytes), if xsave in standard form writes them
// all within the frame's xstate size. 0 if the image is not such a frame.
uint64_t XsaveMaskFor(const uint8_t* fp, uint32_t fp_size) {
  if (fp_size < 576 || fp_size > kMaxFpSize) return 0;
  uint32_t magic1, extended_size, xstate_size;
  uint64_t features;
  std::memcpy(&magic1, fp + 464, 4);
  std::memcpy(&extended_size, fp + 468, 4);
  std::memcpy(&features, fp + 472, 8);
  std::memcpy(&xstate_size, fp + 480, 4);
  // The frame's image ends with a 4-byte magic after xstate_size bytes;
  // the platform keeps the image to a multiple of 8 bytes, so it may stop
  // short of that magic, never of the xstate itself.
  if (magic1 != kFpXstateMagic1 || extended_size != xstate_size + 4 ||
      xstate_size > fp_size) {
    return 0;
  }
  const uint64_t mask = features & Xgetbv0();
  if ((mask & 3) != 3) return 0;  // x87 and SSE at least
  for (int i = 2; i < 63; i++) {
    if ((mask & (1ull << i)) == 0) continue;
    unsigned size, offset, ecx, edx;
    __cpuid_count(0xd, i, size, offset, ecx, edx);
    if (offset + size > xstate_size) return 0;
  }
  return mask;
}

// Set once a host has refused SYNC_CORE barriers (an older kernel, an
// architecture without them, PVM): the answer is the host's, so later
// patches do not ask again.
std::atomic<bool> sync_core_refused{false};

// Makes every CPU that runs a thread of `stub` execute a serializing
// instruction before this returns (Intel's cross-modifying-code rule,
// between WritePatch's steps): membarrier(PRIVATE_EXPEDITED_SYNC_CORE)
// issued by the stub's control thread, since the barrier is per mm.
// Registration is per mm, and so once per stub process (a fork's child is
// a new one): the first barrier's EPERM asks for it. False if the host
// refused.
bool SyncCore(StubProcess& stub) {
  if (sync_core_refused.load(std::memory_order_relaxed)) return false;
  int64_t r =
      stub.Control(kOpMembarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE);
  if (r == -EPERM) {
    r = stub.Control(kOpMembarrier,
                     MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE);
    if (r == 0) {
      r = stub.Control(kOpMembarrier,
                       MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE);
    }
  }
  if (r == -EINVAL || r == -ENOSYS) {
    sync_core_refused.store(true, std::memory_order_relaxed);
  }
  return r == 0;
}

}  // namespace

std::string PatchingUnavailable() {
  // The entry finds its slot with rdgsbase and saves the FPU with xsave.
  if ((getauxval(AT_HWCAP2) & 2 /* HWCAP2_FSGSBASE */) == 0) {
    return "the CPU or kernel does not offer FSGSBASE to user space";
  }
  unsigned a, b, c, d;
  __cpuid(1, a, b, c, d);
  if ((c & bit_OSXSAVE) == 0) return "the kernel does not enable xsave";
  return "";
}

bool Systrap::set_patching(bool on, std::string* why) {
  if (!on) {
    patching_ = false;
    return true;
  }
  if (std::string w = PatchingUnavailable(); !w.empty()) {
    *why = std::move(w);
    return false;
  }
  patching_ = true;
  return true;
}

bool StubProcess::SetXsaveMask(const platform::CpuState& cpu) {
  // Every thread of a process has the same FPU layout: the first one tells
  // the stub which features its entry saves. Until then (mask 0) the entry
  // takes its fallback, a trapping syscall.
  if (xsave_set_.load(std::memory_order_acquire)) return true;
  const uint64_t mask = XsaveMaskFor(cpu.fp, cpu.fp_size);
  if (mask == 0) return false;
  __atomic_store_n(&shared_->config.xsave_mask, mask, __ATOMIC_SEQ_CST);
  xsave_set_.store(true, std::memory_order_release);
  return true;
}

void StubProcess::CountSyscallSite(const platform::CpuState& cpu) {
  const uint64_t rip = cpu.regs.rip;
  if (rip < kSiteSize || rip >= kStubBase) return;
  const uint64_t site = rip - kSiteSize;
  if (!site_counter_.Count(site)) return;
  TryPatch(site, static_cast<uint32_t>(cpu.regs.orig_rax), cpu);
}

void StubProcess::TryPatch(uint64_t site, uint32_t sysno,
                           const platform::CpuState& cpu) {
  platform::CodePatcher* patcher = patcher_.load(std::memory_order_acquire);
  if (patcher == nullptr) return;
  if (!SetXsaveMask(cpu)) return;
  SiteBytes code;
  if (!patcher->ReadCode(site, code.data(), code.size()) ||
      !IsPatchableSite(code, sysno)) {
    return;
  }
  const uint64_t common =
      StubAddress(reinterpret_cast<const void*>(&sbx_stub_patch_entry),
                  kStubBase);
  auto patch = [&](uint8_t* s, uint8_t* table) {
    // Again under the memory manager's lock: the bytes may have changed.
    SiteBytes now;
    std::memcpy(now.data(), s, now.size());
    if (!IsPatchableSite(now, sysno)) return false;
    // The table's header counts the entries in use (a fork's child
    // inherits it with the table); 0: a fresh table.
    uint64_t used;
    std::memcpy(&used, table, sizeof(used));
    if (used == 0) {
      EntryBytes header = EncodeTableHeader(1);
      std::memcpy(table, header.data(), header.size());
      used = 1;
    }
    if (used >= kPatchEntries) return false;
    const uint64_t entry = kPatchTableBase + used * kPatchEntrySize;
    EntryBytes e = EncodeEntry(entry, site + kSiteSize, sysno, common);
    std::memcpy(table + used * kPatchEntrySize, e.data(), e.size());
    used++;
    std::memcpy(table, &used, sizeof(used));
    // The entry is complete before any thread can jump to it.
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    // Each CPU running this process serializes between the steps; where
    // the host cannot, the steps alone (every intermediate decode is the
    // old site or faults, README.md) and the site is counted.
    bool serialized = true;
    WritePatch(s, PatchedSite(entry),
               [&] { serialized = serialized && SyncCore(*this); });
    if (!serialized) {
      platform_->fastpath().mutable_counters().patch_unserialized.fetch_add(
          1, std::memory_order_relaxed);
    }
    return true;
  };
  auto unpatch = [sysno](uint8_t* s) { WriteUnpatch(s, OriginalSite(sysno)); };
  if (patcher->PatchCode(site, kSiteSize, kPatchTableBase,
                         kPatchTableEnd - kPatchTableBase, patch, unpatch)) {
    platform_->fastpath().mutable_counters().patched_sites.fetch_add(
        1, std::memory_order_relaxed);
  }
}

bool StubProcess::RestartPatchedSite(platform::CpuState& cpu,
                                     bool* as_syscall) {
  *as_syscall = false;
  platform::CodePatcher* patcher = patcher_.load(std::memory_order_acquire);
  if (patcher == nullptr) return false;
  const uint64_t rip = cpu.regs.rip;
  if (rip < kSyscallOffset) return false;
  const uint64_t site = rip - kSyscallOffset;
  // Read under the memory manager's lock: a patch or unpatch being written
  // is finished by the time this reads.
  SiteBytes code;
  if (!patcher->ReadCode(site, code.data(), code.size())) return false;
  if (code[kSyscallOffset] == 0x0f && code[kSyscallOffset + 1] == 0x05) {
    // rip is on a `syscall` now, which cannot raise SIGILL: the thread
    // fetched a byte of a patch that has been undone since. Rerun it from
    // the site (its `mov` sets eax again) or, for restart_syscall, from
    // the `syscall` itself.
    if (code[0] != 0xb8) return false;
    if (cpu.regs.rax != kNrRestartSyscall) cpu.regs.rip = site;
    return true;
  }
  // Else it must be a site we patched: `jmp *entry` into our table, whose
  // entry returns to site + 7.
  if (code[0] != 0xff) return false;
  uint32_t entry32;
  std::memcpy(&entry32, &code[3], 4);
  const uint64_t entry = entry32;
  if (entry < kPatchTableBase + kPatchEntrySize || entry >= kPatchTableEnd ||
      entry % kPatchEntrySize != 0) {
    return false;
  }
  uint8_t movabs[10];
  if (!patcher->ReadCode(entry + 13, movabs, sizeof(movabs))) return false;
  uint64_t ret;
  std::memcpy(&ret, &movabs[2], 8);
  if (movabs[0] != 0x48 || movabs[1] != 0xb9 || ret != site + kSiteSize) {
    return false;
  }
  switch (ClassifyPatchFault(code, cpu.regs.rax)) {
    case PatchFault::kNotOurs:
      return false;
    case PatchFault::kRestart:
      cpu.regs.rip = site;
      return true;
    case PatchFault::kRestartSyscall:
      // As if the `syscall` that was there had run: rip after it, rcx and
      // r11 as it leaves them.
      cpu.regs.rip = site + kSiteSize;
      cpu.regs.rcx = cpu.regs.rip;
      cpu.regs.r11 = cpu.regs.eflags;
      cpu.regs.orig_rax = kNrRestartSyscall;
      *as_syscall = true;
      return true;
  }
  return false;
}

}  // namespace sandboxd::systrap
