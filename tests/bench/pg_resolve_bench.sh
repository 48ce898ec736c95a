#!/usr/bin/env bash
# pg_resolve_bench.sh - /v1/resolve requests/s of psdbd on PostgreSQL against psdbd on SQLite with
# a DIFFERENT query on every request, so that the resolve cache (server/cache.c) never answers and
# every request reaches the index (issue 27: target >= 0.5x). Both servers get the same realistic
# index, published through psdbd: APPS applications x 3 versions x 3 families x 2 ABI versions.
# wrk's script (written below) walks (app, family, version, abi_max) so that no request of a run
# repeats and consecutive ones name other applications; abi_max >= 2 answers the ABI-2 PSDB, so
# every answer is a 200 with a manifest (a non-2xx answer is reported: something is broken).
# Rounds alternate SQLite and PostgreSQL; it prints the medians, the ratio, and each process's CPU
# time per request (psdbd, the PostgreSQL backends, wrk) from /proc, which is where the gap goes.
# It never fails for speed.
# Usage: tests/bench/pg_resolve_bench.sh [BUILD_DIR]   (default build/rel, a Release tree)
# Env: PSDB_BENCH_ROUNDS (default 5), PSDB_BENCH_SECONDS (per wrk run, default 5),
#      PSDB_BENCH_APPS (default 40), PSDB_BENCH_CONNS (wrk connections, default 32),
#      PSDB_BENCH_POOL (psdbd index-pool on PostgreSQL; default psdbd's),
#      PSDB_BENCH_THREADS (psdbd worker threads of both, default 4),
#      PSDB_BENCH_POOLS ("THREADS:POOL ..."; each one more psdbd on the same PostgreSQL index
#      with those threads and index-pool, in every round too: the pool's sizing),
#      PSDB_TEST_PG_URL (a cluster; without it one is started with tests/pg/cluster).
# Needs wrk, curl, psql.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/rel}
secs=${PSDB_BENCH_SECONDS:-5}
rounds=${PSDB_BENCH_ROUNDS:-5}
apps=${PSDB_BENCH_APPS:-40}
conns=${PSDB_BENCH_CONNS:-32}
pool=${PSDB_BENCH_POOL:-}
threads=${PSDB_BENCH_THREADS:-4}
pools=${PSDB_BENCH_POOLS:-}
say() { printf '%s\n' "$*"; }

for tool in wrk curl psql; do
    command -v "$tool" >/dev/null || {
        say "pg_resolve_bench: $tool is not installed (apt-get install wrk curl postgresql-client)" >&2
        exit 1
    }
done
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target psdbd psdb_tool >/dev/null
psdb=$build/psdb
psdbd=$build/psdbd

work=$(mktemp -d "${TMPDIR:-/tmp}/psdbd-pgresolve-XXXXXX")
. "$root/tests/bench/pg_lib.sh"
bench_pg_start "$work" || exit 1
db="psdbresolve_$$"
pg_url=$(pg_url_for "$db")
sql() { pg_sql "$1" "$2"; }
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    sql postgres "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    bench_pg_stop
    rm -rf "$work"
}
trap cleanup EXIT
sql postgres "CREATE DATABASE $db"
# The cluster's postmaster: its children are the backends whose CPU a run costs.
postmaster=$(sql "$db" "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'" |
    xargs -I{} awk '{ print $4 }' /proc/{}/stat)

# start NAME DATA_DIR [FLAGS...]: psdbd on a free port; sets $base and $pid.
start() {
    local name=$1 data=$2 line=""
    shift 2
    mkfifo "$work/$name.fifo"
    # No request log (the reference has none either); no demand flush during a run (that is the
    # writer's cost, not the resolve's): the counting in memory stays on, as deployed.
    "$psdbd" --listen 127.0.0.1:0 --data-dir "$data" --threads "$threads" --log-requests false \
        --stats-flush-interval 3600 "$@" >"$work/$name.fifo" 2>>"$work/$name.log" &
    pid=$!
    pids+=("$pid")
    exec {fd}<"$work/$name.fifo"
    read -r -t 30 line <&"$fd"
    base=${line#psdbd: listening on }
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
# ticks PID...: user+system clock ticks of those processes (gone ones count 0).
ticks() {
    local t=0 p s
    for p in "$@"; do
        s=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)
        t=$((t + s))
    done
    echo "$t"
}
backends() { pgrep -P "$postmaster" | tr '\n' ' '; }

say "machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
say "psdbd: $("$psdbd" --version), $threads threads each; PostgreSQL $(psql -V | awk '{print $3}') on the same cores (unix socket)"

# ---- the index: APPS applications x 3 versions x 3 families x 2 ABI versions ----
families="gfx1 gfx2 gfx3"
"$psdb" keygen -o "$work/key" >/dev/null
mkdir -p "$work/f"
# One line per (application, version): its SODB and its six PSDBs; four at a time.
for a in $(seq "$apps"); do
    for v in 1 2 3; do
        line="exec >/dev/null 2>&1; '$psdb' synth --app App$a --app-version $v.0.0.0 --pipelines 2 --seed $a -o '$work/f/$a-$v.sodb'"
        for f in $families; do
            for abi in 1 2; do
                line="$line && '$psdb' compile '$work/f/$a-$v.sodb' --family $f --abi $abi --cost-ns-per-kib 0 -o '$work/f/$a-$v-$f-$abi.psdb'"
            done
        done
        echo "$line"
    done
done >"$work/make.cmds"
xargs -P 4 -I{} sh -c {} <"$work/make.cmds"
n_psdbs=$(find "$work/f" -name '*.psdb' | wc -l)

for e in sqlite pg; do
    idx=()
    [ "$e" = pg ] && idx=(--index "$pg_url")
    "$psdbd" token create --data-dir "$work/$e" "${idx[@]}" --role publisher --name b >"$work/$e.token"
    "$psdbd" key add --data-dir "$work/$e" "${idx[@]}" --name b --public-key "$work/key.pub" >/dev/null
done
declare -A base_of pid_of
start sqlite "$work/sqlite"
base_of[sqlite]=$base
pid_of[sqlite]=$pid
pool_flag=()
[ -n "$pool" ] && pool_flag=(--index-pool "$pool")
start pg "$work/pg" --index "$pg_url" "${pool_flag[@]}"
base_of[pg]=$base
pid_of[pg]=$pid
engines="sqlite pg"
for e in sqlite pg; do
    b=${base_of[$e]}
    find "$work/f" -name '*.psdb' |
        sed "s|.*|'$psdb' publish --server $b --token $(cat "$work/$e.token") --key '$work/key' '&' >/dev/null|" \
            >"$work/publish.$e.cmds"
    xargs -P 4 -I{} sh -c {} <"$work/publish.$e.cmds"
done
# Replicas on the same index with other threads and pools (PSDB_BENCH_POOLS).
for tp in $pools; do
    e="pg-${tp%%:*}-${tp##*:}"
    start "$e" "$work/pg" --index "$pg_url" --threads "${tp%%:*}" --index-pool "${tp##*:}"
    base_of[$e]=$base
    pid_of[$e]=$pid
    engines="$engines $e"
done
for e in $engines; do
    b=${base_of[$e]}
    got=$(curl -s "$b/v1/apps" | grep -o '"active": *[0-9]*' | awk -F: '{ s += $2 } END { print s + 0 }')
    [ "$got" = "$n_psdbs" ] || { say "pg_resolve_bench: $b holds $got active PSDBs, not $n_psdbs" >&2; exit 1; }
done

# wrk: request k of thread t in run `offset` asks index i = offset + k * threads + t, spelled out
# as (app, family, version, abi_max): no two requests of the runs share a query. wrk runs setup()
# in its main state and sets t as a global of each thread's own state.
cat >"$work/walk.lua" <<'LUA'
local made, k, apps, offset, threads = 0, 0, 0, 0, 1
local fams = {"gfx1", "gfx2", "gfx3"}
function setup(thread)
    thread:set("t", made)
    made = made + 1
end
function init(args)
    apps = tonumber(args[1])
    offset = tonumber(args[2])
    threads = tonumber(args[3])
end
function request()
    local i = offset + k * threads + (t or 0)
    k = k + 1
    local app = i % apps
    local j = math.floor(i / apps)
    local fam = j % 3
    j = math.floor(j / 3)
    local ver = j % 3
    local abi_max = 2 + math.floor(j / 3)
    return wrk.format("GET", string.format(
        "/v1/resolve?app=App%d&app_version=%d.0.0.0&family=%s&abi_min=1&abi_max=%d",
        app + 1, ver + 1, fams[fam + 1], abi_max))
end
LUA

# run ENGINE ROUND K: one wrk run (the K-th of its round); appends its req/s to r.ENGINE and the
# CPU microseconds per request of psdbd, the PostgreSQL backends and wrk to cpu.ENGINE.
hz=$(getconf CLK_TCK)
n_engines=$(echo $engines | wc -w)
run() {
    local e=$1 n=$2 k=$3 b=${base_of[$1]} p=${pid_of[$1]} off be d0 b0 d1 b1 w req
    # Each run's queries start past every earlier run's: 10^8 indexes each.
    off=$(((n * n_engines + k) * 100000000))
    be=$(pgrep -P "$postmaster" | tr '\n' ' ' || true)
    d0=$(ticks "$p")
    b0=$(ticks $be)
    TIMEFORMAT='%U %S'
    { time wrk -t2 -c"$conns" -d"${secs}s" -s "$work/walk.lua" "$b" -- "$apps" "$off" 2 \
        >"$work/wrk.out" 2>&1; } 2>"$work/wrk.time"
    d1=$(ticks "$p")
    # The backends of before and any the run started (a pool connection opened on demand).
    b1=$(ticks $(echo "$be" $(pgrep -P "$postmaster") | tr ' ' '\n' | sort -u))
    if grep -q 'Non-2xx' "$work/wrk.out"; then
        say "pg_resolve_bench: $e answered non-2xx: $(grep Non-2xx "$work/wrk.out")" >&2
        exit 1
    fi
    awk '$1 == "Requests/sec:" { print $2 }' "$work/wrk.out" >>"$work/r.$e"
    req=$(awk '/requests in/ { print $1 }' "$work/wrk.out")
    w=$(awk '{ print $1 + $2 }' "$work/wrk.time")
    awk -v d=$((d1 - d0)) -v b=$((b1 - b0)) -v w="$w" -v r="$req" -v hz="$hz" \
        'BEGIN { printf "%.1f %.1f %.1f\n", d * 1e6 / hz / r, b * 1e6 / hz / r, w * 1e6 / r }' \
        >>"$work/cpu.$e"
}

# Every answer must be the ABI-2 PSDB of the asked cell, on every server.
for e in $engines; do
    b=${base_of[$e]}
    got=$(curl -s "$b/v1/resolve?app=App2&app_version=3.0.0.0&family=gfx3&abi_min=1&abi_max=7")
    case "$got" in
    *'"name": "App2"'*'"family": "gfx3"'*'"abi_version": 2'* | *'"name":"App2"'*'"family":"gfx3"'*'"abi_version":2'*) ;;
    *) say "pg_resolve_bench: $b answered an unexpected resolve: $got" >&2; exit 1 ;;
    esac
done

say "index: $n_psdbs PSDBs ($apps applications x 3 versions x 3 families x 2 ABI versions) on each"
say "resolve, a different query each request: wrk -t2 -c$conns -d${secs}s, $rounds rounds alternating${pool:+, index-pool $pool}"
for e in $engines; do
    : >"$work/r.$e"
    : >"$work/cpu.$e"
done
for n in $(seq "$rounds"); do
    k=0
    for e in $engines; do
        run "$e" "$n" "$k"
        k=$((k + 1))
    done
done
r_sq=$(median <"$work/r.sqlite")
r_pg=$(median <"$work/r.pg")
col() { awk -v c="$2" '{ print $c }' "$work/cpu.$1" | median; }

say ""
say "| measure | PostgreSQL | SQLite | ratio | target |"
say "|---|---|---|---|---|"
say "| resolve req/s, a different query each request (uncached) | $r_pg | $r_sq | $(ratio "$r_pg" "$r_sq") | >= 0.5 |"
say "| psdbd CPU per request, us | $(col pg 1) | $(col sqlite 1) | | |"
say "| PostgreSQL backends' CPU per request, us | $(col pg 2) | - | | |"
say "| wrk CPU per request, us | $(col pg 3) | $(col sqlite 3) | | |"
for e in $engines; do
    [ "${e#pg-}" = "$e" ] && continue
    t=${e#pg-}
    r=$(median <"$work/r.$e")
    say "| resolve req/s, PostgreSQL, threads ${t%-*}, index-pool ${t#*-} | $r | $r_sq | $(ratio "$r" "$r_sq") | |"
done
for e in $engines; do
    say "rounds: $e $(tr '\n' ' ' <"$work/r.$e")"
done
