# A large dirtied heap for a restore whose pages load while the program
# runs (test/checkpoint_test.sh): fills MIB MiB (argv[1], default 256)
# with random bytes, prints its digest and "ready", blocks reading a line
# from stdin (where the checkpoint takes it: the read restarts in the
# restored copy, on the restore's stdin), then digests the heap again and
# prints the digest and how long that took: far longer than reading it
# from memory when its pages were still arriving.
import hashlib
import os
import sys
import time

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
heap = bytearray(os.urandom(1 << 20)) * mib
heap[::4096] = os.urandom(len(heap) // 4096)  # every page differs
print("digest", hashlib.sha256(heap).hexdigest(), flush=True)
print("ready", flush=True)
line = sys.stdin.readline()
t0 = time.monotonic()
digest = hashlib.sha256(heap).hexdigest()
t1 = time.monotonic()
print("got", line.strip(), flush=True)
print("digest", digest, flush=True)
print("digest_ms", int((t1 - t0) * 1000), flush=True)
