#include "sentry/waiter/timer_thread.h"

#include <cstdio>
#include <algorithm>
#include <vector>

#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/thread.h"

namespace sandboxd::waiter {
namespace {

constexpr int64_t kNsPerSec = 1000000000;

}  // namespace

int64_t ClockNowNs(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
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
