#include "platforms/systrap/template_signal_safe.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/rseq.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <initializer_list>

#include "platforms/systrap/layout.h"
#include "platforms/systrap/stub/stub.h"

namespace sandboxd::systrap {
namespace {

constexpr unsigned long kSaRestorer = 0x04000000;  // SA_RESTORER (kernel ABI)

// The kernel's struct sigaction (glibc's sigaction would install its own
// restorer, which lives in libc and is unmapped in the stub).
struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

[[noreturn]] void Fail(int code) { _exit(code); }

// In the new stub process: build the stub region, then jump into it.
[[noreturn]] void StubChildMain(const TemplateArgs& args, int shared_fd) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Fail(120);
  if (getppid() != args.sentry_pid) Fail(121);

  // Code: a private copy of the stub section (the region is reserved
  // PROT_NONE in the Sentry, inherited here, so MAP_FIXED clobbers nothing).
  size_t code_len = static_cast<size_t>(__stop_sbx_stub - __start_sbx_stub);
  if (code_len > kStubCodeSize) Fail(122);
  void* code = mmap(reinterpret_cast<void*>(kStubBase), kStubCodeSize,
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                    -1, 0);
  if (code == MAP_FAILED) Fail(123);
  memcpy(code, __start_sbx_stub, code_len);
  if (mprotect(code, kStubCodeSize, PROT_READ | PROT_EXEC) != 0) Fail(124);
  if (mmap(reinterpret_cast<void*>(kStubShared), kStubSharedSize,
           PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, shared_fd,
           0) == MAP_FAILED) {
    Fail(125);
  }
  if (mmap(reinterpret_cast<void*>(kStubStacks), kStubStacksSize,
           PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
           0) == MAP_FAILED) {
    Fail(126);
  }

  // File descriptors: exactly the memory file and the shared area. Move
  // both out of the way first so that neither dup2 closes the other.
  int memfile = fcntl(args.memfile_fd, F_DUPFD, 64);
  int shared = fcntl(shared_fd, F_DUPFD, 64);
  if (memfile < 0 || shared < 0) Fail(127);
  if (dup2(memfile, kStubMemFileFd) < 0 || dup2(shared, kStubSharedFd) < 0) {
    Fail(128);
  }
  if (syscall(SYS_close_range, kStubSharedFd + 1, ~0u, 0) != 0) Fail(129);
  for (int fd = 0; fd < kStubMemFileFd; fd++) close(fd);

  // Every signal the application can cause goes to the stub's handler, on
  // the thread's slot stack, with all signals blocked while it runs.
  KernelSigaction sa;
  sa.handler = reinterpret_cast<void*>(
      StubAddress(reinterpret_cast<const void*>(&sbx_stub_signal_handler), kStubBase));
  sa.restorer = reinterpret_cast<void*>(
      StubAddress(reinterpret_cast<const void*>(&sbx_stub_restorer), kStubBase));
  sa.flags = SA_SIGINFO | SA_ONSTACK | kSaRestorer;
  sa.mask = ~0ull;
  for (int sig : {SIGSYS, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
                  kInterruptSignal}) {
    if (syscall(SYS_rt_sigaction, sig, &sa, nullptr, 8) != 0) Fail(130);
  }
  // Signals from outside (a terminal's ^C reaches the whole foreground
  // process group, stubs included) are the Sentry's to forward to the
  // sandbox; a stub ignores them so that they cannot kill it.
  KernelSigaction ign = {};
  ign.handler = reinterpret_cast<void*>(SIG_IGN);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1,
                  SIGALRM, SIGCHLD, SIGTSTP, SIGTTIN, SIGTTOU, SIGWINCH,
                  SIGURG, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ}) {
    syscall(SYS_rt_sigaction, sig, &ign, nullptr, 8);
  }
  uint64_t none = 0;
  if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, 8) != 0) {
    Fail(131);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail(132);
  // Also gives the dumpable bit up: nothing of the stub is worth a core.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

  // glibc registered an rseq area for this thread, in TLS that the stub is
  // about to unmap; the kernel would then fail to update it on the next
  // preemption and kill the thread with SIGSEGV. Unregister it.
  if (__rseq_size > 0) {
    void* area = static_cast<char*>(__builtin_thread_pointer()) + __rseq_offset;
    constexpr uint32_t kRseqSig = 0x53053053;
    if (syscall(SYS_rseq, area, 32, 1 /* RSEQ_FLAG_UNREGISTER */, kRseqSig) != 0 &&
        syscall(SYS_rseq, area, __rseq_size, 1, kRseqSig) != 0) {
      Fail(134);
    }
  }

  using StartFn = void (*)(const void*, uint64_t);
  auto start = reinterpret_cast<StartFn>(
      StubAddress(reinterpret_cast<const void*>(&sbx_stub_start), kStubBase));
  start(args.filter, kStubStacks + kStackSize - 64);
  Fail(133);
}

}  // namespace

void TemplateMain(const TemplateArgs& args) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != args.sentry_pid) _exit(0);
  for (;;) {
    char op;
    struct iovec iov = {&op, 1};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(args.sock, &msg, MSG_CMSG_CLOEXEC);
    if (n == 0) _exit(0);
    if (n < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    int shared_fd = -1;
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (c != nullptr && c->cmsg_level == SOL_SOCKET &&
        c->cmsg_type == SCM_RIGHTS) {
      memcpy(&shared_fd, CMSG_DATA(c), sizeof(int));
    }
    int32_t reply;
    if (shared_fd < 0) {
      reply = -EINVAL;
    } else {
      // CLONE_PARENT: the stub is the Sentry's child, so the Sentry reaps it
      // and learns when it dies.
      long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
      if (pid == 0) StubChildMain(args, shared_fd);
      reply = pid > 0 ? static_cast<int32_t>(pid) : -errno;
      close(shared_fd);
    }
    if (send(args.sock, &reply, sizeof(reply), MSG_NOSIGNAL) < 0) _exit(1);
  }
}

}  // namespace sandboxd::systrap
