#!/usr/bin/env bash
# vulkan_replay_gate_test.sh - `psdb replay --backend vulkan` as a CI gate (schema/REPLAY.md
# section 5), on the machine's device (lavapipe in CI): vkdemo captured, its PSDB and one compiled
# without two of its pipelines; --min-hit-rate passes at and below the measured rate and exits 3
# above it; --junit is well-formed with one failing test case per missed pipeline and its reason;
# --json carries the counts, reasons and missed pipelines beside the timing figures; a pipeline
# that does not decode is an error; D3D12 entries are skipped. Where psdbd is built: the PSDB
# installed for vkdemo is found with --exe-path as the layer finds it (links resolved), a PSDB
# installed without two pipelines misses them, a tampered or unverified installation is refused
# (every pipeline a "refused" miss), an executable without one is no_psdb. Refused arguments say
# why in one line.
# Env: PSDB, VKDEMO, PSDB_LAYER_DIR, PSDBD (optional), PSDB_SANITIZE. Exit 77 without a device.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${VKDEMO:?set VKDEMO to the vkdemo program}"
: "${PSDB_LAYER_DIR:?set PSDB_LAYER_DIR to the folder of VkLayer_psdb_delivery.json}"
command -v xmllint >/dev/null || { echo "vulkan_replay_gate_test: xmllint not found (Debian: libxml2-utils)" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "vulkan_replay_gate_test: sqlite3 not found" >&2; exit 1; }
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh" # vk_start_psdbd
fail() { echo "vulkan_replay_gate_test: $*" >&2; exit 1; }
xp() { xmllint --xpath "$1" "$2"; }

lvp=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -f "$lvp" ]; then
    export VK_ICD_FILENAMES=$lvp VK_DRIVER_FILES=$lvp
fi
if [ -n "${PSDB_SANITIZE:-}" ]; then
    export LSAN_OPTIONS=exitcode=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}
fi
export XDG_CACHE_HOME="$dir/cache" PSDB_REGISTRY_DIR="$dir/registry"
unset MESA_SHADER_CACHE_DIR MESA_DISK_CACHE_READ_ONLY_FOZ_DBS MESA_DISK_CACHE_SINGLE_FILE
unset MESA_SHADER_CACHE_DISABLE PSDB_VULKAN_STRATEGY

rc=0
MESA_SHADER_CACHE_DISABLE=true "$VKDEMO" >"$dir/cold.txt" 2>"$dir/cold.err" || rc=$?
if [ "$rc" = 77 ]; then
    echo "vulkan_replay_gate_test: skipped: $(cat "$dir/cold.err")"
    exit 77
fi
[ "$rc" = 0 ] || fail "cold run failed ($rc): $(cat "$dir/cold.err")"

# run EXPECTED_RC ARGS...: psdb replay --backend vulkan, stdout to $dir/out, stderr to $dir/err.
run() {
    local want=$1 rc=0
    shift
    "$PSDB" replay --backend vulkan "$@" >"$dir/out" 2>"$dir/err" || rc=$?
    [ "$rc" -eq "$want" ] ||
        fail "replay $*: exit $rc, want $want; stdout: $(cat "$dir/out"); stderr: $(cat "$dir/err")"
    ! grep -q -e 'ERROR: AddressSanitizer' -e 'runtime error:' "$dir/err" ||
        fail "replay $*: sanitizer report: $(cat "$dir/err")"
}
# The JSON (indented) on one line, without the indentation: strings keep their spaces.
json() { sed -e 's/^ *//' -e 's/": /":/g' "$dir/out" | tr -d '\n'; }

sodb="$dir/app.sodb"
MESA_SHADER_CACHE_DISABLE=true VK_LAYER_PATH="$PSDB_LAYER_DIR" \
    VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery PSDB_CAPTURE="$sodb" "$VKDEMO" >/dev/null \
    2>"$dir/capture.err" || fail "capture run failed: $(cat "$dir/capture.err")"
npipe=$(sqlite3 "$sodb" 'SELECT count(*) FROM entries')
ncomp=$(sqlite3 "$sodb" 'SELECT count(*) FROM entries WHERE kind = 4')
[ "$npipe" -ge 4 ] && [ "$ncomp" -ge 2 ] || fail "capture: $npipe pipelines, $ncomp compute"
# The PSDB of every pipeline, and one compiled without the second compute and the second graphics
# pipeline: exactly 2 misses of npipe.
cp "$sodb" "$dir/part.sodb"
sqlite3 "$dir/part.sodb" "
    CREATE TABLE gone AS SELECT seq FROM (SELECT seq FROM entries WHERE kind = 4 ORDER BY seq LIMIT 1 OFFSET 1)
        UNION ALL SELECT seq FROM (SELECT seq FROM entries WHERE kind = 5 ORDER BY seq LIMIT 1 OFFSET 1);"
sqlite3 "$dir/part.sodb" "SELECT lower(hex(object_key)) || ' v' || version || ' ' || kind FROM entries
    WHERE seq IN (SELECT seq FROM gone) ORDER BY seq" >"$dir/gone.txt"
sqlite3 "$dir/part.sodb" "DELETE FROM entries WHERE seq IN (SELECT seq FROM gone); DROP TABLE gone;"
[ "$(wc -l <"$dir/gone.txt")" -eq 2 ] || fail "want 2 removed entries: $(cat "$dir/gone.txt")"
for p in app part; do
    "$PSDB" compile "$dir/$p.sodb" --backend vulkan -o "$dir/$p.psdb" >/dev/null 2>"$dir/compile.err" ||
        fail "compile $p: $(cat "$dir/compile.err")"
done
hits=$((npipe - 2))
# hits / npipe as a fraction cut to 6 decimals, and a threshold a millionth above it.
rate=$(awk -v h="$hits" -v n="$npipe" 'BEGIN { printf "0.%06d", int(h * 1000000 / n) }')
above=$(awk -v h="$hits" -v n="$npipe" 'BEGIN { printf "0.%06d", int(h * 1000000 / n) + 1 }')
kind_name() { case $1 in 4) echo vulkan_compute ;; 5) echo vulkan_graphics ;; esac; }

# test_vulkan_replay_gate__psdb_missing_pipelines_gates_and_reports: the gate passes at and below
# the measured rate and exits 3 above it (one stderr line); the JUnit report lists each missed
# pipeline by its SODB key as a failing not_in_psdb test case; the JSON has the counts and reasons
# beside the timing figures.
run 0 "$sodb" "$dir/app.psdb" --min-hit-rate 1 --junit "$dir/full.xml"
grep -q "^hit rate 1.000000 ($npipe of $npipe creations were PSDB hits) meets --min-hit-rate 1$" "$dir/out" ||
    fail "full: $(cat "$dir/out")"
xmllint --noout "$dir/full.xml" || fail "full: not well-formed XML"
[ "$(xp 'count(//failure|//error)' "$dir/full.xml")" = 0 ] || fail "full: failing cases: $(cat "$dir/full.xml")"
for r in 0.5 50% "$rate" 0; do
    run 0 "$sodb" "$dir/part.psdb" --min-hit-rate "$r"
    grep -q "^hit rate $rate ($hits of $npipe creations were PSDB hits) meets --min-hit-rate" "$dir/out" ||
        fail "at $r: $(cat "$dir/out")"
    grep -q "^created $npipe, PSDB missed 2, hit rate .*, failed 0$" "$dir/out" || fail "at $r: $(cat "$dir/out")"
    grep -q '^missed by reason: not_in_psdb 2$' "$dir/out" || fail "at $r: reasons: $(cat "$dir/out")"
    grep -q '^psdb  ' "$dir/out" || fail "at $r: no timing of the PSDB pass: $(cat "$dir/out")"
done
for r in "$above" 1 1.0 100%; do
    run 3 "$sodb" "$dir/part.psdb" --min-hit-rate "$r"
    grep -q "^psdb replay: hit rate $rate ($hits of $npipe creations were PSDB hits) is below --min-hit-rate " "$dir/err" ||
        fail "below $r: stderr: $(cat "$dir/err")"
    [ "$(wc -l <"$dir/err")" -eq 1 ] || fail "below $r: want one stderr line: $(cat "$dir/err")"
done
echo "not a report" >"$dir/part.xml"
run 3 "$sodb" "$dir/part.psdb" --min-hit-rate 1 --junit "$dir/part.xml"
xmllint --noout "$dir/part.xml" || fail "part: not well-formed XML"
# The gate, the two kinds and the two misses; failing: the gate, both kinds (below 1), both misses.
[ "$(xp 'string(/testsuite/@tests)' "$dir/part.xml")" = 5 ] || fail "part: tests != 5: $(cat "$dir/part.xml")"
[ "$(xp 'string(/testsuite/@failures)' "$dir/part.xml")" = 5 ] || fail "part: failures != 5"
[ "$(xp 'string(/testsuite/@errors)' "$dir/part.xml")" = 0 ] || fail "part: errors != 0"
[ "$(xp 'count(//testcase[starts-with(@classname,"psdb.replay.missed.")])' "$dir/part.xml")" = 2 ] ||
    fail "part: want 2 missed-pipeline test cases: $(cat "$dir/part.xml")"
[ "$(xp 'string(//property[@name="backend"]/@value)' "$dir/part.xml")" = vulkan ] || fail "part: backend"
[ "$(xp 'string(//property[@name="hit_rate"]/@value)' "$dir/part.xml")" = "$rate" ] || fail "part: hit_rate"
[ "$(xp 'string(//property[@name="psdb"]/@value)' "$dir/part.xml")" = "$dir/part.psdb" ] || fail "part: psdb"
while read -r key ver kind; do
    k=$(kind_name "$kind")
    t=$(xp "string(//testcase[@classname='psdb.replay.missed.$k'][@name='$key $ver']/failure/@type)" "$dir/part.xml")
    [ "$t" = not_in_psdb ] || fail "part: missed $k $key: failure type '$t': $(cat "$dir/part.xml")"
    m=$(xp "string(//testcase[@name='$key $ver']/failure/@message)" "$dir/part.xml")
    [[ $m == "not in the PSDB"* ]] || fail "part: $key: message '$m'"
done <"$dir/gone.txt"
ls "$dir" | grep -q '^part\.xml\.' && fail "a temporary report was left: $(ls "$dir")"
run 3 "$sodb" "$dir/part.psdb" --min-hit-rate 1 --json
j=$(json)
for want in "\"psdb\":{\"pipelines\":$npipe,\"failed\":0,\"hits\":$hits,\"misses\":2" '"speedup":' \
    '"total_s":' '"median_ms":' '"p95_ms":' '"proof_s":' '"device":{"name":"' \
    "\"psdb_file\":\"$dir/part.psdb\"" '"default_psdb_registered":false' '"refused":null' \
    "\"created\":$npipe,\"hits\":$hits,\"hit_rate\":" '"failed":0' '"min_hit_rate":1' \
    '"gate":"failed"' "\"vulkan_compute\":{\"entries\":$ncomp,\"created\":$ncomp,\"hits\":$((ncomp - 1)),\"psdb_missed\":1" \
    '"miss_reasons":{"no_psdb":0,"lookup_error":0,"not_in_psdb":2,"refused":0}' \
    '"missed_not_listed":0' '"skipped":0'; do
    [[ $j == *"$want"* ]] || fail "json lacks $want: $j"
done
# Each pass reports its process's peak RSS: a real figure, not 0.
[[ $j =~ \"cold\":\{[^}]*\"peak_rss_kib\":[1-9][0-9]* && $j =~ \"psdb\":\{[^}]*\"peak_rss_kib\":[1-9][0-9]* ]] ||
    fail "json lacks each pass's peak_rss_kib: $j"
[ "$(grep -o '"reason":"not_in_psdb"' <<<"$j" | wc -l)" -eq 2 ] || fail "json: want 2 listed misses: $j"
while read -r key ver kind; do
    [[ $j == *"\"kind\":\"$(kind_name "$kind")\",\"key\":\"$key\",\"version\":\"${ver#v}\",\"reason\":\"not_in_psdb\""* ]] ||
        fail "json: missed $key not listed: $j"
done <"$dir/gone.txt"
run 0 "$sodb" "$dir/part.psdb" --json --max-listed 1
[ "$(json | grep -o '"reason":"not_in_psdb"' | wc -l)" -eq 1 ] && [[ $(json) == *'"missed_not_listed":1'* ]] ||
    fail "--max-listed 1: $(json)"
# Without a PSDB every pipeline is a no_psdb miss: the gate fails above 0.
run 3 "$sodb" --min-hit-rate 0.1 --json
[[ $(json) != *'"psdb":{'* ]] && [[ $(json) == *"\"created\":$npipe,\"hits\":0"*"\"no_psdb\":$npipe"* ]] ||
    fail "no PSDB: $(json)"
grep -q 'neither a PSDB nor --exe-path' "$dir/out" || fail "no PSDB: message: $(json)"

# test_vulkan_replay_gate__failed_pipeline_is_an_error: an entry that does not decode (a reserved
# word set, its key recomputed) fails the run with status 1 also when the gate passes, and is an
# <error> test case; a D3D12 entry is skipped, not failed.
cp "$sodb" "$dir/bad.sodb"
hex=$(sqlite3 "$dir/bad.sodb" "SELECT hex(description) FROM entries WHERE kind = 4 ORDER BY seq LIMIT 1")
bad="${hex:0:16}01000000${hex:24}"
sqlite3 "$dir/bad.sodb" "SELECT writefile('$dir/bad.bin', X'$bad')" >/dev/null
key=$(sha256sum "$dir/bad.bin" | cut -c1-64)
sqlite3 "$dir/bad.sodb" "INSERT INTO entries (kind, object_key, version, description)
    VALUES (4, X'$key', 1, X'$bad')"
"$PSDB" synth --app D --app-version 1.0.0.0 --pipelines 5 -o "$dir/d3d12.sodb" >/dev/null
sqlite3 "$dir/bad.sodb" "ATTACH '$dir/d3d12.sodb' AS d; INSERT INTO entries (kind, object_key, version,
    description) SELECT kind, object_key, version, description FROM d.entries WHERE kind = 1 LIMIT 1"
run 1 "$dir/bad.sodb" "$dir/app.psdb" --min-hit-rate 0.5 --junit "$dir/bad.xml"
grep -q '^psdb replay: 1 pipelines failed (first: decode failed: the entry does not decode)$' "$dir/err" ||
    fail "failed pipeline: $(cat "$dir/err")"
xmllint --noout "$dir/bad.xml" || fail "failed pipeline: not well-formed XML"
[ "$(xp "count(//testcase[@classname='psdb.replay.missed.vulkan_compute'][@name='$key v1']/error[@type='creation_failed'])" "$dir/bad.xml")" = 1 ] ||
    fail "failed pipeline: no error test case for $key: $(cat "$dir/bad.xml")"
[ "$(xp 'string(//testcase[@name="compute"]/skipped/@message)' "$dir/bad.xml")" = \
    "1 compute entries not created: replay --backend vulkan creates Vulkan entries only" ] ||
    fail "D3D12 entry not skipped: $(cat "$dir/bad.xml")"

# test_vulkan_replay_gate__arguments_refused_with_a_reason: one line, before anything is replayed,
# no report written.
refused() { # WANT-STDERR ARGS...
    local want=$1
    shift
    run 1 "$@" --junit "$dir/never.xml"
    [ "$(cat "$dir/err")" = "$want" ] || fail "$*: stderr '$(cat "$dir/err")', want '$want'"
    [ ! -e "$dir/never.xml" ] || fail "$*: a report was written"
}
refused 'psdb replay: a PSDB file and --exe-path exclude each other: --exe-path replays the PSDB installed for it' \
    "$sodb" "$dir/app.psdb" --exe-path "$VKDEMO"
refused 'psdb replay: --registry needs --exe-path (the executable to look up)' "$sodb" --registry "$dir"
refused "psdb replay: --min-hit-rate '1.5': above 1 (a percentage is written with %, as in 95%)" \
    "$sodb" --min-hit-rate 1.5
refused "psdb replay: --min-hit-rate '101%': above 100%" "$sodb" --min-hit-rate 101%
refused "psdb replay: --min-hit-rate '-0.5': not a fraction in [0, 1] such as 0.95 or a percentage such as 95%" \
    "$sodb" --min-hit-rate -0.5
refused "psdb replay: --max-listed 'x': not a number from 0 to 1000000" "$sodb" --max-listed x
run 1 "$sodb" --exe-path
[ "$(cat "$dir/err")" = 'psdb replay: --exe-path needs a value (try --help)' ] ||
    fail "--exe-path without a value: $(cat "$dir/err")"
run 2 "$sodb" --no-such-option
[ "$(wc -l <"$dir/err")" -eq 1 ] || fail "unknown option: $(cat "$dir/err")"
"$PSDB" replay --backend vulkan --help | grep -q -- '--exe-path PATH' || fail "--help lacks --exe-path"

# test_vulkan_replay_gate__installed_psdb_found_by_exe_path (with psdbd): published, installed for
# vkdemo with --target auto, and replayed through a link to vkdemo (resolved, as the layer sees
# /proc/self/exe): every pipeline a hit. Installed again without two pipelines: those two miss.
# The installed file damaged, or its registration pointed elsewhere: refused, every pipeline a
# "refused" miss, no error. An executable with nothing installed: no_psdb.
if [ -n "${PSDBD:-}" ] && [ -x "${PSDBD:-}" ]; then
    data="$dir/data"
    vk_start_psdbd "$data"
    pids+=("${vk_pids[@]}")
    exe=$(readlink -f "$VKDEMO")
    install() { # SERIAL PSDB
        "$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial "$1" \
            "$2" >"$dir/publish.out" 2>&1 || fail "publish $2: $(cat "$dir/publish.out")"
        "$PSDB" install --server "$url" --exe-path "$exe" --app psdb-vkdemo --app-version 1.2.3.0 \
            --target auto --trust "$dir/key.pub" >"$dir/install.out" 2>&1 ||
            fail "install $2: $(cat "$dir/install.out")"
    }
    install 1 "$dir/app.psdb"
    mkdir "$dir/bin"
    ln -s "$exe" "$dir/bin/game"
    stored=$(ls "$PSDB_REGISTRY_DIR"/psdbs/*.psdb)
    [ -f "$stored" ] || fail "no installed PSDB in the store: $stored"
    run 0 "$sodb" --exe-path "$dir/bin/game" --registry "$PSDB_REGISTRY_DIR" --min-hit-rate 1 --json
    j=$(json)
    for want in "\"psdb\":{\"pipelines\":$npipe,\"failed\":0,\"hits\":$npipe,\"misses\":0" \
        "\"psdb_file\":\"$stored\"" '"default_psdb_registered":true' '"refused":null' \
        "\"created\":$npipe,\"hits\":$npipe" '"gate":"passed"'; do
        [[ $j == *"$want"* ]] || fail "installed: json lacks $want: $j"
    done
    # The default registry root (PSDB_REGISTRY_DIR) without --registry; text output.
    run 0 "$sodb" --exe-path "$exe" --min-hit-rate 1
    grep -q "PSDB $stored (registered for --exe-path)$" "$dir/out" || fail "installed: $(cat "$dir/out")"

    # A newer PSDB for vkdemo without two of its pipelines: they miss, and say so.
    install 2 "$dir/part.psdb"
    stored=$(ls "$PSDB_REGISTRY_DIR"/psdbs/*.psdb)
    run 3 "$sodb" --exe-path "$exe" --min-hit-rate 1 --junit "$dir/inst.xml"
    grep -q "^psdb replay: hit rate $rate ($hits of $npipe creations were PSDB hits) is below --min-hit-rate 1$" "$dir/err" ||
        fail "installed part: $(cat "$dir/err")"
    run 0 "$sodb" --exe-path "$exe" --min-hit-rate 0.5 --junit "$dir/inst.xml"
    xmllint --noout "$dir/inst.xml" || fail "installed part: not well-formed XML"
    [ "$(xp 'count(//testcase/failure[@type="not_in_psdb"])' "$dir/inst.xml")" = 2 ] &&
        [ "$(xp 'string(//property[@name="exe_path"]/@value)' "$dir/inst.xml")" = "$exe" ] ||
        fail "installed part: $(cat "$dir/inst.xml")"

    # 4 KB flipped in the installed file: not the file its install verified.
    cp "$stored" "$dir/stored.bak"
    size=$(stat -c %s "$stored")
    head -c 4096 /dev/urandom | dd of="$stored" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
    run 3 "$sodb" --exe-path "$exe" --min-hit-rate 0.5 --junit "$dir/tamper.xml" --json
    [[ $(json) != *'"psdb":{'* ]] && [[ $(json) == *"\"refused\":\"psdb $stored"*"\"created\":$npipe,\"hits\":0"*"\"refused\":$npipe}"* ]] ||
        fail "tampered: $(json)"
    xmllint --noout "$dir/tamper.xml" || fail "tampered: not well-formed XML"
    [ "$(xp 'count(//testcase/failure[@type="refused"])' "$dir/tamper.xml")" = "$npipe" ] ||
        fail "tampered: want $npipe refused test cases: $(cat "$dir/tamper.xml")"
    m=$(xp 'string((//testcase/failure[@type="refused"])[1]/@message)' "$dir/tamper.xml")
    [[ $m == "refused: psdb $stored"*SHA-256* ]] || fail "tampered: message '$m'"
    run 0 "$sodb" --exe-path "$exe"
    grep -q "; PSDB $stored refused: psdb $stored" "$dir/out" || fail "tampered, text: $(cat "$dir/out")"
    # The registration pointed at a copy elsewhere: nothing vouches for it.
    cp "$dir/stored.bak" "$stored"
    cp "$stored" "$dir/elsewhere.psdb"
    sqlite3 "$PSDB_REGISTRY_DIR/registry.db" "UPDATE component_psdbs SET psdb_path = '$dir/elsewhere.psdb'" ||
        fail "cannot edit the registry"
    run 3 "$sodb" --exe-path "$exe" --min-hit-rate 0.5 --json
    [[ $(json) == *'"default_psdb_registered":true,"refused":"the registration records no digest'*"\"refused\":$npipe}"* ]] ||
        fail "unverified registration: $(json)"
    sqlite3 "$PSDB_REGISTRY_DIR/registry.db" "UPDATE component_psdbs SET psdb_path = '$stored'"
    run 3 "$sodb" --exe-path "$exe" --min-hit-rate 1
    grep -q "($hits of $npipe creations" "$dir/err" || fail "restored: $(cat "$dir/err")"

    # Nothing installed for this executable: every pipeline a no_psdb miss naming it.
    run 3 "$sodb" --exe-path "$dir/no-such-game" --min-hit-rate 0.5 --json
    [[ $(json) != *'"psdb":{'* ]] && [[ $(json) == *'"default_psdb_registered":false'*"\"no_psdb\":$npipe"* ]] &&
        [[ $(json) == *"none registered for --exe-path $dir/no-such-game for vulkan-"* ]] ||
        fail "nothing installed: $(json)"
    # A registry that is not one: an error, said in one line.
    mkdir "$dir/notreg"
    echo "not a registry" >"$dir/notreg/registry.db"
    run 1 "$sodb" --exe-path "$exe" --registry "$dir/notreg"
    [ "$(wc -l <"$dir/err")" -eq 1 ] && grep -q "^psdb replay: the registry at $dir/notreg cannot be read: " "$dir/err" ||
        fail "bad registry: $(cat "$dir/err")"
fi
echo "vulkan_replay_gate_test: ok ($npipe pipelines)"
