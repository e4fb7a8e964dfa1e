#!/usr/bin/env python3
"""Runs `RUNTIME exec` as containerd's runc shim does.

  exec.py RUNTIME ROOT ID PROCESS_JSON [--stdin TEXT [--when MARKER]] [--console]
          [--kill SIG --after SECONDS] [--kill-all SIG --after SECONDS]

A child subreaper: writes PROCESS_JSON (a runtime-spec "process") to a
file, runs `RUNTIME --root ROOT exec --process FILE --detach --pid-file F
[--console-socket S] ID` with stdio pipes, waits for the pid in F (128+N
for signal N), and prints `exec: RC`, `exit: N` and the process's output
as `out:` / `err:` lines. TEXT goes to its stdin (once MARKER is in its
output, with --when). --kill signals that pid (as `ctr task kill
--exec-id` makes the shim do); --kill-all runs `RUNTIME kill --all ID SIG`.
"""
import array
import atexit
import ctypes
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time


def main():
    runtime, root, cid, process = sys.argv[1:5]
    opts = sys.argv[5:]
    stdin_text, console, kill, kill_all, after, when = None, False, None, None, 0.0, None
    i = 0
    while i < len(opts):
        o = opts[i]
        if o == "--stdin":
            stdin_text = opts[i + 1]; i += 2
        elif o == "--when":
            when = opts[i + 1].encode(); i += 2
        elif o == "--console":
            console = True; i += 1
        elif o == "--kill":
            kill = opts[i + 1]; i += 2
        elif o == "--kill-all":
            kill_all = opts[i + 1]; i += 2
        elif o == "--after":
            after = float(opts[i + 1]); i += 2
        else:
            sys.exit(f"exec.py: unknown option {o}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    work = tempfile.mkdtemp(prefix="exec.")
    atexit.register(shutil.rmtree, work, True)
    pf = os.path.join(work, "process.json")
    with open(pf, "w") as f:
        f.write(process)
    pid_file = os.path.join(work, "exec.pid")
    extra = []
    srv = None
    if console:
        sp = os.path.join(work, "console.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(sp)
        srv.listen(1)
        srv.settimeout(20)
        extra = ["--console-socket", sp]
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    p = subprocess.Popen([runtime, "--root", root, "exec", "--process", pf, "--detach",
                          "--pid-file", pid_file] + extra + [cid],
                         stdin=in_r, stdout=out_w, stderr=err_w)
    master = None
    if console:
        try:
            conn, _ = srv.accept()
            fds = array.array("i")
            _, anc, _, _ = conn.recvmsg(1024, socket.CMSG_LEN(fds.itemsize))
            fds.frombytes(anc[0][2][:fds.itemsize])
            master = fds[0]
        except (OSError, IndexError) as e:
            print("console: none", e)
    rc = p.wait()
    os.close(in_r); os.close(out_w); os.close(err_w)
    print("exec:", rc)
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
    ts = [threading.Thread(target=drain, args=(out_r, "out"), daemon=True),
          threading.Thread(target=drain, args=(err_r, "err"), daemon=True)]
    if master is not None:
        ts.append(threading.Thread(target=drain, args=(master, "out"), daemon=True))
    for t in ts:
        t.start()
    if rc == 0:
        pid = int(open(pid_file).read())
        if stdin_text is not None:
            deadline = time.time() + 20
            while when is not None and when not in outs["out"] and time.time() < deadline:
                time.sleep(0.02)
            os.write(master if master is not None else in_w, stdin_text.encode())
        if master is None:
            os.close(in_w)
        if kill is not None:
            time.sleep(after)
            os.kill(pid, int(kill))
        if kill_all is not None:
            time.sleep(after)
            r = subprocess.run([runtime, "--root", root, "kill", "--all", cid, kill_all],
                               capture_output=True, text=True)
            print("kill --all:", r.returncode, r.stderr.strip())
        code = None
        while code is None:
            q, st = os.waitpid(-1, 0)
            if q == pid:
                code = os.waitstatus_to_exitcode(st)
                code = 128 - code if code < 0 else code
        print("exit:", code)
    else:
        os.close(in_w)
    if master is not None:
        time.sleep(0.2)
        os.close(master)
    for t in ts:
        t.join(timeout=10)
    for key in ("out", "err"):
        for line in outs[key].decode(errors="replace").replace("\r\n", "\n").splitlines():
            print(f"{key}: {line}")


if __name__ == "__main__":
    main()
