// The stub template process and the first steps of every stub process.
// Runs in processes forked from the Sentry while it had one thread: only
// async-signal-safe calls, no allocation, no locks.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_TEMPLATE_SIGNAL_SAFE_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_TEMPLATE_SIGNAL_SAFE_H_

#include <linux/filter.h>
#include <sys/types.h>

namespace sandboxd::systrap {

struct TemplateArgs {
  int sock;        // SOCK_SEQPACKET to the Sentry
  int memfile_fd;  // the sandbox's memory file
  pid_t sentry_pid;
  const sock_fprog* filter;
};

// The template's loop: for each request (one byte, with a StubShared memfd
// attached), clone a stub process and answer with its pid (int32, or
// -errno). Returns when the Sentry closes the socket.
[[noreturn]] void TemplateMain(const TemplateArgs& args);

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_TEMPLATE_SIGNAL_SAFE_H_
