#include "sentry/state/image.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "sentry/state/crc32c.h"

namespace sandboxd::state {
namespace {

void PutU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<char*>(&v), 4); }
void PutU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<char*>(&v), 8); }

template <typename T>
T Get(absl::string_view s, size_t off) {
  T v;
  memcpy(&v, s.data() + off, sizeof(v));
  return v;
}

}  // namespace

std::string Frame(const char (&magic)[8], absl::string_view payload) {
  std::string out(magic, sizeof(magic));
  PutU32(&out, kFormatVersion);
  PutU32(&out, Crc32c(0, payload.data(), payload.size()));
  PutU64(&out, payload.size());
  out.append(payload.data(), payload.size());
  return out;
}

absl::StatusOr<std::string> Unframe(const char (&magic)[8],
                                    absl::string_view data,
                                    absl::string_view what) {
  if (data.size() < kHeaderSize) {
    return absl::DataLossError(absl::StrCat(
        what, ": truncated header (", data.size(), " of ", kHeaderSize,
        " bytes)"));
  }
  if (memcmp(data.data(), magic, sizeof(magic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a ", absl::string_view(magic, 8), " file"));
  }
  const auto version = Get<uint32_t>(data, 8);
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": format version ", version,
                     ", this Sentry reads version ", kFormatVersion));
  }
  const auto crc = Get<uint32_t>(data, 12);
  const auto len = Get<uint64_t>(data, 16);
  if (len != data.size() - kHeaderSize) {
    return absl::DataLossError(
        absl::StrCat(what, ": payload is ", data.size() - kHeaderSize,
                     " bytes, header says ", len, " (truncated?)"));
  }
  absl::string_view payload = data.substr(kHeaderSize);
  if (Crc32c(0, payload.data(), payload.size()) != crc) {
    return absl::DataLossError(absl::StrCat(what, ": checksum mismatch"));
  }
  return std::string(payload);
}

absl::StatusOr<std::string> EncodeState(const pb::State& state) {
  std::string payload;
  if (!state.SerializeToString(&payload)) {
    return absl::InternalError("state.pb: serializing the state failed");
  }
  return Frame(kStateMagic, payload);
}

absl::StatusOr<pb::State> DecodeState(absl::string_view data,
                                      absl::string_view what) {
  ASSIGN_OR_RETURN(std::string payload, Unframe(kStateMagic, data, what));
  pb::State state;
  if (!state.ParseFromString(payload)) {
    return absl::DataLossError(absl::StrCat(what, ": malformed State message"));
  }
  return state;
}

int OpenIn(const ImageDir& dir, absl::string_view file, int flags,
           mode_t mode) {
  return openat(dir.fd, dir.At(file).c_str(), flags | O_CLOEXEC, mode);
}

absl::StatusOr<std::string> ReadFileIn(const ImageDir& dir,
                                       absl::string_view file) {
  const std::string path = dir.Path(file);
  UniqueFd fd(OpenIn(dir, file, O_RDONLY));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("opening ", path), errno);
  return ReadAll(fd.get(), path);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view data, bool sync) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return WriteFileIn(ImageDir("."), path, data, sync);
  }
  return WriteFileIn(ImageDir(path.substr(0, slash)),
                     absl::string_view(path).substr(slash + 1), data, sync);
}

absl::Status WriteFileIn(const ImageDir& dir, absl::string_view file,
                         absl::string_view data, bool sync) {
  const std::string tmp_name = absl::StrCat(file, ".tmp");
  const std::string tmp = dir.Path(tmp_name);
  UniqueFd fd(OpenIn(dir, tmp_name, O_WRONLY | O_CREAT | O_TRUNC, 0600));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("creating ", tmp), errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StrCat("writing ", tmp), errno);
    done += n;
  }
  if (sync && fsync(fd.get()) != 0) {
    return ErrnoStatus(absl::StrCat("fsync of ", tmp), errno);
  }
  if (renameat(dir.fd, dir.At(tmp_name).c_str(), dir.fd,
               dir.At(file).c_str()) != 0) {
    return ErrnoStatus(
        absl::StrCat("renaming ", tmp, " to ", dir.Path(file)), errno);
  }
  return absl::OkStatus();
}

absl::Status WriteStateFile(const ImageDir& dir, const pb::State& state,
                            bool sync) {
  ASSIGN_OR_RETURN(std::string data, EncodeState(state));
  return WriteFileIn(dir, "state.pb", data, sync);
}

absl::StatusOr<pb::State> ReadStateFile(const ImageDir& dir) {
  ASSIGN_OR_RETURN(std::string data, ReadFileIn(dir, "state.pb"));
  return DecodeState(data, dir.Path("state.pb"));
}

}  // namespace sandboxd::state
