#!/usr/bin/env bash
# farm_bench.sh - the compile farm on loopback (schema/HTTP.md, "Farm"), one run each:
#   1. first miss to installable PSDB with an idle reference worker waiting (its poll 0.1 s):
#      from the launcher's missing resolve to the first resolve that answers 200, minus the
#      worker's compile time (its --json compile_s);
#   2. a queue of 1,000 jobs (250 applications x 4 families, queued by announces) drained by 8
#      reference workers (2 per family): wall time, jobs done, duplicates (PSDBs published for
#      a cell that already had one), lost (jobs not done at the end), and the claim's p50/p99
#      as psdbd's access log times it;
#   3. resolve requests/s (wrk -t2 -c64, hits and misses) with the farm's queue on against off,
#      where psdbd has a switch for it (config farm = true / false); else only "on" is reported.
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
say "building (Release) in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
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

# start NAME [CONFIG-LINES]: a fresh psdbd with a publisher token, a compiler token and keys.
start() {
    local d=$work/$1
    mkdir -p "$d"
    [ -n "${2:-}" ] && printf '%s\n' "$2" >"$d/psdbd.conf"
    "$psdbd" token create --data-dir "$d/data" --role publisher --name studio >"$d/studio.token"
    "$psdbd" token create --data-dir "$d/data" --role compiler --name farm >"$d/farm.token"
    [ -f "$work/studio.key" ] || "$psdb" keygen -o "$work/studio.key" >/dev/null
    [ -f "$work/farm.key" ] || "$psdb" keygen -o "$work/farm.key" >/dev/null
    "$psdbd" key add --data-dir "$d/data" --name studio --public-key "$work/studio.key.pub" >/dev/null
    "$psdbd" key add --data-dir "$d/data" --name farm --public-key "$work/farm.key.pub" >/dev/null
    mkfifo "$d/fifo"
    local conf=()
    [ -f "$d/psdbd.conf" ] && conf=(--config "$d/psdbd.conf")
    "$psdbd" --listen 127.0.0.1:0 --data-dir "$d/data" "${conf[@]}" >"$d/fifo" 2>"$d/psdbd.log" &
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

# ---- 1. first miss to installable PSDB ----------------------------------------------------------
start latency
"$psdb" synth --app Lat --app-version 1.0.0.0 --pipelines 200 -o "$work/lat.sodb" >/dev/null
"$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/lat.sodb" \
    >/dev/null
worker lat-gfx "$work/lat.out" --poll-s 0.1 --max-jobs 1
sleep 1 # the worker is announced and idle
t0=$(now)
"$psdb" resolve --server "$url" --app Lat --app-version 1.0.0.0 --family lat-gfx --abi-min 1 --abi-max 1 \
    >/dev/null 2>&1 || true
until "$psdb" resolve --server "$url" --app Lat --app-version 1.0.0.0 --family lat-gfx --abi-min 1 --abi-max 1 \
    >/dev/null 2>&1; do sleep 0.01; done
t1=$(now)
wait "${pids[-1]}" || true
compile_s=$(grep -o '"compile_s":[0-9.e-]*' "$work/lat.out" | cut -d: -f2)
total_ms=$(ms "$t0" "$t1")
latency_ms=$(awk -v t="$total_ms" -v c="$compile_s" 'BEGIN { printf "%.1f", t - c * 1000 }')
say "first miss -> installable: $total_ms ms, compile $compile_s s, without it $latency_ms ms"

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

# ---- 3. resolve requests/s with the queue on and off ---------------------------------------------
rps() { # URL -> requests/s
    wrk -t2 -c64 -d"${secs}s" "$1" | awk '$1 == "Requests/sec:" { print $2 }'
}
start on
"$psdb" synth --app R --app-version 1.0.0.0 --pipelines 50 -o "$work/r.sodb" >/dev/null
"$psdb" compile "$work/r.sodb" --family rhit --abi 1 -o "$work/r.psdb" >/dev/null
"$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/r.sodb" >/dev/null
"$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/r.psdb" >/dev/null
hit="$url/v1/resolve?app=R&app_version=1.0.0.0&family=rhit&abi_min=1&abi_max=1"
miss="$url/v1/resolve?app=R&app_version=1.0.0.0&family=rmiss&abi_min=1&abi_max=1"
on_hit=$(rps "$hit")
on_miss=$(rps "$miss")
off_hit=- off_miss=-
if "$psdbd" --help 2>&1 | grep -q 'farm'; then
    start off "farm = false"
    "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/r.sodb" >/dev/null
    "$psdb" publish --server "$url" --token "$studio" --key "$work/studio.key" "$work/r.psdb" >/dev/null
    hit="$url/v1/resolve?app=R&app_version=1.0.0.0&family=rhit&abi_min=1&abi_max=1"
    miss="$url/v1/resolve?app=R&app_version=1.0.0.0&family=rmiss&abi_min=1&abi_max=1"
    off_hit=$(rps "$hit")
    off_miss=$(rps "$miss")
fi

cat <<EOF
| farm figure | value |
|---|---|
| first miss -> installable PSDB, idle worker (poll 0.1 s), compile excluded | $latency_ms ms (total $total_ms ms, compile $compile_s s) |
| $queued queued jobs, 8 workers (2 per family): wall time | $drain_ms ms |
| jobs done / by the workers' lines / duplicates / lost | $done_n / $worker_done / $dups / $lost |
| claim latency p50 / p99 (psdbd access log, $claims claims) | $claim_p50 ms / $claim_p99 ms |
| resolve req/s, queue on: hit / miss (wrk -t2 -c64 ${secs}s) | $on_hit / $on_miss |
| resolve req/s, queue off: hit / miss | $off_hit / $off_miss |
EOF
