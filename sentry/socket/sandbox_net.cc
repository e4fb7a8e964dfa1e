#include "sentry/socket/sandbox_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "proto/mount_spec.h"
#include "sentry/socket/sandbox_net_signal_safe.h"

namespace sandboxd::sandbox_net {
namespace {

// How long pasta may take to configure the namespace and bind the ports
// (about 80 ms here) before it counts as hung.
constexpr int kPastaStartTimeoutMs = 10000;

std::string HostIp(const v1::PortMapping& p) {
  return p.host_ip().empty() ? "127.0.0.1" : p.host_ip();
}

bool IsUdp(const v1::PortMapping& p) {
  return p.protocol() == v1::PortMapping::PROTOCOL_UDP;
}

// The address pasta and bind(2) take; false if `ip` is none.
bool ToSockaddr(const std::string& ip, uint16_t port, sockaddr_storage* ss,
                socklen_t* len) {
  memset(ss, 0, sizeof(*ss));
  auto* in4 = reinterpret_cast<sockaddr_in*>(ss);
  if (inet_pton(AF_INET, ip.c_str(), &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
    *len = sizeof(*in4);
    return true;
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(ss);
  if (inet_pton(AF_INET6, ip.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    *len = sizeof(*in6);
    return true;
  }
  return false;
}

absl::StatusOr<std::string> FindPasta() {
  std::vector<std::string> dirs;
  if (const char* path = getenv("PATH")) dirs = absl::StrSplit(path, ':');
  for (const char* d : {"/usr/bin", "/usr/sbin", "/bin", "/sbin"}) {
    dirs.push_back(d);
  }
  for (const std::string& d : dirs) {
    if (d.empty()) continue;
    std::string p = absl::StrCat(d, "/pasta");
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return absl::FailedPreconditionError(
      "the sandbox network mode needs pasta (Debian's package passt), "
      "found neither in PATH nor in /usr/bin");
}

// pasta's complaints, without the lines about its syslog (it has none
// here) and its informational ones.
std::string PastaErrors(const std::string& out) {
  std::vector<std::string> lines;
  for (absl::string_view l : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(l, "Failed to send") ||
        absl::StrContains(l, "No external routable interface for IPv6")) {
      continue;
    }
    lines.emplace_back(absl::StripAsciiWhitespace(l));
  }
  return lines.empty() ? "no message" : absl::StrJoin(lines, "; ");
}

// A small host file's content (at most 1 MiB); false if it cannot be read.
bool ReadHostFile(const std::string& path, std::string* out) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out->append(buf, n);
    if (out->size() > (1 << 20)) return false;
  }
}

}  // namespace

absl::Status CheckPortsFree(const Ports& ports) {
  std::set<std::tuple<std::string, uint32_t, bool>> seen;
  for (const v1::PortMapping& p : ports) {
    const std::string ip = HostIp(p);
    const std::string name = PortMappingString(p);
    if (!seen.emplace(ip, p.host_port(), IsUdp(p)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": host port ", p.host_port(), " on ", ip,
                       " is published twice"));
    }
    sockaddr_storage ss;
    socklen_t len;
    if (p.host_port() == 0 || p.host_port() > 65535 ||
        p.container_port() == 0 || p.container_port() > 65535 ||
        !ToSockaddr(ip, p.host_port(), &ss, &len)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": want an IP address and ports 1 to 65535"));
    }
    UniqueFd s(socket(ss.ss_family,
                      (IsUdp(p) ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0));
    if (!s.valid()) return ErrnoStatus(absl::StrCat(name, ": socket"), errno);
    // As pasta binds its listeners: a port that only has connections in
    // TIME_WAIT is free.
    const int one = 1;
    if (!IsUdp(p)) {
      setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    }
    if (ss.ss_family == AF_INET6) {
      setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    if (bind(s.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      const int err = errno;
      if (err == EADDRINUSE) {
        return absl::FailedPreconditionError(
            absl::StrCat(name, ": port ", p.host_port(), " on ", ip,
                         " is already in use on the host"));
      }
      return ErrnoStatus(
          absl::StrCat(name, ": binding port ", p.host_port(), " on ", ip), err);
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> PastaArgs(const Ports& ports, int netns_fd,
                                   int userns_fd, const std::string& pid_path) {
  std::vector<std::string> args;
  if (geteuid() == 0) {
    // Started as root, pasta would become nobody, who may not open the
    // namespaces; it keeps only the capabilities it needs either way.
    args.push_back(absl::StrCat("--runas=", getuid(), ":", getgid()));
  }
  args.insert(args.end(), {"--config-net", "--quiet"});
  // Published ports only (pasta's default would forward every port the
  // sandbox binds), and nothing from the namespace's loopback to the
  // host's (-T/-U auto would): the host's loopback is reached at the
  // gateway address only.
  std::vector<std::string> tcp, udp;
  for (const v1::PortMapping& p : ports) {
    (IsUdp(p) ? udp : tcp)
        .push_back(absl::StrCat(HostIp(p), "/", p.host_port(), ":",
                                p.container_port()));
  }
  auto forward = [&args](const char* flag, const std::vector<std::string>& v) {
    if (v.empty()) {
      args.insert(args.end(), {flag, "none"});
      return;
    }
    for (const std::string& s : v) args.insert(args.end(), {flag, s});
  };
  forward("-t", tcp);
  forward("-u", udp);
  args.insert(args.end(), {"-T", "none", "-U", "none"});
  args.insert(args.end(), {"--pid", pid_path});
  if (userns_fd >= 0) {
    args.insert(args.end(),
                {"--userns", absl::StrCat("/proc/self/fd/", userns_fd)});
  }
  args.insert(args.end(), {"--netns", absl::StrCat("/proc/self/fd/", netns_fd)});
  if (userns_fd < 0) args.push_back("--netns-only");
  return args;
}

absl::StatusOr<Pasta> Pasta::StartForPid(pid_t pid, const Ports& ports) {
  const std::string dir = absl::StrCat("/proc/", pid, "/ns/");
  UniqueFd net(open((dir + "net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!net.valid()) return ErrnoStatus(absl::StrCat("opening ", dir, "net"), errno);
  UniqueFd user(open((dir + "user").c_str(), O_RDONLY | O_CLOEXEC));
  if (!user.valid()) return ErrnoStatus(absl::StrCat("opening ", dir, "user"), errno);
  struct stat theirs, ours;
  // Never the caller's own: pasta would configure the host's network.
  if (fstat(net.get(), &theirs) != 0 || stat("/proc/self/ns/net", &ours) != 0) {
    return ErrnoStatus("comparing network namespaces", errno);
  }
  if (theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev) {
    return absl::FailedPreconditionError(absl::StrCat(
        "process ", pid, " has no network namespace of its own"));
  }
  if (fstat(user.get(), &theirs) != 0 || stat("/proc/self/ns/user", &ours) != 0) {
    return ErrnoStatus("comparing user namespaces", errno);
  }
  const bool same_user = theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev;
  return Start(net.get(), same_user ? -1 : user.get(), ports);
}

absl::StatusOr<Pasta> Pasta::Start(int netns, int userns, const Ports& ports) {
  ASSIGN_OR_RETURN(const std::string path, FindPasta());
  // pasta writes its pid (after it has forked into the background, ready)
  // into this memfd, named as its /proc/self/fd/N.
  UniqueFd pid_file(static_cast<int>(syscall(SYS_memfd_create, "pasta.pid", MFD_CLOEXEC)));
  if (!pid_file.valid()) return ErrnoStatus("memfd for pasta's pid", errno);
  UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull.valid()) return ErrnoStatus("opening /dev/null", errno);
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoStatus("pipe", errno);
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);

  std::vector<std::string> args = PastaArgs(
      ports, netns, userns, absl::StrCat("/proc/self/fd/", pid_file.get()));
  args.insert(args.begin(), "pasta");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  PastaChildArgs ca{path.c_str(), argv.data(), devnull.get(), err_w.get(),
                    {netns, userns, pid_file.get()}};
  const pid_t child = fork();
  if (child < 0) return ErrnoStatus("forking pasta", errno);
  if (child == 0) RunPastaChild(ca);
  err_w.reset();
  UniqueFd child_fd(static_cast<int>(syscall(SYS_pidfd_open, child, 0)));
  // pasta exits once it has set everything up and forked into the
  // background (or failed); its pipe is then at EOF or holds its errors.
  std::string out;
  bool timed_out = false;
  if (child_fd.valid()) {
    pollfd pfd{child_fd.get(), POLLIN, 0};
    int n;
    while ((n = poll(&pfd, 1, kPastaStartTimeoutMs)) < 0 && errno == EINTR) {
    }
    if (n == 0) {
      timed_out = true;
      kill(child, SIGKILL);
    }
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  fcntl(err_r.get(), F_SETFL, O_NONBLOCK);
  char buf[4096];
  ssize_t n;
  while ((n = read(err_r.get(), buf, sizeof(buf))) > 0 && out.size() < 65536) {
    out.append(buf, n);
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        "pasta did not set up the sandbox's network within ",
        kPastaStartTimeoutMs / 1000, " s: ", PastaErrors(out)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("pasta (", path, ") failed to set up the sandbox's "
                     "network (status ", status, "): ", PastaErrors(out)));
  }
  char pid_text[32] = {};
  ssize_t len = pread(pid_file.get(), pid_text, sizeof(pid_text) - 1, 0);
  int pid = 0;
  if (len <= 0 || !absl::SimpleAtoi(absl::StripAsciiWhitespace(
                                        absl::string_view(pid_text, len)),
                                    &pid) ||
      pid <= 0) {
    return absl::InternalError("pasta wrote no pid");
  }
  Pasta p;
  p.pid_ = pid;
  p.pidfd_ = UniqueFd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!p.pidfd_.valid()) {
    const int e = errno;
    p.pid_ = -1;
    return ErrnoStatus("pasta went away after its start (pidfd_open)", e);
  }
  return p;
}

absl::StatusOr<Pasta> Pasta::Adopt(pid_t pid) {
  Pasta p;
  p.pidfd_ = UniqueFd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!p.pidfd_.valid()) {
    return ErrnoStatus(absl::StrCat("pasta pid ", pid, " (pidfd_open)"), errno);
  }
  p.pid_ = pid;
  return p;
}

void Pasta::Stop() {
  if (pid_ <= 0) return;
  const pid_t pid = std::exchange(pid_, -1);
  if (!pidfd_.valid()) return;
  syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGTERM, nullptr, 0);
  pollfd pfd{pidfd_.get(), POLLIN, 0};
  if (poll(&pfd, 1, 1000) == 0) {
    syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    poll(&pfd, 1, 1000);
  }
  // Reaped here only if it became our child (a subreaper caller).
  waitpid(pid, nullptr, WNOHANG);
  pidfd_.reset();
}

std::vector<std::pair<std::string, std::string>> EtcFilesFor(
    v1::NetworkMode mode, const std::string& hostname) {
  std::vector<std::pair<std::string, std::string>> files;
  if (mode == v1::NETWORK_MODE_HOST) {
    for (const char* name : {"hosts", "resolv.conf"}) {
      std::string content;
      if (ReadHostFile(absl::StrCat("/etc/", name), &content)) {
        files.emplace_back(name, std::move(content));
      }
    }
    return files;
  }
  files.emplace_back(
      "hosts", absl::StrCat("127.0.0.1\tlocalhost\n"
                            "::1\tlocalhost ip6-localhost ip6-loopback\n"
                            "127.0.1.1\t", hostname, "\n"));
  if (mode != v1::NETWORK_MODE_SANDBOX) {
    files.emplace_back("resolv.conf",
                       "# network none: loopback only, no name server\n");
    return files;
  }
  std::string host;
  ReadHostFile("/etc/resolv.conf", &host);
  std::string resolv =
      "# network sandbox: the host's resolv.conf without loopback name "
      "servers\n";
  bool any = false;
  for (absl::string_view line : absl::StrSplit(host, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> w =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (w.size() >= 2 && w[0] == "nameserver") {
      in6_addr a6;
      in_addr a4;
      const std::string ip(w[1]);
      const bool loopback =
          (inet_pton(AF_INET, ip.c_str(), &a4) == 1 &&
           (ntohl(a4.s_addr) >> 24) == 127) ||
          (inet_pton(AF_INET6, ip.c_str(), &a6) == 1 &&
           IN6_IS_ADDR_LOOPBACK(&a6));
      if (loopback) continue;
      any = true;
    }
    absl::StrAppend(&resolv, line, "\n");
  }
  if (!any) absl::StrAppend(&resolv, "nameserver 8.8.8.8\nnameserver 8.8.4.4\n");
  files.emplace_back("resolv.conf", resolv);
  return files;
}

}  // namespace sandboxd::sandbox_net
