// devfs: the sandbox's /dev.
//
// A small fixed tree in the Sentry's memory, never the host's /dev:
//
//   null    1:3   reads EOF, writes are swallowed
//   zero    1:5   reads zeros, writes are swallowed
//   full    1:7   reads zeros, writes fail with ENOSPC
//   random  1:8   reads from the host's getrandom(2); writes are accepted
//   urandom 1:9   (and, like Linux's, add nothing the sandbox can observe)
//   tty     5:0   the controlling terminal: DevFsOptions::open_tty, or
//                 ENXIO (the Sentry's open path answers it with the
//                 caller's controlling terminal before devfs is asked)
//   console 5:1   the host terminal (DevFsOptions::open_console), if any
//   ptmx    5:2   a new pseudo-terminal pair (DevFsOptions::open_ptmx)
//   fd -> /proc/self/fd, stdin/stdout/stderr -> /proc/self/fd/{0,1,2}
//   pts/    devpts (DevFsOptions::pts, sentry/fs/tty); without it an
//           empty directory and no /dev/ptmx (ENOENT rather than failing)
//   shm/    an empty directory, the mountpoint of /dev/shm's own tmpfs
//
// Every device is always ready for poll and ignores offsets; devices stat
// as S_IFCHR with their rdev on devfs's st_dev. The set of names is fixed:
// creating, linking, renaming or removing names fails with EPERM (Linux's
// devtmpfs allows it, but nothing in the sandbox needs it yet). Devices
// keep chmod/chown/utimes in memory.
//
// Thread-safety: all inodes are safe to use concurrently; only a device's
// metadata changes, under its own mutex.
#ifndef SANDBOXD_SENTRY_FS_DEVFS_H_
#define SANDBOXD_SENTRY_FS_DEVFS_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "sentry/fs/file.h"
#include "sentry/fs/inode.h"

namespace sandboxd::fs {

// Opens the sandbox's controlling terminal: 0 and *out, or -errno.
using TtyOpener = std::function<int64_t(std::shared_ptr<File>* out)>;

struct DevFsOptions {
  uint64_t dev = 0;  // st_dev of every devfs inode
  // /dev/tty. Unset: the sandbox has no controlling terminal (ENXIO).
  TtyOpener open_tty;
  // /dev/console. Unset: no console node.
  TtyOpener open_console;
  // /dev/ptmx (given its own inode) and the directory mounted as /dev/pts.
  // Unset: neither exists.
  std::function<int64_t(std::shared_ptr<Inode> ptmx, int flags,
                        std::shared_ptr<File>* out)>
      open_ptmx;
  std::shared_ptr<Inode> pts;
};

// glibc's makedev() encoding of st_rdev, usable in constants (makedev
// itself is not constexpr).
constexpr uint64_t MakeDev(uint64_t major, uint64_t minor) {
  return ((major & 0xfffff000ull) << 32) | ((major & 0xfffull) << 8) |
         ((minor & 0xffffff00ull) << 12) | (minor & 0xffull);
}

// The (major, minor) numbers of the devices, as Linux's devices.txt.
inline constexpr uint64_t kDevNull = MakeDev(1, 3);
inline constexpr uint64_t kDevZero = MakeDev(1, 5);
inline constexpr uint64_t kDevFull = MakeDev(1, 7);
inline constexpr uint64_t kDevRandom = MakeDev(1, 8);
inline constexpr uint64_t kDevURandom = MakeDev(1, 9);
inline constexpr uint64_t kDevTty = MakeDev(5, 0);
inline constexpr uint64_t kDevConsole = MakeDev(5, 1);
inline constexpr uint64_t kDevPtmx = MakeDev(5, 2);

class DevFs {
 public:
  explicit DevFs(DevFsOptions opts);
  DevFs(const DevFs&) = delete;
  DevFs& operator=(const DevFs&) = delete;

  std::shared_ptr<Inode> Root() const { return root_; }

 private:
  std::shared_ptr<Inode> root_;
};

// A TtyOpener for the Sentry's own descriptor `host_fd` (its stdin): each
// open gets a HostFile on a new dup of it, sharing the host's open file
// description, as every opener of a terminal shares its device. Returns an
// empty opener when `host_fd` is not a terminal, so that /dev/tty gives
// ENXIO as it does for a process without a controlling terminal.
TtyOpener HostTtyOpener(int host_fd);

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_DEVFS_H_
