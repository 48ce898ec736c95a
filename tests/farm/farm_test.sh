#!/usr/bin/env bash
# farm_test.sh - the compile farm end to end against the real psdbd (schema/HTTP.md, "Farm"):
# eight reference workers on four families (two per family, in the background with --json) idle
# while one SODB is published; launchers of every family resolve (each miss queues a job), the
# workers compile and publish with version 2 statements, the launchers install the farm-built
# PSDBs (trusting the studio's and the farm's keys) and replay them to a 100% hit rate. Every cell
# is compiled exactly once (publishes counted in psdbd's access log, jobs and worker lines
# counted). A worker killed with SIGKILL in the middle of a job and a psdbd restart lose no job
# and publish nothing twice; a new ABI range creates a new job from demand alone; a SIGTERM'd
# worker gives its job back ("worker stopped"); an SODB signed by an untrusted key fails its job
# and publishes nothing; psdb install --compile-missing builds a version that has an SODB and no
# PSDB with the reference compiler and registers it as built here; installed again from the same
# SODB it keeps that PSDB (for the same and for another exe path) unless its file is damaged, and
# a new SODB of the version is compiled.
# Env: PSDB = the psdb tool, PSDBD = the psdbd server.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
dir=$(mktemp -d)
pids=()
psdbd_pid=
cleanup() {
    for p in "${pids[@]}" $psdbd_pid; do
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
name=farm_test
. "$(dirname "$0")/lib.sh" # fail, farm_credentials

data="$dir/data"
farm_credentials "$data"
"$PSDB" keygen -o "$dir/rogue.key" >/dev/null
"$PSDBD" key add --data-dir "$data" --name rogue --public-key "$dir/rogue.key.pub" >/dev/null

# psdbd on an ephemeral port the first time, on the same port after a restart.
nstart=0
start_psdbd() {
    local listen=${1:-127.0.0.1:0}
    nstart=$((nstart + 1))
    rm -f "$dir/psdbd.fifo"
    mkfifo "$dir/psdbd.fifo"
    "$PSDBD" --listen "$listen" --data-dir "$data" >"$dir/psdbd.fifo" 2>"$dir/psdbd$nstart.log" &
    psdbd_pid=$!
    exec {fd}<"$dir/psdbd.fifo"
    read -r -t 30 line <&"$fd" || fail "psdbd did not start"
    url=${line#psdbd: listening on }
}
start_psdbd
port=${url##*:}

publishes() { cat "$dir"/psdbd*.log | grep -c 'access POST /v1/psdbs 201' || true; }
jobs_json() { "$PSDB" jobs --server "$url" --token "$farm" --json; }
# count_state STATE|any [FAMILY]: jobs in that state (of that family).
count_state() {
    jobs_json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(1 for j in d["jobs"] if sys.argv[1] in (j["state"], "any")
          and (len(sys.argv) < 3 or not sys.argv[2] or j["target"]["family"] == sys.argv[2])))' "$@"
}
wait_state() { # STATE COUNT [FAMILY]: until that many jobs are in STATE (60 s)
    for _ in $(seq 1 300); do
        [ "$(count_state "$1" "${3:-}")" -ge "$2" ] 2>/dev/null && return 0
        sleep 0.2
    done
    fail "want $2 jobs $1${3:+ of $3}, have $(count_state "$1" "${3:-}"): $(jobs_json)"
}
worker() { # LOG FAMILY ABI [ARGS]: a background reference worker
    local log=$1 fam=$2 abi=$3
    shift 3
    "$PSDB" worker --server "$url" --token "$farm" --key "$dir/farm.key" \
        --trust "$dir/studio.key.pub" --backend reference --family "$fam" --abi "$abi" \
        --cost-ns-per-kib 0 --poll-s 1 --lease-s 30 --name "$log" --json "$@" \
        >"$dir/$log.out" 2>"$dir/$log.err" &
    pids+=($!)
}
resolve_miss() { # FAMILY ABI_MIN ABI_MAX: a launcher's resolve that misses (exit 3)
    local rc=0
    "$PSDB" resolve --server "$url" --app FarmGame --app-version "${version:-1.0.0.0}" --family "$1" \
        --abi-min "$2" --abi-max "$3" >"$dir/resolve.out" 2>"$dir/resolve.err" || rc=$?
    [ "$rc" = 3 ] || fail "resolve of $1:$2-$3 did not miss ($rc): $(cat "$dir/resolve.err")"
}
install() { # FAMILY RANGE [ARGS]
    local fam=$1 range=$2
    shift 2
    "$PSDB" install --server "$url" --exe-path "/games/farm/$fam/FarmGame.exe" --app FarmGame \
        --app-version 1.0.0.0 --target "$fam:$range" --trust "$dir/studio.key.pub" \
        --trust "$dir/farm.key.pub" --registry "$dir/reg" --json "$@" >"$dir/install-$fam.json" \
        2>"$dir/install-$fam.err" || fail "install $fam: $(cat "$dir/install-$fam.err")"
}
replay_full() { # FAMILY RANGE-MIN RANGE-MAX [VERSION-SODB]
    "$PSDB" replay "${4:-$dir/game.sodb}" --family "$1" --abi-min "$2" --abi-max "$3" \
        --exe-path "/games/farm/$1/FarmGame.exe" --registry "$dir/reg" --cost-ns-per-kib 1 \
        --min-hit-rate 1 >"$dir/replay-$1.out" 2>"$dir/replay-$1.err" ||
        fail "replay $1 below 100%: $(cat "$dir/replay-$1.out" "$dir/replay-$1.err")"
}

# --help and refusals: one line, before anything is claimed.
"$PSDB" worker --help >"$dir/help.txt"
grep -q -- '--backend reference' "$dir/help.txt" || fail "worker --help"
"$PSDB" jobs --help >"$dir/help.txt"
grep -q -- '--state' "$dir/help.txt" || fail "jobs --help"
if "$PSDB" worker --server "$url" --token "$farm" --key "$dir/farm.key" \
    --trust "$dir/studio.key.pub" --family f --abi 1 --device 1 2>"$dir/bad.err"; then
    fail "worker took --device with the reference backend"
fi
[ "$(wc -l <"$dir/bad.err")" = 1 ] || fail "want one line: $(cat "$dir/bad.err")"
if "$PSDB" worker --server "$url" --token "$farm" --key "$dir/farm.key.pub" \
    --trust "$dir/studio.key.pub" --family f --abi 1 2>"$dir/bad.err"; then
    fail "worker took a public key to sign with"
fi
grep -q 'private' "$dir/bad.err" || fail "a public --key not named: $(cat "$dir/bad.err")"
# A publisher token is no compiler: the worker stops at its announce.
if "$PSDB" worker --server "$url" --token "$studio" --key "$dir/farm.key" \
    --trust "$dir/studio.key.pub" --family f --abi 1 --once 2>"$dir/bad.err"; then
    fail "a publisher token announced a worker"
fi

# Eight workers, two per family, idle: nothing is published yet.
fams=(gfxa gfxb gfxc gfxd)
for f in "${fams[@]}"; do
    worker "w-$f-1" "$f" 3
    worker "w-$f-2" "$f" 3
done

"$PSDB" synth --app FarmGame --app-version 1.0.0.0 --pipelines 300 --seed 5 -o "$dir/game.sodb" \
    >/dev/null
# The kind comes from the file: an SODB goes to /v1/sodbs with its own statement.
"$PSDB" publish --server "$url" --token "$studio" --key "$dir/studio.key" --serial 1 --json \
    "$dir/game.sodb" >"$dir/sodb.json" || fail "publish of the SODB"
grep -q '"kind": "sodb"' "$dir/sodb.json" || fail "not an SODB manifest: $(cat "$dir/sodb.json")"
sodb_sha=$(sha256sum "$dir/game.sodb" | cut -d' ' -f1)

# Every family's launcher misses: four jobs, compiled once each.
for f in "${fams[@]}"; do resolve_miss "$f" 1 5; done
wait_state done 4
sleep 2 # the idle workers' next claims find nothing more
[ "$(publishes)" = 4 ] || fail "want 4 publishes, have $(publishes)"
[ "$(cat "$dir"/w-*.out | grep -c '"outcome":"done"')" = 4 ] ||
    fail "want 4 jobs done by the workers: $(cat "$dir"/w-*.out)"
[ "$(count_state queued)" = 0 ] && [ "$(count_state leased)" = 0 ] || fail "jobs left: $(jobs_json)"
for f in "${fams[@]}"; do
    install "$f" 1-5
    grep -q '"status":"installed"' "$dir/install-$f.json" ||
        fail "install $f: $(cat "$dir/install-$f.json")"
    grep -q "\"sodb_sha256\":\"$sodb_sha\"" "$dir/install-$f.json" ||
        fail "install $f does not name the source SODB: $(cat "$dir/install-$f.json")"
    replay_full "$f" 1 5
done
# A launcher that trusts the studio only refuses the farm's signature.
if "$PSDB" install --server "$url" --exe-path /games/farm/x/FarmGame.exe --app FarmGame \
    --app-version 1.0.0.0 --target gfxa:1-5 --trust "$dir/studio.key.pub" --registry "$dir/reg2" \
    >"$dir/untrusted.out" 2>"$dir/untrusted.err"; then
    fail "a farm-built PSDB installed without trusting the farm's key"
fi
grep -qi 'signature' "$dir/untrusted.err" || fail "untrusted: $(cat "$dir/untrusted.err")"
"$PSDB" jobs --server "$url" --token "$farm" >"$dir/jobs.txt" || fail "psdb jobs"
grep -q '^.* done .*FarmGame' "$dir/jobs.txt" || fail "psdb jobs table: $(cat "$dir/jobs.txt")"
grep -q 'w-gfxa-' "$dir/jobs.txt" || fail "psdb jobs lists no worker: $(cat "$dir/jobs.txt")"

# SIGKILL in the middle of a job, then a psdbd restart: the job is handed out again after its
# lease and compiled once.
PSDB_WORKER_TEST_DELAY_MS=60000 "$PSDB" worker --server "$url" --token "$farm" \
    --key "$dir/farm.key" --trust "$dir/studio.key.pub" --family gfxk --abi 2 --lease-s 3 \
    --poll-s 1 --json >"$dir/slow.out" 2>"$dir/slow.err" &
slow=$!
pids+=($slow)
resolve_miss gfxk 1 5
wait_state leased 1 gfxk
kill -KILL "$slow"
wait "$slow" 2>/dev/null || true
before=$(publishes)
kill -TERM "$psdbd_pid"
wait "$psdbd_pid" 2>/dev/null || true
sleep 2 # longer than the transport's own retries: the workers' backoff takes over
start_psdbd "127.0.0.1:$port"
# The worker's announce queued the cell's job too (gfxk abi 2-2, rule (b)) beside the miss's
# (1-5): both end done, with one compile.
kjobs=$(count_state any gfxk)
[ "$kjobs" -ge 1 ] && [ "$(count_state done gfxk)" = 0 ] ||
    fail "the killed worker's job did not survive the restart: $(jobs_json)"
worker w-gfxk gfxk 2 --lease-s 3
wait_state done "$kjobs" gfxk
[ "$(publishes)" = $((before + 1)) ] || fail "want one more publish, have $before -> $(publishes)"

# A new ABI range: a new job from that demand alone, compiled by a worker of that ABI.
resolve_miss gfxa 7 9
wait_state queued 1 gfxa
before=$(publishes)
"$PSDB" worker --server "$url" --token "$farm" --key "$dir/farm.key" --trust "$dir/studio.key.pub" \
    --family gfxa --abi 8 --cost-ns-per-kib 0 --once --json >"$dir/abi8.out" 2>"$dir/abi8.err" ||
    fail "abi 8 worker"
grep -q '"outcome":"done"' "$dir/abi8.out" || fail "abi 8 job: $(cat "$dir/abi8.out")"
# Its announce queued its own cell (8-8) beside the miss's (7-9): both done, one compile.
[ "$(count_state done gfxa)" = "$(count_state any gfxa)" ] || fail "gfxa jobs left: $(jobs_json)"
[ "$(publishes)" = $((before + 1)) ] || fail "abi 8: want one publish, $before -> $(publishes)"

# The background workers rode out the restart (their claims retried with backoff, said on
# stderr): a new version's miss is compiled by one of them.
grep -q 'again in' "$dir"/w-gfxb-*.err || fail "no backoff through the restart: $(cat "$dir"/w-gfxb-*.err)"
"$PSDB" synth --app FarmGame --app-version 1.2.0.0 --pipelines 300 --seed 5 --changed 0.05 \
    -o "$dir/game12.sodb" >/dev/null
"$PSDB" publish --server "$url" --token "$studio" --key "$dir/studio.key" --serial 3 \
    "$dir/game12.sodb" >/dev/null || fail "publish of the 1.2 SODB"
version=1.2.0.0 resolve_miss gfxb 1 5
for _ in $(seq 1 300); do
    grep -q '"app_version":"1.2.0.0".*"outcome":"done"' "$dir"/w-gfxb-*.out && break
    sleep 0.2
done
grep -q '"app_version":"1.2.0.0".*"outcome":"done"' "$dir"/w-gfxb-*.out ||
    fail "no background worker compiled 1.2 after the restart: $(cat "$dir"/w-gfxb-*.out)"
# 1.0.0.0's PSDB of that cell is the claim's base: the worker compiled incrementally from it.
grep -q '"app_version":"1.2.0.0".*"base":true' "$dir"/w-gfxb-*.out ||
    fail "1.2 was not compiled from 1.0's PSDB: $(cat "$dir"/w-gfxb-*.out)"

# SIGTERM: the job in hand goes back at once with "worker stopped", nothing published.
PSDB_WORKER_TEST_DELAY_MS=60000 "$PSDB" worker --server "$url" --token "$farm" \
    --key "$dir/farm.key" --trust "$dir/studio.key.pub" --family gfxs --abi 1 --poll-s 1 --json \
    >"$dir/term.out" 2>"$dir/term.err" &
term=$!
pids+=($term)
before=$(publishes)
resolve_miss gfxs 1 5
wait_state leased 1 gfxs
kill -TERM "$term"
rc=0
wait "$term" || rc=$?
[ "$rc" = 0 ] || fail "a SIGTERM'd worker exited $rc: $(cat "$dir/term.err")"
grep -q '"outcome":"stopped".*"error":"worker stopped"' "$dir/term.out" ||
    fail "stopped job: $(cat "$dir/term.out")"
jobs_json >"$dir/jobs.json"
grep -q '"last_error": *"worker stopped"' "$dir/jobs.json" || fail "no worker stopped: $(jobs_json)"
[ "$(count_state leased gfxs)" = 0 ] || fail "a stopped job stayed leased: $(jobs_json)"
[ "$(publishes)" = "$before" ] || fail "a stopped job published"

# An SODB signed by a key the worker does not trust fails its job, and nothing is published.
"$PSDB" synth --app RogueGame --app-version 1.0.0.0 --pipelines 20 -o "$dir/rogue.sodb" >/dev/null
"$PSDB" publish --server "$url" --token "$studio" --key "$dir/rogue.key" --serial 1 \
    "$dir/rogue.sodb" >/dev/null || fail "publish of the rogue SODB"
"$PSDB" resolve --server "$url" --app RogueGame --app-version 1.0.0.0 --family gfxr --abi-min 1 \
    --abi-max 5 >/dev/null 2>&1 && fail "rogue resolve found a PSDB"
before=$(publishes)
"$PSDB" worker --server "$url" --token "$farm" --key "$dir/farm.key" --trust "$dir/studio.key.pub" \
    --family gfxr --abi 1 --once --max-jobs 1 --json >"$dir/rogue.out" 2>"$dir/rogue.err" ||
    fail "rogue worker: $(cat "$dir/rogue.err")"
grep -q '"outcome":"failed".*signature' "$dir/rogue.out" || fail "rogue job: $(cat "$dir/rogue.out")"
[ "$(publishes)" = "$before" ] || fail "an untrusted SODB was compiled and published"

# psdb install --compile-missing: version 1.1.0.0 has an SODB and no PSDB.
"$PSDB" synth --app FarmGame --app-version 1.1.0.0 --pipelines 300 --seed 5 --changed 0.1 \
    -o "$dir/game11.sodb" >/dev/null
"$PSDB" publish --server "$url" --token "$studio" --key "$dir/studio.key" --serial 2 \
    "$dir/game11.sodb" >/dev/null || fail "publish of the 1.1 SODB"
sodb11=$(sha256sum "$dir/game11.sodb" | cut -d' ' -f1)
"$PSDB" install --server "$url" --exe-path /games/farm/local/FarmGame.exe --app FarmGame \
    --app-version 1.1.0.0 --target gfxl:1-4 --trust "$dir/studio.key.pub" --registry "$dir/reg" \
    >"$dir/nolocal.out" 2>"$dir/nolocal.err" && fail "installed without a PSDB or --compile-missing"
"$PSDB" install --server "$url" --exe-path /games/farm/local/FarmGame.exe --app FarmGame \
    --app-version 1.1.0.0 --target gfxl:1-4 --trust "$dir/studio.key.pub" --registry "$dir/reg" \
    --compile-missing --json >"$dir/local.json" 2>"$dir/local.err" ||
    fail "install --compile-missing: $(cat "$dir/local.err")"
grep -q '"built_here":true' "$dir/local.json" || fail "not built here: $(cat "$dir/local.json")"
grep -q "\"sodb_sha256\":\"$sodb11\"" "$dir/local.json" || fail "no SODB digest: $(cat "$dir/local.json")"
"$PSDB" replay "$dir/game11.sodb" --family gfxl --abi-min 1 --abi-max 4 \
    --exe-path /games/farm/local/FarmGame.exe --registry "$dir/reg" --cost-ns-per-kib 1 \
    --min-hit-rate 1 >"$dir/replay-local.out" 2>&1 || fail "local build below 100%: $(cat "$dir/replay-local.out")"
"$PSDB" registry list --registry "$dir/reg" --json >"$dir/reg.json" || fail "registry list"
grep -q "\"built_here\": *true" "$dir/reg.json" || fail "registry does not say built here: $(cat "$dir/reg.json")"
# The install's miss is demand: the farm has a job for it now.
[ "$(count_state queued gfxl)" = 1 ] || fail "the --compile-missing miss queued no job: $(jobs_json)"
# Installed again from the same SODB: the PSDB built here is kept (re-verified), not compiled
# again, for the same exe path (unchanged) and for another one (installed from the store); the
# store's file is the same inode throughout.
local_sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["targets"][0]["sha256"])' \
    "$dir/local.json")
local_file=$(find "$dir/reg" -name "$local_sha.psdb")
[ -f "$local_file" ] || fail "the local build is not in the store: $local_sha"
local_ino=$(stat -c %i "$local_file")
local_install() { # EXE-DIR OUT [ARGS]: install 1.1.0.0 --compile-missing, stderr in OUT.err
    local exe=$1 out=$2
    shift 2
    "$PSDB" install --server "$url" --exe-path "/games/farm/$exe/FarmGame.exe" --app FarmGame \
        --app-version 1.1.0.0 --target gfxl:1-4 --trust "$dir/studio.key.pub" \
        --registry "$dir/reg" --compile-missing "$@" >"$dir/$out" 2>"$dir/$out.err" ||
        fail "install --compile-missing ($out): $(cat "$dir/$out.err")"
}
local_install local local2.json --json
grep -q '"status":"unchanged"' "$dir/local2.json" && grep -q '"built_here":true' "$dir/local2.json" &&
    grep -q "\"sha256\":\"$local_sha\"" "$dir/local2.json" ||
    fail "a second --compile-missing did not keep the PSDB built here: $(cat "$dir/local2.json")"
local_install local2 other.out
grep -q 'gfxl: built here from SODB .* and installed' "$dir/other.out" ||
    fail "another exe path: $(cat "$dir/other.out")"
grep -q 'compiled' "$dir/other.out.err" && fail "another exe path compiled again: $(cat "$dir/other.out.err")"
[ "$(stat -c %i "$local_file")" = "$local_ino" ] || fail "the PSDB built here was rebuilt"
"$PSDB" replay "$dir/game11.sodb" --family gfxl --abi-min 1 --abi-max 4 \
    --exe-path /games/farm/local2/FarmGame.exe --registry "$dir/reg" --cost-ns-per-kib 1 \
    --min-hit-rate 1 >"$dir/replay-local2.out" 2>&1 || fail "kept build below 100%: $(cat "$dir/replay-local2.out")"
# Damaged in the store: compiled again, not trusted by its name.
chmod u+w "$local_file"
printf 'x' >>"$local_file"
local_install local local3.json --json
grep -q '"status":"installed"' "$dir/local3.json" ||
    fail "a damaged local build was kept: $(cat "$dir/local3.json")"
[ "$(sha256sum "$local_file" | cut -d' ' -f1)" = "$local_sha" ] || fail "the rebuilt file is not the build"
# A new SODB of the version (another serial, another digest) is compiled.
"$PSDB" synth --app FarmGame --app-version 1.1.0.0 --pipelines 300 --seed 6 -o "$dir/game11b.sodb" \
    >/dev/null
"$PSDB" publish --server "$url" --token "$studio" --key "$dir/studio.key" --serial 4 \
    "$dir/game11b.sodb" >/dev/null || fail "publish of the second 1.1 SODB"
sodb11b=$(sha256sum "$dir/game11b.sodb" | cut -d' ' -f1)
local_install local local4.json --json
grep -q '"status":"installed"' "$dir/local4.json" && grep -q "\"sodb_sha256\":\"$sodb11b\"" "$dir/local4.json" ||
    fail "a new SODB was not compiled: $(cat "$dir/local4.json")"
# An SODB the launcher does not trust is never compiled.
"$PSDB" install --server "$url" --exe-path /games/farm/rogue/RogueGame.exe --app RogueGame \
    --app-version 1.0.0.0 --target gfxl:1-4 --trust "$dir/studio.key.pub" --registry "$dir/reg" \
    --compile-missing >"$dir/rogue-local.out" 2>"$dir/rogue-local.err" &&
    fail "an untrusted SODB was compiled by install"
grep -q 'trusted' "$dir/rogue-local.err" || fail "rogue install: $(cat "$dir/rogue-local.err")"

# No SODB and no PSDB: --compile-missing says so, exit 3 as any missing PSDB.
rc=0
"$PSDB" install --server "$url" --exe-path /games/farm/none/None.exe --app NoSodbGame \
    --app-version 1.0.0.0 --target gfxl:1-4 --trust "$dir/studio.key.pub" --registry "$dir/reg" \
    --compile-missing >"$dir/none.out" 2>"$dir/none.err" || rc=$?
[ "$rc" = 3 ] && grep -q 'neither a PSDB nor an SODB' "$dir/none.err" ||
    fail "no SODB ($rc): $(cat "$dir/none.err")"
# psdb jobs --state filters, and an unknown state is refused in one line.
"$PSDB" jobs --server "$url" --token "$farm" --state held --json >"$dir/held.json" || fail "jobs --state"
grep -q '"state": "done"' "$dir/held.json" && fail "--state held listed done jobs"
"$PSDB" jobs --server "$url" --state nope 2>"$dir/bad.err" && fail "an unknown --state was taken"
[ "$(wc -l <"$dir/bad.err")" = 1 ] || fail "want one line: $(cat "$dir/bad.err")"

echo "farm_test: ok"
