# An inotify watch that must survive the checkpoint: files are made in a
# watched directory one at a time, and each event is read back and
# printed (after a restore the watch is the loaded one).
import ctypes
import os
import select
import struct
import sys
import tempfile
import time

libc = ctypes.CDLL(None, use_errno=True)
IN_CREATE, IN_DELETE, IN_CLOSE_WRITE = 0x100, 0x200, 0x8
d = tempfile.mkdtemp(prefix="sbx-ckpt-inotify.")
fd = libc.inotify_init1(os.O_CLOEXEC)
if fd < 0:
    sys.exit("inotify_init1: errno %d" % ctypes.get_errno())
wd = libc.inotify_add_watch(fd, d.encode(), IN_CREATE | IN_DELETE | IN_CLOSE_WRITE)
print("watch", wd, flush=True)
names = {IN_CREATE: "create", IN_DELETE: "delete", IN_CLOSE_WRITE: "close_write"}
for i in range(40):
    p = os.path.join(d, "f%02d" % i)
    with open(p, "w") as f:
        f.write("x")
    if i % 2:
        os.unlink(p)
    got = []
    while len(got) < (3 if i % 2 else 2):
        r, _, _ = select.select([fd], [], [], 10)
        if not r:
            print("no event for", i, flush=True)
            break
        buf = os.read(fd, 4096)
        off = 0
        while off < len(buf):
            w, mask, cookie, n = struct.unpack_from("iIII", buf, off)
            name = buf[off + 16:off + 16 + n].rstrip(b"\0").decode()
            got.append("%s %s" % (names.get(mask, hex(mask)), name))
            off += 16 + n
    print(i, "; ".join(got), flush=True)
    time.sleep(0.02)
for n in os.listdir(d):
    os.unlink(os.path.join(d, n))
os.rmdir(d)
print("done", flush=True)
