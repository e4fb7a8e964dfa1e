// ReadGate: the part of a test's fake page source that holds back, slows
// down or fails chosen reads of a restore's pages. A fake (an
// mm::PageSource in async_loader_test, a state::PageReader in
// async_pages_test) derives from it and calls Pass at the start of every
// read, before it produces the data.
//
// Thread-safety: every method may be called from any thread; the failing
// range is set before the reads start.
#ifndef SANDBOXD_SENTRY_MM_TESTING_READ_GATE_H_
#define SANDBOXD_SENTRY_MM_TESTING_READ_GATE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace sandboxd::mm::testing {

class ReadGate {
 public:
  // One read of the saved offsets [off, off + len): logged; blocks while
  // it meets the held range; sleeps `delay_us_`; DataLoss when it meets
  // [fail_start_, fail_end_).
  absl::Status Pass(uint64_t off, uint64_t len) {
    {
      absl::MutexLock l(&mu_);
      log_.push_back(off);
      if (off < hold_end_ && off + len > hold_start_) {
        holding_++;
        mu_.Await(absl::Condition(&released_));
        holding_--;
      }
    }
    if (const int us = delay_us_.load(); us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    if (off < fail_end_ && off + len > fail_start_) {
      return absl::DataLossError("injected read error");
    }
    return absl::OkStatus();
  }

  // Reads meeting [start, end) wait until Release.
  void Hold(uint64_t start, uint64_t end) {
    absl::MutexLock l(&mu_);
    hold_start_ = start;
    hold_end_ = end;
    released_ = false;
  }
  void Release() {
    absl::MutexLock l(&mu_);
    released_ = true;
  }
  // A read is held back now.
  bool Holding() {
    absl::MutexLock l(&mu_);
    return holding_ > 0;
  }
  // The offsets of every read so far, in the order they came.
  std::vector<uint64_t> Log() {
    absl::MutexLock l(&mu_);
    return log_;
  }

  std::atomic<int> delay_us_{0};
  uint64_t fail_start_ = 0, fail_end_ = 0;

 private:
  absl::Mutex mu_;
  uint64_t hold_start_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hold_end_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = true;
  int holding_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> log_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sandboxd::mm::testing

#endif  // SANDBOXD_SENTRY_MM_TESTING_READ_GATE_H_
