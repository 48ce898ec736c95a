#!/usr/bin/env bash
# vulkan_bench.sh - the Vulkan backend's figures on this machine's device, one command from a fresh
# checkout: builds (no apt-get: the machine must already have a C compiler, cmake, the psdb build
# dependencies, the Vulkan headers/loader and glslang), synthesizes a corpus, compiles it on the
# device and prints `name value unit` lines:
#   time-to-usable of all pipelines cold and with the PSDB, and their ratio (targets: >= 10x on
#   lavapipe, >= 100x on an NVIDIA GPU with its disk cache off);
#   layer overhead on a cold run without a PSDB against no layer (target < 2%);
#   layer lookup cost per pipeline creation on the hit path (target < 20 us).
# A benchmark never fails on its figures; it fails only when something does not run.
# Env: BUILD (build folder, default build/bench), PIPELINES (default 200), RUNS (overhead runs,
# default 3), VK_ICD_FILENAMES (the driver; for NVIDIA headless give a manifest naming
# libEGL_nvidia.so.0), LD_LIBRARY_PATH (a loader brought along).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build/bench}
pipelines=${PIPELINES:-200}
runs=${RUNS:-3}
jobs=$(nproc 2>/dev/null || echo 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_TESTS=ON >"$work/cmake.log" 2>&1 ||
    { tail -n 30 "$work/cmake.log" >&2; exit 1; }
cmake --build "$build" -j"$jobs" --target psdb_tool VkLayer_psdb_delivery >"$work/build.log" 2>&1 ||
    { tail -n 30 "$work/build.log" >&2; exit 1; }
psdb=$build/psdb
layer_dir=$build/layer
[ -x "$psdb" ] && [ -f "$layer_dir/VkLayer_psdb_delivery.json" ] ||
    { echo "vulkan_bench: the tool or the layer was not built (Vulkan found?)" >&2; exit 1; }
export XDG_CACHE_HOME="$work/cache"
unset MESA_SHADER_CACHE_DIR MESA_DISK_CACHE_READ_ONLY_FOZ_DBS MESA_DISK_CACHE_SINGLE_FILE

"$psdb" synth --api vulkan --app VkBench --app-version 1.0.0.0 --pipelines "$pipelines" \
    -o "$work/bench.sodb" >/dev/null
"$psdb" compile "$work/bench.sodb" --backend vulkan --json -o "$work/bench.psdb" \
    >"$work/compile.json" 2>"$work/compile.err" || { cat "$work/compile.err" >&2; exit 1; }
num() { tr -d ' \n' <"$1" | grep -o "\"$2\":[0-9.e+-]*" | head -n 1 | cut -d: -f2; }
# the device, in words, from the compile's progress line
device=$(grep -m1 'vulkan pipelines on' "$work/compile.err" | sed 's/.*pipelines on //')
echo "device \"$device\" -"
echo "compile_pipelines $(num "$work/compile.json" pipelines) pipelines"
echo "compile_failed $(num "$work/compile.json" failed) pipelines"
echo "compile_seconds $(num "$work/compile.json" seconds) s"
echo "psdb_driver_code $(num "$work/compile.json" code_bytes) bytes"

# Time-to-usable (creation + first use), cold (driver disk caches off) and with the PSDB.
"$psdb" replay --backend vulkan "$work/bench.sodb" "$work/bench.psdb" --json >"$work/replay.json"
cold=$(tr -d ' \n' <"$work/replay.json" | grep -o '"cold":{[^}]*}')
warm=$(tr -d ' \n' <"$work/replay.json" | grep -o '"psdb":{[^}]*}')
f() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | cut -d: -f2; }
echo "ttu_cold_total $(f "$cold" total_s) s"
echo "ttu_cold_median $(f "$cold" median_ms) ms"
echo "ttu_cold_p95 $(f "$cold" p95_ms) ms"
echo "ttu_psdb_total $(f "$warm" total_s) s"
echo "ttu_psdb_median $(f "$warm" median_ms) ms"
echo "ttu_psdb_p95 $(f "$warm" p95_ms) ms"
echo "ttu_psdb_hits $(f "$warm" hits) pipelines"
echo "ttu_psdb_misses $(f "$warm" misses) pipelines"
echo "ttu_speedup $(num "$work/replay.json" speedup) x"

# Layer overhead on a cold run without a PSDB: the same cold replay without the layer and under
# it (psdb replay is itself an unmodified Vulkan application to the layer), best of RUNS each.
best() { sort -g | head -n 1; }
for i in $(seq "$runs"); do
    "$psdb" replay --backend vulkan "$work/bench.sodb" --json | tr -d ' \n' |
        grep -o '"cold":{[^}]*}' | grep -o '"total_s":[0-9.e+-]*' | cut -d: -f2 >>"$work/nolayer"
    VK_LAYER_PATH="$layer_dir" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery \
        PSDB_REGISTRY_DIR="$work/empty-registry" \
        "$psdb" replay --backend vulkan "$work/bench.sodb" --json | tr -d ' \n' |
        grep -o '"cold":{[^}]*}' | grep -o '"total_s":[0-9.e+-]*' | cut -d: -f2 >>"$work/layer"
done
a=$(best <"$work/nolayer")
b=$(best <"$work/layer")
echo "cold_no_layer_total $a s"
echo "cold_layer_total $b s"
echo "layer_overhead $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (b - a) / a * 100 }') %"

# Lookup cost on the hit path: the layer's own clock around encode + hash + lookup + cache
# creation for every creation of a delivered run (psdb replay's cold pass under the layer with
# PSDB_DELIVERY: every pipeline looked up; Mesa's cache is off in that pass, so only the layer's
# side is timed, never the driver's compile).
VK_LAYER_PATH="$layer_dir" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery \
    PSDB_DELIVERY="$work/bench.psdb" PSDB_LAYER_STATS="$work/stats.json" \
    "$psdb" replay --backend vulkan "$work/bench.sodb" --json >/dev/null 2>"$work/lookup.err"
n=$(num "$work/stats.json" pipelines)
hits=$(num "$work/stats.json" psdb_hits)
ns=$(num "$work/stats.json" psdb_lookup_ns)
echo "lookup_hits $hits pipelines"
echo "lookup_per_pipeline $(awk -v ns="$ns" -v n="$n" 'BEGIN { printf "%.2f", n ? ns / n / 1000 : 0 }') us"
