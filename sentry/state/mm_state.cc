#include "sentry/state/mm_state.h"

#include <sys/mman.h>

#include <algorithm>
#include <cxxabi.h>
#include <cstdlib>
#include <cstring>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/fs/hostfs.h"
#include "sentry/fs/mappable.h"
#include "sentry/state/crc32c.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"
#include "sentry/vdso/vdso_image.h"
#include "sentry/vdso/vdso_mapping.h"

namespace sandboxd::state {
namespace {

using mm::IsPageAligned;
using mm::kPageSize;

constexpr uint32_t kProtBits = PROT_READ | PROT_WRITE | PROT_EXEC;

std::string KindName(const mm::Mappable& m) {
  const char* mangled = typeid(m).name();
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : mangled;
  free(d);
  return out;
}

uint32_t VdsoImageCrc() {
  static const uint32_t crc = Crc32c(0, vdso::kVdsoImage, vdso::kVdsoImageSize);
  return crc;
}

// [start, end) is a nonempty page-aligned range.
bool GoodRange(uint64_t start, uint64_t end) {
  return start < end && IsPageAligned(start) && IsPageAligned(end);
}

}  // namespace

// ---------------------------------------------------------------------------
// Save

absl::Status MmState::SavePrivate(Saver& s, uint64_t off, uint64_t len) {
  // The table is the truth: a State that is not the one this MmState saved
  // into last (a new save) starts a new record of what is saved.
  if (saving_ != &s.state() ||
      static_cast<int>(saved_.size()) > s.state().memory_size()) {
    saving_ = &s.state();
    saved_.clear();
    for (const pb::MemoryRun& run : s.state().memory()) {
      saved_[run.memfile_offset()] = run.length();
    }
  }
  // The parts of [off, end) that no earlier run holds, each saved as a run
  // of its own (a PMA of one MM may cover pages of another's PMA only in
  // part, after a copy-on-write break).
  const uint64_t end = off + len;
  uint64_t cur = off;
  auto it = saved_.upper_bound(off);
  if (it != saved_.begin() && std::prev(it)->first + std::prev(it)->second > off) {
    --it;
  }
  while (cur < end) {
    if (it != saved_.end() && it->first <= cur) {
      cur = std::max(cur, it->first + it->second);
      ++it;
      continue;
    }
    const uint64_t gap_end = it != saved_.end() ? std::min(end, it->first) : end;
    RETURN_IF_ERROR(s.pages().SavePages(cur, gap_end - cur));
    pb::MemoryRun* run = s.state().add_memory();
    run->set_memfile_offset(cur);
    run->set_length(gap_end - cur);
    it = saved_.emplace_hint(it, cur, gap_end - cur);
    ++it;
    cur = gap_end;
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MmState::SaveSharedAnon(
    Saver& s, const std::shared_ptr<mm::SharedAnon>& a) {
  SBX_SAVED_SIZE(mm::SharedAnon, 24);
  return s.Save<mm::SharedAnon, pb::SharedAnon>(
      a.get(), s.state().mutable_shared_anons(), [&](pb::SharedAnon* r) {
        r->set_memfile_offset(a->file_offset());
        r->set_size(a->size());
        return s.pages().SavePages(a->file_offset(), a->size());
      });
}

absl::StatusOr<uint64_t> MmState::SaveMappable(
    Saver& s, const std::shared_ptr<mm::Mappable>& m) {
  SBX_SAVED_SIZE(fs::InodeMappable, 88);
  return s.Save<mm::Mappable, pb::Mappable>(
      m.get(), s.state().mutable_mappables(),
      [&](pb::Mappable* r) -> absl::Status {
        if (auto* f = dynamic_cast<fs::InodeMappable*>(m.get())) {
          ASSIGN_OR_RETURN(uint64_t inode, FsState::SaveInode(s, f->inode()));
          pb::FileMappable* fr = r->mutable_file();
          fr->set_inode(inode);
          fr->set_name(f->name_);
          fr->set_counted(f->counted_);
          if (f->cache_ != nullptr) {
            // What the sandbox's mappings wrote goes to the host file now:
            // the restore maps it from there.
            if (int err = f->cache_->Writeback(); err < 0) {
              return absl::InternalError(absl::StrCat(
                  "save: writing back the shared mapping of \"", f->name_,
                  "\": ", strerror(-err)));
            }
            fr->set_host_page_cache(true);
          }
          return absl::OkStatus();
        }
        const vdso::Vdso::Part part = vdso::Vdso::PartOf(*m);
        if (part != vdso::Vdso::Part::kNone) {
          pb::VdsoMappable* vr = r->mutable_vdso();
          vr->set_vvar(part == vdso::Vdso::Part::kVvar);
          vr->set_image_crc32c(VdsoImageCrc());
          return absl::OkStatus();
        }
        return absl::UnimplementedError(absl::StrCat(
            "save: a mapping of ", KindName(*m), " (\"", m->Name(),
            "\") cannot be saved"));
      });
}

absl::Status MmState::SaveMm(Saver& s, mm::MM& mm, pb::Mm* r) {
  // as_limit_ and data_limit_ are the thread group's RLIMIT_AS/DATA,
  // handed to the MM again when the group is loaded.
  SBX_SAVED_SIZE(mm::MM, 272);
  SBX_SAVED_SIZE(mm::Vma, 96);
  SBX_SAVED_SIZE(mm::Pma, 24);
  // Copied out under the MM's lock; what the VMAs refer to is saved without
  // it (fs locks).
  std::vector<std::pair<uintptr_t, mm::Vma>> vmas;
  std::vector<std::pair<uintptr_t, mm::Pma>> pmas;
  {
    absl::ReaderMutexLock l(&mm.mu_);
    vmas.assign(mm.vmas_.begin(), mm.vmas_.end());
    // Only owned (private) PMAs: the others map a file's or a shared
    // object's pages, mapped again at their first touch after a restore
    // (so a PMA's `pinned` reference is not state either).
    for (const auto& [start, pma] : mm.pmas_) {
      if (pma.owned) pmas.emplace_back(start, pma);
    }
    r->set_brk_start(mm.brk_start_);
    r->set_brk(mm.brk_);
    r->set_patch_table(mm.patch_table_);
    r->set_patch_table_len(mm.patch_table_len_);
    for (const auto& [site, patched] : mm.patched_) {
      pb::PatchedSite* p = r->add_patched_sites();
      p->set_site(site);
      p->set_original(patched.original);
    }
  }
  r->set_mmap_base(mm.mmap_base_);
  r->set_membarrier_registrations(mm.membarrier_.load());
  for (const auto& [start, vma] : vmas) {
    pb::Vma* v = r->add_vmas();
    v->set_start(start);
    v->set_end(vma.end);
    v->set_prot(static_cast<uint32_t>(vma.prot.ToHost()));
    v->set_max_prot(static_cast<uint32_t>(vma.max_prot.ToHost()));
    v->set_is_private(vma.is_private);
    v->set_growsdown(vma.growsdown);
    v->set_dontfork(vma.dontfork);
    v->set_wipeonfork(vma.wipeonfork);
    v->set_offset(vma.offset);
    v->set_name(vma.name);
    if (vma.shared_anon != nullptr) {
      ASSIGN_OR_RETURN(uint64_t id, SaveSharedAnon(s, vma.shared_anon));
      v->set_shared_anon(id);
    }
    if (vma.mappable != nullptr) {
      ASSIGN_OR_RETURN(uint64_t id, SaveMappable(s, vma.mappable));
      v->set_mappable(id);
    }
  }
  for (const auto& [start, pma] : pmas) {
    RETURN_IF_ERROR(SavePrivate(s, pma.file_offset, pma.end - start));
    pb::Pma* p = r->add_pmas();
    p->set_start(start);
    p->set_end(pma.end);
    p->set_memfile_offset(pma.file_offset);
    p->set_needs_copy(pma.needs_copy);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Load

absl::Status MmState::PreparePrivate(Loader& l, mm::MemoryFile* mf) {
  if (loading_ == &l.state() && loaded_mf_ == mf) return absl::OkStatus();
  loading_ = &l.state();
  loaded_mf_ = mf;
  loaded_.clear();

  // The runs, in memory-file order, checked, and grouped where they touch.
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (const pb::MemoryRun& run : l.state().memory()) {
    const uint64_t off = run.memfile_offset(), len = run.length();
    if (off + len < off || !GoodRange(off, off + len)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad memory run ", off, "+", len));
    }
    runs.emplace_back(off, len);
  }
  std::sort(runs.begin(), runs.end());
  std::vector<std::pair<uint64_t, uint64_t>> groups;  // start, length
  for (const auto& [off, len] : runs) {
    if (!groups.empty()) {
      auto& [gs, gl] = groups.back();
      if (off < gs + gl) {
        return absl::InvalidArgumentError(
            absl::StrCat("memory runs overlap at ", off));
      }
      if (off == gs + gl) {
        gl += len;
        continue;
      }
    }
    groups.emplace_back(off, len);
  }
  // Each page's references: one per PMA that names it, in any MM.
  std::map<uint64_t, int64_t> delta;
  for (const pb::Mm& m : l.state().mms()) {
    for (const pb::Pma& p : m.pmas()) {
      const uint64_t len = p.end() - p.start();
      if (!GoodRange(p.start(), p.end()) || p.memfile_offset() + len < len ||
          !IsPageAligned(p.memfile_offset())) {
        return absl::InvalidArgumentError("bad pma");
      }
      delta[p.memfile_offset()]++;
      delta[p.memfile_offset() + len]--;
    }
  }
  for (const auto& [start, len] : groups) {
    ASSIGN_OR_RETURN(uint64_t new_off, mf->Allocate(len));
    loaded_[start] = LoadedRange{len, new_off};
  }
  for (const auto& [off, len] : runs) {
    ASSIGN_OR_RETURN(uint64_t to, NewOffset(off, len));
    RETURN_IF_ERROR(FillPages(l.pages(), mf, off, len, to));
  }
  // Allocate gave every page one reference: add the others, and give back
  // pages that no PMA names (an image that saved more than it uses).
  int64_t count = 0;
  auto d = delta.begin();
  for (const auto& [start, range] : loaded_) {
    const uint64_t end = start + range.len;
    // Boundaries inside this group, and the count at its start.
    for (; d != delta.end() && d->first <= start; ++d) count += d->second;
    uint64_t cur = start;
    while (cur < end) {
      const uint64_t next =
          d != delta.end() && d->first < end ? d->first : end;
      const uint64_t to = range.new_off + (cur - start);
      if (count <= 0) {
        mf->Free(to, next - cur);
      } else {
        for (int64_t i = 1; i < count; i++) mf->IncRef(to, next - cur);
      }
      cur = next;
      if (d != delta.end() && d->first == next) count += (d++)->second;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MmState::NewOffset(uint64_t off, uint64_t len) const {
  auto it = loaded_.upper_bound(off);
  if (it != loaded_.begin()) {
    --it;
    if (off + len <= it->first + it->second.len) {
      return it->second.new_off + (off - it->first);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "memory-file range ", off, "+", len, " is in no saved memory run"));
}

absl::StatusOr<std::shared_ptr<mm::SharedAnon>> MmState::LoadSharedAnon(
    Loader& l, mm::MemoryFile* mf, uint64_t id) {
  return l.Load<mm::SharedAnon, pb::SharedAnon>(
      id, l.state().shared_anons(), "shared anonymous memory",
      [&](const pb::SharedAnon& r)
          -> absl::StatusOr<std::shared_ptr<mm::SharedAnon>> {
        if (r.size() == 0 || !IsPageAligned(r.size()) ||
            !IsPageAligned(r.memfile_offset())) {
          return absl::InvalidArgumentError("bad size or offset");
        }
        ASSIGN_OR_RETURN(uint64_t off, mf->Allocate(r.size()));
        auto a = std::make_shared<mm::SharedAnon>(mf, off, r.size());
        RETURN_IF_ERROR(
            FillPages(l.pages(), mf, r.memfile_offset(), r.size(), off));
        return a;
      });
}

absl::StatusOr<std::shared_ptr<mm::Mappable>> MmState::LoadMappable(
    Loader& l, const vdso::Vdso* vdso, uint64_t id) {
  return l.Load<mm::Mappable, pb::Mappable>(
      id, l.state().mappables(), "mappable",
      [&](const pb::Mappable& r) -> absl::StatusOr<std::shared_ptr<mm::Mappable>> {
        if (r.has_vdso()) {
          if (vdso == nullptr) {
            return absl::FailedPreconditionError(
                "the image maps the vDSO, and the loading kernel has none");
          }
          if (r.vdso().image_crc32c() != VdsoImageCrc()) {
            return absl::FailedPreconditionError(
                "the image's processes use another vDSO than this Sentry's");
          }
          return vdso->MappableOf(r.vdso().vvar() ? vdso::Vdso::Part::kVvar
                                                  : vdso::Vdso::Part::kImage);
        }
        if (!r.has_file()) return absl::InvalidArgumentError("unknown kind");
        ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> inode,
                         FsState::LoadInode(l, r.file().inode()));
        if (inode == nullptr || inode->Type() != S_IFREG) {
          return absl::InvalidArgumentError("not a regular file");
        }
        std::shared_ptr<fs::hostfs::PageCache> cache;
        if (r.file().host_page_cache()) {
          if (l.memfile() == nullptr) {
            return absl::FailedPreconditionError("no memory file to map into");
          }
          cache = fs::hostfs::SharedPageCache(*inode, l.memfile());
          if (cache == nullptr) {
            return absl::InvalidArgumentError(
                "a shared mapping's page cache on a file that has none");
          }
        }
        auto m = std::make_shared<fs::InodeMappable>(
            std::move(inode), r.file().name(), std::move(cache),
            /*cache_may_write=*/true);
        if (r.file().counted()) {
          // Counted on the file again, as mmap did: this is the mapping
          // that makes F_SEAL_WRITE fail with EBUSY. A seal added after
          // it was made (F_SEAL_FUTURE_WRITE) leaves it as it was.
          if (m->RecountShared() < 0) {
            return absl::InvalidArgumentError(
                "a writable shared mapping of a write-sealed file");
          }
        }
        return std::shared_ptr<mm::Mappable>(std::move(m));
      });
}

absl::StatusOr<std::shared_ptr<mm::MM>> MmState::LoadMm(
    Loader& l, kernel::Kernel& k, const pb::Mm& record) {
  ASSIGN_OR_RETURN(std::unique_ptr<platform::AddressSpace> as,
                   k.platform().NewAddressSpace());
  return LoadMmInto(l, record, &k.memory_file(), std::move(as),
                    k.platform().MinUserAddress(),
                    k.platform().MaxUserAddress(), k.options().vdso);
}

absl::StatusOr<std::shared_ptr<mm::MM>> MmState::LoadMmInto(
    Loader& l, const pb::Mm& r, mm::MemoryFile* mf,
    std::unique_ptr<platform::AddressSpace> as, uintptr_t min_addr,
    uintptr_t max_addr, const vdso::Vdso* vdso) {
  RETURN_IF_ERROR(PreparePrivate(l, mf));
  auto in_bounds = [&](uint64_t start, uint64_t end) {
    return GoodRange(start, end) && start >= min_addr && end <= max_addr;
  };
  if (r.mmap_base() < min_addr || r.mmap_base() > max_addr ||
      !IsPageAligned(r.mmap_base()) || r.brk() < r.brk_start()) {
    return absl::InvalidArgumentError("bad mmap base or brk");
  }
  mm::MM::VmaMap vmas;
  uint64_t prev_end = 0;
  for (const pb::Vma& v : r.vmas()) {
    if (!in_bounds(v.start(), v.end()) || v.start() < prev_end ||
        (v.prot() & ~kProtBits) != 0 || (v.max_prot() & ~kProtBits) != 0 ||
        (v.shared_anon() != 0 && v.mappable() != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad vma at ", v.start()));
    }
    prev_end = v.end();
    mm::Vma vma;
    vma.end = v.end();
    vma.prot = platform::Prot::FromHost(static_cast<int>(v.prot()));
    vma.max_prot = platform::Prot::FromHost(static_cast<int>(v.max_prot()));
    vma.is_private = v.is_private();
    vma.growsdown = v.growsdown();
    vma.dontfork = v.dontfork();
    vma.wipeonfork = v.wipeonfork();
    vma.offset = v.offset();
    vma.name = v.name();
    if (v.shared_anon() != 0) {
      ASSIGN_OR_RETURN(vma.shared_anon, LoadSharedAnon(l, mf, v.shared_anon()));
    }
    if (v.mappable() != 0) {
      ASSIGN_OR_RETURN(vma.mappable, LoadMappable(l, vdso, v.mappable()));
    }
    vmas.emplace(v.start(), std::move(vma));
  }
  mm::MM::PmaMap pmas;
  prev_end = 0;
  for (const pb::Pma& p : r.pmas()) {
    if (!in_bounds(p.start(), p.end()) || p.start() < prev_end) {
      return absl::InvalidArgumentError(absl::StrCat("bad pma at ", p.start()));
    }
    prev_end = p.end();
    ASSIGN_OR_RETURN(uint64_t off,
                     NewOffset(p.memfile_offset(), p.end() - p.start()));
    pmas.emplace(p.start(), mm::Pma{p.end(), off, /*owned=*/true,
                                    p.needs_copy()});
  }
  // Patched syscall sites get their original bytes back (README.md,
  // "Checkpoint and restore"): the image may be restored by another build,
  // with patching off or on another platform.
  std::map<uintptr_t, std::string> patched;
  for (const pb::PatchedSite& p : r.patched_sites()) {
    if (p.original().empty() || p.original().size() > 16 ||
        !in_bounds(mm::PageRoundDown(p.site()),
                   mm::PageRoundUp(p.site() + p.original().size())) ||
        !patched.emplace(p.site(), p.original()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad patched site at ", p.site()));
    }
  }
  // The registrations membarrier(2) takes (sentry/syscalls/sys_membarrier.cc).
  constexpr uint32_t kMembarrierRegistrations = (1u << 2) | (1u << 4);
  if ((r.membarrier_registrations() & ~kMembarrierRegistrations) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad membarrier registrations 0x", absl::Hex(r.membarrier_registrations())));
  }
  auto m = std::make_shared<mm::MM>(mf, std::move(as), min_addr, max_addr);
  // Set before anyone else can see the MM.
  m->mmap_base_ = r.mmap_base();
  m->membarrier_.store(r.membarrier_registrations());
  absl::MutexLock lock(&m->mu_);
  m->vmas_ = std::move(vmas);
  m->pmas_ = std::move(pmas);
  m->brk_start_ = r.brk_start();
  m->brk_ = r.brk();
  RETURN_IF_ERROR(m->RestorePatchedSitesLocked(r.patch_table(),
                                               r.patch_table_len(), patched));
  return m;
}

}  // namespace sandboxd::state
