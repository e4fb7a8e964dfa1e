// FsState: eventfd, timerfd and signalfd files.
#include <sys/eventfd.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/fs/eventfd.h"
#include "sentry/fs/timerfd.h"
#include "sentry/kernel/signalfd.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::state {

absl::Status FsState::SaveEventFd(fs::EventFd* ev, pb::File* rec) {
  SBX_SAVED_SIZE(fs::EventFd, 80);
  pb::EventFd* r = rec->mutable_eventfd();
  r->set_count(ev->value());
  r->set_semaphore(ev->semaphore_);
  r->set_nonblock(ev->nonblock_.load());
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<fs::File>> FsState::LoadEventFd(
    const pb::File& rec) {
  const pb::EventFd& r = rec.eventfd();
  if (r.count() > fs::EventFd::kMax) {
    return absl::InvalidArgumentError("eventfd counter too large");
  }
  return std::static_pointer_cast<fs::File>(
      std::make_shared<fs::EventFd>(
          r.count(), (r.semaphore() ? EFD_SEMAPHORE : 0) |
                         (r.nonblock() ? EFD_NONBLOCK : 0)));
}

absl::Status FsState::SaveTimerFd(fs::TimerFd* tf, pb::File* rec) {
  SBX_SAVED_SIZE(fs::TimerFd, 56);
  SBX_SAVED_SIZE(fs::TimerFd::State, 88);
  pb::TimerFd* r = rec->mutable_timerfd();
  fs::TimerFd::State& st = *tf->state_;
  r->set_clock(st.clock_);
  r->set_nonblock(tf->nonblock_.load());
  absl::MutexLock lock(&st.mu_);
  if (st.next_ns_ != 0) {
    r->set_armed(true);
    r->set_remaining_ns(
        std::max<int64_t>(st.next_ns_ - waiter::ClockNowNs(st.clock_), 1));
    if (st.abs_realtime_) r->set_realtime_deadline_ns(st.next_ns_);
  }
  r->set_interval_ns(st.interval_ns_);
  r->set_ticks(st.ticks_);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<fs::File>> FsState::LoadTimerFd(
    const pb::File& rec) {
  const pb::TimerFd& r = rec.timerfd();
  std::shared_ptr<fs::TimerFd> tf;
  int64_t err = fs::TimerFd::Create(
      r.clock(), r.nonblock() ? TFD_NONBLOCK : 0, &tf);
  if (err < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timerfd on clock ", r.clock(), ": errno ", -err));
  }
  if (r.interval_ns() < 0 || (r.armed() && r.remaining_ns() < 1)) {
    return absl::InvalidArgumentError("timerfd with a bad time");
  }
  fs::TimerFd::State& st = *tf->state_;
  absl::MutexLock lock(&st.mu_);
  st.interval_ns_ = r.interval_ns();
  st.ticks_ = r.ticks();
  if (r.armed()) {
    // The time left, on the sandbox's clock (the monotonic and boottime
    // ones go on from the save: KernelState::LoadClocks); an absolute
    // CLOCK_REALTIME deadline as it is, the host's real time.
    if (r.realtime_deadline_ns() > 0 && st.clock_ == CLOCK_REALTIME) {
      st.abs_realtime_ = true;
      st.next_ns_ = r.realtime_deadline_ns();
    } else {
      st.next_ns_ = waiter::ClockNowNs(st.clock_) + r.remaining_ns();
    }
    waiter::TimerThread::Get().Arm(tf->state_, st.clock_, st.next_ns_);
  }
  return std::static_pointer_cast<fs::File>(tf);
}

absl::Status FsState::SaveSignalFd(kernel::SignalFd* sf, pb::File* rec) {
  SBX_SAVED_SIZE(kernel::SignalFd, 80);
  std::shared_ptr<kernel::ThreadGroup> owner = sf->owner_.lock();
  if (owner == nullptr) {
    return absl::UnimplementedError(
        "save: a signalfd whose process has exited");
  }
  pb::SignalFd* r = rec->mutable_signalfd();
  r->set_mask(sf->mask());
  r->set_nonblock(sf->nonblock_.load());
  r->set_owner_tgid(owner->tgid());
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<fs::File>> FsState::LoadSignalFd(
    Loader& l, const pb::File& rec) {
  // Its process was made first (KernelState::NewGroup): found by
  // its tgid among the image's groups.
  const pb::SignalFd& r = rec.signalfd();
  const auto& groups = l.state().thread_groups();
  uint64_t gid = 0;
  for (int i = 0; i < groups.size() && gid == 0; i++) {
    if (groups.Get(i).tgid() == r.owner_tgid()) gid = i + 1;
  }
  ASSIGN_OR_RETURN(
      std::shared_ptr<kernel::ThreadGroup> owner,
      (l.Load<kernel::ThreadGroup, pb::ThreadGroup>(
          gid, groups, "thread group",
          [](const pb::ThreadGroup&)
              -> absl::StatusOr<std::shared_ptr<kernel::ThreadGroup>> {
            return absl::FailedPreconditionError(
                "a signalfd's process is loaded with the kernel "
                "(KernelState::LoadKernel)");
          })));
  if (owner == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "signalfd of process ", r.owner_tgid(), ", not in the image"));
  }
  return std::static_pointer_cast<fs::File>(
      std::make_shared<kernel::SignalFd>(
          std::move(owner), r.mask(), r.nonblock() ? SFD_NONBLOCK : 0));
}

}  // namespace sandboxd::state
