#include "sentry/kernel/signalfd.h"

#include <errno.h>
#include <fcntl.h>

#include <cstring>

#include "sentry/fs/anon.h"

namespace sandboxd::kernel {

namespace {

// Linux's siginfo_layout (kernel/signal.c), for the layouts signalfd
// copies.
enum class Layout { kKill, kTimer, kPoll, kFault, kChld, kRt, kSys };

Layout LayoutOf(int signo, int code) {
  if (signo < SIGRTMIN && code > SI_USER && code < SI_KERNEL) {
    switch (signo) {
      case SIGILL: case SIGFPE: case SIGSEGV: case SIGBUS: case SIGTRAP:
        return Layout::kFault;
      case SIGCHLD:
        return Layout::kChld;
      case SIGPOLL:
        return Layout::kPoll;
      case SIGSYS:
        return Layout::kSys;
      default:
        break;
    }
  }
  if (code == SI_TIMER) return Layout::kTimer;
  if (code == SI_SIGIO) return Layout::kPoll;
  if (code < 0) return Layout::kRt;
  return Layout::kKill;
}

}  // namespace

struct signalfd_siginfo ToSignalfdSiginfo(const siginfo_t& si) {
  struct signalfd_siginfo out;
  std::memset(&out, 0, sizeof(out));
  out.ssi_signo = static_cast<uint32_t>(si.si_signo);
  out.ssi_errno = si.si_errno;
  out.ssi_code = si.si_code;
  switch (LayoutOf(si.si_signo, si.si_code)) {
    case Layout::kKill:
      out.ssi_pid = static_cast<uint32_t>(si.si_pid);
      out.ssi_uid = si.si_uid;
      break;
    case Layout::kTimer:
      out.ssi_tid = static_cast<uint32_t>(si.si_timerid);
      out.ssi_overrun = static_cast<uint32_t>(si.si_overrun);
      out.ssi_ptr = reinterpret_cast<uint64_t>(si.si_ptr);
      out.ssi_int = si.si_int;
      break;
    case Layout::kPoll:
      out.ssi_band = static_cast<uint32_t>(si.si_band);
      out.ssi_fd = si.si_fd;
      break;
    case Layout::kFault:
      out.ssi_addr = reinterpret_cast<uint64_t>(si.si_addr);
      break;
    case Layout::kChld:
      out.ssi_pid = static_cast<uint32_t>(si.si_pid);
      out.ssi_uid = si.si_uid;
      out.ssi_status = si.si_status;
      out.ssi_utime = static_cast<uint64_t>(si.si_utime);
      out.ssi_stime = static_cast<uint64_t>(si.si_stime);
      break;
    case Layout::kRt:
      out.ssi_pid = static_cast<uint32_t>(si.si_pid);
      out.ssi_uid = si.si_uid;
      out.ssi_ptr = reinterpret_cast<uint64_t>(si.si_ptr);
      out.ssi_int = si.si_int;
      break;
    case Layout::kSys:
      // Linux copies only the common fields for SIGSYS.
      break;
  }
  return out;
}

SignalFd::SignalFd(std::shared_ptr<ThreadGroup> owner, SigSet mask, int flags)
    : owner_(owner),
      queue_(owner->signal_queue),
      ino_(fs::NextAnonIno()),
      mask_(mask & ~kUnblockable),
      nonblock_((flags & SFD_NONBLOCK) != 0) {}

int64_t SignalFd::Read(void* buf, uint64_t n, int64_t offset,
                       const fs::IoContext& io) {
  constexpr uint64_t kRecord = sizeof(struct signalfd_siginfo);
  if (n < kRecord) return -EINVAL;
  Task* t = dynamic_cast<Task*>(io.blocker);
  if (t == nullptr) t = Task::Current();
  if (t == nullptr) return -EAGAIN;  // no task to take signals from
  auto* out = static_cast<struct signalfd_siginfo*>(buf);
  for (;;) {
    uint64_t got = 0;
    siginfo_t si;
    while (got < n / kRecord && t->DequeueSignal(mask(), &si) != 0) {
      out[got++] = ToSignalfdSiginfo(si);
    }
    if (got > 0) return static_cast<int64_t>(got * kRecord);
    if (nonblock_.load() || io.blocker == nullptr) return -EAGAIN;
    // The reader's own process's queue: a signal pending for it notifies.
    int r = io.blocker->Wait(*t->group().signal_queue, POLLIN,
                             [this, t] { return t->CanDequeueSignal(mask()); });
    if (r < 0) return r;
  }
}

int64_t SignalFd::Stat(struct stat* st) {
  fs::AnonStat(st, 0600, ino_);
  return 0;
}

int SignalFd::StatusFlags() const {
  return O_RDWR | (nonblock_.load() ? O_NONBLOCK : 0);
}

int64_t SignalFd::SetStatusFlags(int flags) {
  nonblock_.store((flags & O_NONBLOCK) != 0);
  return 0;
}

waiter::EventMask SignalFd::Readiness(waiter::EventMask mask) {
  if ((mask & (POLLIN | POLLRDNORM)) == 0) return 0;
  const SigSet want = this->mask();
  bool ready = false;
  if (Task* t = Task::Current()) {
    ready = t->CanDequeueSignal(want);
  } else if (auto g = owner_.lock()) {
    // Not asked by a task (tests): any signal of the creating process.
    for (const auto& t : g->Tasks()) ready = ready || (t->pending_signals() & want);
  }
  return ready ? (mask & (POLLIN | POLLRDNORM)) : 0;
}

}  // namespace sandboxd::kernel
