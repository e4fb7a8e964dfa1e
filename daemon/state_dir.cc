#include "daemon/state_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace sandboxd {
namespace daemon {
namespace {

absl::Status MkdirP(const std::string& path) {
  std::string cur;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&cur, "/", part);
    if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoStatus(absl::StrCat("creating ", cur), errno);
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ProcessStartTime(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: fields are
  // counted after its closing parenthesis.
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
  // After ")": field 3 (state) is index 0, so field 22 is index 19.
  return fields.size() > 19 ? fields[19] : "";
}

absl::StatusOr<std::unique_ptr<StateDir>> StateDir::Open(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-dir must be an absolute path, got \"", path, "\""));
  }
  RETURN_IF_ERROR(MkdirP(path + "/sentries"));
  const std::string lock_path = path + "/lock";
  UniqueFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) return ErrnoStatus(absl::StrCat("opening ", lock_path), errno);
  if (flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state directory ", path, " is in use by another running sandboxd"));
    }
    return ErrnoStatus(absl::StrCat("locking ", lock_path), errno);
  }
  return std::unique_ptr<StateDir>(new StateDir(path, std::move(lock)));
}

std::string StateDir::SentryFile(pid_t pid) const {
  return absl::StrCat(path_, "/sentries/", pid);
}

int StateDir::KillStale() {
  const std::string dir = path_ + "/sentries";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(d);
  int killed = 0;
  for (const std::string& name : names) {
    int pid = 0;
    const std::string file = dir + "/" + name;
    std::ifstream f(file);
    std::string recorded;
    std::getline(f, recorded);
    if (absl::SimpleAtoi(name, &pid) && pid > 1 && !recorded.empty() &&
        ProcessStartTime(pid) == recorded) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      killed++;
    }
    unlink(file.c_str());
  }
  return killed;
}

absl::Status StateDir::Record(pid_t pid) {
  const std::string start = ProcessStartTime(pid);
  if (start.empty()) {
    return absl::UnavailableError(absl::StrCat("sentry pid ", pid, " is gone"));
  }
  const std::string file = SentryFile(pid);
  std::ofstream f(file, std::ios::trunc);
  f << start << "\n";
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("writing ", file));
  return absl::OkStatus();
}

void StateDir::Forget(pid_t pid) { unlink(SentryFile(pid).c_str()); }

}  // namespace daemon
}  // namespace sandboxd
