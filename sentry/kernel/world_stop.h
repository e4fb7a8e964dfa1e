// The state of a kernel-wide stop for a checkpoint (Kernel::StopTheWorld,
// world_stop.cc). Not checkpoint state: a stop is taken and ended around
// every save, and a loaded kernel starts without one.
//
// Lock order: mu is a leaf below Kernel::mu_ (TaskExited signals it while
// holding the tasklist lock); a task parks with no other lock held.
#ifndef SANDBOXD_SENTRY_KERNEL_WORLD_STOP_H_
#define SANDBOXD_SENTRY_KERNEL_WORLD_STOP_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sandboxd::kernel {

struct WorldStop {
  // Set while a stop is asked for or in force; read by every task at each
  // of its safe points without a lock.
  std::atomic<bool> requested{false};
  absl::Mutex mu;
  // Signalled when a task parks or exits: the stopper counts again.
  absl::CondVar stopped_cv;
  // Signalled when the stop ends: parked tasks go on.
  absl::CondVar resume_cv;
  // Tids of the tasks parked at a safe point in the current stop
  // (emptied by its end: ResumeTheWorld).
  std::set<pid_t> parked ABSL_GUARDED_BY(mu);
  // Bumped by every end of a stop, so that a task parked in one stop
  // does not stay parked in the next one.
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  // A stopper holds the stop (one at a time).
  bool held ABSL_GUARDED_BY(mu) = false;
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_WORLD_STOP_H_
