#!/usr/bin/env python3
"""Calls that a checkpoint finds half done, across a self-checkpoint.

  resume.py data      a writer thread blocked in a 1 MiB write after part
                      of it moved (a pipe; a writev whose first vector
                      moved; a stream socket with an 8 KiB send buffer)
                      and a reader blocked in recv(MSG_WAITALL) after part
                      of it arrived, while the program checkpoints itself
                      (/proc/sandbox/checkpoint); then everything is read
                      and compared. Linux ends such calls at a stop with
                      what they moved: nothing may arrive twice or be lost.
  resume.py procfs_pipe  a pipe reopened O_RDWR through /proc/self/fd
                      (its other descriptors closed), with data queued,
                      and /proc/self/maps partly read, across the
                      checkpoint.
  resume.py timeouts  threads in nanosleep, poll, select, epoll_wait and
                      FUTEX_WAIT with 3 s relative timeouts, checkpointed
                      1 s in: each ends about 2 s after the checkpoint,
                      in the saved sandbox and in a restored copy alike.
  resume.py unlinked  a file made in the overlay, a rootfs file copied up
                      by a write and one only read, all removed while
                      open, across the checkpoint: their data is read
                      back after it.
  resume.py clocks    the clocks across the checkpoint (the test restores
                      the image 2 s after the save, twice): CLOCK_MONOTONIC,
                      CLOCK_BOOTTIME and /proc/uptime go on from their values
                      at the save (the time between the save and the
                      restore does not pass on them, as gVisor and
                      Firecracker hide it), CLOCK_REALTIME follows the
                      host's; the vDSO's readings agree with the system
                      call's; an absolute CLOCK_MONOTONIC timerfd and an
                      absolute clock_nanosleep armed before the checkpoint
                      end at their monotonic deadlines, an absolute
                      CLOCK_REALTIME timerfd at its real-time one.
  resume.py cpu_timeouts  threads in clock_nanosleep on the process's CPU
                      clock and on the main thread's, 3 s relative, while
                      the main thread spins; checkpointed at 1 s of its
                      CPU time: each ends about 2 s of CPU time later.

Output: one line per check ("NAME ok", or "NAME FAIL: why"), the same on
both sides of the checkpoint; the side ("resume" or "restore") goes to
stderr.
"""
import ctypes
import os
import random
import select
import socket
import struct
import sys
import threading
import time

N = 1 << 20
# No period: a part sent twice or lost shows.
DATA = random.Random(1).randbytes(N)


def checkpoint():
    fd = os.open("/proc/sandbox/checkpoint", os.O_RDWR)
    os.write(fd, b"1")
    side = os.read(fd, 64).decode().strip()
    os.close(fd)
    print("side", side, file=sys.stderr, flush=True)
    return side


def write_all(send, data):
    """One big call, then the rest after each short count."""
    done = 0
    while done < len(data):
        n = send(data[done:])
        if n <= 0:
            break
        done += n
    return done


def read_exactly(recv, n):
    got = bytearray()
    while len(got) < n:
        b = recv(n - len(got))
        if not b:
            break
        got += b
    return bytes(got)


def warm(call, times=32):
    """Makes a call's syscall site hot: with --systrap-patch=on a site is
    patched after 16 traps (platforms/systrap/patch.h, kPatchThreshold),
    so that the blocking call that follows enters the Sentry through the
    patched path. Harmless without patching."""
    for _ in range(times):
        call()


def report(name, ok, why=""):
    print(name, "ok" if ok else "FAIL: " + why, flush=True)


def data_case():
    results = {}
    null = os.open("/dev/null", os.O_WRONLY)
    warm(lambda: os.write(null, b"x"))
    warm(lambda: os.writev(null, [b"x", b"y"]))
    e, f = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    warm(lambda: (e.send(b"x"), f.recv(1, socket.MSG_WAITALL)))
    e.close()
    f.close()
    os.close(null)

    # A pipe (64 KiB): the write blocks with 64 KiB moved.
    pr, pw = os.pipe()
    t1 = threading.Thread(target=lambda: results.__setitem__(
        "pipe", write_all(lambda b: os.write(pw, b), DATA)))
    # writev: the first vector fills a second pipe, the second one blocks.
    vr, vw = os.pipe()
    half = 64 * 1024
    def writev_all():
        n = os.writev(vw, [DATA[:half], DATA[half:2 * half]])
        n += write_all(lambda b: os.write(vw, b), DATA[n:2 * half])
        results["writev"] = n

    t2 = threading.Thread(target=writev_all)
    # A stream socket with an 8 KiB send buffer.
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    t3 = threading.Thread(target=lambda: results.__setitem__(
        "socket", write_all(a.send, DATA)))
    # recv(MSG_WAITALL) with half of what it waits for arrived.
    c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    waitall = bytearray()

    def gather():
        while len(waitall) < 2000:
            got = d.recv(2000 - len(waitall), socket.MSG_WAITALL)
            if not got:
                break
            waitall.extend(got)

    t4 = threading.Thread(target=gather)
    for t in (t1, t2, t3, t4):
        t.start()
    c.send(DATA[:1000])
    time.sleep(0.5)  # every call above has moved its part and blocked
    checkpoint()
    c.send(DATA[1000:2000])

    got = read_exactly(lambda n: os.read(pr, min(n, 65536)), N)
    t1.join()
    report("pipe write", got == DATA and results.get("pipe") == N,
           "read %d bytes, wrote %s" % (len(got), results.get("pipe")))
    got = read_exactly(lambda n: os.read(vr, min(n, 65536)), 2 * half)
    t2.join()
    os.close(vw)
    rest = os.read(vr, 1)
    report("pipe writev", got == DATA[:2 * half] and rest == b"" and
           results.get("writev") == 2 * half,
           "read %d bytes then %r, writev %s" % (len(got), rest,
                                                 results.get("writev")))
    got = read_exactly(lambda n: b.recv(min(n, 65536)), N)
    t3.join()
    a.close()
    rest = b.recv(1)
    report("socket send", got == DATA and rest == b"" and
           results.get("socket") == N,
           "read %d bytes then %r, sent %s" % (len(got), rest,
                                               results.get("socket")))
    t4.join()
    report("recv MSG_WAITALL", bytes(waitall) == DATA[:2000],
           "got %d bytes" % len(waitall))


def procfs_pipe():
    # A pipe reopened for reading and writing through /proc/self/fd.
    qr, qw = os.pipe()
    os.write(qw, b"queued before")
    rw = os.open("/proc/self/fd/%d" % qr, os.O_RDWR)
    os.close(qr)
    os.close(qw)
    # /proc/self/maps open across the checkpoint, partly read.
    maps = os.open("/proc/self/maps", os.O_RDONLY)
    head = os.read(maps, 16)
    checkpoint()
    text = head
    while True:
        more = os.read(maps, 65536)
        if not more:
            break
        text += more
    report("/proc/self/maps read across it", b"[stack]" in text,
           "no [stack] in %d bytes" % len(text))
    os.write(rw, b", written after")
    got = os.read(rw, 100)
    report("pipe reopened O_RDWR", got == b"queued before, written after",
           "read %r" % got)


def timeouts():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    SYS_nanosleep, SYS_futex = 35, 202
    FUTEX_WAIT_PRIVATE = 128
    ends = {}

    def timed(name, call):
        def run():
            call()
            ends[name] = time.monotonic()
        return threading.Thread(target=run)

    def nanosleep():
        ts = struct.pack("qq", 3, 0)
        libc.syscall(SYS_nanosleep, ctypes.c_char_p(ts), None)

    word = ctypes.c_int(0)

    def futex():
        ts = struct.pack("qq", 3, 0)
        libc.syscall(SYS_futex, ctypes.byref(word), FUTEX_WAIT_PRIVATE, 0,
                     ctypes.c_char_p(ts), None, 0)

    r, w = os.pipe()
    ep = select.epoll()
    ep.register(r, select.EPOLLIN)
    p = select.poll()
    p.register(r, select.POLLIN)
    warm(lambda: p.poll(0))
    warm(lambda: select.select([r], [], [], 0))
    warm(lambda: ep.poll(0))
    zero = struct.pack("qq", 0, 0)
    warm(lambda: libc.syscall(SYS_nanosleep, ctypes.c_char_p(zero), None))
    warm(lambda: libc.syscall(SYS_futex, ctypes.byref(word), FUTEX_WAIT_PRIVATE,
                              1, ctypes.c_char_p(zero), None, 0))
    threads = [
        timed("nanosleep", nanosleep),
        timed("poll", lambda: p.poll(3000)),
        timed("select", lambda: select.select([r], [], [], 3.0)),
        timed("epoll_wait", lambda: ep.poll(3.0)),
        timed("futex", futex),
    ]
    for t in threads:
        t.start()
    time.sleep(1.0)
    before = time.monotonic()
    side = checkpoint()
    after = time.monotonic()
    for t in threads:
        t.join()
    # In the saved sandbox the calls went on during the save; in a copy
    # they go on from its restore, with what was left: about 2 s.
    start = before if side == "resume" else after
    for name in ("nanosleep", "poll", "select", "epoll_wait", "futex"):
        left = ends[name] - start
        report(name + " timeout goes on", 1.4 <= left <= 2.6,
               "ended %.2f s after the checkpoint, not about 2 s" % left)


def cpu_timeouts():
    """Relative sleeps on CPU clocks go on with the CPU time left."""
    libc = ctypes.CDLL(None, use_errno=True)
    CLOCK_PROCESS_CPUTIME_ID = 2
    main_clock = time.pthread_getcpuclockid(threading.get_ident())
    ends = {}

    def sleeper(name, clock, now):
        def run():
            ts = struct.pack("qq", 3, 0)
            err = libc.clock_nanosleep(clock, 0, ctypes.c_char_p(ts), None)
            ends[name] = now() if err == 0 else None
        return threading.Thread(target=run)

    threads = [
        sleeper("process", CLOCK_PROCESS_CPUTIME_ID, time.process_time),
        sleeper("thread", main_clock,
                lambda: time.clock_gettime(main_clock)),
    ]
    tiny = struct.pack("qq", 0, 1)
    warm(lambda: libc.clock_nanosleep(CLOCK_PROCESS_CPUTIME_ID, 0,
                                      ctypes.c_char_p(tiny), None))
    for t in threads:
        t.start()

    def spin_until(done):
        while not done():
            for _ in range(20000):
                pass

    # This thread's CPU time drives both clocks: 1 s of it, then the
    # checkpoint, then until both sleeps end (2 s more of it).
    spin_until(lambda: time.clock_gettime(main_clock) >= 1.0)
    before = (time.process_time(), time.clock_gettime(main_clock))
    side = checkpoint()
    after = (time.process_time(), time.clock_gettime(main_clock))
    spin_until(lambda: not any(t.is_alive() for t in threads))
    start = before if side == "resume" else after
    for i, name in enumerate(("process", "thread")):
        if ends.get(name) is None:
            report(name + " CPU clock sleep goes on", False, "clock_nanosleep failed")
            continue
        left = ends[name] - start[i]
        report(name + " CPU clock sleep goes on", 1.4 <= left <= 2.6,
               "ended %.2f s of CPU time after the checkpoint, not about 2 s"
               % left)


def unlinked():
    """Overlay files removed while open keep their data across it."""
    # Made in the overlay (upper layer only).
    made = os.open("/tmp/resume_unlinked.%d" % os.getpid(),
                   os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
    os.write(made, b"made, then removed")
    os.unlink("/tmp/resume_unlinked.%d" % os.getpid())
    # A rootfs file, copied up by its open for writing, then removed.
    path = "/etc/os-release"
    with open(path, "rb") as f:
        original = f.read()
    copied = os.open(path, os.O_RDWR)
    os.lseek(copied, 0, os.SEEK_END)
    os.write(copied, b"appended")
    os.unlink(path)
    # A rootfs file only read, then removed: a whiteout hides it.
    hidden_path = "/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd"
    hidden = os.open(hidden_path, os.O_RDONLY)
    hidden_data = os.pread(hidden, 1 << 16, 0)
    os.unlink(hidden_path)
    checkpoint()
    report("a file made in the overlay, removed while open",
           os.pread(made, 100, 0) == b"made, then removed" and
           os.fstat(made).st_nlink == 0,
           "read %r" % os.pread(made, 100, 0))
    got = os.pread(copied, len(original) + 100, 0)
    report("a copied-up file removed while open",
           got == original + b"appended" and not os.path.exists(path),
           "read %d bytes" % len(got))
    got = os.pread(hidden, 1 << 16, 0)
    report("a rootfs file removed while open",
           got == hidden_data and not os.path.exists(hidden_path),
           "read %d bytes, not %d" % (len(got), len(hidden_data)))


def clocks():
    """The sandbox's clocks go on from the save; the real time is the host's."""
    libc = ctypes.CDLL(None, use_errno=True)
    SYS_clock_gettime = 228
    CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME = 0, 1, 7
    TFD_TIMER_ABSTIME = 1
    TIMER_ABSTIME = 1

    def sys_clock(clk):
        """The clock by the system call itself, not the vDSO."""
        ts = ctypes.create_string_buffer(16)
        libc.syscall(SYS_clock_gettime, clk, ts)
        sec, nsec = struct.unpack("qq", ts.raw)
        return sec + nsec / 1e9

    def uptime():
        with open("/proc/uptime") as f:
            return float(f.read().split()[0])

    def timerfd_at(clk, when):
        fd = libc.timerfd_create(clk, 0)
        sec = int(when)
        spec = struct.pack("qqqq", 0, 0, sec, int((when - sec) * 1e9))
        if fd < 0 or libc.timerfd_settime(fd, TFD_TIMER_ABSTIME,
                                          ctypes.c_char_p(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd")
        return fd

    mono = lambda: time.clock_gettime(time.CLOCK_MONOTONIC)
    real = lambda: time.clock_gettime(time.CLOCK_REALTIME)
    m0, r0, b0, u0 = mono(), real(), time.clock_gettime(time.CLOCK_BOOTTIME), uptime()
    mono_deadline, sleep_deadline, real_deadline = m0 + 1.5, m0 + 1.7, r0 + 1.5
    tfm = timerfd_at(CLOCK_MONOTONIC, mono_deadline)
    tfr = timerfd_at(CLOCK_REALTIME, real_deadline)
    woke = {}

    def sleeper():
        sec = int(sleep_deadline)
        ts = struct.pack("qq", sec, int((sleep_deadline - sec) * 1e9))
        while libc.clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME,
                                   ctypes.c_char_p(ts), None) != 0:
            pass
        woke["t"] = mono()

    th = threading.Thread(target=sleeper)
    th.start()
    time.sleep(0.2)
    side = checkpoint()
    m1, s1 = mono(), sys_clock(CLOCK_MONOTONIC)
    r1, b1, u1 = real(), time.clock_gettime(time.CLOCK_BOOTTIME), uptime()
    report("CLOCK_MONOTONIC goes on from the save", 0 <= m1 - m0 < 1.0,
           "went on by %.3f s" % (m1 - m0))
    report("CLOCK_BOOTTIME goes on from the save", 0 <= b1 - b0 < 1.0,
           "went on by %.3f s" % (b1 - b0))
    report("/proc/uptime goes on from the save", 0 <= u1 - u0 < 1.0,
           "went on by %.2f s" % (u1 - u0))
    # Within 0.1 s: one system call on a loaded machine may take that long.
    report("the vDSO's CLOCK_MONOTONIC is the system call's",
           abs(s1 - m1) < 0.1, "vDSO %.6f, syscall %.6f" % (m1, s1))
    sr, vr = sys_clock(CLOCK_REALTIME), real()
    report("the vDSO's CLOCK_REALTIME is the system call's",
           abs(vr - sr) < 0.1, "vDSO %.6f, syscall %.6f" % (vr, sr))
    # The real time passes between the save and the restore (2 s and
    # more in a restored copy); the monotonic clock does not.
    extra = (r1 - r0) - (m1 - m0)
    report("CLOCK_REALTIME follows the host",
           abs(extra) < 0.5 if side == "resume" else extra >= 1.5,
           "went on %.3f s more than CLOCK_MONOTONIC" % extra)
    # The real-time one first: in a restored copy its deadline passed
    # during the gap, so it has fired at once (the monotonic ones have not).
    os.read(tfr, 8)
    fired_real = real()
    late = fired_real - (real_deadline if side == "resume" else max(real_deadline, r1))
    report("an absolute CLOCK_REALTIME timerfd fires at its real time",
           fired_real >= real_deadline and late < 1.0,
           "fired %.3f s late" % late)
    # Within 1 s either way: the gap this checks for is 2 s and more, and
    # a save that a loaded machine slows past the deadlines makes the
    # saved run see them late by as much.
    os.read(tfm, 8)
    fired = mono()
    report("an absolute CLOCK_MONOTONIC timerfd fires at its deadline",
           abs(fired - mono_deadline) < 1.0,
           "fired %.3f s after it" % (fired - mono_deadline))
    th.join()
    report("an absolute clock_nanosleep ends at its deadline",
           abs(woke["t"] - sleep_deadline) < 1.0,
           "ended %.3f s after it" % (woke["t"] - sleep_deadline))


{"data": data_case, "procfs_pipe": procfs_pipe,
 "timeouts": timeouts, "cpu_timeouts": cpu_timeouts,
 "unlinked": unlinked, "clocks": clocks}[sys.argv[1]]()
