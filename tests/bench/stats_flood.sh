#!/usr/bin/env bash
# stats_flood.sh - the flood of anonymous demand against a real psdbd with its default settings:
# 20,000 resolve misses, each naming a new 4,000-byte application, in two halves with a flush
# after each (the issue's measurement), then the same with 200-byte names (under the recorded
# length limit, so the day's name and byte budgets are what bound them). Prints psdbd's RSS
# (and peak) and the index's size (file + WAL) before and after each flood, and the size and time
# of every /v1/stats/ report the dashboard reads.
# Usage: tests/bench/stats_flood.sh   (env: PSDBD=path/to/psdbd to use a built binary, else it is
#        built in PSDB_BENCH_BUILD=build/bench; PSDB_FLOOD_COUNT=20000, PSDB_FLOOD_BYTES=4000)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
count=${PSDB_FLOOD_COUNT:-20000}
bytes=${PSDB_FLOOD_BYTES:-4000}
say() { printf 'stats_flood: %s\n' "$*"; }
# shellcheck source=tests/bench/lib.sh
. "$root/tests/bench/lib.sh"

psdbd=${PSDBD:-}
if [ -z "$psdbd" ]; then
    build=${PSDB_BENCH_BUILD:-$root/build/bench}
    say "building psdbd (Release) in $build"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$build" -j2 --target psdbd >/dev/null
    psdbd=$build/psdbd
fi
client=$root/tests/integration/stats_flood_client.py
work=$(mktemp -d "${TMPDIR:-/tmp}/psdbd-flood-XXXXXX")
data=$work/data
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$data"
"$psdbd" token create --data-dir "$data" --role publisher --name ci >/dev/null
bench_psdbd "$work/out" "$work/log" "$psdbd" --data-dir "$data" --log-requests false
pid=$bench_pid
url=$bench_url

rss() { awk '/^VmRSS:/ {printf "%.1f MiB", $2 / 1024}' "/proc/$pid/status"; }
peak() { awk '/^VmHWM:/ {printf "%.1f MiB", $2 / 1024}' "/proc/$pid/status"; }
index_size() { cat "$data"/index.sqlite "$data"/index.sqlite-wal 2>/dev/null | wc -c | awk '{printf "%.2f MB", $1 / 1e6}'; }
flush() {
    local before
    before=$(grep -c 'stats: flushed on SIGUSR1' "$work/log" || true)
    kill -USR1 "$pid"
    for _ in $(seq 600); do
        [ "$(grep -c 'stats: flushed on SIGUSR1' "$work/log" || true)" -gt "$before" ] && return 0
        sleep 0.1
    done
    say "no flush after SIGUSR1" >&2
    exit 1
}
# flood NAME_BYTES PREFIX: $count resolves in two halves, a flush after each.
flood() {
    local half=$((count / 2))
    for part in a b; do
        python3 "$client" "$url" "$half" --name-bytes "$1" --vary app --prefix "$2$part" \
            --threads 4 >"$work/flood.json"
        say "  $half resolves: $(cat "$work/flood.json")"
        flush
    done
}
reports() {
    for r in "traffic" "missing?limit=100" "matrix?history=true" "events?limit=50" \
        "traffic?limit=1000" "missing?limit=1000"; do
        curl -sf -o "$work/r.json" -w "  /v1/stats/$r: %{size_download} bytes in %{time_total} s\n" \
            "$url/v1/stats/$r" || say "  /v1/stats/$r failed"
    done
}

sleep 0.5
say "psdbd $psdbd at $url (default settings)"
say "before:  RSS $(rss), index $(index_size)"
say "flood: $count resolve misses, each a new ${bytes}-byte application name"
flood "$bytes" long
say "after:   RSS $(rss) (peak $(peak)), index $(index_size)"
reports
say "flood: $count resolve misses, each a new 200-byte application name"
flood 200 short
say "after:   RSS $(rss) (peak $(peak)), index $(index_size)"
reports
curl -sf "$url/metrics" | grep -E '^psdbd_stats_(dropped_total|held_keys|held_bytes) ' | sed 's/^/  /'
