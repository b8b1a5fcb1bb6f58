#!/usr/bin/env bash
# gcc under folio: compile a generated C file (a few hundred functions, a
# big initialized table, a switch) with -O2; the driver, cc1, as and ld all
# run with folio.  The assembly must be identical to what gcc produces
# without folio, and the linked program must print the expected result.
. "$(dirname "$0")/../support/programs.bash"
need gcc awk

awk 'BEGIN {
    n = 200
    print "#include <stdio.h>"
    print "#include <stdlib.h>"
    print "#include <string.h>"
    printf "static const unsigned table[%d] = {", 4000
    for (i = 0; i < 4000; i++) printf "%s%u", (i ? "," : ""), (i * 2654435761) % 4294967296
    print "};"
    for (f = 0; f < n; f++) {
        printf "__attribute__((noinline)) static unsigned long f%d(unsigned long x) {\n", f
        printf "  unsigned long s = %d;\n", f
        printf "  for (int i = 0; i < %d; i++) {\n", 3 + f % 11
        printf "    s = s * 31 + (x ^ table[(x + i * %d) %% 4000]);\n", f + 1
        printf "    switch ((s >> 3) %% 5) { case 0: s += %d; break; case 1: s ^= s >> %d; break;\n", f, 1 + f % 13
        printf "      case 2: s -= x; break; case 3: s = (s << 1) | (s >> 63); break; default: s += i; }\n"
        print  "  }"
        printf "  char buf[64]; snprintf(buf, sizeof buf, \"%%lu-%d\", s); return s + strlen(buf);\n", f
        print  "}"
    }
    print "int main(int argc, char **argv) {"
    print "  unsigned long x = argc > 1 ? strtoul(argv[1], 0, 10) : 7, acc = 0;"
    print "  for (int r = 0; r < 100; r++) {"
    for (f = 0; f < n; f++) printf "    acc += f%d(x + r);\n", f
    print "  }"
    print "  printf(\"%lu\\n\", acc);"
    print "  return 0;"
    print "}"
}' > "$WORK/prog.c"

cd "$WORK" || exit 1
gcc -O2 -S prog.c -o ref.s || fail "gcc -S without folio failed"
gcc ref.s -o ref || fail "assembling and linking without folio failed"
want=$(./ref 12345) || fail "the program built without folio failed"

folio gcc -O2 -S prog.c -o out.s || fail "gcc -O2 -S under folio exited with status $?"
cmp -s ref.s out.s || fail "gcc under folio produced different assembly ($(diff ref.s out.s | head -n 5))"
folio gcc -O2 -Wall prog.c -o out || fail "gcc -O2 (compile and link) under folio exited with status $?"
check_report 1000
got=$(./out 12345) || fail "the program built under folio failed"
[ "$got" = "$want" ] || fail "the program built under folio printed '$got', want '$want'"
# And the program itself run under folio.
got=$(folio ./out 12345) || fail "the program run under folio failed"
[ "$got" = "$want" ] || fail "the program run under folio printed '$got', want '$want'"
echo "  $(wc -l < prog.c)-line C file: same assembly, program prints $want" >&2
