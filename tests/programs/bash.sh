#!/usr/bin/env bash
# bash under folio: a script with subshells, pipes, command substitution,
# arrays and associative arrays, string operations, functions, here-docs
# and process substitution.  Its output must equal the output of bash
# without folio, and contain the known answers.
. "$(dirname "$0")/../support/programs.bash"
need bash sort wc tr

cat > "$WORK/script.sh" <<'SHEOF'
set -e
declare -A count
arr=()
for ((i = 0; i < 20000; i++)); do
    arr+=("item-$i-$((i * 7 % 13))")
    k=$((i % 97))
    count[$k]=$(( ${count[$k]:-0} + 1 ))
done
echo "array: ${#arr[@]} ${arr[12345]}"
echo "assoc: ${#count[@]} ${count[5]}"
sum=0
for ((i = 1; i <= 10000; i++)); do sum=$((sum + i)); done
echo "sum: $sum"
# command substitution and pipes
lines=$(printf '%s\n' "${arr[@]}" | grep -c -- '-3$')
echo "grep: $lines"
sorted=$(printf '%s\n' "${arr[@]:0:3000}" | sort -t- -k3,3n -k2,2n | head -n 3 | tr '\n' ' ')
echo "sort: $sorted"
# subshells, nested
r=$( (for j in 1 2 3; do (echo "sub$j $(echo nested-$j | tr a-z A-Z)"); done) | wc -l)
echo "subshells: $r"
# string operations on a long string
s=""
for ((i = 0; i < 3000; i++)); do s+="abc$i;"; done
t=${s//abc/X}
u=${s^^}
echo "strings: ${#s} ${#t} ${u:0:12} ${s:100:10}"
IFS=';' read -r -a parts <<< "$s"
echo "split: ${#parts[@]} ${parts[2999]}"
# functions with locals and recursion
fib() { local n=$1; if ((n < 2)); then echo "$n"; else echo $(( $(fib $((n - 1))) + $(fib $((n - 2))) )); fi; }
echo "fib: $(fib 11)"
# here-doc, process substitution, while-read loop
n=0
while read -r a b; do n=$((n + a * b)); done < <(for ((i = 1; i <= 500; i++)); do echo "$i $((i % 9))"; done)
echo "while-read: $n"
cat <<EOT | wc -c
here-doc with ${arr[1]} and $(echo inner)
EOT
# many short pipelines
c=0
for ((i = 0; i < 60; i++)); do c=$((c + $(echo "$i" | tr -d '\n' | wc -c))); done
echo "pipelines: $c"
unset 'arr[5]' count
echo "after unset: ${#arr[@]}"
SHEOF

bash "$WORK/script.sh" > "$WORK/ref.txt" 2>&1 || fail "the script failed without folio: $(cat "$WORK/ref.txt")"
folio bash "$WORK/script.sh" > "$WORK/out.txt" 2>&1 || fail "bash under folio exited with status $?: $(tail -n 5 "$WORK/out.txt")"
cmp -s "$WORK/ref.txt" "$WORK/out.txt" || fail "bash under folio printed something else:
$(diff "$WORK/ref.txt" "$WORK/out.txt")"
grep -qx "sum: 50005000" "$WORK/out.txt" || fail "wrong sum: $(grep sum "$WORK/out.txt")"
grep -qx "fib: 89" "$WORK/out.txt" || fail "wrong fib: $(grep fib "$WORK/out.txt")"
grep -qx "array: 20000 item-12345-4" "$WORK/out.txt" || fail "wrong array line: $(grep array: "$WORK/out.txt")"
grep -qx "subshells: 3" "$WORK/out.txt" || fail "wrong subshell count"
grep -qx "after unset: 19999" "$WORK/out.txt" || fail "wrong count after unset"
check_report 1000
echo "  $(wc -l < "$WORK/out.txt") lines of output, equal with and without folio" >&2
