#include "daemon/state_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
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

std::string ReadFirstLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

absl::Status WriteAtomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("creating ", tmp), errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus(absl::StrCat("writing ", tmp), errno);
    done += static_cast<size_t>(n);
  }
  // No fsync: the records are for a daemon that crashed, not a machine
  // (/run is a tmpfs), and the rename alone is atomic for that.
  fd.reset();
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus(absl::StrCat("renaming ", tmp), errno);
  }
  return absl::OkStatus();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(d);
  return names;
}

// A unix socket address for `name` in the directory `dirfd`, through
// /proc/self/fd: sun_path holds 108 bytes, a state directory's path may
// not fit.
sockaddr_un SocketAddress(int dirfd, const std::string& name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d/%s", dirfd, name.c_str());
  return a;
}

constexpr char kControlSocket[] = "control.sock";

}  // namespace

bool SentryRecord::Alive() const {
  return pid > 1 && !start_time.empty() && ProcessStartTime(pid) == start_time &&
         !IsZombie(pid);
}

bool IsZombie(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t close = stat.rfind(')');
  // An orphaned Sentry that died stays a zombie until its new parent reaps
  // it: it is gone all the same.
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

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
  RETURN_IF_ERROR(MkdirP(path + "/sandboxes"));
  RETURN_IF_ERROR(MkdirP(path + "/sockets"));
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

std::vector<SentryRecord> StateDir::Sentries() const {
  std::vector<SentryRecord> out;
  const std::string dir = path_ + "/sentries";
  for (const std::string& name : ListDir(dir)) {
    SentryRecord r;
    if (!absl::SimpleAtoi(name, &r.pid)) continue;
    std::ifstream f(dir + "/" + name);
    std::getline(f, r.start_time);
    std::getline(f, r.cgroup);
    out.push_back(std::move(r));
  }
  return out;
}

int StateDir::KillStale(const std::set<pid_t>& keep, std::vector<std::string>* cgroups) {
  // A temporary file a crash left behind.
  const std::string dir = path_ + "/sentries";
  for (const std::string& name : ListDir(dir)) {
    int pid;
    if (!absl::SimpleAtoi(name, &pid)) unlink((dir + "/" + name).c_str());
  }
  int killed = 0;
  for (const SentryRecord& r : Sentries()) {
    if (keep.count(r.pid)) continue;
    if (r.Alive()) {
      kill(-r.pid, SIGKILL);
      kill(r.pid, SIGKILL);
      killed++;
    }
    if (cgroups != nullptr && !r.cgroup.empty()) cgroups->push_back(r.cgroup);
    Forget(r.pid);
  }
  // Warm sockets whose Sentry has no record (left by a crash).
  for (const std::string& name : ListDir(path_ + "/sockets")) {
    if (!keep.count(atoi(name.c_str()))) unlink((path_ + "/sockets/" + name).c_str());
  }
  return killed;
}

absl::Status StateDir::Record(pid_t pid, const std::string& cgroup) {
  const std::string start = ProcessStartTime(pid);
  if (start.empty()) {
    return absl::UnavailableError(absl::StrCat("sentry pid ", pid, " is gone"));
  }
  return WriteAtomically(SentryFile(pid), absl::StrCat(start, "\n", cgroup, "\n"));
}

void StateDir::Forget(pid_t pid) {
  unlink(SentryFile(pid).c_str());
  unlink(absl::StrCat(path_, "/sockets/", pid).c_str());
}

absl::Status StateDir::RecordNetwork(const std::string& id, pid_t pid) {
  const std::string start = ProcessStartTime(pid);
  if (start.empty()) {
    return absl::UnavailableError(absl::StrCat("pasta pid ", pid, " is gone"));
  }
  const std::string dir = SandboxDir(id);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("creating ", dir), errno);
  }
  return WriteAtomically(dir + "/network", absl::StrCat(pid, "\n", start, "\n"));
}

SentryRecord StateDir::LoadNetwork(const std::string& id) const {
  SentryRecord r;
  std::ifstream f(SandboxDir(id) + "/network");
  std::string pid;
  if (!std::getline(f, pid) || !absl::SimpleAtoi(pid, &r.pid)) return SentryRecord{};
  std::getline(f, r.start_time);
  return r;
}

void StateDir::ForgetNetwork(const std::string& id) {
  unlink((SandboxDir(id) + "/network").c_str());
}

std::string StateDir::SandboxDir(const std::string& id) const {
  return absl::StrCat(path_, "/sandboxes/", id);
}

std::string StateDir::OutputLogPath(const std::string& id) const {
  return SandboxDir(id) + "/output.log";
}

absl::Status StateDir::SaveExec(const std::string& id, const v1::ExecInfo& info) {
  return WriteAtomically(absl::StrCat(SandboxDir(id), "/exec-", info.pid(), ".pb"),
                         info.SerializeAsString());
}

std::vector<v1::ExecInfo> StateDir::LoadExecs(const std::string& id) const {
  std::vector<v1::ExecInfo> out;
  const std::string dir = SandboxDir(id);
  for (const std::string& name : ListDir(dir)) {
    int pid;
    if (!absl::StartsWith(name, "exec-") || !absl::EndsWith(name, ".pb") ||
        !absl::SimpleAtoi(name.substr(5, name.size() - 8), &pid)) {
      continue;
    }
    std::ifstream f(dir + "/" + name, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    v1::ExecInfo info;
    if (info.ParseFromString(data) && info.pid() == pid) out.push_back(std::move(info));
  }
  return out;
}

void StateDir::RemoveExec(const std::string& id, int pid) {
  unlink(absl::StrCat(SandboxDir(id), "/exec-", pid, ".pb").c_str());
  unlink(ExecLogPath(id, pid).c_str());
}

std::string StateDir::ExecLogPath(const std::string& id, int pid) const {
  return absl::StrCat(SandboxDir(id), "/exec-", pid, ".log");
}

absl::Status StateDir::SaveSandbox(const v1::SandboxInfo& info) {
  const std::string dir = SandboxDir(info.id());
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("creating ", dir), errno);
  }
  return WriteAtomically(dir + "/sandbox.pb", info.SerializeAsString());
}

std::vector<v1::SandboxInfo> StateDir::LoadSandboxes(
    std::vector<std::string>* unreadable) const {
  std::vector<v1::SandboxInfo> out;
  for (const std::string& id : ListDir(path_ + "/sandboxes")) {
    const std::string file = SandboxDir(id) + "/sandbox.pb";
    std::ifstream f(file, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    v1::SandboxInfo info;
    if (!f.is_open() || !info.ParseFromString(data) || info.id() != id) {
      if (unreadable != nullptr) unreadable->push_back(id);
      continue;
    }
    out.push_back(std::move(info));
  }
  return out;
}

void StateDir::RemoveSandbox(const std::string& id) {
  const std::string dir = SandboxDir(id);
  for (const std::string& name : ListDir(dir)) unlink((dir + "/" + name).c_str());
  rmdir(dir.c_str());
}

namespace {

// A listening SOCK_SEQPACKET socket at DIR/NAME (replacing a stale one).
absl::StatusOr<UniqueFd> ListenAt(const std::string& dir, const std::string& name) {
  UniqueFd d(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!d.valid()) return ErrnoStatus(absl::StrCat("opening ", dir), errno);
  unlinkat(d.get(), name.c_str(), 0);
  UniqueFd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoStatus("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  sockaddr_un a = SocketAddress(d.get(), name);
  if (bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return ErrnoStatus(absl::StrCat("binding ", dir, "/", name), errno);
  }
  if (listen(s.get(), 4) != 0) return ErrnoStatus("listen", errno);
  return s;
}

}  // namespace

absl::StatusOr<UniqueFd> StateDir::Listen(const std::string& id) {
  const std::string dir = SandboxDir(id);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("creating ", dir), errno);
  }
  return ListenAt(dir, kControlSocket);
}

absl::StatusOr<UniqueFd> StateDir::ListenWarm(pid_t pid) {
  return ListenAt(path_ + "/sockets", absl::StrCat(pid));
}

absl::Status StateDir::MoveWarmSocket(pid_t pid, const std::string& id) {
  const std::string dir = SandboxDir(id);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("creating ", dir), errno);
  }
  const std::string from = absl::StrCat(path_, "/sockets/", pid);
  const std::string to = absl::StrCat(dir, "/", kControlSocket);
  if (rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus(absl::StrCat("renaming ", from, " to ", to), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> StateDir::Connect(const std::string& id) const {
  const std::string dir = SandboxDir(id);
  UniqueFd d(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!d.valid()) return ErrnoStatus(absl::StrCat("opening ", dir), errno);
  UniqueFd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoStatus("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  sockaddr_un a = SocketAddress(d.get(), kControlSocket);
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return ErrnoStatus(absl::StrCat("connecting to ", dir, "/", kControlSocket), errno);
  }
  return s;
}

void StateDir::RecordCgroupParent(const std::string& parent) {
  (void)WriteAtomically(path_ + "/cgroup-parent", parent + "\n");
}

bool StateDir::CreatedCgroupParent(const std::string& parent) const {
  return ReadFirstLine(path_ + "/cgroup-parent") == parent;
}

void StateDir::ForgetCgroupParent() { unlink((path_ + "/cgroup-parent").c_str()); }

}  // namespace daemon
}  // namespace sandboxd
