// Signal dispositions, masks and the signal frame layout of x86-64 Linux.
#ifndef SANDBOXD_SENTRY_KERNEL_SIGNAL_H_
#define SANDBOXD_SENTRY_KERNEL_SIGNAL_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>

namespace sandboxd::kernel {

inline constexpr int kNumSignals = 64;
using SigSet = uint64_t;  // bit (signo - 1)

inline constexpr SigSet SigBit(int signo) { return 1ull << (signo - 1); }
inline constexpr SigSet kUnblockable = SigBit(9) | SigBit(19);  // KILL, STOP

// The kernel's struct sigaction for rt_sigaction on x86-64.
struct SigAction {
  uint64_t handler = 0;  // SIG_DFL (0), SIG_IGN (1) or an address
  uint64_t flags = 0;
  uint64_t restorer = 0;
  SigSet mask = 0;
};
static_assert(sizeof(SigAction) == 32);

inline constexpr uint64_t kSigDfl = 0;
inline constexpr uint64_t kSigIgn = 1;

enum class DefaultAction { kTerminate, kCore, kIgnore, kStop, kContinue };
DefaultAction DefaultActionOf(int signo);

// sigaltstack(2)'s stack_t.
struct SignalStack {
  uint64_t sp = 0;
  int32_t flags = 2;  // SS_DISABLE
  int32_t pad = 0;
  uint64_t size = 0;
};
static_assert(sizeof(SignalStack) == 24);

struct SignalInfo;

// What queued a signal and wants to know when it is taken off the queue:
// a POSIX timer counts its overruns until then (Linux's posixtimer_rearm).
class SignalSource {
 public:
  virtual ~SignalSource() = default;
  // Called by the receiving task, with none of its locks held, when the
  // signal leaves the pending set (delivered, ignored or sigtimedwait'ed).
  // May fill the info's overrun. Returns false if the signal is stale and
  // must be dropped (its timer was re-armed or deleted since).
  virtual bool Dequeued(SignalInfo* info) = 0;
};

// One pending signal's siginfo, as much of it as the Sentry produces.
struct SignalInfo {
  int signo = 0;
  int code = 0;        // SI_USER, SI_TKILL, SI_KERNEL, SI_TIMER, fault codes
  pid_t sender = 0;    // SI_USER, SI_TKILL
  uint64_t addr = 0;   // faults
  int timerid = 0;     // SI_TIMER
  int overrun = 0;     // SI_TIMER
  uint64_t value = 0;  // SI_TIMER: the sigevent's sigval
  std::shared_ptr<SignalSource> source;
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_SIGNAL_H_
