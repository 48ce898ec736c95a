#!/usr/bin/env bash
# stats_flood_test.sh - what anonymous resolves can make psdbd keep is bounded, on the real psdbd
# (scaled from tests/bench/stats_flood.sh's 20,000 x 4,000-byte flood to run in seconds): names
# over the recorded limit, a flood of distinct names (the day's name cap), a flood of distinct
# miss shapes of one name (the day's byte budget), and the memory bound between two flushes. Asserts that every
# miss is counted (by name or in the day's aggregate), the distinct names stored stay within the
# cap, the reports stay within their limit (entries and bytes) and answer fast, and RSS and the
# index grow by at most a few MiB. PSDB_STATS_ENGINE=postgresql runs it on the PostgreSQL index
# (skips without PSDB_TEST_PG_URL, like stats_test_pg).
set -euo pipefail
fail() { echo "stats_flood_test: $*" >&2; tail -n 20 "$log" >&2 2>/dev/null; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/stats_fixture.sh"
client="$(dirname "${BASH_SOURCE[0]}")/stats_flood_client.py"
max_names=200
today=$(date -u +%F)
day=$(($(date -u +%s) / 86400))

# sql QUERY: one number from the index (SQLite file or the PostgreSQL database).
sql() {
    if [ -n "$pgdb" ]; then
        psql -qAt -v ON_ERROR_STOP=1 "$(pg_url_of "$pgdb")" -c "$1"
    else
        python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' \
            "$data/index.sqlite" "$1"
    fi
}
# index_bytes: what the index takes on disk (SQLite: the file and its WAL).
index_bytes() {
    if [ -n "$pgdb" ]; then
        sql "SELECT pg_database_size(current_database())"
    else
        cat "$data"/index.sqlite "$data"/index.sqlite-wal 2>/dev/null | wc -c
    fi
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"; }
metric() { curl -sf "$url/metrics" >"$work/m.txt" && awk -v k="$1" '$1 == k {print $2}' "$work/m.txt"; }
flood() {
    python3 "$client" "$url" "$@" --threads 4 >"$work/flood.json" || fail "flood client: $(cat "$work/flood.json")"
    grep -q "\"statuses\": {\"404\": $1}" "$work/flood.json" ||
        fail "not every flood resolve was a 404: $(cat "$work/flood.json")"
    echo "stats_flood_test: flood $*: $(cat "$work/flood.json")"
}

mkdir -p "$data"
"$psdbd" token create --data-dir "$data" "${index[@]}" --role publisher --name ci >/dev/null
start --stats-max-names "$max_names" --stats-max-day-bytes 512K --stats-max-memory 1M
sleep 0.2
rss0=$(rss_kib)
idx0=$(index_bytes)

# 1. Names over the recorded limit (4,000 bytes): never held, never stored, each counted.
flood 3000 --name-bytes 4000 --vary app --prefix long
[ "$(metric psdbd_stats_held_keys)" -le 2 ] || fail "4,000-byte names were held in memory"
flush
# 2. Distinct 200-byte names: at most the day's name cap is stored; between two flushes at most
# --stats-max-memory is held.
flood 3000 --name-bytes 200 --vary app --prefix name
held_bytes=$(metric psdbd_stats_held_bytes)
[ "$held_bytes" -le $((1024 * 1024 + 4096)) ] || fail "held $held_bytes bytes, over --stats-max-memory 1M"
flush
names=$(sql "SELECT count(*) FROM (SELECT app AS n FROM stats_resolves WHERE day = $day UNION SELECT family FROM stats_resolves WHERE day = $day UNION SELECT app FROM stats_misses WHERE day = $day UNION SELECT family FROM stats_misses WHERE day = $day) AS names")
[ "$names" -le "$max_names" ] || fail "$names distinct names stored, the cap is $max_names"
[ "$names" -ge $((max_names - 1)) ] || fail "only $names distinct names stored: the cap was not reached"
# 3. Distinct miss shapes of a stored name: at most the day's byte budget is stored.
shapes=$(sql "SELECT min(app) FROM stats_misses")
flood 2000 --vary abi --app "$shapes"
flush
cost=$(sql "SELECT (SELECT coalesce(sum(2 * (length(app) + length(family)) + 128), 0) FROM stats_resolves) + (SELECT coalesce(sum(2 * (length(app) + length(family)) + 128), 0) FROM stats_misses)")
[ "$cost" -le $((512 * 1024)) ] || fail "the stored keys cost $cost bytes, over the day's 512K"
[ "$cost" -ge $((512 * 1024 - 1200)) ] || fail "the stored keys cost $cost bytes: the budget was not reached"
longest=$(sql "SELECT max(length(app)) FROM stats_misses")
[ "$longest" -le 256 ] || fail "a name of $longest bytes was stored"
# Every miss is counted once: by name, or in the day's aggregate.
counted=$(sql "SELECT (SELECT sum(misses) FROM stats_resolves) + (SELECT misses FROM stats_other WHERE day = $day)")
[ "$counted" -eq 8000 ] || fail "$counted misses counted of 8000 sent"
requests=$(sql "SELECT (SELECT sum(requests) FROM stats_misses) + (SELECT requests FROM stats_other WHERE day = $day)")
[ "$requests" -eq 8000 ] || fail "$requests miss requests counted of 8000 sent"
[ "$(metric psdbd_stats_dropped_total)" -gt 0 ] || fail "nothing counted as dropped"

# The reports: at most `limit` names each, the rest as one null entry per day, small and fast.
report() { # report PATH FILE MAX_BYTES
    local t
    t=$(curl -sf -o "$2" -w '%{time_total}' "$url$1") || fail "GET $1"
    [ "$(wc -c <"$2")" -le "$3" ] || fail "GET $1 answered $(wc -c <"$2") bytes, more than $3"
    awk -v t="$t" 'BEGIN { exit !(t < 2.0) }' || fail "GET $1 took $t s"
}
report "/v1/stats/traffic?limit=5" "$work/t5.json" 16384
check_json "$work/t5.json" 'len({r["app"] for r in d["resolves"] if r["app"] is not None}) == 5 and d["truncated"] is True' \
    "traffic?limit=5: not 5 applications named, or not marked truncated"
check_json "$work/t5.json" "[r['day'] for r in d['resolves'] if r['app'] is None] == ['$today'] and sum(r['misses'] for r in d['resolves']) == 8000" \
    "traffic: the rest is not one null entry of the day, or misses are lost"
report "/v1/stats/traffic" "$work/t.json" 65536
check_json "$work/t.json" 'len([r for r in d["resolves"] if r["app"] is not None]) <= 50' "traffic: more than 50 named"
report "/v1/stats/missing?limit=5" "$work/x5.json" 16384
check_json "$work/x5.json" 'len(d["missing"]) == 5 and d["truncated"] is True and d["other_requests"] + sum(m["requests"] for m in d["missing"]) == 8000' \
    "missing?limit=5: not 5 entries with the rest in other_requests"
report "/v1/stats/missing" "$work/x.json" 131072
check_json "$work/x.json" 'len(d["missing"]) == 50' "missing: not the default limit of 50"
report "/v1/stats/matrix?limit=1000" "$work/m.json" 4096
report "/v1/stats/events?limit=1" "$work/e.json" 4096
report "/v1/stats/coverage?app=$shapes&limit=3" "$work/c.json" 8192
check_json "$work/c.json" 'len(d["missing"]) == 3' "coverage?limit=3: not 3 entries"
for bad in 0 1001 x; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/stats/traffic?limit=$bad")" = 400 ] ||
        fail "traffic?limit=$bad is not 400"
done
run_checks

rss1=$(rss_kib)
idx1=$(index_bytes)
echo "stats_flood_test: RSS ${rss0} KiB -> ${rss1} KiB, index ${idx0} -> ${idx1} bytes, $names names stored"
[ "$rss1" -le $((64 * 1024)) ] || fail "RSS ${rss1} KiB after the flood, more than 64 MiB"
[ $((rss1 - rss0)) -le $((24 * 1024)) ] || fail "RSS grew by $((rss1 - rss0)) KiB"
[ $((idx1 - idx0)) -le $((8 * 1024 * 1024)) ] || fail "the index grew by $((idx1 - idx0)) bytes"

# A restart grants no new budget: the day's names are read back before a new one is stored.
stop
start --stats-max-names "$max_names" --stats-max-day-bytes 512K --stats-max-memory 1M
flood 100 --name-bytes 50 --vary app --prefix after
flush
names2=$(sql "SELECT count(*) FROM (SELECT app AS n FROM stats_resolves WHERE day = $day UNION SELECT family FROM stats_resolves WHERE day = $day UNION SELECT app FROM stats_misses WHERE day = $day UNION SELECT family FROM stats_misses WHERE day = $day) AS names")
[ "$names2" -le "$max_names" ] || fail "after a restart $names2 names stored, the cap is $max_names"
stop
echo "stats_flood_test: names, bytes, memory and reports stay within their bounds"
