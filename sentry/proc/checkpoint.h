// /proc/sandbox: what a sandboxed program knows of checkpoints.
//
//   /proc/sandbox/checkpoint  crw-rw-rw- (cr--r--r-- when the sandbox may
//                             not checkpoint itself). Each open description
//                             answers for one checkpoint: the next one to
//                             end after its first read or write. A write
//                             of "1" or "1\n" asks for a checkpoint of the
//                             whole sandbox (it runs on after it) and
//                             returns once that checkpoint is over; a read
//                             returns, once it is over, "resume\n" (this
//                             is the sandbox that was saved, running on),
//                             "restore\n" (this is a copy restored from the
//                             image) or "error\n" (no image was written).
//   /proc/sandbox/restored    "1\n" in a sandbox restored from an image,
//                             else "0\n".
//
// The protocol is gVisor's /proc/gvisor/checkpoint (write "1", read the
// outcome), with the write also waiting, so that `echo 1 >` returns when
// the image is saved. How the restored copy tells: the description is
// saved with the sandbox (state.pb) while it waits; the copy's load opens
// it again and it answers "restore" at once, and the write or read that
// was waiting when the image was taken runs again there
// (sentry/state/README.md, "A task blocked in a syscall") and returns.
//
// CheckpointControl is the Sentry's side: it numbers the checkpoints a
// kernel takes (self-requested or not: Sandbox::Checkpoint reports each
// one's end), and hands a write's request to the requester the Sentry
// installed (sentry/self_checkpoint.h). Without one, a write fails with
// EPERM.
//
// Lock order: CheckpointFile::mu_ > CheckpointControl::mu_ (a leaf); the
// queue is notified with neither held.
#ifndef SANDBOXD_SENTRY_PROC_CHECKPOINT_H_
#define SANDBOXD_SENTRY_PROC_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/inode.h"
#include "sentry/waiter/waiter.h"

namespace sandboxd::fs::proc {

struct Shared;  // inodes.h

class CheckpointControl {
 public:
  // `restored`: this kernel was loaded from an image.
  explicit CheckpointControl(bool restored) : restored_(restored) {}
  CheckpointControl(const CheckpointControl&) = delete;
  CheckpointControl& operator=(const CheckpointControl&) = delete;

  // Asks for a checkpoint: 0 when it is asked for (or already was), or
  // -errno (EDQUOT: no more self-checkpoints allowed). Called on the
  // writing task's thread with no lock held; must not wait for the
  // checkpoint, which stops that task too.
  using Requester = std::function<int()>;
  void set_requester(Requester r);
  bool enabled() const;
  bool restored() const { return restored_; }

  // A write's request: -EPERM without a requester.
  int Request();
  // The number the next checkpoint to end will have (1, 2, ...).
  uint64_t Next() const;
  // The checkpoint numbered Next() has ended: written (ok) or not.
  void Ended(bool ok);
  // 0 while checkpoint `n` has not ended; 1 once it has with an image;
  // -1 once it failed.
  int Outcome(uint64_t n) const;
  // Notified (POLLIN) at every end.
  waiter::WaitQueue& queue() { return queue_; }

 private:
  const bool restored_;
  mutable absl::Mutex mu_;
  Requester requester_ ABSL_GUARDED_BY(mu_);
  // ok_[n - 1]: how checkpoint n ended.
  std::vector<bool> ok_ ABSL_GUARDED_BY(mu_);
  waiter::WaitQueue queue_;
};

// The /proc/sandbox directory (`control` outlives it).
std::shared_ptr<Inode> SandboxDir(const std::shared_ptr<Shared>& fs,
                                  std::shared_ptr<CheckpointControl> control);

}  // namespace sandboxd::fs::proc

#endif  // SANDBOXD_SENTRY_PROC_CHECKPOINT_H_
