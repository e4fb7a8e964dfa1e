#!/usr/bin/env python3
"""Fails when the CMake lane and the Bazel lane disagree about source files.

Usage: tools/check_build_sync.py [--strict] [--verbose]

Source files are the files git knows of (tracked, or untracked and not
ignored: `git ls-files --cached --others --exclude-standard`) with extension
.cc .c .h .S .proto under base/ proto/ platforms/ sentry/ daemon/ client/
test/ bench/.

A lane's files are its CMakeLists.txt (CMake lane) or BUILD.bazel (Bazel
lane) files, wherever they are in the repo. A source file is *named* in a lane
when one of these holds:

  1. Its path relative to the directory of one of the lane's files, in that
     directory or any directory above it, appears in that file as a whole
     word (delimited by anything other than letters, digits, and _ . / - +).
     Comments (# to end of line) are ignored. In CMake files the prefixes
     ${CMAKE_CURRENT_SOURCE_DIR}/ and ${CMAKE_CURRENT_LIST_DIR}/ are ignored,
     and ${PROJECT_SOURCE_DIR}/<path from repo root> also counts; in BUILD.bazel
     files an absolute label //pkg:name counts for pkg/name, and :name counts
     like name.
  2. Headers (.h) only: a compiled source (.cc .c .S) in the same directory is
     named in that lane, or the lane file in the same directory globs
     (`glob(` in BUILD.bazel, `file(GLOB` in CMakeLists.txt).

The check fails (exit 1) and lists every file named in exactly one lane.
Files named in neither lane are listed as warnings (failure with --strict).
On success it prints one summary line.
"""

import os
import re
import subprocess
import sys

DIRS = ("base", "proto", "platforms", "sentry", "daemon", "client", "test", "bench")
EXTS = (".cc", ".c", ".h", ".S", ".proto")
COMPILED = (".cc", ".c", ".S")
LANES = {"CMake": "CMakeLists.txt", "Bazel": "BUILD.bazel"}
GLOB_MARK = {"CMake": re.compile(r"file\s*\(\s*GLOB", re.I), "Bazel": re.compile(r"\bglob\s*\(")}
WORD = r"A-Za-z0-9_./+\-"


def repo_root():
    out = subprocess.run(["git", "rev-parse", "--show-toplevel"],
                         cwd=os.path.dirname(os.path.abspath(__file__)),
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def git_files(root):
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, check=True, capture_output=True)
    files = set()
    for p in out.stdout.decode().split("\0"):
        if p and os.path.isfile(os.path.join(root, p)):
            files.add(p)
    return sorted(files)


def strip_comments(text):
    return "\n".join(re.sub(r"(^|\s)#.*$", r"\1", line) for line in text.splitlines())


def load_lane(root, files, lane):
    """Returns {dir: normalized text} for every lane file (dir "" = repo root)."""
    result = {}
    for p in files:
        if os.path.basename(p) != LANES[lane]:
            continue
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
            text = strip_comments(f.read())
        d = os.path.dirname(p)
        if lane == "CMake":
            text = re.sub(r"\$\{CMAKE_CURRENT_(SOURCE|LIST)_DIR\}/", " ", text)
            # ${PROJECT_SOURCE_DIR}/x/y.cc -> //x/y.cc (a root-relative name)
            text = re.sub(r"\$\{(PROJECT|CMAKE)_SOURCE_DIR\}/", " //", text)
        else:
            # //pkg:name -> //pkg/name (root-relative); :name -> name
            text = re.sub(r"//([A-Za-z0-9_./+\-]*):", lambda m: "//" + (m.group(1) + "/" if m.group(1) else ""), text)
            text = re.sub(r"(^|[^A-Za-z0-9_./+\-]):", r"\1 ", text)
        result[d] = text
    return result


def mentions(text, name):
    return re.search(r"(^|[^%s])%s($|[^%s])" % (WORD, re.escape(name), WORD), text) is not None


def ancestors(d):
    while True:
        yield d
        if not d:
            return
        d = os.path.dirname(d)


def named_explicitly(path, lane_files):
    d = os.path.dirname(path)
    for a in ancestors(d):
        text = lane_files.get(a)
        if text is None:
            continue
        rel = os.path.relpath(path, a) if a else path
        if mentions(text, rel):
            return True
    # Root-relative names (//x/y.cc) may appear in any lane file.
    root_name = "//" + path
    return any(root_name in t for t in lane_files.values())


def main(argv):
    strict = "--strict" in argv
    verbose = "--verbose" in argv
    root = repo_root()
    files = git_files(root)
    sources = [p for p in files
               if p.endswith(EXTS) and p.split("/", 1)[0] in DIRS and "/" in p]

    named = {}
    for lane in LANES:
        lane_files = load_lane(root, files, lane)
        explicit = {p for p in sources if named_explicitly(p, lane_files)}
        compiled_dirs = {os.path.dirname(p) for p in explicit if p.endswith(COMPILED)}
        globbing_dirs = {d for d, t in lane_files.items() if GLOB_MARK[lane].search(t)}
        named[lane] = explicit | {
            p for p in sources if p.endswith(".h") and
            (os.path.dirname(p) in compiled_dirs or os.path.dirname(p) in globbing_dirs)}

    cmake_only = sorted(named["CMake"] - named["Bazel"])
    bazel_only = sorted(named["Bazel"] - named["CMake"])
    neither = sorted(set(sources) - named["CMake"] - named["Bazel"])
    both = len(named["CMake"] & named["Bazel"])

    for p in cmake_only:
        print("check_build_sync: named in CMakeLists.txt but not in BUILD.bazel: %s" % p)
    for p in bazel_only:
        print("check_build_sync: named in BUILD.bazel but not in CMakeLists.txt: %s" % p)
    for p in neither:
        print("check_build_sync: %s: named in neither lane: %s" %
              ("error" if strict else "warning", p))
    if verbose:
        for p in sorted(named["CMake"] & named["Bazel"]):
            print("check_build_sync: both lanes: %s" % p)

    if cmake_only or bazel_only or (strict and neither):
        print("check_build_sync: FAILED: %d CMake-only, %d Bazel-only, %d in neither lane "
              "(rules: tools/check_build_sync.py docstring; patterns: tools/bazel/README.md)" %
              (len(cmake_only), len(bazel_only), len(neither)))
        return 1
    print("check_build_sync: OK: %d source files, %d in both lanes, %d in neither" %
          (len(sources), both, len(neither)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
