#!/usr/bin/env bash
# tools/census.c (make census) on a real program: preloaded after folio, it
# finds the arena, walks its chunk table and counts resident pages by kind
# of span.  The figures must add up: every chunk's resident pages are the
# sum of its spans', its unmapped ones and (chunk 0) the metadata; slabs
# and metadata are resident; the objects in use fit in the slabs' pages.
# Catches a census that reads a changed meta.h layout as garbage.
. "$(dirname "$0")/../support/programs.bash"
need sort seq
CENSUS=$(dirname "$FOLIO_LIB")/census.so
[ -r "$CENSUS" ] || fail "$CENSUS missing (make census)"

seq 1 200000 | sed 's/$/ line/' > "$WORK/in.txt"
# (the slabs from the first object: a census of slabs to check; a small
# program's blocks otherwise come from the dense heap)
# Started by a shell that exits after it, under the same environment: the
# census kept is sort's, the larger process, not the shell's, nor one an
# earlier run left (a stale file claiming a huge RSS)
echo "exit census: process RSS 999999999 KiB" > "$WORK/census.txt"
FOLIO_HEAP_DENSE_KIB=0 LD_PRELOAD="$FOLIO_LIB $CENSUS" CENSUS_FILE="$WORK/census.txt" \
    sh -c 'sort -r "$1" > "$2"; :' sh "$WORK/in.txt" "$WORK/out.txt" ||
    fail "sort under folio and the census exited with status $?"
[ "$(head -n 1 "$WORK/out.txt")" = "99999 line" ] || fail "sort's output is wrong"
[ -s "$WORK/census.txt" ] || fail "no census written"
first=$(head -n 1 "$WORK/census.txt")
case "$first" in
"exit census: process RSS "*" KiB") ;;
*) fail "census's first line is not the process's RSS: $first" ;;
esac
kib=${first#exit census: process RSS }
kib=${kib% KiB}
[ "$kib" -gt 4096 ] && [ "$kib" -lt 999999999 ] || fail "the census kept is not sort's (RSS $kib KiB)"
python3 - "$WORK/census.txt" <<'PY' || fail "census does not add up: $(cat "$WORK/census.txt" | head -40)"
import re, sys
text = open(sys.argv[1]).read()
chunks = re.findall(r"^chunk +(\d+) (?:small|large|medium) +free +\d+ resident +(\d+): slab (\d+) large (\d+) zone_free (\d+) unmapped (\d+)$", text, re.M)
assert chunks, "no chunk line"
kinds = {m[0]: int(m[1]) for m in re.findall(r"^(zone_free|taken|slab|large|pcp_free|purging|dense) +\d+ +\d+ +(\d+)$", text, re.M)}
unmapped = int(re.search(r"^unmapped +(\d+)", text, re.M).group(1))
meta = int(re.search(r"^metadata +(\d+)", text, re.M).group(1))
total = int(re.search(r"^total +(\d+) pages resident", text, re.M).group(1))
assert sum(int(c[1]) for c in chunks) == total, "chunks' resident pages != total"
assert sum(kinds.values()) + unmapped + meta == total, "kinds + unmapped + metadata != total"
assert kinds.get("slab", 0) > 0 and meta > 0, "no resident slab or metadata page"
used_kib, slab_kib = map(int, re.search(r"objects in use \(lists included\) (\d+) KiB in slabs of (\d+) resident KiB", text).groups())
assert 0 < used_kib <= slab_kib * 1.05 + 64, "objects in use exceed the slabs' resident pages"
remote = re.findall(r"^  of which freed by other threads, not yet collected: (\d+) KiB in (live heaps'|exited heaps'|abandoned|floating) slabs \((\d+) slabs\)$", text, re.M)
assert len(remote) == 4, "not the four lines of remote frees not yet collected"
assert sum(int(r[0]) for r in remote) <= used_kib, "remote frees not yet collected exceed the objects in use"
assert sum(int(r[2]) for r in remote) == sum(int(m) for m in re.findall(r"^ +\d+ +\d+ +(\d+) ", text, re.M)), "the owners' slabs do not add up to the classes' slabs"
print("  census: %d chunks, %d pages resident, slabs %d KiB used of %d resident" % (len(chunks), total, used_kib, slab_kib), file=sys.stderr)
PY

# The peak mode (CENSUS_PEAK_MS): a sampler thread takes the census when the
# process's RSS is highest.  awk keeps every line in an array (a malloc per
# line and element) and frees it at exit: its peak holds 100,000 lines,
# which the census at exit (everything freed) does not see.
need awk
LD_PRELOAD="$FOLIO_LIB $CENSUS" CENSUS_FILE="$WORK/peak.txt" CENSUS_PEAK_MS=1 \
    awk '{ a[NR] = $0 } END { for (i = 1; i <= NR; i++) n += length(a[i]); print NR, n }' "$WORK/in.txt" > "$WORK/out2.txt" ||
    fail "awk under folio and the census's sampler exited with status $?"
[ "$(cat "$WORK/out2.txt")" = "200000 2088895" ] || fail "awk's output is wrong with the sampler: $(cat "$WORK/out2.txt")"
python3 - "$WORK/peak.txt" "$WORK/census.txt" <<'PY' || fail "peak census wrong: $(head -20 "$WORK/peak.txt")"
import re, sys
peak, at_exit = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = re.match(r"peak sample: process RSS (\d+) KiB\n", peak)
assert m, "no peak sample line"
total = int(re.search(r"^total +(\d+) pages resident", peak, re.M).group(1))
exit_total = int(re.search(r"^total +(\d+) pages resident", at_exit, re.M).group(1))
assert total * 4 <= int(m.group(1)), "the arenas hold more than the process's RSS"
assert total > 2 * exit_total, "the peak census holds no more than one at exit"
print("  census at the peak: RSS %s KiB, %d arena pages" % (m.group(1), total), file=sys.stderr)
PY
