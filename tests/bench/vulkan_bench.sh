#!/usr/bin/env bash
# vulkan_bench.sh - the Vulkan backend's figures on this machine's device, one command from a fresh
# checkout. Builds the tool and the layer (no apt-get: the machine must have a C compiler, cmake,
# libpsdb's build dependencies and the Vulkan headers and loader), makes a corpus (psdb synth
# --api vulkan, which needs glslang; or SODB=<file> made elsewhere), compiles it on the device and
# prints `name value unit` lines:
#   time-to-usable of all pipelines cold and with the PSDB, and their ratio (targets: >= 10x on
#   lavapipe, >= 100x on an NVIDIA GPU with its disk cache off);
#   the layer's overhead on a cold run, without a PSDB and with one that misses every pipeline,
#   against no layer (target < 2%);
#   the layer's lookup cost per pipeline creation on the hit path, the driver's time excluded
#   (target < 20 us).
# A benchmark never fails on its figures, only when something does not run.
# Env: PSDB_BIN and PSDB_LAYER_DIR (the psdb tool and the folder of VkLayer_psdb_delivery.json
# built elsewhere: no build here), BUILD (build folder, default build/bench),
# PIPELINES (default 200), SODB (a corpus instead of
# synthesizing one), RUNS (overhead runs, median of; default 3), VK_ICD_FILENAMES (the driver; when
# unset and the NVIDIA ICD is installed, a headless manifest naming libEGL_nvidia.so.0 is used, as
# the shipped one names libGLX_nvidia.so.0, which fails without an X server), LD_LIBRARY_PATH (a
# Vulkan loader brought along).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build/bench}
pipelines=${PIPELINES:-200}
runs=${RUNS:-3}
jobs=$(nproc 2>/dev/null || echo 2)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { echo "vulkan_bench: $*" >&2; }

if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -z "${DISPLAY:-}" ]; then
    for icd in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
        if [ -f "$icd" ]; then
            api=$(grep -o '"api_version" *: *"[0-9.]*"' "$icd" | grep -o '[0-9][0-9.]*' || echo 1.3.0)
            printf '{"file_format_version":"1.0.1","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"%s"}}\n' \
                "$api" >"$work/nvidia_headless_icd.json"
            export VK_ICD_FILENAMES=$work/nvidia_headless_icd.json VK_DRIVER_FILES=$work/nvidia_headless_icd.json
            say "using the headless NVIDIA manifest (libEGL_nvidia.so.0)"
            break
        fi
    done
fi

if [ -n "${PSDB_BIN:-}" ] && [ -n "${PSDB_LAYER_DIR:-}" ]; then
    # Binaries built elsewhere (a machine with the build dependencies), carried here.
    psdb=$PSDB_BIN
    # The build tree's manifest names the library by its absolute path there: one naming it here.
    layer_dir=$work/layer_manifest
    mkdir -p "$layer_dir"
    lib=$(cd "$PSDB_LAYER_DIR" && pwd)/libVkLayer_psdb_delivery.so
    sed "s|\"library_path\": \"[^\"]*\"|\"library_path\": \"$lib\"|" \
        "$PSDB_LAYER_DIR/VkLayer_psdb_delivery.json" >"$layer_dir/VkLayer_psdb_delivery.json"
else
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_TESTS=OFF -DPSDB_SERVER=OFF \
        >"$work/cmake.log" 2>&1 || { tail -n 30 "$work/cmake.log" >&2; exit 1; }
    cmake --build "$build" -j"$jobs" --target psdb_tool VkLayer_psdb_delivery \
        >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; exit 1; }
    psdb=$build/psdb
    layer_dir=$build/layer
fi
[ -x "$psdb" ] && [ -f "$layer_dir/VkLayer_psdb_delivery.json" ] ||
    { say "the tool or the layer was not built (Vulkan headers and loader found?)"; exit 1; }
export XDG_CACHE_HOME="$work/cache"
unset MESA_SHADER_CACHE_DIR MESA_DISK_CACHE_READ_ONLY_FOZ_DBS MESA_DISK_CACHE_SINGLE_FILE

sodb=$work/bench.sodb
if [ -n "${SODB:-}" ]; then
    cp "$SODB" "$sodb"
else
    "$psdb" synth --api vulkan --app VkBench --app-version 1.0.0.0 --pipelines "$pipelines" \
        -o "$sodb" >/dev/null || { say "psdb synth --api vulkan failed (glslang? give SODB=)"; exit 1; }
fi
"$psdb" compile "$sodb" --backend vulkan --json -o "$work/bench.psdb" \
    >"$work/compile.json" 2>"$work/compile.err" || { cat "$work/compile.err" >&2; exit 1; }
num() { tr -d ' \n' <"$1" | grep -o "\"$2\":[0-9.e+-]*" | head -n 1 | cut -d: -f2; }
field() { grep -o "\"$2\":[0-9.e+-]*" <<<"$1" | cut -d: -f2; }
device=$(grep -m1 'vulkan pipelines on' "$work/compile.err" | sed 's/.*pipelines on //')
echo "device \"$device\" -"
echo "compile_pipelines $(num "$work/compile.json" pipelines) pipelines"
echo "compile_failed $(num "$work/compile.json" failed) pipelines"
echo "compile_seconds $(num "$work/compile.json" seconds) s"
echo "psdb_driver_code $(num "$work/compile.json" code_bytes) bytes"

# Time-to-usable (creation + first use), cold (driver disk caches off) and with the PSDB.
"$psdb" replay --backend vulkan "$sodb" "$work/bench.psdb" --json >"$work/replay.json"
cold=$(tr -d ' \n' <"$work/replay.json" | grep -o '"cold":{[^}]*}')
warm=$(tr -d ' \n' <"$work/replay.json" | grep -o '"psdb":{[^}]*}')
echo "ttu_cold_total $(field "$cold" total_s) s"
echo "ttu_cold_median $(field "$cold" median_ms) ms"
echo "ttu_cold_p95 $(field "$cold" p95_ms) ms"
echo "ttu_psdb_total $(field "$warm" total_s) s"
echo "ttu_psdb_median $(field "$warm" median_ms) ms"
echo "ttu_psdb_p95 $(field "$warm" p95_ms) ms"
for pass in cold psdb; do
    obj=$cold
    [ "$pass" = psdb ] && obj=$warm
    for f in setup_s lookup_s create_s first_use_s objects_s wall_s; do
        echo "ttu_${pass}_${f%_s} $(field "$obj" "$f") s"
    done
done
# The proof that only the signed bytes reach the driver (schema/COMPILER.md section 5): the part of
# it the PSDB pass waits for (in its total), the device creation it runs beside, and the whole
# file's SHA-256 (an installed PSDB's proof) on its own, each against the PSDB pass.
for f in proof_s device_s file_sha256_s; do
    echo "ttu_psdb_${f%_s} $(field "$warm" "$f") s"
done
echo "proof_wait_share $(awk -v a="$(field "$warm" proof_s)" -v b="$(field "$warm" total_s)" \
    'BEGIN { printf "%.2f", (b > 0 ? a / b * 100 : 0) }') % of the PSDB pass"
echo "file_sha256_share $(awk -v a="$(field "$warm" file_sha256_s)" -v b="$(field "$warm" total_s)" \
    'BEGIN { printf "%.2f", (b > 0 ? a / b * 100 : 0) }') % of the PSDB pass, if run alone"
echo "ttu_psdb_merged_cache $(grep -o '"merged_cache":[a-z]*' <<<"$warm" | cut -d: -f2) -"
echo "ttu_psdb_hits $(field "$warm" hits) pipelines"
echo "ttu_psdb_misses $(field "$warm" misses) pipelines"
echo "ttu_speedup $(num "$work/replay.json" speedup) x"
echo "ttu_speedup_whole_pass $(awk -v a="$(field "$cold" wall_s)" -v b="$(field "$warm" wall_s)" \
    'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }') x"
# More replays for a median (the cold compile times vary from run to run).
for _ in $(seq 2 "$runs"); do
    "$psdb" replay --backend vulkan "$sodb" "$work/bench.psdb" --json >"$work/replay_n.json" &&
        num "$work/replay_n.json" speedup >>"$work/speedups"
done
num "$work/replay.json" speedup >>"$work/speedups"
echo "ttu_speedup_runs $(sort -g "$work/speedups" | tr '\n' ' ')x"
echo "ttu_speedup_median $(sort -g "$work/speedups" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }') x"

# A PSDB for the same device that holds none of the corpus: every lookup misses.
"$psdb" synth --api vulkan --app VkBench --app-version 1.0.0.0 --pipelines 5 --seed 99 \
    -o "$work/other.sodb" >/dev/null 2>&1 &&
    "$psdb" compile "$work/other.sodb" --backend vulkan -o "$work/other.psdb" >/dev/null 2>&1 ||
    rm -f "$work/other.psdb"

# Layer overhead on cold runs: psdb replay is itself an unmodified Vulkan application to the
# layer; its cold pass (driver caches off) without the layer, under it without a PSDB, and under
# it with the PSDB that misses; the median of RUNS each, interleaved so that a slow spell of the
# machine hits all three alike.
cold_total() { # ENV...: the cold pass's total
    env "$@" "$psdb" replay --backend vulkan "$sodb" --json | tr -d ' \n' |
        grep -o '"cold":{[^}]*}' | grep -o '"total_s":[0-9.e+-]*' | cut -d: -f2
}
layer_env=(VK_LAYER_PATH="$layer_dir" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery
    PSDB_REGISTRY_DIR="$work/empty-registry")
for _ in $(seq "$runs"); do
    cold_total >>"$work/t_nolayer"
    cold_total "${layer_env[@]}" >>"$work/t_layer"
    [ ! -f "$work/other.psdb" ] ||
        cold_total "${layer_env[@]}" PSDB_DELIVERY="$work/other.psdb" \
            PSDB_LAYER_STATS="$work/miss_stats.json" >>"$work/t_layer_miss"
done
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / a * 100 }'; }
a=$(median <"$work/t_nolayer")
b=$(median <"$work/t_layer")
echo "cold_no_layer_total $a s"
echo "cold_layer_total $b s"
echo "layer_overhead $(pct "$a" "$b") %"
if [ -f "$work/t_layer_miss" ]; then
    c=$(median <"$work/t_layer_miss")
    echo "cold_layer_psdb_miss_total $c s"
    echo "layer_overhead_psdb_miss $(pct "$a" "$c") %"
    # The same, from the layer's own clock (encode + hash + lookup of every creation) against the
    # run's total: free of the run-to-run noise of the driver's compile times.
    miss_ns=$(num "$work/miss_stats.json" psdb_lookup_ns)
    last=$(tail -n 1 "$work/t_layer_miss")
    echo "layer_own_time_psdb_miss $(awk -v ns="$miss_ns" -v t="$last" \
        'BEGIN { printf "%.4f", (t > 0 ? ns / 1e9 / t * 100 : 0) }') %"
    echo "lookup_miss_per_pipeline $(awk -v ns="$miss_ns" -v n="$(num "$work/miss_stats.json" pipelines)" \
        'BEGIN { printf "%.2f", n ? ns / n / 1000 : 0 }') us"
fi

# Lookup cost on the hit path: the layer's own clock around encode + hash + lookup (+ the blob's
# checks) for every creation, the driver's time excluded, in psdb replay's cold pass under the
# layer with the corpus's PSDB delivered (every pipeline a hit).
env "${layer_env[@]}" PSDB_DELIVERY="$work/bench.psdb" PSDB_LAYER_STATS="$work/stats.json" \
    "$psdb" replay --backend vulkan "$sodb" --json >/dev/null 2>"$work/lookup.err"
n=$(num "$work/stats.json" pipelines)
echo "lookup_hits $(num "$work/stats.json" psdb_hits) pipelines"
echo "lookup_per_pipeline $(awk -v ns="$(num "$work/stats.json" psdb_lookup_ns)" -v n="$n" \
    'BEGIN { printf "%.2f", n ? ns / n / 1000 : 0 }') us"
