// Stopping every task at a safe point for a checkpoint (kernel.h,
// Kernel::StopTheWorld). The request is one flag that every task reads at
// its safe points: the top of its loop, after signals were delivered and
// a restarted syscall's registers set back (Task::Run), and the waits a
// syscall or a stop sleeps in (Task::Block, a group stop in
// Task::DoJobControl, a vfork parent's wait). Each of them is woken by the
// Poke the stopper sends (a Poke interrupts running application code and
// host waits too: a host read returns -EINTR and restarts as after a
// stop signal, so it parks at the top of the loop with its registers set
// to execute it again).
//
// The stop is complete when every live task is parked: live_tasks_ (under
// Kernel::mu_) equals the parked set (under WorldStop::mu), read with
// both locks held. The set holds the tasks parked in this stop only: the
// end of a stop empties it, so a task that has not run since the last
// resume has to park again before the next stop counts it. A parked task neither creates nor ends tasks; a task
// that is not parked yet either parks, or exits (TaskExited lowers
// live_tasks_ and tells the stopper), or creates a task, which parks at
// the top of its loop before its first instruction.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sentry/kernel/kernel.h"

namespace sandboxd::kernel {

absl::Status Kernel::StopTheWorld(absl::Duration timeout) {
  {
    absl::MutexLock l(&world_stop_.mu);
    if (world_stop_.held) {
      return absl::FailedPreconditionError(
          "the sandbox is being stopped for another checkpoint");
    }
    world_stop_.held = true;
    world_stop_.requested.store(true, std::memory_order_release);
  }
  // Tasks made after this list see the request before their first Switch.
  std::vector<std::shared_ptr<Task>> tasks;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [tid, t] : tasks_) tasks.push_back(t);
  }
  for (const auto& t : tasks) t->Poke();
  tasks.clear();

  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    mu_.Lock();
    world_stop_.mu.Lock();
    const bool all =
        world_stop_.parked.size() == static_cast<size_t>(live_tasks_);
    std::vector<pid_t> lagging;
    const bool late = !all && absl::Now() >= deadline;
    if (late) {
      for (const auto& [tid, t] : tasks_) {
        if (world_stop_.parked.count(tid) == 0) lagging.push_back(tid);
      }
    }
    mu_.Unlock();
    if (all) {
      world_stop_.mu.Unlock();
      return absl::OkStatus();
    }
    if (late) {
      world_stop_.mu.Unlock();
      ResumeTheWorld();
      return absl::DeadlineExceededError(absl::StrCat(
          "task", lagging.size() > 1 ? "s " : " ",
          absl::StrJoin(lagging, ", "), " did not reach a safe point within ",
          absl::FormatDuration(timeout)));
    }
    // Parking and exiting tasks signal under WorldStop::mu, held from the
    // count to the wait: no wakeup is lost.
    world_stop_.stopped_cv.WaitWithDeadline(&world_stop_.mu, deadline);
    world_stop_.mu.Unlock();
  }
}

void Kernel::ResumeTheWorld() {
  absl::MutexLock l(&world_stop_.mu);
  if (!world_stop_.held) return;
  world_stop_.held = false;
  world_stop_.requested.store(false, std::memory_order_release);
  world_stop_.generation++;
  // Emptied here, not by each task as it leaves: a task that has not run
  // since this resume is not parked in the next stop, and must not count
  // as parked there (it still goes through signal delivery before it
  // parks again).
  world_stop_.parked.clear();
  world_stop_.resume_cv.SignalAll();
}

void Kernel::ParkForWorldStop(Task& t) {
  absl::MutexLock l(&world_stop_.mu);
  if (!world_stop_.requested.load(std::memory_order_acquire)) return;
  const uint64_t generation = world_stop_.generation;
  world_stop_.parked.insert(t.tid());
  world_stop_.stopped_cv.SignalAll();
  while (world_stop_.generation == generation) {
    world_stop_.resume_cv.Wait(&world_stop_.mu);
  }
}

}  // namespace sandboxd::kernel
