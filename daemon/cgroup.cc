#include "daemon/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"

namespace sandboxd {
namespace daemon {

// One mounted hierarchy the manager uses.
struct CgroupHierarchy {
  std::string mount;                     // e.g. /sys/fs/cgroup/memory
  std::vector<std::string> controllers;  // the ones of interest it carries
};

// What Create found; shared (read-only) by the manager and its cgroups.
struct CgroupLayout {
  CgroupVersion version = CgroupVersion::kAuto;
  std::string parent;
  bool use_cgroup_kill = true;
  // v2: exactly one. v1: one per distinct mount of a controller of interest.
  std::vector<CgroupHierarchy> hierarchies;

  std::string ParentDir(const CgroupHierarchy& h) const {
    return absl::StrCat(h.mount, "/", parent);
  }
  std::string Dir(const CgroupHierarchy& h, const std::string& name) const {
    return absl::StrCat(h.mount, "/", parent, "/", name);
  }
  // The hierarchy carrying `controller`, or null.
  const CgroupHierarchy* For(absl::string_view controller) const {
    for (const CgroupHierarchy& h : hierarchies) {
      if (std::find(h.controllers.begin(), h.controllers.end(), controller) !=
          h.controllers.end()) {
        return &h;
      }
    }
    return nullptr;
  }
};

namespace {

// v1 controllers the daemon uses: limits (memory, cpu, pids), CPU time
// (cpuacct) and race-free killing (freezer).
constexpr const char* kV1Controllers[] = {"memory", "cpu", "cpuacct", "pids",
                                          "freezer"};
// v2 controllers needed for limits; cpu.stat and cgroup.freeze/kill are core
// files, present without any controller.
constexpr const char* kV2Controllers[] = {"memory", "cpu", "pids"};

// CFS period for CPU quotas: 100ms, the kernel's default.
constexpr uint64_t kCpuPeriodUs = 100000;
// The kernel refuses quotas under 1ms.
constexpr uint64_t kMinCpuQuotaUs = 1000;

// Cgroup files take one value per write(2); a short write is an error.
absl::Status WriteFile(const std::string& path, absl::string_view value) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("open ", path), errno);
  ssize_t n;
  do {
    n = write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return ErrnoStatus(absl::StrCat("write \"", value, "\" to ", path), errno);
  }
  if (static_cast<size_t>(n) != value.size()) {
    return absl::InternalError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

absl::StatusOr<uint64_t> ReadU64(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  absl::string_view v = absl::StripAsciiWhitespace(text);
  uint64_t n;
  if (!absl::SimpleAtoi(v, &n)) {
    return absl::InternalError(absl::StrCat(path, ": not a number: \"", v, "\""));
  }
  return n;
}

// The value of `key` in a "key value" per line file (cpu.stat, cpuacct.stat).
absl::StatusOr<uint64_t> ReadKeyed(const std::string& path, absl::string_view key) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(' ', 1));
    uint64_t v;
    if (kv.first == key && absl::SimpleAtoi(kv.second, &v)) return v;
  }
  return absl::NotFoundError(absl::StrCat(path, ": no \"", key, "\""));
}

// Numbers, one per line (cgroup.procs, tasks, cgroup.threads).
absl::StatusOr<std::vector<pid_t>> ReadPids(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  std::vector<pid_t> pids;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(line, &v)) {
      return absl::InternalError(absl::StrCat(path, ": bad line \"", line, "\""));
    }
    pids.push_back(v);
  }
  return pids;
}

// Undoes mountinfo's octal escapes ("\040" for a space).
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t j = 1; j <= 3; ++j) {
        char c = s[i + j];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

struct Mounts {
  std::vector<CgroupHierarchy> v1;  // controllers: the ones of interest
  std::string v2;                   // "" when no cgroup2 is mounted
};

// Finds the cgroup mounts in a mountinfo file. The first mount of each v1
// controller wins (later ones are bind mounts of the same hierarchy).
absl::StatusOr<Mounts> ParseMountinfo(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  Mounts m;
  std::set<std::string> seen;  // v1 controllers already placed
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    // id parent maj:min root mountpoint options [optional...] - fstype source superopts
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
    absl::string_view fstype = dash[1];
    std::string mountpoint = Unescape(f[4]);
    if (fstype == "cgroup2") {
      if (m.v2.empty()) m.v2 = mountpoint;
    } else if (fstype == "cgroup") {
      CgroupHierarchy h{mountpoint, {}};
      for (absl::string_view opt : absl::StrSplit(dash[3], ',')) {
        for (const char* want : kV1Controllers) {
          if (opt == want && !seen.count(want)) h.controllers.push_back(want);
        }
      }
      if (h.controllers.empty()) continue;
      for (const std::string& c : h.controllers) seen.insert(c);
      m.v1.push_back(std::move(h));
    }
  }
  return m;
}

// Controllers listed in a v2 cgroup.controllers / cgroup.subtree_control.
std::vector<std::string> ReadControllerList(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return {};
  return absl::StrSplit(absl::StripAsciiWhitespace(*text), ' ', absl::SkipEmpty());
}

bool Contains(const std::vector<std::string>& v, absl::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

absl::Status MakeDir(const std::string& path, bool* created = nullptr) {
  if (mkdir(path.c_str(), 0755) == 0) {
    if (created != nullptr) *created = true;
    return absl::OkStatus();
  }
  if (errno != EEXIST) return ErrnoStatus(absl::StrCat("mkdir ", path), errno);
  return absl::OkStatus();
}

// Turns on the controllers of interest that `dir` offers for its children;
// returns the ones that are on afterwards.
std::vector<std::string> EnableV2Controllers(const std::string& dir) {
  std::vector<std::string> offered = ReadControllerList(dir + "/cgroup.controllers");
  std::vector<std::string> enabled =
      ReadControllerList(dir + "/cgroup.subtree_control");
  for (const char* c : kV2Controllers) {
    // One write per controller, so that one refusal does not block the rest;
    // a refusal leaves that controller out (HasController says so).
    if (Contains(offered, c) && !Contains(enabled, c)) {
      (void)WriteFile(dir + "/cgroup.subtree_control", absl::StrCat("+", c));
    }
  }
  std::vector<std::string> on = ReadControllerList(dir + "/cgroup.subtree_control");
  std::vector<std::string> out;
  for (const char* c : kV2Controllers) {
    if (Contains(on, c)) out.push_back(c);
  }
  return out;
}

absl::Status ValidName(const std::string& what, const std::string& name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string::npos || name.size() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("cgroup ", what, " \"", name,
                     "\": must be one non-empty path component"));
  }
  return absl::OkStatus();
}

// rmdir that tells "still in use" apart; ENOENT is success.
absl::Status RemoveDir(const std::string& dir) {
  if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  if (errno == EBUSY || errno == ENOTEMPTY) {
    return absl::FailedPreconditionError(
        absl::StrCat("rmdir ", dir, ": still has processes or child cgroups"));
  }
  return ErrnoStatus(absl::StrCat("rmdir ", dir), errno);
}

}  // namespace

// ---------------------------------------------------------------- manager

absl::StatusOr<std::unique_ptr<CgroupManager>> CgroupManager::Create(
    const std::string& parent, const CgroupOptions& options) {
  RETURN_IF_ERROR(ValidName("parent", parent));
  absl::StatusOr<Mounts> mounts = ParseMountinfo(options.mountinfo_path);
  if (!mounts.ok()) return Annotate(mounts.status(), "cgroups: reading mounts");

  auto layout = std::make_shared<CgroupLayout>();
  layout->parent = parent;
  bool created = false;
  std::vector<std::string> v2_offered;
  if (!mounts->v2.empty()) {
    v2_offered = ReadControllerList(mounts->v2 + "/cgroup.controllers");
  }
  bool v2_complete = !mounts->v2.empty();
  for (const char* c : kV2Controllers) v2_complete &= Contains(v2_offered, c);

  CgroupVersion version = options.version;
  if (version == CgroupVersion::kAuto) {
    if (v2_complete || (mounts->v1.empty() && !mounts->v2.empty())) {
      version = CgroupVersion::kV2;
    } else if (!mounts->v1.empty()) {
      version = CgroupVersion::kV1;
    } else {
      return absl::FailedPreconditionError(absl::StrCat(
          "cgroups: no cgroup or cgroup2 mount in ", options.mountinfo_path));
    }
  }
  if (version == CgroupVersion::kV2) {
    if (mounts->v2.empty()) {
      return absl::FailedPreconditionError("cgroups: no cgroup2 hierarchy mounted");
    }
    // Children get what the parent's subtree_control enables, which needs the
    // same in every ancestor: here the hierarchy's root.
    EnableV2Controllers(mounts->v2);
    CgroupHierarchy h{mounts->v2, {}};
    RETURN_IF_ERROR(Annotate(MakeDir(layout->ParentDir(h), &created), "cgroups"));
    h.controllers = EnableV2Controllers(layout->ParentDir(h));
    layout->hierarchies.push_back(std::move(h));
  } else {
    if (mounts->v1.empty()) {
      return absl::FailedPreconditionError(
          "cgroups: no v1 hierarchy with memory, cpu, cpuacct, pids or freezer");
    }
    layout->hierarchies = mounts->v1;
    for (const CgroupHierarchy& h : layout->hierarchies) {
      RETURN_IF_ERROR(Annotate(MakeDir(layout->ParentDir(h), &created), "cgroups"));
    }
  }
  layout->version = version;
  layout->use_cgroup_kill = options.use_cgroup_kill;
  auto manager = std::unique_ptr<CgroupManager>(new CgroupManager(std::move(layout)));
  manager->created_parent_ = created;
  return manager;
}

CgroupManager::CgroupManager(std::shared_ptr<const CgroupLayout> layout)
    : layout_(std::move(layout)) {}

CgroupManager::~CgroupManager() = default;

CgroupVersion CgroupManager::version() const { return layout_->version; }

const std::string& CgroupManager::parent() const { return layout_->parent; }

bool CgroupManager::created_parent() const { return created_parent_; }

bool CgroupManager::HasController(const std::string& controller) const {
  return layout_->For(controller) != nullptr;
}

std::string CgroupManager::Describe() const {
  const CgroupLayout& l = *layout_;
  std::vector<std::string> controllers;
  std::vector<std::string> dirs;
  for (const CgroupHierarchy& h : l.hierarchies) {
    controllers.insert(controllers.end(), h.controllers.begin(), h.controllers.end());
    dirs.push_back(l.ParentDir(h));
  }
  std::string where = absl::StrJoin(dirs, ", ");
  if (l.version == CgroupVersion::kV1) {
    // v1 mounts normally sit side by side: say /sys/fs/cgroup/*/<parent>.
    const std::string& first = l.hierarchies[0].mount;
    std::string base = first.substr(0, first.rfind('/') + 1);
    bool siblings = std::all_of(
        l.hierarchies.begin(), l.hierarchies.end(), [&](const CgroupHierarchy& h) {
          return absl::StartsWith(h.mount, base) &&
                 h.mount.find('/', base.size()) == std::string::npos;
        });
    if (siblings && l.hierarchies.size() > 1) where = absl::StrCat(base, "*/", l.parent);
  }
  return absl::StrCat(
      l.version == CgroupVersion::kV1 ? "v1" : "v2", " (",
      controllers.empty() ? "no controllers" : absl::StrJoin(controllers, ","), " at ",
      where, ")");
}

absl::StatusOr<std::unique_ptr<Cgroup>> CgroupManager::New(const std::string& name) {
  RETURN_IF_ERROR(ValidName("name", name));
  std::vector<std::string> made;
  for (const CgroupHierarchy& h : layout_->hierarchies) {
    std::string dir = layout_->Dir(h, name);
    int made_now = mkdir(dir.c_str(), 0755);
    if (made_now != 0 && errno == ENOENT) {
      // The parent went while this daemon ran (removed by hand, or by
      // another daemon that made it): made again, as at Create.
      const std::string parent = layout_->ParentDir(h);
      bool parent_made = false;
      if (MakeDir(parent, &parent_made).ok()) {
        if (parent_made && on_parent_made_) on_parent_made_();
        if (layout_->version == CgroupVersion::kV2) EnableV2Controllers(parent);
        made_now = mkdir(dir.c_str(), 0755);
      }
    }
    if (made_now != 0) {
      int err = errno;
      for (const std::string& d : made) rmdir(d.c_str());
      if (err == EEXIST) {
        return absl::AlreadyExistsError(absl::StrCat("cgroup ", dir, " already exists"));
      }
      return ErrnoStatus(absl::StrCat("cgroup: mkdir ", dir), err);
    }
    made.push_back(dir);
  }
  return std::unique_ptr<Cgroup>(new Cgroup(layout_, name));
}

absl::StatusOr<std::unique_ptr<Cgroup>> CgroupManager::Open(const std::string& name) {
  RETURN_IF_ERROR(ValidName("name", name));
  for (const CgroupHierarchy& h : layout_->hierarchies) {
    struct stat st;
    if (stat(layout_->Dir(h, name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      return std::unique_ptr<Cgroup>(new Cgroup(layout_, name));
    }
  }
  return absl::NotFoundError(absl::StrCat("cgroup ", name, " is not under ", layout_->parent));
}

absl::Status CgroupManager::CleanupStale() {
  // Union of the names in every hierarchy: a crash may have left a cgroup in
  // some hierarchies only.
  std::set<std::string> names;
  for (const CgroupHierarchy& h : layout_->hierarchies) {
    std::string dir = layout_->ParentDir(h);
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus(absl::StrCat("cgroups: opendir ", dir), errno);
    while (struct dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (e->d_type == DT_DIR && n != "." && n != "..") names.insert(n);
    }
    closedir(d);
  }
  absl::Status result;
  for (const std::string& n : names) {
    Cgroup stale(layout_, n);
    absl::Status s = stale.KillAll();
    if (s.ok()) s = stale.Remove();
    if (!s.ok() && result.ok()) {
      result = Annotate(s, absl::StrCat("cgroups: cleaning up stale cgroup ", n));
    }
    stale.removed_ = true;  // tried once; the destructor must not retry
  }
  return result;
}

absl::Status CgroupManager::RemoveParent() {
  for (const CgroupHierarchy& h : layout_->hierarchies) {
    RETURN_IF_ERROR(Annotate(RemoveDir(layout_->ParentDir(h)), "cgroups"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- cgroup

Cgroup::Cgroup(std::shared_ptr<const CgroupLayout> layout, std::string name)
    : layout_(std::move(layout)), name_(std::move(name)) {}

Cgroup::~Cgroup() {
  if (removed_) return;
  absl::Status s = KillAll();
  if (s.ok()) s = Remove();
  if (!s.ok()) std::fprintf(stderr, "sandboxd: %s\n", s.ToString().c_str());
}

absl::Status Cgroup::AddProcess(pid_t pid) {
  if (pid <= 0) {
    // Writing 0 to cgroup.procs would move the daemon itself.
    return absl::InvalidArgumentError(
        absl::StrCat("cgroup ", name_, ": adding pid ", pid, ": not a process id"));
  }
  for (const CgroupHierarchy& h : layout_->hierarchies) {
    std::string path = layout_->Dir(h, name_) + "/cgroup.procs";
    absl::Status s = WriteFile(path, absl::StrCat(pid));
    if (!s.ok()) return Annotate(s, absl::StrCat("cgroup ", name_, ": adding pid ", pid));
  }
  return absl::OkStatus();
}

namespace {

absl::Status NeedController(const CgroupLayout& l, const char* controller,
                            uint64_t value) {
  if (value != 0 && l.For(controller) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the ", controller, " controller is not available in this host's cgroup ",
        l.version == CgroupVersion::kV1 ? "v1 hierarchies" : "v2 hierarchy"));
  }
  return absl::OkStatus();
}

absl::Status SetMemoryV1(const std::string& dir, uint64_t bytes) {
  std::string value = bytes == 0 ? "-1" : absl::StrCat(bytes);
  std::string limit = dir + "/memory.limit_in_bytes";
  std::string memsw = dir + "/memory.memsw.limit_in_bytes";
  if (!Exists(memsw)) return WriteFile(limit, value);
  // memsw (memory + swap; set equal so that swap does not extend the limit)
  // must stay >= the memory limit at every step: lower the memory limit
  // first when shrinking, raise memsw first when growing.
  if (WriteFile(limit, value).ok()) return WriteFile(memsw, value);
  RETURN_IF_ERROR(WriteFile(memsw, value));
  return WriteFile(limit, value);
}

}  // namespace

absl::Status Cgroup::SetLimits(const CgroupLimits& limits) {
  const CgroupLayout& l = *layout_;
  auto annotate = [&](absl::Status s) {
    return Annotate(s, absl::StrCat("cgroup ", name_, ": setting limits"));
  };
  RETURN_IF_ERROR(annotate(NeedController(l, "memory", limits.memory_bytes)));
  RETURN_IF_ERROR(annotate(NeedController(l, "cpu", limits.cpu_millis)));
  RETURN_IF_ERROR(annotate(NeedController(l, "pids", limits.pids)));
  uint64_t quota_us = limits.cpu_millis * (kCpuPeriodUs / 1000);
  if (limits.cpu_millis != 0 && quota_us < kMinCpuQuotaUs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu limit of ", limits.cpu_millis, " milli-CPUs is below the minimum of ",
        kMinCpuQuotaUs * 1000 / kCpuPeriodUs));
  }
  bool v2 = l.version == CgroupVersion::kV2;

  if (const CgroupHierarchy* h = l.For("memory")) {
    std::string dir = l.Dir(*h, name_);
    if (v2) {
      std::string v = limits.memory_bytes == 0 ? "max" : absl::StrCat(limits.memory_bytes);
      RETURN_IF_ERROR(annotate(WriteFile(dir + "/memory.max", v)));
      // As with memsw on v1: the limit covers swap too.
      if (Exists(dir + "/memory.swap.max")) {
        RETURN_IF_ERROR(annotate(WriteFile(dir + "/memory.swap.max",
                                           limits.memory_bytes == 0 ? "max" : "0")));
      }
    } else {
      RETURN_IF_ERROR(annotate(SetMemoryV1(dir, limits.memory_bytes)));
    }
  }
  if (const CgroupHierarchy* h = l.For("cpu")) {
    std::string dir = l.Dir(*h, name_);
    if (v2) {
      std::string quota = limits.cpu_millis == 0 ? "max" : absl::StrCat(quota_us);
      RETURN_IF_ERROR(annotate(
          WriteFile(dir + "/cpu.max", absl::StrCat(quota, " ", kCpuPeriodUs))));
    } else {
      RETURN_IF_ERROR(
          annotate(WriteFile(dir + "/cpu.cfs_period_us", absl::StrCat(kCpuPeriodUs))));
      RETURN_IF_ERROR(annotate(WriteFile(
          dir + "/cpu.cfs_quota_us",
          limits.cpu_millis == 0 ? std::string("-1") : absl::StrCat(quota_us))));
    }
  }
  if (const CgroupHierarchy* h = l.For("pids")) {
    std::string v = limits.pids == 0 ? "max" : absl::StrCat(limits.pids);
    RETURN_IF_ERROR(annotate(WriteFile(l.Dir(*h, name_) + "/pids.max", v)));
  }
  return absl::OkStatus();
}

absl::Status Cgroup::SetCpuWeight(uint32_t weight) {
  const CgroupLayout& l = *layout_;
  const CgroupHierarchy* h = l.For("cpu");
  if (h == nullptr) return absl::OkStatus();
  weight = std::clamp<uint32_t>(weight, 1, 10000);
  const std::string dir = l.Dir(*h, name_);
  absl::Status s =
      l.version == CgroupVersion::kV2
          ? WriteFile(dir + "/cpu.weight", absl::StrCat(weight))
          // cpu.shares' minimum is 2; 1024 is its default.
          : WriteFile(dir + "/cpu.shares", absl::StrCat(std::max<uint32_t>(2, weight * 1024 / 100)));
  return Annotate(s, absl::StrCat("cgroup ", name_, ": setting the cpu weight"));
}

namespace {

absl::StatusOr<CgroupUsage> ReadUsage(const CgroupLayout& l, const std::string& name) {
  bool v2 = l.version == CgroupVersion::kV2;
  CgroupUsage u;

  if (const CgroupHierarchy* h = l.For("memory")) {
    std::string dir = l.Dir(*h, name);
    ASSIGN_OR_RETURN(u.memory_bytes,
                     ReadU64(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes")));
    // memory.peak is Linux 5.19+; older kernels have no v2 high-water mark.
    std::string peak = dir + (v2 ? "/memory.peak" : "/memory.max_usage_in_bytes");
    if (Exists(peak)) {
      ASSIGN_OR_RETURN(u.memory_peak_bytes, ReadU64(peak));
    }
    u.memory_peak_bytes = std::max(u.memory_peak_bytes, u.memory_bytes);
  }

  if (v2) {
    // cpu.stat's usage fields exist with or without the cpu controller.
    std::string stat = l.Dir(l.hierarchies[0], name) + "/cpu.stat";
    ASSIGN_OR_RETURN(uint64_t user_us, ReadKeyed(stat, "user_usec"));
    ASSIGN_OR_RETURN(uint64_t system_us, ReadKeyed(stat, "system_usec"));
    u.cpu_user = absl::Microseconds(user_us);
    u.cpu_system = absl::Microseconds(system_us);
  } else if (const CgroupHierarchy* h = l.For("cpuacct")) {
    std::string dir = l.Dir(*h, name);
    if (Exists(dir + "/cpuacct.usage_user")) {
      ASSIGN_OR_RETURN(uint64_t user_ns, ReadU64(dir + "/cpuacct.usage_user"));
      ASSIGN_OR_RETURN(uint64_t sys_ns, ReadU64(dir + "/cpuacct.usage_sys"));
      u.cpu_user = absl::Nanoseconds(user_ns);
      u.cpu_system = absl::Nanoseconds(sys_ns);
    } else {
      // Kernels before 4.4: clock ticks only.
      double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
      ASSIGN_OR_RETURN(uint64_t user, ReadKeyed(dir + "/cpuacct.stat", "user"));
      ASSIGN_OR_RETURN(uint64_t sys, ReadKeyed(dir + "/cpuacct.stat", "system"));
      u.cpu_user = absl::Seconds(static_cast<double>(user) / hz);
      u.cpu_system = absl::Seconds(static_cast<double>(sys) / hz);
    }
  }

  if (const CgroupHierarchy* h = l.For("pids")) {
    ASSIGN_OR_RETURN(uint64_t n, ReadU64(l.Dir(*h, name) + "/pids.current"));
    u.pids = static_cast<uint32_t>(n);
  } else {
    // Without the pids controller: count the threads.
    std::string tasks =
        l.Dir(l.hierarchies[0], name) + (v2 ? "/cgroup.threads" : "/tasks");
    ASSIGN_OR_RETURN(std::vector<pid_t> tids, ReadPids(tasks));
    u.pids = static_cast<uint32_t>(tids.size());
  }
  return u;
}

}  // namespace

absl::StatusOr<CgroupUsage> Cgroup::Usage() const {
  absl::StatusOr<CgroupUsage> u = ReadUsage(*layout_, name_);
  if (!u.ok()) return Annotate(u.status(), absl::StrCat("cgroup ", name_, ": usage"));
  return u;
}

absl::StatusOr<std::vector<pid_t>> Cgroup::Procs() const {
  // The union over the hierarchies: on v1 a process may have been moved out
  // of some of them by someone else, and it still belongs to the sandbox.
  std::set<pid_t> all;
  for (const CgroupHierarchy& h : layout_->hierarchies) {
    absl::StatusOr<std::vector<pid_t>> pids =
        ReadPids(layout_->Dir(h, name_) + "/cgroup.procs");
    if (!pids.ok()) {
      // A half-created or half-removed cgroup (crash, CleanupStale) has
      // directories in some hierarchies only.
      if (pids.status().code() == absl::StatusCode::kNotFound) continue;
      return Annotate(pids.status(), absl::StrCat("cgroup ", name_));
    }
    all.insert(pids->begin(), pids->end());
  }
  return std::vector<pid_t>(all.begin(), all.end());
}

namespace {

// Polls `done` every few milliseconds until it holds or `deadline` passes.
template <typename F>
absl::StatusOr<bool> WaitFor(absl::Time deadline, F done) {
  absl::Duration pause = absl::Microseconds(500);
  for (;;) {
    ASSIGN_OR_RETURN(bool d, done());
    if (d) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(20));
  }
}

}  // namespace

absl::Status Cgroup::KillAll(absl::Duration timeout) {
  const CgroupLayout& l = *layout_;
  absl::Time deadline = absl::Now() + timeout;
  auto annotate = [&](absl::Status s) {
    return Annotate(s, absl::StrCat("cgroup ", name_, ": killing its processes"));
  };
  auto empty = [&]() -> absl::StatusOr<bool> {
    ASSIGN_OR_RETURN(std::vector<pid_t> pids, Procs());
    return pids.empty();
  };

  bool v2 = l.version == CgroupVersion::kV2;
  std::string v2_dir = v2 ? l.Dir(l.hierarchies[0], name_) : "";
  if (v2 && l.use_cgroup_kill && Exists(v2_dir + "/cgroup.kill")) {
    // Linux 5.14+: the kernel kills every process, forks included, at once.
    absl::Status s = WriteFile(v2_dir + "/cgroup.kill", "1");
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) return annotate(s);
  } else {
    // Freeze, kill what is in it, thaw, until empty: a frozen process can
    // neither fork nor exit, so the pids read are stable (none is reused by
    // an unrelated process) and none is missed. Without a freezer the loop
    // still converges, only with that small race.
    std::string freeze_file, frozen_value, thawed_value;
    if (v2) {
      freeze_file = v2_dir + "/cgroup.freeze";
      frozen_value = "1";
      thawed_value = "0";
    } else if (const CgroupHierarchy* h = l.For("freezer")) {
      freeze_file = l.Dir(*h, name_) + "/freezer.state";
      frozen_value = "FROZEN";
      thawed_value = "THAWED";
    }
    bool can_freeze = !freeze_file.empty() && Exists(freeze_file);
    for (;;) {
      absl::StatusOr<bool> is_empty = empty();
      if (!is_empty.ok()) return annotate(is_empty.status());
      if (*is_empty || absl::Now() >= deadline) break;
      if (can_freeze) {
        RETURN_IF_ERROR(annotate(WriteFile(freeze_file, frozen_value)));
        // Freezing is asynchronous: wait until every task is frozen (or give
        // up after a moment and kill anyway; the next round catches the rest).
        (void)WaitFor(std::min(deadline, absl::Now() + absl::Milliseconds(500)),
                      [&]() -> absl::StatusOr<bool> {
                        // v1: freezer.state goes FREEZING -> FROZEN;
                        // v2: cgroup.events says "frozen 1".
                        if (!v2) {
                          ASSIGN_OR_RETURN(std::string st, ReadWholeFile(freeze_file));
                          return absl::StripAsciiWhitespace(st) == "FROZEN";
                        }
                        ASSIGN_OR_RETURN(uint64_t f,
                                         ReadKeyed(v2_dir + "/cgroup.events", "frozen"));
                        return f == 1;
                      });
      }
      absl::StatusOr<std::vector<pid_t>> pids = Procs();
      for (pid_t pid : pids.ok() ? *pids : std::vector<pid_t>{}) {
        // 0 stands for a process outside our pid namespace, and kill(0)
        // would hit our own process group.
        if (pid > 0) kill(pid, SIGKILL);  // ESRCH: already gone
      }
      // Thaw even when the read failed: a cgroup must not stay frozen.
      if (can_freeze) RETURN_IF_ERROR(annotate(WriteFile(freeze_file, thawed_value)));
      if (!pids.ok()) return annotate(pids.status());
      (void)WaitFor(std::min(deadline, absl::Now() + absl::Milliseconds(100)), empty);
    }
  }
  ASSIGN_OR_RETURN(bool done, WaitFor(deadline, empty));
  if (!done) {
    ASSIGN_OR_RETURN(std::vector<pid_t> left, Procs());
    if (left.empty()) return absl::OkStatus();  // emptied just now
    return absl::DeadlineExceededError(
        absl::StrCat("cgroup ", name_, ": ", left.size(),
                     " process(es) still alive after SIGKILL and ",
                     absl::FormatDuration(timeout), ", e.g. pid ", left[0]));
  }
  return absl::OkStatus();
}

absl::Status Cgroup::Remove() {
  for (const CgroupHierarchy& h : layout_->hierarchies) {
    RETURN_IF_ERROR(
        Annotate(RemoveDir(layout_->Dir(h, name_)), absl::StrCat("cgroup ", name_)));
  }
  removed_ = true;
  return absl::OkStatus();
}

}  // namespace daemon
}  // namespace sandboxd
