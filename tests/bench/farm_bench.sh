#!/usr/bin/env bash
# farm_bench.sh - the compile farm on loopback (schema/HTTP.md, "Farm"), one run each:
#   1. first miss to installable PSDB with an idle reference worker waiting (its poll 0.1 s;
#      the median of 5 rounds):
#      from the launcher's missing resolve to the first resolve that answers 200, minus the
#      worker's compile time (its --json compile_s);
#   2. a queue of 1,000 jobs (250 applications x 4 families, queued by announces) drained by 8
#      reference workers (2 per family): wall time, jobs done, duplicates (PSDBs published for
#      a cell that already had one), lost (jobs not done at the end), and the claim's p50/p99
#      as psdbd's access log times it;
#   3. resolve requests/s (wrk -t2 -c64): hits, and misses that open or bump a job (the
#      application has an SODB: the queue on) against misses that cannot (no SODB: off), since
#      psdbd has no switch for the farm.
# Usage: tests/bench/farm_bench.sh   (env: PSDB_BENCH_BUILD=build/bench, PSDB_BENCH_APPS=250,
#        PSDB_BENCH_SECONDS=10). Installs wrk with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${PSDB_BENCH_BUILD:-$root/build/bench}
apps=${PSDB_BENCH_APPS:-250}
secs=${PSDB_BENCH_SECONDS:-10}
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
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) * 1000 }'; }

# start NAME: a fresh psdbd with a publisher token, a compiler token and keys.
start() {
    local d=$work/$1
    mkdir -p "$d"
    "$psdbd" token create --data-dir "$d/data" --role publisher --name studio >"$d/studio.token"
    "$psdbd" token create --data-dir "$d/data" --role compiler --name farm >"$d/farm.token"
    [ -f "$work/studio.key" ] || "$psdb" keygen -o "$work/studio.key" >/dev/null
    [ -f "$work/farm.key" ] || "$psdb" keygen -o "$work/farm.key" >/dev/null
    "$psdbd" key add --data-dir "$d/data" --name studio --public-key "$work/studio.key.pub" >/dev/null
    "$psdbd" key add --data-dir "$d/data" --name farm --public-key "$work/farm.key.pub" >/dev/null
    mkfifo "$d/fifo"
    "$psdbd" --listen 127.0.0.1:0 --data-dir "$d/data" >"$d/fifo" 2>"$d/psdbd.log" &
    pids+=($!)
    exec {fd}<"$d/fifo"
    read -r -t 30 line <&"$fd"
    url=${line#psdbd: listening on }
    studio=$(cat "$d/studio.token")
    farm=$(cat "$d/farm.token")
    log=$d/psdbd.log
}
worker() { # FAMILY OUT [ARGS]
    local fam=$1 out=$2
    shift 2
    "$psdb" worker --server "$url" --token "$farm" --key "$work/farm.key" \
        --trust "$work/studio.key.pub" --family "$fam" --abi 1 --cost-ns-per-kib 0 --json "$@" \
        >"$out" 2>/dev/null &
    pids+=($!)
}

# ---- 1. first miss to installable PSDB (5 rounds, one application each) ------------------------
# The worker announces before any SODB exists (its announce queues nothing) and idles; each
# round publishes an SODB and misses on it.
start latency
rounds=5
worker lat-gfx "$work/lat.out" --poll-s 0.1 --max-jobs $rounds
lat_pid=${pids[-1]}
sleep 1
: >"$work/lat.ms"
for r in $(seq 1 $rounds); do
    "$psdb" synth --app "Lat$r" --app-version 1.0.0.0 --pipelines 200 --seed "$r" \
        -o "$work/lat.sodb" >/dev/null
    "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/lat.sodb" \
        >/dev/null
    sleep 0.5 # the worker idles in its poll, at any phase of it
    t0=$(now)
    "$psdb" resolve --server "$url" --app "Lat$r" --app-version 1.0.0.0 --family lat-gfx \
        --abi-min 1 --abi-max 1 >/dev/null 2>&1 || true
    until "$psdb" resolve --server "$url" --app "Lat$r" --app-version 1.0.0.0 --family lat-gfx \
        --abi-min 1 --abi-max 1 >/dev/null 2>&1; do sleep 0.01; done
    t1=$(now)
    c=$(grep -o '"compile_s":[0-9.e-]*' "$work/lat.out" | sed -n "${r}p" | cut -d: -f2)
    awk -v t="$(ms "$t0" "$t1")" -v c="$c" 'BEGIN { printf "%.1f %.1f %.1f\n", t - c * 1000, t, c * 1000 }' \
        >>"$work/lat.ms"
done
wait "$lat_pid" || true
read -r latency_ms total_ms compile_ms < <(sort -n "$work/lat.ms" | sed -n "$(((rounds + 1) / 2))p")
say "first miss -> installable (median of $rounds): $latency_ms ms without the compile's $compile_ms ms"

# ---- 2. 1,000 queued jobs, 8 workers ------------------------------------------------------------
start queue
say "publishing $apps SODBs"
for i in $(seq 1 "$apps"); do
    "$psdb" synth --app "Q$i" --app-version 1.0.0.0 --pipelines 4 --seed "$i" -o "$work/q.sodb" \
        >/dev/null
    "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/q.sodb" \
        >/dev/null
done
queued=0
for f in qa qb qc qd; do
    n=$(curl -s -H "Authorization: Bearer $farm" -H 'Content-Type: application/json' \
        -d "{\"worker\":\"seed-$f\",\"target\":{\"family\":\"$f\",\"abi_version\":1,\"compiler_version\":0,\"profile_version\":0}}" \
        "$url/v1/workers" | grep -o '"jobs_created": *[0-9]*' | grep -o '[0-9]*$')
    queued=$((queued + n))
done
say "$queued jobs queued; 8 workers"
t0=$(now)
wpids=()
for f in qa qb qc qd; do
    for k in 1 2; do
        worker "$f" "$work/q-$f-$k.out" --once --poll-s 0.1
        wpids+=($!)
    done
done
for p in "${wpids[@]}"; do wait "$p" || true; done
t1=$(now)
drain_ms=$(ms "$t0" "$t1")
jobs=$(curl -s -H "Authorization: Bearer $farm" "$url/v1/jobs")
done_n=$(printf '%s' "$jobs" | grep -o '"state": *"done"' | wc -l)
lost=$((queued - done_n))
published=$(grep -c 'access POST /v1/psdbs 201' "$log" || true)
dups=$((published - done_n))
worker_done=$(cat "$work"/q-*.out | grep -c '"outcome":"done"' || true)
read -r claim_p50 claim_p99 claims < <(grep 'access POST /v1/jobs/claim ' "$log" |
    grep -o '[0-9.]*ms' | tr -d 'ms' | sort -n |
    awk '{ v[NR] = $1 } END { if (NR == 0) { print "- - 0"; exit }
        p50 = v[int((NR - 1) * 0.5) + 1]; p99 = v[int((NR - 1) * 0.99) + 1]; print p50, p99, NR }')
say "drained $done_n of $queued jobs in $drain_ms ms; $dups duplicates, $lost lost"

# ---- 3. resolve requests/s with the queue's work on and off -------------------------------------
# psdbd has no switch for the farm: a miss for an application with a published SODB opens or
# bumps a job (the queue on), a miss for one without an SODB does not (off); hits never touch it.
rps() { # URL -> requests/s
    wrk -t2 -c64 -d"${secs}s" "$1" | awk '$1 == "Requests/sec:" { print $2 }'
}
start resolve
"$psdb" synth --app R --app-version 1.0.0.0 --pipelines 50 -o "$work/r.sodb" >/dev/null
"$psdb" compile "$work/r.sodb" --family rhit --abi 1 -o "$work/r.psdb" >/dev/null
"$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/r.sodb" >/dev/null
"$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/r.psdb" >/dev/null
"$psdb" synth --app S --app-version 1.0.0.0 --pipelines 50 -o "$work/s.sodb" >/dev/null
"$psdb" compile "$work/s.sodb" --family rhit --abi 1 -o "$work/s.psdb" >/dev/null
"$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/s.psdb" >/dev/null
hit=$(rps "$url/v1/resolve?app=R&app_version=1.0.0.0&family=rhit&abi_min=1&abi_max=1")
on_miss=$(rps "$url/v1/resolve?app=R&app_version=1.0.0.0&family=rmiss&abi_min=1&abi_max=1")
off_miss=$(rps "$url/v1/resolve?app=S&app_version=1.0.0.0&family=rmiss&abi_min=1&abi_max=1")
rjobs=$(curl -s -H "Authorization: Bearer $farm" "$url/v1/jobs" | grep -o '"demand": *[0-9]*' |
    grep -o '[0-9]*$' | paste -sd+ | bc)

cat <<EOF
| farm figure | value |
|---|---|
| first miss -> installable PSDB, idle worker (poll 0.1 s), compile excluded, median of $rounds | $latency_ms ms (total $total_ms ms, compile $compile_ms ms; all: $(cut -d' ' -f1 "$work/lat.ms" | paste -sd' ')) |
| $queued queued jobs, 8 workers (2 per family): wall time | $drain_ms ms |
| jobs done / by the workers' lines / duplicates / lost | $done_n / $worker_done / $dups / $lost |
| claim latency p50 / p99 (psdbd access log, $claims claims) | $claim_p50 ms / $claim_p99 ms |
| resolve req/s (wrk -t2 -c64 ${secs}s): hit | $hit |
| resolve req/s: miss with an SODB (opens/bumps a job: queue on) / without (queue off) | $on_miss / $off_miss ($(awk -v a="$on_miss" -v b="$off_miss" 'BEGIN { printf "%.2f", a / b }')x; demand recorded $rjobs) |
EOF
