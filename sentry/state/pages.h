// Memory-file data in a checkpoint.
//
// Objects whose data lives in the memory file (tmpfs files now; anonymous
// memory and page caches later) do not copy it into state.pb: they tell a
// PageWriter which memory-file range to keep, and record the range's
// offset in their own message. At load they ask a PageReader for the data
// of that saved range and put it into pages they allocate in the new
// memory file. All-zero pages are not stored; they read back as zeros.
//
// Two implementations: MemoryPages (tests, and a future in-memory
// checkpoint) and the file pair of an image directory:
//   pages.img  the stored pages, page-aligned, back to back
//   pages.idx  framed (image.h) array of {memfile offset, length, img offset}
#ifndef SANDBOXD_SENTRY_STATE_PAGES_H_
#define SANDBOXD_SENTRY_STATE_PAGES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <atomic>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "sentry/mm/async_loader.h"
#include "sentry/state/image.h"
#include "sentry/mm/memory_file.h"

namespace sandboxd::state {

inline constexpr uint64_t kStatePageSize = 4096;

class PageWriter {
 public:
  virtual ~PageWriter() = default;
  // Keeps the `len` bytes (a page multiple) at `memfile_off` (page-aligned)
  // of the memory file whose internal mapping starts at the `base` given to
  // the writer. A range is saved at most once per save.
  virtual absl::Status SavePages(uint64_t memfile_off, uint64_t len) = 0;
  // Makes everything durable; no SavePages after it.
  virtual absl::Status Finish() { return absl::OkStatus(); }
};

class PageReader {
 public:
  virtual ~PageReader() = default;
  // Copies the saved data of [memfile_off, memfile_off + len) to `dst`,
  // zeros where nothing was stored. The range must lie within what one
  // SavePages call saved, or in no saved range at all (then it is an
  // error: the image does not have it).
  virtual absl::Status LoadPages(uint64_t memfile_off, uint64_t len,
                                 uint8_t* dst) = 0;
  // The same into memory that is zero-filled already (pages just
  // allocated): zeros need not be written. The range may span several
  // saved ranges that touch.
  virtual absl::Status LoadPagesZeroed(uint64_t memfile_off, uint64_t len,
                                       uint8_t* dst) {
    return LoadPages(memfile_off, len, dst);
  }
  // For errors ("pages.img").
  virtual std::string Name() const { return "saved pages"; }
};

// Fills [new_off, new_off + len) of `mf`, just allocated, with the saved
// range [saved_off, saved_off + len): read now, or, when a restore has
// installed an AsyncLoader on `mf` (InstallAsyncLoader), registered with it
// to be read in the background once it starts.
absl::Status FillPages(PageReader& reader, mm::MemoryFile* mf,
                       uint64_t saved_off, uint64_t len, uint64_t new_off);

// Asynchronous page loading for a restore: installs on `mf` (before the
// load, which then registers ranges instead of reading them) a loader that
// reads from `reader`. The caller starts it after the load
// (`mf->async_loader()->Start()`), before the program runs.
// Preconditions: `mf` has no loader yet.
mm::AsyncLoader* InstallAsyncLoader(mm::MemoryFile* mf,
                                    std::shared_ptr<PageReader> reader,
                                    const mm::AsyncLoadOptions& options);

// Ranges kept in memory, only their non-zero pages.
class MemoryPages : public PageWriter, public PageReader {
 public:
  // `base`: the memory file's internal mapping, which SavePages reads.
  explicit MemoryPages(const uint8_t* base) : base_(base) {}
  absl::Status SavePages(uint64_t memfile_off, uint64_t len) override;
  absl::Status LoadPages(uint64_t memfile_off, uint64_t len,
                         uint8_t* dst) override;
  absl::Status LoadPagesZeroed(uint64_t memfile_off, uint64_t len,
                               uint8_t* dst) override;
  // Stored (non-zero) pages.
  uint64_t stored_pages() const { return pages_.size(); }

 private:
  absl::Status Load(uint64_t memfile_off, uint64_t len, uint8_t* dst,
                    bool zeroed);
  const uint8_t* const base_;
  std::map<uint64_t, uint64_t> ranges_;  // saved: start -> length
  std::map<uint64_t, std::vector<uint8_t>> pages_;  // non-zero page data
};

// pages.img and pages.idx in an image directory.
class FilePageWriter : public PageWriter {
 public:
  static absl::StatusOr<std::unique_ptr<FilePageWriter>> Create(
      const ImageDir& dir, const uint8_t* base);
  absl::Status SavePages(uint64_t memfile_off, uint64_t len) override;
  // Writes pages.idx and syncs both files (unless set_sync(false): an
  // image directory's manifest checksums find what a crash left short).
  absl::Status Finish() override;
  void set_sync(bool sync) { sync_ = sync; }

 private:
  FilePageWriter(ImageDir dir, const uint8_t* base, UniqueFd img)
      : dir_(std::move(dir)), base_(base), img_(std::move(img)) {}
  struct Record {
    uint64_t memfile_off;
    uint64_t len;
    uint64_t img_off;  // ~0: a saved range with no stored data (all zero)
  };
  absl::Status Append(uint64_t memfile_off, uint64_t len);

  const ImageDir dir_;
  const uint8_t* const base_;
  UniqueFd img_;
  uint64_t img_size_ = 0;
  bool sync_ = true;
  std::vector<Record> records_;
};

// Thread-safe: LoadPages may run in several threads at once (the
// asynchronous loader's).
class FilePageReader : public PageReader {
 public:
  // Reads and checks pages.idx; pages.img is read on demand: with
  // `direct` and a filesystem that allows it, what the page cache holds
  // is copied from there and the rest read with O_DIRECT; otherwise
  // (or a filesystem that refuses O_DIRECT, EINVAL) buffered.
  static absl::StatusOr<std::unique_ptr<FilePageReader>> Open(
      const ImageDir& dir, bool direct = true);
  absl::Status LoadPages(uint64_t memfile_off, uint64_t len,
                         uint8_t* dst) override;
  absl::Status LoadPagesZeroed(uint64_t memfile_off, uint64_t len,
                               uint8_t* dst) override;
  std::string Name() const override { return img_path_; }

  // Bytes of pages.img copied from the page cache where it held them
  // (preadv2 RWF_NOWAIT, tried first when O_DIRECT is offered), read with
  // O_DIRECT, and read buffered (no O_DIRECT).
  uint64_t cached_bytes() const {
    return cached_bytes_.load(std::memory_order_relaxed);
  }
  uint64_t direct_bytes() const {
    return direct_bytes_.load(std::memory_order_relaxed);
  }
  uint64_t buffered_bytes() const {
    return buffered_bytes_.load(std::memory_order_relaxed);
  }
  bool direct() const { return direct_ok_.load(std::memory_order_relaxed); }

 private:
  struct Piece {
    uint64_t len;
    uint64_t img_off;  // ~0: zeros
  };
  FilePageReader(std::string img_path, UniqueFd img, UniqueFd direct,
                 uint64_t img_size)
      : img_path_(std::move(img_path)),
        img_(std::move(img)),
        direct_(std::move(direct)),
        img_size_(img_size) {
    direct_ok_.store(direct_.valid(), std::memory_order_relaxed);
  }
  absl::Status Load(uint64_t memfile_off, uint64_t len, uint8_t* dst,
                    bool zeroed);
  // Reads n bytes of pages.img at `img_off` into dst: O_DIRECT while it
  // works, else buffered.
  absl::Status ReadImg(uint8_t* dst, uint64_t n, uint64_t img_off);

  const std::string img_path_;
  const UniqueFd img_;
  const UniqueFd direct_;  // O_DIRECT; invalid when not offered
  std::atomic<bool> direct_ok_{false};
  std::atomic<uint64_t> cached_bytes_{0};
  std::atomic<uint64_t> direct_bytes_{0};
  std::atomic<uint64_t> buffered_bytes_{0};
  const uint64_t img_size_;
  std::map<uint64_t, Piece> pieces_;  // memfile offset -> piece; set by Open
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_PAGES_H_
