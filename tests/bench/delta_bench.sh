#!/usr/bin/env bash
# delta_bench.sh - value-level delta updates against full downloads, over loopback with psdbd:
# version N of a synthetic game installed, then updated to a patch with 5% and with 30% of the
# pipelines changed (psdb synth --changed). Prints, as medians over several rounds: the bytes a
# delta update downloads against the PSDB's size, the delta update's time against a full install
# of the same PSDB, and the delta update's peak RSS. Never fails for speed. p0 (0.1% changed,
# a handful of requests) measures the floor of a delta on loopback: the local work that both a
# delta and a full install do (write, hash and fsync the new file) plus reading the old file.
# With PSDB_BENCH_BIG_MIB=1024, also a PSDB of that many 1 MiB values (about 1 GiB) updated by a
# patch of 5% of them: its bytes, times and the delta update's peak RSS (the < 64 MiB target).
# It needs about 7 times that size of free disk under TMPDIR and a few minutes.
# Then the 5% patch over links of each speed in PSDB_BENCH_RATES (install --limit-rate).
# Usage: tests/bench/delta_bench.sh   (env: PSDB_BENCH_PIPELINES=20000, PSDB_BENCH_ROUNDS=3,
#        PSDB_BENCH_BUILD=build/bench, PSDB_BENCH_NO_BUILD=1 to skip the build,
#        PSDB_BENCH_BIG_MIB=0, PSDB_BENCH_RATES="100M 20M"; "" for loopback only)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=${PSDB_BENCH_BUILD:-$root/build/bench}
pipelines=${PSDB_BENCH_PIPELINES:-20000}
rounds=${PSDB_BENCH_ROUNDS:-3}
big_mib=${PSDB_BENCH_BIG_MIB:-0}
say() { printf 'delta-bench: %s\n' "$*" >&2; }

if [ -z "${PSDB_BENCH_NO_BUILD:-}" ]; then # set it to use the binaries already in $build
    say "building (Release) in $build"
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_BENCH=ON >/dev/null
    cmake --build "$build" -j2 --target psdbd psdb_tool bench_server_mkpsdb >/dev/null
fi
psdb=$build/psdb
psdbd=$build/psdbd

work=$(mktemp -d "${TMPDIR:-/tmp}/psdb-delta-bench-XXXXXX")
psdbd_pid=
cleanup() {
    [ -n "$psdbd_pid" ] && kill -TERM "$psdbd_pid" 2>/dev/null && wait "$psdbd_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

make_version() { # NAME [synth args]
    local name=$1
    shift
    "$psdb" synth --app DeltaBench --app-version 1.0.0.0 --pipelines "$pipelines" "$@" \
        -o "$work/$name.sodb" >/dev/null
    "$psdb" compile "$work/$name.sodb" --family gfx9 --abi 1 -o "$work/$name.psdb" >/dev/null
}
say "making version N and three patches of $pipelines pipelines"
make_version v1
make_version p0 --changed 0.001
make_version p5 --changed 0.05
make_version p30 --changed 0.30 --patch 2

data=$work/data
token=$("$psdbd" token create --data-dir "$data" --role publisher --name bench)
"$psdb" keygen -o "$work/key" >/dev/null
"$psdbd" key add --data-dir "$data" --name bench --public-key "$work/key.pub" >/dev/null
mkfifo "$work/fifo"
"$psdbd" --listen 127.0.0.1:0 --data-dir "$data" >"$work/fifo" 2>"$work/psdbd.log" &
psdbd_pid=$!
exec {fd}<"$work/fifo"
read -r -t 30 line <&"$fd"
url=${line#psdbd: listening on }

serial=0
publish() {
    serial=$((serial + 1))
    "$psdb" publish --server "$url" --token "$token" --key "$work/key" --serial "$serial" \
        "$work/$1.psdb" >/dev/null
}
app=DeltaBench exe=/games/bench/DeltaBench.exe target=gfx9:1-1
rate_args=() # --limit-rate R while a link of that speed is measured
install() { # REGISTRY OUT.json: prints seconds; peak RSS (KiB) into OUT.rss
    local t0 t1
    t0=$(date +%s.%N)
    /usr/bin/time -f '%M' -o "$2.rss" "$psdb" install --server "$url" \
        --exe-path "$exe" --app "$app" --app-version 1.0.0.0 \
        --target "$target" --trust "$work/key.pub" --registry "$1" --json \
        ${rate_args[@]+"${rate_args[@]}"} >"$2" 2>/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

measure() { # PATCH-FILE: rounds of a delta update from reg_v1 and a full install; prints medians
    local patch=$1 size bytes td tf rss
    : >"$work/bytes" && : >"$work/tdelta" && : >"$work/tfull" && : >"$work/rss"
    size=$(stat -c %s "$work/$patch.psdb")
    publish "$patch"
    for r in $(seq "$rounds"); do
        rm -rf "$work/reg" "$work/regfull"
        cp -a "$work/reg_v1" "$work/reg"
        install "$work/reg" "$work/d.json" >>"$work/tdelta"
        grep -q '"download":"delta"' "$work/d.json" || say "round $r: not a delta: $(cat "$work/d.json")"
        sed -n 's/.*"bytes_downloaded":\([0-9]*\).*/\1/p' "$work/d.json" >>"$work/bytes"
        cat "$work/d.json.rss" >>"$work/rss"
        install "$work/regfull" "$work/f.json" >>"$work/tfull"
    done
    bytes=$(median <"$work/bytes")
    td=$(median <"$work/tdelta")
    tf=$(median <"$work/tfull")
    rss=$(median <"$work/rss")
    printf '%s%s: PSDB %d bytes, delta downloaded %d bytes (%.1f%% of the file), delta %.3f s vs full %.3f s (ratio %.2f), peak RSS %d KiB\n' \
        "$patch" "${rate_args[1]+ at ${rate_args[1]}/s}" "$size" "$bytes" "$(echo "100 * $bytes / $size" | bc -l)" "$td" "$tf" \
        "$(echo "$td / $tf" | bc -l)" "$rss"
}

# Version N installed once; each round starts from a copy of that registry (same path).
publish v1
install "$work/reg" "$work/a.json" >/dev/null
cp -a "$work/reg" "$work/reg_v1"
measure p0
measure p5
measure p30
# The same 5% update over links of a given speed (psdb install --limit-rate paces every transfer
# of the install exactly): where the transfer, not the local work, is what a delta saves.
for rate in ${PSDB_BENCH_RATES-100M 20M}; do
    rate_args=(--limit-rate "$rate")
    measure p5
done
rate_args=()

if [ "$big_mib" -gt 0 ]; then
    say "making a PSDB of $big_mib MiB values and a patch of 5% of them"
    rm -rf "$work/reg" "$work/regfull" "$work/reg_v1" "$work"/v1.* "$work"/p0.* "$work"/p5.* "$work"/p30.*
    "$build/tests/bench_server_mkpsdb" "$work/big1.psdb" "$big_mib" BigDelta 20 0
    "$build/tests/bench_server_mkpsdb" "$work/big5.psdb" "$big_mib" BigDelta 20 1
    app=BigDelta exe=/games/big/bench.exe target=bench-gfx1:1-1
    publish big1
    install "$work/reg" "$work/a.json" >/dev/null
    mv "$work/reg" "$work/reg_v1"
    rounds=$(( rounds < 3 ? rounds : 3 ))
    measure big5
fi
