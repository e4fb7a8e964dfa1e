// sentry: runs one program in a sandbox.
//
//   sentry run [--platform=systrap] [--rootfs=DIR] [--cwd=DIR]
//              [--env=K=V ...] [--hostname=NAME] [--log-unimplemented]
//              [--strace] [--vdso=tsc|syscall]
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
#include "base/status_macros.h"
#include "sentry/fs/devfs.h"
#include "sentry/fs/file.h"
#include "sentry/fs/hostfs.h"
#include "sentry/fs/mappable.h"
#include "sentry/fs/overlay.h"
#include "sentry/fs/proc/procfs.h"
#include "sentry/fs/rootfs.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/tty/host_tty.h"
#include "sentry/fs/tty/pty.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/ctty.h"
#include "sentry/kernel/task.h"
#include "sentry/loader/elf_loader.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"
#include "sentry/syscalls/syscalls.h"
#include "sentry/vdso/vdso_mapping.h"

namespace sandboxd {
namespace {

constexpr int kExitUsage = 125;
constexpr int kExitCannotExec = 126;
constexpr int kExitNotFound = 127;

// st_dev of the sandbox's filesystems (the host's are not shown).
constexpr uint64_t kRootfsDev = 0x801;
constexpr uint64_t kUpperDev = 0x802;
constexpr uint64_t kOverlayDev = 0x803;
constexpr uint64_t kDevfsDev = 0x804;
constexpr uint64_t kShmDev = 0x805;
constexpr uint64_t kProcDev = 0x806;
constexpr uint64_t kDevptsDev = 0x807;

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
  bool strace = false;
  // --vdso=syscall: the vDSO makes every call a system call (for tests
  // and benchmarks of the trapping path); default: served from the TSC.
  bool vdso_tsc = true;
  // --systrap-fastpath=adaptive|off|timer: how hand-over waiters decide to
  // spin (platforms/systrap/fastpath.h); off and timer are for benchmarks.
  systrap::FastPathMode fastpath = systrap::FastPathMode::kAdaptive;
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
    if (a == "--strace") {
      o.strace = true;
      continue;
    }
    if (value("--vdso", &v)) {
      if (v != "tsc" && v != "syscall") {
        Die(kExitUsage, absl::StrCat("--vdso wants tsc or syscall, got: ", v));
      }
      o.vdso_tsc = v == "tsc";
      continue;
    }
    if (value("--systrap-fastpath", &v)) {
      absl::StatusOr<systrap::FastPathMode> m = systrap::ParseFastPathMode(v);
      if (!m.ok()) Die(kExitUsage, std::string(m.status().message()));
      o.fastpath = *m;
      continue;
    }
    // --systrap-patch=on|off: syscall patching (platforms/systrap/README.md,
    // "Syscall patching"). Until the stub's trampoline lands, "on" is
    // refused rather than accepted and silently ignored.
    if (value("--systrap-patch", &v)) {
      if (v == "off") continue;
      if (v == "on") {
        Die(kExitUsage,
            "--systrap-patch=on: syscall patching is not built yet (only its "
            "byte-level pieces, platforms/systrap/patch.h); use off");
      }
      Die(kExitUsage, absl::StrCat("--systrap-patch wants on or off, got: ", v));
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

// Finds the program in the sandbox's filesystem, searching PATH for a bare
// name as runc and docker do. Dies with 126/127 like a shell.
fs::Location FindProgram(fs::Vfs& vfs, const fs::FsContext& ctx,
                         const Options& o, std::string* path) {
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
    fs::Location loc;
    int r = vfs.Resolve(ctx, ctx.cwd(), c, true, &loc);
    if (r < 0) {
      if (r != -ENOENT && r != -ENOTDIR) last_err = -r;
      continue;
    }
    fs::Attr a;
    if (loc.inode().GetAttr(&a) != 0 || loc.inode().Type() != S_IFREG ||
        (a.mode & 0111) == 0) {
      last_err = EACCES;
      continue;
    }
    *path = c;
    return loc;
  }
  Die(last_err == ENOENT ? kExitNotFound : kExitCannotExec,
      absl::StrCat(prog, ": ", strerror(last_err)));
}

// /dev: devfs, never the host's, with devpts at /dev/pts and, when the
// Sentry runs on a host terminal, /dev/console; /dev/shm: a tmpfs of its
// own, as on Linux. The mountpoint is created in the overlay's upper layer
// when the rootfs has no /dev. /dev/tty is the caller's controlling
// terminal, which the open path resolves (syscalls/sys_tty.cc).
absl::Status MountDev(fs::Vfs& vfs, const fs::FsContext& ctx,
                      mm::MemoryFile* memfile, fs::tty::JobControl* jc,
                      const std::shared_ptr<fs::tty::HostTerminal>& console) {
  fs::Location root = vfs.Root();
  fs::Location dev;
  int r = vfs.Lookup(root, "dev", &dev);
  if (r == -ENOENT) {
    fs::CreateRequest req;
    req.type = S_IFDIR;
    req.mode = 0755;
    r = vfs.Create(root, "dev", req, &dev);
  }
  if (r < 0) return ErrnoStatus("mounting /dev: looking up /dev", -r);
  fs::DevFsOptions dopts;
  dopts.dev = kDevfsDev;
  static std::shared_ptr<fs::tty::DevPts> devpts =
      fs::tty::DevPts::Create(kDevptsDev, jc);
  dopts.pts = devpts->Root();
  dopts.open_ptmx = [](std::shared_ptr<fs::Inode> ptmx, int flags,
                       std::shared_ptr<fs::File>* out) {
    return devpts->OpenMaster(std::move(ptmx), flags, out);
  };
  if (console != nullptr) {
    dopts.open_console = [console](std::shared_ptr<fs::File>* out) {
      return console->OpenProgramSide(O_RDWR, nullptr, out);
    };
  }
  static fs::DevFs* devfs = new fs::DevFs(std::move(dopts));
  if (console != nullptr) {
    std::shared_ptr<fs::Inode> node;
    if (devfs->Root()->Lookup("console", &node) == 0) console->set_node(node);
  }
  r = vfs.MountAt(dev, devfs->Root(), "devtmpfs", "devtmpfs", false);
  if (r < 0) return ErrnoStatus("mounting devfs on /dev", -r);
  fs::Location shm;
  r = vfs.Resolve(ctx, root, "/dev/shm", true, &shm);
  if (r < 0) return ErrnoStatus("mounting /dev/shm: looking up /dev/shm", -r);
  fs::TmpFsOptions shm_opts;
  shm_opts.dev = kShmDev;
  shm_opts.root_mode = 01777;
  static fs::TmpFs* shmfs = new fs::TmpFs(memfile, shm_opts);
  r = vfs.MountAt(shm, shmfs->Root(), "tmpfs", "shm", false);
  if (r < 0) return ErrnoStatus("mounting tmpfs on /dev/shm", -r);
  return absl::OkStatus();
}

// /proc: the sandbox's procfs over whatever the rootfs has there (hostfs
// shows the host's /proc mountpoint as an empty directory).
absl::Status MountProc(fs::Vfs& vfs, kernel::Kernel* k,
                       fs::proc::HostInfo host) {
  fs::Location root = vfs.Root();
  fs::Location proc;
  int r = vfs.Lookup(root, "proc", &proc);
  if (r == -ENOENT) {
    fs::CreateRequest req;
    req.type = S_IFDIR;
    req.mode = 0555;
    r = vfs.Create(root, "proc", req, &proc);
  }
  if (r < 0) return ErrnoStatus("mounting /proc: looking up /proc", -r);
  fs::proc::ProcFsOptions popts;
  popts.dev = kProcDev;
  popts.host = std::move(host);
  static fs::proc::ProcFs* procfs = new fs::proc::ProcFs(k, std::move(popts));
  r = vfs.MountAt(proc, procfs->Root(), "proc", "proc", false);
  if (r < 0) return ErrnoStatus("mounting procfs on /proc", -r);
  return absl::OkStatus();
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
  // On a host terminal ^Z is the sandbox's too: it stops the sandbox's
  // foreground job, not the Sentry.
  const bool on_tty = isatty(STDIN_FILENO) == 1;
  if (on_tty) sigaddset(&fwd, SIGTSTP);
  pthread_sigmask(SIG_BLOCK, &fwd, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // What /proc shows of the host, read while the host's /proc is at hand.
  fs::proc::HostInfo host_info = fs::proc::ReadHostInfo();

  auto mf = mm::MemoryFile::Create();
  if (!mf.ok()) Die(kExitUsage, std::string(mf.status().message()));
  auto platform = systrap::Systrap::Create((*mf)->fd(), o.fastpath);
  if (!platform.ok()) Die(kExitUsage, std::string(platform.status().message()));
  mm::MemoryFile* memfile = mf->get();
  // Started early: the Timekeeper calibrates the TSC while the rest starts.
  vdso::Vdso::Options vdso_opts;
  vdso_opts.use_tsc = o.vdso_tsc;
  auto the_vdso = vdso::Vdso::Create(memfile, vdso_opts);
  if (!the_vdso.ok()) Die(kExitUsage, absl::StrCat("vDSO: ", the_vdso.status().message()));
  uintptr_t min_addr = (*platform)->MinUserAddress();
  uintptr_t max_addr = (*platform)->MaxUserAddress();

  static syscalls::Table table;
  table.set_trace(o.strace);
  kernel::KernelOptions kopts;
  kopts.hostname = o.hostname;
  kopts.vdso = the_vdso->get();
  kernel::Kernel k(std::move(*mf), std::move(*platform), &table, kopts);
  static std::unique_ptr<fs::tty::JobControl> job_control =
      kernel::NewJobControl(&k);
  // The host terminal, when stdin is one: the sandbox's console and its
  // init's controlling terminal.
  std::shared_ptr<fs::tty::HostTerminal> console;
  if (on_tty) {
    int d = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
    if (d >= 0) {
      console = std::make_shared<fs::tty::HostTerminal>(UniqueFd(d),
                                                        job_control.get());
    }
  }

  // The root filesystem: the host directory, read-only, under a tmpfs in
  // the memory file that takes every write.
  auto root_fd = fs::OpenRootfs(o.rootfs);
  if (!root_fd.ok()) Die(kExitUsage, std::string(root_fd.status().message()));
  auto lower = fs::hostfs::NewRoot(std::move(*root_fd), kRootfsDev);
  if (!lower.ok()) Die(kExitUsage, std::string(lower.status().message()));
  fs::TmpFsOptions upper_opts;
  upper_opts.dev = kUpperDev;
  upper_opts.root_mode = 0755;
  static fs::TmpFs* upper = new fs::TmpFs(memfile, upper_opts);
  static fs::OverlayFs* overlay =
      new fs::OverlayFs(upper->Root(), *lower, kOverlayDev);
  auto vfs = std::make_shared<fs::Vfs>(overlay->Root(), "overlay", "rootfs",
                                       /*read_only=*/false);
  k.set_vfs(vfs);
  auto fsctx = std::make_shared<fs::FsContext>(vfs->Root(), vfs->Root());
  if (absl::Status s = MountDev(*vfs, *fsctx, memfile, job_control.get(), console);
      !s.ok()) {
    Die(kExitUsage, std::string(s.message()));
  }
  if (absl::Status s = MountProc(*vfs, &k, std::move(host_info)); !s.ok()) {
    Die(kExitUsage, std::string(s.message()));
  }
  fs::Location cwd;
  int cr = vfs->Resolve(*fsctx, vfs->Root(), o.cwd, true, &cwd);
  if (cr == 0 && cwd.inode().Type() != S_IFDIR) cr = -ENOTDIR;
  if (cr < 0) Die(kExitUsage, absl::StrCat("--cwd=", o.cwd, ": ", strerror(-cr)));
  fsctx->set_cwd(cwd);
  std::string path;
  fs::Location prog = FindProgram(*vfs, *fsctx, o, &path);

  auto as = k.platform().NewAddressSpace();
  if (!as.ok()) Die(kExitUsage, std::string(as.status().message()));
  auto mm = std::make_shared<mm::MM>(memfile, std::move(*as), min_addr,
                                     max_addr);
  fs::InodeMappable exe(prog.dentry->inode(), vfs->PathOf(vfs->Root(), prog));
  auto open_interp =
      [&](const std::string& p) -> absl::StatusOr<std::shared_ptr<mm::Mappable>> {
    fs::Location l;
    int r = vfs->Resolve(*fsctx, vfs->Root(), p, true, &l);
    if (r < 0) return ErrnoStatus(p, -r);
    if (l.inode().Type() != S_IFREG) return ErrnoStatus(p, EACCES);
    return std::shared_ptr<mm::Mappable>(std::make_shared<fs::InodeMappable>(
        l.dentry->inode(), vfs->PathOf(vfs->Root(), l)));
  };
  auto image = loader::LoadProgram(exe, *mm, open_interp);
  if (!image.ok()) {
    Die(kExitCannotExec, absl::StrCat(o.argv[0], ": ", image.status().message()));
  }
  auto vdso_base = (*the_vdso)->Map(*mm);
  if (!vdso_base.ok()) Die(kExitUsage, std::string(vdso_base.status().message()));
  image->vdso = *vdso_base;
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
    if (console != nullptr && console->Same(fd)) {
      std::shared_ptr<fs::File> f = console->OpenHostFd(fd);
      if (f != nullptr) fds->InstallAt(fd, std::move(f), false);
      continue;
    }
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (d < 0) continue;  // not open in the sentry: not open in the sandbox
    auto host = std::make_shared<fs::HostFile>(UniqueFd(d));
    host->set_inherited_fd(fd);  // what a restore asks its caller for
    fds->InstallAt(fd, std::move(host), false);
  }

  // The program's first clock_gettime should not trap: the rate is known
  // 1 ms after the Vdso's creation, usually long before this point.
  (*the_vdso)->timekeeper().WaitCalibrated();
  auto init = k.CreateInit(mm, fds, fsctx, *cpu);
  if (!init.ok()) Die(kExitUsage, std::string(init.status().message()));
  kernel::Task* init_task = *init;
  {
    kernel::ThreadGroup& g = init_task->group();
    size_t slash = path.rfind('/');
    g.comm = path.substr(slash == std::string::npos ? 0 : slash + 1, 15);
    g.exe = vfs->PathOf(vfs->Root(), prog);
    g.arg_start = spec.arg_start;
    g.arg_end = spec.arg_end;
    g.env_start = spec.env_start;
    g.env_end = spec.env_end;
    g.auxv = spec.auxv;
  }
  mm.reset();
  if (console != nullptr) k.SetInitTerminal(console);

  // Signals for the sandbox. What the host terminal generates (it sends
  // them to its foreground group, the Sentry's) goes to the sandbox's
  // foreground process group, a resize as SIGWINCH to it; the rest to init.
  std::thread forwarder([&k, &fwd, console] {
    for (;;) {
      int sig = sigwaitinfo(&fwd, nullptr);
      if (sig <= 0) continue;
      if (console != nullptr) {
        pid_t fg = console->foreground();
        if (sig == SIGWINCH) {
          console->HostResized();
          continue;
        }
        if ((sig == SIGINT || sig == SIGQUIT || sig == SIGTSTP) && fg > 0) {
          k.SignalPgrp(fg, sig);
          continue;
        }
      }
      std::shared_ptr<kernel::Task> t = k.FindTask(1);
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
  // Stop the Timekeeper while the memory file it writes into still exists:
  // the Kernel owns that file and, declared after the Vdso, would be
  // destroyed before it.
  the_vdso->reset();
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
