#!/usr/bin/env bash
# replay_gate_test.sh - psdb replay as a CI gate (schema/REPLAY.md): --min-hit-rate passes at and
# above the measured rate's threshold and exits 3 below it, refuses malformed thresholds with one
# line; --junit writes well-formed JUnit XML (checked with xmllint) with the documented test case
# and failure counts, one failing test case per missed pipeline named by its SODB key with its
# reason, a cap on listed misses, escaped names, replaced atomically also when the gate fails.
# Env: PSDB = the psdb tool.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
command -v xmllint >/dev/null || { echo "replay_gate_test: xmllint not found (Debian: libxml2-utils)" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "replay_gate_test: sqlite3 not found" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "replay_gate_test: $*" >&2; exit 1; }
xp() { xmllint --xpath "$1" "$2"; }
target=(--family contoso-gfx9 --abi-min 1 --abi-max 5 --cost-ns-per-kib 1)

# run EXPECTED_RC ARGS...: runs psdb replay, stdout to $dir/out, stderr to $dir/err; checks the rc.
run() {
    local want=$1 rc=0
    shift
    "$PSDB" replay "$@" >"$dir/out" 2>"$dir/err" || rc=$?
    [ "$rc" -eq "$want" ] ||
        fail "replay $*: exit $rc, want $want; stdout: $(cat "$dir/out"); stderr: $(cat "$dir/err")"
}

# A corpus of 100 entries (19 compute, 76 graphics, 5 state objects), its full PSDB, and a PSDB
# compiled without 5 of them (1 compute, 3 graphics, 1 state object): exactly 95 hits of 100.
"$PSDB" synth --app Game --app-version 1.0.0.0 --pipelines 95 --state-objects 5 --seed 5 \
    -o "$dir/full.sodb" >/dev/null
cp "$dir/full.sodb" "$dir/part.sodb"
sqlite3 "$dir/part.sodb" "
    CREATE TABLE gone AS SELECT seq FROM (SELECT seq FROM entries WHERE kind = 2 ORDER BY seq LIMIT 3 OFFSET 10)
        UNION ALL SELECT seq FROM (SELECT seq FROM entries WHERE kind = 1 ORDER BY seq LIMIT 1 OFFSET 2)
        UNION ALL SELECT seq FROM (SELECT seq FROM entries WHERE kind = 3 ORDER BY seq LIMIT 1);"
sqlite3 "$dir/part.sodb" "SELECT lower(hex(object_key)) || ' v' || version || ' ' || kind FROM entries
    WHERE seq IN (SELECT seq FROM gone) ORDER BY seq" >"$dir/gone.txt"
sqlite3 "$dir/part.sodb" "DELETE FROM entries WHERE seq IN (SELECT seq FROM gone); DROP TABLE gone;"
[ "$(wc -l <"$dir/gone.txt")" -eq 5 ] || fail "want 5 removed entries: $(cat "$dir/gone.txt")"
"$PSDB" compile "$dir/full.sodb" --family contoso-gfx9 --abi 3 --cost-ns-per-kib 0 \
    -o "$dir/full.psdb" >/dev/null
"$PSDB" compile "$dir/part.sodb" --family contoso-gfx9 --abi 3 --cost-ns-per-kib 0 \
    -o "$dir/part.psdb" >/dev/null

# test_replay_gate__full_coverage_passes_at_one: every entry a hit; the gate at 1 passes and the
# report has the gate and the three kinds, nothing failing.
run 0 "$dir/full.sodb" "${target[@]}" --psdb "$dir/full.psdb" --min-hit-rate 1 --junit "$dir/full.xml"
grep -q 'PSDB missed 0, hit rate 100.0%' "$dir/out" || fail "full: $(cat "$dir/out")"
grep -q '^hit rate 1.000000 (100 of 100 creations were PSDB hits) meets --min-hit-rate 1$' "$dir/out" ||
    fail "full: no pass line: $(cat "$dir/out")"
xmllint --noout "$dir/full.xml" || fail "full: not well-formed XML"
[ "$(xp 'string(/testsuite/@tests)' "$dir/full.xml")" = 4 ] || fail "full: tests != 4"
[ "$(xp 'string(/testsuite/@failures)' "$dir/full.xml")" = 0 ] || fail "full: failures != 0"
[ "$(xp 'count(//testcase)' "$dir/full.xml")" = 4 ] || fail "full: testcases != 4"
[ "$(xp 'count(//failure|//error)' "$dir/full.xml")" = 0 ] || fail "full: failing cases"
for k in compute graphics state_objects; do
    [ "$(xp "count(//testcase[@classname='psdb.replay.kind'][@name='$k'])" "$dir/full.xml")" = 1 ] ||
        fail "full: no test case for kind $k"
done
run 0 "$dir/full.sodb" "${target[@]}" --psdb "$dir/full.psdb" --min-hit-rate 100%

# test_replay_gate__threshold_exact_at_the_boundary: 95 of 100 is exactly 0.95: equal passes, a
# hair above fails with status 3 and names the measured rate and the threshold.
for r in 0.95 95% 0.9 0 0.949999999 94.9999999%; do
    run 0 "$dir/full.sodb" "${target[@]}" --psdb "$dir/part.psdb" --min-hit-rate "$r"
    grep -q "^hit rate 0.950000 (95 of 100 creations were PSDB hits) meets" "$dir/out" ||
        fail "at $r: $(cat "$dir/out")"
done
for r in 0.951 95.01% 0.950000001 1 100%; do
    run 3 "$dir/full.sodb" "${target[@]}" --psdb "$dir/part.psdb" --min-hit-rate "$r"
    grep -q '^psdb replay: hit rate 0.950000 (95 of 100 creations were PSDB hits) is below --min-hit-rate ' "$dir/err" ||
        fail "below $r: stderr: $(cat "$dir/err")"
    [ "$(wc -l <"$dir/err")" -eq 1 ] || fail "below $r: want one stderr line: $(cat "$dir/err")"
done
grep -q 'is below --min-hit-rate 1$' "$dir/err" || fail "threshold not printed: $(cat "$dir/err")"
# Without a gate the same replay succeeds: the gate alone decides status 3.
run 0 "$dir/full.sodb" "${target[@]}" --psdb "$dir/part.psdb"
grep -q '^missed by reason: partial_hit 3, not_in_psdb 2$' "$dir/out" || fail "reasons: $(cat "$dir/out")"

# test_replay_gate__junit_counts_and_missed_pipelines: a failing gate still writes the report, over
# an older file, atomically (no temporary left beside it). 1 gate + 3 kinds + 5 missed = 9 cases;
# failing: the gate, compute (18/19) and state objects (4/5) below 0.951, and the 5 misses.
echo "not a report" >"$dir/part.xml"
run 3 "$dir/full.sodb" "${target[@]}" --psdb "$dir/part.psdb" --min-hit-rate 0.951 --junit "$dir/part.xml"
xmllint --noout "$dir/part.xml" || fail "part: not well-formed XML"
[ "$(xp 'string(/testsuite/@tests)' "$dir/part.xml")" = 9 ] || fail "part: tests != 9"
[ "$(xp 'string(/testsuite/@failures)' "$dir/part.xml")" = 8 ] || fail "part: failures != 8"
[ "$(xp 'string(/testsuite/@errors)' "$dir/part.xml")" = 0 ] || fail "part: errors != 0"
[ "$(xp 'count(//testcase)' "$dir/part.xml")" = 9 ] || fail "part: testcases != 9"
[ "$(xp 'count(//testcase[failure])' "$dir/part.xml")" = 8 ] || fail "part: failing testcases != 8"
[ "$(xp 'count(//testcase[@classname="psdb.replay"]/failure[@type="hit_rate"])' "$dir/part.xml")" = 1 ] ||
    fail "part: the gate's test case does not fail"
[ "$(xp 'string(//testcase[@name="graphics"]/failure/@type)' "$dir/part.xml")" = "" ] ||
    fail "part: graphics (73/76) failed at 0.951"
[ "$(xp 'string(//property[@name="hit_rate"]/@value)' "$dir/part.xml")" = 0.950000 ] || fail "part: hit_rate"
[ "$(xp 'string(//property[@name="min_hit_rate"]/@value)' "$dir/part.xml")" = 0.951 ] || fail "part: min_hit_rate"
[ "$(xp 'count(//testcase[starts-with(@classname,"psdb.replay.missed.")])' "$dir/part.xml")" = 5 ] ||
    fail "part: want 5 missed-pipeline test cases"
kind_name() { case $1 in 1) echo compute ;; 2) echo graphics ;; 3) echo state_objects ;; esac; }
while read -r key ver kind; do
    k=$(kind_name "$kind")
    t=$(xp "string(//testcase[@classname='psdb.replay.missed.$k'][@name='$key $ver']/failure/@type)" "$dir/part.xml")
    case $t in partial_hit | not_in_psdb) ;; *) fail "part: missed $k $key: failure type '$t'" ;; esac
    m=$(xp "string(//testcase[@name='$key $ver']/failure/@message)" "$dir/part.xml")
    [[ $m == *"compile units found; "*"first missing unit "* ]] || fail "part: $key: message '$m'"
done <"$dir/gone.txt"
ls "$dir" | grep -q '^part\.xml\.' && fail "a temporary report was left: $(ls "$dir")"

# test_replay_gate__json_counts_and_reasons: the same figures, machine-readable.
run 3 "$dir/full.sodb" "${target[@]}" --psdb "$dir/part.psdb" --min-hit-rate 0.951 --json
j=$(cat "$dir/out")
for want in '"created":100,"hits":95,"hit_rate":0.95' '"min_hit_rate":0.951' '"gate":"failed"' \
    '"compute":{"entries":19,"created":19,"hits":18,"psdb_missed":1' \
    '"state_objects":{"entries":5,"created":5,"hits":4,"psdb_missed":1' \
    '"miss_reasons":{"no_psdb":0,"not_searched":0,"lookup_error":0,"partial_hit":3,"not_in_psdb":2}' \
    '"missed_not_listed":0' '"pipeline_states":{"created":95,"psdb_missed":4'; do
    [[ $j == *"$want"* ]] || fail "json lacks $want: $j"
done
[ "$(grep -o '"reason":"' "$dir/out" | wc -l)" -eq 5 ] || fail "json: want 5 listed misses: $j"

# test_replay_gate__listed_misses_are_capped: beyond --max-listed the misses are counted and one
# failing test case says how many are not listed; the default cap is 1000.
run 0 "$dir/full.sodb" "${target[@]}" --psdb "$dir/part.psdb" --max-listed 2 --junit "$dir/cap.xml"
xmllint --noout "$dir/cap.xml" || fail "cap: not well-formed XML"
[ "$(xp 'count(//testcase[starts-with(@classname,"psdb.replay.missed.")])' "$dir/cap.xml")" = 2 ] ||
    fail "cap: want 2 listed misses"
[ "$(xp 'string(//testcase[@classname="psdb.replay.missed"]/@name)' "$dir/cap.xml")" = "3 more not listed" ] ||
    fail "cap: no 'not listed' test case"
[ "$(xp 'string(//property[@name="not_listed"]/@value)' "$dir/cap.xml")" = 3 ] || fail "cap: not_listed"
# Without --min-hit-rate each kind is held to 1: 3 kinds + 2 listed + 1 not-listed, all failing.
[ "$(xp 'string(/testsuite/@tests)' "$dir/cap.xml")" = 6 ] || fail "cap: tests != 6"
[ "$(xp 'string(/testsuite/@failures)' "$dir/cap.xml")" = 6 ] || fail "cap: failures != 6"
"$PSDB" synth --app Big --app-version 1.0.0.0 --pipelines 2001 --seed 2 -o "$dir/big.sodb" >/dev/null
run 3 "$dir/big.sodb" "${target[@]}" --min-hit-rate 0.5 --junit "$dir/big.xml"
xmllint --noout "$dir/big.xml" || fail "big: not well-formed XML"
[ "$(xp 'count(//testcase[starts-with(@classname,"psdb.replay.missed.")])' "$dir/big.xml")" = 1000 ] ||
    fail "big: want 1000 listed misses"
[ "$(xp 'string(//property[@name="not_listed"]/@value)' "$dir/big.xml")" = 1001 ] || fail "big: not_listed"
[ "$(xp 'string(//testcase[@classname="psdb.replay.missed"]/failure/@message)' "$dir/big.xml")" = \
    "1001 more missed or failed creations are not listed: the report lists the first 1000 (--max-listed)" ] ||
    fail "big: the report does not say that misses are not listed"
[ "$(xp 'count(//failure[@type="no_psdb"][starts-with(@message,"no PSDB selected: neither --psdb nor --exe-path")])' "$dir/big.xml")" = 1000 ] ||
    fail "big: misses without a PSDB do not say so"

# test_replay_gate__rate_never_rounded_up: 2000 of 2001 is 99.95%: never shown as 100.0% or
# 1.000000, and below a gate of 1.
cp "$dir/big.sodb" "$dir/big1.sodb"
sqlite3 "$dir/big1.sodb" "DELETE FROM entries WHERE seq = (SELECT max(seq) FROM entries)"
"$PSDB" compile "$dir/big1.sodb" --family contoso-gfx9 --abi 3 --cost-ns-per-kib 0 \
    -o "$dir/big1.psdb" >/dev/null
run 3 "$dir/big.sodb" "${target[@]}" --psdb "$dir/big1.psdb" --min-hit-rate 1
grep -q 'PSDB missed 1, hit rate 99.9%,' "$dir/out" || fail "99.95% shown as: $(cat "$dir/out")"
grep -q 'hit rate 0.999500 (2000 of 2001 creations were PSDB hits) is below --min-hit-rate 1$' "$dir/err" ||
    fail "99.95% gate: $(cat "$dir/err")"

# test_replay_gate__lookup_errors_and_no_registration_are_reasons: a damaged value in the PSDB is
# a lookup error naming the status; an exe path with nothing registered says so.
cp "$dir/full.psdb" "$dir/dmg.psdb"
sqlite3 "$dir/dmg.psdb" "UPDATE blobs SET data = zeroblob(length(data)) WHERE id =
    (SELECT blob_id FROM value_entries WHERE type = 0 ORDER BY key LIMIT 1)"
run 3 "$dir/full.sodb" "${target[@]}" --psdb "$dir/dmg.psdb" --min-hit-rate 1 --junit "$dir/dmg.xml"
n=$(xp 'count(//testcase/failure[@type="lookup_error"][contains(@message,"PSDB_E_CACHE_CORRUPT")])' "$dir/dmg.xml")
[ "$n" -ge 1 ] && [ "$n" = "$(xp 'string(//property[@name="psdb_missed"]/@value)' "$dir/dmg.xml")" ] ||
    fail "damaged PSDB: $n lookup errors: $(cat "$dir/out")"
mkdir "$dir/reg"
run 3 "$dir/full.sodb" "${target[@]}" --exe-path /games/none/game.exe --registry "$dir/reg" \
    --min-hit-rate 0.5 --junit "$dir/reg.xml"
[ "$(xp 'count(//failure[@type="no_psdb"][starts-with(@message,"no PSDB selected: none registered for --exe-path")])' "$dir/reg.xml")" = 100 ] ||
    fail "unregistered exe: reasons"

# test_replay_gate__failed_creation_is_an_error: an entry whose description does not decode (a
# reserved field set, its key recomputed) fails the run with status 1 even when the gate passes,
# and is an <error> test case in the report, as is its kind.
cp "$dir/full.sodb" "$dir/bad.sodb"
hex=$(sqlite3 "$dir/bad.sodb" "SELECT hex(description) FROM entries WHERE kind = 1 ORDER BY seq LIMIT 1")
bad="${hex:0:16}01000000${hex:24}"
sqlite3 "$dir/bad.sodb" "SELECT writefile('$dir/bad.bin', X'$bad')" >/dev/null
key=$(sha256sum "$dir/bad.bin" | cut -c1-64)
sqlite3 "$dir/bad.sodb" "INSERT INTO entries (kind, object_key, version, description)
    VALUES (1, X'$key', 1, X'$bad')"
run 1 "$dir/bad.sodb" "${target[@]}" --psdb "$dir/full.psdb" --min-hit-rate 0.5 --junit "$dir/bad1.xml"
grep -q '^psdb replay: 1 creations failed (first: decode failed: PSDB_E_CACHE_CORRUPT' "$dir/err" ||
    fail "failed creation: $(cat "$dir/err")"
xmllint --noout "$dir/bad1.xml" || fail "failed creation: not well-formed XML"
[ "$(xp 'string(/testsuite/@errors)' "$dir/bad1.xml")" = 2 ] || fail "failed creation: errors != 2"
[ "$(xp "count(//testcase[@classname='psdb.replay.missed.compute'][@name='$key v1']/error[@type='creation_failed'])" "$dir/bad1.xml")" = 1 ] ||
    fail "failed creation: no error test case for $key"
[ "$(xp 'count(//testcase[@name="compute"]/error)' "$dir/bad1.xml")" = 1 ] || fail "failed creation: kind"
run 1 "$dir/bad.sodb" "${target[@]}" --psdb "$dir/part.psdb" --min-hit-rate 1
grep -q 'is below --min-hit-rate 1$' "$dir/err" || fail "failed creation below the gate: $(cat "$dir/err")"

# test_replay_gate__bad_thresholds_refused: one line naming the option and the value, status 1,
# no report written.
for r in '' abc -0.5 +0.5 1.5 101% 100.1% 95 0x1 1e-1 ' 0.9' '0.9 ' nan inf .5 5. 0.1234567891 \
    99.12345678% % 50%% '0,9' 1/2; do
    run 1 "$dir/full.sodb" "${target[@]}" --psdb "$dir/full.psdb" --min-hit-rate "$r" --junit "$dir/bad.xml"
    [ "$(wc -l <"$dir/err")" -eq 1 ] || fail "bad '$r': want one stderr line: $(cat "$dir/err")"
    grep -q "^psdb replay: --min-hit-rate '" "$dir/err" || fail "bad '$r': $(cat "$dir/err")"
    [ ! -e "$dir/bad.xml" ] || fail "bad '$r': a report was written"
done
run 1 "$dir/full.sodb" "${target[@]}" --min-hit-rate 95
grep -q "above 1 (a percentage is written with %, as in 95%)" "$dir/err" || fail "95: $(cat "$dir/err")"
for r in 0 1 1.0 0% 100% 99.5% 0.123456789 12.3456789% 007%; do
    run 0 "$dir/full.sodb" "${target[@]}" --psdb "$dir/full.psdb" --min-hit-rate "$r"
done
run 1 "$dir/full.sodb" "${target[@]}" --max-listed -1
run 1 "$dir/full.sodb" "${target[@]}" --max-listed 1000001

# test_replay_gate__junit_escapes_names: an application name and a path with markup characters,
# a control character, U+FFFF and a byte that is not UTF-8 give well-formed XML that shows them.
# The tool's synth refuses such a name (schema/HTTP.md, "Names"); a capture records whatever the
# application calls itself, so the SODB gets it written into its header directly.
odd=$'Q&A <"\'>\x01\xff\xef\xbf\xbf'
"$PSDB" synth --app OddName --app-version 1.0.0.0 --pipelines 5 -o "$dir/odd.sodb" >/dev/null
python3 -c 'import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("UPDATE header SET app_name = CAST(? AS TEXT)", (b"Q&A <\"\x27>\x01\xff\xef\xbf\xbf",))
db.commit()' "$dir/odd.sodb" || fail "odd: write the name into the SODB"
mkdir "$dir/a&b<c>"
cp "$dir/full.psdb" "$dir/a&b<c>/\"p'.psdb"
run 0 "$dir/odd.sodb" "${target[@]}" --psdb "$dir/a&b<c>/\"p'.psdb" --junit "$dir/a&b<c>/r.xml"
xmllint --noout "$dir/a&b<c>/r.xml" || fail "odd: not well-formed XML"
[ "$(xp 'string(//property[@name="application"]/@value)' "$dir/a&b<c>/r.xml")" = 'Q&A <"'"'"'>\x01\xff\xef\xbf\xbf' ] ||
    fail "odd: application: $(xp 'string(//property[@name="application"]/@value)' "$dir/a&b<c>/r.xml")"
[ "$(xp 'string(//property[@name="psdb"]/@value)' "$dir/a&b<c>/r.xml")" = "$dir/a&b<c>/\"p'.psdb" ] ||
    fail "odd: psdb path"

# test_replay_gate__junit_write_failure_is_an_error: a report that cannot be written is status 1
# with one line naming it, even when the gate passes.
run 1 "$dir/full.sodb" "${target[@]}" --psdb "$dir/full.psdb" --min-hit-rate 1 --junit "$dir/no/such/r.xml"
grep -q "^psdb replay: --junit: $dir/no/such/r.xml: cannot create a temporary file beside it" "$dir/err" ||
    fail "unwritable: $(cat "$dir/err")"

# test_replay_gate__vulkan_entries_skipped: the reference driver creates no Vulkan entries: they
# are counted as skipped (not failed); nothing created is hit rate 0. Needs glslang (synth).
if "$PSDB" synth --api vulkan --app VkGame --app-version 1.0.0.0 --pipelines 6 -o "$dir/vk.sodb" >/dev/null 2>&1; then
    run 0 "$dir/vk.sodb" "${target[@]}" --junit "$dir/vk.xml"
    grep -q 'failed 0' "$dir/out" || fail "vulkan: $(cat "$dir/out")"
    xmllint --noout "$dir/vk.xml" || fail "vulkan: not well-formed XML"
    [ "$(xp 'count(//testcase[@classname="psdb.replay.kind"]/skipped)' "$dir/vk.xml")" = 2 ] ||
        fail "vulkan: kinds not skipped"
    [ "$(xp 'string(/testsuite/@skipped)' "$dir/vk.xml")" = 2 ] || fail "vulkan: skipped != 2"
    run 3 "$dir/vk.sodb" "${target[@]}" --min-hit-rate 0.01
    run 0 "$dir/vk.sodb" "${target[@]}" --min-hit-rate 0
else
    echo "replay_gate_test: psdb synth --api vulkan unavailable: Vulkan case not run"
fi
echo "replay_gate_test: ok"
