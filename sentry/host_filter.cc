#include "sentry/host_filter.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "sentry/host_filter_trap.h"

namespace sandboxd::host_filter {
namespace {

// What the Sentry does on the host, by area. Each entry: why it is needed.
constexpr int kAllowed[] = {
    // Descriptors: the program's host files (stdio, hostfs, host sockets,
    // the memory file), the control channel, pipes of the Sentry's own.
    SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_pread64, SYS_pwrite64,
    SYS_preadv, SYS_pwritev, SYS_preadv2, SYS_pwritev2, SYS_lseek, SYS_close,
    SYS_close_range, SYS_dup, SYS_dup2, SYS_dup3, SYS_fcntl, SYS_ioctl,
    SYS_pipe2, SYS_splice, SYS_tee, SYS_sendfile, SYS_copy_file_range,
    SYS_fsync, SYS_fdatasync, SYS_ftruncate, SYS_fallocate, SYS_flock,
    SYS_eventfd2, SYS_memfd_create,
    // The rootfs, always relative to its directory descriptor (openat2
    // with RESOLVE_IN_ROOT); the empty root of a warm Sentry has nothing
    // else to open.
    SYS_openat, SYS_openat2, SYS_newfstatat, SYS_fstat, SYS_statx,
    SYS_readlinkat, SYS_getdents64, SYS_faccessat, SYS_faccessat2,
    SYS_fstatfs, SYS_fgetxattr, SYS_flistxattr,
    // A checkpoint's image directory (sentry/state/image_dir.cc): made
    // under a temporary name, renamed into place, an older one removed.
    // A warm Sentry's root is empty and read-only: these reach nothing
    // there but what a descriptor it was given leads to.
    SYS_mkdir, SYS_mkdirat, SYS_rename, SYS_renameat, SYS_unlink,
    SYS_unlinkat, SYS_rmdir,
    // Writable bind mounts (sentry/fs/hostfs.h): each relative to a
    // directory descriptor of the mount with one name, or on a file's own
    // descriptor. (mknodat is allowed below for fifos and sockets only.)
    SYS_renameat2, SYS_linkat, SYS_symlinkat, SYS_fchownat, SYS_fchmod,
    SYS_utimensat,
    // Memory: the internal mapping of the memory file, heaps, stacks.
    SYS_mmap, SYS_munmap, SYS_mprotect, SYS_madvise, SYS_mremap, SYS_brk,
    SYS_msync, SYS_mincore, SYS_membarrier,
    // Threads (one per task) and their synchronization. clone is allowed
    // below for threads only.
    SYS_futex, SYS_set_robust_list, SYS_get_robust_list, SYS_rseq,
    SYS_set_tid_address, SYS_exit, SYS_exit_group, SYS_sched_yield,
    SYS_sched_getaffinity, SYS_sched_setaffinity, SYS_sched_getparam,
    SYS_sched_getscheduler, SYS_getpriority, SYS_getcpu, SYS_gettid,
    SYS_getpid, SYS_getppid, SYS_getuid, SYS_geteuid, SYS_getgid,
    SYS_getegid, SYS_getresuid, SYS_getresgid, SYS_uname, SYS_sysinfo,
    SYS_prlimit64, SYS_getrlimit, SYS_getrusage, SYS_times, SYS_prctl,
    SYS_arch_prctl, SYS_restart_syscall,
    // Signals: the Sentry's own handlers and masks, the forwarder
    // (sigwaitinfo), interrupting task threads (tgkill), killing and
    // reaping the platform's stub processes.
    SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn,
    SYS_rt_sigtimedwait, SYS_rt_sigqueueinfo, SYS_rt_tgsigqueueinfo,
    SYS_sigaltstack, SYS_tgkill, SYS_tkill, SYS_kill, SYS_wait4, SYS_waitid,
    SYS_pause, SYS_rt_sigsuspend,
    // Time: the vDSO's fallbacks, sleeps, the Timekeeper, host timers.
    SYS_clock_gettime, SYS_clock_getres, SYS_clock_nanosleep, SYS_nanosleep,
    SYS_gettimeofday, SYS_time, SYS_timerfd_create, SYS_timerfd_settime,
    SYS_timerfd_gettime,
    // Waiting on descriptors: host sockets and pipes, the host poller.
    SYS_poll, SYS_ppoll, SYS_select, SYS_pselect6, SYS_epoll_create1,
    SYS_epoll_ctl, SYS_epoll_wait, SYS_epoll_pwait, SYS_epoll_pwait2,
    // Sockets: hostinet (sentry/socket/host_socket.h: AF_INET, AF_INET6
    // and NETLINK_ROUTE in the Sentry's network namespace), the control
    // channel, the stubs' sockets. socket, socketpair, setsockopt and
    // getsockopt are allowed below by argument.
    SYS_bind, SYS_listen, SYS_accept, SYS_accept4, SYS_connect, SYS_sendto,
    SYS_recvfrom, SYS_sendmsg, SYS_recvmsg, SYS_sendmmsg, SYS_recvmmsg,
    SYS_shutdown, SYS_getsockname, SYS_getpeername,
    // Randomness: AT_RANDOM, getrandom(2) of the program.
    SYS_getrandom,
};

// The families socket(2) may create: AF_UNIX (the Sentry's own channels)
// and hostinet's. AF_NETLINK only with NETLINK_ROUTE (the rule below).
constexpr int kSocketFamilies[] = {AF_UNIX, AF_INET, AF_INET6};
// The option levels hostinet passes on (its allow-list, host_socket.cc,
// names the options within them).
constexpr int kSockoptLevels[] = {SOL_SOCKET, IPPROTO_IP, IPPROTO_IPV6,
                                  IPPROTO_TCP, SOL_NETLINK};

// The kernel's clone flags of pthread_create; a clone without
// CLONE_THREAD would be a new host process.
constexpr uint64_t kThreadFlags = CLONE_VM | CLONE_THREAD;

absl::Status Rule(scmp_filter_ctx ctx, uint32_t action, int nr,
                  unsigned nargs = 0, const scmp_arg_cmp* args = nullptr) {
  int r = seccomp_rule_add_array(ctx, action, nr, nargs, args);
  if (r != 0) {
    return ErrnoStatus(absl::StrCat("seccomp rule for syscall ", nr), -r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Program> Build() {
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(
      seccomp_init(SCMP_ACT_TRAP), seccomp_release);
  if (ctx == nullptr) return absl::InternalError("seccomp_init failed");
  for (int nr : kAllowed) RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ALLOW, nr));
  scmp_arg_cmp thread = SCMP_A0(SCMP_CMP_MASKED_EQ, kThreadFlags, kThreadFlags);
  RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ALLOW, SYS_clone, 1, &thread));
  RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SYS_clone3));
  // A writable bind mount's fifos and sockets; never a device node.
  for (uint64_t type : {uint64_t{S_IFIFO}, uint64_t{S_IFSOCK}}) {
    scmp_arg_cmp node = SCMP_A2(SCMP_CMP_MASKED_EQ, S_IFMT, type);
    RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ALLOW, SYS_mknodat, 1, &node));
  }
  // Sockets by argument. The int arguments are compared in their low 32
  // bits (the kernel ignores the rest).
  for (int family : kSocketFamilies) {
    scmp_arg_cmp fam = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffff,
                               static_cast<uint32_t>(family));
    RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ALLOW, SYS_socket, 1, &fam));
  }
  scmp_arg_cmp netlink[] = {
      SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffff, AF_NETLINK),
      SCMP_A2(SCMP_CMP_MASKED_EQ, 0xffffffff, NETLINK_ROUTE)};
  RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ALLOW, SYS_socket, 2, netlink));
  scmp_arg_cmp unix_pair = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffff, AF_UNIX);
  RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ALLOW, SYS_socketpair, 1, &unix_pair));
  for (int level : kSockoptLevels) {
    scmp_arg_cmp lv = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffff,
                              static_cast<uint32_t>(level));
    RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ALLOW, SYS_setsockopt, 1, &lv));
    RETURN_IF_ERROR(Rule(ctx.get(), SCMP_ACT_ALLOW, SYS_getsockopt, 1, &lv));
  }

  // seccomp_export_bpf writes to a descriptor (libseccomp 2.5): a memfd.
  UniqueFd mem(memfd_create("sentry-seccomp", MFD_CLOEXEC));
  if (!mem.valid()) return ErrnoStatus("seccomp: memfd_create", errno);
  if (int r = seccomp_export_bpf(ctx.get(), mem.get()); r != 0) {
    return ErrnoStatus("seccomp_export_bpf", -r);
  }
  off_t size = lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0) {
    return absl::InternalError("seccomp_export_bpf: odd program size");
  }
  Program p;
  p.insns.resize(size / sizeof(sock_filter));
  if (pread(mem.get(), p.insns.data(), size, 0) != size) {
    return ErrnoStatus("seccomp: reading the program back", errno);
  }
  // Names for the SIGSYS handler, resolved now (the resolver allocates).
  for (int nr = 0; nr < kMaxNamedSyscall; nr++) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
    SetSyscallName(nr, name);  // kept for the process's lifetime
  }
  return p;
}

absl::Status Install(const Program& p) {
  struct sigaction sa = {};
  sa.sa_sigaction = OnSigsys;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSYS, &sa, nullptr) != 0) {
    return ErrnoStatus("seccomp: the SIGSYS handler", errno);
  }
  // Required to load a filter without CAP_SYS_ADMIN; the Sentry never
  // executes anything, so it costs nothing.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return ErrnoStatus("PR_SET_NO_NEW_PRIVS", errno);
  }
  sock_fprog prog;
  prog.len = static_cast<unsigned short>(p.insns.size());
  prog.filter = const_cast<sock_filter*>(p.insns.data());
  long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                   SECCOMP_FILTER_FLAG_TSYNC, &prog);
  if (r != 0) {
    // With TSYNC, a positive result is the id of a thread that could not
    // be synchronized.
    if (r > 0) {
      return absl::InternalError(absl::StrCat(
          "seccomp: thread ", r, " could not take the Sentry's filter"));
    }
    return ErrnoStatus("seccomp: loading the Sentry's filter", errno);
  }
  return absl::OkStatus();
}

}  // namespace sandboxd::host_filter
