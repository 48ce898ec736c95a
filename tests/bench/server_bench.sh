#!/usr/bin/env bash
# server_bench.sh - psdbd on loopback against nginx and sha256sum, one run each: blob download
# throughput, resolve requests/s and p99, publish throughput, peak RSS under 1,000 downloads, and
# resolve requests/s with demand recording on against off (stats = true / false).
# Usage: tests/bench/server_bench.sh   (env: PSDB_BENCH_MIB=1024, PSDB_BENCH_SECONDS=10,
#        PSDB_BENCH_BUILD=build/bench). Installs wrk and nginx-light with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${PSDB_BENCH_BUILD:-$root/build/bench}
mib=${PSDB_BENCH_MIB:-1024}
secs=${PSDB_BENCH_SECONDS:-10}
say() { printf 'bench: %s\n' "$*" >&2; }
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"

missing=()
for p in wrk nginx-light curl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    sudo_cmd=()
    [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi

say "building (Release) in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target psdbd psdb_tool bench_server_mkpsdb >/dev/null
psdb=$build/psdb
psdbd=$build/psdbd

bench_work psdbd-bench
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
data=$work/data

# start_psdbd [flags]: starts psdbd on a free port; sets psdbd_pid and base.
start_psdbd() {
    bench_psdbd "$work/psdbd.out" "$work/psdbd.log" "$psdbd" --data-dir "$data" --max-upload 4G \
        --max-connections 4000 --log-requests false "$@"
    psdbd_pid=$bench_pid
    pids+=("$psdbd_pid")
    base=$bench_url
}
stop_psdbd() {
    kill -TERM "$psdbd_pid"
    wait "$psdbd_pid" || true
}

# wrk output -> numbers
to_gib() { # "1.23GB" -> GiB
    awk -v v="$1" 'BEGIN { n = v + 0; u = v; gsub(/[0-9.]/, "", u);
        f = (u == "GB") ? 1 : (u == "MB") ? 1/1024 : (u == "KB") ? 1/1048576 : 1/1073741824;
        printf "%.3f", n * f }'
}
to_ms() { # "1.23ms" / "456.00us" / "1.2s" -> ms
    awk -v v="$1" 'BEGIN { n = v + 0; u = v; gsub(/[0-9.]/, "", u);
        f = (u == "us") ? 0.001 : (u == "s") ? 1000 : (u == "m") ? 60000 : 1; printf "%.3f", n * f }'
}
wrk_field() { awk -v k="$1:" '$1 == k { print $2; exit }' "$2"; }

say "making a $mib MiB PSDB"
"$build/tests/bench_server_mkpsdb" "$work/big.psdb" "$mib" Bench
size=$(stat -c %s "$work/big.psdb")
token=$("$psdbd" token create --data-dir "$data" --role publisher --name bench)
"$psdb" keygen -o "$work/key" >/dev/null
"$psdbd" key add --data-dir "$data" --name bench --public-key "$work/key.pub" >/dev/null
start_psdbd

# ---- publish vs sha256sum (both read the file from the page cache) ----
sha256sum "$work/big.psdb" >/dev/null
t0=$(date +%s.%N)
sha=$(sha256sum "$work/big.psdb" | cut -c1-64)
t1=$(date +%s.%N)
"$psdb" publish --server "$base" --token "$token" --key "$work/key" "$work/big.psdb" >/dev/null
t2=$(date +%s.%N)
sha_mibs=$(awk -v s="$size" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", s / 1048576 / (b - a) }')
pub_mibs=$(awk -v s="$size" -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", s / 1048576 / (b - a) }')

# ---- nginx on the same files ----
www=$work/www
mkdir -p "$www"
ln "$data/blobs/${sha:0:2}/$sha" "$www/blob"
curl -s -o "$www/resolve.json" \
    "$base/v1/resolve?app=Bench&app_version=1.0.0.0&family=bench-gfx1&abi_min=1&abi_max=1"
nport=$(bench_free_port)
chmod 755 "$work" "$www"
bench_nginx_conf "$work/nginx.conf" "$work" "$www" "$nport"
bench_nginx "$work/nginx.conf" "$work/nginx.error.log"
pids+=("$bench_pid")
sleep 0.5
nbase=http://127.0.0.1:$nport

# The machine is shared: each measure alternates psdbd and nginx over $rounds rounds and reports
# the median of each.
rounds=${PSDB_BENCH_ROUNDS:-3}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

say "blob download: wrk -t2 -c4 -d${secs}s, $rounds rounds"
: >"$work/blob.psdbd"
: >"$work/blob.nginx"
for _ in $(seq "$rounds"); do
    wrk -t2 -c4 -d"${secs}s" "$base/v1/blobs/$sha" >"$work/wrk.blob.psdbd"
    to_gib "$(wrk_field Transfer/sec "$work/wrk.blob.psdbd")" >>"$work/blob.psdbd"
    echo >>"$work/blob.psdbd"
    wrk -t2 -c4 -d"${secs}s" "$nbase/blob" >"$work/wrk.blob.nginx"
    to_gib "$(wrk_field Transfer/sec "$work/wrk.blob.nginx")" >>"$work/blob.nginx"
    echo >>"$work/blob.nginx"
done
blob_psdbd=$(median <"$work/blob.psdbd")
blob_nginx=$(median <"$work/blob.nginx")

say "resolve: wrk -t2 -c64 -d${secs}s --latency, $rounds rounds"
rurl="$base/v1/resolve?app=Bench&app_version=1.0.0.0&family=bench-gfx1&abi_min=1&abi_max=1"
for f in rps.psdbd rps.nginx p99.psdbd p99.nginx; do : >"$work/$f"; done
for _ in $(seq "$rounds"); do
    wrk -t2 -c64 -d"${secs}s" --latency "$rurl" >"$work/wrk.resolve.psdbd"
    wrk -t2 -c64 -d"${secs}s" --latency "$nbase/resolve.json" >"$work/wrk.resolve.nginx"
    for s in psdbd nginx; do
        wrk_field Requests/sec "$work/wrk.resolve.$s" >>"$work/rps.$s"
        to_ms "$(awk '$1 == "99%" { print $2 }' "$work/wrk.resolve.$s")" >>"$work/p99.$s"
        echo >>"$work/p99.$s"
    done
done
rps_psdbd=$(median <"$work/rps.psdbd")
rps_nginx=$(median <"$work/rps.nginx")
p99_psdbd=$(median <"$work/p99.psdbd")
p99_nginx=$(median <"$work/p99.nginx")
errors=$(grep -h 'Non-2xx\|Socket errors' "$work"/wrk.* || true)

# Demand recording on the hot path: the same resolves with stats on and off, alternating servers
# on the same data over $rounds rounds (the data directory admits one server at a time). A hit
# and a miss URL, since a miss records one more key.
say "resolve with demand recording on vs off: wrk -t2 -c64 -d${secs}s, $rounds rounds each"
stop_psdbd
for f in rec.on rec.off; do : >"$work/$f"; done
for _ in $(seq "$rounds"); do
    for mode in on off; do
        if [ $mode = on ]; then start_psdbd --stats true; else start_psdbd --stats false; fi
        rurl_now="$base/v1/resolve?app=Bench&app_version=1.0.0.0&family=bench-gfx1&abi_min=1&abi_max=1"
        murl="$base/v1/resolve?app=Bench&app_version=1.0.0.0&family=bench-gfx9&abi_min=1&abi_max=1"
        wrk -t2 -c64 -d"${secs}s" "$rurl_now" >"$work/wrk.rec.$mode.hit"
        wrk -t2 -c64 -d"${secs}s" "$murl" >"$work/wrk.rec.$mode.miss"
        awk '$1 == "Requests/sec:" { s += $2 } END { print s / 2 }' \
            "$work/wrk.rec.$mode.hit" "$work/wrk.rec.$mode.miss" >>"$work/rec.$mode"
        stop_psdbd
    done
done
rec_on=$(median <"$work/rec.on")
rec_off=$(median <"$work/rec.off")
start_psdbd

say "memory: 1000 connections downloading the blob at once"
stop_psdbd
start_psdbd
wrk -t2 -c1000 -d"${secs}s" "$base/v1/blobs/$sha" >"$work/wrk.mem" &
wrk_pid=$!
peak_conn=0
while kill -0 $wrk_pid 2>/dev/null; do
    c=$(curl -s "$base/metrics" | sed -n 's/^psdbd_connections //p')
    [ -n "$c" ] && [ "$c" -gt "$peak_conn" ] && peak_conn=$c
    sleep 1
done
wait $wrk_pid || true
hwm_kib=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$psdbd_pid/status")
hwm_mib=$(awk -v k="$hwm_kib" 'BEGIN { printf "%.1f", k / 1024 }')
stop_psdbd

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
cat <<REPORT
psdbd benchmarks ($(nproc) cores, loopback, one run, medians of $rounds rounds; blob $size bytes)
| measure | psdbd | reference | ratio | target |
|---|---|---|---|---|
| blob download, GiB/s (wrk -t2 -c4) | $blob_psdbd | nginx $blob_nginx | $(ratio "$blob_psdbd" "$blob_nginx") | >= 0.9 |
| resolve, requests/s (wrk -t2 -c64) | $rps_psdbd | nginx static JSON $rps_nginx | $(ratio "$rps_psdbd" "$rps_nginx") | >= 0.5 |
| resolve p99 latency, ms | $p99_psdbd | nginx $p99_nginx | | |
| publish, MiB/s (psdb publish) | $pub_mibs | sha256sum $sha_mibs | $(ratio "$pub_mibs" "$sha_mibs") | >= 0.7 |
| resolve with demand recording, requests/s (hit and miss, wrk -t2 -c64) | $rec_on | recording off $rec_off | $(ratio "$rec_on" "$rec_off") | >= 0.95 |
| peak RSS with 1000 downloading connections, MiB | $hwm_mib | (peak open connections seen: $peak_conn) | | < 64 |
REPORT
[ -z "$errors" ] || printf 'wrk reported:\n%s\n' "$errors"
