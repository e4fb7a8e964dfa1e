#include "sentry/isolation.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
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

#include <cstring>
#include <string>

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

}  // namespace

absl::Status EnterNamespaces() {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  // No pid namespace yet: see isolation.h.
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
              CLONE_NEWUTS) != 0) {
    return ErrnoStatus("unshare of the user, mount, net, ipc and uts "
                       "namespaces",
                       errno);
  }
  // One id each, the Sentry's own, as uid/gid 0 inside. The Sentry never
  // calls setgroups; denying it is what lets an unprivileged daemon write
  // gid_map too.
  RETURN_IF_ERROR(WriteFile("/proc/self/uid_map", absl::StrCat("0 ", uid, " 1\n")));
  RETURN_IF_ERROR(WriteFile("/proc/self/setgroups", "deny"));
  RETURN_IF_ERROR(WriteFile("/proc/self/gid_map", absl::StrCat("0 ", gid, " 1\n")));
  RETURN_IF_ERROR(LoopbackUp());

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

[[noreturn]] void Supervise(pid_t child, const sigset_t& set) {
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

absl::Status ContainInPidNamespace() {
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
  if (unshare(CLONE_NEWPID) != 0) {
    return ErrnoStatus("unshare of a pid namespace", errno);
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
    Supervise(child, set);  // never returns; alive[1] closes at our exit
  }
  close(alive[1]);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  // Pid 1 of the namespace: everything in it dies with us. We die with
  // `sentry run`; if it is gone already, the pipe says so.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
    return ErrnoStatus("PR_SET_PDEATHSIG", errno);
  }
  pollfd p{alive[0], POLLIN, 0};
  if (poll(&p, 1, 0) != 0) _exit(125);
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
