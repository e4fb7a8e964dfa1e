#!/usr/bin/env python3
"""Fails when a type the state code saves field by field gains, loses or
renames a data member without saved_fields.txt being updated.

Usage: sentry/state/check_saved_fields.py [--update] [REPO_ROOT]

saved_fields.txt lists, per saved type, the state file that saves and
loads it and its data members in declaration order. This script finds each
type in the headers (wherever it is defined: by namespace and class name),
reads its members and compares. It complements
SBX_SAVED_SIZE (saved_size.h), which fails the build when a type's size
changes but cannot see a member added into padding or a rename; this check
sees those. README.md, "Completeness".

--update rewrites saved_fields.txt from the headers (after the state code
has been updated for the change).

The member reader knows this tree's style (clang-format, one declaration
per statement): it walks the class body at its own brace depth, skips
nested bodies, and takes every statement that is not a function, a type,
a using, a friend or static. A type it cannot find is an error, not a pass.
"""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "saved_fields.txt")


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    src = re.sub(r"//[^\n]*", " ", src)
    # String and char literals cannot hold braces or semicolons for us.
    src = re.sub(r'"(\\.|[^"\\])*"', '""', src)
    src = re.sub(r"'(\\.|[^'\\])*'", "''", src)
    return src


def find_body(src, name, start=0, end=None):
    """The [open, close) span of the body of class/struct `name` in src."""
    end = len(src) if end is None else end
    pat = re.compile(r"\b(?:class|struct)\s+(?:ABSL_\w+(?:\([^)]*\))?\s+)?"
                     + re.escape(name) + r"\b(?:\s+final)?\s*(?::[^;{]*)?\{")
    for m in pat.finditer(src, start, end):
        open_ = m.end()
        depth = 1
        i = open_
        while i < end and depth:
            if src[i] == "{":
                depth += 1
            elif src[i] == "}":
                depth -= 1
            i += 1
        return open_, i - 1
    return None


def statements(body):
    """Top-level statements of a class body, nested braces dropped."""
    out, cur, depth, paren = [], [], 0, 0
    for ch in body:
        if ch == "{":
            if depth == 0 and paren == 0:
                cur.append(" {} ")
            depth += 1
            continue
        if ch == "}":
            depth -= 1
            if depth == 0 and paren == 0:
                # A function body or nested type ends its statement.
                text = "".join(cur)
                if "(" in text or re.search(r"\b(class|struct|enum|union|namespace)\b", text):
                    out.append(text + " {}")
                    cur = []
            continue
        if depth:
            continue
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren -= 1
        if ch == ";" and paren == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    return out


def strip_angles(s):
    prev = None
    while prev != s:
        prev = s
        s = re.sub(r"<[^<>]*>", "", s)
    return s


def split_top(s, sep=","):
    parts, cur, depth = [], [], 0
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def members(body):
    names = []
    for st in statements(body):
        st = re.sub(r"\b(public|private|protected)\s*:", " ", st).strip()
        if re.match(r"(using|friend|static|typedef|template|enum|class|struct|union)\b", st):
            continue
        if st.startswith("~") or "operator" in st:
            continue
        st = re.sub(r"\bABSL_\w+\s*\((?:[^()]|\([^()]*\))*\)", " ", st)
        st = strip_angles(st)
        first = st.split("=", 1)[0].split("{}", 1)[0]
        if "(" in first:
            continue  # a function, declared or defined
        st = st.replace("{}", " ")
        for decl in split_top(st):
            decl = decl.split("=", 1)[0]
            decl = re.sub(r"\[[^\]]*\]", " ", decl)  # arrays
            if re.search(r"[^:]:[^:]", decl):
                decl = re.split(r"(?<!:):(?!:)", decl)[0]  # bit-fields
            m = re.search(r"([A-Za-z_]\w*)\s*$", decl)
            if m and m.group(1) not in ("default", "delete", "override", "const"):
                names.append(m.group(1))
    return names


def headers(root):
    out = []
    for top in ("sentry", "platforms", "base"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            if os.path.relpath(dirpath, root).startswith(os.path.join("sentry", "state")):
                continue
            out += [os.path.join(dirpath, f) for f in files if f.endswith(".h")]
    return sorted(out)


def read_members(root, qualified, cache={}):
    """(header, members) of `qualified` (sandboxd's namespaces, then classes),
    looked up in every header, so that a type moving to another header is
    found there; None when no header or more than one defines it."""
    parts = qualified.split("::")
    ns = [p for p in parts if p[:1].islower()]
    classes = parts[len(ns):]
    ns_decl = re.compile(r"namespace\s+sandboxd::" + "::".join(ns) + r"\s*\{")
    found = []
    for h in headers(root):
        if h not in cache:
            cache[h] = strip_comments(open(h).read())
        src = cache[h]
        if not ns_decl.search(src):
            continue
        span = (0, len(src))
        for c in classes:
            span = find_body(src, c, span[0], span[1])
            if span is None:
                break
        if span is not None:
            found.append((os.path.relpath(h, root), members(src[span[0]:span[1]])))
    return found[0] if len(found) == 1 else None


def load_manifest():
    entries = []
    for line in open(MANIFEST):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"(\S+) (\S+):(.*)$", line)
        if m is None:
            raise SystemExit(f"check_saved_fields: bad line in saved_fields.txt: {line}")
        typ, state_file, fields = m.groups()
        entries.append((typ, state_file, fields.split()))
    return entries


def main(argv):
    update = "--update" in argv
    args = [a for a in argv[1:] if a != "--update"]
    root = args[0] if args else os.path.dirname(os.path.dirname(HERE))
    entries = load_manifest()
    failures = []
    out_lines = [l for l in open(MANIFEST) if l.startswith("#")]
    for typ, state_file, fields in entries:
        found = read_members(root, typ)
        if found is None:
            failures.append(f"{typ}: not defined in exactly one header under "
                            f"sentry/, platforms/, base/")
            got = fields
            header = "?"
        else:
            header, got = found
        if got != fields:
            added = [f for f in got if f not in fields]
            gone = [f for f in fields if f not in got]
            what = []
            if added:
                what.append("new " + " ".join(added))
            if gone:
                what.append("gone " + " ".join(gone))
            if not added and not gone:
                what.append("reordered")
            failures.append(
                f"{typ} ({header}) changed: {'; '.join(what)}. Save and load "
                f"it in sentry/state/{state_file} (or say there why it is not "
                f"state), update SBX_SAVED_SIZE if its size changed, then run "
                f"sentry/state/check_saved_fields.py --update")
        out_lines.append(f"{typ} {state_file}: {' '.join(got)}\n")
    if update:
        open(MANIFEST, "w").write("".join(out_lines))
        print(f"check_saved_fields: wrote {len(entries)} types")
        bad = [f for f in failures if "not defined" in f]
        for f in bad:
            print("check_saved_fields: " + f)
        return 1 if bad else 0
    for f in failures:
        print("check_saved_fields: " + f)
    if failures:
        return 1
    print(f"check_saved_fields: OK: {len(entries)} types as in saved_fields.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
