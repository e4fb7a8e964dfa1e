"""Python as a program of the distribution uses it: json, sqlite3 (in memory
and on a file in /tmp), threading, subprocess, os.fork and multiprocessing
(pools, queues, terminate, semaphores in shared memory). Deterministic
output, compared natively and in the sandbox by acceptance.sh."""
import json
import multiprocessing as mp
import os
import sqlite3
import tempfile
import threading
import signal
import subprocess
import sys
import time


def square(x):
    return x * x


def worker(q, n):
    q.put(sum(range(n)))


def sleeper():
    time.sleep(60)


def stdlib():
    doc = {"name": "sandbox", "n": [1, 2.5, None, True], "nested": {"k": "v"}}
    text = json.dumps(doc, sort_keys=True)
    print("json:", text, json.loads(text) == doc)
    for where in (":memory:", "file"):
        if where == "file":
            fd, path = tempfile.mkstemp(dir="/tmp", suffix=".db")
            os.close(fd)
        else:
            path = where
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        db.executemany("INSERT INTO t (v) VALUES (?)", [(str(i),) for i in range(500)])
        db.commit()
        if where == "file":  # reopen: the data must have reached the file
            db.close()
            db = sqlite3.connect(path)
        print("sqlite3", where, db.execute("SELECT count(*), sum(k) FROM t").fetchone())
        db.close()
        if where == "file":
            os.unlink(path)
    results = [0] * 4
    lock = threading.Lock()
    total = [0]

    def run(i):
        for _ in range(1000):
            with lock:
                total[0] += 1
        results[i] = i * i

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("threads:", results, total[0])


def main():
    stdlib()
    with mp.Pool(2) as pool:
        print("pool map:", pool.map(square, range(10)))
        print("pool apply:", pool.apply(square, (12,)))
    q = mp.Queue()
    procs = [mp.Process(target=worker, args=(q, n)) for n in (10, 100, 1000)]
    for p in procs:
        p.start()
    results = sorted(q.get() for _ in procs)
    for p in procs:
        p.join()
    print("queue results:", results, "exit codes:", [p.exitcode for p in procs])
    p = mp.Process(target=sleeper)
    p.start()
    time.sleep(0.2)
    p.terminate()
    p.join()
    print("terminated exit code:", p.exitcode)
    lock = mp.Lock()
    counter = mp.Value("i", 0)

    def bump(c, l):
        for _ in range(100):
            with l:
                c.value += 1

    ps = [mp.Process(target=bump, args=(counter, lock)) for _ in range(3)]
    for x in ps:
        x.start()
    for x in ps:
        x.join()
    print("shared counter:", counter.value)
    out = subprocess.run(["/bin/sh", "-c", "echo from sh; exit 5"],
                         capture_output=True, text=True)
    print("subprocess:", out.stdout.strip(), out.returncode)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, b"child says hi")
        os._exit(0)
    os.close(w)
    print("fork+pipe:", os.read(r, 100).decode(), os.waitpid(pid, 0)[1])
    print("done")


if __name__ == "__main__":
    mp.set_start_method("fork")
    main()
