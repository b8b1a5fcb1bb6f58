"""A program for tests/top/run.sh: allocates and frees (bytearrays of 1-12 KiB,
so folio's slabs and pages turn over) until the file named by argv[1] exists
(at most 60 s).  With argv[2], it first forks a child that does the same and
writes its pid to that file, then ends normally (its exit removes its
statistics file)."""
import os
import sys
import time

stop = sys.argv[1]
if len(sys.argv) > 2:
    pid = os.fork()
    if pid == 0:
        with open(sys.argv[2] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])
t0 = time.monotonic()
blocks = []
while not os.path.exists(stop) and time.monotonic() - t0 < 60:
    for i in range(2000):
        blocks.append(bytearray(1024 + (i * 37) % 11000))
    blocks = blocks[-3000:]
    time.sleep(0.01)
sys.exit(0)
