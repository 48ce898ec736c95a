#!/usr/bin/env bash
# install_bench.sh - psdb install of a large PSDB over loopback (resolve + download + verify +
# register) against `curl -o` of the same blob followed by `sha256sum`, alternating over several
# rounds on the same machine; prints medians, the ratio (curl+sha256sum time / install time, so
# above 1.0 means install is faster) and psdb install's peak RSS. Never fails for speed.
# Usage: tests/bench/install_bench.sh   (env: PSDB_BENCH_MIB=1024, PSDB_BENCH_ROUNDS=3,
#        PSDB_BENCH_BUILD=build/bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${PSDB_BENCH_BUILD:-$root/build/bench}
mib=${PSDB_BENCH_MIB:-1024}
rounds=${PSDB_BENCH_ROUNDS:-3}
say() { printf 'install-bench: %s\n' "$*" >&2; }
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"

for p in curl time; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
done

say "building (Release) in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target psdbd psdb_tool bench_server_mkpsdb >/dev/null
psdb=$build/psdb
psdbd=$build/psdbd

work=$(mktemp -d "${TMPDIR:-/tmp}/psdb-install-bench-XXXXXX")
psdbd_pid=
cleanup() {
    [ -n "$psdbd_pid" ] && kill -TERM "$psdbd_pid" 2>/dev/null && wait "$psdbd_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

say "making a $mib MiB PSDB"
"$build/tests/bench_server_mkpsdb" "$work/big.psdb" "$mib" Bench
size=$(stat -c %s "$work/big.psdb")
data=$work/data
token=$("$psdbd" token create --data-dir "$data" --role publisher --name bench)
"$psdb" keygen -o "$work/key" >/dev/null
"$psdbd" key add --data-dir "$data" --name bench --public-key "$work/key.pub" >/dev/null
bench_psdbd "$work/psdbd.out" "$work/psdbd.log" "$psdbd" --data-dir "$data" --max-upload 8G \
    --log-requests false
psdbd_pid=$bench_pid
base=$bench_url
"$psdb" publish --server "$base" --token "$token" --key "$work/key" --serial 1 "$work/big.psdb" \
    >/dev/null
rm -f "$work/big.psdb" # keep the page cache for the served copy only
sha=$("$psdb" resolve --server "$base" --app Bench --app-version 1.0.0.0 --family bench-gfx1 \
    --abi-min 1 --abi-max 1 --json | sed -n 's/.*"sha256":"\([0-9a-f]*\)".*/\1/p')

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
: >"$work/t.install"
: >"$work/t.curl"
: >"$work/rss"
for r in $(seq "$rounds"); do
    rm -rf "$work/reg" "$work/curl.out"
    /usr/bin/time -f '%e %M' -o "$work/time.out" "$psdb" install --server "$base" \
        --exe-path /games/bench/bench.exe --app Bench --app-version 1.0.0.0 \
        --target bench-gfx1:1-1 --trust "$work/key.pub" --registry "$work/reg" >/dev/null 2>&1
    read -r secs rss <"$work/time.out"
    echo "$secs" >>"$work/t.install"
    echo "$rss" >>"$work/rss"
    t0=$(date +%s.%N)
    curl -s -o "$work/curl.out" "$base/v1/blobs/$sha"
    got=$(sha256sum "$work/curl.out" | cut -c1-64)
    t1=$(date +%s.%N)
    [ "$got" = "$sha" ] || { say "curl download does not match"; exit 1; }
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' >>"$work/t.curl"
    say "round $r: install ${secs}s (peak RSS ${rss} KiB), curl+sha256sum $(tail -1 "$work/t.curl")s"
done
ti=$(median <"$work/t.install")
tc=$(median <"$work/t.curl")
rss=$(sort -g "$work/rss" | tail -1)
awk -v s="$size" -v ti="$ti" -v tc="$tc" -v rss="$rss" -v n="$rounds" 'BEGIN {
    printf "PSDB %.0f MiB, %d rounds, medians\n", s / 1048576, n
    printf "psdb install (resolve+download+verify+register): %.2f s  %.0f MiB/s\n", ti, s / 1048576 / ti
    printf "curl -o + sha256sum:                              %.2f s  %.0f MiB/s\n", tc, s / 1048576 / tc
    printf "ratio (curl+sha256sum time / install time):        %.2f\n", tc / ti
    printf "psdb install peak RSS:                             %.1f MiB\n", rss / 1024 }'
