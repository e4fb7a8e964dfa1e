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
//                    The pid namespace is not unshared here but made by the
//                    daemon, which spawns the Sentry with clone(CLONE_NEWPID):
//                    the Sentry is then the init of a namespace of its own,
//                    still the daemon's child, and its children (the holder,
//                    the systrap template, the stubs) land there and die
//                    with it. Unsharing it here cannot work: after
//                    unshare(CLONE_NEWPID) the Sentry could make no more
//                    threads (clone(CLONE_THREAD) fails with EINVAL), and
//                    the template and stubs, which check getppid() == the
//                    Sentry's pid (platforms/systrap/template_signal_safe.cc),
//                    would see 0 across the namespace boundary and exit.
//                    `sentry serve` logs a line when it is not pid 1.
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

// own_network false: the caller's network namespace instead of a new one
// (sentry serve --network=host).
absl::Status EnterNamespaces(bool own_network = true);

// `sentry run`'s containment: the rest of the run (the Sentry, its holder,
// the systrap template and stubs) becomes a pid namespace of its own whose
// init is the Sentry, so that every host process of the sandbox dies when
// the Sentry does. A non-root caller first unshares a user namespace that
// maps its uid and gid to themselves (a pid namespace needs CAP_SYS_ADMIN);
// the Sentry then drops the capabilities it got there. The calling process
// stays outside as a supervisor: it forwards the signals sent to it (not
// those a terminal sends its whole group, which reach the Sentry too) and
// exits with the Sentry's status (or its signal); the Sentry dies with it
// (PR_SET_PDEATHSIG). Where it may, it also puts the Sentry in cgroups of
// its own (v2, and v1 pids and freezer) before the Sentry makes anything,
// and kills and removes them at the end. Returns in the Sentry only.
// Precondition: one thread.
// own_network: a network namespace of its own too, with loopback up
// (--network=none; where it cannot be made, the caller's, said on
// stderr); false: the caller's (--network=host).
absl::Status ContainInPidNamespace(bool own_network);
absl::Status PivotToEmptyRoot();
absl::Status DropCapabilities();

// Sets the hostname of the Sentry's uts namespace (through the holder,
// which kept the capability for it). Preconditions: EnterNamespaces.
absl::Status SetHostname(const std::string& name);

}  // namespace sandboxd::isolation

#endif  // SANDBOXD_SENTRY_ISOLATION_H_
