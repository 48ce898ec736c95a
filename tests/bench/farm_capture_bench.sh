#!/usr/bin/env bash
# farm_capture_bench.sh - the compile farm end to end on this machine's Vulkan device, from a real
# capture: vkdemo runs under the layer with PSDB_CAPTURE, the SODB is published by the studio, the
# launcher's `psdb install --target auto` misses (the miss queues the job), one
# `psdb worker --backend vulkan --once` compiles and publishes it, the launcher installs the
# farm-built PSDB and vkdemo runs again under the layer, served from the registry. Prints the time
# from the first miss to the installed PSDB and the layer's hits. Never fails for speed: exit 1
# only when a step does not run. Env: PSDB, PSDBD, VKDEMO, PSDB_LAYER_DIR (as the Vulkan tests),
# VK_ICD_FILENAMES (lavapipe when unset and installed).
set -euo pipefail
: "${PSDB:?set PSDB}" "${PSDBD:?set PSDBD}" "${VKDEMO:?set VKDEMO}" "${PSDB_LAYER_DIR:?set PSDB_LAYER_DIR}"
root=$(cd "$(dirname "$0")/../.." && pwd)
name=farm_capture_bench
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
. "$root/tests/farm/lib.sh" # fail, farm_credentials, farm_start_psdbd
. "$root/tests/vulkan/lib.sh" # vk_use_lavapipe, vk_fresh_caches
vk_use_lavapipe
vk_fresh_caches
layer=(env VK_LAYER_PATH="$PSDB_LAYER_DIR" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery)
exe=$(readlink -f "$VKDEMO")
ms() { echo $((($2 - $1) / 1000000)); }

"${layer[@]}" PSDB_CAPTURE="$dir/app.sodb" "$VKDEMO" >"$dir/cold.txt" 2>"$dir/capture.err" ||
    fail "the capture run failed: $(cat "$dir/capture.err")"
data="$dir/data"
farm_credentials "$data"
farm_start_psdbd "$data"
"$PSDB" publish --server "$url" --token "$studio" --key "$dir/studio.key" --serial 1 "$dir/app.sodb" \
    >/dev/null || fail "publishing the SODB"
install() {
    "$PSDB" install --server "$url" --exe-path "$exe" --app psdb-vkdemo --app-version 1.2.3.0 \
        --target auto --trust "$dir/studio.key.pub" --trust "$dir/farm.key.pub" --json \
        >"$dir/install.json" 2>"$dir/install.err"
}
t0=$(date +%s%N)
install && fail "installed before the farm compiled anything"
t1=$(date +%s%N)
"$PSDB" worker --server "$url" --token "$farm" --key "$dir/farm.key" --trust "$dir/studio.key.pub" \
    --trust "$dir/farm.key.pub" --backend vulkan --once --json >"$dir/worker.out" 2>"$dir/worker.err" ||
    fail "the worker: $(cat "$dir/worker.err")"
t2=$(date +%s%N)
install || fail "install after the worker: $(cat "$dir/install.err")"
t3=$(date +%s%N)
"${layer[@]}" PSDB_LAYER_STATS="$dir/stats.json" "$VKDEMO" >"$dir/warm.txt" 2>"$dir/warm.err" ||
    fail "the served run failed: $(cat "$dir/warm.err")"
cmp -s "$dir/cold.txt" "$dir/warm.txt" || fail "the served run's images differ"
hits=$(grep -o '"psdb_hits": [0-9]*' "$dir/stats.json" | grep -o '[0-9]*$')
npipe=$(grep -c -e '^compute' -e '^graphics' "$dir/cold.txt")
echo "device $(grep -o '"family": *"[^"]*"' "$dir/install.json" | head -n 1 | cut -d'"' -f4)"
echo "first_miss_ms $(ms "$t0" "$t1")"
echo "worker_claim_compile_publish_ms $(ms "$t1" "$t2")"
echo "install_ms $(ms "$t2" "$t3")"
echo "first_miss_to_installed_ms $(ms "$t0" "$t3")"
echo "served_hits $hits of $npipe pipelines"
