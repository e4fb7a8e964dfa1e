#include "platforms/systrap/template_signal_safe.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <initializer_list>

#include "platforms/systrap/layout.h"
#include "platforms/systrap/stub/stub.h"
#include "platforms/systrap/stub/template_stub.h"

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

}  // namespace

void TemplateMain(const TemplateArgs& args) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Fail(120);
  if (getppid() != args.sentry_pid) Fail(121);

  // Code: a private copy of the stub section (the region is reserved
  // PROT_NONE in the Sentry, inherited here, so MAP_FIXED clobbers nothing).
  // Every stub shares these pages with the template (copy-on-write, never
  // written).
  size_t code_len = static_cast<size_t>(__stop_sbx_stub - __start_sbx_stub);
  if (code_len > kStubCodeSize) Fail(122);
  void* code = mmap(reinterpret_cast<void*>(kStubBase), kStubCodeSize,
                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                    -1, 0);
  if (code == MAP_FAILED) Fail(123);
  memcpy(code, __start_sbx_stub, code_len);
  if (mprotect(code, kStubCodeSize, PROT_READ | PROT_EXEC) != 0) Fail(124);
  if (mmap(reinterpret_cast<void*>(kStubShared), kStubSharedSize,
           PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, args.areas_fd,
           0) == MAP_FAILED) {
    Fail(125);
  }
  if (mmap(reinterpret_cast<void*>(kStubStacks), kStubStacksSize,
           PROT_READ | PROT_WRITE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
           0) == MAP_FAILED) {
    Fail(126);
  }

  // File descriptors: exactly the memory file and the pool of shared
  // areas (a stub closes the pool once it has mapped its own area). Move
  // both out of the way first so that neither dup2 closes the other.
  int memfile = fcntl(args.memfile_fd, F_DUPFD, 64);
  int areas = fcntl(args.areas_fd, F_DUPFD, 64);
  if (memfile < 0 || areas < 0) Fail(127);
  if (dup2(memfile, kStubMemFileFd) < 0 || dup2(areas, kStubPoolFd) < 0) {
    Fail(128);
  }
  if (syscall(SYS_close_range, kStubPoolFd + 1, ~0u, 0) != 0) Fail(129);
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

  // Into the copy of the stub code at kStubBase (not the Sentry's: it is
  // about to be unmapped), on the control thread's stack (slot 0's).
  using StartFn = void (*)(const void*, uint64_t);
  auto start = reinterpret_cast<StartFn>(StubAddress(
      reinterpret_cast<const void*>(&sbx_template_start), kStubBase));
  start(args.filter, kStubStacks + kStackSize - 64);
  Fail(133);
}

}  // namespace sandboxd::systrap
