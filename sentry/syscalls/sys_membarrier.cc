// membarrier(2) (kernel/sched/membarrier.c).
//
// Every barrier command is one Platform::MemoryBarrier: each application
// thread that is running passes a full memory barrier before it returns.
// That is what PRIVATE_EXPEDITED promises for the caller's process and
// more than it needs (all of the sandbox's threads), and, within the
// sandbox, what GLOBAL and GLOBAL_EXPEDITED promise. Registrations are
// kept per MM as on Linux (fork keeps them, execve drops them).
//
// Not offered: the SYNC_CORE commands (a core-serializing instruction on
// every thread; the platforms do not promise one) and the RSEQ ones (no
// rseq(2) here). QUERY leaves them out and they answer EINVAL, as on a
// kernel built without them.
#include <errno.h>
#include <sys/syscall.h>

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

// From <linux/membarrier.h> (GET_REGISTRATIONS is newer than some headers).
constexpr uint32_t kCmdQuery = 0;
constexpr uint32_t kCmdGlobal = 1 << 0;
constexpr uint32_t kCmdGlobalExpedited = 1 << 1;
constexpr uint32_t kCmdRegisterGlobalExpedited = 1 << 2;
constexpr uint32_t kCmdPrivateExpedited = 1 << 3;
constexpr uint32_t kCmdRegisterPrivateExpedited = 1 << 4;
constexpr uint32_t kCmdGetRegistrations = 1 << 9;

constexpr uint32_t kSupported = kCmdGlobal | kCmdGlobalExpedited |
                                kCmdRegisterGlobalExpedited |
                                kCmdPrivateExpedited |
                                kCmdRegisterPrivateExpedited |
                                kCmdGetRegistrations;

int64_t Barrier(Task& t) {
  absl::Status st = t.kernel().platform().MemoryBarrier();
  if (st.ok()) return 0;
  // The host refused (e.g. nohz_full CPUs for MEMBARRIER_CMD_GLOBAL): the
  // barrier did not happen, and Linux says so with EINVAL.
  return -EINVAL;
}

int64_t SysMembarrier(Task& t, const SyscallArgs& a) {
  const int cmd = static_cast<int>(a.a[0]);
  const unsigned flags = static_cast<unsigned>(a.a[1]);
  // Only the RSEQ command takes a flag (MEMBARRIER_CMD_FLAG_CPU).
  if (flags != 0) return -EINVAL;
  std::atomic<uint32_t>& regs = t.mm().membarrier_registrations();
  switch (static_cast<uint32_t>(cmd)) {
    case kCmdQuery:
      return kSupported;
    case kCmdGlobal:
    case kCmdGlobalExpedited:
      return Barrier(t);
    case kCmdPrivateExpedited:
      if ((regs.load() & kCmdRegisterPrivateExpedited) == 0) return -EPERM;
      return Barrier(t);
    case kCmdRegisterGlobalExpedited:
    case kCmdRegisterPrivateExpedited:
      regs.fetch_or(static_cast<uint32_t>(cmd));
      return 0;
    case kCmdGetRegistrations:
      return regs.load();
    default:
      return -EINVAL;
  }
}

}  // namespace

void RegisterMembarrier(Entry* table) {
  table[SYS_membarrier] = {SysMembarrier, "membarrier"};
}

}  // namespace sandboxd::syscalls
