#!/usr/bin/env python3
"""Drives an OCI runtime binary as containerd's runc shim does.

  shim.py RUNTIME ROOT BUNDLE ID [--kill SIG --after SECONDS] [--stdin TEXT
          [--when MARKER]] [--console]

Becomes a child subreaper (as the shim is), runs `RUNTIME --root ROOT --log
LOG --log-format json create --bundle BUNDLE --pid-file F ID` with its
stdio on pipes, reads the pid file, prints the `state` status, runs
`start`, prints the status again, writes TEXT to the init's stdin (once
MARKER is in its output, with --when), optionally sends a signal with `kill`,
waits for the pid in the pid file (it is not our child: it was reparented
to us), prints its exit status as the shim reports it (128+N for signal N),
the status once stopped, and runs `delete`. The container's stdout and
stderr are printed after `out:` / `err:` lines. Exit status 0 when every
runtime command did what runc does, else 1 (with the reason on stderr).
"""
import ctypes
import json
import os
import shutil
import socket
import array
import atexit
import subprocess
import sys
import tempfile
import threading
import time

PR_SET_CHILD_SUBREAPER = 36


def main():
    args = sys.argv[1:]
    runtime, root, bundle, cid = args[:4]
    opts = args[4:]
    kill_sig, after, stdin_text, console, when = None, 0.0, None, False, None
    i = 0
    while i < len(opts):
        if opts[i] == "--kill":
            kill_sig = opts[i + 1]; i += 2
        elif opts[i] == "--after":
            after = float(opts[i + 1]); i += 2
        elif opts[i] == "--stdin":
            stdin_text = opts[i + 1]; i += 2
        elif opts[i] == "--when":
            when = opts[i + 1].encode(); i += 2
        elif opts[i] == "--console":
            console = True; i += 1
        else:
            sys.exit(f"shim.py: unknown option {opts[i]}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("shim.py: prctl(PR_SET_CHILD_SUBREAPER) failed")
    work = tempfile.mkdtemp(prefix="shim.")
    atexit.register(shutil.rmtree, work, True)
    log = os.path.join(work, "log.json")
    pid_file = os.path.join(work, "init.pid")
    base = [runtime, "--root", root, "--log", log, "--log-format", "json"]
    ok = True

    def run(*a, **kw):
        return subprocess.run(base + list(a), capture_output=True, text=True, **kw)

    def status():
        r = run("state", cid)
        if r.returncode != 0:
            return "error: " + r.stderr.strip()
        return json.loads(r.stdout)["status"]

    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    extra = []
    console_sock = None
    if console:
        sock_path = os.path.join(work, "console.sock")
        console_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        console_sock.bind(sock_path)
        console_sock.listen(1)
        extra = ["--console-socket", sock_path]
    create = subprocess.Popen(
        base + ["create", "--bundle", bundle, "--pid-file", pid_file] + extra + [cid],
        stdin=in_r, stdout=out_w, stderr=err_w)
    master = None
    if console:
        console_sock.settimeout(20)
        try:
            conn, _ = console_sock.accept()
            fds = array.array("i")
            msg, anc, _, _ = conn.recvmsg(1024, socket.CMSG_LEN(fds.itemsize))
            for level, typ, data in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    fds.frombytes(data[:fds.itemsize])
            master = fds[0]
            print("console: got a pty master")
        except OSError as e:
            print(f"console: none ({e})")
    rc = create.wait()
    os.close(in_r); os.close(out_w); os.close(err_w)
    if rc != 0:
        with open(log) as f:
            print("create failed:", rc, f.read().strip(), file=sys.stderr)
        print("create: exit", rc)
        sys.exit(1)
    pid = int(open(pid_file).read())
    print("after create:", status())
    outs = {"out": b"", "err": b""}

    def drain(fd, key):
        while True:
            try:
                b = os.read(fd, 65536)
            except OSError:
                break
            if not b:
                break
            outs[key] += b
    readers = [threading.Thread(target=drain, args=(out_r, "out"), daemon=True),
               threading.Thread(target=drain, args=(err_r, "err"), daemon=True)]
    if master is not None:
        readers.append(threading.Thread(target=drain, args=(master, "out"), daemon=True))
    for t in readers:
        t.start()
    r = run("start", cid)
    if r.returncode != 0:
        print("start failed:", r.stderr.strip(), file=sys.stderr)
        ok = False
    print("after start:", status())
    if stdin_text is not None:
        deadline = time.time() + 20
        while when is not None and when not in outs["out"] and time.time() < deadline:
            time.sleep(0.02)
        os.write(master if master is not None else in_w, stdin_text.encode())
    if master is None:
        os.close(in_w)
    if kill_sig is not None:
        time.sleep(after)
        r = run("kill", cid, kill_sig)
        print("kill:", r.returncode)
    # Reap: the init is ours (subreaper); other orphans may come too.
    code = None
    while code is None:
        p, st = os.waitpid(-1, 0)
        if p == pid:
            code = os.waitstatus_to_exitcode(st)
            if code < 0:
                code = 128 - code
    print("exit:", code)
    print("after exit:", status())
    if master is not None:
        time.sleep(0.2)
        os.close(master)
    for t in readers:
        t.join(timeout=10)
    r = run("delete", cid)
    print("delete:", r.returncode)
    r = run("state", cid)
    print("state after delete:", r.returncode)
    for key in ("out", "err"):
        for line in outs[key].decode(errors="replace").replace("\r\n", "\n").splitlines():
            print(f"{key}: {line}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
