// Isolation of a warm Sentry (`sentry serve`) from the host, done while it
// prewarms, before it says Hello (DESIGN.md, "Processes"):
//
//   EnterNamespaces  new user, mount, net, ipc and uts namespaces. The
//                    user namespace maps the Sentry's uid and gid to 0 (root
//                    to root when the daemon runs as root: the Sentry stays
//                    root over the host files that root owns and nothing
//                    else; any other daemon uid gets the same one-id map).
//                    A small child, the holder, keeps the capability to set
//                    the hostname at Start and dies with the Sentry. The
//                    network namespace has loopback only, up.
//                    Not yet a pid namespace: the systrap template and its
//                    stubs check getppid() == the Sentry's pid
//                    (platforms/systrap/template_signal_safe.cc), and across
//                    a pid-namespace boundary getppid() is 0, so they would
//                    exit at once. Once systrap accepts that (and the
//                    Sentry unshares CLONE_NEWPID while still root in the
//                    daemon's user namespace, forks the holder as the
//                    namespace's init and the template, then setns()es back
//                    so that it can make threads again: after
//                    unshare(CLONE_NEWPID) clone(CLONE_THREAD) fails with
//                    EINVAL), the stubs will land there.
//   PivotToEmptyRoot the root becomes an empty read-only tmpfs: from then on
//                    the host's files are reachable only through the rootfs
//                    descriptor that Start hands over.
//   DropCapabilities the Sentry keeps no capability (effective, permitted,
//                    inheritable, ambient, bounding) and sets no_new_privs.
//                    Called while the Sentry is still single-threaded, so
//                    every thread it makes later has none either.
//
// Preconditions of all three: the calling process has one thread (unshare
// of a user namespace requires it; capabilities are per thread).
#ifndef SANDBOXD_SENTRY_ISOLATION_H_
#define SANDBOXD_SENTRY_ISOLATION_H_

#include <string>

#include "absl/status/status.h"

namespace sandboxd::isolation {

absl::Status EnterNamespaces();
absl::Status PivotToEmptyRoot();
absl::Status DropCapabilities();

// Sets the hostname of the Sentry's uts namespace (through the holder,
// which kept the capability for it). Preconditions: EnterNamespaces.
absl::Status SetHostname(const std::string& name);

}  // namespace sandboxd::isolation

#endif  // SANDBOXD_SENTRY_ISOLATION_H_
