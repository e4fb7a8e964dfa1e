// prctl(2) (the capability options: sys_creds.cc) and fadvise64(2), advice that changes nothing a
// program can observe here.
//
// prctl options that Linux has and the Sentry does not implement return
// EINVAL (Linux's answer to an option it does not know) and are counted as
// unimplemented (--log-unimplemented shows prctl), so they are never
// silent successes.
#include <errno.h>
#include <fcntl.h>
#include <linux/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "sentry/fs/file.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/creds.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

constexpr uint64_t kTimerSlackNs = 50000;  // Linux's default

int64_t GetName(Task& t, uint64_t addr) {
  char name[16] = {0};
  t.kernel().WithTasklistLock([&] {
    const std::string& n =
        t.thread_comm.empty() ? t.group().image.comm : t.thread_comm;
    memcpy(name, n.data(), std::min<size_t>(n.size(), 15));
  });
  return CopyOutObj(t, addr, name);
}

int64_t SetName(Task& t, uint64_t addr) {
  char name[16] = {0};
  // Up to 16 bytes, stopping at a NUL; a fault before one is EFAULT.
  size_t n = 0;
  for (; n < sizeof(name) - 1; n++) {
    if (t.mm().CopyIn(addr + n, &name[n], 1) != 1) return -EFAULT;
    if (name[n] == 0) break;
  }
  name[sizeof(name) - 1] = 0;
  std::string s(name, strnlen(name, sizeof(name)));
  t.kernel().WithTasklistLock([&] {
    if (t.tid() == t.group().tgid()) {
      t.group().image.comm = s;
      t.thread_comm.clear();
    } else {
      t.thread_comm = s;
    }
  });
  return 0;
}

int64_t SysPrctl(Task& t, const SyscallArgs& a) {
  kernel::ThreadGroup& g = t.group();
  const int option = static_cast<int>(a.a[0]);
  const uint64_t arg2 = a.a[1];
  switch (option) {
    case PR_SET_NAME:
      return SetName(t, arg2);
    case PR_GET_NAME:
      return GetName(t, arg2);
    case PR_SET_PDEATHSIG: {
      if (arg2 > static_cast<uint64_t>(kernel::kNumSignals)) return -EINVAL;
      t.kernel().WithTasklistLock([&] { g.pdeath_signal = static_cast<int>(arg2); });
      return 0;
    }
    case PR_GET_PDEATHSIG: {
      int sig = 0;
      t.kernel().WithTasklistLock([&] { sig = g.pdeath_signal; });
      return CopyOutObj(t, arg2, sig);
    }
    case PR_GET_DUMPABLE:
      return g.dumpable.load();
    case PR_SET_DUMPABLE:
      if (arg2 > 1) return -EINVAL;  // SUID_DUMP_ROOT (2) is not settable
      g.dumpable.store(static_cast<int>(arg2));
      return 0;
    case PR_GET_KEEPCAPS:
    case PR_SET_KEEPCAPS:
    case PR_CAPBSET_READ:
    case PR_CAPBSET_DROP:
    case PR_GET_SECUREBITS:
    case PR_SET_SECUREBITS:
    case PR_CAP_AMBIENT:
      return CapabilityPrctl(t, option, arg2, a.a[2], a.a[3], a.a[4]);
    case PR_SET_NO_NEW_PRIVS:
      if (arg2 != 1 || a.a[2] || a.a[3] || a.a[4]) return -EINVAL;
      g.no_new_privs.store(true);
      return 0;
    case PR_GET_NO_NEW_PRIVS:
      if (arg2 || a.a[2] || a.a[3] || a.a[4]) return -EINVAL;
      return g.no_new_privs.load() ? 1 : 0;
    case PR_SET_CHILD_SUBREAPER:
      t.kernel().WithTasklistLock([&] { g.child_subreaper = arg2 != 0; });
      return 0;
    case PR_GET_CHILD_SUBREAPER: {
      int v = 0;
      t.kernel().WithTasklistLock([&] { v = g.child_subreaper ? 1 : 0; });
      return CopyOutObj(t, arg2, v);
    }
    case PR_GET_TIMERSLACK:
      return static_cast<int64_t>(kTimerSlackNs);
    case PR_SET_TIMERSLACK:
      // Accepted: the Sentry's timers fire when due; there is no slack to
      // widen, and reading it back gives Linux's default.
      return 0;
    case PR_GET_SECCOMP:
      return 0;  // no seccomp filter is installed in the sandbox
    case PR_GET_TID_ADDRESS:
      return -EINVAL;  // needs CONFIG_CHECKPOINT_RESTORE, off here
    default:
      t.kernel().CountUnimplemented(SYS_prctl);
      return -EINVAL;
  }
}

// posix_fadvise: advice on a file's caching. Errors as Linux; the advice
// itself changes nothing the program can see (no page cache to tune).
int64_t SysFadvise64(Task& t, const SyscallArgs& a) {
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f,
                         FileFor(t, static_cast<uint32_t>(a.a[0])));
  if (static_cast<int64_t>(a.a[2]) < 0) return -EINVAL;
  if (a.a[3] > 5) return -EINVAL;  // POSIX_FADV_NORMAL..POSIX_FADV_NOREUSE
  struct stat st;
  if (f->Stat(&st) == 0 && S_ISFIFO(st.st_mode)) return -ESPIPE;
  return 0;
}

}  // namespace

void RegisterPrctl(Entry* table) {
  table[SYS_prctl] = {SysPrctl, "prctl"};
  table[SYS_fadvise64] = {SysFadvise64, "fadvise64"};
}

}  // namespace sandboxd::syscalls
