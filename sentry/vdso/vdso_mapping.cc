#include "sentry/vdso/vdso_mapping.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "base/status_macros.h"
#include "sentry/vdso/vdso_image.h"

namespace sandboxd::vdso {

// The vvar page: the memory file's own page, so that every process sees
// the Timekeeper's writes.
class Vdso::VvarMappable : public mm::Mappable {
 public:
  VvarMappable(mm::MemoryFile* mf, uint64_t off) : mf_(mf), off_(off) {}
  uint64_t Size() override { return kVvarSize; }
  int64_t ReadAt(void* dst, uint64_t n, uint64_t off) override {
    if (off >= kVvarSize) return 0;
    n = std::min(n, kVvarSize - off);
    std::memcpy(dst, mf_->Internal(off_ + off), n);
    return static_cast<int64_t>(n);
  }
  std::string Name() override { return "[vvar]"; }
  bool SupportsShared() override { return true; }
  int SharedPage(uint64_t index, uint64_t* memfile_off) override {
    if (index != 0) return -EINVAL;
    mf_->IncRef(off_, mm::kPageSize);  // the mapping's (Mappable::SharedPage)
    *memfile_off = off_;
    return 0;
  }

 private:
  mm::MemoryFile* const mf_;
  const uint64_t off_;
};

// The vDSO text: each process gets a private copy of the embedded image
// when it first touches it (a private file mapping), so that a process
// that makes it writable changes only its own.
class Vdso::ImageMappable : public mm::Mappable {
 public:
  uint64_t Size() override { return kVdsoImageSize; }
  int64_t ReadAt(void* dst, uint64_t n, uint64_t off) override {
    if (off >= kVdsoImageSize) return 0;
    n = std::min<uint64_t>(n, kVdsoImageSize - off);
    std::memcpy(dst, kVdsoImage + off, n);
    return static_cast<int64_t>(n);
  }
  std::string Name() override { return "[vdso]"; }
};

Vdso::Part Vdso::PartOf(const mm::Mappable& m) {
  if (dynamic_cast<const VvarMappable*>(&m) != nullptr) return Part::kVvar;
  if (dynamic_cast<const ImageMappable*>(&m) != nullptr) return Part::kImage;
  return Part::kNone;
}

std::shared_ptr<mm::Mappable> Vdso::MappableOf(Part part) const {
  switch (part) {
    case Part::kVvar:
      return vvar_mappable_;
    case Part::kImage:
      return image_mappable_;
    case Part::kNone:
      break;
  }
  return nullptr;
}

uint64_t Vdso::ImageMapSize() { return mm::PageRoundUp(kVdsoImageSize); }

absl::StatusOr<std::unique_ptr<Vdso>> Vdso::Create(mm::MemoryFile* mf,
                                                   const Options& opts) {
  ASSIGN_OR_RETURN(uint64_t off, mf->Allocate(kVvarSize));
  std::string why_not;
  if (!opts.use_tsc) {
    why_not = "disabled";
  } else if (!HostTscUsable(&why_not) && why_not.empty()) {
    why_not = "the TSC is not usable";
  }
  auto v = std::unique_ptr<Vdso>(new Vdso(mf, off, std::move(why_not)));
  RETURN_IF_ERROR(v->timekeeper_->Start());
  return v;
}

Vdso::Vdso(mm::MemoryFile* mf, uint64_t vvar_off, std::string tsc_why_not)
    : mf_(mf),
      vvar_off_(vvar_off),
      tsc_why_not_(std::move(tsc_why_not)),
      vvar_mappable_(std::make_shared<VvarMappable>(mf, vvar_off)),
      image_mappable_(std::make_shared<ImageMappable>()),
      timekeeper_(std::make_unique<Timekeeper>(
          reinterpret_cast<Vvar*>(mf->Internal(vvar_off)),
          tsc_why_not_.empty())) {}

Vdso::~Vdso() {
  timekeeper_.reset();  // stops writing the page before it is freed
  // Freed now unless a mapping still holds it (SharedPage's reference).
  mf_->DecRef(vvar_off_, kVvarSize);
}

absl::StatusOr<uint64_t> Vdso::Map(mm::MM& mm) const {
  // Reserve both parts at once so that they are adjacent (the vDSO finds
  // the vvar page at a fixed distance below itself), then map over it.
  const uint64_t total = kVvarSize + ImageMapSize();
  int64_t at = mm.Mmap(0, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS);
  if (at < 0) return ErrnoStatus("placing the vDSO", static_cast<int>(-at));
  const uint64_t vvar = static_cast<uint64_t>(at);
  const uint64_t text = vvar + kVvarSize;
  int64_t r = mm.MmapFile(vvar, kVvarSize, PROT_READ, MAP_PRIVATE | MAP_FIXED,
                          vvar_mappable_, 0,
                          platform::Prot{true, false, false});
  if (r < 0) return ErrnoStatus("mapping [vvar]", static_cast<int>(-r));
  r = mm.MmapFile(text, ImageMapSize(), PROT_READ | PROT_EXEC,
                  MAP_PRIVATE | MAP_FIXED, image_mappable_, 0,
                  platform::Prot{true, true, true});
  if (r < 0) return ErrnoStatus("mapping [vdso]", static_cast<int>(-r));
  return text;
}

}  // namespace sandboxd::vdso
