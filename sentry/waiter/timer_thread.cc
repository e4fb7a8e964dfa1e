#include "sentry/waiter/timer_thread.h"

#include <cstdio>
#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/thread.h"

namespace sandboxd::waiter {
namespace {

constexpr int64_t kNsPerSec = 1000000000;

std::atomic<int64_t> monotonic_offset_ns{0};
std::atomic<int64_t> boottime_offset_ns{0};

}  // namespace

int64_t ClockOffsetNs(clockid_t clock) {
  switch (clock) {
    case CLOCK_MONOTONIC:
    case CLOCK_MONOTONIC_COARSE:
    case CLOCK_MONOTONIC_RAW:
      return monotonic_offset_ns.load(std::memory_order_relaxed);
    case CLOCK_BOOTTIME:
    case CLOCK_BOOTTIME_ALARM:
      return boottime_offset_ns.load(std::memory_order_relaxed);
    default:
      return 0;
  }
}

void SetClockOffsets(int64_t monotonic_ns, int64_t boottime_ns) {
  monotonic_offset_ns.store(monotonic_ns, std::memory_order_relaxed);
  boottime_offset_ns.store(boottime_ns, std::memory_order_relaxed);
  TimerThread::Get().Kick();
}

int ClockGettime(clockid_t clock, struct timespec* ts) {
  if (clock_gettime(clock, ts) != 0) return -1;
  const int64_t off = ClockOffsetNs(clock);
  if (off == 0) return 0;
  int64_t ns = static_cast<int64_t>(ts->tv_sec) * kNsPerSec + ts->tv_nsec + off;
  // The offset never takes a clock below zero (a restore sets it from a
  // saved reading, which is positive).
  if (ns < 0) ns = 0;
  ts->tv_sec = static_cast<time_t>(ns / kNsPerSec);
  ts->tv_nsec = static_cast<long>(ns % kNsPerSec);
  return 0;
}

int64_t ClockNowNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec +
         ClockOffsetNs(clock);
}

TimerThread& TimerThread::Get() {
  // Never destroyed: the thread runs until the Sentry exits.
  static TimerThread* t = new TimerThread();
  return *t;
}

TimerThread::TimerThread() = default;

absl::Status TimerThread::Start() {
  absl::MutexLock l(&mu_);
  return StartLocked();
}

absl::Status TimerThread::StartLocked() {
  if (started_) return absl::OkStatus();
  // Loop takes mu_ first, so it waits for this caller to release it.
  ASSIGN_OR_RETURN(std::thread th,
                   StartThread("the timer thread", [this] { Loop(); }));
  th.detach();
  started_ = true;
  return absl::OkStatus();
}

void TimerThread::Arm(const std::shared_ptr<Timer>& t, clockid_t clock,
                      int64_t deadline_ns) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = StartLocked(); !s.ok()) {
    // Not running (the host refused it at boot and again now): the timer
    // fires when a later Arm gets the thread.
    fprintf(stderr, "sentry: %s\n", s.ToString().c_str());
  }
  armed_[t.get()] = Entry{t, clock, deadline_ns};
  cv_.Signal();
}

void TimerThread::Disarm(Timer* t) {
  absl::MutexLock l(&mu_);
  armed_.erase(t);
}

void TimerThread::Kick() {
  absl::MutexLock l(&mu_);
  cv_.Signal();
}

void TimerThread::Loop() {
  absl::MutexLock l(&mu_);
  for (;;) {
    std::vector<std::shared_ptr<Timer>> due;
    int64_t wait_ns = INT64_MAX;
    // Clocks are read once per pass; there are only three of them.
    int64_t now[3] = {-1, -1, -1};
    auto now_of = [&now](clockid_t c) {
      int i = c == CLOCK_REALTIME ? 0 : c == CLOCK_MONOTONIC ? 1 : 2;
      if (now[i] < 0) now[i] = ClockNowNs(c);
      return now[i];
    };
    for (auto it = armed_.begin(); it != armed_.end();) {
      int64_t left = it->second.deadline_ns - now_of(it->second.clock);
      if (left > 0) {
        wait_ns = std::min(wait_ns, left);
        ++it;
        continue;
      }
      if (auto t = it->second.timer.lock()) due.push_back(std::move(t));
      it = armed_.erase(it);
    }
    if (!due.empty()) {
      // Expired() takes the timer's own lock, which is ordered before ours.
      mu_.Unlock();
      for (auto& t : due) t->Expired();
      due.clear();  // a timer's last reference may go here: without mu_
      mu_.Lock();
      continue;
    }
    if (wait_ns == INT64_MAX) {
      cv_.Wait(&mu_);
    } else {
      cv_.WaitWithTimeout(&mu_, absl::Nanoseconds(wait_ns));
    }
  }
}

}  // namespace sandboxd::waiter
