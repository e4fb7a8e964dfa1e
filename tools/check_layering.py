#!/usr/bin/env python3
"""Fails when an #include points up the layering of the tree.

Usage: tools/check_layering.py [--verbose]

Every C/C++ file git knows of (.cc .c .h .S, tracked or untracked and not
ignored) belongs to the unit of the longest path prefix of UNITS that
contains it; files outside every unit (third_party/, tools/) are not
checked. Each `#include "path"` whose path falls in a unit is an edge from
the including file's unit to that one (generated headers such as
sentry/state/state.pb.h count by their path). An edge is allowed when both
ends are the same unit, or when the included unit's rank is lower: includes
only point down. Units of the same rank are siblings and may not include
each other. Tests (*_test.cc) and test helpers (testing/ folders) belong to
the unit of their folder and follow the same rule, so a test may include
the helpers of its own unit and of any unit below it.

The ranks are written down in sentry/README.md ("Layering"); change both
together. On success the script prints one summary line; on failure it
lists each upward include as file:line and exits 1.
"""

import os
import re
import sys

# The tree's files as check_build_sync.py lists them (tracked, or untracked
# and not ignored).
from check_build_sync import git_files, repo_root

# (rank, unit path prefix). Lower ranks are below higher ones.
UNITS = [
    # Top level.
    (0, "base"),
    (1, "proto"),
    (2, "platforms"),           # platform.h: the interface
    (3, "platforms/systrap"),   # back-ends, siblings
    (3, "platforms/kvm"),
    (4, "platforms/registry_builtin.cc"),  # the table of back-ends, above them
    # The Sentry, bottom to top.
    (10, "sentry/waiter"),      # WaitQueue, Blocker, timer thread, host poller
    (11, "sentry/mm"),
    (12, "sentry/vdso"),
    (12, "sentry/loader"),
    (13, "sentry/fs"),          # files, VFS, filesystems
    (14, "sentry/fs/tty"),      # terminals (JobControl is implemented above)
    (15, "sentry/kernel"),
    (16, "sentry/proc"),
    (16, "sentry/socket"),
    (17, "sentry/state"),
    (17, "sentry/syscalls"),
    (18, "sentry"),             # boot, serve, main, the Sentry's own filter
    # Above the Sentry.
    (20, "daemon"),
    (21, "client"),
    (21, "deploy"),
    (30, "test"),
    (30, "bench"),
]

EXTS = (".cc", ".c", ".h", ".S")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def unit_of(path):
    """(rank, prefix) of the longest unit prefix containing `path`, or None."""
    best = None
    for rank, prefix in UNITS:
        if path == prefix or path.startswith(prefix + "/"):
            if best is None or len(prefix) > len(best[1]):
                best = (rank, prefix)
    return best


def main(argv):
    verbose = "--verbose" in argv
    root = repo_root()
    files = [p for p in git_files(root) if p.endswith(EXTS)]
    errors = []
    edges = set()
    checked = 0
    for path in files:
        src = unit_of(path)
        if src is None:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = os.path.normpath(m.group(1))
            dst = unit_of(inc)
            if dst is None:
                # A header beside the file ("common.h") or outside every unit.
                local = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
                dst = unit_of(local) if os.path.isfile(os.path.join(root, local)) else None
                if dst is None:
                    continue
            checked += 1
            if dst[1] == src[1]:
                continue
            edges.add((src[1], dst[1]))
            if dst[0] >= src[0]:
                kind = "a sibling" if dst[0] == src[0] else "a higher layer"
                errors.append("%s:%d: %s (rank %d) includes %s of %s (%s, rank %d)" %
                              (path, n, src[1], src[0], m.group(1), kind, dst[1], dst[0]))
    if verbose:
        for a, b in sorted(edges):
            print("check_layering: %s -> %s" % (a, b))
    for e in errors:
        print("check_layering: upward include: " + e)
    if errors:
        print("check_layering: FAILED: %d upward includes (layers: tools/check_layering.py UNITS, "
              "sentry/README.md)" % len(errors))
        return 1
    print("check_layering: OK: %d includes between %d units checked, %d unit edges, none upward" %
          (checked, len(UNITS), len(edges)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
