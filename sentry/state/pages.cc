#include "sentry/state/pages.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/state/image.h"

namespace sandboxd::state {
namespace {

constexpr uint64_t kNoData = ~uint64_t{0};

bool IsZero(const uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    if (p[i] != 0) return false;
  }
  return true;
}

absl::Status CheckRange(uint64_t off, uint64_t len) {
  if (off % kStatePageSize != 0 || len % kStatePageSize != 0 || len == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory-file range ", off, "+", len, " is not whole pages"));
  }
  return absl::OkStatus();
}

// The saved range of `ranges` (start -> length) holding [off, off + len).
template <typename Map>
typename Map::const_iterator Covering(const Map& ranges, uint64_t off,
                                      uint64_t len) {
  auto it = ranges.upper_bound(off);
  if (it == ranges.begin()) return ranges.end();
  --it;
  return off + len <= it->first + it->second ? it : ranges.end();
}

}  // namespace

absl::Status MemoryPages::SavePages(uint64_t memfile_off, uint64_t len) {
  RETURN_IF_ERROR(CheckRange(memfile_off, len));
  ranges_[memfile_off] = len;
  for (uint64_t o = memfile_off; o < memfile_off + len; o += kStatePageSize) {
    const uint8_t* p = base_ + o;
    if (!IsZero(p, kStatePageSize)) {
      pages_[o].assign(p, p + kStatePageSize);
    }
  }
  return absl::OkStatus();
}

absl::Status MemoryPages::LoadPages(uint64_t memfile_off, uint64_t len,
                                    uint8_t* dst) {
  return Load(memfile_off, len, dst, /*zeroed=*/false);
}

absl::Status MemoryPages::LoadPagesZeroed(uint64_t memfile_off, uint64_t len,
                                          uint8_t* dst) {
  return Load(memfile_off, len, dst, /*zeroed=*/true);
}

absl::Status MemoryPages::Load(uint64_t memfile_off, uint64_t len,
                               uint8_t* dst, bool zeroed) {
  RETURN_IF_ERROR(CheckRange(memfile_off, len));
  // Saved ranges that touch may be read as one.
  for (uint64_t o = memfile_off; o < memfile_off + len;) {
    auto r = Covering(ranges_, o, kStatePageSize);
    if (r == ranges_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "memory-file range ", memfile_off, "+", len, " was not saved"));
    }
    o = r->first + r->second;
  }
  for (uint64_t o = 0; o < len; o += kStatePageSize) {
    auto it = pages_.find(memfile_off + o);
    if (it == pages_.end()) {
      if (!zeroed) memset(dst + o, 0, kStatePageSize);
    } else {
      memcpy(dst + o, it->second.data(), kStatePageSize);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FilePageWriter>> FilePageWriter::Create(
    const ImageDir& dir, const uint8_t* base) {
  const std::string path = dir.Path("pages.img");
  UniqueFd img(OpenIn(dir, "pages.img", O_WRONLY | O_CREAT | O_TRUNC, 0600));
  if (!img.valid()) return ErrnoStatus(absl::StrCat("creating ", path), errno);
  return std::unique_ptr<FilePageWriter>(
      new FilePageWriter(dir, base, std::move(img)));
}

absl::Status FilePageWriter::Append(uint64_t memfile_off, uint64_t len) {
  const uint8_t* p = base_ + memfile_off;
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = pwrite(img_.get(), p + done, len - done, img_size_ + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return ErrnoStatus(
          absl::StrCat("pages.img: writing at offset ", img_size_ + done),
          errno);
    }
    done += n;
  }
  records_.push_back({memfile_off, len, img_size_});
  img_size_ += len;
  return absl::OkStatus();
}

absl::Status FilePageWriter::SavePages(uint64_t memfile_off, uint64_t len) {
  RETURN_IF_ERROR(CheckRange(memfile_off, len));
  // Runs of non-zero pages are stored; runs of zero pages only recorded.
  uint64_t run = memfile_off;
  bool run_zero = IsZero(base_ + run, kStatePageSize);
  for (uint64_t o = memfile_off + kStatePageSize; o <= memfile_off + len;
       o += kStatePageSize) {
    const bool end = o == memfile_off + len;
    const bool zero = !end && IsZero(base_ + o, kStatePageSize);
    if (end || zero != run_zero) {
      if (run_zero) {
        records_.push_back({run, o - run, kNoData});
      } else {
        RETURN_IF_ERROR(Append(run, o - run));
      }
      run = o;
      run_zero = zero;
    }
  }
  return absl::OkStatus();
}

absl::Status FilePageWriter::Finish() {
  std::string payload;
  payload.append(reinterpret_cast<const char*>(records_.data()),
                 records_.size() * sizeof(Record));
  if (sync_ && fsync(img_.get()) != 0) {
    return ErrnoStatus("fsync of pages.img", errno);
  }
  return WriteFileIn(dir_, "pages.idx", Frame(kPageIndexMagic, payload),
                     sync_);
}

absl::StatusOr<std::unique_ptr<FilePageReader>> FilePageReader::Open(
    const ImageDir& dir, bool direct) {
  const std::string idx_path = dir.Path("pages.idx");
  ASSIGN_OR_RETURN(std::string data, ReadFileIn(dir, "pages.idx"));
  ASSIGN_OR_RETURN(std::string payload,
                   Unframe(kPageIndexMagic, data, idx_path));
  constexpr size_t kRecord = 3 * sizeof(uint64_t);
  if (payload.size() % kRecord != 0) {
    return absl::DataLossError(
        absl::StrCat(idx_path, ": ", payload.size(),
                     " bytes is not a whole number of records"));
  }
  const std::string img_path = dir.Path("pages.img");
  UniqueFd img(OpenIn(dir, "pages.img", O_RDONLY));
  if (!img.valid()) {
    return ErrnoStatus(absl::StrCat("opening ", img_path), errno);
  }
  struct stat st;
  if (fstat(img.get(), &st) != 0) {
    return ErrnoStatus(absl::StrCat("stat of ", img_path), errno);
  }
  // A second descriptor for O_DIRECT reads: tmpfs and some filesystems
  // refuse the flag (EINVAL), then every read goes through the cache.
  UniqueFd direct_fd;
  if (direct) {
    direct_fd.reset(OpenIn(dir, "pages.img", O_RDONLY | O_DIRECT));
  }
  std::unique_ptr<FilePageReader> r(new FilePageReader(
      img_path, std::move(img), std::move(direct_fd), st.st_size));
  for (size_t i = 0; i < payload.size(); i += kRecord) {
    uint64_t rec[3];
    memcpy(rec, payload.data() + i, kRecord);
    const uint64_t off = rec[0], len = rec[1], img_off = rec[2];
    if (off % kStatePageSize != 0 || len % kStatePageSize != 0 ||
        (img_off != kNoData &&
         (img_off % kStatePageSize != 0 || img_off + len > r->img_size_))) {
      return absl::DataLossError(absl::StrCat(
          idx_path, ": record ", i / kRecord, " (", off, "+", len, " at ",
          img_off, ") is malformed or beyond pages.img (", r->img_size_,
          " bytes)"));
    }
    r->pieces_[off] = Piece{len, img_off};
  }
  return r;
}

absl::Status FilePageReader::LoadPages(uint64_t memfile_off, uint64_t len,
                                       uint8_t* dst) {
  return Load(memfile_off, len, dst, /*zeroed=*/false);
}

absl::Status FilePageReader::LoadPagesZeroed(uint64_t memfile_off,
                                             uint64_t len, uint8_t* dst) {
  return Load(memfile_off, len, dst, /*zeroed=*/true);
}

absl::Status FilePageReader::ReadImg(uint8_t* dst, uint64_t n,
                                     uint64_t img_off) {
  // Every piece is whole pages at page-aligned offsets, into page-aligned
  // memory: what O_DIRECT asks for.
  uint64_t got = 0;
  if (direct_ok_.load(std::memory_order_relaxed)) {
    // Whatever the page cache holds already is copied from there (an
    // image just written, or restored before: ~5x the O_DIRECT rate on
    // this project's machines); RWF_NOWAIT stops at the first page it
    // does not hold, and the rest is read with O_DIRECT.
    while (got < n) {
      iovec iov{dst + got, static_cast<size_t>(n - got)};
      ssize_t r = preadv2(img_.get(), &iov, 1,
                          static_cast<off_t>(img_off + got), RWF_NOWAIT);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      cached_bytes_.fetch_add(static_cast<uint64_t>(r),
                              std::memory_order_relaxed);
      got += static_cast<uint64_t>(r);
    }
  }
  while (got < n) {
    // O_DIRECT needs whole pages.
    const bool direct = direct_ok_.load(std::memory_order_relaxed) &&
                        got % kStatePageSize == 0;
    const int fd = direct ? direct_.get() : img_.get();
    ssize_t r = pread(fd, dst + got, n - got, img_off + got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && direct && errno == EINVAL) {
      // The filesystem takes the flag at open but not for this read.
      direct_ok_.store(false, std::memory_order_relaxed);
      continue;
    }
    if (r <= 0) {
      return r < 0 ? ErrnoStatus(absl::StrCat(img_path_, ": reading at offset ",
                                              img_off + got),
                                 errno)
                   : absl::DataLossError(absl::StrCat(
                         img_path_, ": short read at offset ", img_off + got));
    }
    (direct ? direct_bytes_ : buffered_bytes_)
        .fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
    got += static_cast<uint64_t>(r);
  }
  return absl::OkStatus();
}

absl::Status FilePageReader::Load(uint64_t memfile_off, uint64_t len,
                                  uint8_t* dst, bool zeroed) {
  RETURN_IF_ERROR(CheckRange(memfile_off, len));
  // A saved range may have been split into zero and data pieces: walk them.
  uint64_t done = 0;
  while (done < len) {
    const uint64_t off = memfile_off + done;
    auto it = pieces_.upper_bound(off);
    if (it == pieces_.begin()) it = pieces_.end();
    else --it;
    if (it == pieces_.end() || off >= it->first + it->second.len) {
      return absl::NotFoundError(absl::StrCat(
          "pages.idx: memory-file offset ", off, " was not saved"));
    }
    const uint64_t skip = off - it->first;
    const uint64_t n = std::min(len - done, it->second.len - skip);
    if (it->second.img_off == kNoData) {
      if (!zeroed) memset(dst + done, 0, n);
    } else {
      RETURN_IF_ERROR(ReadImg(dst + done, n, it->second.img_off + skip));
    }
    done += n;
  }
  return absl::OkStatus();
}

namespace {

// The loader's view of a PageReader: the saved offsets are the source's.
class ReaderSource : public mm::PageSource {
 public:
  explicit ReaderSource(std::shared_ptr<PageReader> reader)
      : reader_(std::move(reader)) {}
  absl::Status ReadPages(uint64_t src_off, uint64_t len,
                         uint8_t* dst) override {
    return reader_->LoadPagesZeroed(src_off, len, dst);
  }
  std::string Name() const override { return reader_->Name(); }

 private:
  const std::shared_ptr<PageReader> reader_;
};

}  // namespace

absl::Status FillPages(PageReader& reader, mm::MemoryFile* mf,
                       uint64_t saved_off, uint64_t len, uint64_t new_off) {
  if (mm::AsyncLoader* l = mf->async_loader()) {
    RETURN_IF_ERROR(CheckRange(saved_off, len));
    return l->Add(new_off, len, saved_off);
  }
  return reader.LoadPagesZeroed(saved_off, len, mf->Internal(new_off));
}

mm::AsyncLoader* InstallAsyncLoader(mm::MemoryFile* mf,
                                    std::shared_ptr<PageReader> reader,
                                    const mm::AsyncLoadOptions& options) {
  auto loader = std::make_unique<mm::AsyncLoader>(
      mf, std::make_shared<ReaderSource>(std::move(reader)), options);
  mm::AsyncLoader* l = loader.get();
  mf->SetAsyncLoader(std::move(loader));
  return l;
}

}  // namespace sandboxd::state
