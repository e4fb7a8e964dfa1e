#include "daemon/output_log.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace sandboxd {
namespace daemon {
namespace {

std::string Record(OutputStream stream, const std::string& data) {
  std::string r;
  r.push_back(stream == OutputStream::kStdout ? 0 : 1);
  const uint32_t n = static_cast<uint32_t>(data.size());
  for (int i = 0; i < 4; i++) r.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  r += data;
  return r;
}

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool OutputLog::HasRoomLocked(size_t n) const {
  if (pinned_ == nullptr || closed_) return true;
  // Room means: after evicting down to capacity, nothing the pinned reader
  // has not read is gone. A chunk larger than the whole buffer is let in
  // once the reader has caught up completely.
  const uint64_t new_end = end_ + n;
  const uint64_t keep_from = new_end > capacity_ ? new_end - capacity_ : 0;
  return *pinned_ >= std::min<uint64_t>(keep_from, end_);
}

void OutputLog::Append(OutputStream stream, std::string data) {
  if (data.empty()) return;
  absl::MutexLock l(&mu_);
  const size_t n = data.size();
  auto room = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return HasRoomLocked(n);
  };
  mu_.Await(absl::Condition(&room));
  if (closed_) return;
  WriteFileLocked(stream, data);
  AddLocked(stream, std::move(data));
}

void OutputLog::WriteFileLocked(OutputStream stream, const std::string& data) {
  if (!file_.valid()) return;
  const std::string r = Record(stream, data);
  // A write that fails costs the restarted daemon this output, not the
  // running sandbox: the file is given up.
  if (!WriteAll(file_.get(), r)) {
    file_.reset();
    return;
  }
  file_bytes_ += r.size();
  if (file_bytes_ <= 4 * capacity_) return;
  const std::string tmp = file_path_ + ".tmp";
  UniqueFd t(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  std::string all;
  for (const Stored& s : chunks_) all += Record(s.chunk.stream, s.chunk.data);
  all += r;
  if (!t.valid() || !WriteAll(t.get(), all) || rename(tmp.c_str(), file_path_.c_str()) != 0) {
    return;  // the long file stays
  }
  file_ = UniqueFd(open(file_path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  file_bytes_ = all.size();
}

void OutputLog::AddLocked(OutputStream stream, std::string data) {
  const size_t n = data.size();
  chunks_.push_back(Stored{end_, OutputChunk{stream, std::move(data)}});
  end_ += n;
  bytes_ += n;
  while (bytes_ > capacity_ && chunks_.size() > 1) {
    bytes_ -= chunks_.front().chunk.data.size();
    chunks_.pop_front();
  }
  start_ = chunks_.empty() ? end_ : chunks_.front().offset;
}

void OutputLog::Close() {
  absl::MutexLock l(&mu_);
  closed_ = true;
}

OutputLog::ReadResult OutputLog::Read(uint64_t* cursor, absl::Duration timeout) {
  ReadResult r;
  absl::MutexLock l(&mu_);
  auto ready = [this, cursor]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || *cursor < end_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  if (*cursor < start_) {
    r.dropped = start_ - *cursor;
    *cursor = start_;
  }
  for (const Stored& s : chunks_) {
    const uint64_t chunk_end = s.offset + s.chunk.data.size();
    if (chunk_end <= *cursor) continue;
    const size_t skip = static_cast<size_t>(*cursor - s.offset);
    r.chunks.push_back(OutputChunk{s.chunk.stream, s.chunk.data.substr(skip)});
    *cursor = chunk_end;
  }
  r.eof = closed_ && *cursor >= end_;
  return r;
}

void OutputLog::Pin(const uint64_t* cursor) {
  absl::MutexLock l(&mu_);
  pinned_ = cursor;
}

void OutputLog::Unpin() {
  absl::MutexLock l(&mu_);
  pinned_ = nullptr;
}

absl::Status OutputLog::LoadFrom(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f.is_open()) return ErrnoStatus(absl::StrCat("opening ", path), errno);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  absl::MutexLock l(&mu_);
  size_t at = 0;
  while (all.size() - at >= 5) {
    uint32_t n = 0;
    for (int i = 0; i < 4; i++) {
      n |= static_cast<uint32_t>(static_cast<uint8_t>(all[at + 1 + i])) << (8 * i);
    }
    if (all.size() - at - 5 < n) break;  // torn by a crash
    const OutputStream stream = all[at] == 0 ? OutputStream::kStdout : OutputStream::kStderr;
    if (n > 0) AddLocked(stream, all.substr(at + 5, n));
    at += 5 + n;
  }
  // The next PersistTo appends after the last whole record.
  if (at < all.size() && truncate(path.c_str(), static_cast<off_t>(at)) != 0) {
    return ErrnoStatus(absl::StrCat("truncating ", path), errno);
  }
  return absl::OkStatus();
}

absl::Status OutputLog::PersistTo(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("opening ", path), errno);
  struct stat st;
  absl::MutexLock l(&mu_);
  file_bytes_ = fstat(fd.get(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  file_path_ = path;
  file_ = std::move(fd);
  return absl::OkStatus();
}

uint64_t OutputLog::end() const {
  absl::MutexLock l(&mu_);
  return end_;
}

}  // namespace daemon
}  // namespace sandboxd
