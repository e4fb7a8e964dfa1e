// inotify_init, inotify_init1, inotify_add_watch, inotify_rm_watch
// (fs/notify/inotify/inotify_user.c) over fs::InotifyFile.
#include <errno.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/syscall.h>

#include <memory>
#include <string>

#include "sentry/fs/inotify.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/paths.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

int64_t InotifyInit(Task& t, uint64_t flags) {
  if (flags & ~static_cast<uint64_t>(IN_NONBLOCK | IN_CLOEXEC)) return -EINVAL;
  auto f = std::make_shared<fs::InotifyFile>((flags & IN_NONBLOCK) != 0);
  return t.group().fds().Install(f, (flags & IN_CLOEXEC) != 0);
}

int64_t SysInotifyInit(Task& t, const SyscallArgs& a) {
  return InotifyInit(t, 0);
}

int64_t SysInotifyInit1(Task& t, const SyscallArgs& a) {
  return InotifyInit(t, a.a[0]);
}

// The inotify file behind fd: -EBADF, or -EINVAL for other files.
SysResult<std::shared_ptr<fs::InotifyFile>> InotifyFor(Task& t, uint64_t fd) {
  return FileAs<fs::InotifyFile>(t, fd, -EINVAL);
}

int64_t SysInotifyAddWatch(Task& t, const SyscallArgs& a) {
  uint32_t mask = static_cast<uint32_t>(a.a[2]);
  if ((mask & ~fs::kInotifyAllBits) || !(mask & fs::kInotifyAllBits)) {
    return -EINVAL;
  }
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::InotifyFile> in,
                         InotifyFor(t, a.a[0]));
  if ((mask & IN_MASK_ADD) && (mask & IN_MASK_CREATE)) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::string path, ReadPath(t, a.a[1]));
  fs::Location loc;
  RETURN_IF_ERRNO(
      ResolveAt(t, AT_FDCWD, path, !(mask & IN_DONT_FOLLOW), false, &loc));
  if ((mask & IN_ONLYDIR) && loc.inode().Type() != S_IFDIR) return -ENOTDIR;
  return in->AddWatch(loc.dentry->inode(), mask);
}

int64_t SysInotifyRmWatch(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::InotifyFile> in,
                         InotifyFor(t, a.a[0]));
  return in->RemoveWatch(static_cast<int>(a.a[1]));
}

}  // namespace

void RegisterInotify(Entry* table) {
  table[SYS_inotify_init] = {SysInotifyInit, "inotify_init"};
  table[SYS_inotify_init1] = {SysInotifyInit1, "inotify_init1"};
  table[SYS_inotify_add_watch] = {SysInotifyAddWatch, "inotify_add_watch"};
  table[SYS_inotify_rm_watch] = {SysInotifyRmWatch, "inotify_rm_watch"};
}

}  // namespace sandboxd::syscalls
