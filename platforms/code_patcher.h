// Syscall patching's meeting point between a platform and the memory
// manager (platforms/systrap/README.md, "Syscall patching"): the platform
// finds hot syscall sites and knows the instruction bytes; the memory
// manager, which owns the mappings, makes the change.
//
// Only platforms that patch (systrap) offer PatchingAddressSpace, as a
// feature of their address spaces (platform.h, HasFeatures); the memory
// manager (mm::MM) implements CodePatcher and hands itself over when the
// address space has the feature.
#ifndef SANDBOXD_PLATFORMS_CODE_PATCHER_H_
#define SANDBOXD_PLATFORMS_CODE_PATCHER_H_

#include <cstddef>
#include <cstdint>
#include <functional>

namespace sandboxd::platform {

// Implemented by mm::MM.
class CodePatcher {
 public:
  virtual ~CodePatcher() = default;
  // Reads n bytes of application memory at addr whatever its protection
  // (instruction bytes). False if any of them is not mapped.
  virtual bool ReadCode(uintptr_t addr, void* dst, size_t n) = 0;
  // Runs `patch` with the memory manager's lock held, on Sentry pointers
  // through which the `len` bytes at `site` and the patch table
  // [table, table + table_len) are written in place. Only a site in a
  // private mapping, within one page, qualifies: its page is first made
  // this address space's own (copy-on-write broken), so files and other
  // processes never see the change; the table is mapped on first use, a
  // private r-x mapping named "[sbx-patch]". If `patch` returns true the
  // site is recorded: should its range be moved, or the table unmapped, the
  // memory manager first calls `unpatch` on it (lock held) to restore it.
  // Returns false if no patch was made.
  virtual bool PatchCode(
      uintptr_t site, size_t len, uintptr_t table, size_t table_len,
      const std::function<bool(uint8_t* site, uint8_t* table)>& patch,
      std::function<void(uint8_t* site)> unpatch) = 0;
};

// A feature of an address space that patches syscalls:
// AddressSpace::Feature<PatchingAddressSpace>().
class PatchingAddressSpace {
 public:
  static inline const char kFeatureTag = 0;
  virtual ~PatchingAddressSpace() = default;
  // The memory manager of this address space; set by it once, cleared
  // (null) before it goes.
  virtual void SetCodePatcher(CodePatcher* patcher) = 0;
};

}  // namespace sandboxd::platform

#endif  // SANDBOXD_PLATFORMS_CODE_PATCHER_H_
