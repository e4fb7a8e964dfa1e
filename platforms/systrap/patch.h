// Syscall patching (issue 6, item 4): the byte-level pieces. A syscall site
// that traps often, `mov $sysno, %eax; syscall` (7 bytes), is rewritten to
// `jmp *abs32`, an indirect jump through a pointer in a *patch table* mapped
// low in the application's address space; the table entry moves rsp below
// the red zone, loads the return address and the syscall number and jumps
// to the stub's common entry, which hands over without a signal.
//
// What is here is the part that can be pinned down on its own and tested
// by running it: recognising a site, the patched bytes, the order in which
// they are written so that a thread executing the site at the same moment
// sees either the old instructions or an invalid opcode (and is restarted),
// the classification of that fault, a table entry's code, and the per-site
// trap counter. The design of the rest, and what is not built yet, is in
// README.md, "Syscall patching".
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_PATCH_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_PATCH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace sandboxd::systrap {

// A patchable site: b8 <imm32> 0f 05.
inline constexpr size_t kSiteSize = 7;
// Offset of the `syscall` instruction in a site.
inline constexpr size_t kSyscallOffset = 5;

// The patch table lives in [kPatchTableBase, kPatchTableEnd). The patched
// site is `ff 24 25 <abs32>`: its byte 5, where `syscall` began, is bits
// 16..23 of the entry's address, 0x06 for every entry here, an invalid
// opcode in 64-bit mode (formerly `push %es`). A thread that executed the
// old `mov` and then fetches byte 5 faults (SIGILL) instead of running a
// half-written instruction; the Sentry restarts it at the site.
inline constexpr uint64_t kPatchTableBase = 0x60000;
inline constexpr uint64_t kPatchTableEnd = 0x70000;
inline constexpr uint8_t kPatchFaultByte = 0x06;
// One entry per patched site; an entry never crosses a page.
inline constexpr size_t kPatchEntrySize = 64;
inline constexpr size_t kPatchEntries =
    (kPatchTableEnd - kPatchTableBase) / kPatchEntrySize;
static_assert(((kPatchTableBase >> 16) & 0xff) == kPatchFaultByte);
static_assert(((kPatchTableEnd - 1) >> 16) == (kPatchTableBase >> 16));

// Entry 0 of the table is its header: the number of entries in use at +0
// (so that a fork's copy knows it), and at kPatchFallbackOffset the
// fallback the stub's entry takes when it cannot find its slot (GS base
// is the program's): `syscall; pop %rcx; lea 128(%rsp),%rsp; jmp *%rcx`,
// entered with rsp = application rsp - 136 and the return address at
// (%rsp). Outside stub code, that `syscall` traps like any other.
inline constexpr size_t kPatchFallbackOffset = 16;

// Traps at one site before it is patched: enough to show the site is in a
// loop, few enough that short programs gain.
inline constexpr uint32_t kPatchThreshold = 16;

using SiteBytes = std::array<uint8_t, kSiteSize>;
using EntryBytes = std::array<uint8_t, kPatchEntrySize>;

// Whether `code` (the 7 bytes ending with the trapping syscall) is
// `mov $sysno, %eax; syscall` with exactly this syscall number.
bool IsPatchableSite(const SiteBytes& code, uint64_t sysno);

// The replacement of a site: `jmp *entry` (ff 24 25 <entry as abs32>).
// Preconditions: entry is an entry address of the patch table.
SiteBytes PatchedSite(uint64_t entry);

// Writes `patched` over `site` (7 bytes of code another thread may be
// executing) in three steps, each one store of bytes followed by a full
// fence:
//   1. byte 5 := the fault byte. A thread past the old `mov` faults there.
//   2. bytes 1..6 := new. Byte 0 is still b8: a thread may run `mov` with
//      a torn immediate, then faults at byte 5 (eax is dead: the site
//      sets it before the syscall, and the restart sets it again).
//   3. byte 0 := ff. From here on every fetch sees `jmp *entry`.
// Between steps every possible fetch decodes to the old site, or to a
// `mov` followed by the fault byte. Intel's cross-modifying-code rule also
// wants a serializing instruction on every CPU that may execute the site
// between steps (Linux's text_poke_bp sends IPIs): `serialize`, if given,
// runs after steps 1 and 2 and does that (the stub's membarrier
// SYNC_CORE, README.md).
// Preconditions: site holds the old site (IsPatchableSite) and is
// writable; patched[5] == kPatchFaultByte.
void WritePatch(uint8_t* site, const SiteBytes& patched,
                const std::function<void()>& serialize = nullptr);

// The site as it was: `mov $sysno, %eax; syscall`.
SiteBytes OriginalSite(uint32_t sysno);

// Writes the original site back over a patched one, in the reverse order:
// byte 0 := b8 (from here a fetch sees `mov` and then the fault byte),
// bytes 1..4 and 6, then byte 5 := 0f. Preconditions as WritePatch's.
void WriteUnpatch(uint8_t* site, const SiteBytes& original);

// What a SIGILL at `rip` means when it lands on a site this address space
// patched.
enum class PatchFault {
  kNotOurs,         // not a patched site: an ordinary SIGILL
  kRestart,         // rerun from the site: set rip = site
  kRestartSyscall,  // rax is restart_syscall, set by the Sentry to rerun a
                    // syscall at site+5: treat it as that syscall
};

// `code`: the 7 bytes at rip - 5; `rax` the thread's rax. The caller has
// checked that rip - 5 is a site it patched (PatchedSites::Contains).
PatchFault ClassifyPatchFault(const SiteBytes& code, uint64_t rax);

// The code of one table entry (at `entry`, for the site whose next
// instruction is `return_addr`):
//   +0   .quad entry+8                 the pointer `jmp *entry` reads
//   +8   lea -128(%rsp), %rsp          keep the red zone (flags untouched)
//   +13  movabs $return_addr, %rcx     rcx as `syscall` leaves it
//   +23  mov $sysno, %eax              as the replaced `mov` did
//   +28  jmp *common(%rip)             into the stub
//   +40  .quad common
// The common entry therefore starts with: rsp = application rsp - 128,
// rcx = return address, eax = sysno, every other register and the flags
// the application's. It must return with rsp restored, rcx = return
// address, r11 = rflags (as after `syscall`), rax = result.
EntryBytes EncodeEntry(uint64_t entry, uint64_t return_addr, uint32_t sysno,
                       uint64_t common);

// The table's header (entry 0) with `used` entries in use (header
// included).
EntryBytes EncodeTableHeader(uint64_t used);

// Counts traps per syscall site (rip) of one address space and says when a
// site is worth patching. Bounded: at most kMaxSites sites are counted;
// after that new sites are ignored (their traps still work, unpatched).
class SiteCounter {
 public:
  static constexpr size_t kMaxSites = 4096;
  explicit SiteCounter(uint32_t threshold) : threshold_(threshold) {}

  // Counts one trap at `rip`; true exactly once per site, at the trap that
  // reaches the threshold.
  bool Count(uint64_t rip);

 private:
  const uint32_t threshold_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, uint32_t> counts_ ABSL_GUARDED_BY(mu_);
};

// The sites an address space has patched (by site address), so that a
// SIGILL is only ever taken for a restart at a site we wrote.
class PatchedSites {
 public:
  void Add(uint64_t site);
  bool Contains(uint64_t site);

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<uint64_t> sites_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_PATCH_H_
