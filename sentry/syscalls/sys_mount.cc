// mount(2) and umount2(2) inside the sandbox's one mount namespace.
//
// The sandbox's processes are root in their own namespaces, so, as in a
// Linux user namespace, they may mount tmpfs where they like. Only tmpfs
// is offered: other filesystem types Linux knows (proc, sysfs, devpts,
// overlay, bind mounts, ...) give EPERM, unknown ones ENODEV. Mount
// propagation does not exist here, so MS_PRIVATE (with or without MS_REC)
// on an existing mount is already true and succeeds; MS_SHARED, MS_SLAVE,
// MS_UNBINDABLE, MS_BIND and MS_MOVE give EPERM.
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/paths.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

// st_dev of the tmpfs mounts made by the program: after the Sentry's own
// (boot.cc uses 0x801..0x807, and 0x880 up for the spec's mounts).
std::atomic<uint64_t> next_tmpfs_dev{0x810};

bool KnownButUnsupported(const std::string& type) {
  static const char* const kTypes[] = {
      "proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2", "overlay",
      "devtmpfs", "ramfs", "bpf", "tracefs", "debugfs", "securityfs",
      "hugetlbfs", "fusectl", "binfmt_misc", "ext4", "xfs", "btrfs", "vfat",
      "iso9660", "squashfs", "nfs", "fuse"};
  for (const char* k : kTypes) {
    if (type == k) return true;
  }
  return false;
}

int64_t SysMount(Task& t, const SyscallArgs& a) {
  std::string target;
  RETURN_IF_ERRNO(ReadPath(t, a.a[1], &target));
  const uint64_t flags = a.a[3];
  fs::Location where;
  if (int64_t r = ResolveAt(t, AT_FDCWD, target, true, false, &where); r < 0) {
    return r;
  }
  if (flags & (MS_BIND | MS_MOVE | MS_SHARED | MS_SLAVE | MS_UNBINDABLE)) {
    return -EPERM;
  }
  if (flags & MS_PRIVATE) {
    // Propagation only: already private (there is no other kind here).
    return where.dentry == where.mount->root ? 0 : -EINVAL;
  }
  if (flags & MS_REMOUNT) {
    if (where.dentry != where.mount->root) return -EINVAL;
    where.mount->read_only = (flags & MS_RDONLY) != 0;
    return 0;
  }
  std::string type;
  if (a.a[2] == 0) return -EFAULT;
  RETURN_IF_ERRNO(ReadPath(t, a.a[2], &type));
  if (type != "tmpfs") return KnownButUnsupported(type) ? -EPERM : -ENODEV;
  std::string source = "none";
  if (a.a[0] != 0) {
    RETURN_IF_ERRNO(ReadPath(t, a.a[0], &source));
  }
  const uint64_t total_ram = t.kernel().options().total_ram;
  fs::TmpFsOptions opts = fs::DefaultTmpFsOptions(total_ram);
  opts.root_mode = 01777;
  if (a.a[4] != 0) {
    std::string data;
    RETURN_IF_ERRNO(ReadPath(t, a.a[4], &data));
    RETURN_IF_ERRNO(fs::ParseTmpFsOptions(data, total_ram, &opts));
  }
  if (where.inode().Type() != S_IFDIR) return -ENOTDIR;
  opts.dev = next_tmpfs_dev.fetch_add(1);
  // The root inode keeps the superblock; the TmpFs object is not needed
  // after it made them.
  fs::TmpFs tmpfs(&t.kernel().memory_file(), opts);
  return t.kernel().vfs().MountAt(where, tmpfs.Root(), "tmpfs", source,
                                  (flags & MS_RDONLY) != 0);
}

int64_t SysUmount2(Task& t, const SyscallArgs& a) {
  const uint64_t flags = a.a[1];
  if (flags & ~static_cast<uint64_t>(MNT_FORCE | MNT_DETACH | MNT_EXPIRE |
                                     UMOUNT_NOFOLLOW)) {
    return -EINVAL;
  }
  if ((flags & MNT_EXPIRE) && (flags & (MNT_FORCE | MNT_DETACH))) {
    return -EINVAL;
  }
  std::string target;
  RETURN_IF_ERRNO(ReadPath(t, a.a[0], &target));
  fs::Location where;
  if (int64_t r = ResolveAt(t, AT_FDCWD, target, !(flags & UMOUNT_NOFOLLOW),
                            false, &where);
      r < 0) {
    return r;
  }
  // MNT_EXPIRE: the first call marks the mount and fails with EAGAIN, a
  // second one unmounts it if it is unused. (Linux also clears the mark
  // when the mount is used in between; here it stays.)
  if ((flags & MNT_EXPIRE) && where.dentry == where.mount->root &&
      !where.mount->expire_mark) {
    where.mount->expire_mark = true;
    return -EAGAIN;
  }
  return t.kernel().vfs().Unmount(std::move(where), (flags & MNT_DETACH) != 0);
}

}  // namespace

void RegisterMount(Entry* table) {
  table[SYS_mount] = {SysMount, "mount"};
  table[SYS_umount2] = {SysUmount2, "umount2"};
}

}  // namespace sandboxd::syscalls
