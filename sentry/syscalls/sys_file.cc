// File descriptor syscalls on the files this slice has (inherited host
// descriptors). Path-based calls come with the VFS.
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "sentry/fs/file_async.h"
#include "sentry/fs/pipe.h"
#include "sentry/socket/host_socket.h"
#include "sentry/socket/socket.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/lock_syscalls.h"
#include "sentry/syscalls/memfd_syscalls.h"
#include "sentry/syscalls/socket_syscalls.h"
#include "sentry/syscalls/syscalls.h"
#include "sentry/syscalls/tty.h"

namespace sandboxd::syscalls {
namespace {

constexpr uint64_t kChunk = 64 * 1024;
constexpr int kIovMax = 1024;
constexpr uint64_t kMaxRw = 0x7ffff000;  // MAX_RW_COUNT

// Files whose read/write must be one call: packets (datagram and
// seqpacket sockets) keep their boundaries, and a stream must not be asked
// again once it returned what it had. Regular files are read in chunks.
bool OneCall(fs::File& f) {
  auto inode = f.inode();
  return inode == nullptr || inode->Type() != S_IFREG;
}

// The most a single call on such a file moves through the Sentry.
constexpr uint64_t kMaxOneCall = 4 << 20;

// Reads from `f` into application memory at addr, in chunks.
int64_t ReadInto(Task& t, fs::File& f, uint64_t addr, uint64_t n,
                 int64_t offset) {
  n = std::min(n, kMaxRw);
  if (OneCall(f) && n > kChunk) {
    std::vector<uint8_t> big(std::min(n, kMaxOneCall));
    int64_t r = f.Read(big.data(), big.size(), offset, t.io());
    if (r <= 0) return r;
    return t.mm().CopyOut(addr, big.data(), static_cast<uint64_t>(r));
  }
  uint8_t buf[kChunk];
  uint64_t done = 0;
  while (done < n) {
    uint64_t want = std::min(kChunk, n - done);
    int64_t r = f.Read(buf, want, offset < 0 ? -1 : offset + done, t.io());
    if (r < 0) return done > 0 ? done : r;
    if (r == 0) break;
    int64_t c = t.mm().CopyOut(addr + done, buf, r);
    if (c < 0) return done > 0 ? done : c;
    done += c;
    if (c < r || static_cast<uint64_t>(r) < want) break;
  }
  return done;
}

int64_t WriteFrom(Task& t, fs::File& f, uint64_t addr, uint64_t n,
                  int64_t offset) {
  n = std::min(n, kMaxRw);
  if (OneCall(f) && n > kChunk) {
    std::vector<uint8_t> big(std::min(n, kMaxOneCall));
    int64_t c = t.mm().CopyIn(addr, big.data(), big.size());
    if (c < 0) return c;
    return f.Write(big.data(), static_cast<uint64_t>(c), offset, t.io());
  }
  uint8_t buf[kChunk];
  uint64_t done = 0;
  while (done < n) {
    // A killed task stops here, as Linux's generic_perform_write does on
    // a fatal signal: 2 GiB into tmpfs take seconds.
    if (t.group().exiting() ||
        (t.pending_signals() & kernel::SigBit(SIGKILL)) != 0) {
      return done > 0 ? done : -EINTR;
    }
    uint64_t want = std::min(kChunk, n - done);
    int64_t c = t.mm().CopyIn(addr + done, buf, want);
    if (c < 0) return done > 0 ? done : c;
    int64_t w = f.Write(buf, c, offset < 0 ? -1 : offset + done, t.io());
    if (w < 0) return done > 0 ? done : w;
    done += w;
    if (w < c || c < static_cast<int64_t>(want)) break;
  }
  return done;
}

int64_t ReadIovecs(Task& t, uint64_t addr, uint64_t cnt,
                   std::vector<iovec>* out) {
  if (cnt > kIovMax) return -EINVAL;
  out->resize(cnt);
  if (cnt == 0) return 0;
  RETURN_IF_ERRNO(CopyInBytes(t, addr, out->data(), cnt * sizeof(iovec)));
  uint64_t total = 0;
  for (const iovec& v : *out) {
    if (v.iov_len > static_cast<uint64_t>(INT64_MAX) - total) return -EINVAL;
    total += v.iov_len;
  }
  return 0;
}

int64_t VectorIo(Task& t, const SyscallArgs& a, bool write, int64_t offset) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  std::vector<iovec> iov;
  RETURN_IF_ERRNO(ReadIovecs(t, a.a[1], a.a[2], &iov));
  // A socket takes all the vectors in one call, as Linux's sock_write_iter
  // (one datagram; with TCP_NODELAY one segment, not one per vector).
  if (offset < 0) {
    if (auto* s = dynamic_cast<socket::Socket*>(f.get())) {
      return SocketVectorIo(t, *s, std::move(iov), write);
    }
  }
  // readv/writev split by a checkpoint's stop: the rest of it.
  uint64_t skip = offset < 0 ? t.TakeResumedMoved() : 0;
  uint64_t done = 0;
  for (const iovec& v : iov) {
    if (v.iov_len == 0) continue;
    uint64_t base = reinterpret_cast<uint64_t>(v.iov_base);
    uint64_t len = v.iov_len;
    if (skip > 0) {
      uint64_t k = std::min(skip, len);
      skip -= k;
      done += k;
      base += k;
      len -= k;
      if (len == 0) continue;
    }
    int64_t off = offset < 0 ? -1 : offset + done;
    int64_t n = write ? WriteFrom(t, *f, base, len, off)
                      : ReadInto(t, *f, base, len, off);
    if (n < 0) return done > 0 ? done : n;
    done += n;
    if (static_cast<uint64_t>(n) < len) break;
    // The next vector's wait must not park for a re-execution that would
    // move this one's data again.
    t.MarkProgress();
  }
  return done;
}

int64_t SysRead(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  // A read split by a checkpoint's stop: the rest of it.
  uint64_t moved = std::min<uint64_t>(t.TakeResumedMoved(), a.a[2]);
  return kernel::WithResumedMoved(
      moved, ReadInto(t, *f, a.a[1] + moved, a.a[2] - moved, -1));
}

// A write to a pipe or socket with no reader raises SIGPIPE as well as
// failing with EPIPE (Linux does it in the pipe and socket code; here it is
// done once for every file).
int64_t WithSigpipe(Task& t, int64_t r) {
  if (r == -EPIPE) t.SendSignal(SIGPIPE, t.group().tgid());
  return r;
}

int64_t SysWrite(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  // A write split by a checkpoint's stop: the rest of it.
  uint64_t moved = std::min<uint64_t>(t.TakeResumedMoved(), a.a[2]);
  return WithSigpipe(
      t, kernel::WithResumedMoved(
             moved, WriteFrom(t, *f, a.a[1] + moved, a.a[2] - moved, -1)));
}

int64_t SysPread(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  if (static_cast<int64_t>(a.a[3]) < 0) return -EINVAL;
  return ReadInto(t, *f, a.a[1], a.a[2], a.a[3]);
}

int64_t SysPwrite(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  if (static_cast<int64_t>(a.a[3]) < 0) return -EINVAL;
  return WithSigpipe(t, WriteFrom(t, *f, a.a[1], a.a[2], a.a[3]));
}

int64_t SysReadv(Task& t, const SyscallArgs& a) { return VectorIo(t, a, false, -1); }
int64_t SysWritev(Task& t, const SyscallArgs& a) {
  return WithSigpipe(t, VectorIo(t, a, true, -1));
}
int64_t SysPreadv(Task& t, const SyscallArgs& a) {
  if (static_cast<int64_t>(a.a[3]) < 0) return -EINVAL;
  return VectorIo(t, a, false, a.a[3]);
}
int64_t SysPwritev(Task& t, const SyscallArgs& a) {
  if (static_cast<int64_t>(a.a[3]) < 0) return -EINVAL;
  return WithSigpipe(t, VectorIo(t, a, true, a.a[3]));
}

// preadv2/pwritev2(fd, iov, iovcnt, pos_l, pos_h, flags): on x86-64 pos_l
// is the whole offset; -1 means the file position (readv/writev). Flags:
// RWF_HIPRI, RWF_DSYNC and RWF_SYNC change nothing here (every write is
// complete when it returns); RWF_NOWAIT and RWF_APPEND are not supported
// (EOPNOTSUPP, as Linux answers for a file without them), unknown flags
// too.
constexpr uint64_t kRwfHipri = 0x1, kRwfDsync = 0x2, kRwfSync = 0x4;

int64_t Rwv2(Task& t, const SyscallArgs& a, bool write) {
  const int64_t off = static_cast<int64_t>(a.a[3]);
  if (off < -1) return -EINVAL;
  if ((a.a[5] & ~(kRwfHipri | kRwfDsync | kRwfSync)) != 0) return -EOPNOTSUPP;
  int64_t r = VectorIo(t, a, write, off);
  return write ? WithSigpipe(t, r) : r;
}
int64_t SysPreadv2(Task& t, const SyscallArgs& a) { return Rwv2(t, a, false); }
int64_t SysPwritev2(Task& t, const SyscallArgs& a) { return Rwv2(t, a, true); }

int64_t SysLseek(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  if (a.a[2] > SEEK_HOLE) return -EINVAL;
  return f->Seek(static_cast<int64_t>(a.a[1]), static_cast<int>(a.a[2]));
}

int64_t SysClose(Task& t, const SyscallArgs& a) {
  if (a.a[0] > INT32_MAX) return -EBADF;
  return t.group().fds().Close(static_cast<int>(a.a[0]));
}

// close_range(2). CLOSE_RANGE_UNSHARE first gives the caller a table of
// its own when it shares one with another process (clone CLONE_FILES
// without CLONE_THREAD), as execve does; the Sentry keeps one table per
// thread group, so a group of several threads sharing its table with
// another process cannot unshare it for one thread only: that case is
// refused with EINVAL and counted.
int64_t SysCloseRange(Task& t, const SyscallArgs& a) {
  constexpr uint64_t kUnshare = 1u << 1;  // CLOSE_RANGE_UNSHARE
  constexpr uint64_t kCloexec = 1u << 2;  // CLOSE_RANGE_CLOEXEC
  const uint32_t first = static_cast<uint32_t>(a.a[0]);
  const uint32_t last = static_cast<uint32_t>(a.a[1]);
  const uint64_t flags = static_cast<uint32_t>(a.a[2]);
  if ((flags & ~(kUnshare | kCloexec)) != 0 || first > last) return -EINVAL;
  kernel::ThreadGroup& g = t.group();
  if ((flags & kUnshare) != 0 && g.fds_ptr().use_count() > 1) {
    if (g.NumTasks() > 1) {
      t.kernel().CountUnimplemented(SYS_close_range);
      return -EINVAL;
    }
    std::shared_ptr<fs::FdTable> own = g.fds().Fork();
    t.kernel().WithTasklistLock([&] { g.set_fds(std::move(own)); });
  }
  g.fds().CloseRange(first, last, (flags & kCloexec) != 0);
  return 0;
}

int64_t StatOut(Task& t, fs::File& f, uint64_t addr) {
  struct stat st;
  RETURN_IF_ERRNO(f.Stat(&st));
  return CopyOutObj(t, addr, st);
}

int64_t SysFstat(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  return StatOut(t, *f, a.a[1]);
}

// Signal-driven I/O (fs/file_async.h), as Linux's fs/fcntl.c.

// f_setown's lookup: the owner must be a pid in use (a thread, or a process
// group or session id); pid 0 clears the owner. The setter's uids go with it
// (sigio_perm).
int64_t SetOwner(Task& t, fs::File& f, int type, pid_t pid) {
  if (pid != 0 && !t.kernel().PidInUse(pid)) return -ESRCH;
  fs::AsyncOwner o;
  o.type = type;
  o.pid = pid;
  o.uid = t.own_creds().ruid;
  o.euid = t.own_creds().euid;
  f.async().set_owner(o);
  return 0;
}

// F_SETOWN, FIOSETOWN, SIOCSPGRP: a pid, or -pgrp.
int64_t SetOwn(Task& t, fs::File& f, int who) {
  int type = F_OWNER_PID;
  if (who < 0) {
    if (who == INT_MIN) return -EINVAL;
    type = F_OWNER_PGRP;
    who = -who;
  }
  return SetOwner(t, f, type, who);
}

// F_GETOWN, FIOGETOWN, SIOCGPGRP.
int GetOwn(fs::File& f) {
  const fs::FileAsync* as = f.async_if_any();
  if (as == nullptr) return 0;
  const fs::AsyncOwner o = as->owner();
  return o.type == F_OWNER_PGRP ? -o.pid : o.pid;
}

bool AsyncOn(fs::File& f) {
  const fs::FileAsync* as = f.async_if_any();
  return as != nullptr && as->enabled();
}

// SIOCGIFCONF on the struct ifconf at `addr`: the entries go to the
// application's ifc_buf through a Sentry buffer, and ifc_len is written
// back (dev_ifconf; a null ifc_buf asks for the length only).
int64_t InterfaceConf(Task& t, uint64_t addr) {
  struct ifconf ifc;
  RETURN_IF_ERRNO(CopyInObj(t, addr, &ifc));
  const uint64_t ubuf = reinterpret_cast<uint64_t>(ifc.ifc_buf);
  int64_t n;
  if (ubuf == 0) {
    n = socket::InterfaceConf(nullptr, 0);
  } else {
    // More than a namespace has interfaces for, so no truncation hides
    // behind the bound.
    constexpr int kMaxConf = 64 * 1024;
    // No room (or a negative length) writes nothing; the host must not
    // see a null buffer, which asks for the length.
    std::vector<uint8_t> buf(std::clamp(ifc.ifc_len, 0, kMaxConf));
    n = buf.empty() ? 0
                    : socket::InterfaceConf(buf.data(),
                                            static_cast<int>(buf.size()));
    if (n > 0) RETURN_IF_ERRNO(CopyOutBytes(t, ubuf, buf.data(), n));
  }
  if (n < 0) return n;
  return CopyOutObj(t, addr + offsetof(struct ifconf, ifc_len),
                    static_cast<int>(n));
}

int64_t SysIoctl(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  // The request is an unsigned int: musl passes it sign-extended.
  const uint64_t request = static_cast<uint32_t>(a.a[1]);
  // The requests every file takes, terminals included (Linux's
  // do_vfs_ioctl, before any driver sees the call).
  switch (request) {
    case FIOCLEX:
    case FIONCLEX:
      return t.group().fds().SetCloexec(static_cast<int>(a.a[0]),
                                        request == FIOCLEX);
    case FIONBIO: {
      int on;
      RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &on));
      int fl = f->StatusFlags();
      return f->SetStatusFlags(on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
    }
    case FIOASYNC: {
      int on;
      RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &on));
      if ((on != 0) == AsyncOn(*f)) return 0;
      // ioctl_fioasync: only a file with f_op->fasync.
      if (f->AsyncEvents() == 0) return -ENOTTY;
      f->async().SetEnabled(*f, on != 0, static_cast<int>(a.a[0]));
      return 0;
    }
    default:
      break;
  }
  // sock_ioctl's owner requests (an int through the pointer).
  if (dynamic_cast<socket::Socket*>(f.get()) != nullptr) {
    switch (request) {
      case FIOSETOWN:
      case SIOCSPGRP: {
        int who;
        RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &who));
        return SetOwn(t, *f, who);
      }
      case FIOGETOWN:
      case SIOCGPGRP:
        return CopyOutObj(t, a.a[2], GetOwn(*f));
      case SIOCGIFCONF:
        return InterfaceConf(t, a.a[2]);
      default:
        break;
    }
  }
  bool tty;
  int64_t tr = TerminalIoctl(t, f, request, a.a[2], &tty);
  if (tty) return tr;
  bool in, out;
  int64_t size = fs::IoctlArgSize(request, &in, &out);
  if (size < 0) return -ENOTTY;
  std::vector<uint8_t> buf(size);
  if (in) RETURN_IF_ERRNO(CopyInBytes(t, a.a[2], buf.data(), size));
  int64_t r = f->Ioctl(request, buf.data());
  if (r < 0) return r;
  if (out) RETURN_IF_ERRNO(CopyOutBytes(t, a.a[2], buf.data(), size));
  return r;
}

int64_t SysDup(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  return t.group().fds().Install(f, false);
}

int64_t Dup3(Task& t, uint64_t oldfd, uint64_t newfd, int flags) {
  if (flags & ~O_CLOEXEC) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, oldfd));
  if (newfd > INT32_MAX) return -EBADF;
  return t.group().fds().InstallAt(static_cast<int>(newfd), f,
                                   (flags & O_CLOEXEC) != 0);
}

int64_t SysDup2(Task& t, const SyscallArgs& a) {
  if (a.a[0] == a.a[1]) return FileOrNull(t, a.a[0]) ? a.a[0] : -EBADF;
  return Dup3(t, a.a[0], a.a[1], 0);
}

int64_t SysDup3(Task& t, const SyscallArgs& a) {
  if (a.a[0] == a.a[1]) return -EINVAL;
  return Dup3(t, a.a[0], a.a[1], static_cast<int>(a.a[2]));
}

int64_t SysFcntl(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  int fd = static_cast<int>(a.a[0]);
  fs::FdTable& fds = t.group().fds();
  switch (a.a[1]) {
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
      if (a.a[2] > INT32_MAX) return -EINVAL;
      return fds.Install(f, a.a[1] == F_DUPFD_CLOEXEC, static_cast<int>(a.a[2]));
    case F_GETFD:
      return fds.GetCloexec(fd);
    case F_SETFD:
      return fds.SetCloexec(fd, (a.a[2] & FD_CLOEXEC) != 0);
    case F_GETFL:
      // FASYNC is fasync's alone: only a file with one shows it.
      return (f->StatusFlags() & ~O_ASYNC) | (AsyncOn(*f) ? O_ASYNC : 0);
    case F_SETFL: {
      const int fl = static_cast<int>(a.a[2]);
      RETURN_IF_ERRNO(f->SetStatusFlags(fl));
      // setfl: O_ASYNC changes go through fasync; a file without one drops
      // the flag (O_ASYNC is not in Linux's SETFL_MASK).
      if (f->AsyncEvents() != 0 && ((fl & O_ASYNC) != 0) != AsyncOn(*f)) {
        f->async().SetEnabled(*f, (fl & O_ASYNC) != 0, fd);
      }
      return 0;
    }
    case F_GETOWN:
      return GetOwn(*f);
    case F_SETOWN:
      return SetOwn(t, *f, static_cast<int>(a.a[2]));
    case F_GETOWN_EX: {
      struct f_owner_ex ex = {F_OWNER_PID, 0};
      if (const fs::FileAsync* as = f->async_if_any()) {
        const fs::AsyncOwner o = as->owner();
        ex.type = static_cast<decltype(ex.type)>(o.type);
        ex.pid = o.pid;
      }
      return CopyOutObj(t, a.a[2], ex);
    }
    case F_SETOWN_EX: {
      struct f_owner_ex ex;
      RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &ex));
      if (ex.type != F_OWNER_TID && ex.type != F_OWNER_PID &&
          ex.type != F_OWNER_PGRP) {
        return -EINVAL;
      }
      return SetOwner(t, *f, ex.type, ex.pid);
    }
    case F_GETSIG: {
      const fs::FileAsync* as = f->async_if_any();
      return as == nullptr ? 0 : as->sig();
    }
    case F_SETSIG:
      if (a.a[2] > 64) return -EINVAL;  // valid_signal: 0..._NSIG
      f->async().set_sig(static_cast<int>(a.a[2]));
      return 0;
    case F_GETPIPE_SZ:
    case F_SETPIPE_SZ: {
      fs::PipeEnd* end = fs::AsPipeEnd(*f);
      if (end == nullptr) return -EBADF;
      if (a.a[1] == F_GETPIPE_SZ) return static_cast<int64_t>(end->pipe().capacity());
      if (a.a[2] > INT32_MAX) return -EINVAL;
      return end->pipe().SetCapacity(a.a[2]);
    }
    case F_GETLK: case F_SETLK: case F_SETLKW:
    case F_OFD_GETLK: case F_OFD_SETLK: case F_OFD_SETLKW:
      return FcntlLock(t, *f, static_cast<int>(a.a[1]), a.a[2]);
    case F_ADD_SEALS:
    case F_GET_SEALS:
      return FcntlSeals(t, *f, static_cast<int>(a.a[1]), a.a[2]);
    case F_NOTIFY:
      // dnotify: a request for no events (0 or DN_MULTISHOT alone) removes
      // the descriptor's notifications, which it never has here: 0, as
      // Linux answers it on any file. Notifications themselves are not
      // offered (inotify is): EINVAL, counted.
      if ((static_cast<uint32_t>(a.a[2]) & ~static_cast<uint32_t>(DN_MULTISHOT)) == 0) {
        return 0;
      }
      t.kernel().CountUnimplemented(SYS_fcntl);
      return -EINVAL;
    default:
      t.kernel().CountUnimplemented(SYS_fcntl);
      return -EINVAL;
  }
}

}  // namespace

void RegisterFile(Entry* table) {
  table[SYS_read] = {SysRead, "read"};
  table[SYS_write] = {SysWrite, "write"};
  table[SYS_pread64] = {SysPread, "pread64"};
  table[SYS_pwrite64] = {SysPwrite, "pwrite64"};
  table[SYS_readv] = {SysReadv, "readv"};
  table[SYS_writev] = {SysWritev, "writev"};
  table[SYS_preadv] = {SysPreadv, "preadv"};
  table[SYS_pwritev] = {SysPwritev, "pwritev"};
  table[SYS_preadv2] = {SysPreadv2, "preadv2"};
  table[SYS_pwritev2] = {SysPwritev2, "pwritev2"};
  table[SYS_lseek] = {SysLseek, "lseek"};
  table[SYS_close] = {SysClose, "close"};
  table[SYS_close_range] = {SysCloseRange, "close_range"};
  table[SYS_fstat] = {SysFstat, "fstat"};
  table[SYS_ioctl] = {SysIoctl, "ioctl"};
  table[SYS_dup] = {SysDup, "dup"};
  table[SYS_dup2] = {SysDup2, "dup2"};
  table[SYS_dup3] = {SysDup3, "dup3"};
  table[SYS_fcntl] = {SysFcntl, "fcntl"};
}

}  // namespace sandboxd::syscalls
