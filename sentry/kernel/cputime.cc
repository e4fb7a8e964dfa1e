#include "sentry/kernel/cputime.h"

#include <time.h>

#include <algorithm>

#include "sentry/kernel/task.h"

namespace sandboxd::kernel {

Usage& Usage::operator+=(const Usage& o) {
  user_ns += o.user_ns;
  sys_ns += o.sys_ns;
  minflt += o.minflt;
  majflt += o.majflt;
  nvcsw += o.nvcsw;
  nivcsw += o.nivcsw;
  maxrss_kb = std::max(maxrss_kb, o.maxrss_kb);
  return *this;
}

struct rusage Usage::ToRusage() const {
  struct rusage ru = {};
  ru.ru_utime.tv_sec = user_ns / kNsPerSec;
  ru.ru_utime.tv_usec = (user_ns % kNsPerSec) / 1000;
  ru.ru_stime.tv_sec = sys_ns / kNsPerSec;
  ru.ru_stime.tv_usec = (sys_ns % kNsPerSec) / 1000;
  ru.ru_maxrss = static_cast<long>(maxrss_kb);
  ru.ru_minflt = static_cast<long>(minflt);
  ru.ru_majflt = static_cast<long>(majflt);
  ru.ru_nvcsw = static_cast<long>(nvcsw);
  ru.ru_nivcsw = static_cast<long>(nivcsw);
  return ru;
}

int64_t MonotonicNowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

int64_t ThreadCpuNowNs() {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

void TaskCpuTime::Set(State next, int64_t now, int64_t cpu, int64_t app_cpu) {
  int64_t elapsed = now - since_;
  // What the host's CPU clock of the thread that ran the stretch counted.
  int64_t ran = -1;
  if (state_copy_ == kApp && app_cpu >= 0) {
    ran = app_cpu;
  } else if (cpu >= 0 && cpu_since_ >= 0) {
    ran = cpu - cpu_since_;
  }
  if (ran >= 0 && ran < elapsed) elapsed = ran;
  // Single writer: plain read-modify-write under an odd sequence count.
  uint32_t s = seq_.load(std::memory_order_relaxed);
  seq_.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  if (elapsed > 0 && state_copy_ == kApp) {
    user_ns_.store(user_ns_.load(std::memory_order_relaxed) + elapsed,
                   std::memory_order_relaxed);
  } else if (elapsed > 0 && state_copy_ == kSentry) {
    sys_ns_.store(sys_ns_.load(std::memory_order_relaxed) + elapsed,
                  std::memory_order_relaxed);
  }
  state_.store(next, std::memory_order_relaxed);
  since_atomic_.store(now, std::memory_order_relaxed);
  state_copy_ = next;
  since_ = now;
  cpu_since_ = cpu;
  seq_.store(s + 2, std::memory_order_release);
}

int64_t TaskCpuTime::Floor(std::atomic<int64_t>* floor, int64_t v) {
  int64_t cur = floor->load(std::memory_order_relaxed);
  while (cur < v &&
         !floor->compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
  return std::max(cur, v);
}

Usage TaskCpuTime::Read(int64_t now) const {
  Usage u;
  for (int attempt = 0;; attempt++) {
    uint32_t s0 = seq_.load(std::memory_order_acquire);
    int64_t user = user_ns_.load(std::memory_order_relaxed);
    int64_t sys = sys_ns_.load(std::memory_order_relaxed);
    int state = state_.load(std::memory_order_relaxed);
    int64_t since = since_atomic_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    uint32_t s1 = seq_.load(std::memory_order_relaxed);
    // A writer is only ever a few stores long; after many tries take
    // what was read (off by at most one stretch).
    if ((s0 != s1 || (s0 & 1) != 0) && attempt < 1000) continue;
    int64_t running = std::max<int64_t>(0, now - since);
    if (state == kApp) user += running;
    if (state == kSentry) sys += running;
    u.user_ns = Floor(&user_floor_, user);
    u.sys_ns = Floor(&sys_floor_, sys);
    break;
  }
  u.minflt = minflt_.load(std::memory_order_relaxed);
  u.nvcsw = nvcsw_.load(std::memory_order_relaxed);
  return u;
}

bool DecodeCpuClock(clockid_t id, CpuClockId* out) {
  if (id == CLOCK_PROCESS_CPUTIME_ID || id == CLOCK_THREAD_CPUTIME_ID) {
    *out = CpuClockId{0, id == CLOCK_THREAD_CPUTIME_ID, CpuWhich::kSched};
    return true;
  }
  if (id >= 0) return false;
  int which = id & 3;
  if (which == 3) return false;
  out->pid = ~(id >> 3);
  out->thread = (id & 4) != 0;
  out->which = static_cast<CpuWhich>(which);
  return true;
}

// ---------------------------------------------------------------------------
// ThreadGroup's usage (declared in task.h)

void ThreadGroup::NoteMaxRss() {
  if (mm_ == nullptr) return;
  uint64_t kb = mm_->BackedBytes() / 1024;
  absl::MutexLock l(&mu_);
  maxrss_kb_ = std::max(maxrss_kb_, kb);
}

Usage ThreadGroup::SelfUsage() {
  int64_t now = MonotonicNowNs();
  absl::MutexLock l(&mu_);
  Usage u = dead_usage_;
  for (Task* t : tasks_) u += t->cputime().Read(now);
  u.maxrss_kb = std::max(u.maxrss_kb, maxrss_kb_);
  return u;
}

Usage ThreadGroup::ChildrenUsage() {
  absl::MutexLock l(&mu_);
  return children_usage_;
}

void ThreadGroup::AddChildUsage(const Usage& u) {
  absl::MutexLock l(&mu_);
  children_usage_ += u;
}

}  // namespace sandboxd::kernel
