// The stub template's loop, in stub code. Same rules as stub.cc: no libc,
// no globals, no calls out of the section "sbx_stub", built with the stub's
// flags (SBX_STUB_COPTS).
//
// The template is a stub process without application threads: its mm holds
// only the stub region, and its seccomp filter is installed once, here. A
// new stub is a clone of it (CLONE_PARENT: a child of the Sentry), which
// inherits the filter, the signal handlers, the code and the stacks, maps
// its own shared area from the pool over the template's, and becomes a
// stub's control thread. Nothing to unmap, no filter to compile.
#include "platforms/systrap/stub/template_stub.h"
#include "platforms/systrap/stub/stub_inline.h"

#include <asm/unistd.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>

#include "platforms/systrap/layout.h"

// The control thread's loop (stub.cc), in the same section.
extern "C" void sbx_stub_control_loop();

namespace sandboxd::systrap {
namespace {

// Sleeps until a request is posted (owner == kOwnerStub). The template
// does not spin: a new process is rare next to a syscall, and a template
// spinning on a pinned run's only CPU would delay the Sentry that asks.
STUB_INLINE void WaitForRequest(ControlBlock* cb) {
  StoreSeqCst(&cb->stub_sleeping, 1);
  for (;;) {
    uint32_t v = LoadSeqCst(&cb->owner);
    if (v == kOwnerStub) break;
    // Only the Sentry can write the template's area (no application runs
    // in the template, and stubs close the pool before any does).
    if (v != kOwnerSentry) Die(kStubExitCorrupt);
    Syscall6(__NR_futex, reinterpret_cast<long>(&cb->owner), FUTEX_WAIT,
             kOwnerSentry, 0, 0, 0);
  }
  StoreSeqCst(&cb->stub_sleeping, 0);
}

// In the new stub process: exactly the calls seccomp_filter.cc allows for
// this step, then the control loop. `area` was bounded by the template.
STUB_INLINE void NewStubMain(uint64_t area, int32_t sentry_pid) {
  // Die with the Sentry; and if it died before this prctl, there is no
  // one to serve: stop here.
  if (Syscall6(__NR_prctl, 1 /* PR_SET_PDEATHSIG */, 9 /* SIGKILL */, 0, 0,
               0, 0) != 0 ||
      Syscall6(__NR_getppid, 0, 0, 0, 0, 0, 0) != sentry_pid) {
    Die(kStubExitNewStub);
  }
  // The stub-process filter, from the template's area (only the Sentry
  // writes it), copied before our own area replaces that mapping.
  const StubFilterImage* img = &StubSharedInStub()->stub_filter;
  const uint32_t len = img->len;
  if (len == 0 || len > kMaxStubFilterLen) Die(kStubExitNewStub);
  uint64_t insns[kMaxStubFilterLen];
  for (uint32_t i = 0; i < len; i++) insns[i] = img->insns[i];
  struct {
    uint16_t len;
    uint64_t filter;
  } prog = {static_cast<uint16_t>(len), reinterpret_cast<uint64_t>(insns)};
  // Our own shared area over the template's (MAP_FIXED replaces it), then
  // the pool goes: the application in this stub can reach no other area.
  long m = Syscall6(__NR_mmap, static_cast<long>(kStubShared),
                    static_cast<long>(kStubSharedSize),
                    0x1 | 0x2 /* PROT_READ|PROT_WRITE */,
                    0x01 | 0x10 /* MAP_SHARED|MAP_FIXED */, kStubPoolFd,
                    static_cast<long>(area * kStubSharedSize));
  if (m != static_cast<long>(kStubShared)) Die(kStubExitNewStub);
  if (Syscall6(__NR_close, kStubPoolFd, 0, 0, 0, 0, 0) != 0) {
    Die(kStubExitNewStub);
  }
  // Last: it kills the prctl, getppid, close and this seccomp from now on,
  // and any clone but a thread's.
  if (Syscall6(__NR_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0,
               reinterpret_cast<long>(&prog), 0, 0, 0) != 0) {
    Die(kStubExitSeccomp);
  }
  sbx_stub_control_loop();
  Die(kStubExitNewStub);
}

}  // namespace
}  // namespace sandboxd::systrap

using namespace sandboxd::systrap;

extern "C" STUB __attribute__((noreturn)) void sbx_template_main(
    const void* prog) {
  // As in sbx_stub_main: the filter first, then nothing of the Sentry
  // stays mapped. Every stub cloned from here inherits both.
  if (Syscall6(__NR_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0,
               reinterpret_cast<long>(prog), 0, 0, 0) != 0) {
    Die(kStubExitSeccomp);
  }
  Syscall6(__NR_munmap, 0, static_cast<long>(kStubBase), 0, 0, 0, 0);
  Syscall6(__NR_munmap, static_cast<long>(kStubWindowEnd),
           static_cast<long>(kStubEnd - kStubWindowEnd), 0, 0, 0, 0);

  StubShared* shared = StubSharedInStub();
  ControlBlock* cb = &shared->control;
  // Read once: the clone below copies it to the child's stack.
  const int32_t sentry_pid = shared->config.sentry_pid;
  for (;;) {
    WaitForRequest(cb);
    long r = -38;  // ENOSYS
    switch (cb->op) {
      case kOpNewStub: {
        const uint64_t area = cb->args[0];
        if (area == 0 || area >= kMaxStubAreas) {
          r = -22;  // EINVAL
          break;
        }
        r = Syscall6(__NR_clone, static_cast<long>(kNewStubCloneFlags), 0, 0,
                     0, 0, 0);
        if (r == 0) NewStubMain(area, sentry_pid);
        break;
      }
      case kOpExit:
        Die(0);
        break;
      default:
        break;
    }
    AnswerRequest(cb, r);
  }
}

// Entered from normal code with (prog, stack_top): moves to the stub stack
// and never returns.
__asm__(
    ".pushsection sbx_stub,\"ax\",@progbits\n"
    ".globl sbx_template_start\n"
    ".type sbx_template_start,@function\n"
    "sbx_template_start:\n\t"
    "mov %rsi, %rsp\n\t"
    "xor %ebp, %ebp\n\t"
    "call sbx_template_main\n\t"
    "ud2\n"
    ".size sbx_template_start, .-sbx_template_start\n"
    ".popsection\n");
