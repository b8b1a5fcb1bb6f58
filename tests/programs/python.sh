#!/usr/bin/env bash
# python3 under folio: a script that churns a few hundred MB through dicts,
# lists, strings, bytes and bytearrays (small objects through pymalloc and,
# with PYTHONMALLOC=malloc, every object through folio), in several threads;
# its checksum must equal the one printed without folio.
. "$(dirname "$0")/../support/programs.bash"
need python3

# The real interpreter (python3 may be a wrapper script, e.g. pyenv's shim).
PY=$(python3 -c 'import sys; print(sys.executable)') || fail "cannot run python3"
[ -x "$PY" ] || fail "python3's sys.executable '$PY' is not executable"

cat > "$WORK/churn.py" <<'PYEOF'
import hashlib, random, threading, gc

def work(seed, rounds):
    rnd = random.Random(seed)
    h = hashlib.sha256()
    total = 0
    keep = []
    for r in range(rounds):
        d = {}
        lst = []
        for i in range(8000):
            k = "k%d_%d_%d" % (seed, r, rnd.randrange(50000))
            v = "v" * rnd.randrange(1, 400)
            d[k] = v
            lst.append((i, k, v[:16], [i] * (i % 7)))
        # large and huge buffers: bytes, a growing bytearray (realloc)
        blobs = [bytes([r % 251]) * rnd.randrange(1000, 300000) for _ in range(40)]
        ba = bytearray()
        for j in range(2000):
            ba += bytes([j % 256]) * rnd.randrange(1, 3000)
        big = b"z" * rnd.randrange(2 << 20, 12 << 20)
        s = "|".join(sorted(d.keys())[:2000])
        total += sum(len(v) for v in d.values()) + sum(len(b) for b in blobs)
        total += len(ba) + len(big) + len(s)
        h.update(s.encode())
        h.update(bytes(ba[:: 997]))
        h.update(repr(lst[::251]).encode())
        # a few objects survive into later rounds, the rest die now
        keep.append(lst[::500])
        if len(keep) > 5:
            keep.pop(0)
        del d, lst, blobs, ba, big, s
        gc.collect()
    h.update(repr(keep).encode())
    return total, h.hexdigest()

results = {}
def run(seed):
    results[seed] = work(seed, 6)

threads = [threading.Thread(target=run, args=(s,)) for s in range(1, 4)]
for t in threads:
    t.start()
run(0)
for t in threads:
    t.join()
for s in sorted(results):
    print(s, results[s][0], results[s][1])
print("bytes", sum(r[0] for r in results.values()))
PYEOF

"$PY" "$WORK/churn.py" > "$WORK/ref.txt" || fail "python3 without folio failed"
[ "$(wc -l < "$WORK/ref.txt")" -eq 5 ] || fail "unexpected reference output: $(cat "$WORK/ref.txt")"

folio "$PY" "$WORK/churn.py" > "$WORK/out1.txt" || fail "python3 under folio exited with status $?"
cmp -s "$WORK/ref.txt" "$WORK/out1.txt" || fail "python3 under folio printed a different checksum:
$(diff "$WORK/ref.txt" "$WORK/out1.txt")"
check_report 1000

PYTHONMALLOC=malloc folio "$PY" "$WORK/churn.py" > "$WORK/out2.txt" ||
    fail "python3 (PYTHONMALLOC=malloc) under folio exited with status $?"
cmp -s "$WORK/ref.txt" "$WORK/out2.txt" || fail "python3 (PYTHONMALLOC=malloc) under folio printed a different checksum:
$(diff "$WORK/ref.txt" "$WORK/out2.txt")"
check_report 100000
echo "  $(tail -n1 "$WORK/ref.txt") churned, same checksums with and without folio" >&2
