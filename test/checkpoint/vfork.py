# Spends most of its time with a vfork child between its vfork and its
# exec: posix_spawn (glibc: clone(CLONE_VM|CLONE_VFORK)) with thousands of
# file actions, which the child carries out before it execs. A checkpoint
# taken then saves the parent inside its vfork, waiting for that child.
import os
import sys

ACTIONS = [(os.POSIX_SPAWN_DUP2, 1, 100 + i % 50) for i in range(4000)]
for i in range(24):
    pid = os.posix_spawn("/bin/echo", ["echo", "spawned", str(i)], {},
                         file_actions=ACTIONS)
    _, status = os.waitpid(pid, 0)
    print("child", i, "status", status, flush=True)
print("done", flush=True)
