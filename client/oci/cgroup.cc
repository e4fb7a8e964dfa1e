#include "client/oci/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace sandboxd::oci {
namespace {

bool IsDir(const std::string& p) {
  struct stat sb;
  return stat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
}

// Makes `base`/`rel` one component at a time.
absl::Status MakeUnder(const std::string& base, const std::vector<std::string>& parts,
                       bool v2) {
  std::string dir = base;
  for (const std::string& part : parts) {
    if (v2) {
      // Accounting for the child needs the controllers enabled here; a
      // parent that refuses (a process of its own in it) leaves cpu.stat,
      // which v2 always has.
      int fd = open((dir + "/cgroup.subtree_control").c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0) {
        for (const char* c : {"+cpu", "+memory", "+pids"}) (void)!write(fd, c, strlen(c));
        close(fd);
      }
    }
    dir += "/" + part;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("linux.cgroupsPath: mkdir ", dir, ": ",
                                              strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> MakeAccountingCgroups(const std::string& path,
                                                              const std::string& mount) {
  if (absl::StrContains(path, ":")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "linux.cgroupsPath: ", path,
        ": a systemd slice (--systemd-cgroup) is not made; the container has no "
        "host cgroup of its own"));
  }
  std::vector<std::string> parts;
  for (absl::string_view p : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (p == "." || p == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("linux.cgroupsPath: ", path, ": . and .. are not allowed"));
    }
    parts.emplace_back(p);
  }
  if (parts.empty()) return std::vector<std::string>{};
  const std::string rel = absl::StrJoin(parts, "/");
  std::vector<std::string> made;
  if (access((mount + "/cgroup.controllers").c_str(), F_OK) == 0) {
    RETURN_IF_ERROR(MakeUnder(mount, parts, true));
    made.push_back(absl::StrCat(mount, "/", rel));
    return made;
  }
  for (const char* h : {"cpu", "cpuacct", "memory", "pids"}) {
    const std::string base = absl::StrCat(mount, "/", h);
    if (!IsDir(base)) continue;
    // cpu and cpuacct are often one hierarchy under two names.
    const std::string dir = absl::StrCat(base, "/", rel);
    char real[PATH_MAX];
    bool seen = false;
    if (realpath(base.c_str(), real) != nullptr) {
      for (const std::string& m : made) {
        if (absl::StartsWith(m, absl::StrCat(real, "/"))) seen = true;
      }
    }
    if (seen) continue;
    RETURN_IF_ERROR(MakeUnder(base, parts, false));
    made.push_back(realpath(base.c_str(), real) != nullptr ? absl::StrCat(real, "/", rel) : dir);
  }
  return made;
}

void RemoveCgroups(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs) {
    for (int i = 0; i < 100; i++) {
      if (rmdir(d.c_str()) == 0 || errno == ENOENT) break;
      if (errno != EBUSY) break;
      usleep(10000);
    }
  }
}

}  // namespace sandboxd::oci
