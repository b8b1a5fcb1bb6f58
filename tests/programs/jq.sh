#!/usr/bin/env bash
# jq under folio: 60,000 generated JSON objects (about 6.5 MB) parsed whole,
# filtered, grouped, sorted and rebuilt, and streamed line by line; every
# output must equal jq's without folio (a parser's many small values, freed
# and made again by each filter).
. "$(dirname "$0")/../support/programs.bash"
need jq awk cmp

awk 'BEGIN {
    x = 7
    printf "["
    for (i = 0; i < 60000; i++) {
        x = (x * 1103515245 + 12345) % 2147483648
        printf "%s{\"id\":%d,\"name\":\"n%x\",\"tags\":[\"t%d\",\"u%d\"],\"v\":%d,\"nested\":{\"a\":[%d,%d],\"s\":\"%s\"}}", \
            (i ? "," : ""), i, x, i % 7, x % 13, x % 100000, i, x % 97, substr("abcdefghijklmnopqrstuvwxyz", 1 + x % 26)
    }
    printf "]\n"
}' > "$WORK/data.json"

filters=(
    '[.[] | select(.id % 3 == 0) | {a: .name, t: .tags}] | length'
    'group_by(.tags[0]) | map({k: .[0].tags[0], n: length, s: (map(.v) | add)})'
    'sort_by(.v, .id) | .[:20] | map(.name)'
    '[.[] | .nested.s] | unique | join(",")'
    'map(.nested.a | add) | add'
    'reduce .[] as $o ({}; .[$o.tags[1]] += 1)'
)
k=0
for f in "${filters[@]}"; do
    k=$((k + 1))
    jq -c "$f" "$WORK/data.json" > "$WORK/ref.$k" || fail "jq without folio failed on: $f"
    folio jq -c "$f" "$WORK/data.json" > "$WORK/out.$k" || fail "jq under folio exited with status $? on: $f"
    cmp -s "$WORK/ref.$k" "$WORK/out.$k" || fail "jq under folio: output differs on: $f"
done
check_report 100000
# streamed: one object per line in, one per line out
jq -c '.[]' "$WORK/data.json" > "$WORK/lines.json"
jq -c 'select(.v > 50000) | .name' "$WORK/lines.json" > "$WORK/ref.s" || fail "jq stream without folio failed"
folio jq -c 'select(.v > 50000) | .name' "$WORK/lines.json" > "$WORK/out.s" || fail "jq stream under folio exited with status $?"
cmp -s "$WORK/ref.s" "$WORK/out.s" || fail "jq under folio: streamed output differs"
echo "  ${#filters[@]} filters over $(wc -c < "$WORK/data.json") bytes and a stream of $(wc -l < "$WORK/lines.json") objects match without folio" >&2
