// The output of one sandbox's init program (stdout and stderr, in the order
// the daemon read them), kept in a bounded buffer for `sandboxctl logs` and
// handed to an attached client.
//
// Bytes are numbered from the start of the output, so readers keep a
// cursor that survives eviction: when the buffer is full the oldest chunks
// are dropped, and a reader whose cursor points before what is left learns
// how many bytes it missed. One reader may be *pinned* (the attached client
// of `sandboxctl run`): while it is, Append waits instead of dropping bytes
// the pinned reader has not read yet, so the program blocks on a full pipe
// rather than losing output.
//
// A sandbox's init log is also kept in a file of the state directory
// (PersistTo), so that a restarted daemon has the output from before its
// start (LoadFrom). The file is a sequence of records: one byte for the
// stream (0 stdout, 1 stderr), a 4-byte little-endian length, the bytes;
// once it holds more than four times the capacity it is rewritten (a
// temporary file renamed) from what the buffer keeps.
//
// Thread safety: every method may be called from any thread.
#ifndef SANDBOXD_DAEMON_OUTPUT_LOG_H_
#define SANDBOXD_DAEMON_OUTPUT_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"

namespace sandboxd {
namespace daemon {

enum class OutputStream { kStdout, kStderr };

struct OutputChunk {
  OutputStream stream;
  std::string data;
};

class OutputLog {
 public:
  explicit OutputLog(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Adds `data` read from `stream`. With a pinned reader, waits (without
  // bound) until the pinned reader has made room, the reader is unpinned,
  // or the log is closed.
  void Append(OutputStream stream, std::string data);
  // No more output: readers get everything left and then end-of-output.
  void Close();

  // Result of one Read.
  struct ReadResult {
    std::vector<OutputChunk> chunks;
    uint64_t dropped = 0;  // bytes evicted before the reader got to them
    bool eof = false;      // closed and the reader has everything
  };
  // Returns what follows `*cursor` (and advances it), waiting up to
  // `timeout` for something to arrive; an empty result without eof means
  // the timeout passed.
  ReadResult Read(uint64_t* cursor, absl::Duration timeout);

  // While pinned, Append keeps the bytes after `*cursor` (the pinned
  // reader's own cursor, read under the log's lock).
  void Pin(const uint64_t* cursor);
  void Unpin();

  // Total bytes ever appended.
  uint64_t end() const;

  // Appends the records of a file PersistTo wrote, without writing them
  // anywhere (a torn last record is left out). Before PersistTo.
  absl::Status LoadFrom(const std::string& path);
  // From now on, every Append also goes to `path` (created if missing,
  // else appended to).
  absl::Status PersistTo(const std::string& path);

 private:
  struct Stored {
    uint64_t offset;  // of the chunk's first byte
    OutputChunk chunk;
  };
  bool HasRoomLocked(size_t n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddLocked(OutputStream stream, std::string data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriteFileLocked(OutputStream stream, const std::string& data)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<Stored> chunks_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;   // in chunks_
  uint64_t start_ ABSL_GUARDED_BY(mu_) = 0;  // offset of chunks_.front()
  uint64_t end_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  friend class Sandbox;  // names mu_ in its lock order annotation
  const uint64_t* pinned_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string file_path_ ABSL_GUARDED_BY(mu_);
  UniqueFd file_ ABSL_GUARDED_BY(mu_);
  uint64_t file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_OUTPUT_LOG_H_
