// Pipes, eventfd, timerfd, and waiting for readiness: poll, ppoll, select,
// pselect6 and the epoll calls.
//
// poll and select register one Waiter on every file, then sleep on the
// task (Task::Wait) until a file notifies, the deadline, or a signal
// (-EINTR; Linux never restarts these calls after a handler). The sigmask
// argument of ppoll, pselect6 and epoll_pwait is the task's temporary mask
// (Task::SetTemporaryMask): when the call is interrupted, the signal's
// handler runs under it and its return restores the old mask; otherwise
// the old mask comes back as the call returns (Linux's
// restore_saved_sigmask_unless(ret == -EINTR)).
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sentry/fs/epoll.h"
#include "sentry/fs/eventfd.h"
#include "sentry/fs/pipe.h"
#include "sentry/fs/timerfd.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

using waiter::EventMask;

// ---------------------------------------------------------------------------
// File creation

int64_t Pipe2(Task& t, uint64_t addr, uint64_t flags) {
  if (flags & ~static_cast<uint64_t>(O_CLOEXEC | O_NONBLOCK | O_DIRECT)) {
    return -EINVAL;  // includes O_NOTIFICATION_PIPE: no watch queues
  }
  auto [r, w] = fs::PipeEnd::Create(static_cast<int>(flags));
  return InstallFdPair(t, std::move(r), std::move(w),
                       (flags & O_CLOEXEC) != 0, addr);
}

int64_t SysPipe(Task& t, const SyscallArgs& a) { return Pipe2(t, a.a[0], 0); }
int64_t SysPipe2(Task& t, const SyscallArgs& a) {
  return Pipe2(t, a.a[0], a.a[1]);
}

int64_t EventFd2(Task& t, uint64_t initval, uint64_t flags) {
  if (flags & ~static_cast<uint64_t>(EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE)) {
    return -EINVAL;
  }
  // The initial value is an unsigned int.
  auto f = std::make_shared<fs::EventFd>(static_cast<uint32_t>(initval),
                                         static_cast<int>(flags));
  return t.group().fds().Install(std::move(f), (flags & EFD_CLOEXEC) != 0);
}

int64_t SysEventfd(Task& t, const SyscallArgs& a) { return EventFd2(t, a.a[0], 0); }
int64_t SysEventfd2(Task& t, const SyscallArgs& a) {
  return EventFd2(t, a.a[0], a.a[1]);
}

int64_t SysTimerfdCreate(Task& t, const SyscallArgs& a) {
  std::shared_ptr<fs::TimerFd> f;
  RETURN_IF_ERRNO(fs::TimerFd::Create(static_cast<int>(a.a[0]),
                                      static_cast<int>(a.a[1]), &f));
  return t.group().fds().Install(std::move(f), (a.a[1] & TFD_CLOEXEC) != 0);
}

// The timerfd behind `fd`: -EBADF, or -EINVAL for other files.
SysResult<std::shared_ptr<fs::TimerFd>> TimerFdFor(Task& t, uint64_t fd) {
  return FileAs<fs::TimerFd>(t, fd, -EINVAL);
}

int64_t SysTimerfdSettime(Task& t, const SyscallArgs& a) {
  struct itimerspec value, old;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[2], &value));
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::TimerFd> f, TimerFdFor(t, a.a[0]));
  RETURN_IF_ERRNO(f->SetTime(static_cast<int>(a.a[1]), value,
                             a.a[3] != 0 ? &old : nullptr));
  return a.a[3] != 0 ? CopyOutObj(t, a.a[3], old) : 0;
}

int64_t SysTimerfdGettime(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::TimerFd> f, TimerFdFor(t, a.a[0]));
  struct itimerspec cur;
  f->GetTime(&cur);
  return CopyOutObj(t, a.a[1], cur);
}

// ---------------------------------------------------------------------------
// Timeouts and signal masks

// The deadline of a timespec timeout at `addr` (0: none, wait forever).
int64_t TimespecDeadline(Task& t, uint64_t addr, absl::Time* deadline) {
  *deadline = absl::InfiniteFuture();
  if (addr == 0) return 0;
  struct timespec ts;
  RETURN_IF_ERRNO(CopyInObj(t, addr, &ts));
  if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000) {
    return -EINVAL;
  }
  *deadline = absl::Now() + t.SyscallTimeout(absl::DurationFromTimespec(ts));
  return 0;
}

int64_t MillisDeadline(Task& t, int64_t ms, absl::Time* deadline) {
  *deadline = ms < 0 ? absl::InfiniteFuture()
                     : absl::Now() + t.SyscallTimeout(absl::Milliseconds(ms));
  return 0;
}

absl::Duration Remaining(absl::Time deadline) {
  return std::max(absl::ZeroDuration(), deadline - absl::Now());
}

// Linux writes the time left back into the timeout of ppoll, select and
// pselect6. A failed write is ignored, as Linux does: the call succeeded.
void WriteBackTimespec(Task& t, uint64_t addr, absl::Time deadline) {
  if (addr == 0 || deadline == absl::InfiniteFuture()) return;
  (void)CopyOutObj(t, addr, absl::ToTimespec(Remaining(deadline)));
}

// The sigmask argument of ppoll, pselect6 and epoll_pwait: installed as the
// task's temporary mask for the call. Finish(r) puts the old mask back
// unless the call was interrupted, in which case the signal delivery that
// follows does (through the handler's frame, or at once if none runs).
class TemporarySigmask {
 public:
  explicit TemporarySigmask(Task& t) : t_(t) {}
  ~TemporarySigmask() {
    if (installed_) t_.RestoreTemporaryMask();  // left early: no wait
  }
  // Reads the mask at `addr` (none if 0) of `size` bytes, which must be 8.
  int64_t Install(uint64_t addr, uint64_t size) {
    if (addr == 0) return 0;
    if (size != sizeof(kernel::SigSet)) return -EINVAL;
    kernel::SigSet set;
    RETURN_IF_ERRNO(CopyInObj(t_, addr, &set));
    t_.SetTemporaryMask(set, t_.signal_mask());
    installed_ = true;
    return 0;
  }
  int64_t Finish(int64_t r) {
    if (installed_ && r != -EINTR) t_.RestoreTemporaryMask();
    installed_ = false;
    return r;
  }

 private:
  Task& t_;
  bool installed_ = false;
};

// ---------------------------------------------------------------------------
// poll and select

struct PollItem {
  std::shared_ptr<fs::File> file;  // null: fd < 0 (skipped) or bad (POLLNVAL)
  bool bad = false;
  EventMask events = 0;  // with POLLERR | POLLHUP
  EventMask revents = 0;
};

// Collects notifications from every polled file into one queue the task
// sleeps on.
class PollWaiter : public waiter::Waiter {
 public:
  void Notify(EventMask) override {
    fired_.store(true, std::memory_order_release);
    queue_.Notify(POLLIN);
  }
  waiter::WaitQueue& queue() { return queue_; }
  bool fired() const { return fired_.load(std::memory_order_acquire); }
  void Reset() { fired_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> fired_{false};
  waiter::WaitQueue queue_;
};

// Fills every revents; returns how many are non-zero.
int Scan(std::vector<PollItem>& items) {
  int n = 0;
  for (PollItem& it : items) {
    if (it.bad) {
      it.revents = POLLNVAL;
    } else if (it.file != nullptr) {
      it.revents = it.file->Readiness(it.events) & it.events;
    } else {
      it.revents = 0;
    }
    if (it.revents != 0) n++;
  }
  return n;
}

// The common part of poll and select: the number of ready items, 0 at the
// deadline, -EINTR.
int64_t DoPoll(Task& t, std::vector<PollItem>& items, absl::Time deadline) {
  int n = Scan(items);
  if (n > 0 || deadline <= absl::Now()) return n;
  PollWaiter w;
  for (PollItem& it : items) {
    if (it.file != nullptr) it.file->EventRegister(&w, it.events);
  }
  int64_t r;
  for (;;) {
    // Reset before scanning: a notification after the scan is not lost.
    w.Reset();
    r = Scan(items);
    if (r > 0) break;
    int why = t.Wait(w.queue(), POLLIN, [&w] { return w.fired(); }, deadline);
    if (why == -ETIMEDOUT) {
      r = Scan(items);
      break;
    }
    if (why == -EINTR) {
      r = -EINTR;
      break;
    }
  }
  for (PollItem& it : items) {
    if (it.file != nullptr) it.file->EventUnregister(&w);
  }
  return r;
}

uint64_t NofileLimit(Task& t) { return t.group().GetLimit(RLIMIT_NOFILE).rlim_cur; }

int64_t Poll(Task& t, uint64_t addr, uint64_t nfds, absl::Time deadline) {
  if (nfds > NofileLimit(t)) return -EINVAL;
  std::vector<struct pollfd> pfds(nfds);
  if (nfds > 0)
    RETURN_IF_ERRNO(CopyInBytes(t, addr, pfds.data(), nfds * sizeof(pollfd)));
  std::vector<PollItem> items(nfds);
  for (uint64_t i = 0; i < nfds; i++) {
    if (pfds[i].fd < 0) continue;
    items[i].file = FileOrNull(t, static_cast<uint64_t>(pfds[i].fd));
    items[i].bad = items[i].file == nullptr;
    items[i].events = static_cast<uint16_t>(pfds[i].events) | POLLERR | POLLHUP;
  }
  int64_t r = DoPoll(t, items, deadline);
  if (r < 0) return r;
  for (uint64_t i = 0; i < nfds; i++) {
    pfds[i].revents = static_cast<short>(items[i].revents);
  }
  if (nfds > 0)
    RETURN_IF_ERRNO(CopyOutBytes(t, addr, pfds.data(), nfds * sizeof(pollfd)));
  return r;
}

int64_t SysPoll(Task& t, const SyscallArgs& a) {
  absl::Time deadline;
  MillisDeadline(t, static_cast<int32_t>(a.a[2]), &deadline);
  return Poll(t, a.a[0], a.a[1], deadline);
}

int64_t SysPpoll(Task& t, const SyscallArgs& a) {
  absl::Time deadline;
  RETURN_IF_ERRNO(TimespecDeadline(t, a.a[2], &deadline));
  TemporarySigmask mask(t);
  RETURN_IF_ERRNO(mask.Install(a.a[3], a.a[4]));
  int64_t r = Poll(t, a.a[0], a.a[1], deadline);
  WriteBackTimespec(t, a.a[2], deadline);
  return mask.Finish(r);
}

// select(2)'s sets as Linux defines them (fs/select.c).
constexpr EventMask kInSet = POLLRDNORM | POLLRDBAND | POLLIN | POLLHUP | POLLERR;
constexpr EventMask kOutSet = POLLWRBAND | POLLWRNORM | POLLOUT | POLLERR;
constexpr EventMask kExSet = POLLPRI;

int64_t Select(Task& t, int64_t n, uint64_t in_addr, uint64_t out_addr,
               uint64_t ex_addr, absl::Time deadline) {
  if (n < 0) return -EINVAL;
  n = std::min<int64_t>(n, static_cast<int64_t>(std::min<uint64_t>(NofileLimit(t), 1 << 20)));
  const size_t words = (n + 63) / 64;
  const size_t bytes = words * 8;
  std::vector<uint64_t> sets[3];
  const uint64_t addrs[3] = {in_addr, out_addr, ex_addr};
  for (int s = 0; s < 3; s++) {
    sets[s].assign(words, 0);
    if (addrs[s] != 0 && bytes > 0) {
      RETURN_IF_ERRNO(CopyInBytes(t, addrs[s], sets[s].data(), bytes));
    }
  }
  std::vector<PollItem> items;
  std::vector<int> fds;
  for (int64_t fd = 0; fd < n; fd++) {
    uint64_t bit = 1ull << (fd % 64);
    bool in = sets[0][fd / 64] & bit, out = sets[1][fd / 64] & bit,
         ex = sets[2][fd / 64] & bit;
    if (!in && !out && !ex) continue;
    PollItem it;
    it.file = FileOrNull(t, fd);
    if (it.file == nullptr) return -EBADF;
    it.events = (in ? kInSet : 0) | (out ? kOutSet : 0) | (ex ? kExSet : 0) |
                POLLERR | POLLHUP;
    items.push_back(std::move(it));
    fds.push_back(static_cast<int>(fd));
  }
  int64_t r = DoPoll(t, items, deadline);
  if (r < 0) return r;
  // Each set bit counts once, so a fd ready for reading and writing counts
  // twice (Linux's select does the same).
  for (auto& s : sets) std::fill(s.begin(), s.end(), 0);
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); i++) {
    int fd = fds[i];
    uint64_t bit = 1ull << (fd % 64);
    EventMask want = items[i].events, got = items[i].revents;
    if ((want & POLLIN) && (got & kInSet)) { sets[0][fd / 64] |= bit; count++; }
    if ((want & POLLOUT) && (got & kOutSet)) { sets[1][fd / 64] |= bit; count++; }
    if ((want & kExSet) && (got & kExSet)) { sets[2][fd / 64] |= bit; count++; }
  }
  for (int s = 0; s < 3; s++) {
    if (addrs[s] != 0 && bytes > 0) {
      RETURN_IF_ERRNO(CopyOutBytes(t, addrs[s], sets[s].data(), bytes));
    }
  }
  return count;
}

int64_t SysSelect(Task& t, const SyscallArgs& a) {
  absl::Time deadline = absl::InfiniteFuture();
  const uint64_t tv_addr = a.a[4];
  if (tv_addr != 0) {
    struct timeval tv;
    RETURN_IF_ERRNO(CopyInObj(t, tv_addr, &tv));
    // Linux carries whole seconds out of tv_usec; only negatives fail.
    int64_t sec = tv.tv_sec + tv.tv_usec / 1000000;
    int64_t nsec = (tv.tv_usec % 1000000) * 1000;
    if (sec < 0 || nsec < 0) return -EINVAL;
    deadline = absl::Now() + t.SyscallTimeout(absl::Seconds(sec) +
                                              absl::Nanoseconds(nsec));
  }
  int64_t r = Select(t, static_cast<int32_t>(a.a[0]), a.a[1], a.a[2], a.a[3],
                     deadline);
  if (tv_addr != 0) {
    struct timeval tv = absl::ToTimeval(Remaining(deadline));
    (void)CopyOutObj(t, tv_addr, tv);  // ignored, as for ppoll
  }
  return r;
}

int64_t SysPselect6(Task& t, const SyscallArgs& a) {
  absl::Time deadline;
  RETURN_IF_ERRNO(TimespecDeadline(t, a.a[4], &deadline));
  TemporarySigmask mask(t);
  if (a.a[5] != 0) {
    // struct { const sigset_t* ss; size_t ss_len; }
    uint64_t sig[2];
    RETURN_IF_ERRNO(CopyInObj(t, a.a[5], &sig));
    RETURN_IF_ERRNO(mask.Install(sig[0], sig[1]));
  }
  int64_t r =
      Select(t, static_cast<int32_t>(a.a[0]), a.a[1], a.a[2], a.a[3], deadline);
  WriteBackTimespec(t, a.a[4], deadline);
  return mask.Finish(r);
}

// ---------------------------------------------------------------------------
// epoll

// Linux's EP_MAX_EVENTS.
constexpr int64_t kEpMaxEvents = INT32_MAX / sizeof(struct epoll_event);

int64_t EpollCreate1(Task& t, uint64_t flags) {
  if (flags & ~static_cast<uint64_t>(EPOLL_CLOEXEC)) return -EINVAL;
  return t.group().fds().Install(std::make_shared<fs::EpollFile>(),
                                 (flags & EPOLL_CLOEXEC) != 0);
}

int64_t SysEpollCreate(Task& t, const SyscallArgs& a) {
  if (static_cast<int32_t>(a.a[0]) <= 0) return -EINVAL;
  return EpollCreate1(t, 0);
}

int64_t SysEpollCreate1(Task& t, const SyscallArgs& a) {
  return EpollCreate1(t, a.a[0]);
}

int64_t SysEpollCtl(Task& t, const SyscallArgs& a) {
  const int op = static_cast<int>(a.a[1]);
  struct epoll_event ev = {};
  if (op != EPOLL_CTL_DEL) RETURN_IF_ERRNO(CopyInObj(t, a.a[3], &ev));
  auto epf = FileOrNull(t, a.a[0]);
  auto target = FileOrNull(t, a.a[2]);
  if (epf == nullptr || target == nullptr) return -EBADF;
  // Linux checks that the target can be polled before that epfd is an
  // epoll file.
  auto* source = dynamic_cast<waiter::EventSource*>(target.get());
  if (source == nullptr || source->event_queue() == nullptr) return -EPERM;
  auto ep = std::dynamic_pointer_cast<fs::EpollFile>(epf);
  if (ep == nullptr || a.a[0] == a.a[2]) return -EINVAL;
  return ep->Ctl(op, static_cast<int>(a.a[2]), target, ev);
}

int64_t EpollWait(Task& t, uint64_t epfd, uint64_t addr, int64_t max,
                  absl::Time deadline) {
  if (max <= 0 || max > kEpMaxEvents) return -EINVAL;
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::EpollFile> ep,
                         FileAs<fs::EpollFile>(t, epfd, -EINVAL));
  // One call reports each ready interest at most once, so it never needs
  // room for more events than the set has interests (one at least: an
  // interest added while the call waits may be reported).
  const int64_t room = std::max<int64_t>(1, static_cast<int64_t>(ep->NumInterests()));
  std::vector<struct epoll_event> evs(std::min<int64_t>(max, room));
  int64_t n = ep->Wait(evs.data(), static_cast<int>(evs.size()), deadline, t.io());
  if (n <= 0) return n;
  RETURN_IF_ERRNO(
      CopyOutBytes(t, addr, evs.data(), n * sizeof(struct epoll_event)));
  return n;
}

int64_t SysEpollWait(Task& t, const SyscallArgs& a) {
  absl::Time deadline;
  MillisDeadline(t, static_cast<int32_t>(a.a[3]), &deadline);
  return EpollWait(t, a.a[0], a.a[1], static_cast<int32_t>(a.a[2]), deadline);
}

int64_t SysEpollPwait(Task& t, const SyscallArgs& a) {
  absl::Time deadline;
  MillisDeadline(t, static_cast<int32_t>(a.a[3]), &deadline);
  TemporarySigmask mask(t);
  RETURN_IF_ERRNO(mask.Install(a.a[4], a.a[5]));
  return mask.Finish(
      EpollWait(t, a.a[0], a.a[1], static_cast<int32_t>(a.a[2]), deadline));
}

int64_t SysEpollPwait2(Task& t, const SyscallArgs& a) {
  absl::Time deadline;
  RETURN_IF_ERRNO(TimespecDeadline(t, a.a[3], &deadline));
  TemporarySigmask mask(t);
  RETURN_IF_ERRNO(mask.Install(a.a[4], a.a[5]));
  return mask.Finish(
      EpollWait(t, a.a[0], a.a[1], static_cast<int32_t>(a.a[2]), deadline));
}

}  // namespace

void RegisterPoll(Entry* table) {
  table[SYS_pipe] = {SysPipe, "pipe"};
  table[SYS_pipe2] = {SysPipe2, "pipe2"};
  table[SYS_eventfd] = {SysEventfd, "eventfd"};
  table[SYS_eventfd2] = {SysEventfd2, "eventfd2"};
  table[SYS_timerfd_create] = {SysTimerfdCreate, "timerfd_create"};
  table[SYS_timerfd_settime] = {SysTimerfdSettime, "timerfd_settime"};
  table[SYS_timerfd_gettime] = {SysTimerfdGettime, "timerfd_gettime"};
  table[SYS_poll] = {SysPoll, "poll"};
  table[SYS_ppoll] = {SysPpoll, "ppoll"};
  table[SYS_select] = {SysSelect, "select"};
  table[SYS_pselect6] = {SysPselect6, "pselect6"};
  table[SYS_epoll_create] = {SysEpollCreate, "epoll_create"};
  table[SYS_epoll_create1] = {SysEpollCreate1, "epoll_create1"};
  table[SYS_epoll_ctl] = {SysEpollCtl, "epoll_ctl"};
  table[SYS_epoll_wait] = {SysEpollWait, "epoll_wait"};
  table[SYS_epoll_pwait] = {SysEpollPwait, "epoll_pwait"};
  table[SYS_epoll_pwait2] = {SysEpollPwait2, "epoll_pwait2"};
}

}  // namespace sandboxd::syscalls
