# Kernel objects held across a checkpoint taken during the sleep (test/
# checkpoint_test.sh): an interval timer, a large dict, a pipe, a unix
# seqpacket pair with queued data and a passed fd, epoll, a pty, threads
# blocked in futex waits (threading.Event).
import os, socket, select, signal, threading, time
ticks = []
signal.signal(signal.SIGALRM, lambda *a: ticks.append(1))
signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
d = {i: str(i) * 10 for i in range(200000)}
r, w = os.pipe(); os.write(w, b"queued in a pipe\n")
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
a.sendall(b"queued in a socket\n")
pr, pw = os.pipe(); os.write(pw, b"passed fd data\n")
socket.send_fds(a, [b"fds"], [pr])
ep = select.epoll(); ep.register(r, select.EPOLLIN)
m, s = os.openpty(); os.write(m, b"pty line\n")
ev = threading.Event(); out = []
ths = [threading.Thread(target=lambda i=i: (ev.wait(), out.append(i))) for i in range(4)]
for t in ths: t.start()
print("before", flush=True)
time.sleep(0.8)
ev.set()
# The timer goes on after a restore: wait for its ticks rather than count
# those of a fixed time (the time between the save and a restore passes on
# CLOCK_MONOTONIC, the host's, so the sleep above may end at once).
while len(ticks) < 10:
    signal.pause()
for t in ths: t.join()
signal.setitimer(signal.ITIMER_REAL, 0)
print("threads", sorted(out))
print("dict", len(d), sum(map(len, d.values())))
print("epoll", [(fd == r, e) for fd, e in ep.poll(0)])
print(os.read(r, 100).decode().strip())
print(b.recv(100).decode().strip())
msg, fds, _, _ = socket.recv_fds(b, 10, 1)
print(msg, os.read(fds[0], 100).decode().strip())
print(os.read(s, 100).decode().strip())
print("ticks", len(ticks) >= 10)
