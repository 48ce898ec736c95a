#!/usr/bin/env bash
# conn_memory_bench.sh - memory per downloading connection: the RSS growth of psdbd, and of
# nginx's processes, while 1,000 clients each hold a slow download of the same blob
# (slow_downloads.py), with blob download GiB/s (wrk -t2 -c4) and resolve requests/s
# (wrk -t2 -c64) of the same fresh server, for psdbd at each connection-memory of
# PSDB_BENCH_POOLS and for nginx, alternated over rounds (the order rotates), medians and ratios to
# nginx. Then, unless PSDB_BENCH_PUBLISH_MIB=0, the publish of one file at each
# upload-connection-memory of PSDB_BENCH_POOLS: seconds and psdbd's CPU seconds (the pool bounds
# the chunks a body is received in).
# Usage: tests/bench/conn_memory_bench.sh [BUILD_DIR]   (default build/bench: Release, PSDB_BENCH=ON)
# Env: PSDB_BENCH_ROUNDS (default 5), PSDB_BENCH_SECONDS (per wrk run, default 5),
#      PSDB_BENCH_CONNECTIONS (slow downloads, default 1000), PSDB_BENCH_POOLS (default "8K 64K"),
#      PSDB_BENCH_PUBLISH_MIB (default 256; 0 skips the publishes).
# Needs wrk, nginx, curl, python3. It never fails for speed or size; non-zero only when something is
# broken (a download refused, a server that does not start).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/bench}
rounds=${PSDB_BENCH_ROUNDS:-5}
secs=${PSDB_BENCH_SECONDS:-5}
nconn=${PSDB_BENCH_CONNECTIONS:-1000}
read -r -a pools <<<"${PSDB_BENCH_POOLS:-8K 64K}"
pub_mib=${PSDB_BENCH_PUBLISH_MIB:-256}
say() { printf 'conn_memory_bench: %s\n' "$*" >&2; }
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"
for t in wrk curl python3; do
    command -v "$t" >/dev/null || { say "needs $t"; exit 2; }
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx_bin" ] || { say "needs nginx"; exit 2; }
# Each slow download is a socket here and a socket and a file in the server.
ulimit -n $((3 * nconn + 1024)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"

say "building (Release) in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target psdbd psdb_tool bench_server_mkpsdb >/dev/null
build=$(cd "$build" && pwd)
psdb=$build/psdb
psdbd=$build/psdbd

work=$(mktemp -d "${TMPDIR:-/tmp}/psdb-connmem-XXXXXX")
pid=
cleanup() {
    [ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# start_psdbd DATA [flags]: a psdbd on a free port; sets pid and base.
start_psdbd() {
    local data=$1
    shift
    bench_psdbd "$work/psdbd.out" "$work/psdbd.log" "$psdbd" --data-dir "$data" \
        --max-connections $((nconn + 1000)) --max-upload 4G --log-requests false "$@"
    pid=$bench_pid
    base=$bench_url
}
stop_server() {
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
}

say "publishing a 64 MiB PSDB"
"$build/tests/bench_server_mkpsdb" "$work/big.psdb" 64 Bench >/dev/null
sha=$(sha256sum "$work/big.psdb" | cut -c1-64)
data=$work/data
token=$("$psdbd" token create --data-dir "$data" --role publisher --name bench)
"$psdb" keygen -o "$work/key" >/dev/null
"$psdbd" key add --data-dir "$data" --name bench --public-key "$work/key.pub" >/dev/null
start_psdbd "$data"
"$psdb" publish --server "$base" --token "$token" --key "$work/key" "$work/big.psdb" >/dev/null
query="/v1/resolve?app=Bench&app_version=1.0.0.0&family=bench-gfx1&abi_min=1&abi_max=1"
www=$work/www
mkdir -p "$www/v1/blobs"
curl -sf -o "$www/resolve.json" "$base$query"
stop_server
ln "$data/blobs/${sha:0:2}/$sha" "$www/v1/blobs/$sha"
chmod -R a+rX "$work"

nport=$(bench_free_port)
bench_nginx_conf "$work/nginx.conf" "$work" "$www" "$nport" "$nconn"
start_nginx() {
    bench_nginx "$work/nginx.conf" "$work/nginx.error.log"
    pid=$bench_pid
    base=http://127.0.0.1:$nport
    for _ in $(seq 100); do
        curl -sf -o /dev/null "$base/resolve.json" && return 0
        sleep 0.05
    done
    say "nginx did not start"
    exit 1
}

# measure NAME: the running server ($pid, $base): warm it (a resolve, a range of the blob), then
# the slow downloads, then the throughputs. One line in $work/NAME.rows:
# round KiB_per_connection blob_GiB/s resolve_req/s
to_gib() { # "1.23GB" -> GiB
    awk -v v="$1" 'BEGIN { n = v + 0; u = v; gsub(/[0-9.]/, "", u);
        f = (u == "GB") ? 1 : (u == "MB") ? 1/1024 : (u == "KB") ? 1/1048576 : 1/1073741824;
        printf "%.3f", n * f }'
}
measure() {
    local name=$1 round=$2 rurl bpids out kib gib rps
    if [ "$name" = nginx ]; then
        rurl=$base/resolve.json
        bpids="$pid $(pgrep -P "$pid" | tr '\n' ' ')"
    else
        rurl=$base$query
        bpids=$pid
    fi
    curl -sf -o /dev/null "$rurl"
    curl -sf -o /dev/null -r 0-65535 "$base/v1/blobs/$sha"
    sleep 0.3
    # shellcheck disable=SC2086
    out=$(python3 "$root/tests/bench/slow_downloads.py" 127.0.0.1 "${base##*:}" "/v1/blobs/$sha" \
        "$nconn" 3 $bpids) || { say "$name: slow downloads failed: $out"; exit 1; }
    kib=$(echo "$out" | awk '{ for (i = 1; i < NF; i++) if ($i == "per_conn_kib") print $(i + 1) }')
    sleep 0.5
    gib=$(to_gib "$(wrk -t2 -c4 -d"${secs}s" "$base/v1/blobs/$sha" |
        awk '$1 == "Transfer/sec:" { print $2 }')")
    rps=$(wrk -t2 -c64 -d"${secs}s" "$rurl" | awk '$1 == "Requests/sec:" { print $2 }')
    echo "$round $kib $gib $rps" >>"$work/$name.rows"
    say "round $round: $name: $kib KiB per connection, blob $gib GiB/s, resolve $rps requests/s"
}

variants=()
for p in "${pools[@]}"; do variants+=("psdbd-$p"); done
variants+=(nginx)
for v in "${variants[@]}"; do : >"$work/$v.rows"; done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
n=${#variants[@]}
for r in $(seq "$rounds"); do
    for i in $(seq 0 $((n - 1))); do
        v=${variants[$(((i + r) % n))]}
        if [ "$v" = nginx ]; then
            start_nginx
        else
            rm -rf "$work/data.run"
            cp -a "$data" "$work/data.run"
            start_psdbd "$work/data.run" --connection-memory "${v#psdbd-}"
        fi
        measure "$v" "$r"
        stop_server
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print 0 }'; }
col() { awk -v c="$2" '{ print $c }' "$work/$1.rows" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ng_kib=$(col nginx 2)
ng_gib=$(col nginx 3)
ng_rps=$(col nginx 4)
cat <<REPORT
memory per downloading connection ($nconn slow downloads of a 64 MiB blob, RSS growth of the
server's processes, fresh server each), blob download (wrk -t2 -c4) and resolve (wrk -t2 -c64) of the
same server; $(nproc) cores, loopback, medians of $rounds rounds, alternated; load average
$load_before before, $load_after after
| server | KiB per connection | / nginx | blob GiB/s | / nginx | resolve requests/s | / nginx |
|---|---|---|---|---|---|---|
REPORT
for v in "${variants[@]}"; do
    label=$v
    [ "$v" = nginx ] && label="nginx (sendfile)"
    [ "$v" = nginx ] || label="psdbd, connection-memory ${v#psdbd-}"
    kib=$(col "$v" 2)
    gib=$(col "$v" 3)
    rps=$(col "$v" 4)
    printf '| %s | %s | %s | %s | %s | %.0f | %s |\n' "$label" "$kib" "$(ratio "$kib" "$ng_kib")" \
        "$gib" "$(ratio "$gib" "$ng_gib")" "$rps" "$(ratio "$rps" "$ng_rps")"
done

[ "$pub_mib" -gt 0 ] || exit 0
say "publish of a $pub_mib MiB PSDB at each upload-connection-memory, $rounds rounds"
"$build/tests/bench_server_mkpsdb" "$work/pub.psdb" "$pub_mib" Pub >/dev/null
for p in "${pools[@]}"; do : >"$work/pub-$p.rows"; done
np=${#pools[@]}
for r in $(seq "$rounds"); do
    for i in $(seq 0 $((np - 1))); do
        p=${pools[$(((i + r) % np))]}
        rm -rf "$work/pdata"
        ptoken=$("$psdbd" token create --data-dir "$work/pdata" --role publisher --name bench)
        "$psdbd" key add --data-dir "$work/pdata" --name bench --public-key "$work/key.pub" \
            >/dev/null
        start_psdbd "$work/pdata" --upload-connection-memory "$p"
        c0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
        t0=$(date +%s.%N)
        "$psdb" publish --server "$base" --token "$ptoken" --key "$work/key" "$work/pub.psdb" \
            >/dev/null
        t1=$(date +%s.%N)
        c1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
        stop_server
        awk -v a="$t0" -v b="$t1" -v c=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" \
            'BEGIN { printf "%.3f %.2f\n", b - a, c / hz }' >>"$work/pub-$p.rows"
        say "round $r: upload-connection-memory $p: $(tail -1 "$work/pub-$p.rows") (s, psdbd CPU s)"
    done
done
cat <<REPORT

publish of a $pub_mib MiB PSDB (psdb publish, a fresh psdbd each), medians of $rounds rounds
| upload-connection-memory | publish s | MiB/s | psdbd CPU s |
|---|---|---|---|
REPORT
for p in "${pools[@]}"; do
    s=$(awk '{ print $1 }' "$work/pub-$p.rows" | median)
    c=$(awk '{ print $2 }' "$work/pub-$p.rows" | median)
    printf '| %s | %s | %.0f | %s |\n' "$p" "$s" "$(awk -v m="$pub_mib" -v s="$s" 'BEGIN { print m / s }')" "$c"
done
