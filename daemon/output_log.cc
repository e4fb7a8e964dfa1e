#include "daemon/output_log.h"

#include <algorithm>
#include <utility>

namespace sandboxd {
namespace daemon {

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

uint64_t OutputLog::end() const {
  absl::MutexLock l(&mu_);
  return end_;
}

}  // namespace daemon
}  // namespace sandboxd
