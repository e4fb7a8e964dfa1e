#include "sentry/boot.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/thread.h"
#include "sentry/fs/credentials.h"
#include "sentry/fs/devfs.h"
#include "sentry/fs/file.h"
#include "sentry/fs/hostfs.h"
#include "sentry/fs/mappable.h"
#include "sentry/fs/overlay.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/tty/pty.h"
#include "sentry/kernel/ctty.h"
#include "sentry/loader/elf_loader.h"
#include "sentry/mm/mm.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/image.h"
#include "sentry/state/kernel_state.h"
#include "sentry/state/loader.h"
#include "sentry/state/mm_state.h"
#include "sentry/state/pages.h"
#include "sentry/fs/lock.h"
#include "sentry/vdso/timekeeper.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::boot {
namespace {

std::shared_ptr<const fs::Credentials> CredentialsOf(const ProcessConfig& p) {
  if (p.uid == 0 && p.gid == 0 && p.groups.empty()) return fs::Credentials::Root();
  return fs::Credentials::ForUser(p.uid, p.gid, p.groups);
}

// st_dev of the sandbox's filesystems (the host's are not shown).
constexpr uint64_t kRootfsDev = 0x801;
constexpr uint64_t kUpperDev = 0x802;
constexpr uint64_t kOverlayDev = 0x803;
constexpr uint64_t kDevfsDev = 0x804;
constexpr uint64_t kShmDev = 0x805;
constexpr uint64_t kProcDev = 0x806;
constexpr uint64_t kDevptsDev = 0x807;
// The spec's mounts: kMountDev + their index (mount(2)'s tmpfs start at
// 0x810, sys_mount.cc).
constexpr uint64_t kMountDev = 0x880;

// The root of the bind mount `m`, a hostfs labelled with its target.
absl::StatusOr<std::shared_ptr<fs::Inode>> BindRoot(MountConfig& m,
                                                    uint64_t dev) {
  fs::hostfs::MountOptions o;
  o.writable = !m.read_only;
  o.label = m.target;
  auto root = fs::hostfs::NewMountRoot(std::move(m.host), dev, o);
  if (!root.ok()) {
    return Annotate(root.status(), absl::StrCat("bind mount on ", m.target));
  }
  return root;
}

std::string EnvValue(const std::vector<std::string>& env, const std::string& k) {
  for (const auto& kv : env) {
    if (absl::StartsWith(kv, k + "=")) return kv.substr(k.size() + 1);
  }
  return "";
}

// A failure of the sandbox's own making, never mistaken for "program not
// found" by ShellExitCodeFor.
absl::Status SetupError(absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(err)));
}

// Finds the program in the sandbox's filesystem, searching PATH for a bare
// name as runc and docker do. NotFound / FailedPrecondition as a shell's
// 127 / 126.
absl::StatusOr<fs::Location> FindProgram(fs::Vfs& vfs, const fs::FsContext& ctx,
                                         const ProcessConfig& p,
                                         std::string* path) {
  std::vector<std::string> candidates;
  const std::string& prog = p.argv[0];
  if (prog.find('/') != std::string::npos) {
    candidates.push_back(prog);
  } else {
    std::string search = EnvValue(p.env, "PATH");
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
  std::string msg = absl::StrCat(prog, ": ", strerror(last_err));
  if (last_err == ENOENT) return absl::NotFoundError(msg);
  return absl::FailedPreconditionError(msg);
}

// The home directory of `uid` in the sandbox's /etc/passwd; "/" when
// there is none (no file, no such user), as docker does.
std::string HomeOf(fs::Vfs& vfs, const fs::FsContext& ctx, uint32_t uid) {
  fs::Location loc;
  if (vfs.Resolve(ctx, vfs.Root(), "/etc/passwd", true, &loc) != 0 ||
      loc.inode().Type() != S_IFREG) {
    return "/";
  }
  std::string text;
  char buf[16384];
  for (uint64_t off = 0; text.size() < (4u << 20);) {
    int64_t n = loc.inode().Read(buf, sizeof(buf), off);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    off += static_cast<uint64_t>(n);
  }
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // name:password:uid:gid:gecos:home:shell
    std::vector<absl::string_view> f = absl::StrSplit(line, ':');
    uint32_t u;
    if (f.size() >= 7 && absl::SimpleAtoi(f[2], &u) && u == uid && !f[5].empty()) {
      return std::string(f[5]);
    }
  }
  return "/";
}

// What the sandbox is shown of the host's CPUs under a quota of `cpus`
// (0: no quota): /proc/cpuinfo's first `cpus` processors and their count.
fs::proc::HostInfo LimitCpus(fs::proc::HostInfo host, int cpus) {
  if (cpus <= 0 || cpus >= host.num_cpus) return host;
  host.num_cpus = cpus;
  // cpuinfo is one block per processor, blocks separated by a blank line.
  size_t pos = 0;
  for (int i = 0; i < cpus && pos != std::string::npos; i++) {
    pos = host.cpuinfo.find("\n\n", pos);
    if (pos != std::string::npos) pos += 2;
  }
  if (pos != std::string::npos) host.cpuinfo.resize(pos);
  return host;
}

}  // namespace

int ShellExitCodeFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kNotFound:
      return 127;
    case absl::StatusCode::kFailedPrecondition:
      return 126;
    default:
      return 125;
  }
}

absl::StatusOr<Prewarmed> Prewarm(const PrewarmOptions& o, StageClock* clock) {
  ASSIGN_OR_RETURN(const platform::Backend* backend,
                   platform::Registry::Get().Lookup(o.platform));
  ASSIGN_OR_RETURN(
      platform::OptionValues options,
      platform::Registry::Get().OptionsFor(*backend, o.platform_options));
  Prewarmed pw;
  // What /proc shows of the host, read while the host's /proc is at hand.
  pw.host = fs::proc::ReadHostInfo();
  bool use_tsc = o.vdso_tsc;
  if (o.isolate) {
    // The vDSO's check of the host's TSC reads /proc and /sys, which are
    // gone after isolation: decide here.
    std::string why_not;
    use_tsc = use_tsc && vdso::HostTscUsable(&why_not);
  }
  clock->Mark(Stage::kHostInfo);
  // Host paths (/dev/kvm) are opened before isolation leaves only an
  // empty root. Whether the platform works is still its factory's to say.
  if (o.isolate && backend->preopen != nullptr) {
    RETURN_IF_ERROR(backend->preopen());
  }
  if (o.isolate) RETURN_IF_ERROR(o.isolate(clock));
  auto mf = mm::MemoryFile::Create();
  if (!mf.ok()) return Annotate(mf.status(), "memory file");
  clock->Mark(Stage::kMemoryFile);
  platform::CreateArgs args;
  args.memfile_fd = (*mf)->fd();
  args.memfile_max = (*mf)->max_size();
  auto platform = backend->create(args, options);
  if (!platform.ok()) {
    return Annotate(platform.status(), absl::StrCat(o.platform, " platform"));
  }
  clock->Mark(Stage::kPlatform);
  // The Timekeeper calibrates the TSC in the background from here on.
  vdso::Vdso::Options vdso_opts;
  vdso_opts.use_tsc = use_tsc;
  auto the_vdso = vdso::Vdso::Create(mf->get(), vdso_opts);
  if (!the_vdso.ok()) return Annotate(the_vdso.status(), "vDSO");
  clock->Mark(Stage::kVdso);
  // Every thread the Sentry needs before the program runs is made here
  // (after the platform forked its template, which wants one thread), so
  // that a host which refuses one fails the start with its reason.
  RETURN_IF_ERROR(waiter::TimerThread::Get().Start());
  // While the Timekeeper calibrates.
  if (o.prepare_address_space) {
    absl::StatusOr<bool> made = (*platform)->PrepareAddressSpace();
    if (!made.ok()) {
      return Annotate(made.status(), "the first address space");
    }
    if (*made) clock->Mark(Stage::kSpareStub);
  }
  // Where it fails (an older kernel) pages are allocated when first
  // touched, as without it.
  if (o.populate_bytes != 0 && (*mf)->Populate(o.populate_bytes).ok()) {
    clock->Mark(Stage::kMemoryFilePopulate);
  }
  if (o.wait_calibration) {
    (*the_vdso)->timekeeper().WaitCalibrated();
    clock->Mark(Stage::kVdsoCalibration);
  }
  if (o.sentry_seccomp) {
    auto filter = host_filter::Build();
    if (!filter.ok()) return Annotate(filter.status(), "the Sentry's seccomp filter");
    pw.filter = std::move(*filter);
    clock->Mark(Stage::kSeccompFilter);
  }
  pw.memfile = std::move(*mf);
  pw.platform = std::move(*platform);
  pw.vdso = std::move(*the_vdso);
  return pw;
}

// ---------------------------------------------------------------------------
// Sandbox

struct Sandbox::Loaded {
  std::shared_ptr<mm::MM> mm;
  platform::CpuState cpu;
  loader::ExecImage image;
};

Sandbox::~Sandbox() {
  if (runner_.joinable()) {
    KillAll();
    runner_.join();
  }
  std::map<pid_t, std::unique_ptr<fs::tty::PtyRelay>> relays;
  {
    absl::MutexLock l(&mu_);
    relays.swap(relays_);
  }
  relays.clear();  // their masters close while the kernel exists
  // Stop the Timekeeper while the memory file it writes into (the
  // kernel's) still exists.
  vdso_.reset();
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::NewKernel(
    Prewarmed& pw, const std::string& hostname, const Limits& lim,
    bool strace, Stdio& stdio) {
  std::unique_ptr<Sandbox> sb(new Sandbox());
  sb->table_.set_trace(strace);
  sb->vdso_ = std::move(pw.vdso);
  sb->filter_ = std::move(pw.filter);
  kernel::KernelOptions kopts;
  kopts.hostname = hostname;
  kopts.vdso = sb->vdso_.get();
  const int cpus = lim.cpu_millis == 0
                       ? 0
                       : static_cast<int>((lim.cpu_millis + 999) / 1000);
  kopts.max_tasks = lim.pids;
  kopts.max_cpus = cpus;
  // Under a CPU quota, throttled time must not count as CPU time.
  kopts.thread_cpu_clocks = lim.cpu_millis != 0;
  kopts.memory_limit = lim.memory_bytes;
  kopts.total_ram = lim.memory_bytes != 0 && (pw.host.mem_total == 0 ||
                                              lim.memory_bytes < pw.host.mem_total)
                        ? lim.memory_bytes
                        : pw.host.mem_total;
  sb->kernel_ = std::make_unique<kernel::Kernel>(
      std::move(pw.memfile), std::move(pw.platform), &sb->table_, kopts);
  kernel::Kernel& k = *sb->kernel_;
  k.memory_file().SetLimit(mm::ApplicationMemoryLimit(lim.memory_bytes));
  sb->job_control_ = kernel::NewJobControl(&k);
  // The terminal of init's stdio: the sandbox's console and init's
  // controlling terminal.
  if (stdio.terminal && !stdio.relay_terminal && stdio.fds[0].valid()) {
    int d = fcntl(stdio.fds[0].get(), F_DUPFD_CLOEXEC, 3);
    if (d < 0) return SetupError("duplicating the terminal", errno);
    sb->console_ = std::make_shared<fs::tty::HostTerminal>(
        UniqueFd(d), sb->job_control_.get());
  }
  sb->relay_console_wanted_ = stdio.terminal && stdio.relay_terminal;
  return sb;
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::Create(Prewarmed pw,
                                                         SandboxConfig config,
                                                         Stdio stdio,
                                                         StageClock* clock) {
  if (config.init.argv.empty()) {
    return absl::InvalidArgumentError("the process's argv is empty");
  }
  mm::MemoryFile* memfile = pw.memfile.get();
  const Limits& lim = config.limits;
  const int cpus = lim.cpu_millis == 0
                       ? 0
                       : static_cast<int>((lim.cpu_millis + 999) / 1000);
  ASSIGN_OR_RETURN(std::unique_ptr<Sandbox> sb,
                   NewKernel(pw, config.hostname, lim, config.strace, stdio));
  kernel::Kernel& k = *sb->kernel_;
  k.set_container_init(config.container_init);
  const kernel::KernelOptions& kopts = k.options();
  clock->Mark(Stage::kKernel);

  // The root filesystem: the host directory, read-only, under a tmpfs in
  // the memory file that takes every write.
  auto lower = fs::hostfs::NewRoot(std::move(config.rootfs), kRootfsDev);
  if (!lower.ok()) return Annotate(lower.status(), "rootfs");
  sb->rootfs_ = *lower;
  // Writes to the root take the memory file's pages: the upper layer is
  // sized as a tmpfs mounted without options would be.
  fs::TmpFsOptions upper_opts = fs::DefaultTmpFsOptions(kopts.total_ram);
  upper_opts.dev = kUpperDev;
  upper_opts.root_mode = 0755;
  sb->upper_ = std::make_unique<fs::TmpFs>(memfile, upper_opts);
  sb->overlay_ = std::make_unique<fs::OverlayFs>(sb->upper_->Root(), *lower,
                                                 kOverlayDev);
  sb->vfs_ = std::make_shared<fs::Vfs>(sb->overlay_->Root(), "overlay",
                                       "rootfs", /*read_only=*/false);
  k.set_vfs(sb->vfs_);
  RETURN_IF_ERROR(sb->MountDev());
  RETURN_IF_ERROR(
      sb->MountProc(LimitCpus(std::move(pw.host), cpus), lim.memory_bytes));
  RETURN_IF_ERROR(sb->MountSpec(config.mounts));
  RETURN_IF_ERROR(sb->WriteEtcFiles(config.etc_files));
  if (config.etc_hostname) RETURN_IF_ERROR(sb->WriteEtcHostname(config.hostname));
  // Read-only once the mountpoints and /etc's files are made.
  if (config.read_only_root) sb->vfs_->Root().mount->read_only = true;
  clock->Mark(Stage::kFilesystems);

  ASSIGN_OR_RETURN(sb->init_fs_, sb->NewFsContext(config.init.cwd));
  ASSIGN_OR_RETURN(Loaded l, sb->Load(config.init, sb->init_fs_));
  clock->Mark(Stage::kLoad);

  std::unique_ptr<fs::tty::PtyRelay> relay;
  std::shared_ptr<fs::tty::Terminal> relayed;
  std::shared_ptr<fs::FdTable> fds;
  if (stdio.relay_terminal) {
    Stdio none;
    fds = sb->NewFdTable(none, nullptr);
    ASSIGN_OR_RETURN(relay, sb->RelayTerminal(stdio, config.init.uid, *fds, &relayed));
  } else {
    fds = sb->NewFdTable(stdio, sb->console_);
  }
  // The program's first clock_gettime should not trap: the rate is known
  // 1 ms after the Vdso's creation, usually long before this point.
  sb->vdso_->timekeeper().WaitCalibrated();
  auto init = k.CreateInit(l.mm, fds, sb->init_fs_, l.cpu);
  if (!init.ok()) return Annotate(init.status(), "creating init");
  sb->init_ = *init;
  sb->init_->SetCredentials(CredentialsOf(config.init));
  sb->init_->group().image = std::move(l.image);
  if (sb->console_ != nullptr) k.SetInitTerminal(sb->console_);
  if (relayed != nullptr) {
    k.SetInitTerminal(relayed);
    absl::MutexLock l(&sb->mu_);
    sb->relays_[1] = std::move(relay);
  }
  clock->Mark(Stage::kInit);
  return sb;
}

absl::Status Sandbox::WriteEtcHostname(const std::string& hostname) {
  fs::FsContext ctx(vfs_->Root(), vfs_->Root());
  fs::Location etc;
  if (vfs_->Resolve(ctx, vfs_->Root(), "/etc", true, &etc) != 0 ||
      etc.inode().Type() != S_IFDIR) {
    return absl::OkStatus();  // a rootfs without /etc gets none
  }
  // Replaced in the overlay's upper layer; the rootfs is never written.
  fs::Location old;
  if (vfs_->Lookup(etc, "hostname", &old) == 0) {
    if (old.inode().Type() == S_IFDIR) return absl::OkStatus();
    if (int r = vfs_->Unlink(etc, "hostname", false); r < 0) {
      return SetupError("/etc/hostname: removing the rootfs's", -r);
    }
  }
  fs::CreateRequest req;
  req.mode = 0644;
  fs::Location file;
  if (int r = vfs_->Create(etc, "hostname", req, &file); r < 0) {
    return SetupError("/etc/hostname: creating it", -r);
  }
  const std::string text = hostname + "\n";
  if (file.inode().Write(text.data(), text.size(), 0) != static_cast<int64_t>(text.size())) {
    return SetupError("/etc/hostname: writing it", EIO);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<fs::FsContext>> Sandbox::NewFsContext(
    const std::string& cwd_path) {
  auto fsctx = std::make_shared<fs::FsContext>(vfs_->Root(), vfs_->Root());
  const std::string& path = cwd_path.empty() ? "/" : cwd_path;
  fs::Location cwd;
  int r = vfs_->Resolve(*fsctx, vfs_->Root(), path, true, &cwd);
  if (r == 0 && cwd.inode().Type() != S_IFDIR) r = -ENOTDIR;
  if (r < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("working directory ", path, ": ", strerror(-r)));
  }
  fsctx->set_cwd(cwd);
  return fsctx;
}

absl::StatusOr<Sandbox::Loaded> Sandbox::Load(
    const ProcessConfig& p, const std::shared_ptr<fs::FsContext>& fsctx) {
  if (p.argv.empty()) {
    return absl::InvalidArgumentError("the process's argv is empty");
  }
  Loaded l;
  std::string path;  // as found (AT_EXECFN)
  ASSIGN_OR_RETURN(fs::Location prog, FindProgram(*vfs_, *fsctx, p, &path));
  {
    // The user must be allowed to execute it, as execve would check.
    fs::Attr attr;
    int r = prog.inode().GetAttr(&attr);
    if (r == 0) r = fs::CheckPermission(*CredentialsOf(p), attr, fs::kMayExec);
    if (r < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(p.argv[0], ": ", strerror(-r)));
    }
  }
  kernel::Kernel& k = *kernel_;
  auto as = k.platform().NewAddressSpace();
  if (!as.ok()) return Annotate(as.status(), "address space");
  l.mm = std::make_shared<mm::MM>(&k.memory_file(), std::move(*as),
                                  k.platform().MinUserAddress(),
                                  k.platform().MaxUserAddress());
  std::string exe_path = vfs_->PathOf(vfs_->Root(), prog);
  auto exe =
      std::make_shared<fs::InodeMappable>(prog.dentry->inode(), exe_path);
  auto open_interp =
      [&](const std::string& path) -> absl::StatusOr<std::shared_ptr<mm::Mappable>> {
    fs::Location il;
    int r = vfs_->Resolve(*fsctx, vfs_->Root(), path, true, &il);
    if (r < 0) return ErrnoStatus(path, -r);
    if (il.inode().Type() != S_IFREG) return ErrnoStatus(path, EACCES);
    return std::shared_ptr<mm::Mappable>(std::make_shared<fs::InodeMappable>(
        il.dentry->inode(), vfs_->PathOf(vfs_->Root(), il)));
  };
  auto image = loader::LoadProgram(exe, *l.mm, open_interp);
  if (!image.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(p.argv[0], ": ", image.status().message()));
  }
  auto vdso_base = vdso_->Map(*l.mm);
  if (!vdso_base.ok()) return Annotate(vdso_base.status(), "mapping the vDSO");
  image->vdso = *vdso_base;
  loader::StackSpec stack;
  stack.uid = stack.euid = p.uid;
  stack.gid = stack.egid = p.gid;
  stack.argv = p.argv;
  stack.envp = p.env;
  if (p.default_env) {
    auto lacks = [&](absl::string_view name) {
      return std::none_of(p.env.begin(), p.env.end(), [&](const std::string& e) {
        return absl::StartsWith(e, absl::StrCat(name, "="));
      });
    };
    if (lacks("PATH")) {
      stack.envp.push_back("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    }
    if (lacks("HOSTNAME")) {
      stack.envp.push_back(absl::StrCat("HOSTNAME=", kernel_->options().hostname));
    }
    if (lacks("HOME")) stack.envp.push_back(absl::StrCat("HOME=", HomeOf(*vfs_, *fsctx, p.uid)));
  }
  stack.execfn = path;
  if (getrandom(stack.random, sizeof(stack.random), 0) !=
      sizeof(stack.random)) {
    return SetupError("getrandom", errno);
  }
  auto cpu = loader::SetupStack(*l.mm, *image, stack);
  if (!cpu.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(p.argv[0], ": ", cpu.status().message()));
  }
  l.cpu = *cpu;
  l.image = std::move(stack.image);
  l.image.comm = loader::CommOfPath(path);
  l.image.exe = std::move(exe_path);
  loader::Prefault(*l.mm);
  return l;
}

std::shared_ptr<fs::FdTable> Sandbox::NewFdTable(
    Stdio& stdio, const std::shared_ptr<fs::tty::HostTerminal>& term) {
  rlimit nofile;
  getrlimit(RLIMIT_NOFILE, &nofile);
  auto fds = std::make_shared<fs::FdTable>(nofile.rlim_cur);
  for (int fd = 0; fd < 3; fd++) {
    UniqueFd& host = stdio.fds[fd];
    if (!host.valid()) continue;  // not open in the sandbox either
    if (term != nullptr && term->Same(host.get())) {
      std::shared_ptr<fs::File> f = term->OpenHostFd(host.get());
      if (f != nullptr) fds->InstallAt(fd, std::move(f), false);
      continue;
    }
    auto file = std::make_shared<fs::HostFile>(std::move(host));
    file->set_inherited_fd(fd);  // what a restore asks its caller for
    fds->InstallAt(fd, std::move(file), false);
  }
  return fds;
}

// /dev: devfs, never the host's, with devpts at /dev/pts and, when the
// sandbox has a terminal, /dev/console; /dev/shm: a tmpfs of its own, as on
// Linux. The mountpoint is created in the overlay's upper layer when the
// rootfs has no /dev. /dev/tty is the caller's controlling terminal, which
// the open path resolves (syscalls/sys_tty.cc).
absl::Status Sandbox::MountDev() {
  fs::Vfs& vfs = *vfs_;
  fs::Location root = vfs.Root();
  fs::Location dev;
  int r = vfs.Lookup(root, "dev", &dev);
  if (r == -ENOENT) {
    fs::CreateRequest req;
    req.type = S_IFDIR;
    req.mode = 0755;
    r = vfs.Create(root, "dev", req, &dev);
  }
  if (r < 0) return SetupError("mounting /dev: looking up /dev", -r);
  MakeDev();
  r = vfs.MountAt(dev, devfs_->Root(), "devtmpfs", "devtmpfs", false);
  if (r < 0) return SetupError("mounting devfs on /dev", -r);
  fs::Location shm;
  fs::FsContext ctx(root, root);
  r = vfs.Resolve(ctx, root, "/dev/shm", true, &shm);
  if (r < 0) return SetupError("mounting /dev/shm: looking up /dev/shm", -r);
  fs::TmpFsOptions shm_opts =
      fs::DefaultTmpFsOptions(kernel_->options().total_ram);
  shm_opts.dev = kShmDev;
  shm_opts.root_mode = 01777;
  shm_ = std::make_unique<fs::TmpFs>(&kernel_->memory_file(), shm_opts);
  r = vfs.MountAt(shm, shm_->Root(), "tmpfs", "shm", false);
  if (r < 0) return SetupError("mounting tmpfs on /dev/shm", -r);
  return absl::OkStatus();
}

absl::Status Sandbox::WriteEtcFiles(
    const std::vector<std::pair<std::string, std::string>>& files) {
  if (files.empty()) return absl::OkStatus();
  fs::Vfs& vfs = *vfs_;
  fs::Location etc;
  int r = vfs.Lookup(vfs.Root(), "etc", &etc);
  if (r == -ENOENT) return absl::OkStatus();
  if (r < 0) return SetupError("looking up /etc", -r);
  // The files stand in for what a container runtime bind-mounts there:
  // / and /etc keep the rootfs's times (the copy-up and the new entries
  // would make them the boot's).
  fs::Attr root_attr, etc_attr;
  if (vfs.Root().dentry->inode()->GetAttr(&root_attr) < 0 ||
      etc.dentry->inode()->GetAttr(&etc_attr) < 0) {
    return SetupError("reading the times of / and /etc", EIO);
  }
  for (const auto& [name, content] : files) {
    const std::string path = absl::StrCat("/etc/", name);
    fs::Location old;
    r = vfs.Lookup(etc, name, &old);
    if (r == 0) r = vfs.Unlink(etc, name, false);
    if (r < 0 && r != -ENOENT) {
      return SetupError(absl::StrCat("replacing ", path), -r);
    }
    fs::CreateRequest req;
    req.type = S_IFREG;
    req.mode = 0644;
    fs::Location loc;
    r = vfs.Create(etc, name, req, &loc);
    if (r < 0) return SetupError(absl::StrCat("creating ", path), -r);
    std::shared_ptr<fs::File> f;
    r = loc.dentry->inode()->Open(O_WRONLY, &f);
    if (r < 0) return SetupError(absl::StrCat("opening ", path), -r);
    int64_t n = f->Write(content.data(), content.size(), -1, fs::IoContext{});
    if (n != static_cast<int64_t>(content.size())) {
      return SetupError(absl::StrCat("writing ", path),
                        n < 0 ? static_cast<int>(-n) : EIO);
    }
  }
  for (auto& [loc, attr] : {std::pair<fs::Location, fs::Attr>(vfs.Root(), root_attr),
                            std::pair<fs::Location, fs::Attr>(etc, etc_attr)}) {
    fs::SetAttrRequest req;
    req.set_atime = req.set_mtime = true;
    req.atime = attr.atime;
    req.mtime = attr.mtime;
    r = loc.dentry->inode()->SetAttr(req);
    if (r < 0) return SetupError("setting the times of / and /etc back", -r);
  }
  return absl::OkStatus();
}

void Sandbox::MakeDev() {
  fs::DevFsOptions dopts;
  dopts.dev = kDevfsDev;
  devpts_ = fs::tty::DevPts::Create(kDevptsDev, job_control_.get());
  dopts.pts = devpts_->Root();
  fs::tty::DevPts* devpts = devpts_.get();
  dopts.open_ptmx = [devpts](std::shared_ptr<fs::Inode> ptmx, int flags,
                             std::shared_ptr<fs::File>* out) {
    return devpts->OpenMaster(std::move(ptmx), flags, out);
  };
  std::shared_ptr<fs::tty::HostTerminal> console = console_;
  if (console != nullptr || relay_console_wanted_) {
    // The replica of init's relayed pair once RelayTerminal made it (or a
    // restore found it in the image), else the host terminal.
    dopts.open_console = [this, console](std::shared_ptr<fs::File>* out) -> int64_t {
      std::shared_ptr<fs::Inode> node;
      {
        absl::MutexLock l(&console_mu_);
        node = relay_console_;
      }
      if (node != nullptr) return node->Open(O_RDWR, out);
      if (console != nullptr) return console->OpenProgramSide(O_RDWR, nullptr, out);
      return -ENXIO;
    };
  }
  devfs_ = std::make_unique<fs::DevFs>(std::move(dopts));
  if (console != nullptr) {
    std::shared_ptr<fs::Inode> node;
    if (devfs_->Root()->Lookup("console", &node) == 0) console->set_node(node);
  }
}

// /proc: the sandbox's procfs over whatever the rootfs has there (hostfs
// shows the host's /proc mountpoint as an empty directory).
absl::Status Sandbox::MountProc(fs::proc::HostInfo host,
                                uint64_t memory_limit) {
  fs::Vfs& vfs = *vfs_;
  fs::Location root = vfs.Root();
  fs::Location proc;
  int r = vfs.Lookup(root, "proc", &proc);
  if (r == -ENOENT) {
    fs::CreateRequest req;
    req.type = S_IFDIR;
    req.mode = 0555;
    r = vfs.Create(root, "proc", req, &proc);
  }
  if (r < 0) return SetupError("mounting /proc: looking up /proc", -r);
  MakeProc(std::move(host), memory_limit);
  r = vfs.MountAt(proc, procfs_->Root(), "proc", "proc", false);
  if (r < 0) return SetupError("mounting procfs on /proc", -r);
  return absl::OkStatus();
}

absl::Status Sandbox::MountSpec(std::vector<MountConfig>& mounts) {
  fs::Vfs& vfs = *vfs_;
  const fs::Location root = vfs.Root();
  fs::FsContext ctx(root, root);
  for (size_t i = 0; i < mounts.size(); i++) {
    MountConfig& m = mounts[i];
    const std::string what = absl::StrCat("mounting on ", m.target);
    if (m.target.empty() || m.target[0] != '/' || m.target == "/") {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the target must be an absolute path other than /"));
    }
    const uint64_t dev = kMountDev + i;
    std::shared_ptr<fs::Inode> fs_root;
    std::string fstype, source;
    if (m.type == MountConfig::Type::kBind) {
      ASSIGN_OR_RETURN(fs_root, BindRoot(m, dev));
      fstype = "hostfs";
      source = m.source;
    } else {
      fs::TmpFsOptions o = fs::DefaultTmpFsOptions(kernel_->options().total_ram);
      o.root_mode = 01777;
      if (fs::ParseTmpFsOptions(m.options, kernel_->options().total_ram, &o) <
          0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": bad tmpfs options \"", m.options, "\""));
      }
      o.dev = dev;
      // The root inode keeps the superblock (as sys_mount.cc's).
      fs::TmpFs tmpfs(&kernel_->memory_file(), o);
      fs_root = tmpfs.Root();
      fstype = "tmpfs";
      source = "tmpfs";
    }
    // The mountpoint: every missing directory on the way is made (in the
    // overlay's upper layer), and the last one as the mount's kind.
    const bool dir = fs_root->Type() == S_IFDIR;
    std::vector<std::string> names = absl::StrSplit(m.target, '/', absl::SkipEmpty());
    fs::Location cur = root;
    for (size_t j = 0; j < names.size(); j++) {
      const bool last = j + 1 == names.size();
      fs::Location next;
      int r = vfs.Resolve(ctx, cur, names[j], /*follow_last=*/true, &next);
      if (r == -ENOENT) {
        fs::CreateRequest req;
        req.type = (last && !dir) ? S_IFREG : S_IFDIR;
        req.mode = (last && !dir) ? 0644 : 0755;
        r = vfs.Create(cur, names[j], req, &next);
      }
      if (r < 0) return SetupError(what, -r);
      cur = next;
    }
    int r = vfs.MountAt(cur, std::move(fs_root), fstype, source, m.read_only);
    if (r < 0) return SetupError(what, -r);
  }
  return absl::OkStatus();
}

void Sandbox::MakeProc(fs::proc::HostInfo host, uint64_t memory_limit) {
  fs::proc::ProcFsOptions popts;
  popts.dev = kProcDev;
  popts.host = std::move(host);
  popts.memory_limit = memory_limit;
  checkpoints_ = std::make_shared<fs::proc::CheckpointControl>(restored_);
  popts.checkpoint = checkpoints_;
  procfs_ = std::make_unique<fs::proc::ProcFs>(kernel_.get(), std::move(popts));
}

absl::StatusOr<std::unique_ptr<Sandbox>> Sandbox::Restore(Prewarmed pw,
                                                          RestoreConfig config,
                                                          Stdio stdio,
                                                          StageClock* clock) {
  state::CheckOptions co;
  co.platform = pw.platform->Name();
  co.memory_limit = config.limits.memory_bytes;
  const state::ImageDir image =
      config.image_dir.valid()
          ? state::ImageDir(config.image_dir.get(), config.image)
          : state::ImageDir(config.image);
  ASSIGN_OR_RETURN(state::pb::Manifest manifest,
                   state::CheckImage(image, co));
  clock->Mark(Stage::kRestoreCheck);
  ASSIGN_OR_RETURN(state::pb::State st, state::ReadStateFile(image));
  ASSIGN_OR_RETURN(std::shared_ptr<state::FilePageReader> pages,
                   state::FilePageReader::Open(image));
  clock->Mark(Stage::kRestoreReadState);

  const Limits& lim = config.limits;
  const int cpus = lim.cpu_millis == 0
                       ? 0
                       : static_cast<int>((lim.cpu_millis + 999) / 1000);
  ASSIGN_OR_RETURN(std::unique_ptr<Sandbox> sb,
                   NewKernel(pw, config.hostname, lim, config.strace, stdio));
  fs::proc::HostInfo host = LimitCpus(std::move(pw.host), cpus);
  sb->restored_ = true;
  kernel::Kernel& k = *sb->kernel_;
  k.set_container_init(config.container_init);
  auto lower = fs::hostfs::NewRoot(std::move(config.rootfs), kRootfsDev);
  if (!lower.ok()) return Annotate(lower.status(), "rootfs");
  sb->rootfs_ = *lower;
  sb->MakeDev();
  sb->MakeProc(std::move(host), lim.memory_bytes);
  clock->Mark(Stage::kRestoreKernel);

  // Installed before the load, the loader has the load register each
  // range instead of reading it; the reads start once every object is
  // loaded, and go on while the program runs.
  mm::AsyncLoader* loader = nullptr;
  if (!config.eager_pages) {
    loader = state::InstallAsyncLoader(&k.memory_file(), pages,
                                       config.page_loading);
  }
  {
    // Memory is filled from `pages` where the objects that own it load:
    // MmState's private runs, tmpfs files, shared anonymous memory
    // (sentry/state/README.md, "Memory-file data").
    state::Loader l(&st, pages.get(), &k.memory_file());
    l.set_rootfs(sb->rootfs_);
    for (size_t i = 0; i < config.mounts.size(); i++) {
      MountConfig& m = config.mounts[i];
      if (m.type != MountConfig::Type::kBind) continue;
      ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> root,
                       BindRoot(m, kMountDev + i));
      l.set_host_root(m.target, std::move(root));
    }
    l.set_pseudo_root("devtmpfs", sb->devfs_->Root());
    l.set_pseudo_root("proc", sb->procfs_->Root());
    l.set_devpts(sb->devpts_);
    l.set_console(sb->console_);
    l.set_unix_namespace(&syscalls::SandboxUnixNamespace());
    for (int fd = 0; fd < 3; fd++) {
      if (stdio.fds[fd].valid()) l.set_host_fd(fd, stdio.fds[fd].get());
    }
    // The clocks first: timerfds, timers and sleeps load relative to them.
    state::KernelState::LoadClocks(l, k);
    auto vfs = state::FsState::LoadVfs(l);
    if (!vfs.ok()) return Annotate(vfs.status(), "restoring the mounts");
    sb->vfs_ = std::shared_ptr<fs::Vfs>(std::move(vfs).value());
    k.set_vfs(sb->vfs_);
    state::MmState mms;
    RETURN_IF_ERROR(Annotate(state::KernelState::LoadKernel(l, k, *sb->vfs_,
                                                            mms),
                             "restoring the kernel"));
    RETURN_IF_ERROR(Annotate(
        state::FsState::LoadLocks(l, *sb->vfs_, fs::LockTable::Global()),
        "restoring the locks"));
    sb->kept_ = l.TakeKept();
  }
  if (k.FindGroup(1) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(config.image, "/state.pb: no init (pid 1)"));
  }
  if (std::shared_ptr<fs::tty::Pty> pty = sb->devpts_->FindRelayed()) {
    // The saved init's terminal of sandboxd's: relayed to this sandbox's.
    if (!stdio.terminal || !stdio.fds[0].valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          config.image, ": its init's terminal was sandboxd's (run -t): restore it "
          "with process.tty"));
    }
    int d = fcntl(stdio.fds[0].get(), F_DUPFD_CLOEXEC, 3);
    if (d < 0) return SetupError("duplicating the terminal", errno);
    {
      // Its replica is the sandbox's /dev/console again, as it was.
      absl::MutexLock cl(&sb->console_mu_);
      sb->relay_console_ = pty->pts_inode();
    }
    ASSIGN_OR_RETURN(std::unique_ptr<fs::tty::PtyRelay> relay,
                     sb->RelayPty(std::move(pty), UniqueFd(d)));
    absl::MutexLock l(&sb->mu_);
    sb->relays_[1] = std::move(relay);
  }
  if (loader != nullptr) {
    RETURN_IF_ERROR(Annotate(loader->Start(), "starting the page loader"));
  }
  sb->vdso_->timekeeper().WaitCalibrated();
  clock->Mark(Stage::kRestoreLoad);
  return sb;
}

absl::StatusOr<state::SaveResult> Sandbox::Checkpoint(
    const state::ImageDir& dir, bool leave_running, const std::string& spec,
    StageClock* clock, const std::function<void()>& while_stopped) {
  if (!started()) return absl::FailedPreconditionError("not started");
  if (done()) return absl::FailedPreconditionError("the sandbox has exited");
  absl::MutexLock cl(&checkpoint_mu_);
  // Every attempt ends for /proc/sandbox/checkpoint's readers, written or
  // not; a written one before the tasks go on.
  bool ended = false;
  absl::Cleanup end_on_error = [&] {
    if (!ended) checkpoints_->Ended(false);
  };
  {
    // The init's relayed terminal is saved (Pty::relayed) and relayed
    // again by Restore to the restored sandbox's terminal; an Exec'd
    // process's would come back with nobody to relay it: refused.
    absl::MutexLock l(&mu_);
    for (const auto& [pid, relay] : relays_) {
      if (pid != 1 && !relay->done()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "process ", pid, " has a terminal of its exec -t, relayed to sandboxd, "
            "which a restore could not relay again: end it before the checkpoint"));
      }
    }
  }
  // A restored sandbox's memory is saved only once all of it has arrived
  // (what is not loaded yet reads as zeros through the internal mapping).
  // Waited for before the stop: a task waiting for a page is not at a
  // safe point.
  if (mm::AsyncLoader* al = kernel_->memory_file().async_loader()) {
    RETURN_IF_ERROR(Annotate(al->WaitAll(), "loading the restored pages"));
  }
  RETURN_IF_ERROR(kernel_->StopTheWorld(absl::Seconds(5)));
  clock->Mark(Stage::kCheckpointStop);
  state::SaveOptions so;
  so.platform = kernel_->platform().Name();
  so.spec = spec;
  auto saved =
      dir.fd == AT_FDCWD
          ? state::SaveImage(dir.name, *kernel_, *vfs_, rootfs_.get(), so,
                             clock)
          : state::SaveImageInto(dir.fd, dir.name, *kernel_, *vfs_,
                                 rootfs_.get(), so, clock);
  if (saved.ok() && while_stopped) while_stopped();
  // Queued while every task is parked: the kill acts as they go on.
  if (saved.ok() && !leave_running) KillAll();
  checkpoints_->Ended(saved.ok());
  ended = true;
  kernel_->ResumeTheWorld();
  clock->Mark(Stage::kCheckpointResume);
  return saved;
}

absl::Status Sandbox::Start() {
  absl::MutexLock l(&mu_);
  if (started_) return absl::FailedPreconditionError("already started");
  // What the platform left to background threads ends first: its host
  // calls are not the filter's to judge, nor to race with the program.
  RETURN_IF_ERROR(Annotate(kernel_->platform().FinishSetup(),
                           "finishing the platform's set-up"));
  // Before the program's first instruction; every thread of the Sentry
  // takes it (TSYNC), those to come inherit it.
  if (filter_.has_value()) {
    RETURN_IF_ERROR(host_filter::Install(*filter_));
  }
  ASSIGN_OR_RETURN(runner_, StartThread("the sandbox's runner", [this] {
    // Done as soon as init's status is final: the last task's host thread
    // may still be tearing down its stub process (Kernel::TaskExited).
    if (restored_) {
      const kernel::ExitStatus st = kernel_->RunRestored();
      absl::MutexLock l(&mu_);
      init_status_ = st;
      done_ = true;
      return;
    }
    kernel_->RunUntilInitExits(init_, [this](const kernel::ExitStatus& st) {
      absl::MutexLock l(&mu_);
      init_status_ = st;
      done_ = true;
    });
  }));
  started_ = true;
  return absl::OkStatus();
}

bool Sandbox::started() {
  absl::MutexLock l(&mu_);
  return started_;
}

bool Sandbox::done() {
  absl::MutexLock l(&mu_);
  return done_;
}

kernel::ExitStatus Sandbox::Wait() {
  kernel::ExitStatus st;
  {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(&done_));
    st = init_status_;
  }
  DrainTerminal(1);
  return st;
}

void Sandbox::DrainTerminal(pid_t pid) {
  fs::tty::PtyRelay* relay = nullptr;
  {
    absl::MutexLock l(&mu_);
    auto it = relays_.find(pid);
    if (it == relays_.end()) return;
    relay = it->second.get();  // removed only by ~Sandbox
  }
  relay->Drain(absl::Milliseconds(500));
}

absl::StatusOr<pid_t> Sandbox::Exec(const ProcessConfig& p, Stdio stdio) {
  {
    absl::MutexLock l(&mu_);
    if (!started_ || done_) {
      return absl::FailedPreconditionError("the sandbox is not running");
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<fs::FsContext> fsctx, NewFsContext(p.cwd));
  ASSIGN_OR_RETURN(Loaded l, Load(p, fsctx));
  std::shared_ptr<fs::tty::HostTerminal> term;
  if (stdio.terminal && !stdio.relay_terminal && stdio.fds[0].valid()) {
    int d = fcntl(stdio.fds[0].get(), F_DUPFD_CLOEXEC, 3);
    if (d < 0) return SetupError("duplicating the terminal", errno);
    term = std::make_shared<fs::tty::HostTerminal>(UniqueFd(d),
                                                   job_control_.get());
  }
  std::unique_ptr<fs::tty::PtyRelay> relay;
  std::shared_ptr<fs::tty::Terminal> relayed;
  std::shared_ptr<fs::FdTable> fds;
  if (stdio.relay_terminal) {
    Stdio none;
    fds = NewFdTable(none, nullptr);
    ASSIGN_OR_RETURN(relay, RelayTerminal(stdio, p.uid, *fds, &relayed));
  } else {
    fds = NewFdTable(stdio, term);
  }
  // A process without a parent, in a session of its own: what CreateInit
  // makes. Init's exit kills it with everything else.
  auto created = kernel_->CreateInit(l.mm, fds, fsctx, l.cpu);
  if (!created.ok()) return Annotate(created.status(), "creating the process");
  kernel::Task* t = *created;
  t->SetCredentials(CredentialsOf(p));
  std::shared_ptr<kernel::ThreadGroup> g = t->group_ptr();
  g->image = std::move(l.image);
  pid_t pid = g->tgid();
  {
    absl::MutexLock lock(&mu_);
    execs_[pid] = g;
    if (relay != nullptr) relays_[pid] = std::move(relay);
  }
  if (relayed != nullptr) {
    // As runc exec with a console: the new session's controlling terminal.
    if (int64_t r = kernel_->SetControllingTerminal(*t, relayed, false); r < 0) {
      t->ExitUnstarted();  // a zombie that WaitPid reports as killed
      return SetupError("making the terminal the process's controlling terminal",
                        static_cast<int>(-r));
    }
  }
  if (absl::Status s = t->Start(); !s.ok()) {
    t->ExitUnstarted();  // a zombie that WaitPid reports as killed
    return Annotate(s, "starting the process");
  }
  return pid;
}

absl::StatusOr<kernel::ExitStatus> Sandbox::WaitPid(pid_t pid) {
  std::shared_ptr<kernel::ThreadGroup> g;
  bool init = false;
  {
    absl::MutexLock l(&mu_);
    init = pid == 1 && started_;
  }
  if (init) return Wait();
  {
    absl::MutexLock l(&mu_);
    auto it = execs_.find(pid);
    if (it == execs_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "no process ", pid, " started by Start or Exec in this sandbox"));
    }
    g = it->second;
  }
  bool reaped = false;
  kernel::ExitStatus st = kernel_->AwaitExit(g, &reaped);
  DrainTerminal(pid);
  if (reaped) {
    kernel::Usage u = g->SelfUsage();
    u += g->ChildrenUsage();
    absl::MutexLock l(&mu_);
    reaped_usage_ += u;
  }
  return st;
}

absl::Status Sandbox::ResizeTerminal(pid_t pid, uint16_t rows, uint16_t cols) {
  absl::MutexLock l(&mu_);
  auto it = relays_.find(pid);
  if (it == relays_.end()) {
    return absl::NotFoundError(absl::StrCat("process ", pid, " has no terminal of the daemon's"));
  }
  it->second->Resize(rows, cols);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<fs::tty::PtyRelay>> Sandbox::RelayPty(
    std::shared_ptr<fs::tty::Pty> pty, UniqueFd host) {
  fs::Location root = vfs_->Root();
  fs::FsContext ctx(root, root);
  fs::Location ptmx;
  int r = vfs_->Resolve(ctx, root, "/dev/ptmx", true, &ptmx);
  if (r < 0) return SetupError("terminal: looking up /dev/ptmx", -r);
  auto master = std::make_shared<fs::tty::PtyMasterFile>(ptmx.dentry->inode(), O_RDWR,
                                                         std::move(pty));
  return fs::tty::PtyRelay::Start(std::move(master), std::move(host));
}

absl::StatusOr<std::unique_ptr<fs::tty::PtyRelay>> Sandbox::RelayTerminal(
    Stdio& stdio, uint32_t uid, fs::FdTable& fds,
    std::shared_ptr<fs::tty::Terminal>* term) {
  UniqueFd host = std::move(stdio.fds[0]);
  stdio.fds[1].reset();
  stdio.fds[2].reset();
  if (!host.valid()) return absl::InvalidArgumentError("no terminal descriptor");
  // What a program's open("/dev/ptmx"), unlockpt and open of the replica do.
  fs::Location root = vfs_->Root();
  fs::FsContext ctx(root, root);
  fs::Location ptmx;
  int r = vfs_->Resolve(ctx, root, "/dev/ptmx", true, &ptmx);
  if (r < 0) return SetupError("terminal: looking up /dev/ptmx", -r);
  std::shared_ptr<fs::File> master;
  r = ptmx.inode().Open(O_RDWR | O_NOCTTY, &master);
  if (r < 0) return SetupError("terminal: opening /dev/ptmx", -r);
  auto* mf = dynamic_cast<fs::tty::PtyMasterFile*>(master.get());
  if (mf == nullptr) return absl::InternalError("terminal: /dev/ptmx is not a pty master");
  fs::tty::Pty& pty = mf->pty();
  pty.SetLocked(false);
  std::shared_ptr<fs::tty::PtsInode> node = pty.pts_inode();
  if (node == nullptr) return absl::InternalError("terminal: the new pair has no /dev/pts node");
  fs::SetAttrRequest own;
  own.set_uid = true;
  own.uid = uid;
  node->SetAttr(own);
  std::shared_ptr<fs::File> replica;
  r = node->Open(O_RDWR, &replica);
  if (r < 0) return SetupError("terminal: opening the replica", -r);
  for (int fd = 0; fd < 3; fd++) fds.InstallAt(fd, replica, false);
  {
    // The first relayed pair is init's: the sandbox's console (unless
    // init's terminal is the host's, console_).
    absl::MutexLock l(&console_mu_);
    if (relay_console_wanted_ && relay_console_ == nullptr) relay_console_ = node;
  }
  *term = mf->terminal();
  return fs::tty::PtyRelay::Start(std::move(master), std::move(host));
}

absl::Status Sandbox::Signal(int signo, bool all, pid_t pid) {
  if (signo < 0 || signo > kernel::kNumSignals) {
    return absl::InvalidArgumentError(absl::StrCat("bad signal number ", signo));
  }
  if (!started()) return absl::FailedPreconditionError("the sandbox has not started");
  bool any = false;
  for (const auto& g : kernel_->ThreadGroups()) {
    if (!all && g->tgid() != (pid != 0 ? pid : 1)) continue;
    bool live = false;
    kernel_->WithTasklistLock([&] { live = !g->zombie; });
    if (!live) continue;
    any = true;
    if (signo != 0) kernel_->SignalGroup(*g, signo, 0);
  }
  if (!any && pid != 0) {
    return absl::NotFoundError(absl::StrCat("no process ", pid, " in the sandbox"));
  }
  if (!any) return absl::NotFoundError("no process left to signal");
  return absl::OkStatus();
}

void Sandbox::KillAll() {
  if (!started()) return;
  for (const auto& g : kernel_->ThreadGroups()) {
    kernel_->SignalGroup(*g, SIGKILL, 0);
  }
}

Stats Sandbox::GetStats() {
  Stats s;
  kernel::Usage total;
  for (const auto& g : kernel_->ThreadGroups()) {
    bool live = false;
    kernel_->WithTasklistLock([&] { live = !g->zombie; });
    if (live) {
      s.pids.push_back(g->tgid());
      s.tasks += g->Tasks().size();
    }
    total += g->SelfUsage();
    total += g->ChildrenUsage();
  }
  {
    absl::MutexLock l(&mu_);
    total += reaped_usage_;
  }
  s.memory_bytes = kernel_->memory_file().AllocatedBytes();
  s.oom_kills = kernel_->oom_kills();
  s.memory_limit_refusals = kernel_->memory_file().limit_refusals();
  s.memory_limit_bytes = kernel_->memory_file().limit();
  s.cpu_user_nanos = static_cast<uint64_t>(total.user_ns);
  s.cpu_system_nanos = static_cast<uint64_t>(total.sys_ns);
  s.unimplemented = kernel_->UnimplementedCounts();
  return s;
}

Limits Sandbox::CurrentLimits() {
  Limits l;
  l.memory_bytes = kernel_->memory_limit();
  l.pids = kernel_->max_tasks();
  l.cpu_millis = static_cast<uint64_t>(kernel_->max_cpus()) * 1000;
  return l;
}

absl::Status Sandbox::UpdateLimits(const Limits& lim, LimitsLifted lifted) {
  kernel::Kernel& k = *kernel_;
  uint64_t memory = k.memory_limit();
  if (lifted.memory) {
    k.memory_file().SetLimit(0);
    memory = 0;
  } else if (lim.memory_bytes != 0) {
    const uint64_t app = mm::ApplicationMemoryLimit(lim.memory_bytes);
    const uint64_t used = k.memory_file().AllocatedBytes();
    if (used > app) {
      return absl::FailedPreconditionError(absl::StrCat(
          "memory limit ", lim.memory_bytes, ": the application uses ", used,
          " bytes, more than its share of that limit (", app, ")"));
    }
    k.memory_file().SetLimit(app);
    memory = lim.memory_bytes;
  }
  const int cpus = lifted.cpu              ? 0
                   : lim.cpu_millis == 0 ? k.max_cpus()
                                         : static_cast<int>((lim.cpu_millis + 999) / 1000);
  const uint64_t tasks = lifted.pids ? 0 : lim.pids != 0 ? lim.pids : k.max_tasks();
  k.SetLimits(tasks, cpus, memory);
  return absl::OkStatus();
}

}  // namespace sandboxd::boot
