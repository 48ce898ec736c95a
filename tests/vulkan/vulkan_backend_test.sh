#!/usr/bin/env bash
# vulkan_backend_test.sh - the whole Vulkan chain on the machine's device (lavapipe in CI): vkdemo
# (a program that knows nothing of psdb) is captured by the layer, `psdb compile --backend vulkan`
# stores what the driver compiled under the device's identity, `psdb replay --backend vulkan`
# measures it, and vkdemo runs again unmodified under the layer with the PSDB delivered (through
# PSDB_DELIVERY, and through the registry after publish + `psdb install --target auto` when
# psdbd is built): every pipeline a hit, images identical to the cold run. A PSDB of another
# target, a corrupt PSDB, a missing one and a missing registry each fall back, the program still
# correct.
# Env: PSDB, VKDEMO, PSDB_LAYER_DIR, PSDBD (optional), PSDB_SANITIZE. Exit 77 without a device.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${VKDEMO:?set VKDEMO to the vkdemo program}"
: "${PSDB_LAYER_DIR:?set PSDB_LAYER_DIR to the folder of VkLayer_psdb_delivery.json}"
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh" # vk_start_psdbd
fail() { echo "vulkan_backend_test: $*" >&2; exit 1; }

lvp=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -f "$lvp" ]; then
    export VK_ICD_FILENAMES=$lvp VK_DRIVER_FILES=$lvp
fi
if [ -n "${PSDB_SANITIZE:-}" ]; then
    export LSAN_OPTIONS=exitcode=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}
fi
sanitizer_check() {
    ! grep -q -e 'ERROR: AddressSanitizer' -e 'runtime error:' "$1" ||
        fail "sanitizer report in $1: $(cat "$1")"
}
# Every run gets its own empty cache home: the layer writes Mesa's shipped cache under it.
export XDG_CACHE_HOME="$dir/cache" PSDB_REGISTRY_DIR="$dir/registry"
unset MESA_SHADER_CACHE_DIR MESA_DISK_CACHE_READ_ONLY_FOZ_DBS MESA_DISK_CACHE_SINGLE_FILE

rc=0
MESA_SHADER_CACHE_DISABLE=true "$VKDEMO" >"$dir/cold.txt" 2>"$dir/cold.err" || rc=$?
if [ "$rc" = 77 ]; then
    echo "vulkan_backend_test: skipped: $(cat "$dir/cold.err")"
    exit 77
fi
[ "$rc" = 0 ] || fail "cold run failed ($rc): $(cat "$dir/cold.err")"
npipe=$(grep -c -e '^compute' -e '^graphics' "$dir/cold.txt")

under_layer() {
    VK_LAYER_PATH="$PSDB_LAYER_DIR" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery \
        PSDB_LAYER_STATS="$dir/stats.json" "$@"
}
field() { grep -o "\"$1\": [0-9]*" "$dir/stats.json" | grep -o '[0-9]*$'; }
delivery() { grep -o '"delivery": "[a-z]*"' "$dir/stats.json" | cut -d'"' -f4; }
merged() { grep -o '"merged_cache": "[a-z]*"' "$dir/stats.json" | cut -d'"' -f4; }
sodb="$dir/app.sodb"
MESA_SHADER_CACHE_DISABLE=true under_layer env PSDB_CAPTURE="$sodb" "$VKDEMO" >/dev/null \
    2>"$dir/capture.err" || fail "capture run failed: $(cat "$dir/capture.err")"

# 1. Compile on the device: every pipeline, target from the device identity.
"$PSDB" compile "$sodb" --backend vulkan --json -o "$dir/app.psdb" >"$dir/compile.json" \
    2>"$dir/compile.err" || fail "compile --backend vulkan: $(cat "$dir/compile.err")"
sanitizer_check "$dir/compile.err"
grep -q "\"pipelines\": $npipe" "$dir/compile.json" || fail "compile: $(cat "$dir/compile.json")"
grep -q '"failed": 0' "$dir/compile.json" || fail "compile failures: $(cat "$dir/compile.json")"
# Exactly the documented keys, seconds a real number (a json_pack format one key too long once
# read a garbage key pointer after it).
[ "$(grep -c '^  "' "$dir/compile.json")" = 12 ] &&
    grep -q '"seconds": [0-9]*\.[0-9]' "$dir/compile.json" ||
    fail "compile JSON: $(cat "$dir/compile.json")"
grep -q '"family": "vulkan-[0-9a-f]*-[0-9a-f]*"' "$dir/compile.json" ||
    fail "compile: no vulkan family: $(cat "$dir/compile.json")"
grep -q '^psdb compile: .* vulkan pipelines on ' "$dir/compile.err" ||
    fail "compile: no progress line: $(cat "$dir/compile.err")"
"$PSDB" verify "$dir/app.psdb" >/dev/null 2>&1 || fail "the vulkan PSDB does not verify"
# Arguments the vulkan backend refuses, each with one line.
out=$("$PSDB" compile "$sodb" --backend vulkan --family x --abi 1 -o "$dir/x.psdb" 2>&1) &&
    fail "compile took --family with --backend vulkan"
grep -q 'no --family or --abi' <<<"$out" || fail "compile refusal: $out"
out=$("$PSDB" compile "$sodb" --backend vulkan --device 9 -o "$dir/x.psdb" 2>&1) &&
    fail "compile used device 9"
grep -q 'device 9 does not exist' <<<"$out" || fail "compile --device 9: $out"
[ ! -e "$dir/x.psdb" ] || fail "a failed compile left $dir/x.psdb"

# 2. Replay: time-to-usable cold and with the PSDB, every pipeline a hit.
"$PSDB" replay --backend vulkan "$sodb" "$dir/app.psdb" --json >"$dir/replay.json" \
    2>"$dir/replay.err" || fail "replay --backend vulkan: $(cat "$dir/replay.err")"
sanitizer_check "$dir/replay.err"
tr -d ' \n' <"$dir/replay.json" | grep -q "\"psdb\":{\"pipelines\":$npipe,\"failed\":0,\"hits\":$npipe,\"misses\":0" ||
    fail "replay with the PSDB: $(cat "$dir/replay.json")"
grep -q '"speedup": [0-9.]*' "$dir/replay.json" || fail "replay: no speed-up: $(cat "$dir/replay.json")"

# 3. The layer delivers: every pipeline a hit, images identical to the cold run.
run_delivered() { # NAME ENV... : runs vkdemo under the layer, checks the images
    local name=$1
    shift
    rm -f "$dir/stats.json"
    under_layer env "$@" "$VKDEMO" >"$dir/$name.txt" 2>"$dir/$name.err" ||
        fail "$name: vkdemo failed: $(cat "$dir/$name.err")"
    sanitizer_check "$dir/$name.err"
    cmp -s "$dir/cold.txt" "$dir/$name.txt" ||
        fail "$name: images differ: $(diff "$dir/cold.txt" "$dir/$name.txt")"
    [ -f "$dir/stats.json" ] || fail "$name: no PSDB_LAYER_STATS file"
}
rm -rf "$XDG_CACHE_HOME"
run_delivered delivered PSDB_DELIVERY="$dir/app.psdb"
[ "$(field pipelines)" = "$npipe" ] && [ "$(field psdb_hits)" = "$npipe" ] &&
    [ "$(field psdb_misses)" = 0 ] && [ "$(delivery)" = on ] ||
    fail "delivered: $(cat "$dir/stats.json")"
grep -q "^psdb layer: delivery: $npipe pipelines, $npipe hits, 0 misses" "$dir/delivered.err" ||
    fail "delivered: no delivery line: $(cat "$dir/delivered.err")"
# The driver really used the delivered code: Mesa's own read-write cache beside the shipped one got
# nothing to store (a 16-byte file header at most) where the PSDB carries Mesa's cache.
mesa_rw_bytes() {
    find "$XDG_CACHE_HOME/psdb/mesa" -name foz_cache.foz -printf '%s\n' 2>/dev/null |
        awk '{ s += $1 } END { print s + 0 }'
}
mesa=0
grep -q 'mesa disk cache)$' "$dir/compile.err" && mesa=1
if [ "$mesa" = 1 ]; then
    [ "$(mesa_rw_bytes)" -le 16 ] ||
        fail "the driver compiled despite the PSDB: $(mesa_rw_bytes) bytes in its own cache"
fi

# 3b. The VkPipelineCache path (NVIDIA's) on this device: one checked cache blob per pipeline,
# and all of them merged into one cache that the layer makes once per device and hands over to
# every hit of a creation that passes no cache of its own.
export PSDB_VULKAN_STRATEGY=pipeline-cache
"$PSDB" compile "$sodb" --backend vulkan --json -o "$dir/cache.psdb" >"$dir/compile2.json" \
    2>"$dir/compile2.err" || fail "compile, pipeline-cache path: $(cat "$dir/compile2.err")"
grep -q "\"pipelines\": $npipe" "$dir/compile2.json" || fail "compile 2: $(cat "$dir/compile2.json")"
grep -q 'pipeline cache)$' "$dir/compile2.err" || fail "compile 2: $(cat "$dir/compile2.err")"
run_delivered cache PSDB_DELIVERY="$dir/cache.psdb"
[ "$(field psdb_hits)" = "$npipe" ] && [ "$(field psdb_rejected)" = 0 ] &&
    [ "$(merged)" = on ] || fail "pipeline-cache delivery: $(cat "$dir/stats.json")"
# The replay delivers as the layer does: the merged cache, every pipeline a hit.
"$PSDB" replay "$sodb" "$dir/cache.psdb" --backend vulkan --json >"$dir/replay2.json" \
    2>"$dir/replay2.err" || fail "replay, pipeline-cache path: $(cat "$dir/replay2.err")"
tr -d ' \n' <"$dir/replay2.json" | grep -q "\"psdb\":{[^}]*\"hits\":$npipe,[^}]*\"merged_cache\":true" ||
    fail "replay, pipeline-cache path: $(cat "$dir/replay2.json")"
# An application that passes its own VkPipelineCache keeps it: the PSDB's merged cache is merged
# into it once, and its creations go down with it.
rm -f "$dir/stats.json"
under_layer env PSDB_DELIVERY="$dir/cache.psdb" "$VKDEMO" --pipeline-cache >"$dir/own.txt" \
    2>"$dir/own.err" || fail "own cache: vkdemo failed: $(cat "$dir/own.err")"
sanitizer_check "$dir/own.err"
cmp -s "$dir/cold.txt" "$dir/own.txt" || fail "own cache: images differ"
[ "$(field psdb_hits)" = "$npipe" ] && [ "$(field app_caches_fed)" = 1 ] ||
    fail "own cache delivery: $(cat "$dir/stats.json")"
unset PSDB_VULKAN_STRATEGY

# 3c. A PSDB for this device that holds other pipelines (where psdb synth --api vulkan is built):
# every creation is looked up and misses, the program is unaffected.
if "$PSDB" synth --api vulkan --app Other --app-version 1.0.0.0 --pipelines 3 \
    -o "$dir/other_vk.sodb" >/dev/null 2>&1; then
    "$PSDB" compile "$dir/other_vk.sodb" --backend vulkan -o "$dir/other_vk.psdb" >/dev/null 2>&1 ||
        fail "compile of the other corpus failed"
    rm -rf "$XDG_CACHE_HOME"
    run_delivered other PSDB_DELIVERY="$dir/other_vk.psdb"
    [ "$(field psdb_hits)" = 0 ] && [ "$(field psdb_misses)" = "$npipe" ] && [ "$(delivery)" = on ] ||
        fail "other pipelines' PSDB: $(cat "$dir/stats.json")"
    # ... and the driver compiled them itself (the check above can fail).
    [ "$mesa" = 0 ] || [ "$(mesa_rw_bytes)" -gt 16 ] ||
        fail "nothing compiled with a PSDB of other pipelines: $(mesa_rw_bytes) bytes"
fi

# 4. Fallbacks: each one runs the program correctly with no hit.
"$PSDB" synth --app Other --app-version 1.0.0.0 --pipelines 5 -o "$dir/other.sodb" >/dev/null
"$PSDB" compile "$dir/other.sodb" --family contoso-gfx9 --abi 3 -o "$dir/foreign.psdb" >/dev/null
run_delivered foreign PSDB_DELIVERY="$dir/foreign.psdb"
[ "$(field psdb_hits)" = 0 ] && [ "$(delivery)" = refused ] ||
    fail "foreign PSDB used: $(cat "$dir/stats.json")"
grep -q 'psdb layer: delivery .*foreign.psdb: not used for' "$dir/foreign.err" ||
    fail "foreign: no refusal line: $(cat "$dir/foreign.err")"
cp "$dir/app.psdb" "$dir/corrupt.psdb"
size=$(stat -c %s "$dir/corrupt.psdb")
for off in 0 100 $((size / 2)) $((size - 600)); do
    printf '\xde\xad\xbe\xef\xde\xad\xbe\xef' | dd of="$dir/corrupt.psdb" bs=1 seek="$off" conv=notrunc 2>/dev/null
done
rm -rf "$XDG_CACHE_HOME"
run_delivered corrupt PSDB_DELIVERY="$dir/corrupt.psdb"
[ "$(field psdb_hits)" = 0 ] || fail "corrupt PSDB gave hits: $(cat "$dir/stats.json")"
run_delivered missing PSDB_DELIVERY="$dir/none.psdb"
[ "$(field psdb_hits)" = 0 ] && [ "$(delivery)" = refused ] ||
    fail "missing PSDB: $(cat "$dir/stats.json")"
run_delivered no_registry PSDB_REGISTRY_DIR="$dir/no-such-registry"
[ "$(field psdb_hits)" = 0 ] && [ "$(delivery)" = off ] ||
    fail "no registry: $(cat "$dir/stats.json")"

# 5. Published, installed with --target auto, found through the registry by the exe path.
if [ -n "${PSDBD:-}" ] && [ -x "${PSDBD:-}" ]; then
    data="$dir/data"
    vk_start_psdbd "$data"
    pids+=("${vk_pids[@]}")
    "$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 1 \
        "$dir/app.psdb" >"$dir/publish.out" 2>&1 || fail "publish: $(cat "$dir/publish.out")"
    "$PSDB" install --server "$url" --exe-path "$(readlink -f "$VKDEMO")" --app psdb-vkdemo \
        --app-version 1.2.3.0 --target auto --trust "$dir/key.pub" --json >"$dir/install.json" \
        2>&1 || fail "install --target auto: $(cat "$dir/install.json")"
    rm -rf "$XDG_CACHE_HOME"
    run_delivered registry
    [ "$(field psdb_hits)" = "$npipe" ] && [ "$(field psdb_misses)" = 0 ] ||
        fail "registry delivery: $(cat "$dir/stats.json")"
fi
echo "vulkan_backend_test: ok ($npipe pipelines)"
