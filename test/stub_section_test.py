#!/usr/bin/env python3
"""The systrap stub references nothing outside its own section.

The stub's code is the section "sbx_stub" of the Sentry binary, copied byte
for byte to kStubBase in every stub process, where nothing of the Sentry is
mapped and the application's memory lies below. An instruction of that
section that branches outside it, or reads or writes memory through a
RIP-relative address outside it (a GOT entry, a global of the Sentry), would
run or read whatever the application put at that address in the stub
process. This disassembles the section of each binary given and fails on
any such instruction.

    stub_section_test.py BINARY...

Exit 0 when every binary is clean, 1 with the offending instructions, 77
(skipped) when objdump is missing.
"""
import re
import shutil
import subprocess
import sys

BRANCH = re.compile(r"\s(call|jmp|j[a-z]{1,3}|loop[a-z]*)\s+([0-9a-f]+)\s+<")
RIP_TARGET = re.compile(r"\(%rip\).*#\s*([0-9a-f]+)")


def section_bounds(binary):
    out = subprocess.run(["objdump", "-h", binary], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[1] == "sbx_stub":
            size, vma = int(f[2], 16), int(f[3], 16)
            return vma, vma + size
    return None


def offending(binary):
    bounds = section_bounds(binary)
    if bounds is None:
        return ["no section sbx_stub"]
    start, end = bounds
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j",
                          "sbx_stub", binary], check=True,
                         capture_output=True, text=True).stdout
    bad, insns = [], 0
    for line in dis.splitlines():
        if not re.match(r"\s+[0-9a-f]+:\t", line):
            continue
        insns += 1
        for pattern in (BRANCH, RIP_TARGET):
            m = pattern.search(line)
            if m:
                target = int(m.group(m.lastindex), 16)
                if not start <= target < end:
                    bad.append(line.strip())
    if insns == 0:
        bad.append("no instructions disassembled in sbx_stub")
    return bad


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    if shutil.which("objdump") is None:
        print("skipped: no objdump")
        return 77
    failed = 0
    for binary in argv[1:]:
        bad = offending(binary)
        if bad:
            failed += 1
            print(f"not ok - {binary}: {len(bad)} instruction(s) of sbx_stub "
                  "reach outside the section:")
            for line in bad[:20]:
                print("    " + line)
        else:
            print(f"ok - {binary}: sbx_stub references only itself")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
