#!/usr/bin/env bash
# stats_test.sh - demand recording end to end on the real psdbd: resolves (hits, misses and what
# they asked for) and downloads reach /v1/stats/ after a flush; the counts survive kill -9 after a
# flush and a clean shutdown without one; the reports keep to a scoped token's applications;
# /metrics carries them with bounded labels (promtool check metrics); psdb coverage prints them.
set -euo pipefail
fail() { echo "stats_test: $*" >&2; tail -n 20 "$log" >&2 2>/dev/null; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/stats_fixture.sh"

setup_fixture --stats-top-apps 1
traffic
today=$(date -u +%F)

# Nothing is in the index before a flush: the hot path writes nothing.
curl -sf "$url/v1/stats/coverage?app=Alpha" >"$work/c0.json" || fail "coverage"
check_json "$work/c0.json" 'd["missing"] == []' "misses were written before any flush"
flush

curl -sf "$url/v1/stats/coverage?app=Alpha" >"$work/c1.json" || fail "coverage"
check_json "$work/c1.json" 'sorted(d) == ["app", "covered", "missing"] and d["app"] == "Alpha"' \
    "coverage: not the documented shape"
check_json "$work/c1.json" '[(c["family"], c["abi_min"], c["abi_max"], c["psdbs"], c["active_serial"]) for c in d["covered"]] == [("alpha-gfx1", 1, 2, 3, 3)]' \
    "coverage: alpha-gfx1 ABI 1-2 with 3 PSDBs, serial 3 active, expected"
check_json "$work/c1.json" 'sorted(d["covered"][0]) == sorted(["family","abi_min","abi_max","psdbs","active_id","active_serial","size","published_at","signer"]) and len(d["covered"][0]["signer"]) == 64' \
    "coverage: a covered entry has other fields"
check_json "$work/c1.json" "d['missing'] == [{'family': 'alpha-gfx9', 'abi_min': 5, 'abi_max': 6, 'profile_version': None, 'requests': 3, 'last_seen': '$today'}]" \
    "coverage: the alpha-gfx9 misses are not listed as asked"
curl -sf "$url/v1/stats/coverage?app=Beta" >"$work/b1.json" || fail "coverage Beta"
check_json "$work/b1.json" "d['missing'] == [{'family': 'beta-gfx2', 'abi_min': 7, 'abi_max': 7, 'profile_version': '2.0.0.0', 'requests': 2, 'last_seen': '$today'}]" \
    "coverage: Beta's miss with a profile version"
check_json "$work/b1.json" '[c["family"] for c in d["covered"]] == ["beta-gfx2"]' \
    "coverage: a retired PSDB is shown as covered"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/stats/coverage?app=Nobody")" = 404 ] ||
    fail "coverage of an unknown application is not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/stats/coverage")" = 400 ] ||
    fail "coverage without app= is not 400"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/stats/nope")" = 404 ] || fail "unknown report"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/stats/missing?days=0")" = 400 ] || fail "days=0"

curl -sf "$url/v1/stats/traffic" >"$work/t1.json" || fail "traffic"
check_json "$work/t1.json" "[(r['day'], r['app'], r['complete'], r['partial']) for r in d['by_app']] == [('$today', 'Alpha', 2, 1)]" \
    "traffic: Alpha's downloads per day"
check_json "$work/t1.json" "d['by_app'][0]['bytes'] == 2 * $(stat -c %s "$work/Alpha-alpha-gfx1-2-3.psdb") + 100" \
    "traffic: bytes are two whole blobs and a 100-byte range"
check_json "$work/t1.json" "[(r['family'], r['complete']) for r in d['by_family']] == [('alpha-gfx1', 2)]" \
    "traffic: per family"
check_json "$work/t1.json" "sorted((r['app'], r['hits'], r['misses']) for r in d['resolves']) == [('Alpha', 4, 3), ('Beta', 0, 2)]" \
    "traffic: resolves per app"
curl -sf "$url/v1/stats/matrix?history=true" >"$work/m1.json" || fail "matrix"
check_json "$work/m1.json" 'd["apps"] == ["Alpha", "Beta"] and sorted(d["families"]) == ["alpha-gfx1", "beta-gfx2", "beta-gfx3"]' \
    "matrix: apps and families"
check_json "$work/m1.json" '[(c["app"], c["family"], c.get("active_serial"), c["psdbs"], c["retired"], sorted(h["state"] for h in c["history"])) for c in d["cells"]] == [("Alpha", "alpha-gfx1", 3, 3, 0, ["superseded", "superseded"]), ("Beta", "beta-gfx2", 1, 1, 0, []), ("Beta", "beta-gfx3", None, 0, 1, ["retired"])]' \
    "matrix: cells with their active, superseded and retired PSDBs"
check_json "$work/m1.json" 'd["cells"][0]["published_by"] == "ci-publisher" and d["cells"][0]["age_s"] >= 0' \
    "matrix: who published and the age"
curl -sf "$url/v1/stats/events" >"$work/e1.json" || fail "events"
check_json "$work/e1.json" '[e["event"] for e in d["events"]][:2] == ["retire", "publish"] and d["events"][0]["by"] == "ci-publisher" and len(d["events"]) == 6' \
    "events: the retirement, then the publishes, with who"
curl -sf "$url/v1/stats/missing" >"$work/x1.json" || fail "missing"
check_json "$work/x1.json" "[(m['app'], m['family'], m['requests'], m['days']) for m in d['missing']] == [('Alpha', 'alpha-gfx9', 3, [{'day': '$today', 'requests': 3}]), ('Beta', 'beta-gfx2', 2, [{'day': '$today', 'requests': 2}])]" \
    "missing: most asked first, with counts per day"

# /metrics: top 1 application by name, the rest as "other"; promtool accepts the exposition.
curl -sf "$url/metrics" >"$work/metrics.txt" || fail "metrics"
grep -qx 'psdbd_demand_resolves_total{app="Alpha",result="hit"} 4' "$work/metrics.txt" ||
    fail "metrics: Alpha's hits"
grep -qx 'psdbd_demand_resolves_total{app="other",result="miss"} 2' "$work/metrics.txt" ||
    fail "metrics: Beta is not folded into other with --stats-top-apps 1"
grep -q 'app="Beta"' "$work/metrics.txt" && fail "metrics: more applications named than the top 1"
grep -qx 'psdbd_demand_downloads_total{app="Alpha",kind="partial"} 1' "$work/metrics.txt" ||
    fail "metrics: Alpha's partial download"
if command -v promtool >/dev/null; then
    promtool check metrics <"$work/metrics.txt" || fail "promtool check metrics refused /metrics"
else
    echo "stats_test: promtool is not installed: exposition format not checked" >&2
fi

# psdb coverage: the table and the endpoint's JSON.
"$psdb" coverage --server "$url" --app Alpha >"$work/cov.txt" || fail "psdb coverage"
grep -q 'alpha-gfx1' "$work/cov.txt" && grep -q 'alpha-gfx9' "$work/cov.txt" ||
    fail "psdb coverage: families missing from the table"
"$psdb" coverage --server "$url" --app Alpha --json >"$work/cov.json" || fail "psdb coverage --json"
check_json "$work/cov.json" "d == load('$work/c1.json')" "psdb coverage --json is not the endpoint's JSON"
st=0
"$psdb" coverage --server "$url" --app Nobody >/dev/null 2>"$work/cov.err" || st=$?
[ "$st" -eq 3 ] || fail "psdb coverage of an unknown application exits $st, not 3"
grep -q 'Nobody' "$work/cov.err" || fail "psdb coverage: the error does not name the application"

# Names that are not names (not UTF-8, a bidirectional override) are refused before anything is
# recorded; a name longer than the recorded limit (256 bytes) is counted in the day's aggregate
# only: the reports show it as the null ("other") entry, never by name.
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/resolve?app=bad%FF&app_version=1.0.0.0&family=f%FE&abi_min=1&abi_max=1")" = 400 ] ||
    fail "a resolve of a name that is not UTF-8 is not 400"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/resolve?app=Demo%E2%80%AEgnp&app_version=1.0.0.0&family=f&abi_min=1&abi_max=1")" = 400 ] ||
    fail "a resolve of a name with U+202E is not 400"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/stats/coverage?app=bad%FF")" = 400 ] ||
    fail "coverage of a name that is not UTF-8 is not 400"
long=$(printf 'L%.0s' $(seq 300))
[ "$(resolve "$long" alpha-gfx9 1 1)" = 404 ] || fail "a resolve of a 300-byte name is not a 404"
flush
curl -sf "$url/v1/stats/missing" >"$work/x3.json" || fail "missing after a resolve of a bad name"
check_json "$work/x3.json" 'len(d["missing"]) == 2 and d["other_requests"] == 1' \
    "a refused or over-long name was recorded by name, or the long one not in other_requests"
curl -sf "$url/v1/stats/traffic" >"$work/t5.json" || fail "traffic after a long name"
check_json "$work/t5.json" "[(r['app'], r['misses']) for r in d['resolves'] if r['app'] is None] == [(None, 1)]" \
    "traffic: the long name's miss is not the day's null entry"
curl -sf "$url/metrics" >"$work/metrics2.txt" || fail "metrics"
grep -qx 'psdbd_stats_dropped_total 1' "$work/metrics2.txt" || fail "the long name was not counted as dropped"

# kill -9 after a flush: the flushed counts are there after a restart; the unflushed one is lost
# (at most one flush interval, as documented).
[ "$(resolve Alpha alpha-gfx9 5 6)" = 404 ] || fail "miss"
kill9
start
curl -sf "$url/v1/stats/coverage?app=Alpha" >"$work/c2.json" || fail "coverage after kill -9"
check_json "$work/c2.json" 'd["missing"][0]["requests"] == 3' "kill -9: the flushed counts are gone"

# A clean shutdown flushes what it holds.
for _ in 1 2; do [ "$(resolve Alpha alpha-gfx9 5 6)" = 404 ] || fail "miss"; done
stop
start
curl -sf "$url/v1/stats/coverage?app=Alpha" >"$work/c3.json" || fail "coverage after restart"
check_json "$work/c3.json" 'd["missing"][0]["requests"] == 5' "SIGTERM: the held counts were not flushed"

# Publishing what was missing takes it off the list.
publish Alpha alpha-gfx9 5 1 >/dev/null
curl -sf "$url/v1/stats/coverage?app=Alpha" >"$work/c4.json" || fail "coverage after publish"
check_json "$work/c4.json" 'd["missing"] == [] and len(d["covered"]) == 2' \
    "a miss that now resolves is still listed as missing"
stop

# A scoped token sees its applications only, inside every report (tokens are checked where
# readers need one).
start --readers-need-token
betatok=$("$psdbd" token create --data-dir "$data" "${index[@]}" --role reader --scope 'Beta' --name beta-only)
curl -sf -H "Authorization: Bearer $betatok" "$url/v1/stats/missing" >"$work/x2.json" || fail "scoped"
check_json "$work/x2.json" '[m["app"] for m in d["missing"]] == ["Beta"]' "scope: missing shows Alpha"
curl -sf -H "Authorization: Bearer $betatok" "$url/v1/stats/traffic" >"$work/t2.json" || fail "scoped"
check_json "$work/t2.json" 'd["by_app"] == [] and d["by_family"] == []' "scope: Alpha's downloads leak"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $betatok" "$url/v1/stats/coverage?app=Alpha")" = 403 ] ||
    fail "scope: coverage of another application is not 403"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/stats/matrix")" = 401 ] ||
    fail "stats without a token where readers need one is not 401"
stop

# Recording off: nothing is counted, and the reports say so.
start --stats false
[ "$(resolve Beta beta-gfx2 7 7 2.0.0.0)" = 404 ] || fail "beta abi 7 resolved"
curl -sf -o /dev/null "$url/v1/blobs/$blob" || fail "download"
curl -sf "$url/v1/stats/traffic" >"$work/t3.json" || fail "traffic"
check_json "$work/t3.json" 'd["recording"] is False' "stats false: the reports say recording is on"
grep -q psdbd_demand_ <(curl -sf "$url/metrics") && fail "stats false: demand series in /metrics"
stop
start
curl -sf "$url/v1/stats/traffic" >"$work/t4.json" || fail "traffic"
check_json "$work/t4.json" '[r["complete"] for r in d["by_app"]] == [2] and sorted((r["app"], r["misses"]) for r in d["resolves"] if r["app"]) == [("Alpha", 5), ("Beta", 2)]' \
    "stats false still recorded"
stop
run_checks
echo "stats_test: demand is recorded, flushed, survives kill -9 and restarts, scoped, in /metrics"
