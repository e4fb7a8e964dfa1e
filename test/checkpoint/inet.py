# hostinet sockets across a checkpoint: a TCP listener on 127.0.0.1 and
# one on ::1, a TCP connection between the first and a client (data sent,
# not read yet), a bound UDP socket. It prints "ready", sleeps (the
# checkpoint comes then), and reports what each socket does afterwards:
#   - run on: the connection's data arrives, the listeners accept;
#   - restored: the connection is reset (ECONNRESET, then EOF and EPIPE),
#     the listeners listen again on the same addresses and accept new
#     clients, the UDP socket is bound to its address again.
# Two ICMP echo ("ping") sockets too: one bound to 127.0.0.1, one that
# only sent an echo request (the kernel bound it to an identifier, its
# port). Restored, each is bound to the same address and identifier again
# and gets the reply to a new echo request.
import errno
import socket
import sys
import time


def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))


lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(("127.0.0.1", 0))
lst.listen(4)
lst6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
lst6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
lst6.bind(("::1", 0))
lst6.listen(4)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("127.0.0.1", 0))
names = (lst.getsockname(), lst6.getsockname()[:2], udp.getsockname())


def echo(sock, seq):
    # An echo request (type 8) with checksum 0: the kernel fills in the
    # checksum and the identifier of a ping socket.
    sock.sendto(bytes([8, 0, 0, 0, 0, 0, 0, seq]) + b"ping", ("127.0.0.1", 0))
    sock.settimeout(5)
    reply = sock.recv(64)
    return reply[0], reply[7], reply[8:]


ping_bound = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
ping_bound.bind(("127.0.0.1", 0))
ping_sent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
print("ping before:", echo(ping_sent, 1), echo(ping_bound, 1), flush=True)
pings = (ping_bound.getsockname(), ping_sent.getsockname())
client = socket.create_connection(lst.getsockname())
server, _ = lst.accept()
client.sendall(b"ping")
print("ready", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 1.5)

print("same names:",
      (lst.getsockname(), lst6.getsockname()[:2], udp.getsockname()) == names)
print("listener6 V6ONLY:",
      lst6.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))
print("listener REUSEADDR:",
      lst.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) != 0)
# The connection made before the checkpoint.
# Not blocking: run on, the second read finds nothing (EAGAIN).
server.setblocking(False)
for what in ("first", "second"):
    try:
        print("server recv", what, server.recv(16))
    except OSError as e:
        print("server recv", what, err(e))
for what in ("first", "second"):
    try:
        client.send(b"x")
        print("client send", what, "ok")
    except OSError as e:
        print("client send", what, err(e))
# New clients of the listeners.
for name, sock, fam in (("listener", lst, socket.AF_INET),
                        ("listener6", lst6, socket.AF_INET6)):
    c = socket.socket(fam, socket.SOCK_STREAM)
    c.settimeout(5)
    c.connect(sock.getsockname())
    s, _ = sock.accept()
    c.sendall(b"hello " + name.encode())
    print(name, "accepted:", s.recv(64))
    s.close()
    c.close()
# A datagram to the UDP socket's address.
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"dgram", names[2])
udp.settimeout(5)
print("udp got:", udp.recvfrom(64)[0])
print("ping same names:",
      (ping_bound.getsockname(), ping_sent.getsockname()) == pings)
for name, sock in (("ping bound", ping_bound), ("ping sent", ping_sent)):
    try:
        print(name, "reply:", echo(sock, 2))
    except OSError as e:
        print(name, "reply:", err(e))
print("done", flush=True)
