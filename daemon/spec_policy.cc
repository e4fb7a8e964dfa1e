#include "daemon/spec_policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/nsfs.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "proto/mount_spec.h"

namespace sandboxd {
namespace daemon {
namespace {

// "MemTotal:  4028428 kB" -> bytes; 0 when absent.
uint64_t MeminfoBytes(const std::string& meminfo, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) {
      continue;
    }
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t kb = 0;
    if (!f.empty() && absl::SimpleAtoi(f[0], &kb)) return kb * 1024;
  }
  return 0;
}

uint64_t ReadProcU64(const std::string& path, uint64_t fallback) {
  absl::StatusOr<std::string> s = ReadWholeFile(path);
  uint64_t v = 0;
  if (!s.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*s), &v)) {
    return fallback;
  }
  return v;
}

// Whole MiB, rounded down (the ranges are MiB-sized either way).
std::string Mib(uint64_t bytes) {
  if (bytes < (1 << 20)) return absl::StrCat(bytes, " bytes");
  return absl::StrCat(bytes >> 20, " MiB");
}

absl::Status Range(const std::string& field, uint64_t v, uint64_t lo,
                   uint64_t hi, const std::string& what, std::string lo_s,
                   std::string hi_s) {
  if (v == 0 || (v >= lo && v <= hi)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": ", what, " must be 0 (no limit) or from ", lo_s,
                   " to ", hi_s, " on this host, got ", v));
}

// The path of what `fd` is (after symlinks and ".."), from /proc.
absl::StatusOr<std::string> FdPath(int fd) {
  char buf[4096];
  std::string link = absl::StrCat("/proc/self/fd/", fd);
  ssize_t n = readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return ErrnoStatus(absl::StrCat("readlink ", link), errno);
  return std::string(buf, static_cast<size_t>(n));
}

bool Under(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root ||
         (path.size() > root.size() &&
          path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

}  // namespace

HostRanges HostRanges::Read() {
  HostRanges r;
  absl::StatusOr<std::string> meminfo = ReadWholeFile("/proc/meminfo");
  if (meminfo.ok()) {
    r.max_memory_bytes = MeminfoBytes(*meminfo, "MemTotal") +
                         MeminfoBytes(*meminfo, "SwapTotal");
  }
  if (r.max_memory_bytes == 0) r.max_memory_bytes = UINT64_MAX;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  r.max_cpu_millis = static_cast<uint64_t>(std::max(1L, cpus)) * 1000;
  r.max_pids = std::min(ReadProcU64("/proc/sys/kernel/pid_max", 4194304),
                        ReadProcU64("/proc/sys/kernel/threads-max", 4194304));
  return r;
}

absl::Status ValidateLimits(const v1::Limits& limits, const HostRanges& r,
                            const std::string& field) {
  RETURN_IF_ERROR(Range(
      absl::StrCat(field, ".memory_bytes"), limits.memory_bytes(),
      r.min_memory_bytes, r.max_memory_bytes,
      "the memory limit (it covers the Sentry too)", Mib(r.min_memory_bytes),
      absl::StrCat(Mib(r.max_memory_bytes), " (memory + swap)")));
  RETURN_IF_ERROR(Range(
      absl::StrCat(field, ".cpu_millis"), limits.cpu_millis(), r.min_cpu_millis,
      r.max_cpu_millis, "the CPU limit in milli-CPUs",
      absl::StrCat(r.min_cpu_millis, " (the kernel's 1 ms quota per 100 ms)"),
      absl::StrCat(r.max_cpu_millis, " (", r.max_cpu_millis / 1000,
                   " online CPUs)")));
  RETURN_IF_ERROR(
      Range(absl::StrCat(field, ".pids"), limits.pids(), r.min_pids, r.max_pids,
            "the task limit", absl::StrCat(r.min_pids),
            absl::StrCat(r.max_pids, " (kernel pid_max / threads-max)")));
  return absl::OkStatus();
}

absl::Status ValidateLabels(const v1::SandboxSpec& spec) {
  if (spec.labels_size() > static_cast<int>(kMaxLabels)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.labels: at most ",
                                                   kMaxLabels, " labels, got ",
                                                   spec.labels_size()));
  }
  for (const auto& [k, v] : spec.labels()) {
    if (k.empty() || k.size() > kMaxLabelKey) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.labels: a key must be 1 to ", kMaxLabelKey,
                       " bytes, got one of ", k.size()));
    }
    for (char c : k) {
      if (c < 0x21 || c > 0x7e || c == '=') {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec.labels: key \"", absl::CHexEscape(k.substr(0, 64)),
            "\": want printable ASCII without spaces or '='"));
      }
    }
    if (v.size() > kMaxLabelValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.labels[", k, "]: a value must be at most ",
                       kMaxLabelValue, " bytes, got ", v.size()));
    }
    if (v.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.labels[", k, "]: a value must not contain NUL"));
    }
  }
  return absl::OkStatus();
}

void ApplyDefaultLimits(const SpecPolicy& p, v1::Limits* limits) {
  if (limits->memory_bytes() == 0)
    limits->set_memory_bytes(p.default_memory_bytes);
  if (limits->cpu_millis() == 0) limits->set_cpu_millis(p.default_cpu_millis);
  if (limits->pids() == 0) limits->set_pids(p.default_pids);
}

absl::StatusOr<std::vector<UniqueFd>> OpenBindMounts(
    const SpecPolicy& p, const v1::SandboxSpec& spec) {
  std::vector<UniqueFd> out;
  for (int i = 0; i < spec.mounts_size(); i++) {
    const v1::Mount& m = spec.mounts(i);
    const std::string field = absl::StrCat("spec.mounts[", i, "]");
    if (m.target().empty() || m.target()[0] != '/' || m.target() == "/") {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".target: an absolute path other than /, got \"", m.target(),
          "\""));
    }
    if (m.type() == v1::Mount::TYPE_TMPFS) {
      if (!m.source().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".source: a tmpfs mount has none"));
      }
      continue;
    }
    if (m.type() != v1::Mount::TYPE_BIND) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".type: TYPE_BIND or TYPE_TMPFS"));
    }
    if (!m.options().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".options: only for TYPE_TMPFS"));
    }
    ASSIGN_OR_RETURN(UniqueFd fd, OpenBindSource(m, field));
    if (!p.allowed_roots.empty()) {
      ASSIGN_OR_RETURN(std::string real, FdPath(fd.get()));
      bool ok = false;
      for (const std::string& root : p.allowed_roots) {
        UniqueFd rfd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!rfd.valid()) continue;
        absl::StatusOr<std::string> rreal = FdPath(rfd.get());
        if (rreal.ok() && Under(real, *rreal)) ok = true;
      }
      if (!ok) {
        return absl::PermissionDeniedError(absl::StrCat(
            field, ".source: ", m.source(),
            " is not below a directory this daemon allows (--allowed-roots=",
            absl::StrJoin(p.allowed_roots, ","), ")"));
      }
    }
    out.push_back(std::move(fd));
  }
  return out;
}

absl::StatusOr<UniqueFd> OpenRootfs(const SpecPolicy& p,
                                    v1::SandboxSpec* spec) {
  if (spec->rootfs().empty()) {
    if (p.default_rootfs.empty()) {
      return absl::InvalidArgumentError(
          "spec.rootfs: this daemon has no default rootfs (--default-rootfs); "
          "name a host directory");
    }
    UniqueFd fd(
        open(p.default_rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "spec.rootfs: the daemon's default rootfs ", p.default_rootfs, ": ",
          strerror(errno), " (tools/build_rootfs.sh builds it; or name one)"));
    }
    spec->set_rootfs(p.default_rootfs);
    return fd;
  }
  if (spec->rootfs()[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.rootfs: must be an absolute host path, got \"",
                     spec->rootfs(), "\""));
  }
  UniqueFd fd(open(spec->rootfs().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.rootfs: ", spec->rootfs(), ": ", strerror(errno)));
  }
  if (p.allowed_roots.empty()) return fd;
  ASSIGN_OR_RETURN(std::string real, FdPath(fd.get()));
  std::vector<std::string> allowed = p.allowed_roots;
  if (!p.default_rootfs.empty()) allowed.push_back(p.default_rootfs);
  for (const std::string& root : allowed) {
    // The allowed directory as it resolves now (symlinks, "..").
    UniqueFd rfd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!rfd.valid()) continue;
    absl::StatusOr<std::string> rreal = FdPath(rfd.get());
    if (rreal.ok() && Under(real, *rreal)) return fd;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "spec.rootfs: ", spec->rootfs(),
      " is not one of the directories this "
      "daemon allows (--allowed-roots=",
      absl::StrJoin(p.allowed_roots, ","), ", and the default rootfs)"));
}

absl::Status CheckCheckpointRoot(const SpecPolicy& p, int fd,
                                 const std::string& field,
                                 const std::string& path) {
  if (p.checkpoint_roots.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string real, FdPath(fd));
  for (const std::string& root : p.checkpoint_roots) {
    UniqueFd rfd(open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!rfd.valid()) continue;
    absl::StatusOr<std::string> rreal = FdPath(rfd.get());
    if (rreal.ok() && Under(real, *rreal)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      field, ": ", path,
      " is not one of the directories where this daemon lets checkpoints "
      "be written (--checkpoint-roots=",
      absl::StrJoin(p.checkpoint_roots, ","), ")"));
}

absl::Status CheckCheckpointTarget(const SpecPolicy& p, const std::string& field,
                                   const std::string& path) {
  if (p.checkpoint_roots.empty()) return absl::OkStatus();
  UniqueFd fd(open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (fd.valid()) return CheckCheckpointRoot(p, fd.get(), field, path);
  // To be made: where its parent is.
  const size_t slash = path.find_last_of('/');
  const std::string parent = slash == 0 ? "/" : path.substr(0, slash);
  UniqueFd pfd(open(parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!pfd.valid()) return absl::OkStatus();  // the mkdir says why
  return CheckCheckpointRoot(p, pfd.get(), field, path);
}

absl::StatusOr<UniqueFd> OpenNetworkNamespace(const v1::SandboxSpec& spec) {
  const std::string& path = spec.network_namespace();
  if (path.empty()) return UniqueFd();
  const std::string field = "spec.network_namespace";
  auto bad = [&field](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
  };
  if (path[0] != '/') return bad(absl::StrCat("an absolute path, got \"", path, "\""));
  if (spec.network() != v1::NETWORK_MODE_UNSPECIFIED &&
      spec.network() != v1::NETWORK_MODE_NONE) {
    return bad(absl::StrCat(
        "the sandbox's network is that namespace: not with network ",
        absl::AsciiStrToLower(
            absl::StripPrefix(v1::NetworkMode_Name(spec.network()), "NETWORK_MODE_"))));
  }
  if (spec.ports_size() > 0) return bad("not with published ports (spec.ports)");
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return bad(absl::StrCat(path, ": ", strerror(errno)));
  struct statfs fs;
  if (fstatfs(fd.get(), &fs) != 0) return bad(absl::StrCat(path, ": fstatfs: ", strerror(errno)));
  if (fs.f_type != NSFS_MAGIC) return bad(absl::StrCat(path, ": not a namespace file (nsfs)"));
  const int type = ioctl(fd.get(), NS_GET_NSTYPE);
  if (type != CLONE_NEWNET) {
    return bad(absl::StrCat(path, ": not a network namespace",
                            type < 0 ? absl::StrCat(" (NS_GET_NSTYPE: ", strerror(errno), ")")
                                     : std::string()));
  }
  return fd;
}

absl::StatusOr<UniqueFd> OpenCheckpointDir(const SpecPolicy& p,
                                           const v1::SandboxSpec& spec) {
  const std::string& dir = spec.checkpoint_dir();
  if (dir.empty()) {
    if (spec.checkpoint_limit() != 0) {
      return absl::InvalidArgumentError(
          "spec.checkpoint_limit: needs spec.checkpoint_dir");
    }
    return UniqueFd();
  }
  if (dir[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.checkpoint_dir: must be an absolute host path, got \"", dir, "\""));
  }
  if (spec.checkpoint_limit() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.checkpoint_limit: at most 1024, got ",
                     spec.checkpoint_limit()));
  }
  RETURN_IF_ERROR(CheckCheckpointTarget(p, "spec.checkpoint_dir", dir));
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.checkpoint_dir: creating ", dir, ": ", strerror(errno)));
  }
  UniqueFd fd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.checkpoint_dir: ", dir, ": ", strerror(errno)));
  }
  RETURN_IF_ERROR(CheckCheckpointRoot(p, fd.get(), "spec.checkpoint_dir", dir));
  return fd;
}

namespace {

// `path` looked up inside the rootfs `root` as the sandbox would see it:
// absolute symlinks and ".." stay inside. 0 or an errno.
int StatInRoot(int root, const std::string& path, struct stat* st) {
  std::string rel = path;
  while (!rel.empty() && rel[0] == '/') rel.erase(0, 1);
  if (rel.empty()) rel = ".";
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  int fd;
  do {
    fd = static_cast<int>(syscall(SYS_openat2, root, rel.c_str(), &how, sizeof(how)));
  } while (fd < 0 && errno == EAGAIN);
  if (fd < 0) return errno;
  const int r = fstat(fd, st) == 0 ? 0 : errno;
  close(fd);
  return r;
}

// What the Sentry mounts over the rootfs: a path there is not judged here.
bool SentryMounted(const std::string& path) {
  for (const char* m : {"/proc", "/dev", "/sys"}) {
    if (path == m || absl::StartsWith(path, absl::StrCat(m, "/"))) return true;
  }
  return false;
}

}  // namespace

absl::Status CheckProcessInRootfs(int rootfs, const v1::ProcessSpec& process,
                                  const std::string& field) {
  const std::string cwd = process.cwd().empty() ? "/" : process.cwd();
  struct stat st;
  if (!SentryMounted(cwd)) {
    const int r = StatInRoot(rootfs, cwd, &st);
    if (r == ENOENT) {
      return absl::FailedPreconditionError(absl::StrCat(
          field, ".cwd: \"", cwd, "\" does not exist in the sandbox's rootfs"));
    }
    if (r == ENOTDIR || (r == 0 && !S_ISDIR(st.st_mode))) {
      return absl::FailedPreconditionError(absl::StrCat(
          field, ".cwd: \"", cwd, "\" is not a directory in the sandbox's rootfs"));
    }
  }
  if (process.argv_size() == 0) return absl::OkStatus();
  const std::string& prog = process.argv(0);
  std::vector<std::string> candidates;
  std::string search;
  if (prog.find('/') != std::string::npos) {
    candidates.push_back(prog[0] == '/' ? prog : absl::StrCat(cwd, "/", prog));
  } else {
    for (const std::string& e : process.env()) {
      if (absl::StartsWith(e, "PATH=")) search = e.substr(5);
    }
    if (search.empty()) search = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    for (absl::string_view dir : absl::StrSplit(search, ':', absl::SkipEmpty())) {
      // A relative PATH entry is the cwd's.
      candidates.push_back(dir[0] == '/' ? absl::StrCat(dir, "/", prog)
                                         : absl::StrCat(cwd, "/", dir, "/", prog));
    }
  }
  bool not_executable = false;
  for (const std::string& c : candidates) {
    if (SentryMounted(c)) return absl::OkStatus();
    const int r = StatInRoot(rootfs, c, &st);
    if (r == ENOENT || r == ENOTDIR) continue;
    if (r != 0) return absl::OkStatus();  // the start says what it is
    if (S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0) return absl::OkStatus();
    not_executable = true;
  }
  if (not_executable) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ".argv[0]: \"", prog, "\" is not an executable file in the sandbox's rootfs"));
  }
  return absl::NotFoundError(absl::StrCat(
      field, ".argv[0]: \"", prog, "\" not found in the sandbox's rootfs",
      search.empty() ? "" : absl::StrCat(" (searched PATH=", search, ")")));
}

absl::StatusOr<uint64_t> ParseByteSize(const std::string& s) {
  absl::string_view v = s;
  uint64_t mult = 1;
  if (!v.empty()) {
    switch (absl::ascii_tolower(v.back())) {
      case 'k':
        mult = 1ull << 10;
        break;
      case 'm':
        mult = 1ull << 20;
        break;
      case 'g':
        mult = 1ull << 30;
        break;
      case 't':
        mult = 1ull << 40;
        break;
      default:
        break;
    }
    if (mult != 1) v.remove_suffix(1);
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n > UINT64_MAX / mult) {
    return absl::InvalidArgumentError(
        absl::StrCat("want BYTES[k|m|g|t], got \"", s, "\""));
  }
  return n * mult;
}

}  // namespace daemon
}  // namespace sandboxd
