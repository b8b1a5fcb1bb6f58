#!/usr/bin/env bash
# git under folio: init, add and commit a few hundred generated files in a
# temporary repository (three commits: add, modify, rename/delete), gc and
# fsck it; the log must have three commits, fsck must be clean, and (names
# and dates being fixed) the commit ids must equal those of the same steps
# run without folio.
. "$(dirname "$0")/../support/programs.bash"
need git awk

export HOME="$WORK/home" GIT_CONFIG_NOSYSTEM=1 GIT_TERMINAL_PROMPT=0
mkdir -p "$HOME"
export GIT_AUTHOR_NAME="Folio Test" GIT_AUTHOR_EMAIL="folio@example.invalid"
export GIT_COMMITTER_NAME="Folio Test" GIT_COMMITTER_EMAIL="folio@example.invalid"
export GIT_AUTHOR_DATE="2024-01-02T03:04:05+0000" GIT_COMMITTER_DATE="2024-01-02T03:04:05+0000"

# gen DIR FIRST LAST SALT: files DIR/dNN/fileN.txt with deterministic text.
gen() {
    local k
    for k in $(seq -w 0 16); do mkdir -p "$1/d$k"; done
    awk -v dir="$1" -v first="$2" -v last="$3" -v salt="$4" 'BEGIN {
        x = 12345 + salt
        for (i = first; i <= last; i++) {
            d = sprintf("%s/d%02d", dir, i % 17)
            f = sprintf("%s/file%04d.txt", d, i)
            n = 5 + (i * 7 + salt) % 200
            for (j = 0; j < n; j++) {
                x = (x * 1103515245 + 12345) % 2147483648
                printf "line %d of file %d salt %d: %x %s\n", j, i, salt, x, substr("the quick brown fox jumps over the lazy dog", 1 + x % 30) > f
            }
            close(f)
        }
    }'
}

# steps RUN DIR: the whole scenario, each git command prefixed by RUN.
steps() {
    local run=$1 dir=$2
    mkdir -p "$dir" && cd "$dir" || return 1
    $run git init -q -b main . || return 1
    gen "$dir" 1 400 0
    $run git add -A || return 1
    $run git commit -q -m "add 400 files" || return 1
    gen "$dir" 1 400 3          # rewrite some (salt changes content of all)
    gen "$dir" 401 480 5        # and add new ones
    $run git add -A || return 1
    $run git commit -q -m "modify and add" || return 1
    $run git mv d01 moved01 || return 1
    $run git rm -q -r d02 || return 1
    $run git commit -q -m "rename and delete" || return 1
    $run git gc -q || return 1
    $run git repack -adq --threads=2 || return 1
    $run git fsck --strict --no-progress 2>&1 || return 1
    echo "log: $($run git log --oneline | wc -l)"
    echo "head: $($run git rev-parse HEAD)"
    echo "tree: $($run git rev-parse 'HEAD^{tree}')"
    echo "diff: $($run git diff --stat HEAD~2 HEAD | tail -n1)"
    echo "files: $($run git ls-files | wc -l)"
    echo "count: $($run git count-objects -v | grep -E '^(count|in-pack):' | tr '\n' ' ')"
}

(steps "" "$WORK/plain") > "$WORK/ref.txt" 2>&1 || fail "git without folio failed: $(cat "$WORK/ref.txt")"
(steps folio "$WORK/folio") > "$WORK/out.txt" 2>&1 || fail "git under folio failed: $(cat "$WORK/out.txt")"

grep -qx "log: 3" "$WORK/out.txt" || fail "git log under folio does not show 3 commits: $(cat "$WORK/out.txt")"
cmp -s "$WORK/ref.txt" "$WORK/out.txt" || fail "git under folio differs from git without it:
$(diff "$WORK/ref.txt" "$WORK/out.txt")"
check_report 100
echo "  $(grep -E '^(head|files)' "$WORK/out.txt" | tr '\n' ' ')" >&2
