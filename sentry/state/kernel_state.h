// Save and load of the kernel objects: the tasks (CPU state, signal state,
// restart state of a blocked syscall, CPU time), the thread groups (process
// tree, ids, exit state, prctl state, dispositions, limits, job control,
// usage, interval and POSIX timers) and the kernel's pid allocator and
// unimplemented-syscall counters.
//
// As FsState, one struct of static functions befriended by the kernel
// classes (Task, ThreadGroup, Kernel, IntervalTimer, ProcessTimers,
// TaskCpuTime), so that sentry/kernel needs no protobuf.
//
// Address spaces are the mm part's: a group's MM is saved as an id in
// State.mms whose record an MmCheckpointer writes and reads. Descriptor
// tables and FsContexts go through FsState (same Saver tables, so sharing
// with CLONE_FILES/CLONE_FS is kept).
//
// A task blocked in a syscall at checkpoint time is saved with its
// registers set back to re-execute that syscall (Linux's -ERESTARTSYS
// path), see kernel_state.cc and README.md for the calls this is right for.
// Futex waiters need nothing else: the futex word is in memory, and the
// re-executed FUTEX_WAIT queues the task again.
//
// Not saveable yet (UnimplementedError naming them): a vfork parent
// waiting for its child, signal sources other than timers.
#ifndef SANDBOXD_SENTRY_STATE_KERNEL_STATE_H_
#define SANDBOXD_SENTRY_STATE_KERNEL_STATE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/timers.h"
#include "sentry/mm/mm.h"
#include "sentry/state/loader.h"
#include "sentry/state/saver.h"

namespace sandboxd::state {

// The record of one address space, and the address space rebuilt from it
// (in the loading kernel's memory file and platform): MmState
// (mm_state.h), or a test's fake.
class MmCheckpointer {
 public:
  virtual ~MmCheckpointer() = default;
  virtual absl::Status SaveMm(Saver& s, mm::MM& mm, pb::Mm* record) = 0;
  virtual absl::StatusOr<std::shared_ptr<mm::MM>> LoadMm(
      Loader& l, kernel::Kernel& k, const pb::Mm& record) = 0;
};

struct KernelState {
  // Saves every task and thread group of `k` (State.tasks, thread_groups,
  // timers, mms, kernel), with their fd tables and FsContexts through
  // FsState in `vfs`. The sandbox must be stopped: no task may be running
  // application code or be inside a syscall other than a blocking wait.
  static absl::Status SaveKernel(Saver& s, kernel::Kernel& k,
                                 const fs::Vfs& vfs, MmCheckpointer& mms);

  // Fills `k`, a new Kernel without tasks, from the image: tasks are built
  // through the platform (NewContext) but not started; Kernel::RunRestored
  // starts them. Load the Vfs (FsState::LoadVfs) first.
  static absl::Status LoadKernel(Loader& l, kernel::Kernel& k, fs::Vfs& vfs,
                                 MmCheckpointer& mms);

  // The first step of a load, before anything that reads a clock (timers,
  // timerfds, sleeps, start times): sets the sandbox's clock offsets
  // (waiter::SetClockOffsets) so that CLOCK_MONOTONIC and CLOCK_BOOTTIME
  // go on from the values SaveKernel saved, the time between the save and
  // this load not passing on them, and has `k`'s vDSO publish them. A
  // second restore of one image starts from the same values again.
  // CLOCK_REALTIME stays the host's.
  static void LoadClocks(const Loader& l, kernel::Kernel& k);

 private:
  static absl::StatusOr<uint64_t> SaveGroup(Saver& s, kernel::ThreadGroup& g,
                                            const fs::Vfs& vfs,
                                            MmCheckpointer& mms);
  static absl::StatusOr<uint64_t> SaveTask(Saver& s, kernel::Task& t,
                                           const fs::Vfs& vfs,
                                           MmCheckpointer& mms);
  static absl::StatusOr<uint64_t> SaveTimer(
      Saver& s, kernel::IntervalTimer& timer);
  // A group is made (in the Loader and the kernel's table) before it is
  // filled in, so that what its descriptors hold can name it.
  static absl::Status NewGroup(Loader& l, kernel::Kernel& k, uint64_t id);
  static absl::Status LoadGroup(Loader& l, kernel::Kernel& k, fs::Vfs& vfs,
                                MmCheckpointer& mms, uint64_t id);
  static absl::StatusOr<std::shared_ptr<kernel::Task>> LoadTask(
      Loader& l, kernel::Kernel& k, uint64_t id);
  static absl::StatusOr<std::shared_ptr<kernel::IntervalTimer>> LoadTimer(
      Loader& l, kernel::Kernel& k, uint64_t id);
  // The second pass over a group and a task, once every group and task
  // exists: the process tree, timers, pending signals.
  static absl::Status LinkGroup(Loader& l, kernel::Kernel& k, uint64_t id);
  static absl::Status LinkTask(Loader& l, kernel::Kernel& k, uint64_t id);
  // Arms the loaded timers (last, so that none fires into a half-built
  // kernel).
  static absl::Status ArmTimers(Loader& l, kernel::Kernel& k);
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_KERNEL_STATE_H_
