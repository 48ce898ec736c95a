# stats_fixture.sh - sourced by stats_test.sh and dashboard_test.sh: a psdbd on a free port with a
# few published PSDBs (two applications, three families, one superseded, one retired) and helpers
# that make recorded traffic (resolves that hit and miss, blob downloads) and flush it.
# Needs PSDB and PSDBD (ctest sets them) and a `fail` function of the caller.
# PSDB_STATS_ENGINE=postgresql puts the index in a database of its own in the cluster at
# PSDB_TEST_PG_URL (tests/pg/cluster), dropped at exit; without that URL the run skips (77).
psdb=${PSDB:?} psdbd=${PSDBD:?}
index=() pgdb=
if [ "${PSDB_STATS_ENGINE:-sqlite}" = postgresql ]; then
    if [ -z "${PSDB_TEST_PG_URL:-}" ]; then
        echo "stats: skipped on postgresql: PSDB_TEST_PG_URL is not set (eval \"\$(tests/pg/cluster start)\")"
        exit 77
    fi
    pg_url_of() {
        case "$PSDB_TEST_PG_URL" in *\?*) echo "${PSDB_TEST_PG_URL}&dbname=$1" ;;
        *) echo "${PSDB_TEST_PG_URL}?dbname=$1" ;; esac
    }
    pgdb="psdbstats_$$_$RANDOM"
    psql -qAt -v ON_ERROR_STOP=1 "$(pg_url_of postgres)" -c "CREATE DATABASE $pgdb" >/dev/null ||
        { echo "stats: cannot create database $pgdb in the test cluster" >&2; exit 1; }
    index=(--index "$(pg_url_of "$pgdb")")
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/psdb-stats-XXXXXX")
data=$work/data
log=$work/psdbd.log
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    [ -n "$pgdb" ] && psql -qAt "$(pg_url_of postgres)" \
        -c "DROP DATABASE IF EXISTS $pgdb WITH (FORCE)" >/dev/null 2>&1
    [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# start [flags...]: psdbd on 127.0.0.1:0 with a flush interval of an hour (flushes come from
# SIGUSR1 or shutdown only, so the tests decide when); sets pid and url.
start() {
    : >"$work/out"
    "$psdbd" --listen 127.0.0.1:0 --data-dir "$data" "${index[@]}" --threads 2 --log-requests false \
        --stats-flush-interval 3600 "$@" >"$work/out" 2>>"$log" &
    pid=$!
    for _ in $(seq 100); do
        grep -q 'listening on' "$work/out" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || fail "psdbd exited before listening"
        sleep 0.05
    done
    url=$(sed -n 's/^psdbd: listening on //p' "$work/out")
    [ -n "$url" ] || fail "psdbd did not announce its address"
}
stop() { kill -TERM "$pid"; wait "$pid" || fail "psdbd did not exit 0 on SIGTERM"; pid=; }
kill9() { kill -KILL "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

# flush: SIGUSR1, then waits for the log line that says the counts are in the index.
flush() {
    local before
    before=$(grep -c 'stats: flushed on SIGUSR1' "$log" || true)
    kill -USR1 "$pid"
    for _ in $(seq 200); do
        [ "$(grep -c 'stats: flushed on SIGUSR1' "$log" || true)" -gt "$before" ] && return 0
        sleep 0.05
    done
    fail "no flush after SIGUSR1"
}

# resolve APP FAMILY ABI_MIN ABI_MAX [PROFILE]: prints the HTTP status.
resolve() {
    local q="app=$1&app_version=1.0.0.0&family=$2&abi_min=$3&abi_max=$4"
    [ -n "${5:-}" ] && q="$q&profile_version=$5"
    curl -s -o /dev/null -w '%{http_code}' "$url/v1/resolve?$q"
}

# psdb_of APP FAMILY ABI SERIAL: builds, signs and publishes one PSDB; prints its id.
publish() {
    local f=$work/$1-$2-$3-$4
    "$psdb" synth --app "$1" --app-version 1.0.0.0 --pipelines 8 --seed "$4" -o "$f.sodb" >/dev/null
    "$psdb" compile "$f.sodb" --family "$2" --abi "$3" -o "$f.psdb" >/dev/null
    "$psdb" publish --server "$url" --token "$pub" --key "$work/key" --serial "$4" --json "$f.psdb" \
        >"$f.json" || fail "publish $1 $2 $3 $4"
    json_field "$f.json" id
}

# check_json FILE EXPR MESSAGE: records a check of a Python expression over the document `d`
# (FILE's JSON; load(PATH) reads another); run_checks evaluates them all in one interpreter, since
# each answer was saved to its own file when it was fetched.
check_json() { printf '%s\0%s\0%s\0' "$1" "$2" "$3" >>"$work/checks"; }
run_checks() {
    [ -s "$work/checks" ] || return 0
    python3 - "$work/checks" <<'PY' || fail "checks of the JSON answers failed (above)"
import json, sys
def load(p):
    return json.load(open(p))
parts = open(sys.argv[1]).read().split("\0")[:-1]
bad = 0
for i in range(0, len(parts), 3):
    path, expr, msg = parts[i:i + 3]
    try:
        d = load(path)
        ok = eval(expr)
    except Exception as e:
        ok, msg = False, "%s (%s)" % (msg, e)
    if not ok:
        bad += 1
        print("check failed: %s (see %s)" % (msg, path), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
    : >"$work/checks"
}
# json_field FILE KEY: the first number or hex string named KEY in a JSON document (a manifest:
# its top-level "id" and "sha256" come before any nested key of those names).
json_field() { grep -o "\"$2\": *\"\{0,1\}[0-9a-f]*" "$1" | head -1 | sed 's/.*[": ]//'; }

setup_fixture() {
    mkdir -p "$data"
    pub=$("$psdbd" token create --data-dir "$data" "${index[@]}" --role publisher --name ci-publisher)
    reader=$("$psdbd" token create --data-dir "$data" "${index[@]}" --role reader --name dash-reader)
    "$psdb" keygen -o "$work/key" >/dev/null
    "$psdbd" key add --data-dir "$data" "${index[@]}" --name ci --public-key "$work/key.pub" >/dev/null
    start "$@"
    # Publishes in parallel: each one waits mostly on the server's fsyncs.
    local jobs=() j
    publish Alpha alpha-gfx1 1 1 >/dev/null & jobs+=($!)
    publish Alpha alpha-gfx1 2 2 >/dev/null & jobs+=($!)
    publish Alpha alpha-gfx1 2 3 >/dev/null & jobs+=($!) # supersedes serial 2
    publish Beta beta-gfx2 3 1 >/dev/null & jobs+=($!)
    publish Beta beta-gfx3 1 1 >/dev/null & jobs+=($!)
    for j in "${jobs[@]}"; do wait "$j" || fail "a publish failed"; done
    old=$(json_field "$work/Beta-beta-gfx3-1-1.json" id)
    curl -sf -X DELETE -H "Authorization: Bearer $pub" "$url/v1/psdbs/$old" >/dev/null ||
        fail "retire psdb $old"
    blob=$(json_field "$work/Alpha-alpha-gfx1-2-3.json" sha256)
    [ ${#blob} -eq 64 ] || fail "no sha256 in the publish answer"
}

# traffic: 4 hits of Alpha, 3 misses of Alpha on alpha-gfx9 ABI 5-6, 2 misses of Beta on
# beta-gfx2 ABI 7 with profile 2.0.0.0, 2 complete downloads and 1 partial of the Alpha blob.
traffic() {
    for _ in 1 2 3 4; do [ "$(resolve Alpha alpha-gfx1 1 2)" = 200 ] || fail "Alpha does not resolve"; done
    for _ in 1 2 3; do [ "$(resolve Alpha alpha-gfx9 5 6)" = 404 ] || fail "alpha-gfx9 resolved"; done
    for _ in 1 2; do [ "$(resolve Beta beta-gfx2 7 7 2.0.0.0)" = 404 ] || fail "beta abi 7 resolved"; done
    curl -sf -o /dev/null "$url/v1/blobs/$blob" || fail "download"
    curl -sf -o /dev/null "$url/v1/blobs/$blob" || fail "download"
    curl -sf -o /dev/null -H 'Range: bytes=0-99' "$url/v1/blobs/$blob" || fail "range download"
}
