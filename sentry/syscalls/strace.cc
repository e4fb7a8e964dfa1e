#include "sentry/syscalls/strace.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>

#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sandboxd::syscalls {

namespace {

// Bytes of a string or buffer shown, as strace's default -s 32.
constexpr uint64_t kMaxShown = 32;
// Entries of an argv/envp array shown.
constexpr int kMaxArgv = 16;

// One character per argument:
//   d  signed int          l  signed long         u  unsigned long
//   x  hex                 p  pointer (NULL or hex)
//   f  fd                  F  directory fd (AT_FDCWD)
//   P  path (NUL-terminated string the call reads)
//   S  buffer the call reads, its length the next argument
//   B  buffer the call fills, its length the result
//   O  open flags          M  mode (octal)        G  signal number
//   V  argv/envp array
const std::map<uint64_t, const char*>& Signatures() {
  static const auto* sigs = new std::map<uint64_t, const char*>{
      {SYS_read, "fBu"}, {SYS_write, "fSu"}, {SYS_open, "POM"}, {SYS_close, "f"},
      {SYS_stat, "Pp"}, {SYS_fstat, "fp"}, {SYS_lstat, "Pp"}, {SYS_poll, "pud"},
      {SYS_lseek, "fld"}, {SYS_mmap, "puxxfx"}, {SYS_mprotect, "pux"},
      {SYS_munmap, "pu"}, {SYS_brk, "p"}, {SYS_rt_sigaction, "Gppu"},
      {SYS_rt_sigprocmask, "dppu"}, {SYS_ioctl, "fxp"}, {SYS_pread64, "fBul"},
      {SYS_pwrite64, "fSul"}, {SYS_readv, "fpd"}, {SYS_writev, "fpd"},
      {SYS_access, "Px"}, {SYS_pipe, "p"}, {SYS_dup, "f"}, {SYS_dup2, "ff"},
      {SYS_nanosleep, "pp"}, {SYS_socket, "ddd"}, {SYS_connect, "fpu"},
      {SYS_accept, "fpp"}, {SYS_sendto, "fSuxpu"}, {SYS_recvfrom, "fBuxpp"},
      {SYS_bind, "fpu"}, {SYS_listen, "fd"}, {SYS_execve, "PVV"}, {SYS_exit, "d"},
      {SYS_wait4, "dpxp"}, {SYS_kill, "dG"}, {SYS_uname, "p"}, {SYS_fcntl, "fdx"},
      {SYS_flock, "fx"}, {SYS_fsync, "f"}, {SYS_truncate, "Pl"}, {SYS_ftruncate, "fl"},
      {SYS_getcwd, "Bu"}, {SYS_chdir, "P"}, {SYS_fchdir, "f"}, {SYS_rename, "PP"},
      {SYS_mkdir, "PM"}, {SYS_rmdir, "P"}, {SYS_creat, "PM"}, {SYS_link, "PP"},
      {SYS_unlink, "P"}, {SYS_symlink, "PP"}, {SYS_readlink, "PBu"},
      {SYS_chmod, "PM"}, {SYS_fchmod, "fM"}, {SYS_chown, "Pdd"}, {SYS_fchown, "fdd"},
      {SYS_lchown, "Pdd"}, {SYS_umask, "M"}, {SYS_chroot, "P"}, {SYS_getdents64, "fpu"},
      {SYS_exit_group, "d"}, {SYS_tgkill, "ddG"}, {SYS_tkill, "dG"},
      {SYS_openat, "FPOM"}, {SYS_mkdirat, "FPM"}, {SYS_mknodat, "FPMx"},
      {SYS_fchownat, "FPddx"}, {SYS_newfstatat, "FPpx"}, {SYS_unlinkat, "FPx"},
      {SYS_renameat, "FPFP"}, {SYS_linkat, "FPFPx"}, {SYS_symlinkat, "PFP"},
      {SYS_readlinkat, "FPBu"}, {SYS_fchmodat, "FPM"}, {SYS_faccessat, "FPx"},
      {SYS_faccessat2, "FPxx"}, {SYS_dup3, "ffx"}, {SYS_pipe2, "px"},
      {SYS_renameat2, "FPFPx"}, {SYS_statx, "FPxxp"}, {SYS_execveat, "FPVVx"},
      {SYS_statfs, "Pp"}, {SYS_fstatfs, "fp"}, {SYS_close_range, "ffx"},
      {SYS_epoll_ctl, "fdfp"}, {SYS_epoll_wait, "fpdd"}, {SYS_epoll_pwait, "fpddpu"},
      {SYS_getxattr, "PSu"}, {SYS_lgetxattr, "PPpu"}, {SYS_listxattr, "Ppu"},
      {SYS_sethostname, "Su"}, {SYS_setuid, "d"}, {SYS_setgid, "d"},
      {SYS_setpgid, "dd"}, {SYS_getpgid, "d"}, {SYS_getsid, "d"}, {SYS_setsid, ""},
      {SYS_getpid, ""}, {SYS_getppid, ""}, {SYS_gettid, ""}, {SYS_getuid, ""},
      {SYS_geteuid, ""}, {SYS_getgid, ""}, {SYS_getegid, ""}, {SYS_sched_yield, ""},
      {SYS_pause, ""}, {SYS_fork, ""}, {SYS_vfork, ""}, {SYS_sync, ""},
      {SYS_set_tid_address, "p"}, {SYS_arch_prctl, "xp"}, {SYS_futex, "pdxpx"},
      {SYS_clock_gettime, "dp"}, {SYS_clock_nanosleep, "dxpp"}, {SYS_getrandom, "Bux"},
      {SYS_memfd_create, "Px"}, {SYS_inotify_add_watch, "fPx"}, {SYS_mount, "PPPxp"},
      {SYS_umount2, "Px"}, {SYS_prctl, "dxxxx"}, {SYS_prlimit64, "ddpp"},
  };
  return *sigs;
}

// The open(2) flags by name, then what is left in octal.
std::string OpenFlags(uint64_t v) {
  std::string s;
  switch (v & O_ACCMODE) {
    case O_RDONLY: s = "O_RDONLY"; break;
    case O_WRONLY: s = "O_WRONLY"; break;
    case O_RDWR: s = "O_RDWR"; break;
    default: s = "O_ACCMODE"; break;
  }
  v &= ~static_cast<uint64_t>(O_ACCMODE);
  // O_SYNC holds O_DSYNC's bit and O_TMPFILE O_DIRECTORY's: tried first.
  static constexpr std::pair<uint64_t, const char*> kFlags[] = {
      {O_CREAT, "O_CREAT"},         {O_EXCL, "O_EXCL"},
      {O_NOCTTY, "O_NOCTTY"},       {O_TRUNC, "O_TRUNC"},
      {O_APPEND, "O_APPEND"},       {O_NONBLOCK, "O_NONBLOCK"},
      {O_SYNC, "O_SYNC"},           {O_DSYNC, "O_DSYNC"},
      {O_DIRECT, "O_DIRECT"},       {0100000, "O_LARGEFILE"},  // 0 in 64-bit userspace headers
      {O_TMPFILE, "O_TMPFILE"},     {O_DIRECTORY, "O_DIRECTORY"},
      {O_NOFOLLOW, "O_NOFOLLOW"},   {O_NOATIME, "O_NOATIME"},
      {O_CLOEXEC, "O_CLOEXEC"},     {O_PATH, "O_PATH"},
  };
  for (const auto& [bit, name] : kFlags) {
    if ((v & bit) == bit) {
      absl::StrAppend(&s, "|", name);
      v &= ~bit;
    }
  }
  if (v != 0) absl::StrAppend(&s, absl::StrFormat("|%#o", v));
  return s;
}

std::string SignalName(uint64_t sig) {
  if (sig == 0) return "0";
  const char* abbrev = sig < 65 ? sigabbrev_np(static_cast<int>(sig)) : nullptr;
  if (abbrev != nullptr) return absl::StrCat("SIG", abbrev);
  if (sig >= static_cast<uint64_t>(SIGRTMIN) && sig <= static_cast<uint64_t>(SIGRTMAX)) {
    return absl::StrCat("SIGRT_", sig - SIGRTMIN);
  }
  return absl::StrCat(sig);
}

// Syscalls whose result is an address.
bool ReturnsAddress(uint64_t nr) {
  return nr == SYS_mmap || nr == SYS_brk || nr == SYS_mremap || nr == SYS_shmat;
}

}  // namespace

TraceCall::TraceCall(kernel::Task& t, const kernel::SyscallArgs& args)
    : t_(t), args_(args), sig_(nullptr) {
  auto it = Signatures().find(args.nr);
  if (it == Signatures().end()) return;
  sig_ = it->second;
  for (int i = 0; sig_[i] != '\0' && i < 6; ++i) {
    const uint64_t v = args.a[i];
    switch (sig_[i]) {
      case 'P':
        in_[i] = v == 0 ? "NULL" : ReadString(v, 4096);
        break;
      case 'S': {
        const uint64_t len = i + 1 < 6 ? args.a[i + 1] : 0;
        std::string buf(std::min(len, kMaxShown), '\0');
        if (t_.mm().CopyIn(v, buf.data(), buf.size()) == static_cast<int64_t>(buf.size())) {
          in_[i] = Quote(buf, len > kMaxShown);
        } else {
          in_[i] = absl::StrFormat("%#x", v);
        }
        break;
      }
      case 'V': {
        if (v == 0) {
          in_[i] = "NULL";
          break;
        }
        std::string out = "[";
        int n = 0;
        for (;; ++n) {
          uint64_t p = 0;
          if (t_.mm().CopyIn(v + 8 * n, &p, sizeof(p)) != sizeof(p)) {
            absl::StrAppend(&out, n ? ", " : "", "?");
            break;
          }
          if (p == 0) break;
          if (n == kMaxArgv) {
            absl::StrAppend(&out, ", ...");
            break;
          }
          absl::StrAppend(&out, n ? ", " : "", ReadString(p, 4096));
        }
        in_[i] = absl::StrCat(out, "]");
        break;
      }
      default:
        break;
    }
  }
}

std::string TraceCall::ReadString(uint64_t addr, uint64_t max_len) {
  std::string s;
  char c;
  while (s.size() < max_len) {
    if (t_.mm().CopyIn(addr + s.size(), &c, 1) != 1) return absl::StrFormat("%#x", addr);
    if (c == '\0') break;
    s.push_back(c);
  }
  const bool cut = s.size() > kMaxShown;
  if (cut) s.resize(kMaxShown);
  return Quote(s, cut);
}

std::string TraceCall::Quote(const std::string& s, bool truncated) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out.push_back(static_cast<char>(c));
        } else {
          absl::StrAppend(&out, absl::StrFormat("\\%o", c));
        }
    }
  }
  out += "\"";
  if (truncated) out += "...";
  return out;
}

std::string TraceCall::Arg(int i, char kind, int64_t result) {
  const uint64_t v = args_.a[i];
  switch (kind) {
    case 'd': return absl::StrCat(static_cast<int32_t>(v));
    case 'l': return absl::StrCat(static_cast<int64_t>(v));
    case 'u': return absl::StrCat(v);
    case 'f': return absl::StrCat(static_cast<int32_t>(v));
    case 'F':
      return static_cast<int32_t>(v) == AT_FDCWD ? "AT_FDCWD"
                                                  : absl::StrCat(static_cast<int32_t>(v));
    case 'O': return OpenFlags(v);
    case 'M': return absl::StrFormat("%#o", v);
    case 'G': return SignalName(v);
    case 'p': return v == 0 ? "NULL" : absl::StrFormat("%#x", v);
    case 'P':
    case 'S':
    case 'V':
      return in_[i];
    case 'B': {
      if (result <= 0 || v == 0) return v == 0 ? "NULL" : absl::StrFormat("%#x", v);
      const uint64_t n = static_cast<uint64_t>(result);
      std::string buf(std::min(n, kMaxShown), '\0');
      if (t_.mm().CopyIn(v, buf.data(), buf.size()) != static_cast<int64_t>(buf.size())) {
        return absl::StrFormat("%#x", v);
      }
      return Quote(buf, n > kMaxShown);
    }
    default: return absl::StrFormat("%#x", v);
  }
}

std::string TraceCall::Format(int64_t result) {
  const char* name = SyscallName(args_.nr);
  std::string line = absl::StrCat("[", t_.tid(), "] ",
                                  name != nullptr ? name : absl::StrCat("syscall_", args_.nr), "(");
  if (sig_ != nullptr) {
    for (int i = 0; sig_[i] != '\0' && i < 6; ++i) {
      absl::StrAppend(&line, i ? ", " : "", Arg(i, sig_[i], result));
    }
  } else {
    absl::StrAppend(&line, absl::StrFormat("%#x, %#x, %#x, %#x", args_.a[0], args_.a[1],
                                           args_.a[2], args_.a[3]));
  }
  absl::StrAppend(&line, ") = ");
  if (result == kernel::kNoReturnValue) {
    absl::StrAppend(&line, "?");
  } else if (result < 0 && result >= -4095) {
    const int e = static_cast<int>(-result);
    const char* en = strerrorname_np(e);
    absl::StrAppend(&line, "-1 ", en != nullptr ? en : absl::StrCat("E", e), " (",
                    strerrordesc_np(e) != nullptr ? strerrordesc_np(e) : "?", ")");
  } else if (ReturnsAddress(args_.nr)) {
    absl::StrAppend(&line, absl::StrFormat("%#x", static_cast<uint64_t>(result)));
  } else {
    absl::StrAppend(&line, result);
  }
  return line;
}

void TraceCall::Finish(int64_t result) {
  std::string line = Format(result);
  line.push_back('\n');
  fputs(line.c_str(), stderr);
}

}  // namespace sandboxd::syscalls
