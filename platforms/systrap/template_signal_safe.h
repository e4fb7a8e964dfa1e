// The stub template process's start. Runs in a process forked from the
// Sentry: only async-signal-safe calls, no allocation, no locks.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_TEMPLATE_SIGNAL_SAFE_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_TEMPLATE_SIGNAL_SAFE_H_

#include <linux/filter.h>
#include <sys/types.h>

namespace sandboxd::systrap {

struct TemplateArgs {
  int memfile_fd;  // the sandbox's memory file
  int areas_fd;    // the pool of shared areas; area 0 is the template's
  pid_t sentry_pid;
  const sock_fprog* filter;
};

// Turns the forked process into the stub template: builds the stub region
// (code, area 0 of the pool at kStubShared, stacks), keeps exactly the
// memory file and the pool (kStubMemFileFd, kStubPoolFd), installs the
// stub's signal handlers, and enters the template's loop in stub code
// (stub/template_stub.cc), which installs the seccomp filter, unmaps the
// rest and makes a stub process per kOpNewStub request. Exits with a code
// of 120-134 naming the step that failed.
[[noreturn]] void TemplateMain(const TemplateArgs& args);

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_TEMPLATE_SIGNAL_SAFE_H_
