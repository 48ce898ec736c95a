#!/usr/bin/env bash
# tail_bench.sh - resolve latency at 64 keep-alive connections: p50, p99 and p999 of psdbd against
# nginx serving the same JSON (a static copy of psdbd's answer), alternated over rounds (the order
# rotates each round), with the medians, their ratios to nginx, and each round's p99 ratio to the
# nginx run of the same round (median and worst: how stable the tail is). Optional rows in the
# same rounds: psdbd of another build (before and after a change) and psdbd with its request log
# on (written to a file).
# Usage: tests/bench/tail_bench.sh [BUILD_DIR]   (default build/bench: Release, PSDB_BENCH=ON)
# Env: PSDB_BENCH_ROUNDS (default 7), PSDB_BENCH_SECONDS (per wrk run, default 5),
#      PSDB_BENCH_CONNECTIONS (default 64), PSDB_BENCH_THREADS (psdbd's --threads; default:
#      one per CPU of BENCH_SERVER_CPUS when that is set, else psdbd's own),
#      PSDB_BENCH_OLD=BUILD_DIR (that build's psdbd in the same rounds), PSDB_BENCH_LOG=1 (a
#      row for psdbd with log-requests on), PSDB_BENCH_WRK_THREADS (wrk's -t, default 2),
#      BENCH_SERVER_CPUS and BENCH_CLIENT_CPUS (taskset CPU lists: the servers on the first, wrk
#      on the second; nginx then gets a worker and psdbd a thread per server CPU).
# Needs wrk, nginx and curl. It never fails for speed; non-zero only when something is broken.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/bench}" 2>/dev/null && pwd || echo "${1:-$root/build/bench}")
rounds=${PSDB_BENCH_ROUNDS:-7}
secs=${PSDB_BENCH_SECONDS:-5}
conns=${PSDB_BENCH_CONNECTIONS:-64}
wt=${PSDB_BENCH_WRK_THREADS:-2}
say() { printf 'tail_bench: %s\n' "$*" >&2; }
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"
for t in wrk curl; do
    command -v "$t" >/dev/null || { say "needs $t"; exit 2; }
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx_bin" ] || { say "needs nginx"; exit 2; }

say "building (Release) in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target psdbd psdb_tool bench_server_mkpsdb >/dev/null
psdb=$build/psdb
old=${PSDB_BENCH_OLD:+$(cd "$PSDB_BENCH_OLD" && pwd)}
[ -z "$old" ] || [ -x "$old/psdbd" ] || { say "no psdbd in $old"; exit 2; }

bench_work psdb-tail

# start_psdbd NAME BINARY DATA [flags]: a psdbd on a free port; its URL in $work/NAME.url.
start_psdbd() {
    local name=$1 bin=$2 data=$3
    shift 3
    local threads=()
    # Pinned, a thread per CPU as nginx gets a worker: more runnable threads than CPUs queue
    # requests behind each other's time slices.
    if [ -n "${PSDB_BENCH_THREADS:-}" ]; then
        threads=(--threads "$PSDB_BENCH_THREADS")
    elif [ -n "${BENCH_SERVER_CPUS:-}" ]; then
        threads=(--threads "$(bench_cpus)")
    fi
    bench_psdbd "$work/$name.out" "$work/$name.log" "$bin" --data-dir "$data" "${threads[@]}" \
        --max-connections 4000 "$@"
    pids+=("$bench_pid")
    echo "$bench_url" >"$work/$name.url"
}

say "publishing a PSDB"
"$build/tests/bench_server_mkpsdb" "$work/s.psdb" 1 Bench >/dev/null
data=$work/data
token=$("$build/psdbd" token create --data-dir "$data" --role publisher --name bench)
"$psdb" keygen -o "$work/key" >/dev/null
"$build/psdbd" key add --data-dir "$data" --name bench --public-key "$work/key.pub" >/dev/null
start_psdbd setup "$build/psdbd" "$data" --log-requests false
"$psdb" publish --server "$(cat "$work/setup.url")" --token "$token" --key "$work/key" \
    "$work/s.psdb" >/dev/null
query="/v1/resolve?app=Bench&app_version=1.0.0.0&family=bench-gfx1&abi_min=1&abi_max=1"
mkdir -p "$work/www"
curl -sf -o "$work/www/resolve.json" "$(cat "$work/setup.url")$query"
kill -TERM "${pids[-1]}"
wait "${pids[-1]}" || true
unset 'pids[-1]'

# One data directory per server (a directory admits one psdbd), all running through the rounds;
# an idle one costs nothing measurable.
variants=(psdbd)
cp -a "$data" "$work/data.psdbd"
start_psdbd psdbd "$build/psdbd" "$work/data.psdbd" --log-requests false
if [ -n "$old" ]; then
    variants+=(old)
    cp -a "$data" "$work/data.old"
    start_psdbd old "$old/psdbd" "$work/data.old" --log-requests false
fi
if [ "${PSDB_BENCH_LOG:-0}" = 1 ]; then
    variants+=(logged)
    cp -a "$data" "$work/data.logged"
    start_psdbd logged "$build/psdbd" "$work/data.logged" --log-requests true
fi
for v in "${variants[@]}"; do
    printf '%s%s\n' "$(cat "$work/$v.url")" "$query" >"$work/$v.url"
done

nport=$(bench_free_port)
chmod 755 "$work" "$work/www"
bench_nginx_conf "$work/nginx.conf" "$work" "$work/www" "$nport"
bench_nginx "$work/nginx.conf" "$work/nginx.error.log"
pids+=("$bench_pid")
sleep 0.5
variants+=(nginx)
echo "http://127.0.0.1:$nport/resolve.json" >"$work/nginx.url"
curl -sf -o /dev/null "$(cat "$work/nginx.url")" || { say "nginx did not start"; exit 1; }

cat >"$work/pct.lua" <<'LUA'
done = function(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write +
                 summary.errors.status + summary.errors.timeout
  io.write(string.format("PCT %.0f %.3f %.3f %.3f %d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, latency:percentile(99.9) / 1000, errors))
end
LUA

say "resolve at $conns connections: wrk -t$wt -c$conns -d${secs}s, $rounds rounds of: ${variants[*]}"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for v in "${variants[@]}"; do : >"$work/$v.rows"; done
n=${#variants[@]}
for r in $(seq "$rounds"); do
    line="round $r:"
    for i in $(seq 0 $((n - 1))); do
        v=${variants[$(((i + r) % n))]}
        row=$(bench_client wrk -t"$wt" -c"$conns" -d"${secs}s" -s "$work/pct.lua" \
            "$(cat "$work/$v.url")" |
            awk '$1 == "PCT" { print $2, $3, $4, $5, $6 }')
        [ -n "$row" ] || { say "wrk gave nothing for $v"; exit 1; }
        echo "$r $row" >>"$work/$v.rows"
        line="$line $v $(echo "$row" | awk '{ printf "p99 %s ms", $3 }')"
    done
    say "$line"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print 0 }'; }
col() { awk -v c="$2" '{ print $c }' "$work/$1.rows" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
errors=0
for v in "${variants[@]}"; do
    errors=$((errors + $(awk '{ s += $6 } END { print s + 0 }' "$work/$v.rows")))
done
ng_p50=$(col nginx 3)
ng_p99=$(col nginx 4)
ng_p999=$(col nginx 5)
cat <<REPORT
resolve latency, $conns keep-alive connections (wrk -t$wt), $(nproc) cores${BENCH_SERVER_CPUS:+ (servers on CPUs $BENCH_SERVER_CPUS, wrk on ${BENCH_CLIENT_CPUS:-any})}, loopback; medians of $rounds
rounds of ${secs} s, servers alternated; load average $load_before before, $load_after after
| server | requests/s | p50 ms | p99 ms | p999 ms | p50 / nginx | p99 / nginx | p999 / nginx | p99 / nginx per round: median, worst |
|---|---|---|---|---|---|---|---|---|
REPORT
for v in "${variants[@]}"; do
    case $v in
    psdbd) label="psdbd" ;;
    old) label="psdbd (PSDB_BENCH_OLD)" ;;
    logged) label="psdbd, request log on" ;;
    nginx) label="nginx (static JSON)" ;;
    esac
    p50=$(col "$v" 3)
    p99=$(col "$v" 4)
    p999=$(col "$v" 5)
    per_round=$(join <(sort -k1,1 "$work/$v.rows") <(sort -k1,1 "$work/nginx.rows") |
        awk '{ if ($9 > 0) print $4 / $9 }' | sort -g)
    pr_med=$(echo "$per_round" | median)
    pr_max=$(echo "$per_round" | tail -1)
    printf '| %s | %.0f | %s | %s | %s | %s | %s | %s | %.2f, %.2f |\n' "$label" "$(col "$v" 2)" \
        "$p50" "$p99" "$p999" "$(ratio "$p50" "$ng_p50")" "$(ratio "$p99" "$ng_p99")" \
        "$(ratio "$p999" "$ng_p999")" "$pr_med" "$pr_max"
done
[ "$errors" -eq 0 ] || { say "wrk counted $errors errors (see the servers' logs)"; exit 1; }
