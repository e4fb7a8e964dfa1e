#!/usr/bin/env python3
"""A function that snapshots itself just after its initialisation.

It initialises (a table it prints a digest of), asks for a checkpoint of
its own sandbox by writing "1" to /proc/sandbox/checkpoint, and reads
which side of it it is on: "resume" in the sandbox that was saved,
"restore" in every copy restored from the image. Then it prints what a
copy must not share with the others: fresh random bytes from getrandom(2)
(os.urandom) and /dev/urandom.

  self.py          the above; exit 0
  self.py twice    then a second self-checkpoint on a new description
Output lines: "init DIGEST", "side SIDE", "restored 0|1", "getrandom HEX",
"urandom HEX"; a failed write prints "write: ERRNO-NAME" and exits 3.
"""
import errno
import hashlib
import os
import sys


def checkpoint():
    fd = os.open("/proc/sandbox/checkpoint", os.O_RDWR)
    try:
        os.write(fd, b"1")
    except OSError as e:
        print("write:", errno.errorcode.get(e.errno, e.errno), flush=True)
        sys.exit(3)
    side = os.read(fd, 64).decode().strip()
    os.close(fd)
    return side


def main():
    table = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(20000)]
    print("init", hashlib.sha256("".join(table).encode()).hexdigest()[:16],
          flush=True)
    print("side", checkpoint(), flush=True)
    with open("/proc/sandbox/restored") as f:
        print("restored", f.read().strip(), flush=True)
    print("getrandom", os.urandom(16).hex(), flush=True)
    with open("/dev/urandom", "rb") as f:
        print("urandom", f.read(16).hex(), flush=True)
    if len(sys.argv) > 1 and sys.argv[1] == "twice":
        print("side2", checkpoint(), flush=True)


main()
