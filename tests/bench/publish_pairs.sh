#!/usr/bin/env bash
# publish_pairs.sh - the publish part of server_bench.sh, alternating two builds: for each run a
# fresh psdbd, sha256sum of the file from the page cache, then `psdb publish` of the same file.
# The machine these run on is shared, so a single run says little: compare the medians of many
# alternating pairs (server_results.md).
# Usage: tests/bench/publish_pairs.sh OLD_BUILD NEW_BUILD [PAIRS]   (default 7 pairs)
#        env: PSDB_BENCH_MIB=1024 (the file), PSDB_BENCH_DIR (work directory, default a new one
#        under $TMPDIR). Each build needs psdbd, psdb and tests/bench_server_mkpsdb (-DPSDB_BENCH=ON).
# Prints one line per run: build, sha256sum and publish seconds, and their ratio.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OLD_BUILD NEW_BUILD [PAIRS]" >&2; exit 2; }
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
pairs=${3:-7}
root=$(cd "$(dirname "$0")/../.." && pwd)
say() { printf 'publish_pairs: %s\n' "$*" >&2; }
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"
mib=${PSDB_BENCH_MIB:-1024}
work=${PSDB_BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/psdb-publish-pairs-XXXXXX")}
pid=
cleanup() {
    [ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
    [ -n "${PSDB_BENCH_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work"
[ -f "$work/big.psdb" ] || "$new/tests/bench_server_mkpsdb" "$work/big.psdb" "$mib" Bench >/dev/null
[ -f "$work/key" ] || "$new/psdb" keygen -o "$work/key" >/dev/null
size=$(stat -c %s "$work/big.psdb")

# run NAME BUILD: one publish of the file to a fresh psdbd of BUILD.
run() {
    local name=$1 bin=$2 data="$work/data" base token t0 t1 t2
    rm -rf "$data"
    token=$("$bin/psdbd" token create --data-dir "$data" --role publisher --name bench)
    "$bin/psdbd" key add --data-dir "$data" --name bench --public-key "$work/key.pub" >/dev/null
    bench_psdbd "$work/psdbd.out" "$work/psdbd.log" "$bin/psdbd" --data-dir "$data" --threads 4 \
        --max-upload 4G --max-connections 4000 --log-requests false
    pid=$bench_pid
    base=$bench_url
    sha256sum "$work/big.psdb" >/dev/null
    t0=$(date +%s.%N)
    sha256sum "$work/big.psdb" >/dev/null
    t1=$(date +%s.%N)
    "$bin/psdb" publish --server "$base" --token "$token" --key "$work/key" "$work/big.psdb" >/dev/null
    t2=$(date +%s.%N)
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
    rm -rf "$data"
    awk -v n="$name" -v a="$t0" -v m="$t1" -v e="$t2" -v s="$size" 'BEGIN {
        printf "%s sha256sum %.2f s publish %.2f s (%.0f MiB/s) ratio %.2f\n",
        n, m - a, e - m, s / 1048576 / (e - m), (m - a) / (e - m) }'
}
for i in $(seq "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then
        run old "$old"
        run new "$new"
    else
        run new "$new"
        run old "$old"
    fi
done
