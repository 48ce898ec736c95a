#!/usr/bin/env bash
# farm_pg_test.sh - the compile farm on two psdbd replicas sharing one PostgreSQL index and one
# blob store: eight reference workers on four families, half of them talking to each replica,
# race for the jobs that launchers' misses on both replicas queued (FOR UPDATE SKIP LOCKED);
# every cell is compiled and published exactly once, every job ends done, and the launchers
# install the farm-built PSDBs through either replica and replay them to a 100% hit rate. Then one
# replica is SIGKILLed while a slow worker holds a job on it: the job is compiled once by a
# worker of the other replica after its lease.
# Env: PSDB, PSDBD, PSDB_TEST_PG_URL (tests/pg/cluster start); skips (77) without it.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
if [ -z "${PSDB_TEST_PG_URL:-}" ]; then
    echo "farm_pg_test: skipped: PSDB_TEST_PG_URL is not set (eval \"\$(tests/pg/cluster start)\")"
    exit 77
fi
dir=$(mktemp -d)
db="psdbfarm_$$"
sep='?'
case "$PSDB_TEST_PG_URL" in *\?*) sep='&' ;; esac
url_of() { echo "${PSDB_TEST_PG_URL}${sep}dbname=$1"; }
index=$(url_of "$db")
sql() { psql -qAt -v ON_ERROR_STOP=1 "$(url_of postgres)" -c "$1"; }
pids=()
rpid=(0 0 0)
cleanup() {
    for p in "${pids[@]}" "${rpid[@]}"; do
        [ "$p" -gt 0 ] && kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
    done
    sql "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
name=farm_pg_test
. "$(dirname "$0")/lib.sh" # fail, farm_credentials
sql "CREATE DATABASE $db" || fail "create database $db"

data="$dir/data"
export PSDBD_INDEX="$index"
farm_credentials "$data"
unset PSDBD_INDEX

declare -a urls
start() { # N: replica N
    local n=$1 line=""
    rm -f "$dir/r$n.fifo"
    mkfifo "$dir/r$n.fifo"
    "$PSDBD" --listen 127.0.0.1:0 --data-dir "$data" --index "$index" --threads 4 \
        >"$dir/r$n.fifo" 2>>"$dir/r$n.log" &
    rpid[$n]=$!
    exec {fd}<"$dir/r$n.fifo"
    read -r -t 30 line <&"$fd" || fail "replica $n did not start"
    urls[$n]=${line#psdbd: listening on }
}
start 1
start 2

publishes() { cat "$dir"/r*.log | grep -c 'access POST /v1/psdbs 201' || true; }
count_state() { # STATE|any [FAMILY]
    "$PSDB" jobs --server "${urls[2]}" --token "$farm" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(1 for j in d["jobs"] if sys.argv[1] in (j["state"], "any")
          and (len(sys.argv) < 3 or not sys.argv[2] or j["target"]["family"] == sys.argv[2])))' "$@"
}
wait_all_done() { # [FAMILY]
    for _ in $(seq 1 300); do
        [ "$(count_state done "${1:-}")" = "$(count_state any "${1:-}")" ] && return 0
        sleep 0.2
    done
    fail "jobs left${1:+ of $1}: $("$PSDB" jobs --server "${urls[2]}" --token "$farm")"
}
worker() { # LOG REPLICA FAMILY [ARGS]
    local log=$1 n=$2 fam=$3
    shift 3
    "$PSDB" worker --server "${urls[$n]}" --token "$farm" --key "$dir/farm.key" \
        --trust "$dir/studio.key.pub" --family "$fam" --abi 3 --cost-ns-per-kib 0 --poll-s 0.2 \
        --name "$log" --json "$@" >"$dir/$log.out" 2>"$dir/$log.err" &
    pids+=($!)
}

fams=(pga pgb pgc pgd)
for f in "${fams[@]}"; do
    worker "w-$f-1" 1 "$f"
    worker "w-$f-2" 2 "$f"
done
"$PSDB" synth --app PgFarm --app-version 1.0.0.0 --pipelines 200 -o "$dir/game.sodb" >/dev/null
"$PSDB" publish --server "${urls[1]}" --token "$studio" --key "$dir/studio.key" "$dir/game.sodb" \
    >/dev/null || fail "publish the SODB"
k=0
for f in "${fams[@]}"; do
    k=$((k % 2 + 1))
    rc=0
    "$PSDB" resolve --server "${urls[$k]}" --app PgFarm --app-version 1.0.0.0 --family "$f" \
        --abi-min 1 --abi-max 5 >/dev/null 2>&1 || rc=$?
    [ "$rc" = 3 ] || fail "resolve $f did not miss ($rc)"
done
wait_all_done
sleep 1
[ "$(publishes)" = 4 ] || fail "want 4 publishes over both replicas, have $(publishes)"
k=0
for f in "${fams[@]}"; do
    k=$((k % 2 + 1))
    "$PSDB" install --server "${urls[$k]}" --exe-path "/games/pg/$f/PgFarm.exe" --app PgFarm \
        --app-version 1.0.0.0 --target "$f:1-5" --trust "$dir/studio.key.pub" \
        --trust "$dir/farm.key.pub" --registry "$dir/reg" >/dev/null 2>"$dir/install.err" ||
        fail "install $f: $(cat "$dir/install.err")"
    "$PSDB" replay "$dir/game.sodb" --family "$f" --abi-min 1 --abi-max 5 \
        --exe-path "/games/pg/$f/PgFarm.exe" --registry "$dir/reg" --cost-ns-per-kib 1 \
        --min-hit-rate 1 >"$dir/replay.out" 2>&1 || fail "replay $f: $(cat "$dir/replay.out")"
done

# A replica SIGKILLed while a slow worker holds a job on it: the other replica's worker takes the
# job after its lease; one publish.
PSDB_WORKER_TEST_DELAY_MS=60000 "$PSDB" worker --server "${urls[1]}" --token "$farm" \
    --key "$dir/farm.key" --trust "$dir/studio.key.pub" --family pgk --abi 3 --lease-s 3 \
    --poll-s 0.2 --json >"$dir/slow.out" 2>"$dir/slow.err" &
slow=$!
pids+=($slow)
"$PSDB" resolve --server "${urls[1]}" --app PgFarm --app-version 1.0.0.0 --family pgk \
    --abi-min 1 --abi-max 5 >/dev/null 2>&1 && fail "pgk resolve found a PSDB"
for _ in $(seq 1 150); do
    [ "$(count_state leased pgk)" -ge 1 ] && break
    sleep 0.2
done
[ "$(count_state leased pgk)" -ge 1 ] || fail "the slow worker claimed nothing"
kill -KILL "${rpid[1]}" "$slow"
wait "${rpid[1]}" "$slow" 2>/dev/null || true
rpid[1]=0
before=$(publishes)
worker w-pgk 2 pgk --lease-s 3
wait_all_done pgk
[ "$(publishes)" = $((before + 1)) ] || fail "pgk: want one publish, $before -> $(publishes)"

echo "farm_pg_test: ok"
