#!/usr/bin/env bash
# sqlite3 under folio: an in-memory database of 200,000 generated rows in two
# tables, an index, an update, a delete and a vacuum into a file; grouped,
# ordered, joined and windowed queries and an integrity check.  The output
# must equal sqlite3's without folio (its page cache: blocks of a page and a
# header, many of them live at once).
. "$(dirname "$0")/../support/programs.bash"
need sqlite3 cmp

cat > "$WORK/script.sql" <<SQL
create table t(a integer primary key, b text, c integer);
with recursive r(x) as (select 1 union all select x + 1 from r where x < 200000)
  insert into t select x, printf('%08x-%d', (x * 2654435761) % 4294967296, x % 977), (x * 7919) % 100003 from r;
create table u(k integer primary key, name text);
with recursive r(x) as (select 0 union all select x + 1 from r where x < 976)
  insert into u select x, 'group-' || x from r;
create index tb on t(b);
create index tc on t(c, a);
update t set b = b || '-u' where c % 5 = 0;
delete from t where c % 11 = 3;
select count(*), sum(length(b)), min(b), max(b) from t;
select u.name, count(*), sum(t.c) from t join u on u.k = t.a % 977 group by u.name order by 2 desc, 1 limit 5;
select a, c, rank() over (order by c desc, a) from t where a % 1000 = 7 order by 3 limit 5;
select b from t where b like '0000%' order by b limit 5;
vacuum into '$WORK/copy.db';
pragma integrity_check;
SQL

sqlite3 :memory: < "$WORK/script.sql" > "$WORK/ref.txt" 2>&1 || fail "sqlite3 without folio failed: $(tail -n3 "$WORK/ref.txt")"
rm -f "$WORK/copy.db"
folio sqlite3 :memory: < "$WORK/script.sql" > "$WORK/out.txt" 2>&1 || fail "sqlite3 under folio exited with status $?: $(tail -n3 "$WORK/out.txt")"
check_report 100000
cmp -s "$WORK/ref.txt" "$WORK/out.txt" || fail "sqlite3 under folio: output differs ($(diff "$WORK/ref.txt" "$WORK/out.txt" | head -n4))"
tail -n1 "$WORK/out.txt" | grep -qx ok || fail "integrity_check under folio: $(tail -n1 "$WORK/out.txt")"
n=$(folio sqlite3 "$WORK/copy.db" 'select count(*) from t; pragma integrity_check;' | tr '\n' ' ')
[ "$n" = "$(head -n1 "$WORK/out.txt" | cut -d'|' -f1) ok " ] || fail "the vacuumed copy under folio: '$n'"
echo "  $(wc -l < "$WORK/out.txt") lines of query output match without folio; integrity ok" >&2
