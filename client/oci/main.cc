// sandboxd-oci: an OCI runtime with runc's command line, for containerd's
// io.containerd.runc.v2 shim and podman (client/oci/README.md).
//
//   sandboxd-oci [--root=DIR] [--log=FILE] [--log-format=text|json]
//                [--systemd-cgroup] [--sentry=PATH] COMMAND [FLAGS] ID ...
//
// Exit status 0, or 1 with the error on stderr (and in --log), as runc.
#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "base/version.h"
#include "client/oci/backend.h"
#include "client/oci/cgroup.h"
#include "client/oci/daemon_proxy.h"
#include "client/oci/init_proxy.h"
#include "client/oci/proxy.h"
#include "client/oci/spec.h"
#include "client/oci/state.h"

extern char** environ;

namespace sandboxd::oci {
namespace {

struct Globals {
  std::string root = "/run/sandboxd-oci";
  std::string log;
  std::string log_format = "text";
  bool systemd_cgroup = false;
  bool debug = false;
  std::string sentry;
  std::string backend = "serve";
  std::string sandboxd_socket;
  // Set by `restore` for the create it runs.
  std::string restore_image;
};

Globals g;

void LogLine(const char* level, const std::string& msg) {
  if (g.log.empty()) return;
  int fd = open(g.log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string line =
      g.log_format == "json"
          ? absl::StrCat("{\"level\":\"", level, "\",\"msg\":", JsonQuote(msg),
                         ",\"time\":\"", NowRfc3339(), "\"}\n")
          : absl::StrCat("time=\"", NowRfc3339(), "\" level=", level,
                         " msg=", JsonQuote(msg), "\n");
  (void)!write(fd, line.data(), line.size());
  close(fd);
}

[[noreturn]] void Fail(const absl::Status& s) {
  const std::string msg(s.message());
  LogLine("error", msg);
  fprintf(stderr, "sandboxd-oci: %s\n", msg.c_str());
  fflush(stderr);
  _exit(1);
}

void Check(const absl::Status& s) {
  if (!s.ok()) Fail(s);
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

std::string SentryPath() {
  if (!g.sentry.empty()) return g.sentry;
  if (const char* e = getenv("SANDBOXD_OCI_SENTRY"); e != nullptr && *e) return e;
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "/usr/local/bin/sentry";
  std::string self(buf, n);
  return self.substr(0, self.rfind('/') + 1) + "sentry";
}

// A whole small file (config.json, process.json); closed on return, so
// that no copy of it reaches the init proxy.
absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Errno(absl::StrCat("reading ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "sandboxd-oci";
}

std::string SandboxdSocket() {
  if (!g.sandboxd_socket.empty()) return g.sandboxd_socket;
  const char* e = getenv("SANDBOXD_OCI_SOCKET");
  return e != nullptr ? e : "";
}

std::unique_ptr<Backend> MakeBackend() {
  char root[PATH_MAX];
  std::string abs_root = realpath(g.root.c_str(), root) != nullptr ? root : g.root;
  if (!SandboxdSocket().empty()) {
    return std::make_unique<DaemonBackend>(SelfPath(), abs_root, SandboxdSocket());
  }
  if (g.backend == "run") return std::make_unique<SentryRunBackend>(SentryPath());
  return std::make_unique<ServeBackend>(SelfPath(), abs_root, SentryPath());
}

std::string OneId(const std::vector<std::string>& args, const char* verb) {
  if (args.size() != 1) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat(verb, " wants exactly one container id, got ", args.size(),
                     " arguments")));
  }
  Check(CheckId(args[0]));
  return args[0];
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return Errno(absl::StrCat("writing ", tmp));
  if (write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
    return Errno(absl::StrCat("writing ", tmp));
  }
  fd.reset();
  if (rename(tmp.c_str(), path.c_str()) != 0) return Errno(absl::StrCat("renaming ", tmp));
  return absl::OkStatus();
}

absl::Status MkdirAll(const std::string& path, mode_t mode) {
  std::string cur;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&cur, "/", part);
    if (mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) {
      return Errno(absl::StrCat("mkdir ", cur));
    }
  }
  return absl::OkStatus();
}

// Sends the pty master over the console socket, as runc does
// (SCM_RIGHTS, the terminal's name as the message's data).
absl::Status SendConsole(const std::string& socket_path, int master,
                         const std::string& name) {
  UniqueFd s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return Errno("console socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError("--console-socket: path too long");
  }
  memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  if (connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Errno(absl::StrCat("connecting to --console-socket ", socket_path));
  }
  iovec iov{const_cast<char*>(name.data()), name.size()};
  char cbuf[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cbuf;
  msg.msg_controllen = sizeof(cbuf);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &master, sizeof(int));
  if (sendmsg(s.get(), &msg, MSG_NOSIGNAL) < 0) {
    return Errno("sending the console to --console-socket");
  }
  return absl::OkStatus();
}

// A new pty: the master goes to the console socket, the slave is returned.
absl::StatusOr<UniqueFd> OpenConsole(const std::string& socket_path) {
  UniqueFd master(posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!master.valid()) return Errno("posix_openpt");
  if (grantpt(master.get()) != 0 || unlockpt(master.get()) != 0) {
    return Errno("unlockpt");
  }
  char name[128];
  if (ptsname_r(master.get(), name, sizeof(name)) != 0) return Errno("ptsname");
  UniqueFd slave(open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!slave.valid()) return Errno(absl::StrCat("open ", name));
  // runc sends the master's own name, /dev/ptmx.
  RETURN_IF_ERROR(SendConsole(socket_path, master.get(), "/dev/ptmx"));
  return slave;
}

std::vector<char*> CArgv(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The host name of the UTS namespace `path` (a pod's): this process
// joins it for the gethostname and goes back.
absl::StatusOr<std::string> HostnameOf(const std::string& path) {
  UniqueFd target(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!target.valid()) return Errno(path);
  UniqueFd own(open("/proc/self/ns/uts", O_RDONLY | O_CLOEXEC));
  if (!own.valid()) return Errno("/proc/self/ns/uts");
  if (setns(target.get(), CLONE_NEWUTS) != 0) return Errno(absl::StrCat("setns ", path));
  char host[256] = {};
  const int r = gethostname(host, sizeof(host) - 1);
  const int err = errno;
  if (setns(own.get(), CLONE_NEWUTS) != 0) {
    Fail(Errno("setns back into the runtime's own uts namespace"));
  }
  if (r != 0) return absl::InternalError(absl::StrCat("gethostname: ", strerror(err)));
  return std::string(host);
}

// The flags create and run share, as runc's.
struct CreateFlags {
  std::string bundle = ".";
  std::string pid_file;
  std::string console_socket;
  int preserve_fds = 0;
  bool unused = false;  // --no-pivot, --no-new-keyring
};

void AddCreateFlags(flags::FlagSet& fs, CreateFlags* f) {
  fs.String("bundle", &f->bundle, "DIR", "the bundle: config.json and its root");
  fs.Alias("-b", "bundle");
  fs.String("pid-file", &f->pid_file, "FILE", "where the init proxy's pid goes");
  fs.String("console-socket", &f->console_socket, "PATH",
            "unix socket that gets the pty master (process.terminal)");
  fs.Bool("no-pivot", &f->unused, "accepted (the Sentry's root is its own)");
  fs.Bool("no-new-keyring", &f->unused, "accepted (no host keyring is reachable)");
  fs.Int("preserve-fds", &f->preserve_fds, "extra fds for the container (only 0)");
}

int CmdCreate(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci create", "[FLAGS] ID");
  CreateFlags cf;
  AddCreateFlags(fs, &cf);
  bool detach = false;
  fs.Bool("detach", &detach, "accepted (create always detaches)");
  fs.Alias("-d", "detach");
  std::vector<std::string> args = fs.ParseOrExit(argv_in, 1);
  std::string& bundle = cf.bundle;
  const std::string& pid_file = cf.pid_file;
  const std::string& console_socket = cf.console_socket;
  const int preserve_fds = cf.preserve_fds;
  const std::string id = OneId(args, "create");
  if (preserve_fds != 0) {
    Fail(absl::InvalidArgumentError("--preserve-fds: only 0 is supported"));
  }
  char real[PATH_MAX];
  if (realpath(bundle.c_str(), real) == nullptr) {
    Fail(Errno(absl::StrCat("--bundle ", bundle)));
  }
  bundle = real;
  absl::StatusOr<std::string> config = ReadWhole(bundle + "/config.json");
  if (!config.ok()) Fail(config.status());
  absl::StatusOr<LaunchSpec> spec = ParseConfig(*config, bundle);
  if (!spec.ok()) Fail(Annotate(spec.status(), "config.json"));
  spec->restore_image = g.restore_image;
  if (spec->hostname.empty() && !spec->utsns_path.empty()) {
    absl::StatusOr<std::string> name = HostnameOf(spec->utsns_path);
    if (!name.ok()) Fail(Annotate(name.status(), "config.json: linux.namespaces: uts path"));
    spec->hostname = *name;
  }
  if (spec->hostname.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    spec->hostname = host;
  }
  for (const std::string& note : spec->notes) {
    LogLine("warning", absl::StrCat("config.json: ", note));
  }
  if (g.backend != "run" || !SandboxdSocket().empty()) {
    if (absl::Status st = ForServedSentry(&*spec); !st.ok()) Fail(Annotate(st, "config.json"));
  }
  if (spec->terminal && console_socket.empty()) {
    Fail(absl::InvalidArgumentError(
        "config.json: process.terminal is true: --console-socket is required"));
  }
  if (!spec->terminal && !console_socket.empty()) {
    Fail(absl::InvalidArgumentError(
        "--console-socket given but config.json's process.terminal is false"));
  }
  struct stat sb;
  if (stat(spec->rootfs.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "config.json: root.path: ", spec->rootfs, " is not a directory")));
  }

  Check(MkdirAll(g.root, 0711));
  const std::string dir = ContainerDir(g.root, id);
  if (mkdir(dir.c_str(), 0711) != 0) {
    if (errno == EEXIST) {
      Fail(absl::AlreadyExistsError(absl::StrCat("container with id exists: ", id)));
    }
    Fail(Errno(absl::StrCat("mkdir ", dir)));
  }
  bool done = false;
  auto cleanup = [&] {
    if (done) return;
    unlink(FifoPath(g.root, id).c_str());
    unlink((dir + "/proxy.sock").c_str());
    unlink((dir + "/state.json").c_str());
    rmdir(dir.c_str());
  };
  auto fail = [&](const absl::Status& s) {
    cleanup();
    Fail(s);
  };
  const std::string fifo = FifoPath(g.root, id);
  if (mkfifo(fifo.c_str(), 0600) != 0) fail(Errno(absl::StrCat("mkfifo ", fifo)));

  UniqueFd console;
  if (spec->terminal) {
    auto c = OpenConsole(console_socket);
    if (!c.ok()) fail(c.status());
    console = *std::move(c);
  }
  UniqueFd netns;
  if (spec->network == LaunchSpec::Network::kJoin) {
    netns = UniqueFd(open(spec->netns_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns.valid()) {
      fail(Errno(absl::StrCat("config.json: linux.namespaces: network path ",
                              spec->netns_path)));
    }
  }
  if (!SandboxdSocket().empty() && !spec->rlimits.empty()) {
    // Not refused: containerd's default spec has one. The log says so.
    LogLine("warning",
            "config.json: process.rlimits: not applied with sandboxd "
            "(--sandboxd-socket): the sandbox has its Sentry's limits");
  }
  // The accounting cgroup (cgroup.h) for a Sentry of the container's own;
  // with sandboxd the sandbox's processes are in the daemon's cgroups.
  std::vector<std::string> cgroups;
  std::vector<UniqueFd> cgroup_procs;
  if (!spec->cgroups_path.empty() && SandboxdSocket().empty()) {
    absl::StatusOr<std::vector<std::string>> made = MakeAccountingCgroups(spec->cgroups_path);
    if (absl::IsInvalidArgument(made.status())) {
      LogLine("warning", absl::StrCat("config.json: ", made.status().message()));
    } else if (!made.ok()) {
      fail(made.status());
    } else {
      cgroups = *std::move(made);
    }
    for (const std::string& c : cgroups) {
      UniqueFd f(open((c + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      if (!f.valid()) {
        RemoveCgroups(cgroups);
        fail(Errno(absl::StrCat("config.json: linux.cgroupsPath: ", c, "/cgroup.procs")));
      }
      cgroup_procs.push_back(std::move(f));
    }
  }
  auto fail_cg = [&](const absl::Status& s) {
    cgroup_procs.clear();
    RemoveCgroups(cgroups);
    fail(s);
  };
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) fail_cg(Errno("pipe"));
  std::unique_ptr<Backend> backend = MakeBackend();
  std::vector<std::string> cmd = backend->InitCommand(id, *spec, bundle, report[1]);
  const std::string sentry = SentryPath();
  if (SandboxdSocket().empty() && access(sentry.c_str(), X_OK) != 0) {
    fail_cg(Errno(absl::StrCat("the sentry ", sentry,
                            " (--sentry or SANDBOXD_OCI_SENTRY)")));
  }
  LogLine("debug", absl::StrCat("init: ", absl::StrJoin(cmd, " ")));
  std::vector<char*> cargv = CArgv(cmd);
  std::vector<rlimit> limits;
  std::vector<int> resources;
  for (const auto& [res, lim] : spec->rlimits) {
    resources.push_back(res);
    limits.push_back(lim);
  }
  InitPlan plan;
  plan.wait_fifo = !backend->ReportsItself();
  plan.fifo = fifo.c_str();
  plan.exe = cargv[0];
  plan.argv = cargv.data();
  plan.envp = environ;
  plan.console = console.valid() ? console.get() : -1;
  plan.netns = netns.valid() ? netns.get() : -1;
  plan.report = report[1];
  plan.rlimits = limits.data();
  plan.rlimit_resources = resources.data();
  plan.n_rlimits = static_cast<int>(limits.size());
  std::vector<int> procs;
  for (const UniqueFd& f : cgroup_procs) procs.push_back(f.get());
  plan.cgroup_procs = procs.data();
  plan.n_cgroup_procs = static_cast<int>(procs.size());
  const pid_t pid = fork();
  if (pid < 0) fail_cg(Errno("fork"));
  if (pid == 0) {
    close(report[0]);
    RunInitChild(plan);
  }
  close(report[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(report[0], buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    err.append(buf, n);
  }
  close(report[0]);
  if (!err.empty()) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    fail_cg(absl::InternalError(absl::StrCat("starting the init proxy: ", err)));
  }
  ContainerState st;
  st.id = id;
  st.pid = pid;
  st.pid_start = ProcessStartTime(pid);
  st.bundle = bundle;
  st.rootfs = spec->rootfs;
  st.created = NowRfc3339();
  st.annotations = spec->annotations;
  st.sandboxd_socket = SandboxdSocket();
  st.cgroups = cgroups;
  if (absl::Status s = WriteState(g.root, st); !s.ok()) {
    kill(pid, SIGKILL);
    fail_cg(s);
  }
  if (!pid_file.empty()) {
    if (absl::Status s = WriteFileAtomic(pid_file, absl::StrCat(pid)); !s.ok()) {
      kill(pid, SIGKILL);
      fail_cg(s);
    }
  }
  done = true;
  LogLine("info", absl::StrCat("created ", id, ": init proxy pid ", pid));
  return 0;
}

ContainerState Load(const std::string& id) {
  absl::StatusOr<ContainerState> st = ReadState(g.root, id);
  if (!st.ok()) Fail(st.status());
  return *std::move(st);
}

// A container that runs or is paused (else exits with runc's error), and
// which of the two in `status`.
ContainerState LoadLive(const std::string& id, Status* status) {
  ContainerState st = Load(id);
  *status = CurrentStatus(g.root, st);
  if (*status != Status::kRunning && *status != Status::kPaused) {
    Fail(absl::FailedPreconditionError(
        absl::StrCat("container ", id, " is not running (", StatusName(*status), ")")));
  }
  return st;
}

int CmdStart(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci start", "ID");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), "start");
  ContainerState st = Load(id);
  switch (CurrentStatus(g.root, st)) {
    case Status::kRunning:
      Fail(absl::FailedPreconditionError("cannot start an already running container"));
    case Status::kStopped:
      Fail(absl::FailedPreconditionError("cannot start a container that has stopped"));
    case Status::kPaused:
      Fail(absl::FailedPreconditionError("cannot start a container in the paused state"));
    case Status::kCreated:
      break;
  }
  const std::string fifo = FifoPath(g.root, id);
  UniqueFd fd(open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) Fail(Errno(absl::StrCat("open ", fifo)));
  // The init proxy's open for writing completes now. It writes "0" once
  // the sandbox's init runs (or "1" and the error), then closes its end.
  std::string got;
  for (int waited_ms = 0;; waited_ms += 100) {
    pollfd p{fd.get(), POLLIN, 0};
    int r = poll(&p, 1, 100);
    if (r > 0 && (p.revents & (POLLIN | POLLHUP))) {
      char buf[512];
      ssize_t n = read(fd.get(), buf, sizeof(buf));
      if (n > 0) {
        got.append(buf, n);
        continue;
      }
      if (n == 0 && !got.empty()) break;
    }
    if (got.empty() && (ProcessStartTime(st.pid) != st.pid_start || waited_ms > 120000)) {
      Fail(absl::FailedPreconditionError(
          absl::StrCat("container ", id, ": its init proxy (pid ", st.pid,
                       ") exited before start")));
    }
  }
  if (got[0] != '0') {
    unlink(fifo.c_str());
    Fail(absl::FailedPreconditionError(
        absl::StrCat("starting container ", id, ": ", got.substr(1))));
  }
  unlink(fifo.c_str());
  LogLine("info", absl::StrCat("started ", id));
  return 0;
}

// One verb run in a child, so that its Fail (which exits) is reported as
// a status here.
int InChild(int (*verb)(const std::vector<std::string>&), const std::vector<std::string>& args) {
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) Fail(Errno("fork"));
  if (pid == 0) _exit(verb(args));
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
}

int CmdDelete(const std::vector<std::string>& argv_in);

// run: create and start; attached (without --detach) it forwards its
// signals to the init proxy (so to the sandbox's init), exits with the
// container's status and deletes it unless --keep, as runc run.
int CmdRun(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci run", "[FLAGS] ID");
  CreateFlags cf;
  AddCreateFlags(fs, &cf);
  bool detach = false, keep = false;
  fs.Bool("detach", &detach, "return once the container runs");
  fs.Alias("-d", "detach");
  fs.Bool("keep", &keep, "keep the container's state after it exits");
  fs.Bool("no-subreaper", &cf.unused, "accepted");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), "run");
  std::vector<std::string> create = {absl::StrCat("--bundle=", cf.bundle),
                                     absl::StrCat("--preserve-fds=", cf.preserve_fds)};
  if (!cf.pid_file.empty()) create.push_back(absl::StrCat("--pid-file=", cf.pid_file));
  if (!cf.console_socket.empty()) {
    create.push_back(absl::StrCat("--console-socket=", cf.console_socket));
  }
  create.push_back(id);
  // Blocked before the init proxy is forked (it unblocks what it takes),
  // so that none is lost between start and the wait below.
  sigset_t fwd;
  sigemptyset(&fwd);
  for (int sig : {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGCONT,
                  SIGTSTP, SIGWINCH, SIGTTIN, SIGTTOU, SIGPWR, SIGCHLD}) {
    sigaddset(&fwd, sig);
  }
  sigprocmask(SIG_BLOCK, &fwd, nullptr);
  if (CmdCreate(create) != 0) return 1;
  ContainerState st = Load(id);
  if (InChild(CmdStart, {id}) != 0) {
    waitpid(st.pid, nullptr, 0);
    (void)InChild(CmdDelete, {"--force", id});
    return 1;
  }
  if (detach) return 0;
  int ws = 0;
  for (;;) {
    const pid_t r = waitpid(st.pid, &ws, WNOHANG);
    if (r == st.pid) break;
    if (r < 0 && errno != EINTR) Fail(Errno(absl::StrCat("waiting for the init proxy ", st.pid)));
    timespec tick{0, 100 * 1000 * 1000};
    const int sig = sigtimedwait(&fwd, nullptr, &tick);
    if (sig > 0 && sig != SIGCHLD) kill(st.pid, sig);
  }
  const int status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  if (!keep) (void)InChild(CmdDelete, {id});
  return status;
}

int CmdState(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci state", "ID");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), "state");
  ContainerState st = Load(id);
  fputs(StateJson(st, CurrentStatus(g.root, st)).c_str(), stdout);
  return 0;
}

absl::StatusOr<int> ParseSignal(std::string s) {
  int n = 0;
  if (absl::SimpleAtoi(s, &n)) {
    if (n <= 0 || n >= NSIG) return absl::InvalidArgumentError(absl::StrCat("invalid signal: ", s));
    return n;
  }
  s = absl::AsciiStrToUpper(s);
  if (absl::StartsWith(s, "SIG")) s = s.substr(3);
  for (int i = 1; i < NSIG; i++) {
    const char* abbrev = sigabbrev_np(i);
    if (abbrev != nullptr && s == abbrev) return i;
  }
  return absl::InvalidArgumentError(absl::StrCat("invalid signal: ", s));
}

int CmdKill(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci kill", "[--all] ID [SIGNAL]");
  bool all = false;
  fs.Bool("all", &all, "signal every process of the container");
  fs.Alias("-a", "all");
  std::vector<std::string> args = fs.ParseOrExit(argv_in, 1);
  if (args.empty() || args.size() > 2) {
    Fail(absl::InvalidArgumentError("kill wants ID [SIGNAL]"));
  }
  Check(CheckId(args[0]));
  absl::StatusOr<int> sig = ParseSignal(args.size() == 2 ? args[1] : "SIGTERM");
  if (!sig.ok()) Fail(sig.status());
  ContainerState st = Load(args[0]);
  if (CurrentStatus(g.root, st) == Status::kStopped) {
    Fail(absl::FailedPreconditionError("container not running"));
  }
  // --all: every process in the sandbox (the Sentry's Signal with all),
  // as runc signals every process of the container's cgroup.
  if (all && *sig != SIGKILL && !st.sandboxd_socket.empty()) {
    Check(Annotate(DaemonSignal(st.sandboxd_socket, st.id, *sig, true), "kill --all"));
    return 0;
  }
  if (all && *sig != SIGKILL && MakeBackend()->Serves() &&
      CurrentStatus(g.root, st) == Status::kRunning) {
    absl::StatusOr<UniqueFd> c = ConnectProxy(g.root, st.id);
    if (!c.ok()) Fail(c.status());
    control::Request req;
    req.set_id(1);
    req.mutable_signal()->set_signal(*sig);
    req.mutable_signal()->set_all(true);
    absl::StatusOr<control::Response> r = ProxyCall(c->get(), req);
    if (!r.ok()) Fail(Annotate(r.status(), "kill --all"));
    return 0;
  }
  // The init proxy forwards what the sandbox should see to its init;
  // SIGKILL ends the Sentry, and every process of the sandbox with it.
  std::vector<pid_t> pids =
      all && *sig == SIGKILL ? ProcessTree(st.pid) : std::vector<pid_t>{st.pid};
  for (pid_t p : pids) {
    if (kill(p, *sig) != 0 && p == st.pid) {
      Fail(Errno(absl::StrCat("kill ", p)));
    }
  }
  return 0;
}

int CmdDelete(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci delete", "[--force] ID");
  bool force = false;
  fs.Bool("force", &force, "kill the container first if it runs");
  fs.Alias("-f", "force");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), "delete");
  const std::string dir = ContainerDir(g.root, id);
  absl::StatusOr<ContainerState> st = ReadState(g.root, id);
  if (!st.ok()) {
    if (force && absl::IsNotFound(st.status())) {
      unlink(FifoPath(g.root, id).c_str());
      unlink((dir + "/proxy.sock").c_str());
      rmdir(dir.c_str());
      return 0;
    }
    Fail(st.status());
  }
  Status status = CurrentStatus(g.root, *st);
  if ((status == Status::kRunning || status == Status::kPaused) && !force) {
    Fail(absl::FailedPreconditionError(absl::StrCat("cannot delete container ", id,
                                                    " that is not stopped: ",
                                                    StatusName(status))));
  }
  if (status != Status::kStopped) {
    for (pid_t p : ProcessTree(st->pid)) kill(p, SIGKILL);
    for (int i = 0; i < 1000 && CurrentStatus(g.root, *st) != Status::kStopped; i++) {
      usleep(10000);
    }
  }
  // The daemon destroys the sandbox when its init proxy's attach ends;
  // one a killed proxy left is destroyed here.
  if (!st->sandboxd_socket.empty()) (void)DaemonDestroy(st->sandboxd_socket, id);
  RemoveCgroups(st->cgroups);
  unlink(FifoPath(g.root, id).c_str());
  unlink(PausedPath(g.root, id).c_str());
  unlink((dir + "/proxy.sock").c_str());
  unlink((dir + "/state.json").c_str());
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) Fail(Errno(absl::StrCat("rmdir ", dir)));
  LogLine("info", absl::StrCat("deleted ", id));
  return 0;
}

// pause and resume: SIGSTOP / SIGCONT to every process below the init
// proxy (the Sentry and its stubs), as runc freezes the container's
// cgroup; the proxy itself runs on (a SIGCONT to it would be forwarded to
// the sandbox's init). With sandboxd its Pause and Resume do the same to
// the daemon's Sentry.
// `sig` to every process below the init proxy, twice over: a process
// started while the first pass ran (a new stub) is caught by the second.
void SignalBelowProxy(const ContainerState& st, int sig) {
  for (int pass = 0; pass < 2; pass++) {
    std::vector<pid_t> tree = ProcessTree(st.pid);
    for (size_t i = 1; i < tree.size(); i++) kill(tree[i], sig);
  }
}

int PauseOrResume(const std::vector<std::string>& argv_in, bool pause) {
  const char* verb = pause ? "pause" : "resume";
  flags::FlagSet fs(absl::StrCat("sandboxd-oci ", verb), "ID");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), verb);
  ContainerState st = Load(id);
  const Status status = CurrentStatus(g.root, st);
  if (pause && status != Status::kRunning) {
    Fail(absl::FailedPreconditionError(
        absl::StrCat("container not running: ", StatusName(status))));
  }
  if (!pause && status != Status::kPaused) {
    Fail(absl::FailedPreconditionError(absl::StrCat("container not paused: ", StatusName(status))));
  }
  if (!st.sandboxd_socket.empty()) {
    // The daemon stops (continues) its Sentry and stubs: Pause, Resume.
    if (absl::Status s = DaemonPause(st.sandboxd_socket, id, pause); !s.ok()) {
      Fail(Annotate(s, verb));
    }
    if (pause) {
      Check(WriteFileAtomic(PausedPath(g.root, id), ""));
    } else {
      unlink(PausedPath(g.root, id).c_str());
    }
    LogLine("info", absl::StrCat(verb, "d ", id));
    return 0;
  }
  if (pause) {
    // The stopped Sentry cannot answer `events`: its figures as the pause
    // found them (they do not move while it is stopped) go in the marker.
    std::string stats;
    if (MakeBackend()->Serves()) {
      absl::StatusOr<UniqueFd> c = ConnectProxy(g.root, id);
      control::Request req;
      req.set_id(1);
      req.mutable_stats();
      absl::StatusOr<control::Response> r =
          c.ok() ? ProxyCall(c->get(), req) : absl::StatusOr<control::Response>(c.status());
      if (r.ok()) {
        stats = r->stats().SerializeAsString();
      } else {
        LogLine("warning", absl::StrCat("pause ", id, ": no statistics for events while "
                                        "paused: ", r.status().message()));
      }
    }
    Check(WriteFileAtomic(PausedPath(g.root, id), stats));
  }
  SignalBelowProxy(st, pause ? SIGSTOP : SIGCONT);
  if (!pause) unlink(PausedPath(g.root, id).c_str());
  LogLine("info", absl::StrCat(verb, "d ", id));
  return 0;
}

// checkpoint: the sandbox saved into --image-path (the Sentry's image
// format, sentry/state/README.md, not CRIU's), then killed unless
// --leave-running, as runc checkpoint does. The serve backend asks its
// init proxy's Sentry; the daemon backend sandboxd (Checkpoint).
int CmdCheckpoint(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci checkpoint", "--image-path=DIR [FLAGS] ID");
  std::string image, work, unused;
  bool leave_running = false, unused_bool = false;
  fs.String("image-path", &image, "DIR", "where the image goes (made if missing; empty)");
  fs.String("work-path", &work, "DIR", "accepted, unused");
  fs.Bool("leave-running", &leave_running, "the container runs on after the checkpoint");
  for (const char* b : {"tcp-established", "ext-unix-sk", "shell-job", "file-locks",
                        "pre-dump", "empty-ns", "auto-dedup", "lazy-pages"}) {
    fs.Bool(b, &unused_bool, "accepted (CRIU's; the Sentry saves everything it can or fails)");
  }
  std::string parent;
  fs.String("parent-path", &parent, "DIR", "refused (no incremental images)");
  fs.String("manage-cgroups-mode", &unused, "MODE", "accepted, unused");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), "checkpoint");
  if (!parent.empty()) {
    Fail(absl::InvalidArgumentError("--parent-path: incremental images are not supported"));
  }
  if (image.empty()) Fail(absl::InvalidArgumentError("checkpoint needs --image-path"));
  Status status;
  ContainerState st = LoadLive(id, &status);
  if (!st.sandboxd_socket.empty()) {
    // sandboxd's Checkpoint (its image directory: made by the daemon,
    // under its --checkpoint-roots). A paused sandbox is resumed for it
    // and paused again after, as below.
    const bool paused = status == Status::kPaused;
    if (paused) {
      if (absl::Status s = DaemonPause(st.sandboxd_socket, id, false); !s.ok()) {
        Fail(Annotate(s, "checkpoint: resuming the paused sandbox"));
      }
    }
    char real[PATH_MAX];
    std::string path = image;
    if (realpath(image.c_str(), real) != nullptr) {
      path = real;
    } else if (image[0] != '/') {
      char cwd[PATH_MAX];
      if (getcwd(cwd, sizeof(cwd)) == nullptr) Fail(Errno("getcwd"));
      path = absl::StrCat(cwd, "/", image);
    }
    absl::Status s = DaemonCheckpoint(st.sandboxd_socket, id, path, leave_running);
    if (paused && (!s.ok() || leave_running)) (void)DaemonPause(st.sandboxd_socket, id, true);
    if (!s.ok()) Fail(Annotate(s, "checkpoint"));
    LogLine("info", absl::StrCat("checkpointed ", id, " into ", path));
    return 0;
  }
  // containerd pauses a container before its checkpoint; the Sentry stops
  // its tasks at safe points itself and needs its threads running for
  // that, so they run for the checkpoint and stop again after it.
  const bool paused = status == Status::kPaused;
  if (paused) SignalBelowProxy(st, SIGCONT);
  Check(MkdirAll(image, 0700));
  char real[PATH_MAX];
  if (realpath(image.c_str(), real) == nullptr) Fail(Errno(image));
  UniqueFd dir(open(real, O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) Fail(Errno(absl::StrCat("--image-path ", real)));
  absl::StatusOr<UniqueFd> c = ConnectProxy(g.root, id);
  if (!c.ok()) Fail(c.status());
  control::Request req;
  req.set_id(1);
  req.mutable_checkpoint()->set_leave_running(leave_running);
  req.mutable_checkpoint()->set_image_path(real);
  absl::StatusOr<control::Response> r = ProxyCall(c->get(), req, {dir.get()});
  if (paused) SignalBelowProxy(st, SIGSTOP);
  if (!r.ok()) Fail(Annotate(r.status(), "checkpoint"));
  LogLine("info", absl::StrCat("checkpointed ", id, " into ", real));
  return 0;
}

int CmdCreate(const std::vector<std::string>& argv_in);

// restore: create from the bundle with the image, then start (runc
// restore is both); the sandbox's tasks run on from the image.
int CmdRestore(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci restore", "--image-path=DIR --bundle=DIR [FLAGS] ID");
  std::string image, work, bundle = ".", pid_file, console_socket, unused;
  bool detach = false, unused_bool = false;
  fs.String("image-path", &image, "DIR", "the image a checkpoint wrote");
  fs.String("work-path", &work, "DIR", "accepted, unused");
  fs.String("bundle", &bundle, "DIR", "the bundle");
  fs.Alias("-b", "bundle");
  fs.String("pid-file", &pid_file, "FILE", "where the init proxy's pid goes");
  fs.String("console-socket", &console_socket, "PATH", "gets the pty master");
  fs.Bool("detach", &detach, "accepted (restore always detaches)");
  fs.Alias("-d", "detach");
  for (const char* b : {"tcp-established", "ext-unix-sk", "shell-job", "file-locks",
                        "no-subreaper", "no-pivot", "empty-ns", "auto-dedup", "lazy-pages"}) {
    fs.Bool(b, &unused_bool, "accepted");
  }
  fs.String("manage-cgroups-mode", &unused, "MODE", "accepted, unused");
  std::vector<std::string> args = fs.ParseOrExit(argv_in, 1);
  const std::string id = OneId(args, "restore");
  if (image.empty()) Fail(absl::InvalidArgumentError("restore needs --image-path"));
  if (SandboxdSocket().empty() && g.backend != "serve") {
    Fail(absl::UnimplementedError("restore: not with --backend=run"));
  }
  char real[PATH_MAX];
  if (realpath(image.c_str(), real) == nullptr) Fail(Errno(absl::StrCat("--image-path ", image)));
  g.restore_image = real;
  std::vector<std::string> create = {"--bundle", bundle};
  if (!pid_file.empty()) create.insert(create.end(), {"--pid-file", pid_file});
  if (!console_socket.empty()) create.insert(create.end(), {"--console-socket", console_socket});
  create.push_back(id);
  if (int rc = CmdCreate(create); rc != 0) return rc;
  return CmdStart({id});
}

// What `events` reports: the Sentry's own measures (its Stats through the
// init proxy, or sandboxd's Get of the sandbox), not a host cgroup's.
struct Usage {
  uint64_t cpu_user_ns = 0;
  uint64_t cpu_system_ns = 0;
  uint64_t memory_bytes = 0;
  uint64_t memory_max_bytes = 0;  // 0: not measured
  uint64_t memory_limit = 0;      // 0: none
  uint64_t memory_failcnt = 0;    // allocations the limit refused
  uint64_t pids = 0;              // tasks (threads), as the pids controller counts
  uint64_t pids_limit = 0;        // 0: none
  uint64_t oom_kills = 0;
};

uint64_t Nanos(const google::protobuf::Duration& d) {
  return static_cast<uint64_t>(d.seconds()) * 1000000000ull + static_cast<uint64_t>(d.nanos());
}

absl::StatusOr<Usage> UsageOf(const ContainerState& st) {
  Usage u;
  if (!st.sandboxd_socket.empty()) {
    ASSIGN_OR_RETURN(v1::SandboxInfo info, DaemonGet(st.sandboxd_socket, st.id));
    const v1::ResourceUsage& r = info.usage();
    u.cpu_user_ns = Nanos(r.cpu_user());
    u.cpu_system_ns = Nanos(r.cpu_system());
    u.memory_bytes = r.memory_bytes();
    u.memory_max_bytes = r.memory_peak_bytes();
    u.memory_limit = info.spec().limits().memory_bytes();
    u.pids = r.pids();
    u.pids_limit = info.spec().limits().pids();
    return u;
  }
  if (!MakeBackend()->Serves()) {
    return absl::UnimplementedError(
        "not with --backend=run (sentry run has no control channel to ask)");
  }
  control::SentryStats s;
  if (CurrentStatus(g.root, st) == Status::kPaused) {
    // Its Sentry is stopped: the figures `pause` recorded.
    absl::StatusOr<std::string> saved = ReadWhole(PausedPath(g.root, st.id));
    if (!saved.ok() || saved->empty() || !s.ParseFromString(*saved)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "container ", st.id, " is paused and its pause recorded no statistics"));
    }
  } else {
    ASSIGN_OR_RETURN(UniqueFd c, ConnectProxy(g.root, st.id));
    control::Request req;
    req.set_id(1);
    req.mutable_stats();
    ASSIGN_OR_RETURN(control::Response r, ProxyCall(c.get(), req));
    s = r.stats();
  }
  u.cpu_user_ns = s.cpu_user_nanos();
  u.cpu_system_ns = s.cpu_system_nanos();
  u.memory_bytes = s.memory_bytes();
  u.memory_limit = s.limit_memory_bytes();
  u.memory_failcnt = s.memory_limit_refusals();
  u.pids = s.tasks();
  u.pids_limit = s.limit_pids();
  u.oom_kills = s.oom_kills();
  return u;
}

// runc's events JSON ({"type":"stats","id":..,"data":{...}}, one line),
// with the keys of runc's types.Stats; what the Sentry does not measure
// (per-CPU times, throttling, cpuset, block I/O, hugetlb, the memory
// cgroup's memory.stat) is left out or empty, as runc leaves a controller
// it has not; memory.raw has the Sentry's OOM kills. No limit is cgroup
// v1's "unlimited" (PAGE_COUNTER_MAX pages), as runc shows it: the sandbox
// has no swap or kernel-memory limit of its own.
std::string StatsEventJson(const std::string& id, const Usage& u) {
  constexpr uint64_t kUnlimited = 9223372036854771712ull;
  const uint64_t mem_limit = u.memory_limit != 0 ? u.memory_limit : kUnlimited;
  std::string mem_usage = absl::StrCat("{\"limit\":", mem_limit);
  if (u.memory_bytes != 0) absl::StrAppend(&mem_usage, ",\"usage\":", u.memory_bytes);
  if (u.memory_max_bytes != 0) absl::StrAppend(&mem_usage, ",\"max\":", u.memory_max_bytes);
  absl::StrAppend(&mem_usage, ",\"failcnt\":", u.memory_failcnt, "}");
  std::string pids = "{";
  if (u.pids != 0) absl::StrAppend(&pids, "\"current\":", u.pids);
  if (u.pids_limit != 0) absl::StrAppend(&pids, u.pids != 0 ? "," : "", "\"limit\":", u.pids_limit);
  pids += "}";
  const uint64_t total = u.cpu_user_ns + u.cpu_system_ns;
  return absl::StrCat(
      "{\"type\":\"stats\",\"id\":", JsonQuote(id), ",\"data\":{",
      "\"cpu\":{\"usage\":{", total != 0 ? absl::StrCat("\"total\":", total, ",") : "",
      "\"kernel\":", u.cpu_system_ns, ",\"user\":", u.cpu_user_ns, "},\"throttling\":{}},",
      "\"cpuset\":{},",
      "\"memory\":{\"usage\":", mem_usage,
      ",\"swap\":{\"limit\":", kUnlimited, ",\"failcnt\":0},\"kernel\":{\"limit\":",
      kUnlimited, ",\"failcnt\":0},\"kernelTCP\":{\"limit\":", kUnlimited,
      ",\"failcnt\":0},\"raw\":{\"oom_kill\":", u.oom_kills, "}},",
      "\"pids\":", pids,
      ",\"blkio\":{},\"hugetlb\":{},\"intel_rdt\":{},\"network_interfaces\":null}}\n");
}

// events: with --stats one stats event; without, one every --interval
// (and an "oom" event when the Sentry's OOM killer ended a process) until
// the container stops, as runc events.
int CmdEvents(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci events", "[--stats] [--interval=DURATION] ID");
  bool once = false;
  std::string interval = "5s";
  fs.Bool("stats", &once, "print the container's statistics once and exit");
  fs.String("interval", &interval, "DURATION", "between two stats events (Go's syntax: 5s, 500ms)");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), "events");
  absl::Duration every;
  if (!absl::ParseDuration(interval, &every) || every <= absl::ZeroDuration()) {
    Fail(absl::InvalidArgumentError(absl::StrCat("--interval: not a duration: ", interval)));
  }
  ContainerState st = Load(id);
  uint64_t oom_kills = 0;
  for (bool first = true;; first = false) {
    const Status status = CurrentStatus(g.root, st);
    if (status == Status::kStopped || status == Status::kCreated) {
      if (!first) return 0;
      Fail(absl::FailedPreconditionError(
          absl::StrCat("container ", id, " is not running (", StatusName(status), ")")));
    }
    absl::StatusOr<Usage> u = UsageOf(st);
    if (!u.ok()) {
      if (!first && CurrentStatus(g.root, st) == Status::kStopped) return 0;
      Fail(Annotate(u.status(), absl::StrCat("events ", id)));
    }
    if (!first && u->oom_kills > oom_kills) {
      printf("{\"type\":\"oom\",\"id\":%s}\n", JsonQuote(id).c_str());
    }
    oom_kills = u->oom_kills;
    fputs(StatsEventJson(id, *u).c_str(), stdout);
    fflush(stdout);
    if (once) return 0;
    absl::SleepFor(every);
  }
}

// update: the running sandbox's limits from --resources (a
// linux.resources object, "-" for stdin, as containerd's shim and podman
// pass it) and the flags, which win. What the Sentry enforces itself
// changes: memory (its memory file's limit), CPUs (a quota rounded up to
// whole CPUs, what the sandbox sees), pids (fork's EAGAIN). The serve
// backend asks the init proxy's Sentry; the daemon backend asks sandboxd
// (Update), which sets the sandbox's cgroup too.
int CmdUpdate(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci update", "[--resources=FILE] [FLAGS] ID");
  std::string resources, memory, cpu_quota, cpu_period, pids_limit, unused;
  fs.String("resources", &resources, "FILE", "a linux.resources JSON object (\"-\": stdin)");
  fs.Alias("-r", "resources");
  fs.String("memory", &memory, "BYTES", "memory limit (k, m, g suffixes)");
  fs.String("cpu-quota", &cpu_quota, "MICROS", "CPU time per period");
  fs.String("cpu-period", &cpu_period, "MICROS", "the quota's period (default 100000)");
  fs.String("pids-limit", &pids_limit, "N", "the most tasks at once");
  for (const char* f : {"memory-swap", "memory-reservation", "kernel-memory", "kernel-memory-tcp",
                        "cpu-share", "cpu-rt-period", "cpu-rt-runtime", "blkio-weight"}) {
    fs.String(f, &unused, "VALUE", "accepted, not applied (a warning in --log)");
  }
  std::string cpuset_cpus, cpuset_mems;
  fs.String("cpuset-cpus", &cpuset_cpus, "LIST", "refused (cpusets are not supported)");
  fs.String("cpuset-mems", &cpuset_mems, "LIST", "refused (cpusets are not supported)");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), "update");
  if (!cpuset_cpus.empty() || !cpuset_mems.empty()) {
    Fail(absl::InvalidArgumentError("--cpuset-cpus/--cpuset-mems: cpusets are not supported"));
  }
  if (!unused.empty()) {
    LogLine("warning", "update: only --memory, --cpu-quota/--cpu-period and --pids-limit "
                       "are applied (the limits the Sentry enforces)");
  }
  LaunchSpec want;
  if (!resources.empty()) {
    std::string json;
    if (resources == "-") {
      std::stringstream ss;
      ss << std::cin.rdbuf();
      json = ss.str();
    } else {
      absl::StatusOr<std::string> j = ReadWhole(resources);
      if (!j.ok()) Fail(j.status());
      json = *j;
    }
    absl::StatusOr<LaunchSpec> r = ParseResourcesUpdate(json);
    if (!r.ok()) Fail(Annotate(r.status(), "update: --resources"));
    want = *std::move(r);
    for (const std::string& note : want.notes) LogLine("warning", absl::StrCat("update: ", note));
  }
  auto number = [](const std::string& flag, const std::string& v) -> uint64_t {
    std::string digits = absl::AsciiStrToLower(v);
    uint64_t mult = 1;
    if (!digits.empty() && (digits.back() == 'b')) digits.pop_back();
    if (!digits.empty()) {
      switch (digits.back()) {
        case 'k': mult = 1ull << 10; break;
        case 'm': mult = 1ull << 20; break;
        case 'g': mult = 1ull << 30; break;
        default: break;
      }
      if (mult != 1) digits.pop_back();
    }
    uint64_t n = 0;
    if (!absl::SimpleAtoi(digits, &n)) {
      Fail(absl::InvalidArgumentError(absl::StrCat("--", flag, ": not a number: ", v)));
    }
    return n * mult;
  };
  // -1 is unlimited, as runc's: the limit is lifted.
  if (!memory.empty()) {
    want.memory_unlimited = memory == "-1";
    want.memory_bytes = want.memory_unlimited ? 0 : number("memory", memory);
  }
  if (!pids_limit.empty()) {
    want.pids_unlimited = pids_limit == "-1";
    want.pids = want.pids_unlimited ? 0 : number("pids-limit", pids_limit);
  }
  if (!cpu_quota.empty()) {
    want.cpu_unlimited = cpu_quota == "-1";
    want.cpus = 0;
    if (!want.cpu_unlimited) {
      const uint64_t quota = number("cpu-quota", cpu_quota);
      const uint64_t period = cpu_period.empty() ? 100000 : number("cpu-period", cpu_period);
      if (period == 0) Fail(absl::InvalidArgumentError("--cpu-period: 0"));
      if (quota > 0) want.cpus = (quota + period - 1) / period;
    }
  }
  Status status;
  ContainerState st = LoadLive(id, &status);
  if (st.sandboxd_socket.empty() && !MakeBackend()->Serves()) {
    Fail(absl::UnimplementedError("update: not with --backend=run"));
  }
  if (want.memory_bytes == 0 && want.cpus == 0 && want.pids == 0 && !want.memory_unlimited &&
      !want.cpu_unlimited && !want.pids_unlimited) {
    return 0;
  }
  v1::Limits lim;
  lim.set_memory_bytes(want.memory_bytes);
  lim.set_cpu_millis(want.cpus * 1000);
  lim.set_pids(want.pids);
  v1::LimitsLifted lifted;
  lifted.set_memory(want.memory_unlimited);
  lifted.set_cpu(want.cpu_unlimited);
  lifted.set_pids(want.pids_unlimited);
  if (!st.sandboxd_socket.empty()) {
    // The daemon's Update: the Sentry's limits and the sandbox's cgroup.
    if (absl::Status s = DaemonUpdate(st.sandboxd_socket, id, lim, lifted); !s.ok()) {
      Fail(Annotate(s, "update"));
    }
    LogLine("info", absl::StrCat("updated ", id));
    return 0;
  }
  absl::StatusOr<UniqueFd> c = ConnectProxy(g.root, id);
  if (!c.ok()) Fail(c.status());
  control::Request req;
  req.set_id(1);
  *req.mutable_update()->mutable_limits() = lim;
  *req.mutable_update()->mutable_unlimited() = lifted;
  absl::StatusOr<control::Response> r = ProxyCall(c->get(), req);
  if (!r.ok()) Fail(Annotate(r.status(), "update"));
  LogLine("info", absl::StrCat("updated ", id));
  return 0;
}

int CmdPs(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci ps", "[--format=table|json] ID");
  std::string format = "table";
  fs.String("format", &format, "FORMAT", "table or json");
  fs.Alias("-f", "format");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 1), "ps");
  ContainerState st = Load(id);
  std::vector<pid_t> pids;
  if (CurrentStatus(g.root, st) != Status::kStopped) pids = ProcessTree(st.pid);
  if (format == "json") {
    printf("[%s]\n", absl::StrJoin(pids, ",").c_str());
  } else {
    printf("PID\n");
    for (pid_t p : pids) printf("%d\n", p);
  }
  return 0;
}

int CmdList(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci list", "[--format=table|json] [-q]");
  std::string format = "table";
  bool quiet = false;
  fs.String("format", &format, "FORMAT", "table or json");
  fs.Alias("-f", "format");
  fs.Bool("quiet", &quiet, "ids only");
  fs.Alias("-q", "quiet");
  fs.ParseOrExit(argv_in, 1);
  std::vector<std::string> json;
  if (!quiet && format != "json") printf("ID\tPID\tSTATUS\tBUNDLE\tCREATED\n");
  for (const std::string& id : ListIds(g.root)) {
    absl::StatusOr<ContainerState> st = ReadState(g.root, id);
    if (!st.ok()) continue;
    Status s = CurrentStatus(g.root, *st);
    if (quiet) {
      printf("%s\n", id.c_str());
    } else if (format == "json") {
      json.push_back(StateJson(*st, s));
    } else {
      printf("%s\t%d\t%s\t%s\t%s\n", id.c_str(), s == Status::kStopped ? 0 : st->pid,
             StatusName(s), st->bundle.c_str(), st->created.c_str());
    }
  }
  if (format == "json" && !quiet) printf("[%s]\n", absl::StrJoin(json, ",").c_str());
  return 0;
}

int CmdFeatures(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci features", "");
  fs.ParseOrExit(argv_in, 1);
  fputs(R"({
  "ociVersionMin": "1.0.0",
  "ociVersionMax": "1.0.2-dev",
  "hooks": [],
  "mountOptions": ["bind", "rbind", "ro", "rw", "size", "mode"],
  "linux": {
    "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "uts"],
    "capabilities": [],
    "cgroup": {"v1": false, "v2": false, "systemd": false, "systemdUser": false},
    "seccomp": {"enabled": false},
    "apparmor": {"enabled": false},
    "selinux": {"enabled": false}
  },
  "annotations": {
    "org.opencontainers.runc.version": "none",
    "io.sandboxd.oci.sandbox": "sentry"
  }
}
)", stdout);
  return 0;
}

// A proxy's spec, read again from the bundle create checked; a failure
// goes to create's pipe (`report_fd`) and ends the proxy with 125.
absl::StatusOr<LaunchSpec> ProxySpecOrReport(const std::string& bundle, int report_fd) {
  absl::StatusOr<std::string> config = ReadWhole(bundle + "/config.json");
  absl::StatusOr<LaunchSpec> spec =
      config.ok() ? ParseConfig(*config, bundle) : absl::StatusOr<LaunchSpec>(config.status());
  if (!spec.ok()) {
    const std::string m(spec.status().message());
    (void)!write(report_fd, m.data(), m.size());
    _exit(125);
  }
  return spec;
}

int CmdInitProxy(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci init-proxy", "--bundle=DIR --report-fd=N ID",
                    "(internal) the container's init proxy, exec'd by create");
  std::string bundle, hostname;
  int report_fd = -1;
  fs.String("bundle", &bundle, "DIR", "the bundle");
  fs.String("hostname", &hostname, "NAME", "the host name create chose");
  fs.Int("report-fd", &report_fd, "create's pipe");
  std::string restore_image;
  fs.String("restore-image", &restore_image, "DIR", "restore from this image");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 125), "init-proxy");
  absl::StatusOr<LaunchSpec> spec = ProxySpecOrReport(bundle, report_fd);
  InitProxyOptions o;
  o.root = g.root;
  o.id = id;
  o.sentry = SentryPath();
  o.spec = *std::move(spec);
  o.spec.hostname = hostname;
  o.spec.restore_image = restore_image;
  o.report_fd = report_fd;
  if (absl::Status st = ForServedSentry(&o.spec); !st.ok()) {
    (void)!write(report_fd, st.message().data(), st.message().size());
    _exit(125);
  }
  RunInitProxy(o);
}

int CmdExecProxy(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci exec-proxy", "--fd=N --pid=PID",
                    "(internal) an exec'd process's proxy, forked by exec");
  int fd = -1, pid = 0;
  fs.Int("fd", &fd, "the connection to the init proxy");
  fs.Int("pid", &pid, "the process, in the sandbox");
  fs.ParseOrExit(argv_in, 125);
  RunExecProxy(fd, pid);
}

int WaitForChild(pid_t child) {
  int ws = 0;
  while (waitpid(child, &ws, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

// exec with the daemon backend: the exec proxy is a fork of this process,
// which has not started gRPC (so the child may), and it reports on a pipe
// once the process runs.
int ExecThroughDaemon(const ContainerState& st, const LaunchSpec& p,
                      const std::string& console_socket, const std::string& pid_file,
                      bool detach) {
  UniqueFd slave;
  if (p.terminal) {
    absl::StatusOr<UniqueFd> c = OpenConsole(console_socket);
    if (!c.ok()) Fail(c.status());
    slave = *std::move(c);
  }
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) Fail(Errno("pipe"));
  fflush(stdout);
  fflush(stderr);
  const pid_t child = fork();
  if (child < 0) Fail(Errno("fork"));
  if (child == 0) {
    close(report[0]);
    if (slave.valid()) {
      for (int fd = 0; fd < 3; fd++) dup2(slave.get(), fd);
      slave.reset();
    }
    RunDaemonExecProxy(st.sandboxd_socket, st.id, p, report[1]);
  }
  close(report[1]);
  slave.reset();
  std::string got;
  char buf[512];
  ssize_t n;
  while ((n = read(report[0], buf, sizeof(buf))) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    got.append(buf, n);
  }
  close(report[0]);
  if (got.empty() || got[0] != '0') {
    WaitForChild(child);
    Fail(absl::FailedPreconditionError(absl::StrCat("exec: ", got.empty() ? "failed" : got)));
  }
  if (!pid_file.empty()) Check(WriteFileAtomic(pid_file, absl::StrCat(child)));
  if (detach) return 0;
  return WaitForChild(child);
}

int CmdDaemonProxy(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci daemon-proxy", "--bundle=DIR --report-fd=N ID",
                    "(internal) the init proxy of the daemon backend, exec'd by create");
  std::string bundle, hostname;
  int report_fd = -1;
  fs.String("bundle", &bundle, "DIR", "the bundle");
  fs.String("hostname", &hostname, "NAME", "the host name create chose");
  fs.Int("report-fd", &report_fd, "create's pipe");
  std::string restore_image;
  fs.String("restore-image", &restore_image, "DIR", "restore from this image (\"\": create)");
  const std::string id = OneId(fs.ParseOrExit(argv_in, 125), "daemon-proxy");
  absl::StatusOr<LaunchSpec> spec = ProxySpecOrReport(bundle, report_fd);
  DaemonProxyOptions o;
  o.socket = SandboxdSocket();
  o.root = g.root;
  o.id = id;
  o.spec = *std::move(spec);
  o.spec.hostname = hostname;
  o.spec.restore_image = restore_image;
  o.report_fd = report_fd;
  if (absl::Status st = ForServedSentry(&o.spec); !st.ok()) {
    (void)!write(report_fd, st.message().data(), st.message().size());
    _exit(125);
  }
  RunDaemonInitProxy(o);
}

int CmdExec(const std::vector<std::string>& argv_in) {
  flags::FlagSet fs("sandboxd-oci exec", "[FLAGS] ID [COMMAND [ARGS...]]");
  std::string process_file, pid_file, console_socket, cwd;
  std::vector<std::string> env;
  std::string user;
  bool detach = false, tty = false, unused_bool = false;
  std::string unused;
  int preserve_fds = 0;
  fs.String("process", &process_file, "FILE", "the process, as config.json's process");
  fs.Alias("-p", "process");
  fs.Bool("detach", &detach, "leave it running; its proxy's pid goes to --pid-file");
  fs.Alias("-d", "detach");
  fs.String("pid-file", &pid_file, "FILE", "where the exec proxy's pid goes");
  fs.String("console-socket", &console_socket, "PATH", "gets the pty master (terminal)");
  fs.Bool("tty", &tty, "a terminal (without --process)");
  fs.Alias("-t", "tty");
  fs.String("cwd", &cwd, "DIR", "the working directory (without --process)");
  fs.Repeated("env", &env, "K=V", "an environment variable (without --process)");
  fs.Alias("-e", "env");
  fs.String("user", &user, "UID[:GID]", "the user (without --process)");
  fs.Alias("-u", "user");
  fs.Bool("no-new-privs", &unused_bool, "accepted (the Sentry is the boundary)");
  fs.Repeated("cap", &env, "CAP", "refused");
  fs.String("apparmor", &unused, "PROFILE", "accepted (the Sentry is the boundary)");
  fs.String("process-label", &unused, "LABEL", "accepted (the Sentry is the boundary)");
  fs.Bool("ignore-paused", &unused_bool, "accepted");
  fs.Int("preserve-fds", &preserve_fds, "extra fds (only 0)");
  std::vector<std::string> args = fs.ParseOrExit(argv_in, 1);
  if (args.empty()) Fail(absl::InvalidArgumentError("exec wants a container id"));
  const std::string id = args[0];
  Check(CheckId(id));
  if (preserve_fds != 0) Fail(absl::InvalidArgumentError("--preserve-fds: only 0 is supported"));
  LaunchSpec p;
  if (!process_file.empty()) {
    absl::StatusOr<std::string> text = ReadWhole(process_file);
    if (!text.ok()) Fail(Annotate(text.status(), "--process"));
    absl::StatusOr<LaunchSpec> parsed = ParseProcess(*text);
    if (!parsed.ok()) Fail(Annotate(parsed.status(), "--process"));
    p = *std::move(parsed);
  } else {
    p.args.assign(args.begin() + 1, args.end());
    if (p.args.empty()) Fail(absl::InvalidArgumentError("exec: no command and no --process"));
    p.env = env;
    p.terminal = tty;
    if (!cwd.empty()) p.cwd = cwd;
    if (!user.empty()) {
      std::vector<std::string> ug = absl::StrSplit(user, ':');
      if (!absl::SimpleAtoi(ug[0], &p.uid) ||
          (ug.size() > 1 && !absl::SimpleAtoi(ug[1], &p.gid))) {
        Fail(absl::InvalidArgumentError("--user wants UID[:GID]"));
      }
    }
  }
  if (p.terminal && console_socket.empty()) {
    Fail(absl::InvalidArgumentError("a terminal (process.terminal) needs --console-socket"));
  }
  ContainerState st = Load(id);
  if (const Status status = CurrentStatus(g.root, st); status != Status::kRunning) {
    Fail(absl::FailedPreconditionError(absl::StrCat(
        "cannot exec in container ", id, ": it is not running (", StatusName(status), ")")));
  }
  if (!st.sandboxd_socket.empty()) return ExecThroughDaemon(st, p, console_socket, pid_file, detach);
  if (!MakeBackend()->Serves()) {
    Fail(absl::UnimplementedError("exec: not with --backend=run (use --backend=serve)"));
  }
  absl::StatusOr<UniqueFd> conn = ConnectProxy(g.root, id);
  if (!conn.ok()) Fail(conn.status());
  UniqueFd slave;
  std::vector<int> fds = {0, 1, 2};
  if (p.terminal) {
    absl::StatusOr<UniqueFd> c = OpenConsole(console_socket);
    if (!c.ok()) Fail(c.status());
    slave = *std::move(c);
    fds = {slave.get()};
  }
  control::Request req;
  req.set_id(1);
  *req.mutable_exec()->mutable_process() = ProcessSpecOf(p);
  absl::StatusOr<control::Response> r = ProxyCall(conn->get(), req, fds);
  if (!r.ok()) Fail(Annotate(r.status(), "exec"));
  slave.reset();
  const int pid_in_sandbox = r->exec_pid();
  std::vector<std::string> cmd = {SelfPath(), "exec-proxy",
                                  absl::StrCat("--fd=", conn->get()),
                                  absl::StrCat("--pid=", pid_in_sandbox)};
  std::vector<char*> cargv = CArgv(cmd);
  const pid_t child = fork();
  if (child < 0) Fail(Errno("fork"));
  if (child == 0) RunExecChild(cargv[0], cargv.data(), environ, conn->get());
  conn->reset();
  if (!pid_file.empty()) Check(WriteFileAtomic(pid_file, absl::StrCat(child)));
  LogLine("info", absl::StrCat("exec in ", id, ": pid ", pid_in_sandbox,
                               " in the sandbox, proxy ", child));
  if (detach) return 0;
  return WaitForChild(child);
}

int Main(int argc, char** argv) {
  flags::FlagSet fs("sandboxd-oci", "[GLOBAL FLAGS] COMMAND [FLAGS] [ARGS]",
                    "An OCI runtime with runc's command line whose containers "
                    "run in a Sentry.");
  fs.String("root", &g.root, "DIR", "where containers' state is kept");
  fs.String("log", &g.log, "FILE", "where errors and notes are logged");
  fs.String("log-format", &g.log_format, "text|json", "the log's format");
  fs.Bool("systemd-cgroup", &g.systemd_cgroup, "accepted (a systemd cgroupsPath gets no cgroup)");
  fs.Bool("debug", &g.debug, "accepted");
  std::string unused;
  fs.String("criu", &unused, "PATH", "accepted, unused");
  fs.String("rootless", &unused, "true|false|auto", "accepted, unused");
  fs.String("sentry", &g.sentry, "PATH",
            "the sentry binary (default: SANDBOXD_OCI_SENTRY, else the "
            "sentry beside this binary)");
  fs.Func("backend", "serve|run",
          "serve (the default): a `sentry serve` driven by the init proxy "
          "(exec, kill --all); run: `sentry run` (no exec)",
          [](absl::string_view v) {
            if (v != "serve" && v != "run") {
              return absl::InvalidArgumentError("wants serve or run");
            }
            g.backend = std::string(v);
            return absl::OkStatus();
          }, "serve");
  fs.String("sandboxd-socket", &g.sandboxd_socket, "PATH",
            "take sandboxes from the sandboxd on this socket (default: "
            "SANDBOXD_OCI_SOCKET; none: a Sentry of the container's own)");
  bool version = false;
  fs.Bool("version", &version, "print the version");
  fs.Alias("-v", "version");
  fs.set_footer(
      "Commands: create, start, run, state, kill, delete, exec, pause, resume,\n"
      "checkpoint, restore, events, update, ps, list, features.\n");
  std::vector<std::string> rest = fs.ParseOrExit(flags::Args(argc, argv), 1);
  if (version) {
    printf("sandboxd-oci version %s\nspec: 1.0.2-dev\n", kVersion);
    return 0;
  }
  if (rest.empty()) Fail(absl::InvalidArgumentError("no command (sandboxd-oci --help)"));
  if (g.log_format != "json" && g.log_format != "text") {
    Fail(absl::InvalidArgumentError("--log-format wants text or json"));
  }
  const std::string verb = rest[0];
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  // Go's flag syntax lets containerd spell a boolean with one dash
  // (`restore ... -no-subreaper`): those runc flags are taken so too. Not
  // for exec, whose arguments after the id are the program's.
  if (verb != "exec") {
    for (std::string& a : args) {
      for (const char* f : {"no-subreaper", "no-pivot", "no-new-keyring", "detach",
                            "tcp-established", "ext-unix-sk", "shell-job", "file-locks",
                            "leave-running", "force", "all"}) {
        if (a == absl::StrCat("-", f)) a = absl::StrCat("--", f);
      }
    }
  }
  if (verb == "create") return CmdCreate(args);
  if (verb == "start") return CmdStart(args);
  if (verb == "state") return CmdState(args);
  if (verb == "kill") return CmdKill(args);
  if (verb == "delete") return CmdDelete(args);
  if (verb == "ps") return CmdPs(args);
  if (verb == "list") return CmdList(args);
  if (verb == "features") return CmdFeatures(args);
  if (verb == "exec") return CmdExec(args);
  if (verb == "checkpoint") return CmdCheckpoint(args);
  if (verb == "restore") return CmdRestore(args);
  if (verb == "events") return CmdEvents(args);
  if (verb == "update") return CmdUpdate(args);
  if (verb == "run") return CmdRun(args);
  if (verb == "pause") return PauseOrResume(args, true);
  if (verb == "resume") return PauseOrResume(args, false);
  if (verb == "init-proxy") return CmdInitProxy(args);
  if (verb == "exec-proxy") return CmdExecProxy(args);
  if (verb == "daemon-proxy") return CmdDaemonProxy(args);
  Fail(absl::UnimplementedError(absl::StrCat("command not supported: ", verb)));
}

}  // namespace
}  // namespace sandboxd::oci

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  int rc = sandboxd::oci::Main(argc, argv);
  fflush(stdout);
  return rc;
}
