// The stub template's own loop: freestanding code in the section "sbx_stub"
// (like stub.cc), run by the template process once it has built the stub
// region at kStubBase. Every stub process is a clone of it.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_STUB_TEMPLATE_STUB_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_STUB_TEMPLATE_STUB_H_

#include <stdint.h>

extern "C" {
// Switches to `stack_top` and runs the template: installs the seccomp
// filter `prog` (a struct sock_fprog*, inherited by every stub it makes),
// unmaps everything outside the stub region, then serves kOpNewStub
// requests on its ControlBlock forever. The stub region must be built:
// code, the template's shared area (area 0 of the pool at kStubPoolFd)
// at kStubShared, stacks, signal handlers.
void sbx_template_start(const void* prog, uint64_t stack_top);
}

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_STUB_TEMPLATE_STUB_H_
