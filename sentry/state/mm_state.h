// Save and load of address spaces: the MmCheckpointer that
// KernelState::SaveKernel and LoadKernel call for every MM.
//
// An MM is saved as what the program asked for and what backs it:
//   - its VMAs (range, protection, maximum protection, private/shared,
//     MAP_GROWSDOWN, fork advice, name) with their source: nothing
//     (anonymous), a SharedAnon object (State.shared_anons, its pages
//     saved whole), a file (State.mappables: the inode through FsState, so
//     a tmpfs or memfd file by id and a rootfs file by its path), or a
//     part of the vDSO, which the load maps from the loading Sentry's Vdso;
//   - the PMAs that own their pages (anonymous memory, private copies of
//     file pages), with their copy-on-write state. Each private memory-file
//     page is saved once (State.memory), however many fork'ed MMs share
//     it; at load every page gets one reference per PMA that names it, so
//     pages shared copy-on-write before the save are shared after it.
//     PMAs that point into a source are not saved: they fault in again;
//   - brk and the mmap base;
//   - syscall patching's record (the table's range, each patched site's
//     original bytes). The load writes the original bytes back and keeps
//     the table (platforms/systrap/README.md, "Checkpoint and restore"):
//     the restoring Sentry, maybe another build or platform, patches anew.
// The platform's AddressSpace starts empty at load: the next fault maps
// each page (the PMA says where its data is).
//
// One MmState serves one save or one load (it remembers which memory it
// saved, and where the loaded runs went). Like FsState and KernelState it
// is befriended by the classes whose state is private (mm::MM,
// fs::InodeMappable).
//
// Not saveable (UnimplementedError naming them): mappings of sources other
// than tmpfs, rootfs and memfd files and the vDSO (the Mappables of tests).
#ifndef SANDBOXD_SENTRY_STATE_MM_STATE_H_
#define SANDBOXD_SENTRY_STATE_MM_STATE_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sentry/kernel/kernel.h"
#include "sentry/mm/mm.h"
#include "sentry/state/kernel_state.h"
#include "sentry/state/loader.h"
#include "sentry/state/saver.h"

namespace sandboxd::state {

struct MmState final : public MmCheckpointer {
 public:
  absl::Status SaveMm(Saver& s, mm::MM& mm, pb::Mm* record) override;
  // Builds the MM in `k`'s memory file and platform (a new AddressSpace,
  // the platform's address bounds), with the vDSO of `k`'s options.
  absl::StatusOr<std::shared_ptr<mm::MM>> LoadMm(
      Loader& l, kernel::Kernel& k, const pb::Mm& record) override;

  // The same, for callers without a Kernel (tests): the MM goes into `mf`
  // and `as`, with [min_addr, max_addr) as its bounds; `vdso` maps the
  // vDSO's parts (null: an image with vDSO mappings fails to load).
  absl::StatusOr<std::shared_ptr<mm::MM>> LoadMmInto(
      Loader& l, const pb::Mm& record, mm::MemoryFile* mf,
      std::unique_ptr<platform::AddressSpace> as, uintptr_t min_addr,
      uintptr_t max_addr, const vdso::Vdso* vdso);

 private:
  // A group of State.memory runs that touch, allocated as one range at
  // load.
  struct LoadedRange {
    uint64_t len;
    uint64_t new_off;
  };

  // Saves the private pages of [off, off + len) that this save has not
  // saved yet (State.memory).
  absl::Status SavePrivate(Saver& s, uint64_t off, uint64_t len);
  static absl::StatusOr<uint64_t> SaveMappable(
      Saver& s, const std::shared_ptr<mm::Mappable>& m);
  static absl::StatusOr<uint64_t> SaveSharedAnon(
      Saver& s, const std::shared_ptr<mm::SharedAnon>& a);

  // On the first load: allocates and fills the private runs and sets every
  // page's reference count from the PMAs of all State.mms records.
  absl::Status PreparePrivate(Loader& l, mm::MemoryFile* mf);
  // Where the saved private range [off, off + len) is now.
  absl::StatusOr<uint64_t> NewOffset(uint64_t off, uint64_t len) const;
  static absl::StatusOr<std::shared_ptr<mm::Mappable>> LoadMappable(
      Loader& l, const vdso::Vdso* vdso, uint64_t id);
  static absl::StatusOr<std::shared_ptr<mm::SharedAnon>> LoadSharedAnon(
      Loader& l, mm::MemoryFile* mf, uint64_t id);

  // Save: the private memory-file ranges saved so far (start -> length),
  // for the State they went to.
  const pb::State* saving_ = nullptr;
  std::map<uint64_t, uint64_t> saved_;
  // Load: saved start of each group of runs -> where it went.
  const pb::State* loading_ = nullptr;
  mm::MemoryFile* loaded_mf_ = nullptr;
  std::map<uint64_t, LoadedRange> loaded_;
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_MM_STATE_H_
