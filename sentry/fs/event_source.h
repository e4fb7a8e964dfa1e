// Files that can become ready: pipes, eventfd, timerfd, epoll, host
// streams. They notify readiness changes through a WaitQueue that they
// share-own, which is what lets epoll watch them safely.
//
// Why a shared queue: epoll must drop a watched file when the file's last
// descriptor closes (Linux ties the interest to the file description), and
// it holds the file only weakly so as not to keep it open (a watched pipe
// end must still give EOF). When the weak reference dies, epoll's waiter may
// still sit in the file's queue, and a notification could reach it after
// epoll freed it. Holding the queue itself lets epoll remove its waiter
// from it whether or not the file is still alive.
#ifndef SANDBOXD_SENTRY_FS_EVENT_SOURCE_H_
#define SANDBOXD_SENTRY_FS_EVENT_SOURCE_H_

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "sentry/fs/waiter.h"

namespace sandboxd::fs {

// The contract: once the file is destroyed, the waiters registered through
// EventRegister can only still be on event_queue() (a file that registers
// waiters elsewhere too, e.g. on a peer's queue, removes them itself when
// it is released).
class EventSource {
 public:
  virtual ~EventSource() = default;
  // The queue File::EventRegister adds waiters to; null if this file never
  // becomes ready or unready (then epoll_ctl fails with EPERM, as Linux does
  // for regular files).
  virtual std::shared_ptr<WaitQueue> event_queue() = 0;
};

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

#endif  // SANDBOXD_SENTRY_FS_EVENT_SOURCE_H_
