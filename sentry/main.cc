// sentry: runs one program in a sandbox.
//
//   sentry run [--platform=systrap] [--rootfs=DIR] [--cwd=DIR]
//              [--env=K=V ...] [--hostname=NAME] [--log-unimplemented]
//              -- PROGRAM [ARGS...]
//
// Exit status: the program's (128+N when killed by signal N); 125 when the
// sentry's own arguments are wrong or it fails to start; 126 when PROGRAM
// cannot be executed; 127 when it does not exist.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/unique_fd.h"
#include "platforms/systrap/systrap.h"
#include "sentry/fs/file.h"
#include "sentry/fs/rootfs.h"
#include "sentry/kernel/task.h"
#include "sentry/loader/elf_loader.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd {
namespace {

constexpr int kExitUsage = 125;
constexpr int kExitCannotExec = 126;
constexpr int kExitNotFound = 127;

[[noreturn]] void Die(int code, const std::string& msg) {
  fprintf(stderr, "sentry: %s\n", msg.c_str());
  fflush(stderr);
  _exit(code);
}

void Usage() {
  fprintf(stderr,
          "usage: sentry run [--platform=systrap] [--rootfs=DIR] [--cwd=DIR] "
          "[--env=K=V ...] [--hostname=NAME] -- PROGRAM [ARGS...]\n");
}

struct Options {
  std::string platform = "systrap";
  std::string rootfs = "/";
  std::string cwd = "/";
  std::string hostname = "sandbox";
  std::vector<std::string> env;
  std::vector<std::string> argv;
  bool log_unimplemented = false;
};

Options ParseArgs(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "run") != 0)) {
    Usage();
    if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 ||
                      std::strcmp(argv[1], "-h") == 0)) {
      _exit(0);
    }
    Die(kExitUsage, argc < 2 ? "missing command (want: run)"
                             : absl::StrCat("unknown command: ", argv[1]));
  }
  Options o;
  int i = 2;
  for (; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--") {
      i++;
      break;
    }
    auto value = [&](absl::string_view name, std::string* out) {
      std::string prefix = absl::StrCat(name, "=");
      if (absl::StartsWith(a, prefix)) {
        *out = a.substr(prefix.size());
        return true;
      }
      return false;
    };
    std::string v;
    if (value("--platform", &o.platform) || value("--rootfs", &o.rootfs) ||
        value("--cwd", &o.cwd) || value("--hostname", &o.hostname)) {
      continue;
    }
    if (value("--env", &v)) {
      if (v.find('=') == std::string::npos || v[0] == '=') {
        Die(kExitUsage, absl::StrCat("--env wants K=V, got: ", v));
      }
      o.env.push_back(v);
      continue;
    }
    if (a == "--log-unimplemented") {
      o.log_unimplemented = true;
      continue;
    }
    if (absl::StartsWith(a, "-")) {
      Usage();
      Die(kExitUsage, absl::StrCat("unknown flag: ", a));
    }
    break;  // the program, without "--"
  }
  for (; i < argc; i++) o.argv.push_back(argv[i]);
  if (o.argv.empty()) {
    Usage();
    Die(kExitUsage, "no program to run");
  }
  if (o.platform != "systrap") {
    Die(kExitUsage, absl::StrCat("unknown platform: ", o.platform,
                                 " (available: systrap)"));
  }
  return o;
}

std::string EnvValue(const std::vector<std::string>& env, const std::string& k) {
  for (const auto& kv : env) {
    if (absl::StartsWith(kv, k + "=")) return kv.substr(k.size() + 1);
  }
  return "";
}

// Opens the program inside the rootfs, searching PATH for a bare name as
// runc and docker do. Dies with 126/127 like a shell.
UniqueFd OpenProgram(int root, const Options& o, std::string* path) {
  std::vector<std::string> candidates;
  const std::string& prog = o.argv[0];
  if (prog.find('/') != std::string::npos) {
    candidates.push_back(prog);
  } else {
    std::string search = EnvValue(o.env, "PATH");
    if (search.empty()) {
      search = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    }
    for (absl::string_view dir : absl::StrSplit(search, ':')) {
      if (dir.empty()) continue;
      candidates.push_back(absl::StrCat(dir, "/", prog));
    }
  }
  int last_err = ENOENT;
  for (const std::string& c : candidates) {
    std::string abs = c[0] == '/' ? c : absl::StrCat(o.cwd, "/", c);
    int64_t fd = fs::OpenInRoot(root, abs, O_RDONLY);
    if (fd < 0) {
      if (-fd != ENOENT && -fd != ENOTDIR) last_err = static_cast<int>(-fd);
      continue;
    }
    UniqueFd f(static_cast<int>(fd));
    struct stat st;
    if (fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        (st.st_mode & 0111) == 0) {
      last_err = EACCES;
      continue;
    }
    *path = abs;
    return f;
  }
  Die(last_err == ENOENT ? kExitNotFound : kExitCannotExec,
      absl::StrCat(prog, ": ", strerror(last_err)));
}

int Run(const Options& o) {
  // Before anything maps large ranges or starts threads.
  if (absl::Status s = systrap::ReserveStubWindow(); !s.ok()) {
    Die(kExitUsage, std::string(s.message()));
  }
  // Terminal and termination signals are the sandbox's: a thread below
  // forwards them to its init. Blocked here so every thread inherits that.
  sigset_t fwd;
  sigemptyset(&fwd);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGWINCH}) {
    sigaddset(&fwd, s);
  }
  pthread_sigmask(SIG_BLOCK, &fwd, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto root = fs::OpenRootfs(o.rootfs);
  if (!root.ok()) Die(kExitUsage, std::string(root.status().message()));
  int64_t cwd = fs::OpenInRoot(root->get(), o.cwd, O_PATH | O_DIRECTORY);
  if (cwd < 0) {
    Die(kExitUsage, absl::StrCat("--cwd=", o.cwd, ": ", strerror(-cwd)));
  }
  close(static_cast<int>(cwd));
  std::string path;
  UniqueFd prog = OpenProgram(root->get(), o, &path);

  auto mf = mm::MemoryFile::Create();
  if (!mf.ok()) Die(kExitUsage, std::string(mf.status().message()));
  auto platform = systrap::Systrap::Create((*mf)->fd());
  if (!platform.ok()) Die(kExitUsage, std::string(platform.status().message()));
  mm::MemoryFile* memfile = mf->get();
  uintptr_t min_addr = (*platform)->MinUserAddress();
  uintptr_t max_addr = (*platform)->MaxUserAddress();

  static syscalls::Table table;
  kernel::KernelOptions kopts;
  kopts.hostname = o.hostname;
  kernel::Kernel k(std::move(*mf), std::move(*platform), &table, kopts);

  auto as = k.platform().NewAddressSpace();
  if (!as.ok()) Die(kExitUsage, std::string(as.status().message()));
  auto mm = std::make_shared<mm::MM>(memfile, std::move(*as), min_addr,
                                     max_addr);
  auto image = loader::LoadElf(prog.get(), *mm);
  if (!image.ok()) {
    Die(kExitCannotExec, absl::StrCat(o.argv[0], ": ", image.status().message()));
  }
  loader::StackSpec spec;
  spec.argv = o.argv;
  spec.envp = o.env;
  spec.execfn = path;
  if (getrandom(spec.random, sizeof(spec.random), 0) != sizeof(spec.random)) {
    Die(kExitUsage, "getrandom failed");
  }
  auto cpu = loader::SetupStack(*mm, *image, spec);
  if (!cpu.ok()) Die(kExitCannotExec, std::string(cpu.status().message()));

  rlimit nofile;
  getrlimit(RLIMIT_NOFILE, &nofile);
  auto fds = std::make_shared<fs::FdTable>(nofile.rlim_cur);
  for (int fd = 0; fd < 3; fd++) {
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d < 0) continue;  // not open in the sentry: not open in the sandbox
    fds->InstallAt(fd, std::make_shared<fs::HostFile>(UniqueFd(d)), false);
  }

  auto init = k.CreateInit(mm, fds, *cpu);
  if (!init.ok()) Die(kExitUsage, std::string(init.status().message()));
  kernel::Task* init_task = *init;
  mm.reset();

  std::thread forwarder([&k, &fwd] {
    for (;;) {
      int sig = sigwaitinfo(&fwd, nullptr);
      if (sig <= 0) continue;
      kernel::Task* t = k.FindTask(1);
      if (t != nullptr) t->SendSignal(sig, 0);
    }
  });
  forwarder.detach();

  kernel::ExitStatus st = k.RunUntilInitExits(init_task);
  if (o.log_unimplemented) {
    for (const auto& [nr, count] : k.UnimplementedCounts()) {
      const char* name = nr < syscalls::kMaxSyscall ? table.entry(nr).name : nullptr;
      fprintf(stderr, "sentry: unimplemented syscall %lu%s%s: %lu calls\n",
              static_cast<unsigned long>(nr), name ? " " : "", name ? name : "",
              static_cast<unsigned long>(count));
    }
  }
  return st.ShellStatus();
}

}  // namespace
}  // namespace sandboxd

int main(int argc, char** argv) {
  sandboxd::Options o = sandboxd::ParseArgs(argc, argv);
  int status = sandboxd::Run(o);
  fflush(stdout);
  fflush(stderr);
  _exit(status);
}
