// Vdso: the Sentry's vDSO as the loader maps it into each new address space.
//
// One per Sentry: the vvar page lives in the memory file (allocated once,
// written by the Timekeeper through the internal mapping, mapped read-only
// into every process) and the image is the embedded vDSO (vdso_image.h).
//
// Layout in the application, as on Linux (vvar pages below the vDSO text):
//
//   [vvar]  r--p  1 page   the Vvar (vvar.h); mprotect cannot make it
//                          writable or executable (EACCES, as Linux)
//   [vdso]  r-xp  image    private: mprotect(PROT_WRITE) is allowed and
//                          writes stay in the process (debuggers' breakpoints)
//
// Placed where mmap would place a mapping without a hint (top-down below
// the stack gap); the Sentry has no ASLR, so the address is the same for
// every run of a program.
//
// Thread-safety: Map may be called concurrently (execs in several
// processes).
#ifndef SANDBOXD_SENTRY_VDSO_VDSO_MAPPING_H_
#define SANDBOXD_SENTRY_VDSO_VDSO_MAPPING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"
#include "sentry/vdso/timekeeper.h"
#include "sentry/vdso/vvar.h"

namespace sandboxd::vdso {

class Vdso {
 public:
  struct Options {
    // Serve clocks from the TSC (when the host's TSC is usable); false: the
    // vDSO makes every call a system call.
    bool use_tsc = true;
  };

  // Allocates the vvar page from `mf` (which must outlive the Vdso) and
  // starts the Timekeeper.
  static absl::StatusOr<std::unique_ptr<Vdso>> Create(mm::MemoryFile* mf,
                                                      const Options& opts);
  ~Vdso();
  Vdso(const Vdso&) = delete;
  Vdso& operator=(const Vdso&) = delete;

  // Maps [vvar][vdso] into `mm`; returns the vDSO's address
  // (AT_SYSINFO_EHDR).
  absl::StatusOr<uint64_t> Map(mm::MM& mm) const;

  // Size of the mapped image (page-rounded) and of the vvar area.
  static uint64_t ImageMapSize();
  static constexpr uint64_t kVvarSize = mm::kPageSize;

  // For checkpoints, which save a mapping of the vDSO as such and map the
  // loading Sentry's own at load: which part `m` is (kNone: not the
  // vDSO's), and this Vdso's mappable of a part.
  enum class Part { kNone, kVvar, kImage };
  static Part PartOf(const mm::Mappable& m);
  std::shared_ptr<mm::Mappable> MappableOf(Part part) const;

  Timekeeper& timekeeper() { return *timekeeper_; }
  // Whether the TSC serves time, and if not why ("" when it does).
  bool uses_tsc() const { return tsc_why_not_.empty(); }
  const std::string& tsc_why_not() const { return tsc_why_not_; }

 private:
  class VvarMappable;
  class ImageMappable;
  Vdso(mm::MemoryFile* mf, uint64_t vvar_off, std::string tsc_why_not);

  mm::MemoryFile* const mf_;
  const uint64_t vvar_off_;
  const std::string tsc_why_not_;
  std::shared_ptr<mm::Mappable> vvar_mappable_;
  std::shared_ptr<mm::Mappable> image_mappable_;
  std::unique_ptr<Timekeeper> timekeeper_;
};

}  // namespace sandboxd::vdso

#endif  // SANDBOXD_SENTRY_VDSO_VDSO_MAPPING_H_
