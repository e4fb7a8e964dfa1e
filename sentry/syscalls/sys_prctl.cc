// prctl(2), capget(2), and fadvise64(2), advice that changes nothing a
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
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

constexpr int kCapLastCap = 40;       // CAP_CHECKPOINT_RESTORE (Linux 6.1)
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
      return g.keepcaps.load() ? 1 : 0;
    case PR_SET_KEEPCAPS:
      if (arg2 > 1) return -EINVAL;
      g.keepcaps.store(arg2 == 1);
      return 0;
    case PR_SET_NO_NEW_PRIVS:
      if (arg2 != 1 || a.a[2] || a.a[3] || a.a[4]) return -EINVAL;
      g.no_new_privs.store(true);
      return 0;
    case PR_GET_NO_NEW_PRIVS:
      if (arg2 || a.a[2] || a.a[3] || a.a[4]) return -EINVAL;
      return g.no_new_privs.load() ? 1 : 0;
    case PR_CAPBSET_READ:
      if (arg2 > static_cast<uint64_t>(kCapLastCap)) return -EINVAL;
      return (g.cap_bset.load() >> arg2) & 1;
    case PR_CAPBSET_DROP:
      if (arg2 > static_cast<uint64_t>(kCapLastCap)) return -EINVAL;
      g.cap_bset.fetch_and(~(1ull << arg2));
      return 0;
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

// capget: the sandbox's processes are root in their user namespace and
// hold every capability (effective and permitted; none inheritable), as
// their getuid() of 0 says. (capset is not implemented: dropping
// capabilities would have to be enforced, which the Sentry does not do
// yet, so it stays ENOSYS rather than pretend.)
int64_t SysCapget(Task& t, const SyscallArgs& a) {
  struct Header {
    uint32_t version;
    int pid;
  } h;
  constexpr uint32_t kV1 = 0x19980330, kV2 = 0x20071026, kV3 = 0x20080522;
  RETURN_IF_ERRNO(CopyInObj(t, a.a[0], &h));
  if (h.version != kV1 && h.version != kV2 && h.version != kV3) {
    h.version = kV3;  // tells the caller which version to use
    RETURN_IF_ERRNO(CopyOutObj(t, a.a[0], h));
    return a.a[1] == 0 ? 0 : -EINVAL;
  }
  if (h.pid < 0) return -EINVAL;
  if (h.pid != 0 && t.kernel().FindGroup(h.pid) == nullptr &&
      t.kernel().FindTask(h.pid) == nullptr) {
    return -ESRCH;
  }
  if (a.a[1] == 0) return 0;
  struct Data {
    uint32_t effective, permitted, inheritable;
  } d[2] = {};
  const uint64_t all = (1ull << (kCapLastCap + 1)) - 1;
  d[0].effective = d[0].permitted = static_cast<uint32_t>(all);
  d[1].effective = d[1].permitted = static_cast<uint32_t>(all >> 32);
  const size_t n = h.version == kV1 ? 1 : 2;
  return CopyOutBytes(t, a.a[1], d, n * sizeof(Data));
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
  table[SYS_capget] = {SysCapget, "capget"};
  table[SYS_fadvise64] = {SysFadvise64, "fadvise64"};
}

}  // namespace sandboxd::syscalls
