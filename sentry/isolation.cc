#include "sentry/isolation.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "sentry/isolation_holder.h"

namespace sandboxd::isolation {
namespace {

// The Sentry's end of the socket to the holder (see isolation_holder.h).
int holder_fd = -1;

absl::Status WriteFile(const char* path, const std::string& text) {
  UniqueFd fd(open(path, O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(absl::StrCat("opening ", path), errno);
  if (write(fd.get(), text.data(), text.size()) !=
      static_cast<ssize_t>(text.size())) {
    return ErrnoStatus(absl::StrCat("writing ", path), errno);
  }
  return absl::OkStatus();
}

absl::Status LoopbackUp() {
  UniqueFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return ErrnoStatus("loopback: socket", errno);
  ifreq ifr{};
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) {
    return ErrnoStatus("loopback: SIOCGIFFLAGS", errno);
  }
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) {
    return ErrnoStatus("loopback: SIOCSIFFLAGS", errno);
  }
  return absl::OkStatus();
}

// The sandbox's network namespace, made ready for hostinet: loopback up,
// and the host checks that stand in the way of the sandbox's own lifted
// (the Sentry keeps no capability, yet a program that is root in the
// sandbox binds port 80: the Sentry checks CAP_NET_BIND_SERVICE itself,
// sys_socket.cc; ping sockets are the host's to allow, here for every
// group). Preconditions: CAP_NET_ADMIN in the namespace.
absl::Status PrepareNetwork() {
  RETURN_IF_ERROR(LoopbackUp());
  RETURN_IF_ERROR(
      WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0\n"));
  // Ping sockets (socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP), what
  // iputils' ping uses without CAP_NET_RAW) for the Sentry's group: the
  // range is in this user namespace's ids, where only the Sentry's own gid
  // (0) is mapped, so a wider range is EINVAL when the caller's namespace
  // maps no more either. The sandbox's groups are the Sentry's business.
  // Not every kernel has it; nothing else depends on it.
  WriteFile("/proc/sys/net/ipv4/ping_group_range", "0 0\n").IgnoreError();
  return absl::OkStatus();
}

}  // namespace

absl::Status EnterNamespaces(bool own_network) {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  // No pid namespace yet: see isolation.h.
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS | (own_network ? CLONE_NEWNET : 0) |
              CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
    return ErrnoStatus(own_network ? "unshare of the user, mount, net, ipc "
                                     "and uts namespaces"
                                   : "unshare of the user, mount, ipc and "
                                     "uts namespaces",
                       errno);
  }
  // One id each, the Sentry's own, as uid/gid 0 inside. The Sentry never
  // calls setgroups; denying it is what lets an unprivileged daemon write
  // gid_map too.
  RETURN_IF_ERROR(WriteFile("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1\n")));
  RETURN_IF_ERROR(WriteFile("/proc/self/setgroups", "deny"));
  RETURN_IF_ERROR(WriteFile("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1\n")));
  if (own_network) RETURN_IF_ERROR(PrepareNetwork());

  // The holder keeps the capability to set the hostname (the Sentry drops
  // every capability before it has a thread) and nothing else.
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus("socketpair for the holder", errno);
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    return ErrnoStatus("forking the holder", errno);
  }
  if (pid == 0) {
    close(sv[0]);
    RunHolder(sv[1]);  // never returns
  }
  close(sv[1]);
  holder_fd = sv[0];
  return absl::OkStatus();
}

absl::Status PivotToEmptyRoot() {
  // Nothing below propagates back to the daemon's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return ErrnoStatus("making the mounts private", errno);
  }
  // Any existing directory serves as the mountpoint of the new root.
  const char* base = nullptr;
  for (const char* d : {"/tmp", "/mnt", "/dev"}) {
    struct stat st;
    if (stat(d, &st) == 0 && S_ISDIR(st.st_mode)) {
      base = d;
      break;
    }
  }
  if (base == nullptr) {
    return absl::FailedPreconditionError(
        "no directory to mount the empty root on (/tmp, /mnt, /dev)");
  }
  if (mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "size=16k,nr_inodes=8,mode=0755") != 0) {
    return ErrnoStatus(absl::StrCat("mounting the empty root on ", base), errno);
  }
  if (chdir(base) != 0) return ErrnoStatus("chdir to the empty root", errno);
  if (mkdir("old", 0700) != 0) return ErrnoStatus("mkdir old root", errno);
  if (syscall(SYS_pivot_root, ".", "old") != 0) {
    return ErrnoStatus("pivot_root", errno);
  }
  if (chdir("/") != 0) return ErrnoStatus("chdir /", errno);
  if (umount2("/old", MNT_DETACH) != 0) {
    return ErrnoStatus("detaching the host's root", errno);
  }
  if (rmdir("/old") != 0) return ErrnoStatus("removing /old", errno);
  if (mount(nullptr, "/", nullptr,
            MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            nullptr) != 0) {
    return ErrnoStatus("making the empty root read-only", errno);
  }
  return absl::OkStatus();
}

absl::Status DropCapabilities() {
  for (int cap = 0; cap <= 63; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // past the kernel's last capability
      return ErrnoStatus(absl::StrCat("dropping capability ", cap,
                                      " from the bounding set"),
                         errno);
    }
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    return ErrnoStatus("clearing the ambient capabilities", errno);
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0) {
    return ErrnoStatus("capset", errno);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return ErrnoStatus("PR_SET_NO_NEW_PRIVS", errno);
  }
  return absl::OkStatus();
}

absl::Status SetHostname(const std::string& name) {
  if (holder_fd < 0) {
    return absl::FailedPreconditionError("no uts namespace of our own");
  }
  if (name.size() > kMaxHostname) {
    return absl::InvalidArgumentError(
        absl::StrCat("hostname longer than ", kMaxHostname, " bytes: ", name));
  }
  if (send(holder_fd, name.data(), name.size(), MSG_NOSIGNAL) < 0) {
    return ErrnoStatus("asking the holder for sethostname", errno);
  }
  int err = 0;
  ssize_t n = recv(holder_fd, &err, sizeof(err), 0);
  if (n != sizeof(err)) {
    return absl::InternalError("the holder did not answer sethostname");
  }
  if (err != 0) return ErrnoStatus(absl::StrCat("sethostname ", name), err);
  return absl::OkStatus();
}

}  // namespace sandboxd::isolation

namespace sandboxd::isolation {
namespace {

// The signals `sentry run` forwards to the Sentry when they come from a
// process (kill(1)); the ones a terminal generates reach the Sentry
// itself, in the same process group.
// (The set that main.cc's Run forwards into the sandbox.)
constexpr int kForwarded[] = {SIGINT,  SIGTERM,  SIGHUP, SIGQUIT,
                              SIGUSR1, SIGWINCH, SIGTSTP};

// `sentry run`'s own cgroups: one under the caller's in the v2 hierarchy
// and in v1's pids and freezer hierarchies, where the caller may make them
// (best effort: none where it may not).
struct RunCgroups {
  std::vector<std::string> v2;  // at most one
  std::vector<std::string> v1;
  std::string v1_freezer;       // one of v1, or ""
};

std::string ReadSmallFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return "";
  char buf[4096];
  ssize_t n = read(fd.get(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, n) : "";
}

RunCgroups MakeRunCgroups(pid_t child) {
  RunCgroups out;
  const std::string self = ReadSmallFile("/proc/self/cgroup");
  const std::string leaf = absl::StrCat("/sentry-run-", getpid());
  size_t at = 0;
  while (at < self.size()) {
    size_t nl = self.find('\n', at);
    if (nl == std::string::npos) nl = self.size();
    const std::string line = self.substr(at, nl - at);
    at = nl + 1;
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string::npos) continue;
    const std::string ctl = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path = line.substr(c2 + 1);
    std::string base;
    bool v2 = false;
    if (line.compare(0, c1, "0") == 0 && ctl.empty()) {
      for (const char* m : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
        if (access(absl::StrCat(m, "/cgroup.procs").c_str(), F_OK) == 0 &&
            access(absl::StrCat(m, "/cgroup.controllers").c_str(), F_OK) ==
                0) {
          base = m;
          break;
        }
      }
      v2 = true;
    } else if (ctl == "pids" || ctl == "freezer") {
      base = absl::StrCat("/sys/fs/cgroup/", ctl);
    }
    if (base.empty()) continue;
    const std::string dir = absl::StrCat(base, path == "/" ? "" : path, leaf);
    if (mkdir(dir.c_str(), 0755) != 0) continue;
    if (!WriteFile(absl::StrCat(dir, "/cgroup.procs").c_str(),
                   absl::StrCat(child))
             .ok()) {
      rmdir(dir.c_str());
      continue;
    }
    if (v2) {
      out.v2.push_back(dir);
    } else {
      out.v1.push_back(dir);
      if (ctl == "freezer") out.v1_freezer = dir;
    }
  }
  return out;
}

// Kills whatever is left in the cgroups (nothing, unless a process left
// the pid namespace's reach) and removes them.
void RemoveRunCgroups(const RunCgroups& cg) {
  for (const std::string& d : cg.v2) {
    if (!WriteFile(absl::StrCat(d, "/cgroup.kill").c_str(), "1").ok()) {
      WriteFile(absl::StrCat(d, "/cgroup.freeze").c_str(), "1").IgnoreError();
    }
  }
  auto kill_listed = [](const std::string& dir) {
    const std::string procs = ReadSmallFile(dir + "/cgroup.procs");
    size_t at = 0;
    while (at < procs.size()) {
      const pid_t p = static_cast<pid_t>(strtol(procs.c_str() + at, nullptr,
                                                10));
      if (p > 0) kill(p, SIGKILL);
      const size_t nl = procs.find('\n', at);
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  };
  if (!cg.v1_freezer.empty()) {
    WriteFile((cg.v1_freezer + "/freezer.state").c_str(), "FROZEN")
        .IgnoreError();
  }
  for (const std::string& d : cg.v2) kill_listed(d);
  for (const std::string& d : cg.v1) kill_listed(d);
  if (!cg.v1_freezer.empty()) {
    WriteFile((cg.v1_freezer + "/freezer.state").c_str(), "THAWED")
        .IgnoreError();
  }
  // The kernel removes killed processes from a cgroup asynchronously.
  for (const std::vector<std::string>* v : {&cg.v2, &cg.v1}) {
    for (const std::string& d : *v) {
      for (int i = 0; i < 200 && rmdir(d.c_str()) != 0 && errno == EBUSY;
           i++) {
        kill_listed(d);
        usleep(1000);
      }
    }
  }
}

[[noreturn]] void Supervise(pid_t child, const sigset_t& set,
                            const RunCgroups& cgroups) {
  for (;;) {
    siginfo_t si;
    const int sig = sigwaitinfo(&set, &si);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      // SI_USER, SI_QUEUE, SI_TKILL: sent to us, not to the group.
      if (si.si_code <= 0) kill(child, sig);
      continue;
    }
    int st;
    pid_t r;
    while ((r = waitpid(child, &st, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (r != child) continue;
    RemoveRunCgroups(cgroups);
    if (WIFEXITED(st)) _exit(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) {
      const int s = WTERMSIG(st);
      signal(s, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, s);
      sigprocmask(SIG_UNBLOCK, &one, nullptr);
      raise(s);
      _exit(128 + s);
    }
  }
}

}  // namespace

absl::Status ContainInPidNamespace(bool own_network) {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (uid != 0) {
    // A pid namespace needs CAP_SYS_ADMIN: in a user namespace of our own
    // that maps our uid and gid to themselves (nothing else changes for
    // the host's checks of our files).
    if (unshare(CLONE_NEWUSER) != 0) {
      return ErrnoStatus("unshare of a user namespace", errno);
    }
    RETURN_IF_ERROR(WriteFile("/proc/self/uid_map",
                              absl::StrCat(uid, " ", uid, " 1\n")));
    RETURN_IF_ERROR(WriteFile("/proc/self/setgroups", "deny"));
    RETURN_IF_ERROR(WriteFile("/proc/self/gid_map",
                              absl::StrCat(gid, " ", gid, " 1\n")));
  }
  // A network namespace of its own, with loopback only (hostinet's
  // sockets live there); the pid namespace alone where it cannot be made
  // or is not wanted (--network=host).
  const bool own_net =
      own_network && unshare(CLONE_NEWPID | CLONE_NEWNET) == 0;
  const int net_errno = errno;
  if (!own_net && unshare(CLONE_NEWPID) != 0) {
    return ErrnoStatus("unshare of a pid namespace", errno);
  }
  if (own_net) {
    if (absl::Status s = PrepareNetwork(); !s.ok()) {
      fprintf(stderr, "sentry: the sandbox's network namespace: %s\n",
              std::string(s.message()).c_str());
    }
  } else if (own_network) {
    fprintf(stderr,
            "sentry: no network namespace of its own (errno %d): the "
            "sandbox's sockets are in the caller's\n",
            net_errno);
  }
  sigset_t set, old;
  sigemptyset(&set);
  for (int s : kForwarded) sigaddset(&set, s);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, &old);
  int alive[2];
  if (pipe2(alive, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  const pid_t child = fork();
  if (child < 0) return ErrnoStatus("forking the Sentry's init", errno);
  if (child > 0) {
    close(alive[0]);
    // The Sentry joins its cgroups before it makes anything.
    const RunCgroups cgroups = MakeRunCgroups(child);
    const char go = 1;
    if (write(alive[1], &go, 1) != 1) kill(child, SIGKILL);
    Supervise(child, set, cgroups);  // never returns
  }
  close(alive[1]);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  // Pid 1 of the namespace: everything in it dies with us. We die with
  // `sentry run`; if it is gone already, the pipe says so (no go byte).
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    return ErrnoStatus("PR_SET_PDEATHSIG", errno);
  }
  char go = 0;
  ssize_t n;
  while ((n = read(alive[0], &go, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1) _exit(125);
  close(alive[0]);
  if (uid != 0) {
    // The capabilities the user namespace gave us are not the Sentry's.
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (syscall(SYS_capset, &header, data) != 0) {
      return ErrnoStatus("capset", errno);
    }
  }
  return absl::OkStatus();
}

}  // namespace sandboxd::isolation
