// Processes: fork, vfork, clone of a process, execve, wait4/waitid,
// process groups and sessions.
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "sentry/fs/mappable.h"
#include "sentry/loader/elf_loader.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/creds.h"
#include "sentry/syscalls/paths.h"
#include "sentry/syscalls/process.h"
#include "sentry/syscalls/syscalls.h"
#include "sentry/vdso/vdso_mapping.h"

namespace sandboxd::syscalls {

int64_t CloneProcess(Task& t, uint64_t flags, uint64_t stack, uint64_t ptid,
                     uint64_t ctid, uint64_t tls) {
  constexpr uint64_t kSupported =
      CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_VFORK | CLONE_SETTLS |
      CLONE_PARENT_SETTID | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID |
      CLONE_SYSVSEM | CLONE_DETACHED | 0xff;
  if (flags & ~kSupported) {
    // New namespaces, CLONE_PARENT, CLONE_SIGHAND across processes,
    // pidfds, ptrace: not offered.
    t.kernel().CountUnimplemented(SYS_clone);
    return -EINVAL;
  }
  int exit_signal = static_cast<int>(flags & 0xff);
  if (exit_signal > kernel::kNumSignals) return -EINVAL;
  kernel::Kernel& k = t.kernel();
  kernel::ThreadGroup& g = t.group();

  std::shared_ptr<mm::MM> mm;
  if (flags & CLONE_VM) {
    mm = g.mm_ptr();  // vfork and posix_spawn: the child borrows ours
  } else {
    auto as = k.platform().NewAddressSpace();
    if (!as.ok()) return -EAGAIN;
    auto copy = g.mm().Fork(std::move(*as));
    if (!copy.ok()) return -ENOMEM;
    mm = std::shared_ptr<mm::MM>(std::move(*copy));
  }
  auto fds = (flags & CLONE_FILES) ? g.fds_ptr() : g.fds().Fork();
  auto fsctx = (flags & CLONE_FS) ? g.fs_ptr() : g.fs().Fork();

  t.SyncFp();  // the child starts with the parent's FPU state
  platform::CpuState cpu = t.cpu();
  cpu.regs.rax = 0;
  if (stack != 0) cpu.regs.rsp = stack;
  if (flags & CLONE_SETTLS) {
    if (tls >= k.platform().MaxUserAddress()) return -EPERM;
    cpu.regs.fs_base = tls;
  }
  auto child = k.CreateProcess(t, mm, fds, fsctx, exit_signal, cpu);
  if (!child.ok()) return -EAGAIN;
  pid_t tid = (*child)->tid();
  std::shared_ptr<kernel::Task> keep = k.FindTask(tid);
  uint32_t tid32 = static_cast<uint32_t>(tid);
  if (flags & CLONE_PARENT_SETTID) t.mm().CopyOut(ptid, &tid32, 4);
  if (flags & CLONE_CHILD_SETTID) mm->CopyOut(ctid, &tid32, 4);
  if (flags & CLONE_CHILD_CLEARTID) keep->set_clear_child_tid(ctid);
  if (flags & CLONE_VFORK) keep->set_vforked(true);
  if (!keep->Start().ok()) {
    // The host gave no thread to run it (its pids or memory limits).
    k.AbandonTask(keep.get());
    return -EAGAIN;
  }
  if (flags & CLONE_VFORK) keep->WaitVforkDone(t);
  return tid;
}

namespace {

int64_t SysFork(Task& t, const SyscallArgs&) {
  return CloneProcess(t, SIGCHLD, 0, 0, 0, 0);
}

int64_t SysVfork(Task& t, const SyscallArgs&) {
  return CloneProcess(t, CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0, 0, 0);
}

// Reads a NULL-terminated array of string pointers (argv, envp).
int64_t ReadStrings(Task& t, uint64_t addr, std::vector<std::string>* out,
                    uint64_t* total) {
  if (addr == 0) return 0;
  for (size_t i = 0;; i++) {
    uint64_t p;
    RETURN_IF_ERRNO(CopyInObj(t, addr + i * 8, &p));
    if (p == 0) return 0;
    if (out->size() >= 0x7fffffff / 8) return -E2BIG;
    std::string s;
    int64_t r = t.mm().CopyInString(p, loader::kMaxArgStrlen - 1, &s);
    if (r == -ENAMETOOLONG) return -E2BIG;
    if (r < 0) return r;
    *total += s.size() + 1;
    if (*total > loader::kMaxArgBytes) return -E2BIG;
    out->push_back(std::move(s));
  }
}

// Parses a "#!interp [arg]" line (first 256 bytes, as BINPRM_BUF_SIZE).
bool ParseShebang(const char* buf, size_t n, std::string* interp,
                  std::string* arg) {
  if (n < 2 || buf[0] != '#' || buf[1] != '!') return false;
  std::string line(buf + 2, n - 2);
  size_t nl = line.find('\n');
  if (nl != std::string::npos) line.resize(nl);
  absl::string_view v = absl::StripAsciiWhitespace(line);
  size_t sp = v.find_first_of(" \t");
  *interp = std::string(v.substr(0, sp));
  arg->clear();
  if (sp != absl::string_view::npos) {
    *arg = std::string(absl::StripAsciiWhitespace(v.substr(sp)));
  }
  return true;
}

// Kills every other thread of the group and waits until they are gone.
void DeThread(Task& t) {
  for (const auto& other : t.group().Tasks()) {
    if (other.get() != &t) other->KillForExec();
  }
  for (int i = 0; i < 10000 && t.group().Tasks().size() > 1; i++) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

int64_t DoExecve(Task& t, int64_t dirfd, uint64_t path_addr, uint64_t argv_addr,
                 uint64_t envp_addr, int flags) {
  if (flags & ~(AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, path_addr));
  std::vector<std::string> argv, envp;
  uint64_t total = 0;
  RETURN_IF_ERRNO(ReadStrings(t, argv_addr, &argv, &total));
  RETURN_IF_ERRNO(ReadStrings(t, envp_addr, &envp, &total));

  fs::Vfs& vfs = t.kernel().vfs();
  fs::FsContext& ctx = t.group().fs();
  std::string exec_path = path;
  fs::Location loc;
  RETURN_IF_ERRNO(ResolveAt(t, dirfd, path, !(flags & AT_SYMLINK_NOFOLLOW),
                            (flags & AT_EMPTY_PATH) != 0, &loc));
  // Scripts: up to 4 levels of interpreters, as Linux allows. The file
  // that is finally loaded decides set-user-ID and set-group-ID (a
  // script's own bits are ignored, as on Linux).
  fs::Attr attr;
  for (int depth = 0;; depth++) {
    if (loc.inode().Type() == S_IFLNK) return -ELOOP;
    if (loc.inode().Type() == S_IFDIR) return -EACCES;
    if (loc.inode().Type() != S_IFREG) return -EACCES;
    RETURN_IF_ERRNO(loc.inode().GetAttr(&attr));
    RETURN_IF_ERRNO(fs::CheckPermission(t.own_creds(), attr, fs::kMayExec));
    char head[256];
    int64_t n = loc.inode().Read(head, sizeof(head), 0);
    if (n < 0) return n;
    std::string interp, arg;
    if (!ParseShebang(head, static_cast<size_t>(n), &interp, &arg)) break;
    if (depth >= 4) return -ELOOP;
    if (interp.empty()) return -ENOEXEC;
    std::vector<std::string> next;
    next.push_back(interp);
    if (!arg.empty()) next.push_back(arg);
    next.push_back(exec_path);
    for (size_t i = 1; i < argv.size(); i++) next.push_back(argv[i]);
    argv.swap(next);
    exec_path = interp;
    RETURN_IF_ERRNO(vfs.Resolve(ctx, ctx.cwd(), interp, true, &loc));
  }

  // Build the new image before touching the old one: failures return to
  // the caller with nothing changed.
  auto as = t.kernel().platform().NewAddressSpace();
  if (!as.ok()) return -ENOMEM;
  auto mm = std::make_shared<mm::MM>(&t.kernel().memory_file(), std::move(*as),
                                     t.kernel().platform().MinUserAddress(),
                                     t.kernel().platform().MaxUserAddress());
  auto exe = std::make_shared<fs::InodeMappable>(loc.dentry->inode(),
                                                 vfs.PathOf(ctx.root(), loc));
  auto open_interp =
      [&](const std::string& p) -> absl::StatusOr<std::shared_ptr<mm::Mappable>> {
    fs::Location l;
    int e = vfs.Resolve(ctx, ctx.root(), p, true, &l);
    if (e < 0) return absl::NotFoundError(absl::StrCat(p, ": errno ", -e));
    if (l.inode().Type() != S_IFREG) {
      return absl::PermissionDeniedError(absl::StrCat(p, ": not a file"));
    }
    return std::shared_ptr<mm::Mappable>(std::make_shared<fs::InodeMappable>(
        l.dentry->inode(), vfs.PathOf(ctx.root(), l)));
  };
  auto image = loader::LoadProgram(exe, *mm, open_interp);
  if (!image.ok()) {
    if (image.status().code() == absl::StatusCode::kNotFound) return -ENOENT;
    if (image.status().code() == absl::StatusCode::kPermissionDenied) {
      return -EACCES;
    }
    return -ENOEXEC;
  }
  if (vdso::Vdso* vdso = t.kernel().options().vdso) {
    auto base = vdso->Map(*mm);
    if (!base.ok()) return -ENOMEM;
    image->vdso = *base;
  }
  const fs::Credentials& old_creds = t.own_creds();
  std::shared_ptr<const fs::Credentials> creds = ExecCredentials(
      old_creds, attr, /*nosuid=*/false, t.group().no_new_privs.load());
  loader::StackSpec spec;
  spec.uid = creds->ruid;
  spec.euid = creds->euid;
  spec.gid = creds->rgid;
  spec.egid = creds->egid;
  spec.secure = creds->euid != creds->ruid || creds->egid != creds->rgid ||
                (creds->cap_permitted & ~old_creds.cap_permitted) != 0;
  spec.argv = argv;
  spec.envp = envp;
  spec.execfn = path;
  getrandom(spec.random, sizeof(spec.random), 0);
  auto cpu = loader::SetupStack(*mm, *image, spec);
  if (!cpu.ok()) return -E2BIG;
  loader::Prefault(*mm);

  // The point of no return.
  DeThread(t);
  kernel::ThreadGroup& g = t.group();
  if (g.fds_ptr().use_count() > 1) {
    std::shared_ptr<fs::FdTable> own = g.fds().Fork();
    t.kernel().WithTasklistLock([&] { g.set_fds(std::move(own)); });
  }
  g.fds().CloseOnExec();
  g.ResetHandlersForExec();
  // POSIX timers do not survive exec; interval timers do (timer_create(2),
  // setitimer(2)). ru_maxrss keeps the old image's size.
  g.timers().DeletePosixTimers();
  g.NoteMaxRss();
  t.ExecImage(*cpu);
  t.SetCredentials(std::move(creds));
  spec.image.comm = loader::CommOfPath(exec_path);
  spec.image.exe = vfs.PathOf(ctx.root(), loc);
  // The old address space goes when this reference does, after the
  // tasklist lock is released (mm is never torn down under it).
  std::shared_ptr<mm::MM> old_mm = g.mm_ptr();
  // Under the tasklist lock: /proc reads these from other tasks.
  t.kernel().WithTasklistLock([&] {
    g.set_mm(mm);
    g.did_exec = true;
    g.image = std::move(spec.image);
  });
  old_mm.reset();
  t.VforkDone();
  return kernel::kNoReturnValue;
}

int64_t SysExecve(Task& t, const SyscallArgs& a) {
  return DoExecve(t, AT_FDCWD, a.a[0], a.a[1], a.a[2], 0);
}

int64_t SysExecveat(Task& t, const SyscallArgs& a) {
  return DoExecve(t, static_cast<int64_t>(a.a[0]), a.a[1], a.a[2], a.a[3],
                  static_cast<int>(a.a[4]));
}

int64_t SysWait4(Task& t, const SyscallArgs& a) {
  pid_t pid = static_cast<pid_t>(a.a[0]);
  int options = static_cast<int>(a.a[2]);
  if (options & ~(WNOHANG | WUNTRACED | WCONTINUED | __WNOTHREAD | __WCLONE |
                  __WALL)) {
    return -EINVAL;
  }
  bool by_pgid = false;
  if (pid == 0) {
    by_pgid = true;
    pid = static_cast<pid_t>(t.kernel().GetPgid(t, 0));
  } else if (pid < -1) {
    by_pgid = true;
    pid = -pid;
  }
  kernel::Kernel::WaitResult res;
  // WUNTRACED is WSTOPPED; exits are always reported.
  int64_t r = t.kernel().WaitChild(t, pid, by_pgid, options | WEXITED, &res);
  if (r <= 0) return r;
  if (a.a[1] != 0) {
    int32_t st = res.status.WaitStatus();
    if (res.stop_signo != 0) st = (res.stop_signo << 8) | 0x7f;
    if (res.continued) st = 0xffff;
    RETURN_IF_ERRNO(CopyOutObj(t, a.a[1], st));
  }
  if (a.a[3] != 0) {
    struct rusage ru = res.usage.ToRusage();
    RETURN_IF_ERRNO(CopyOutObj(t, a.a[3], ru));
  }
  return r;
}

int64_t SysWaitid(Task& t, const SyscallArgs& a) {
  int idtype = static_cast<int>(a.a[0]);
  pid_t id = static_cast<pid_t>(a.a[1]);
  int options = static_cast<int>(a.a[3]);
  if (options & ~(WNOHANG | WNOWAIT | WEXITED | WSTOPPED | WCONTINUED |
                  __WNOTHREAD | __WCLONE | __WALL)) {
    return -EINVAL;
  }
  if (!(options & (WEXITED | WSTOPPED | WCONTINUED))) return -EINVAL;
  pid_t pid = -1;
  bool by_pgid = false;
  switch (idtype) {
    case P_ALL: break;
    case P_PID:
      if (id <= 0) return -EINVAL;
      pid = id;
      break;
    case P_PGID:
      by_pgid = true;
      pid = id == 0 ? static_cast<pid_t>(t.kernel().GetPgid(t, 0)) : id;
      if (pid <= 0) return -EINVAL;
      break;
    default:
      return -EINVAL;
  }
  kernel::Kernel::WaitResult res;
  int64_t r = t.kernel().WaitChild(t, pid, by_pgid, options, &res);
  if (r < 0) return r;
  if (a.a[2] != 0) {
    siginfo_t si;
    std::memset(&si, 0, sizeof(si));
    if (r > 0) {
      si.si_signo = SIGCHLD;
      si.si_pid = res.pid;
      si.si_uid = 0;
      if (res.stop_signo != 0) {
        si.si_code = CLD_STOPPED;
        si.si_status = res.stop_signo;
      } else if (res.continued) {
        si.si_code = CLD_CONTINUED;
        si.si_status = SIGCONT;
      } else if (res.status.signo != 0) {
        si.si_code = res.status.core ? CLD_DUMPED : CLD_KILLED;
        si.si_status = res.status.signo;
      } else {
        si.si_code = CLD_EXITED;
        si.si_status = res.status.code;
      }
    }
    RETURN_IF_ERRNO(CopyOutObj(t, a.a[2], si));
  }
  if (a.a[4] != 0) {
    // The raw syscall's fifth argument: the child's rusage, as wait4.
    struct rusage ru = r > 0 ? res.usage.ToRusage() : rusage{};
    RETURN_IF_ERRNO(CopyOutObj(t, a.a[4], ru));
  }
  return 0;
}

int64_t SysGetppid(Task& t, const SyscallArgs&) {
  return t.kernel().ParentOf(t.group());
}
int64_t SysSetpgid(Task& t, const SyscallArgs& a) {
  return t.kernel().SetPgid(t, static_cast<pid_t>(a.a[0]),
                            static_cast<pid_t>(a.a[1]));
}
int64_t SysGetpgid(Task& t, const SyscallArgs& a) {
  return t.kernel().GetPgid(t, static_cast<pid_t>(a.a[0]));
}
int64_t SysGetpgrp(Task& t, const SyscallArgs&) {
  return t.kernel().GetPgid(t, 0);
}
int64_t SysSetsid(Task& t, const SyscallArgs&) { return t.kernel().SetSid(t); }
int64_t SysGetsid(Task& t, const SyscallArgs& a) {
  return t.kernel().GetSid(t, static_cast<pid_t>(a.a[0]));
}

}  // namespace

void RegisterProcess(Entry* table) {
  table[SYS_fork] = {SysFork, "fork"};
  table[SYS_vfork] = {SysVfork, "vfork"};
  table[SYS_execve] = {SysExecve, "execve"};
  table[SYS_execveat] = {SysExecveat, "execveat"};
  table[SYS_wait4] = {SysWait4, "wait4"};
  table[SYS_waitid] = {SysWaitid, "waitid"};
  table[SYS_getppid] = {SysGetppid, "getppid"};
  table[SYS_setpgid] = {SysSetpgid, "setpgid"};
  table[SYS_getpgid] = {SysGetpgid, "getpgid"};
  table[SYS_getpgrp] = {SysGetpgrp, "getpgrp"};
  table[SYS_setsid] = {SysSetsid, "setsid"};
  table[SYS_getsid] = {SysGetsid, "getsid"};
}

}  // namespace sandboxd::syscalls
