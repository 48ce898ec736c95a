#!/usr/bin/env bash
# layer_capture_test.sh - vkdemo (a Vulkan program that knows nothing of psdb) runs cold, then
# unmodified under VK_LAYER_PSDB_delivery with PSDB_CAPTURE: the images match, the SODB holds
# exactly the program's pipelines with the Vulkan kinds and its identity, structures that do not
# change code are skipped, one that does is counted (not recorded, no crash), and a capture that
# cannot be opened leaves the program working.
# Env: PSDB (the tool), VKDEMO (the program), PSDB_LAYER_DIR (the build tree's layer/ folder),
# PSDB_BUILD_DIR (optional: the build tree, to test the installed layer), PSDB_SANITIZE.
# Exit 77 (skipped) when no Vulkan device can be created. The device is lavapipe when its ICD
# manifest is installed and neither VK_ICD_FILENAMES nor VK_DRIVER_FILES is set.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${VKDEMO:?set VKDEMO to the vkdemo program}"
: "${PSDB_LAYER_DIR:?set PSDB_LAYER_DIR to the folder of VkLayer_psdb_delivery.json}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "layer_capture_test: $*" >&2; exit 1; }

lvp=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -f "$lvp" ]; then
    export VK_ICD_FILENAMES=$lvp VK_DRIVER_FILES=$lvp
fi
# Mesa's shader cache would only make runs faster; off, so every run compiles.
export MESA_SHADER_CACHE_DISABLE=true
# Under ASan (PSDB_SANITIZE set by the build), lavapipe itself leaks a little from a library it
# unloads, so leaks cannot fail a run: every run under the layer must report exactly the leaks of
# the cold run instead (sanitizer_check), and any other sanitizer report fails.
if [ -n "${PSDB_SANITIZE:-}" ]; then
    export LSAN_OPTIONS=exitcode=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}
fi
leaks() { grep '^SUMMARY: AddressSanitizer: .* leaked' "$1" || true; }
sanitizer_check() {
    ! grep -q -e 'ERROR: AddressSanitizer' -e 'runtime error:' "$1" ||
        fail "sanitizer report in $1: $(cat "$1")"
    [ "$(leaks "$1")" = "$(leaks "$dir/cold.err")" ] ||
        fail "the layer leaks: $(cat "$1")"
}
[ -f "$PSDB_LAYER_DIR/VkLayer_psdb_delivery.json" ] || fail "no layer manifest in $PSDB_LAYER_DIR"

rc=0
"$VKDEMO" >"$dir/cold.txt" 2>"$dir/cold.err" || rc=$?
if [ "$rc" = 77 ]; then
    echo "layer_capture_test: skipped: $(cat "$dir/cold.err")"
    exit 77
fi
[ "$rc" = 0 ] || fail "cold run failed ($rc): $(cat "$dir/cold.err")"
# 3 compute and 3 graphics pipelines, and a fourth graphics one where the device has Vulkan 1.3
# dynamic rendering (rendering without a render pass).
ncomp=$(grep -c '^compute' "$dir/cold.txt" || true)
ngfx=$(grep -c '^graphics' "$dir/cold.txt" || true)
npipe=$((ncomp + ngfx))
[ "$ncomp" = 3 ] && { [ "$ngfx" = 3 ] || [ "$ngfx" = 4 ]; } ||
    fail "cold run printed: $(cat "$dir/cold.txt")"
"$VKDEMO" --unknown-pnext >"$dir/cold_unknown.txt" 2>/dev/null || fail "cold --unknown-pnext"

# Under the layer: VK_LAYER_PATH finds the build tree's manifest, nothing in vkdemo changes.
under_layer() {
    VK_LAYER_PATH="$PSDB_LAYER_DIR" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery \
        PSDB_LAYER_STATS="$dir/stats.json" "$@"
}
stat() { grep -o "\"$1\": [0-9]*" "$dir/stats.json" | grep -o '[0-9]*$'; }
sodb="$dir/app.sodb"

under_layer env PSDB_CAPTURE="$sodb" "$VKDEMO" >"$dir/warm.txt" 2>"$dir/warm.err" ||
    fail "run under the layer failed: $(cat "$dir/warm.err")"
sanitizer_check "$dir/warm.err"
cmp -s "$dir/cold.txt" "$dir/warm.txt" || fail "images differ under the layer: $(diff "$dir/cold.txt" "$dir/warm.txt")"
[ -f "$dir/stats.json" ] || fail "the layer was not loaded (no PSDB_LAYER_STATS file)"
[ "$(stat pipelines)" = $npipe ] && [ "$(stat captured)" = $npipe ] && [ "$(stat unrepresentable)" = 0 ] ||
    fail "stats after capture: $(cat "$dir/stats.json")"
grep -q "^psdb layer: capture $sodb: $npipe pipelines, $npipe recorded" "$dir/warm.err" ||
    fail "no capture line on stderr: $(cat "$dir/warm.err")"

# psdb inspect shows exactly the program's pipelines, with the Vulkan kinds and its identity.
"$PSDB" inspect --json "$sodb" >"$dir/inspect.json" || fail "inspect failed"
for kv in '"vulkan_compute": 3' "\"vulkan_graphics\": $ngfx" '"compute": 0' '"graphics": 0' \
    '"state_objects": 0' '"name": "psdb-vkdemo"' '"version": "1.2.3.0"' \
    '"exe_filename": "vkdemo"' '"engine_name": "psdb-test-engine"' '"engine_version": "0.9.0.0"'; do
    grep -q "$kv" "$dir/inspect.json" || fail "inspect lacks $kv: $(cat "$dir/inspect.json")"
done
"$PSDB" inspect "$sodb" | grep -q "^vulkan entries: *3 compute, $ngfx graphics\$" || fail "inspect text"
# The reference compiler says why it cannot compile a Vulkan capture.
if "$PSDB" compile "$sodb" --family contoso-gfx9 --abi 3 -o "$dir/x.psdb" 2>"$dir/compile.err"; then
    fail "psdb compile accepted a Vulkan capture"
fi
grep -q 'a Vulkan pipeline: the reference compiler has no Vulkan backend; use --backend vulkan' "$dir/compile.err" ||
    fail "compile error: $(cat "$dir/compile.err")"
# Each entry's description starts with its magic, version 1 and a zero reserved word, and holds
# the SPIR-V module (magic word 0x07230203, little-endian).
rows=$(sqlite3 "$sodb" "SELECT kind || ' ' || hex(substr(description, 1, 12)) || ' ' ||
    (instr(description, X'03022307') > 0) FROM entries ORDER BY seq")
want=$(for _ in 1 2 3; do echo "4 564B43500100000000000000 1"; done
    for _ in $(seq "$ngfx"); do echo "5 564B47500100000000000000 1"; done)
[ "$rows" = "$want" ] || fail "entries: $rows"

# Creation feedback does not change code: the same six descriptions, nothing new recorded.
under_layer env PSDB_CAPTURE="$sodb" "$VKDEMO" --feedback >"$dir/fb.txt" 2>"$dir/fb.err" ||
    fail "run with --feedback failed: $(cat "$dir/fb.err")"
sanitizer_check "$dir/fb.err"
cmp -s "$dir/cold.txt" "$dir/fb.txt" || fail "images differ with --feedback"
[ "$(stat captured)" = 0 ] && [ "$(stat already_captured)" = $npipe ] ||
    fail "feedback changed the descriptions: $(cat "$dir/stats.json")"

# A structure the encoding cannot carry (VkPipelineRobustnessCreateInfoEXT, sType 1000068000):
# counted and named, the pipeline not recorded, the program unaffected.
under_layer env PSDB_CAPTURE="$sodb" "$VKDEMO" --unknown-pnext >"$dir/unk.txt" 2>"$dir/unk.err" ||
    fail "run with --unknown-pnext failed: $(cat "$dir/unk.err")"
sanitizer_check "$dir/unk.err"
cmp -s "$dir/cold_unknown.txt" "$dir/unk.txt" || fail "images differ with --unknown-pnext"
[ "$(stat pipelines)" = $((npipe + 1)) ] && [ "$(stat unrepresentable)" = 1 ] &&
    [ "$(stat captured)" = 0 ] ||
    fail "unknown pNext not counted: $(cat "$dir/stats.json")"
grep -q '"unrepresentable_stypes": \[1000068000\]' "$dir/stats.json" ||
    fail "unknown sType not named: $(cat "$dir/stats.json")"
grep -q '1 unrepresentable (sTypes: 1000068000)' "$dir/unk.err" || fail "stderr: $(cat "$dir/unk.err")"
"$PSDB" inspect --json "$sodb" | grep -q "\"vulkan_graphics\": $ngfx" || fail "unrepresentable recorded"

# A capture path that cannot be opened: one line on stderr, the program runs as without it.
under_layer env PSDB_CAPTURE="$dir/missing/dir/app.sodb" "$VKDEMO" >"$dir/bad.txt" 2>"$dir/bad.err" ||
    fail "unwritable capture broke the program: $(cat "$dir/bad.err")"
sanitizer_check "$dir/bad.err"
cmp -s "$dir/cold.txt" "$dir/bad.txt" || fail "images differ with an unwritable capture"
grep -q "^psdb layer: capture $dir/missing/dir/app.sodb: cannot open the SODB: " "$dir/bad.err" ||
    fail "no error line for the unwritable capture: $(cat "$dir/bad.err")"

# Loaded without PSDB_CAPTURE: passes everything through, writes no SODB, prints nothing.
under_layer "$VKDEMO" >"$dir/plain.txt" 2>"$dir/plain.err" || fail "layer without capture"
sanitizer_check "$dir/plain.err"
cmp -s "$dir/cold.txt" "$dir/plain.txt" || fail "images differ under the layer without capture"
! grep -q '^psdb layer' "$dir/plain.err" || fail "layer without capture printed: $(cat "$dir/plain.err")"
[ "$(stat pipelines)" = $npipe ] || fail "stats without capture: $(cat "$dir/stats.json")"
# Installed: the library in <libdir>, the manifest in <prefix>/share/vulkan/explicit_layer.d/
# naming it by file name (found through the library search path).
if [ -n "${PSDB_BUILD_DIR:-}" ]; then
    cmake --install "$PSDB_BUILD_DIR" --prefix "$dir/prefix" >/dev/null || fail "cmake --install"
    manifest="$dir/prefix/share/vulkan/explicit_layer.d/VkLayer_psdb_delivery.json"
    [ -f "$manifest" ] || fail "no installed manifest"
    grep -q '"library_path": "libVkLayer_psdb_delivery.so"' "$manifest" ||
        fail "installed manifest: $(cat "$manifest")"
    lib=$(find "$dir/prefix" -name libVkLayer_psdb_delivery.so | head -n 1)
    [ -n "$lib" ] || fail "no installed layer library"
    rm -f "$dir/stats.json"
    VK_LAYER_PATH="$(dirname "$manifest")" LD_LIBRARY_PATH="$(dirname "$lib")" \
        VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery PSDB_LAYER_STATS="$dir/stats.json" \
        PSDB_CAPTURE="$dir/installed.sodb" "$VKDEMO" >"$dir/inst.txt" 2>"$dir/inst.err" ||
        fail "installed layer: $(cat "$dir/inst.err")"
    sanitizer_check "$dir/inst.err"
    cmp -s "$dir/cold.txt" "$dir/inst.txt" || fail "images differ under the installed layer"
    [ "$(stat captured)" = $npipe ] || fail "installed layer did not capture: $(cat "$dir/stats.json")"
fi
echo "layer_capture_test: ok"
