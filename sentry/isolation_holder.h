// The holder: a child of a warm Sentry that keeps CAP_SYS_ADMIN in the
// Sentry's user namespace, to set the hostname at Start (isolation.h), and
// is meant to become the init of its pid namespace. It is forked while the
// Sentry is single-threaded and does only async-signal-safe things
// (isolation_holder_signal_safe.cc).
#ifndef SANDBOXD_SENTRY_ISOLATION_HOLDER_H_
#define SANDBOXD_SENTRY_ISOLATION_HOLDER_H_

#include <sys/types.h>

#include <cstddef>

namespace sandboxd::isolation {

// Longest hostname (HOST_NAME_MAX).
inline constexpr size_t kMaxHostname = 64;

// Protocol on `fd` (SOCK_SEQPACKET): each packet is a hostname to set; the
// reply is an int, 0 or the errno of sethostname. Lives as long as the
// Sentry keeps its end open; exits when the Sentry dies (PR_SET_PDEATHSIG).
[[noreturn]] void RunHolder(int fd);

}  // namespace sandboxd::isolation

#endif  // SANDBOXD_SENTRY_ISOLATION_HOLDER_H_
