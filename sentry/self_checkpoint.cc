#include "sentry/self_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "base/thread.h"

namespace sandboxd::boot {
namespace {

// The first PREFIX.N (N from 1) that mkdirat makes.
absl::StatusOr<std::string> MakeImageDir(int dir, const std::string& dir_name,
                                         const std::string& prefix) {
  for (int n = 1; n <= 100000; n++) {
    std::string name = absl::StrCat(prefix, ".", n);
    if (mkdirat(dir, name.c_str(), 0700) == 0) return name;
    if (errno != EEXIST) {
      return ErrnoStatus(absl::StrCat("making ", dir_name, "/", name), errno);
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(dir_name, ": every ", prefix, ".N is taken"));
}

class SelfCheckpointer {
 public:
  SelfCheckpointer(Sandbox* sb, SelfCheckpointConfig c)
      : sb_(sb), c_(std::move(c)) {}

  int Request() {
    absl::MutexLock l(&mu_);
    if (pending_) return 0;
    if (taken_ >= c_.limit) return -EDQUOT;
    taken_++;
    pending_ = true;
    return 0;
  }

  [[noreturn]] void Loop() {
    for (;;) {
      {
        absl::MutexLock l(&mu_);
        mu_.Await(absl::Condition(&pending_));
        pending_ = false;
      }
      SelfCheckpointReport r;
      absl::StatusOr<std::string> name =
          MakeImageDir(c_.dir.get(), c_.dir_name, c_.prefix);
      if (!name.ok()) {
        r.status = name.status();
        // No checkpoint happens: its writers hear of the failure.
        sb_->checkpoints().Ended(false);
      } else {
        r.name = *name;
        r.path = absl::StrCat(c_.dir_name, "/", r.name);
        UniqueFd fd(openat(c_.dir.get(), r.name.c_str(),
                           O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!fd.valid()) {
          r.status = ErrnoStatus(absl::StrCat("opening ", r.path), errno);
          sb_->checkpoints().Ended(false);
        } else {
          auto saved = sb_->Checkpoint(state::ImageDir(fd.get(), r.path),
                                       /*leave_running=*/true, c_.spec,
                                       &r.clock);
          if (saved.ok()) {
            r.saved = *saved;
          } else {
            r.status = saved.status();
          }
        }
        if (!r.status.ok()) unlinkat(c_.dir.get(), r.name.c_str(), AT_REMOVEDIR);
      }
      if (!r.status.ok()) {
        absl::MutexLock l(&mu_);
        taken_--;  // no image: it does not count
      }
      if (c_.done) c_.done(r);
    }
  }

 private:
  Sandbox* const sb_;
  const SelfCheckpointConfig c_;
  absl::Mutex mu_;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t taken_ ABSL_GUARDED_BY(mu_) = 0;  // images written or under way
};

}  // namespace

absl::Status EnableSelfCheckpoint(Sandbox* sb, SelfCheckpointConfig config) {
  if (!config.dir.valid()) {
    return absl::InvalidArgumentError("self-checkpoints need a directory");
  }
  if (config.limit == 0) config.limit = kDefaultSelfCheckpointLimit;
  // Never freed: the thread and the requester live as long as the Sentry.
  auto* sc = new SelfCheckpointer(sb, std::move(config));
  ASSIGN_OR_RETURN(std::thread t, StartThread("the self-checkpoint thread",
                                              [sc] { sc->Loop(); }));
  t.detach();
  sb->checkpoints().set_requester([sc] { return sc->Request(); });
  return absl::OkStatus();
}

}  // namespace sandboxd::boot
