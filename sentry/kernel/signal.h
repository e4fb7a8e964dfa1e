// Signal dispositions, masks and the signal frame layout of x86-64 Linux.
#ifndef SANDBOXD_SENTRY_KERNEL_SIGNAL_H_
#define SANDBOXD_SENTRY_KERNEL_SIGNAL_H_

#include <signal.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>

namespace sandboxd::kernel {

inline constexpr int kNumSignals = 64;
using SigSet = uint64_t;  // bit (signo - 1)

inline constexpr SigSet SigBit(int signo) { return 1ull << (signo - 1); }
inline constexpr SigSet kUnblockable = SigBit(9) | SigBit(19);  // KILL, STOP
// SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU: the job-control stop signals.
inline constexpr SigSet kStopSignals =
    SigBit(19) | SigBit(20) | SigBit(21) | SigBit(22);
inline constexpr bool IsStopSignal(int signo) {
  return (kStopSignals & SigBit(signo)) != 0;
}

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

// What queued a signal and wants to know when it is taken off the queue:
// a POSIX timer counts its overruns until then (Linux's posixtimer_rearm).
class SignalSource {
 public:
  virtual ~SignalSource() = default;
  // Called by the receiving task, with none of its locks held, when the
  // signal leaves the pending set (delivered, ignored, taken by
  // sigtimedwait or a signalfd). May fill the siginfo's si_overrun.
  // Returns false if the signal is stale and must be dropped (its timer
  // was re-armed or deleted since).
  virtual bool Dequeued(siginfo_t* info) = 0;
};

}  // namespace sandboxd::kernel

#endif  // SANDBOXD_SENTRY_KERNEL_SIGNAL_H_
