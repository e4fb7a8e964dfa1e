#include "sentry/proc/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "sentry/fs/file.h"
#include "sentry/proc/inodes.h"

namespace sandboxd::fs::proc {

void CheckpointControl::set_requester(Requester r) {
  absl::MutexLock l(&mu_);
  requester_ = std::move(r);
}

bool CheckpointControl::enabled() const {
  absl::MutexLock l(&mu_);
  return static_cast<bool>(requester_);
}

int CheckpointControl::Request() {
  Requester r;
  {
    absl::MutexLock l(&mu_);
    r = requester_;
  }
  if (!r) return -EPERM;
  return r();
}

uint64_t CheckpointControl::Next() const {
  absl::MutexLock l(&mu_);
  return ok_.size() + 1;
}

void CheckpointControl::Ended(bool ok) {
  {
    absl::MutexLock l(&mu_);
    ok_.push_back(ok);
  }
  queue_.Notify(POLLIN | POLLRDNORM);
}

int CheckpointControl::Outcome(uint64_t n) const {
  absl::MutexLock l(&mu_);
  if (n == 0 || n > ok_.size()) return 0;
  return ok_[n - 1] ? 1 : -1;
}

namespace {

constexpr char kResume[] = "resume\n";
constexpr char kRestore[] = "restore\n";
constexpr char kError[] = "error\n";

// One open description of /proc/sandbox/checkpoint.
//
// States: idle (no read or write yet), waiting for checkpoint `wait_for_`,
// done (`result_` set). Saved (SavedState) as "idle", "waiting" or
// "done:<result>"; a waiting description loads as done with "restore\n":
// the image it is in is the checkpoint it waited for.
class CheckpointFile final : public InodeFile {
 public:
  CheckpointFile(std::shared_ptr<Inode> inode, int flags,
                 std::shared_ptr<CheckpointControl> control)
      : InodeFile(std::move(inode), flags), control_(std::move(control)) {}

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override {
    if ((StatusFlags() & O_ACCMODE) == O_WRONLY) return -EBADF;
    int r = AwaitResult(io);
    if (r < 0) return r;
    absl::MutexLock l(&mu_);
    const int64_t off = offset >= 0 ? offset : offset_;
    if (static_cast<uint64_t>(off) >= result_.size()) return 0;
    const uint64_t len = std::min<uint64_t>(n, result_.size() - off);
    std::memcpy(buf, result_.data() + off, len);
    if (offset < 0) offset_ += static_cast<int64_t>(len);
    return static_cast<int64_t>(len);
  }

  // "1" or "1\n" (gVisor's); anything else is EINVAL. Returns once this
  // description's checkpoint is over (at once with O_NONBLOCK): the
  // count, or EIO when no image was written.
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override {
    if ((StatusFlags() & O_ACCMODE) == O_RDONLY) return -EBADF;
    if (n == 0) return 0;
    const std::string in(static_cast<const char*>(buf),
                         std::min<uint64_t>(n, 3));
    if (in != "1" && in != "1\n") return -EINVAL;
    bool ask;
    {
      absl::MutexLock l(&mu_);
      Settle();
      ask = result_.empty() && !asked_;
    }
    if (ask) {
      if (int r = control_->Request(); r < 0) return r;
      absl::MutexLock l(&mu_);
      asked_ = true;
      if (wait_for_ == 0) wait_for_ = control_->Next();
    }
    if (StatusFlags() & O_NONBLOCK) {
      absl::MutexLock l(&mu_);
      Settle();
      if (result_ == kError) return -EIO;
      return static_cast<int64_t>(n);
    }
    int r = AwaitResult(io);
    if (r < 0) return r;
    absl::MutexLock l(&mu_);
    return result_ == kError ? -EIO : static_cast<int64_t>(n);
  }

  int64_t Seek(int64_t offset, int whence) override {
    absl::MutexLock l(&mu_);
    int64_t base;
    switch (whence) {
      case SEEK_SET:
        base = 0;
        break;
      case SEEK_CUR:
        base = offset_;
        break;
      default:
        return -EINVAL;
    }
    if (base + offset < 0) return -EINVAL;
    offset_ = base + offset;
    return offset_;
  }

  waiter::EventMask Readiness(waiter::EventMask mask) override {
    absl::MutexLock l(&mu_);
    Settle();
    waiter::EventMask m = POLLOUT | POLLWRNORM;
    if (!result_.empty()) m |= POLLIN | POLLRDNORM;
    return m & (mask | POLLERR | POLLHUP);
  }
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override {
    {
      // poll or epoll starts the wait, as a read does.
      absl::MutexLock l(&mu_);
      if (result_.empty() && wait_for_ == 0) wait_for_ = control_->Next();
    }
    control_->queue().Add(w, mask);
  }
  void EventUnregister(waiter::Waiter* w) override {
    control_->queue().Remove(w);
  }

  std::string SavedState() override {
    absl::MutexLock l(&mu_);
    Settle();
    if (!result_.empty()) return "done:" + result_;
    return wait_for_ != 0 ? "waiting" : "idle";
  }
  int LoadSavedState(const std::string& s) override {
    absl::MutexLock l(&mu_);
    if (s == "idle") return 0;
    if (s == "waiting") {
      result_ = kRestore;
      asked_ = true;
      return 0;
    }
    if (s == std::string("done:") + kResume ||
        s == std::string("done:") + kRestore ||
        s == std::string("done:") + kError) {
      result_ = s.substr(5);
      asked_ = true;
      return 0;
    }
    return -EINVAL;
  }

 private:
  // The result, once the checkpoint waited for has ended.
  void Settle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!result_.empty() || wait_for_ == 0) return;
    const int o = control_->Outcome(wait_for_);
    if (o != 0) result_ = o > 0 ? kResume : kError;
  }
  // Starts waiting (an idle description waits for the next checkpoint)
  // and blocks until the result is there: 0, -EAGAIN (O_NONBLOCK), or the
  // wait's -EINTR.
  int AwaitResult(const IoContext& io) {
    {
      absl::MutexLock l(&mu_);
      if (result_.empty() && wait_for_ == 0) wait_for_ = control_->Next();
      Settle();
      if (!result_.empty()) return 0;
    }
    if ((StatusFlags() & O_NONBLOCK) || io.blocker == nullptr) return -EAGAIN;
    return io.blocker->Wait(control_->queue(), POLLIN, [this] {
      absl::MutexLock l(&mu_);
      Settle();
      return !result_.empty();
    });
  }

  const std::shared_ptr<CheckpointControl> control_;
  absl::Mutex mu_;
  uint64_t wait_for_ ABSL_GUARDED_BY(mu_) = 0;  // 0: idle
  bool asked_ ABSL_GUARDED_BY(mu_) = false;     // a write asked for it
  std::string result_ ABSL_GUARDED_BY(mu_);
  int64_t offset_ ABSL_GUARDED_BY(mu_) = 0;
};

// A character device, as gVisor's: tools that walk /proc (grep -r, find
// -type f) leave it alone instead of blocking in its read.
class CheckpointInode final : public ProcInode {
 public:
  CheckpointInode(std::shared_ptr<Shared> fs,
                  std::shared_ptr<CheckpointControl> control)
      : ProcInode(std::move(fs), S_IFCHR, 0666, NextInodeNumber()),
        control_(std::move(control)) {}

  int GetAttr(Attr* out) override {
    int r = ProcInode::GetAttr(out);
    if (r < 0) return r;
    out->mode = S_IFCHR | (control_->enabled() ? 0666 : 0444);
    return 0;
  }
  int Open(int flags, std::shared_ptr<File>* out) override {
    if (flags & O_PATH) return Inode::Open(flags, out);
    *out = std::make_shared<CheckpointFile>(shared_from_this(), flags,
                                            control_);
    return 0;
  }

 private:
  const std::shared_ptr<CheckpointControl> control_;
};

}  // namespace

std::shared_ptr<Inode> SandboxDir(const std::shared_ptr<Shared>& fs,
                                  std::shared_ptr<CheckpointControl> control) {
  const bool restored = control->restored();
  return StaticDir(
      fs, {{"checkpoint", std::make_shared<CheckpointInode>(fs, control)},
           {"restored", ConstFile(fs, restored ? "1\n" : "0\n")}});
}

}  // namespace sandboxd::fs::proc
