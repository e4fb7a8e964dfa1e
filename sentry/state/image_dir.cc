#include "sentry/state/image_dir.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "sentry/fs/lock.h"
#include "sentry/state/crc32c.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/image.h"
#include "sentry/state/kernel_state.h"
#include "sentry/state/mm_state.h"
#include "sentry/state/pages.h"
#include "sentry/state/saver.h"

namespace sandboxd::state {
namespace {

// The files a manifest vouches for, in the order they are checked.
constexpr const char* kImageFiles[] = {"state.pb", "pages.idx", "pages.img"};

int64_t ClockNs(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// The NT_GNU_BUILD_ID note of the main executable (the first object
// dl_iterate_phdr reports).
int FindBuildId(dl_phdr_info* info, size_t, void* out) {
  auto* id = static_cast<std::string*>(out);
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(*n);
      const char* desc = name + ((n->n_namesz + 3) & ~3u);
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
          memcmp(name, "GNU", 4) == 0 && desc + n->n_descsz <= end) {
        for (uint32_t j = 0; j < n->n_descsz; j++) {
          absl::StrAppend(id, absl::Hex(static_cast<uint8_t>(desc[j]),
                                        absl::kZeroPad2));
        }
        return 1;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
  return 1;  // only the main executable
}

absl::StatusOr<uint32_t> FileCrc(const ImageDir& dir, const char* name,
                                 uint64_t* size) {
  const std::string path = dir.Path(name);
  UniqueFd fd(OpenIn(dir, name, O_RDONLY));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("opening ", path), errno);
  // Small enough to stay in the cache and to cost a restore (a fresh
  // process) few first-touch faults; reads of 64 KiB from the page cache
  // are as fast per byte as larger ones.
  char buf[64 << 10];
  uint32_t crc = 0;
  *size = 0;
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(absl::StrCat("reading ", path), errno);
    if (n == 0) break;
    crc = Crc32c(crc, buf, n);
    *size += n;
  }
  return crc;
}

absl::Status RemoveTree(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return errno == ENOENT ? absl::OkStatus()
                                           : ErrnoStatus("opendir " + dir, errno);
  while (dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    unlink((dir + "/" + e->d_name).c_str());
  }
  closedir(d);
  if (rmdir(dir.c_str()) != 0) return ErrnoStatus("rmdir " + dir, errno);
  return absl::OkStatus();
}

// What SaveFiles may have left in a directory it failed to fill.
void RemoveFiles(const ImageDir& dir) {
  for (const char* name : {"state.pb", "pages.idx", "pages.img",
                           "manifest.pb"}) {
    unlinkat(dir.fd, dir.At(name).c_str(), 0);
    unlinkat(dir.fd, dir.At(absl::StrCat(name, ".tmp")).c_str(), 0);
  }
}

// Every file of the image into `dir`, manifest.pb last.
absl::Status SaveFiles(const ImageDir& dir, kernel::Kernel& k,
                       const fs::Vfs& vfs, const void* rootfs,
                       const SaveOptions& opts, StageClock* clock,
                       SaveResult* res, int64_t* t1) {
  pb::State st;
  ASSIGN_OR_RETURN(std::unique_ptr<FilePageWriter> writer,
                   FilePageWriter::Create(dir, k.memory_file().Internal(0)));
  writer->set_sync(opts.sync);
  {
    Saver s(&st, writer.get());
    s.set_rootfs(rootfs);
    MmState mms;
    RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
    RETURN_IF_ERROR(KernelState::SaveKernel(s, k, vfs, mms));
    RETURN_IF_ERROR(FsState::SaveLocks(s, fs::LockTable::Global()));
  }
  *t1 = ClockNs(CLOCK_MONOTONIC);
  if (clock != nullptr) clock->Mark(Stage::kCheckpointSave);
  RETURN_IF_ERROR(writer->Finish());
  RETURN_IF_ERROR(WriteStateFile(dir, st, opts.sync));

  pb::Manifest m;
  m.set_format_version(kFormatVersion);
  m.set_build_id(SentryBuildId());
  m.set_platform(opts.platform);
  m.set_spec(opts.spec);
  m.set_memory_bytes(k.memory_file().AllocatedBytes());
  m.set_monotonic_ns(ClockNs(CLOCK_MONOTONIC));
  m.set_realtime_ns(ClockNs(CLOCK_REALTIME));
  for (const char* name : kImageFiles) {
    uint64_t size = 0;
    ASSIGN_OR_RETURN(uint32_t crc, FileCrc(dir, name, &size));
    pb::ImageFile* f = m.add_files();
    f->set_name(name);
    f->set_size(size);
    f->set_crc32c(crc);
    if (strcmp(name, "state.pb") == 0) res->state_bytes = size;
    if (strcmp(name, "pages.img") == 0) res->pages_bytes = size;
  }
  res->pages = res->pages_bytes / kStatePageSize;
  m.set_pages(res->pages);
  res->memory_bytes = m.memory_bytes();
  std::string payload;
  if (!m.SerializeToString(&payload)) {
    return absl::InternalError("manifest.pb: serializing failed");
  }
  return WriteFileIn(dir, "manifest.pb", Frame(kManifestMagic, payload),
                     opts.sync);
}

}  // namespace

const std::string& SentryBuildId() {
  static const std::string* id = [] {
    auto* s = new std::string;
    dl_iterate_phdr(FindBuildId, s);
    if (s->empty()) *s = "none";
    return s;
  }();
  return *id;
}

absl::StatusOr<SaveResult> SaveImage(const std::string& dir, kernel::Kernel& k,
                                     const fs::Vfs& vfs, const void* rootfs,
                                     const SaveOptions& opts,
                                     StageClock* clock) {
  SaveResult res;
  const int64_t t0 = ClockNs(CLOCK_MONOTONIC);
  int64_t t1 = t0;
  const std::string tmp = absl::StrCat(dir, ".tmp.", getpid());
  RETURN_IF_ERROR(RemoveTree(tmp));
  if (mkdir(tmp.c_str(), 0700) != 0) {
    return ErrnoStatus(absl::StrCat("creating ", tmp), errno);
  }
  auto fail = [&](absl::Status s) {
    (void)RemoveTree(tmp);
    return s;
  };
  absl::Status r =
      SaveFiles(ImageDir(tmp), k, vfs, rootfs, opts, clock, &res, &t1);
  if (!r.ok()) return fail(r);
  // Into place: an older image at `dir` goes first.
  const std::string old = absl::StrCat(dir, ".old.", getpid());
  const bool had = rename(dir.c_str(), old.c_str()) == 0;
  if (!had && errno != ENOENT) {
    return fail(ErrnoStatus(absl::StrCat("moving the old image ", dir), errno));
  }
  if (rename(tmp.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    if (had) rename(old.c_str(), dir.c_str());
    return fail(ErrnoStatus(absl::StrCat("renaming ", tmp, " to ", dir), err));
  }
  if (had) (void)RemoveTree(old);
  const int64_t t2 = ClockNs(CLOCK_MONOTONIC);
  if (clock != nullptr) clock->Mark(Stage::kCheckpointWrite);
  res.save_ns = t1 - t0;
  res.write_ns = t2 - t1;
  return res;
}

absl::StatusOr<SaveResult> SaveImageInto(int dir_fd, const std::string& name,
                                         kernel::Kernel& k, const fs::Vfs& vfs,
                                         const void* rootfs,
                                         const SaveOptions& opts,
                                         StageClock* clock) {
  SaveResult res;
  const ImageDir dir(dir_fd, name);
  const int64_t t0 = ClockNs(CLOCK_MONOTONIC);
  int64_t t1 = t0;
  struct stat sb;
  if (fstat(dir_fd, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the image descriptor is not a directory"));
  }
  if (UniqueFd m(OpenIn(dir, "manifest.pb", O_RDONLY)); m.valid()) {
    return absl::AlreadyExistsError(
        absl::StrCat(name, ": holds an image already (manifest.pb)"));
  }
  absl::Status r = SaveFiles(dir, k, vfs, rootfs, opts, clock, &res, &t1);
  if (!r.ok()) {
    RemoveFiles(dir);
    return r;
  }
  const int64_t t2 = ClockNs(CLOCK_MONOTONIC);
  if (clock != nullptr) clock->Mark(Stage::kCheckpointWrite);
  res.save_ns = t1 - t0;
  res.write_ns = t2 - t1;
  return res;
}

absl::StatusOr<pb::Manifest> CheckImage(const ImageDir& dir,
                                        const CheckOptions& opts) {
  const std::string mpath = dir.Path("manifest.pb");
  auto data = ReadFileIn(dir, "manifest.pb");
  if (!data.ok()) {
    return absl::NotFoundError(absl::StrCat(
        mpath, ": cannot be read (", data.status().message(),
        "): not a checkpoint image"));
  }
  ASSIGN_OR_RETURN(std::string payload,
                   Unframe(kManifestMagic, *data, mpath));
  pb::Manifest m;
  if (!m.ParseFromString(payload)) {
    return absl::DataLossError(absl::StrCat(mpath, ": malformed Manifest"));
  }
  if (m.format_version() != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        mpath, ": format_version ", m.format_version(),
        ", this Sentry reads version ", kFormatVersion));
  }
  if (m.build_id() != SentryBuildId()) {
    return absl::FailedPreconditionError(absl::StrCat(
        mpath, ": build_id ", m.build_id(),
        " is another Sentry build's (this one is ", SentryBuildId(), ")"));
  }
  if (!opts.platform.empty() && m.platform() != opts.platform) {
    return absl::FailedPreconditionError(absl::StrCat(
        mpath, ": platform ", m.platform(), ", this Sentry runs ",
        opts.platform));
  }
  if (opts.memory_limit != 0 && m.memory_bytes() > opts.memory_limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        mpath, ": memory_bytes ", m.memory_bytes(),
        " is more than the memory limit of ", opts.memory_limit));
  }
  for (const char* name : kImageFiles) {
    const pb::ImageFile* f = nullptr;
    for (const auto& e : m.files()) {
      if (e.name() == name) f = &e;
    }
    if (f == nullptr) {
      return absl::DataLossError(
          absl::StrCat(mpath, ": files has no entry for ", name));
    }
    const std::string path = dir.Path(name);
    struct stat sb;
    if (fstatat(dir.fd, dir.At(name).c_str(), &sb, 0) != 0) {
      return absl::NotFoundError(
          absl::StrCat(path, ": missing (", strerror(errno), ")"));
    }
    if (static_cast<uint64_t>(sb.st_size) != f->size()) {
      return absl::DataLossError(absl::StrCat(
          path, ": ", sb.st_size, " bytes, the manifest says ", f->size(),
          " (truncated?)"));
    }
    uint64_t size = 0;
    ASSIGN_OR_RETURN(uint32_t crc, FileCrc(dir, name, &size));
    if (crc != f->crc32c() || size != f->size()) {
      return absl::DataLossError(
          absl::StrCat(path, ": checksum mismatch against manifest.pb"));
    }
  }
  return m;
}

}  // namespace sandboxd::state
