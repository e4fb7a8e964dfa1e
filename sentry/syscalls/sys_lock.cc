// flock(2) and fcntl(2)'s record locks, on fs::LockTable. Argument checks
// and their order follow Linux's fs/locks.c (flock64_to_posix_lock,
// fcntl_getlk, fcntl_setlk, SYSCALL_DEFINE2(flock)).
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/syscall.h>

#include <cstdint>
#include <memory>

#include "sentry/fs/lock.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/lock_syscalls.h"

namespace sandboxd::syscalls {
namespace {

// The kernel's struct flock on x86_64, which glibc's matches.
static_assert(sizeof(struct flock) == 32, "struct flock layout");
static_assert(F_GETLK64 == F_GETLK && F_SETLK64 == F_SETLK &&
                  F_SETLKW64 == F_SETLKW,
              "x86_64 has one struct flock");

// LOCK_MAND (sys/file.h has it only with _GNU_SOURCE on some libcs).
constexpr unsigned kLockMand = 32;

bool Readable(int flags) {
  const int acc = flags & O_ACCMODE;
  return acc == O_RDONLY || acc == O_RDWR;
}
bool Writable(int flags) {
  const int acc = flags & O_ACCMODE;
  return acc == O_WRONLY || acc == O_RDWR;
}

// struct flock -> an absolute inclusive range, as flock64_to_posix_lock.
// Needs the file's offset (SEEK_CUR) or size (SEEK_END).
int64_t ToRange(fs::File& f, const struct flock& fl, fs::RecordLock* out) {
  int64_t base = 0;
  switch (fl.l_whence) {
    case SEEK_SET:
      break;
    case SEEK_CUR: {
      int64_t pos = f.Seek(0, SEEK_CUR);
      if (pos < 0) return pos;
      base = pos;
      break;
    }
    case SEEK_END: {
      struct stat st;
      RETURN_IF_ERRNO(f.Stat(&st));
      base = st.st_size;
      break;
    }
    default:
      return -EINVAL;
  }
  if (fl.l_start > fs::kLockOffsetMax - base) return -EOVERFLOW;
  int64_t start = base + fl.l_start;
  if (start < 0) return -EINVAL;
  int64_t end;
  if (fl.l_len > 0) {
    if (fl.l_len - 1 > fs::kLockOffsetMax - start) return -EOVERFLOW;
    end = start + (fl.l_len - 1);
  } else if (fl.l_len < 0) {
    // POSIX.1-2001: the range [start + l_len, start - 1].
    if (start + fl.l_len < 0) return -EINVAL;
    end = start - 1;
    start += fl.l_len;
  } else {
    end = fs::kLockOffsetMax;
  }
  if (fl.l_type != F_RDLCK && fl.l_type != F_WRLCK && fl.l_type != F_UNLCK) {
    return -EINVAL;
  }
  out->type = fl.l_type;
  out->start = start;
  out->end = end;
  return 0;
}

int64_t GetLock(Task& t, fs::File& f, const std::shared_ptr<fs::Inode>& inode,
                int cmd, uint64_t arg, struct flock fl) {
  if (fl.l_type != F_RDLCK && fl.l_type != F_WRLCK) return -EINVAL;
  fs::RecordLock want;
  RETURN_IF_ERRNO(ToRange(f, fl, &want));
  if (cmd == F_OFD_GETLK) {
    if (fl.l_pid != 0) return -EINVAL;
    want.owner = fs::RecordLockOwner::Ofd(&f);
  } else {
    want.owner =
        fs::RecordLockOwner::Posix(&t.group().fds(), t.group().tgid());
  }
  fs::RecordLock held;
  if (!fs::LockTable::Global().TestRecord(inode, want, &held)) {
    // Only l_type changes when nothing is in the way.
    fl.l_type = F_UNLCK;
  } else {
    fl.l_type = held.type;
    fl.l_whence = SEEK_SET;
    fl.l_start = held.start;
    fl.l_len = held.end == fs::kLockOffsetMax ? 0 : held.end - held.start + 1;
    fl.l_pid = held.owner.kind == fs::RecordLockOwner::Kind::kOfd
                   ? -1
                   : held.owner.pid;
  }
  RETURN_IF_ERRNO(CopyOutObj(t, arg, fl));
  return 0;
}

int64_t SetLock(Task& t, fs::File& f, const std::shared_ptr<fs::Inode>& inode,
                int cmd, const struct flock& fl) {
  fs::RecordLock req;
  RETURN_IF_ERRNO(ToRange(f, fl, &req));
  const int flags = f.StatusFlags();
  if ((req.type == F_RDLCK && !Readable(flags)) ||
      (req.type == F_WRLCK && !Writable(flags))) {
    return -EBADF;
  }
  if (cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW) {
    if (fl.l_pid != 0) return -EINVAL;
    req.owner = fs::RecordLockOwner::Ofd(&f);
  } else {
    req.owner =
        fs::RecordLockOwner::Posix(&t.group().fds(), t.group().tgid());
  }
  const bool wait = cmd == F_SETLKW || cmd == F_OFD_SETLKW;
  return fs::LockTable::Global().SetRecord(inode, req,
                                           wait ? t.io().blocker : nullptr);
}

int64_t SysFlock(Task& t, const SyscallArgs& a) {
  const unsigned cmd = static_cast<unsigned>(a.a[1]);
  // Linux has ignored LOCK_MAND since 5.17 (it never excluded anything).
  if (cmd & kLockMand) return 0;
  short type;
  switch (cmd & ~static_cast<unsigned>(LOCK_NB)) {
    case LOCK_SH: type = F_RDLCK; break;
    case LOCK_EX: type = F_WRLCK; break;
    case LOCK_UN: type = F_UNLCK; break;
    default: return -EINVAL;
  }
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[0]));
  const int flags = f->StatusFlags();
  if (flags & O_PATH) return -EBADF;
  // Access mode 3 ("ioctl only") opens neither for reading nor writing.
  if (type != F_UNLCK && !Readable(flags) && !Writable(flags)) return -EBADF;
  std::shared_ptr<fs::Inode> inode = f->inode();
  // Host-backed descriptors (inherited stdio) have no Sentry inode to
  // hang a lock on.
  if (inode == nullptr) return -ENOLCK;
  return fs::LockTable::Global().Flock(
      inode, f.get(), type, (cmd & LOCK_NB) ? nullptr : t.io().blocker);
}

}  // namespace

int64_t FcntlLock(Task& t, fs::File& f, int cmd, uint64_t arg) {
  // fcntl on an O_PATH descriptor allows none of the lock commands.
  if (f.StatusFlags() & O_PATH) return -EBADF;
  struct flock fl;
  RETURN_IF_ERRNO(CopyInObj(t, arg, &fl));
  std::shared_ptr<fs::Inode> inode = f.inode();
  if (inode == nullptr) return -ENOLCK;
  switch (cmd) {
    case F_GETLK:
    case F_OFD_GETLK:
      return GetLock(t, f, inode, cmd, arg, fl);
    case F_SETLK:
    case F_SETLKW:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
      return SetLock(t, f, inode, cmd, fl);
    default:
      return -EINVAL;
  }
}

void RegisterLock(Entry* table) {
  table[SYS_flock] = {SysFlock, "flock"};
}

}  // namespace sandboxd::syscalls
