// Futexes: wait queues keyed by an application address.
//
// Keys: (MM, virtual address). That is Linux's key for private mappings;
// shared mappings (keyed by the backing memory-file offset in Linux) need
// the key to come from mm once memory is shared between processes (fork,
// MAP_SHARED files) and are keyed the same way until then.
#ifndef SANDBOXD_SENTRY_KERNEL_FUTEX_H_
#define SANDBOXD_SENTRY_KERNEL_FUTEX_H_

#include <atomic>
#include <cstdint>
#include <list>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sandboxd::mm {
class MM;
}

namespace sandboxd::kernel {

class Task;

class Futexes {
 public:
  struct Key {
    const mm::MM* mm;
    uintptr_t addr;
    bool operator==(const Key& o) const { return mm == o.mm && addr == o.addr; }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.mm, k.addr);
    }
  };

  // FUTEX_WAIT(_BITSET): if *word == val, sleeps until woken, the deadline
  // passes (-ETIMEDOUT) or the task is interrupted (-EINTR); else -EAGAIN.
  int64_t Wait(Task& t, Key key, std::atomic<uint32_t>* word, uint32_t val,
               uint32_t bitset, absl::Time deadline);
  // Wakes up to n waiters whose bitset intersects `bitset`.
  int64_t Wake(Key key, int n, uint32_t bitset);
  // Wakes up to n_wake waiters of `from` and moves up to n_requeue others
  // to `to`. With `check`, fails with -EAGAIN unless *word == val.
  int64_t Requeue(Key from, Key to, int n_wake, int n_requeue,
                  std::atomic<uint32_t>* word, bool check, uint32_t val);
  // FUTEX_WAKE_OP: the caller has already applied the operation (under
  // our lock, via `op`), which returns the old value's comparison result.
  template <typename Op>
  int64_t WakeOp(Key k1, Key k2, int n1, int n2, Op op) {
    absl::MutexLock l(&mu_);
    int64_t r = op();
    if (r < 0) return r;
    int64_t woken = WakeLocked(k1, n1, ~0u);
    if (r > 0) woken += WakeLocked(k2, n2, ~0u);
    return woken;
  }

 private:
  struct Waiter {
    Task* task;
    Key key;
    uint32_t bitset;
    bool woken = false;
  };
  int64_t WakeLocked(Key key, int n, uint32_t bitset)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<Key, std::list<Waiter*>> queues_ ABSL_GUARDED_BY(mu_);
  friend class Task;  // names mu_ in its lock order annotation
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_FUTEX_H_
