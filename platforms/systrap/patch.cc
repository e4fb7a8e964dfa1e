#include "platforms/systrap/patch.h"

#include <cstring>

namespace sandboxd::systrap {
namespace {

// stub/patch_entry_amd64.cc jumps to the fallback at this fixed address.
static_assert(kPatchTableBase + kPatchFallbackOffset == 0x60010);

constexpr uint8_t kMovEaxImm32 = 0xb8;
constexpr uint8_t kSyscall0 = 0x0f, kSyscall1 = 0x05;
// jmp *disp32: opcode ff, ModRM 0x24 (/4, SIB follows), SIB 0x25 (no base,
// no index: an absolute 32-bit address).
constexpr uint8_t kJmpAbs[3] = {0xff, 0x24, 0x25};
constexpr uint64_t kNrRestartSyscall = 219;

void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// Byte stores to code another CPU may be fetching: atomic (no torn or
// repeated writes by the compiler), then a full fence so that each step is
// globally visible before the next begins.
void StoreCode(uint8_t* dst, const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    __atomic_store_n(dst + i, src[i], __ATOMIC_RELAXED);
  }
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

}  // namespace

bool IsPatchableSite(const SiteBytes& code, uint64_t sysno) {
  if (code[0] != kMovEaxImm32 || code[kSyscallOffset] != kSyscall0 ||
      code[kSyscallOffset + 1] != kSyscall1) {
    return false;
  }
  uint32_t imm;
  std::memcpy(&imm, &code[1], 4);
  return imm == sysno;
}

SiteBytes PatchedSite(uint64_t entry) {
  SiteBytes b;
  std::memcpy(b.data(), kJmpAbs, 3);
  Put32(&b[3], static_cast<uint32_t>(entry));
  return b;
}

void WritePatch(uint8_t* site, const SiteBytes& patched,
                const std::function<void()>& serialize) {
  StoreCode(site + kSyscallOffset, &patched[kSyscallOffset], 1);
  if (serialize) serialize();
  StoreCode(site + 1, &patched[1], kSiteSize - 1);
  if (serialize) serialize();
  StoreCode(site, &patched[0], 1);
}

SiteBytes OriginalSite(uint32_t sysno) {
  SiteBytes b;
  b[0] = kMovEaxImm32;
  Put32(&b[1], sysno);
  b[kSyscallOffset] = kSyscall0;
  b[kSyscallOffset + 1] = kSyscall1;
  return b;
}

void WriteUnpatch(uint8_t* site, const SiteBytes& original) {
  StoreCode(site, &original[0], 1);
  StoreCode(site + 1, &original[1], 4);
  StoreCode(site + kSyscallOffset + 1, &original[kSyscallOffset + 1], 1);
  StoreCode(site + kSyscallOffset, &original[kSyscallOffset], 1);
}

EntryBytes EncodeTableHeader(uint64_t used) {
  EntryBytes e;
  e.fill(0xcc);
  Put64(&e[0], used);
  const uint8_t fallback[] = {
      0x0f, 0x05,                                      // syscall
      0x59,                                            // pop %rcx
      0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00,  // lea 128(%rsp),%rsp
      0xff, 0xe1,                                      // jmp *%rcx
  };
  std::memcpy(&e[kPatchFallbackOffset], fallback, sizeof(fallback));
  return e;
}

PatchFault ClassifyPatchFault(const SiteBytes& code, uint64_t rax) {
  if (code[kSyscallOffset] != kPatchFaultByte) return PatchFault::kNotOurs;
  const bool old_mov = code[0] == kMovEaxImm32;  // steps 1-2 done, not 3
  const bool jmp = std::memcmp(code.data(), kJmpAbs, 3) == 0;
  if (!old_mov && !jmp) return PatchFault::kNotOurs;
  // The Sentry restarts an interrupted syscall by moving rip back onto the
  // `syscall` instruction; for restart_syscall it also sets rax, which the
  // site's own `mov` would overwrite: that one is the syscall itself.
  if (rax == kNrRestartSyscall) return PatchFault::kRestartSyscall;
  return PatchFault::kRestart;
}

EntryBytes EncodeEntry(uint64_t entry, uint64_t return_addr, uint32_t sysno,
                       uint64_t common) {
  EntryBytes e;
  e.fill(0xcc);  // int3 in the gaps
  Put64(&e[0], entry + 8);
  // lea -0x80(%rsp), %rsp
  const uint8_t lea[5] = {0x48, 0x8d, 0x64, 0x24, 0x80};
  std::memcpy(&e[8], lea, 5);
  // movabs $return_addr, %rcx
  e[13] = 0x48;
  e[14] = 0xb9;
  Put64(&e[15], return_addr);
  // mov $sysno, %eax
  e[23] = 0xb8;
  Put32(&e[24], sysno);
  // jmp *rel32(%rip): rip after it is entry+34, the pointer at entry+40.
  e[28] = 0xff;
  e[29] = 0x25;
  Put32(&e[30], 40 - 34);
  Put64(&e[40], common);
  return e;
}

bool SiteCounter::Count(uint64_t rip) {
  absl::MutexLock l(&mu_);
  auto it = counts_.find(rip);
  if (it == counts_.end()) {
    if (counts_.size() >= kMaxSites) return false;
    it = counts_.emplace(rip, 0).first;
  }
  // Saturates one past the threshold: reported once.
  if (it->second > threshold_) return false;
  return ++it->second == threshold_;
}

void PatchedSites::Add(uint64_t site) {
  absl::MutexLock l(&mu_);
  sites_.insert(site);
}

bool PatchedSites::Contains(uint64_t site) {
  absl::MutexLock l(&mu_);
  return sites_.contains(site);
}

}  // namespace sandboxd::systrap
