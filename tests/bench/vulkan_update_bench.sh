#!/usr/bin/env bash
# vulkan_update_bench.sh - a Vulkan game's patch on this machine's device: version N of a synthetic
# corpus compiled and installed through psdbd, then a 5% patch compiled with --base and installed
# as a delta update. Prints `name value unit` lines: the compile of the patch with --base against
# a full compile of it, the bytes the delta update downloads against the PSDB's size, the PSDB's
# size against the driver data it holds, the time-to-usable of the patch with its PSDB (psdb
# replay, medians of RUNS), and the same for the VkPipelineCache way (cache parts) where the
# driver keeps its code in binaries. A benchmark never fails on its figures, only when something
# does not run.
# Env: PSDB_BIN, PSDBD_BIN (built elsewhere; else built here in BUILD, default build/bench),
# PIPELINES (default 1000), CHANGED (default 0.05), RUNS (default 3), VK_ICD_FILENAMES (the
# driver; a headless NVIDIA manifest is made when unset and the NVIDIA ICD is installed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build/bench}
pipelines=${PIPELINES:-1000}
changed=${CHANGED:-0.05}
runs=${RUNS:-3}
work=$(mktemp -d)
psdbd_pid=
cleanup() {
    [ -n "$psdbd_pid" ] && kill -TERM "$psdbd_pid" 2>/dev/null && wait "$psdbd_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
say() { echo "vulkan_update_bench: $*" >&2; }

if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -z "${DISPLAY:-}" ]; then
    for icd in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
        if [ -f "$icd" ]; then
            printf '{"file_format_version":"1.0.1","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.3.0"}}\n' \
                >"$work/nvidia_headless_icd.json"
            export VK_ICD_FILENAMES=$work/nvidia_headless_icd.json VK_DRIVER_FILES=$work/nvidia_headless_icd.json
            break
        fi
    done
fi
if [ -n "${PSDB_BIN:-}" ] && [ -n "${PSDBD_BIN:-}" ]; then
    psdb=$PSDB_BIN psdbd=$PSDBD_BIN
else
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_TESTS=OFF >"$work/cmake.log" 2>&1 ||
        { tail -n 30 "$work/cmake.log" >&2; exit 1; }
    cmake --build "$build" -j"$(nproc)" --target psdb_tool psdbd >"$work/build.log" 2>&1 ||
        { tail -n 30 "$work/build.log" >&2; exit 1; }
    psdb=$build/psdb psdbd=$build/psdbd
fi
export XDG_CACHE_HOME=$work/cache
num() { tr -d ' \n' <"$1" | grep -o "\"$2\":[0-9.e+-]*" | head -n 1 | cut -d: -f2; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }

"$psdb" synth --api vulkan --app VkUpdate --app-version 1.0.0.0 --pipelines "$pipelines" \
    -o "$work/v1.sodb" >/dev/null
"$psdb" synth --api vulkan --app VkUpdate --app-version 1.0.0.0 --pipelines "$pipelines" \
    --changed "$changed" -o "$work/p.sodb" >/dev/null
compile() { # SODB OUT [--base OLD]: the compile's JSON into OUT.json
    local sodb=$1 out=$2
    shift 2
    "$psdb" compile "$sodb" --backend vulkan "$@" --json -o "$out" >"$out.json" 2>"$out.err" ||
        { cat "$out.err" >&2; exit 1; }
}
compile "$work/v1.sodb" "$work/v1.psdb"
compile "$work/p.sodb" "$work/full.psdb"
compile "$work/p.sodb" "$work/p.psdb" --base "$work/v1.psdb"
echo "strategy $(grep -o '"strategy": "[a-z-]*"' "$work/v1.psdb.json" | cut -d'"' -f4) -"
echo "pipelines $(num "$work/v1.psdb.json" pipelines) pipelines"
echo "compile_full_seconds $(num "$work/full.psdb.json" seconds) s"
echo "compile_base_seconds $(num "$work/p.psdb.json" seconds) s"
echo "compile_base_compiled $(num "$work/p.psdb.json" compiled) pipelines"
echo "compile_base_reused $(num "$work/p.psdb.json" reused) pipelines"
echo "compile_base_share $(ratio "$(num "$work/p.psdb.json" seconds)" "$(num "$work/full.psdb.json" seconds)") of a full compile"
size=$(stat -c %s "$work/p.psdb")
code=$(num "$work/p.psdb.json" code_bytes)
echo "psdb_bytes $size bytes"
echo "driver_bytes $code bytes"
echo "psdb_over_driver_data $(ratio "$size" "$code") x"

# The delta update: v1 installed, the patch published with the next serial and installed again.
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
install() { # OUT.json
    "$psdb" install --server "$url" --exe-path /games/vkupdate/game --app VkUpdate \
        --app-version 1.0.0.0 --target auto --trust "$work/key.pub" \
        --registry "$work/registry" --json >"$1" 2>&1 || { cat "$1" >&2; exit 1; }
}
"$psdb" publish --server "$url" --token "$token" --key "$work/key" --serial 1 "$work/v1.psdb" >/dev/null
install "$work/i1.json"
"$psdb" publish --server "$url" --token "$token" --key "$work/key" --serial 2 "$work/p.psdb" >/dev/null
install "$work/i2.json"
got=$(num "$work/i2.json" bytes_downloaded)
grep -q '"download": *"delta"' "$work/i2.json" || say "the update was not a delta: $(cat "$work/i2.json")"
echo "delta_bytes $got bytes"
echo "delta_share $(awk -v a="$got" -v b="$size" 'BEGIN { printf "%.2f", (b > 0 ? a / b * 100 : 0) }') % of the file"

ttu() { # PSDB [ENV...]: medians of RUNS replays (cold total, psdb total, speed-up)
    local p=$1
    shift
    : >"$work/c" && : >"$work/w" && : >"$work/s"
    for _ in $(seq "$runs"); do
        env "$@" "$psdb" replay --backend vulkan "$work/p.sodb" "$p" --json >"$work/r.json"
        tr -d ' \n' <"$work/r.json" | grep -o '"cold":{[^}]*}' | grep -o '"total_s":[0-9.e+-]*' |
            cut -d: -f2 >>"$work/c"
        tr -d ' \n' <"$work/r.json" | grep -o '"psdb":{[^}]*}' | grep -o '"total_s":[0-9.e+-]*' |
            cut -d: -f2 >>"$work/w"
        num "$work/r.json" speedup >>"$work/s"
    done
    echo "$(median <"$work/c") $(median <"$work/w") $(median <"$work/s") $(tr -d ' \n' <"$work/r.json" |
        grep -o '"psdb":{[^}]*}' | grep -o '"hits":[0-9]*' | cut -d: -f2)"
}
read -r c w s h <<<"$(ttu "$work/p.psdb")"
echo "ttu_cold_total $c s"
echo "ttu_psdb_total $w s"
echo "ttu_psdb_hits $h pipelines"
echo "ttu_speedup_median $s x"
if grep -q '"strategy": "pipeline-binary"' "$work/v1.psdb.json"; then
    # The VkPipelineCache way on the same driver: cache parts merged into one cache per device.
    PSDB_VULKAN_STRATEGY=pipeline-cache compile "$work/p.sodb" "$work/cache.psdb"
    read -r c w s h <<<"$(ttu "$work/cache.psdb" PSDB_VULKAN_STRATEGY=pipeline-cache)"
    echo "cache_parts_ttu_psdb_total $w s"
    echo "cache_parts_ttu_speedup_median $s x"
    echo "cache_parts_psdb_bytes $(stat -c %s "$work/cache.psdb") bytes"
fi
