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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/unique_fd.h"

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
};

// Ranges kept in memory, only their non-zero pages.
class MemoryPages : public PageWriter, public PageReader {
 public:
  // `base`: the memory file's internal mapping, which SavePages reads.
  explicit MemoryPages(const uint8_t* base) : base_(base) {}
  absl::Status SavePages(uint64_t memfile_off, uint64_t len) override;
  absl::Status LoadPages(uint64_t memfile_off, uint64_t len,
                         uint8_t* dst) override;
  // Stored (non-zero) pages.
  uint64_t stored_pages() const { return pages_.size(); }

 private:
  const uint8_t* const base_;
  std::map<uint64_t, uint64_t> ranges_;  // saved: start -> length
  std::map<uint64_t, std::vector<uint8_t>> pages_;  // non-zero page data
};

// pages.img and pages.idx in an image directory.
class FilePageWriter : public PageWriter {
 public:
  static absl::StatusOr<std::unique_ptr<FilePageWriter>> Create(
      const std::string& dir, const uint8_t* base);
  absl::Status SavePages(uint64_t memfile_off, uint64_t len) override;
  // Writes pages.idx and syncs both files (unless set_sync(false): an
  // image directory's manifest checksums find what a crash left short).
  absl::Status Finish() override;
  void set_sync(bool sync) { sync_ = sync; }

 private:
  FilePageWriter(std::string dir, const uint8_t* base, UniqueFd img)
      : dir_(std::move(dir)), base_(base), img_(std::move(img)) {}
  struct Record {
    uint64_t memfile_off;
    uint64_t len;
    uint64_t img_off;  // ~0: a saved range with no stored data (all zero)
  };
  absl::Status Append(uint64_t memfile_off, uint64_t len);

  const std::string dir_;
  const uint8_t* const base_;
  UniqueFd img_;
  uint64_t img_size_ = 0;
  bool sync_ = true;
  std::vector<Record> records_;
};

class FilePageReader : public PageReader {
 public:
  // Reads and checks pages.idx; pages.img is read on demand.
  static absl::StatusOr<std::unique_ptr<FilePageReader>> Open(
      const std::string& dir);
  absl::Status LoadPages(uint64_t memfile_off, uint64_t len,
                         uint8_t* dst) override;

 private:
  struct Piece {
    uint64_t len;
    uint64_t img_off;  // ~0: zeros
  };
  FilePageReader(UniqueFd img, uint64_t img_size)
      : img_(std::move(img)), img_size_(img_size) {}
  UniqueFd img_;
  const uint64_t img_size_;
  std::map<uint64_t, Piece> pieces_;  // memfile offset -> piece
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_PAGES_H_
