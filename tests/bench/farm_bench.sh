#!/usr/bin/env bash
# farm_bench.sh - the compile farm on loopback (schema/HTTP.md, "Farm"), one run on each index,
# SQLite and PostgreSQL (one psdbd each, the same figures side by side):
#   1. first miss to installable PSDB with an idle reference worker waiting (its poll 0.1 s;
#      the median of 5 rounds):
#      from the launcher's missing resolve to the first resolve that answers 200, minus the
#      worker's compile time (its --json compile_s);
#   2. a queue of 1,000 jobs (250 applications x 4 families, queued by announces) drained by 8
#      reference workers (2 per family): wall time, jobs done, duplicates (PSDBs published for
#      a cell that already had one), lost (jobs not done at the end), and the claim's p50/p99
#      as psdbd's access log times it; on PostgreSQL also 1,000 more jobs (4 other families over
#      the same SODBs) drained by 8 workers split over two psdbd replicas sharing the index and
#      the blob store (their claims race through FOR UPDATE SKIP LOCKED);
#   3. resolve requests/s (wrk -t2 -c64): hits, and misses that open or bump a job (the
#      application has an SODB: the queue on) against misses that cannot (no SODB: off), since
#      psdbd has no switch for the farm.
# Usage: tests/bench/farm_bench.sh   (env: PSDB_BENCH_BUILD=build/bench, PSDB_BENCH_APPS=250,
#        PSDB_BENCH_SECONDS=10, PSDB_BENCH_ENGINES="sqlite postgresql", PSDB_TEST_PG_URL: a
#        cluster; without it one is started with tests/pg/cluster). Installs wrk with apt-get
#        when missing. Needs curl, python3 and, for PostgreSQL, psql.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${PSDB_BENCH_BUILD:-$root/build/bench}
apps=${PSDB_BENCH_APPS:-250}
secs=${PSDB_BENCH_SECONDS:-10}
engines=${PSDB_BENCH_ENGINES:-sqlite postgresql}
say() { printf 'bench: %s\n' "$*" >&2; }

if ! command -v wrk >/dev/null; then
    say "installing wrk"
    sudo_cmd=()
    [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
        wrk >/dev/null
fi
say "building in $build"
# A tree that exists is built as it is configured (PSDB_BENCH_BUILD=build/dev); a new one Release.
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target psdbd psdb_tool >/dev/null
psdb=$build/psdb
psdbd=$build/psdbd

work=$(mktemp -d "${TMPDIR:-/tmp}/farm-bench-XXXXXX")
pids=()
dbs=()
. "$root/tests/bench/pg_lib.sh"
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for d in "${dbs[@]}"; do pg_sql postgres "DROP DATABASE IF EXISTS $d WITH (FORCE)" >/dev/null 2>&1 || true; done
    bench_pg_stop
    rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }

# The PostgreSQL cluster: the one PSDB_TEST_PG_URL names, else a private one (tests/pg/cluster).
pg_ready() { bench_pg_start "$work" && pg_sql postgres 'SELECT 1' >/dev/null; }

# start NAME: a fresh psdbd on $engine (PostgreSQL: a database of its own) with a publisher token,
# a compiler token and keys; sets url, log, index (the --index flags, empty on SQLite), data.
start() {
    local d=$work/$engine-$1
    mkdir -p "$d"
    data=$d/data
    index=()
    if [ "$engine" = postgresql ]; then
        local db="psdbfarm_$$_$1"
        pg_sql postgres "CREATE DATABASE $db"
        dbs+=("$db")
        index=(--index "$(pg_url_for "$db")")
    fi
    "$psdbd" token create --data-dir "$data" "${index[@]}" --role publisher --name studio \
        >"$d/studio.token"
    "$psdbd" token create --data-dir "$data" "${index[@]}" --role compiler --name farm \
        >"$d/farm.token"
    [ -f "$work/studio.key" ] || "$psdb" keygen -o "$work/studio.key" >/dev/null
    [ -f "$work/farm.key" ] || "$psdb" keygen -o "$work/farm.key" >/dev/null
    "$psdbd" key add --data-dir "$data" "${index[@]}" --name studio \
        --public-key "$work/studio.key.pub" >/dev/null
    "$psdbd" key add --data-dir "$data" "${index[@]}" --name farm \
        --public-key "$work/farm.key.pub" >/dev/null
    replica "$d" 1
    url=$replica_url
    log=$d/psdbd1.log
    studio=$(cat "$d/studio.token")
    farm=$(cat "$d/farm.token")
}
# replica DIR N: psdbd number N on $data (and the index); sets replica_url.
replica() {
    local d=$1 n=$2 line=""
    mkfifo "$d/fifo$n"
    "$psdbd" --listen 127.0.0.1:0 --data-dir "$data" "${index[@]}" >"$d/fifo$n" \
        2>"$d/psdbd$n.log" &
    pids+=($!)
    exec {fd}<"$d/fifo$n"
    read -r -t 30 line <&"$fd"
    replica_url=${line#psdbd: listening on }
}
worker() { # FAMILY OUT [ARGS]   (--server: $wurl, else $url)
    local fam=$1 out=$2
    shift 2
    "$psdb" worker --server "${wurl:-$url}" --token "$farm" --key "$work/farm.key" \
        --trust "$work/studio.key.pub" --family "$fam" --abi 1 --cost-ns-per-kib 0 --json "$@" \
        >"$out" 2>/dev/null &
    pids+=($!)
}
# jobs_by_state: "queued leased done held" counts of every job (GET /v1/stats/farm).
jobs_by_state() {
    curl -s -H "Authorization: Bearer $farm" "$url/v1/stats/farm" | python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"]
print(j["queued"], j["leased"], j["done"], j["held"])'
}
publishes() { cat "$@" | grep -c 'access POST /v1/psdbs 201' || true; }
# claim_times LOG...: "p50 p99 count" of the claims' times in psdbd's access log.
claim_times() {
    cat "$@" | grep 'access POST /v1/jobs/claim ' | grep -o '[0-9.]*ms' | tr -d 'ms' | sort -n |
        awk '{ v[NR] = $1 } END { if (NR == 0) { print "- - 0"; exit }
            p50 = v[int((NR - 1) * 0.5) + 1]; p99 = v[int((NR - 1) * 0.99) + 1]; print p50, p99, NR }'
}
# announce FAMILY...: a seed worker's announce per family (no claim); the jobs it queued.
announce() {
    local f n total=0
    for f in "$@"; do
        n=$(curl -s -H "Authorization: Bearer $farm" -H 'Content-Type: application/json' \
            -d "{\"worker\":\"seed-$f\",\"target\":{\"family\":\"$f\",\"abi_version\":1,\"compiler_version\":0,\"profile_version\":0}}" \
            "$url/v1/workers" | grep -o '"jobs_created": *[0-9]*' | grep -o '[0-9]*$')
        total=$((total + n))
    done
    echo "$total"
}
# drain URL1 URL2 FAMILY...: 2 workers per family (the first of each pair on URL1, the second on
# URL2) until nothing is left; sets drain_ms.
drain() {
    local u1=$1 u2=$2 f k t0 wpids=()
    shift 2
    t0=$(now)
    for f in "$@"; do
        for k in 1 2; do
            if [ "$k" = 1 ]; then wurl=$u1; else wurl=$u2; fi
            worker "$f" "$work/$engine-q-$f-$k.out" --once --poll-s 0.1
            wpids+=($!)
        done
    done
    wurl=
    for p in "${wpids[@]}"; do wait "$p" || true; done
    drain_ms=$(ms "$t0" "$(now)")
}

declare -A R # R[ENGINE.figure]: what each engine measured

# ---- 1. first miss to installable PSDB (5 rounds, one application each) ------------------------
# The worker announces before any SODB exists (its announce queues nothing) and idles; each
# round publishes an SODB and misses on it.
first_miss() {
    local rounds=5 r c t0 t1 lat_pid
    start latency
    worker lat-gfx "$work/$engine-lat.out" --poll-s 0.1 --max-jobs $rounds
    lat_pid=${pids[-1]}
    sleep 1
    : >"$work/$engine-lat.ms"
    for r in $(seq 1 $rounds); do
        "$psdb" synth --app "Lat$r" --app-version 1.0.0.0 --pipelines 200 --seed "$r" \
            -o "$work/lat.sodb" >/dev/null
        "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" \
            "$work/lat.sodb" >/dev/null
        sleep 0.5 # the worker idles in its poll, at any phase of it
        t0=$(now)
        "$psdb" resolve --server "$url" --app "Lat$r" --app-version 1.0.0.0 --family lat-gfx \
            --abi-min 1 --abi-max 1 >/dev/null 2>&1 || true
        until "$psdb" resolve --server "$url" --app "Lat$r" --app-version 1.0.0.0 \
            --family lat-gfx --abi-min 1 --abi-max 1 >/dev/null 2>&1; do sleep 0.01; done
        t1=$(now)
        c=$(grep -o '"compile_s":[0-9.e-]*' "$work/$engine-lat.out" | sed -n "${r}p" | cut -d: -f2)
        awk -v t="$(ms "$t0" "$t1")" -v c="$c" \
            'BEGIN { printf "%.1f %.1f %.1f\n", t - c * 1000, t, c * 1000 }' >>"$work/$engine-lat.ms"
    done
    wait "$lat_pid" || true
    read -r latency_ms total_ms compile_ms < <(sort -n "$work/$engine-lat.ms" |
        sed -n "$(((rounds + 1) / 2))p")
    say "$engine: first miss -> installable (median of $rounds): $latency_ms ms without the" \
        "compile's $compile_ms ms"
    R[$engine.first]="$latency_ms ms (total $total_ms, compile $compile_ms; the 5: $(cut -d' ' -f1 "$work/$engine-lat.ms" | paste -sd' '))"
}

# ---- 2. 1,000 queued jobs, 8 workers ------------------------------------------------------------
# queue_figures KEY DONE_BEFORE PUBLISHED_BEFORE QUEUED LOG...: the drained batch's figures.
queue_figures() {
    local key=$1 done_before=$2 pub_before=$3 queued=$4 q l d h done_n published
    shift 4
    read -r q l d h < <(jobs_by_state)
    done_n=$((d - done_before))
    published=$(($(publishes "$@") - pub_before))
    read -r claim_p50 claim_p99 claims < <(claim_times "$@")
    say "$engine ($key): drained $done_n of $queued jobs in $drain_ms ms;" \
        "$((published - done_n)) duplicates, $((q + l + h)) lost"
    R[$engine.$key.drain]="$drain_ms ms"
    R[$engine.$key.count]="$done_n / $((published - done_n)) / $((q + l + h))"
    R[$engine.$key.claim]="$claim_p50 ms / $claim_p99 ms ($claims claims)"
    R[$engine.$key.queued]=$queued
}
queue() {
    local i queued
    start queue
    say "$engine: publishing $apps SODBs"
    for i in $(seq 1 "$apps"); do
        "$psdb" synth --app "Q$i" --app-version 1.0.0.0 --pipelines 4 --seed "$i" \
            -o "$work/q.sodb" >/dev/null
        "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" \
            "$work/q.sodb" >/dev/null
    done
    queued=$(announce qa qb qc qd)
    say "$engine: $queued jobs queued; 8 workers"
    drain "$url" "$url" qa qb qc qd
    queue_figures one 0 0 "$queued" "$log"
    [ "$engine" = postgresql ] || return 0
    # The same SODBs for 4 other families: 1,000 more jobs, the workers split over two replicas.
    local before mark d2=$work/$engine-queue
    read -r _ _ before _ < <(jobs_by_state)
    replica "$d2" 2
    queued=$(announce qe qf qg qh)
    say "$engine: $queued more jobs queued; 8 workers on 2 replicas"
    # Only this batch's claims and publishes: the first replica's log from here on.
    mark=$(wc -l <"$log")
    drain "$url" "$replica_url" qe qf qg qh
    tail -n +"$((mark + 1))" "$log" >"$d2/batch2-r1.log"
    queue_figures two "$before" 0 "$queued" "$d2/batch2-r1.log" "$d2/psdbd2.log"
}

# ---- 3. resolve requests/s with the queue's work on and off -------------------------------------
# psdbd has no switch for the farm: a miss for an application with a published SODB opens or
# bumps a job (the queue on), a miss for one without an SODB does not (off); hits never touch it.
rps() { # URL -> requests/s
    wrk -t2 -c64 -d"${secs}s" "$1" | awk '$1 == "Requests/sec:" { print $2 }'
}
resolve_rates() {
    local hit on_miss off_miss rjobs
    start resolve
    "$psdb" synth --app R --app-version 1.0.0.0 --pipelines 50 -o "$work/r.sodb" >/dev/null
    "$psdb" compile "$work/r.sodb" --family rhit --abi 1 -o "$work/r.psdb" >/dev/null
    "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/r.sodb" \
        >/dev/null
    "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/r.psdb" \
        >/dev/null
    "$psdb" synth --app S --app-version 1.0.0.0 --pipelines 50 -o "$work/s.sodb" >/dev/null
    "$psdb" compile "$work/s.sodb" --family rhit --abi 1 -o "$work/s.psdb" >/dev/null
    "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/s.psdb" \
        >/dev/null
    hit=$(rps "$url/v1/resolve?app=R&app_version=1.0.0.0&family=rhit&abi_min=1&abi_max=1")
    on_miss=$(rps "$url/v1/resolve?app=R&app_version=1.0.0.0&family=rmiss&abi_min=1&abi_max=1")
    off_miss=$(rps "$url/v1/resolve?app=S&app_version=1.0.0.0&family=rmiss&abi_min=1&abi_max=1")
    rjobs=$(curl -s -H "Authorization: Bearer $farm" "$url/v1/jobs" |
        grep -o '"demand": *[0-9]*' | grep -o '[0-9]*$' | paste -sd+ | bc)
    R[$engine.hit]=$hit
    R[$engine.miss]="$on_miss / $off_miss ($(awk -v a="$on_miss" -v b="$off_miss" \
        'BEGIN { printf "%.2f", a / b }')x; demand recorded $rjobs)"
}

measured=()
for engine in $engines; do
    case "$engine" in
    sqlite) ;;
    postgresql)
        if ! pg_ready; then
            say "postgresql: no cluster (tests/pg/cluster start failed); not measured"
            continue
        fi
        ;;
    *)
        say "unknown engine '$engine' in PSDB_BENCH_ENGINES (sqlite, postgresql)"
        exit 2
        ;;
    esac
    say "---- $engine"
    first_miss
    queue
    resolve_rates
    measured+=("$engine")
done

# The table: one column per engine measured.
row() { # LABEL FIGURE
    local e line="| $1 |"
    for e in "${measured[@]}"; do line+=" ${R[$e.$2]:--} |"; done
    echo "$line"
}
head="| farm figure |"
rule="|---|"
for e in "${measured[@]}"; do
    head+=" $e |"
    rule+="---|"
done
echo "$head"
echo "$rule"
row "first miss -> installable PSDB, idle worker (poll 0.1 s), compile excluded, median of 5" first
row "${R[${measured[0]}.one.queued]} queued jobs, 8 workers (2 per family), one psdbd: drained in" one.drain
row "jobs done / duplicate publishes / lost" one.count
row "claim latency p50 / p99 (psdbd access log)" one.claim
row "as many more jobs (4 other families), 8 workers on 2 psdbd replicas (4 each): drained in" two.drain
row "2 replicas: jobs done / duplicate publishes / lost" two.count
row "2 replicas: claim latency p50 / p99 (both access logs)" two.claim
row "resolve req/s (wrk -t2 -c64 ${secs}s): hit" hit
row "resolve req/s: miss with an SODB (queue on) / without (queue off)" miss
