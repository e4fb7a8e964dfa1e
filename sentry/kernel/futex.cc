#include "sentry/kernel/futex.h"

#include <errno.h>

#include "sentry/kernel/task.h"

namespace sandboxd::kernel {

int64_t Futexes::Wait(Task& t, Key key, std::atomic<uint32_t>* word,
                      uint32_t val, uint32_t bitset, absl::Time deadline) {
  if (bitset == 0) return -EINVAL;
  Waiter w{&t, key, bitset};
  {
    absl::MutexLock l(&mu_);
    // The check and the enqueue happen under the lock that wakers take,
    // so a wake between them cannot be lost.
    if (word->load(std::memory_order_seq_cst) != val) return -EAGAIN;
    queues_[key].push_back(&w);
  }
  for (;;) {
    Task::WakeReason why = t.Block(deadline);
    absl::MutexLock l(&mu_);
    if (w.woken) return 0;
    if (why == Task::WakeReason::kWoken) continue;  // a stale wakeup
    // Timed out or interrupted: leave the queue we are on now (a requeue
    // may have moved us).
    auto it = queues_.find(w.key);
    if (it != queues_.end()) {
      it->second.remove(&w);
      if (it->second.empty()) queues_.erase(it);
    }
    return why == Task::WakeReason::kTimeout ? -ETIMEDOUT : -EINTR;
  }
}

int64_t Futexes::WakeLocked(Key key, int n, uint32_t bitset) {
  auto it = queues_.find(key);
  if (it == queues_.end()) return 0;
  int64_t woken = 0;
  auto& q = it->second;
  for (auto w = q.begin(); w != q.end() && woken < n;) {
    if (((*w)->bitset & bitset) == 0) {
      ++w;
      continue;
    }
    Waiter* waiter = *w;
    w = q.erase(w);
    waiter->woken = true;
    waiter->task->Wake();
    woken++;
  }
  if (q.empty()) queues_.erase(it);
  return woken;
}

int64_t Futexes::Wake(Key key, int n, uint32_t bitset) {
  if (bitset == 0) return -EINVAL;
  absl::MutexLock l(&mu_);
  return WakeLocked(key, n, bitset);
}

int64_t Futexes::Requeue(Key from, Key to, int n_wake, int n_requeue,
                         std::atomic<uint32_t>* word, bool check,
                         uint32_t val) {
  absl::MutexLock l(&mu_);
  if (check && word->load(std::memory_order_seq_cst) != val) return -EAGAIN;
  int64_t done = WakeLocked(from, n_wake, ~0u);
  auto it = queues_.find(from);
  if (it == queues_.end() || from == to) return done;
  std::list<Waiter*> moving;
  auto& q = it->second;
  while (!q.empty() && static_cast<int64_t>(moving.size()) < n_requeue) {
    Waiter* w = q.front();
    q.pop_front();
    w->key = to;
    moving.push_back(w);
  }
  int64_t moved = static_cast<int64_t>(moving.size());
  if (q.empty()) queues_.erase(it);
  // Inserting `to` may rehash the map, so it comes after the last use of q.
  if (!moving.empty()) queues_[to].splice(queues_[to].end(), moving);
  return done + moved;
}

}  // namespace sandboxd::kernel
