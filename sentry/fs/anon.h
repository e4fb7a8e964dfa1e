// Anonymous files (pipes, eventfd, timerfd, epoll, inotify, signalfd):
// their inode numbers, device number and fstat.
#ifndef SANDBOXD_SENTRY_FS_ANON_H_
#define SANDBOXD_SENTRY_FS_ANON_H_

#include <sys/stat.h>

#include <atomic>
#include <cstdint>

namespace sandboxd::fs {

// Inode numbers of anonymous files (pipes, eventfd, ...), unique in the
// Sentry.
inline uint64_t NextAnonIno() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// The device number the Sentry's anonymous files report (Linux's pipefs and
// anon_inodefs have small anonymous device numbers too).
inline constexpr dev_t kAnonDev = 0xf;

// fstat of an anonymous file: mode (with type bits), owner 0 (the sandbox's
// ids), one link, 4096-byte blocks.
inline void AnonStat(struct stat* st, mode_t mode, uint64_t ino) {
  *st = {};
  st->st_dev = kAnonDev;
  st->st_ino = ino;
  st->st_mode = mode;
  st->st_nlink = 1;
  st->st_blksize = 4096;
}

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_ANON_H_
