// Self-checkpoints: a sandboxed program asks for a checkpoint of its own
// sandbox by writing to /proc/sandbox/checkpoint (sentry/proc/checkpoint.h).
// The Sentry takes it on a thread of its own (the writer is stopped with
// every other task), with leave-running semantics, into a new directory
// PREFIX.N under the directory it was given (the first N from 1 that is
// free), and reports each one to its caller (`sentry run` prints it, `sentry
// serve` tells the daemon).
//
// Requests coalesce: writes made while one is waiting to be taken are
// answered by that checkpoint. At most `limit` images are written per
// sandbox; a write beyond fails with EDQUOT, and one without a directory
// (EnableSelfCheckpoint never called) with EPERM.
//
// Lock order: SelfCheckpointer's mu_ is a leaf; Sandbox::Checkpoint runs
// with it released.
#ifndef SANDBOXD_SENTRY_SELF_CHECKPOINT_H_
#define SANDBOXD_SENTRY_SELF_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "base/stage_clock.h"
#include "base/unique_fd.h"
#include "sentry/boot.h"
#include "sentry/state/image_dir.h"

namespace sandboxd::boot {

// One self-checkpoint, as the caller hears of it.
struct SelfCheckpointReport {
  std::string name;     // the image directory under the configured one
  std::string path;     // dir_name + "/" + name
  absl::Status status;  // not OK: no image (the directory is removed)
  state::SaveResult saved;
  StageClock clock;     // the checkpoint's stages
};

struct SelfCheckpointConfig {
  UniqueFd dir;          // O_PATH|O_DIRECTORY: where the images go
  std::string dir_name;  // its path, for messages and reports
  std::string prefix = "sandbox";
  uint32_t limit = 16;   // images per sandbox
  std::string spec;      // recorded in each manifest (Manifest.spec)
  // Called on the checkpoint thread after each one.
  std::function<void(const SelfCheckpointReport&)> done;
};

// The default `limit` when a spec leaves it at 0.
inline constexpr uint32_t kDefaultSelfCheckpointLimit = 16;

// Lets the programs of `sb` checkpoint it: installs the requester and
// starts the checkpoint thread. Call once, before Sandbox::Start (the
// thread exists before the Sentry's seccomp filter). Lives as long as the
// process, as the Sandbox does.
absl::Status EnableSelfCheckpoint(Sandbox* sb, SelfCheckpointConfig config);

}  // namespace sandboxd::boot

#endif  // SANDBOXD_SENTRY_SELF_CHECKPOINT_H_
