// Threads, exit and futexes.
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>

#include <algorithm>

#include "absl/time/clock.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/process.h"
#include "sentry/syscalls/syscalls.h"
#include "sentry/waiter/timer_thread.h"

namespace sandboxd::syscalls {
namespace {

using kernel::Futexes;

// clone(flags, stack, parent_tid, child_tid, tls) on x86-64.
int64_t SysClone(Task& t, const SyscallArgs& a) {
  uint64_t flags = a.a[0];
  constexpr uint64_t kThreadFlags =
      CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD;
  if ((flags & CLONE_THREAD) && !(flags & CLONE_SIGHAND)) return -EINVAL;
  if ((flags & CLONE_SIGHAND) && !(flags & CLONE_VM)) return -EINVAL;
  if (!(flags & CLONE_THREAD)) {
    return CloneProcess(t, flags, a.a[1], a.a[2], a.a[3], a.a[4]);
  }
  if ((flags & kThreadFlags) != kThreadFlags) return -EINVAL;
  constexpr uint64_t kSupported =
      kThreadFlags | CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
      CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID | CLONE_DETACHED | 0xff;
  if (flags & ~kSupported) {
    t.kernel().CountUnimplemented(SYS_clone);
    return -EINVAL;
  }
  if ((flags & 0xff) != 0) return -EINVAL;  // no exit signal for threads

  t.SyncFp();  // the new thread starts with this one's FPU state
  platform::CpuState cpu = t.cpu();
  cpu.regs.rax = 0;
  if (a.a[1] != 0) cpu.regs.rsp = a.a[1];
  if (flags & CLONE_SETTLS) {
    if (a.a[4] >= t.kernel().platform().MaxUserAddress()) return -EPERM;
    cpu.regs.fs_base = a.a[4];
  }
  auto child = t.kernel().CreateThread(t, cpu);
  if (!child.ok()) return -EAGAIN;
  Task* c = *child;
  uint32_t tid = static_cast<uint32_t>(c->tid());
  if (flags & CLONE_PARENT_SETTID) t.mm().CopyOut(a.a[2], &tid, sizeof(tid));
  if (flags & CLONE_CHILD_SETTID) t.mm().CopyOut(a.a[3], &tid, sizeof(tid));
  if (flags & CLONE_CHILD_CLEARTID) c->set_clear_child_tid(a.a[3]);
  if (!c->Start().ok()) {
    // The host gave no thread to run it (its pids or memory limits).
    t.kernel().AbandonTask(c);
    return -EAGAIN;
  }
  return c->tid();
}

// clone3(args, size): struct clone_args, mapped onto clone's registers.
// Not supported (EINVAL, counted): CLONE_PIDFD (no pidfds yet), set_tid
// (choosing pids), CLONE_INTO_CGROUP.
int64_t SysClone3(Task& t, const SyscallArgs& a) {
  struct CloneArgs {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
        stack_size, tls, set_tid, set_tid_size, cgroup;
  } ca{};
  constexpr uint64_t kSizeVer0 = 64;  // CLONE_ARGS_SIZE_VER0
  const uint64_t size = a.a[1];
  if (size < kSizeVer0) return -EINVAL;
  if (size > 4096) return -E2BIG;
  const uint64_t known = std::min<uint64_t>(size, sizeof(ca));
  RETURN_IF_ERRNO(CopyInBytes(t, a.a[0], &ca, known));
  // A newer caller's extra fields must be zero (Linux: E2BIG otherwise).
  for (uint64_t off = sizeof(ca); off < size; off++) {
    uint8_t b;
    if (t.mm().CopyIn(a.a[0] + off, &b, 1) != 1) return -EFAULT;
    if (b != 0) return -E2BIG;
  }
  constexpr uint64_t kCloneIntoCgroup = 0x200000000ull;
  if ((ca.flags & 0xff) != 0 || ca.exit_signal > 64) return -EINVAL;
  if ((ca.stack == 0) != (ca.stack_size == 0)) return -EINVAL;
  if ((ca.flags & (CLONE_PIDFD | kCloneIntoCgroup)) || ca.set_tid != 0 ||
      ca.set_tid_size != 0) {
    t.kernel().CountUnimplemented(SYS_clone3);
    return -EINVAL;
  }
  if ((ca.flags & CLONE_THREAD) && ca.exit_signal != 0) return -EINVAL;
  SyscallArgs c{};
  c.nr = SYS_clone;
  c.a[0] = ca.flags | ca.exit_signal;
  c.a[1] = ca.stack != 0 ? ca.stack + ca.stack_size : 0;  // the stack's top
  c.a[2] = ca.parent_tid;
  c.a[3] = ca.child_tid;
  c.a[4] = ca.tls;
  return SysClone(t, c);
}

int64_t SysExit(Task& t, const SyscallArgs& a) {
  t.ExitThread(static_cast<int>(a.a[0] & 0xff));
  return kernel::kNoReturnValue;
}

int64_t SysExitGroup(Task& t, const SyscallArgs& a) {
  t.group().Exit(kernel::ExitStatus{static_cast<int>(a.a[0] & 0xff), 0, false});
  return kernel::kNoReturnValue;
}

int64_t SysSetTidAddress(Task& t, const SyscallArgs& a) {
  t.set_clear_child_tid(a.a[0]);
  return t.tid();
}

int64_t SysSetRobustList(Task& t, const SyscallArgs& a) {
  if (a.a[1] != 24) return -EINVAL;  // sizeof(struct robust_list_head)
  t.set_robust_list(a.a[0], a.a[1]);
  return 0;
}

int64_t SysGetRobustList(Task& t, const SyscallArgs& a) {
  std::shared_ptr<Task> other;
  Task* target = &t;
  if (a.a[0] != 0) {
    other = t.kernel().FindTask(static_cast<pid_t>(a.a[0]));
    if (other == nullptr) return -ESRCH;
    target = other.get();
  }
  uint64_t head = target->robust_list(), len = 24;
  RETURN_IF_ERRNO(CopyOutObj(t, a.a[1], head));
  return CopyOutObj(t, a.a[2], len);
}

// Converts a futex timeout. FUTEX_WAIT's is relative (CLOCK_MONOTONIC);
// FUTEX_WAIT_BITSET's is absolute, CLOCK_REALTIME with
// FUTEX_CLOCK_REALTIME, else CLOCK_MONOTONIC.
int64_t FutexDeadline(Task& t, uint64_t addr, bool absolute, bool realtime,
                      absl::Time* deadline) {
  *deadline = absl::InfiniteFuture();
  if (addr == 0) return 0;
  struct timespec ts;
  RETURN_IF_ERRNO(CopyInObj(t, addr, &ts));
  if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000) {
    return -EINVAL;
  }
  absl::Duration d = absl::DurationFromTimespec(ts);
  if (!absolute) {
    *deadline = absl::Now() + t.SyscallTimeout(d);
    return 0;
  }
  struct timespec now;
  waiter::ClockGettime(realtime ? CLOCK_REALTIME : CLOCK_MONOTONIC, &now);
  *deadline = absl::Now() + (d - absl::DurationFromTimespec(now));
  return 0;
}

int64_t SysFutex(Task& t, const SyscallArgs& a) {
  uint64_t uaddr = a.a[0];
  int op = static_cast<int>(a.a[1]);
  uint32_t val = static_cast<uint32_t>(a.a[2]);
  int cmd = op & FUTEX_CMD_MASK;
  bool realtime = (op & FUTEX_CLOCK_REALTIME) != 0;
  if (realtime && cmd != FUTEX_WAIT && cmd != FUTEX_WAIT_BITSET) {
    return -ENOSYS;
  }
  mm::MM& mm = t.mm();
  Futexes& fx = t.kernel().futexes();
  const bool is_private = (op & FUTEX_PRIVATE_FLAG) != 0;
  // Linux's keys: (mm, address) for private futexes and private memory;
  // the memory itself for shared mappings, so that every process mapping
  // it meets on the same queue.
  auto key_of = [&](uint64_t addr) -> Futexes::Key {
    if (!is_private && mm.IsSharedMapping(addr)) {
      std::atomic<uint32_t>* w = nullptr;
      if (mm.AtomicWord(addr, false, &w) == 0) {
        return Futexes::Key{nullptr, reinterpret_cast<uintptr_t>(w)};
      }
    }
    return Futexes::Key{&mm, addr};
  };
  Futexes::Key key = key_of(uaddr);
  std::atomic<uint32_t>* word = nullptr;
  switch (cmd) {
    case FUTEX_WAIT:
    case FUTEX_WAIT_BITSET: {
      int64_t r = mm.AtomicWord(uaddr, false, &word);
      if (r < 0) return r;
      absl::Time deadline;
      r = FutexDeadline(t, a.a[3], cmd == FUTEX_WAIT_BITSET, realtime,
                        &deadline);
      if (r < 0) return r;
      uint32_t bitset = cmd == FUTEX_WAIT ? ~0u : static_cast<uint32_t>(a.a[5]);
      r = fx.Wait(t, key, word, val, bitset, deadline);
      // A wait interrupted by a signal is restarted by the kernel if the
      // handler has SA_RESTART... but glibc retries on EINTR anyway.
      return r;
    }
    case FUTEX_WAKE:
    case FUTEX_WAKE_BITSET: {
      if (uaddr % 4 != 0) return -EINVAL;
      uint32_t bitset = cmd == FUTEX_WAKE ? ~0u : static_cast<uint32_t>(a.a[5]);
      return fx.Wake(key, static_cast<int>(std::min<uint32_t>(val, INT32_MAX)),
                     bitset);
    }
    case FUTEX_REQUEUE:
    case FUTEX_CMP_REQUEUE: {
      RETURN_IF_ERRNO(mm.AtomicWord(uaddr, false, &word));
      if (a.a[4] % 4 != 0) return -EINVAL;
      if (static_cast<int32_t>(val) < 0 || static_cast<int32_t>(a.a[3]) < 0) {
        return -EINVAL;
      }
      Futexes::Key to = key_of(a.a[4]);
      return fx.Requeue(key, to, static_cast<int>(val),
                        static_cast<int>(a.a[3] & 0x7fffffff), word,
                        cmd == FUTEX_CMP_REQUEUE,
                        static_cast<uint32_t>(a.a[5]));
    }
    case FUTEX_WAKE_OP: {
      uint64_t uaddr2 = a.a[4];
      std::atomic<uint32_t>* word2 = nullptr;
      RETURN_IF_ERRNO(mm.AtomicWord(uaddr2, true, &word2));
      if (uaddr % 4 != 0) return -EINVAL;
      uint32_t encoded = static_cast<uint32_t>(a.a[5]);
      int opcode = (encoded >> 28) & 7;
      bool shift = (encoded >> 31) & 1;
      int cmp = (encoded >> 24) & 15;
      // Both arguments are signed 12-bit fields (sign_extend32(..., 11)).
      auto sext12 = [](uint32_t v) {
        return static_cast<int32_t>(v << 20) >> 20;
      };
      int32_t soparg = sext12((encoded >> 12) & 0xfff);
      int32_t scmparg = sext12(encoded & 0xfff);
      // Linux masks an out-of-range shift to 0..31 (after a warning).
      uint32_t oparg = shift ? 1u << (static_cast<uint32_t>(soparg) & 31)
                             : static_cast<uint32_t>(soparg);
      uint32_t cmparg = static_cast<uint32_t>(scmparg);
      auto apply = [&]() -> int64_t {
        if (opcode > FUTEX_OP_XOR) return -ENOSYS;
        uint32_t old = 0;
        // Under the MM's lock: a fork by another thread must not share the
        // page between finding the word and writing it.
        int64_t ur = mm.UpdateWord(uaddr2, [&](std::atomic<uint32_t>* w) {
          old = w->load();
          uint32_t nv;
          do {
            switch (opcode) {
              case FUTEX_OP_SET: nv = oparg; break;
              case FUTEX_OP_ADD: nv = old + oparg; break;
              case FUTEX_OP_OR: nv = old | oparg; break;
              case FUTEX_OP_ANDN: nv = old & ~oparg; break;
              default: nv = old ^ oparg; break;  // FUTEX_OP_XOR
            }
          } while (!w->compare_exchange_weak(old, nv));
        });
        if (ur < 0) return ur;
        int32_t o = static_cast<int32_t>(old), c = static_cast<int32_t>(cmparg);
        switch (cmp) {
          case FUTEX_OP_CMP_EQ: return o == c;
          case FUTEX_OP_CMP_NE: return o != c;
          case FUTEX_OP_CMP_LT: return o < c;
          case FUTEX_OP_CMP_LE: return o <= c;
          case FUTEX_OP_CMP_GT: return o > c;
          case FUTEX_OP_CMP_GE: return o >= c;
          default: return -ENOSYS;
        }
      };
      return fx.WakeOp(key, key_of(uaddr2), static_cast<int>(val),
                       static_cast<int>(a.a[3] & 0x7fffffff), apply);
    }
    default:
      // PI futexes and FUTEX_WAIT_REQUEUE_PI.
      t.kernel().CountUnimplemented(SYS_futex);
      return -ENOSYS;
  }
}

}  // namespace

void RegisterThread(Entry* table) {
  table[SYS_clone] = {SysClone, "clone"};
  table[SYS_clone3] = {SysClone3, "clone3"};
  table[SYS_exit] = {SysExit, "exit"};
  table[SYS_exit_group] = {SysExitGroup, "exit_group"};
  table[SYS_set_tid_address] = {SysSetTidAddress, "set_tid_address"};
  table[SYS_set_robust_list] = {SysSetRobustList, "set_robust_list"};
  table[SYS_get_robust_list] = {SysGetRobustList, "get_robust_list"};
  table[SYS_futex] = {SysFutex, "futex"};
}

}  // namespace sandboxd::syscalls
