"""Python's multiprocessing and subprocess: fork, pipes, queues, semaphores in
shared memory, pools, terminate. Deterministic output, compared natively and
in the sandbox by acceptance.sh."""
import multiprocessing as mp
import os
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


def main():
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
