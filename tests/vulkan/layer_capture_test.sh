#!/usr/bin/env bash
# layer_capture_test.sh - vkdemo (a Vulkan program that knows nothing of psdb) runs cold, then
# unmodified under VK_LAYER_PSDB_delivery with PSDB_CAPTURE: the images match, the SODB holds
# exactly the program's pipelines with the Vulkan kinds and its identity, structures that do not
# change code are skipped, one that does is counted (not recorded, no crash), a program that names
# no version is captured as 0.0.0.1 and delivered, and a capture that cannot be opened leaves the
# program working; the installed layer loads from any prefix with VK_LAYER_PATH alone.
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
# A program that names no version, as real ones do (no VkApplicationInfo at all, so a Vulkan 1.0
# instance; applicationVersion 0 as vkcube's, and no engine): captured as version 0.0.0.1
# (schema/SODB.md section 3.1), named by VkApplicationInfo or else by its executable, no engine;
# the capture compiles and is delivered, every pipeline a hit (on the 1.0 instance too: the layer
# asks the driver properties of the device identity through VK_KHR_get_physical_device_properties2).
for spec in "--no-app-info|vkdemo" "--app-version-zero|psdb-vkdemo"; do
    IFS='|' read -r opt name <<<"$spec"
    tag=${opt#--}
    "$VKDEMO" "$opt" >"$dir/cold-$tag.txt" 2>/dev/null || fail "cold $opt"
    n=$(grep -c -e '^compute' -e '^graphics' "$dir/cold-$tag.txt" || true)
    rm -f "$dir/stats.json"
    under_layer env PSDB_CAPTURE="$dir/$tag.sodb" "$VKDEMO" "$opt" >"$dir/$tag.txt" \
        2>"$dir/$tag.err" || fail "$opt under the layer: $(cat "$dir/$tag.err")"
    sanitizer_check "$dir/$tag.err"
    cmp -s "$dir/cold-$tag.txt" "$dir/$tag.txt" || fail "images differ with $opt"
    [ "$n" -gt 0 ] && [ "$(stat captured)" = "$n" ] && [ "$(stat capture_failed)" = 0 ] ||
        fail "$opt: capture: $(cat "$dir/$tag.err")"
    "$PSDB" inspect --json "$dir/$tag.sodb" >"$dir/$tag.json" || fail "$opt: inspect"
    for kv in "\"name\": \"$name\"" '"version": "0.0.0.1"' '"exe_filename": "vkdemo"' \
        '"engine_name": null' '"engine_version": "0.0.0.0"'; do
        grep -q "$kv" "$dir/$tag.json" || fail "$opt: inspect lacks $kv: $(cat "$dir/$tag.json")"
    done
    "$PSDB" compile "$dir/$tag.sodb" --backend vulkan -o "$dir/$tag.psdb" >/dev/null \
        2>"$dir/$tag-compile.err" || fail "$opt: compile: $(cat "$dir/$tag-compile.err")"
    rm -f "$dir/stats.json"
    # Mesa's cache on (the capture runs keep it off): the shipped cache is read through it.
    under_layer env -u MESA_SHADER_CACHE_DISABLE XDG_CACHE_HOME="$dir/cache-$tag" \
        PSDB_DELIVERY="$dir/$tag.psdb" "$VKDEMO" \
        "$opt" >"$dir/$tag-d.txt" 2>"$dir/$tag-d.err" ||
        fail "$opt delivered: $(cat "$dir/$tag-d.err")"
    sanitizer_check "$dir/$tag-d.err"
    cmp -s "$dir/cold-$tag.txt" "$dir/$tag-d.txt" || fail "images differ with $opt delivered"
    [ "$(stat psdb_hits)" = "$n" ] || fail "$opt: delivery: $(cat "$dir/stats.json")"
done

# Installed: the library in <prefix>/<libdir>, the manifest in
# <prefix>/share/vulkan/explicit_layer.d/ naming it relative to its own folder, so that
# VK_LAYER_PATH alone loads it, with no LD_LIBRARY_PATH, from any prefix: two prefixes other than
# the configured one (one with a space), a DESTDIR staging, the tree moved after the install.
# The loader skips a layer it cannot open without failing the program, so each run checks the
# layer's own stats and capture.
installed_run() { # NAME MANIFEST_DIR
    local name=$1 mdir=$2
    rm -f "$dir/stats.json"
    env -u LD_LIBRARY_PATH VK_LAYER_PATH="$mdir" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery \
        VK_LOADER_DEBUG=error,warn PSDB_LAYER_STATS="$dir/stats.json" \
        PSDB_CAPTURE="$dir/$name.sodb" "$VKDEMO" >"$dir/$name.txt" 2>"$dir/$name.err" ||
        fail "$name: vkdemo under the installed layer: $(cat "$dir/$name.err")"
    sanitizer_check "$dir/$name.err"
    cmp -s "$dir/cold.txt" "$dir/$name.txt" || fail "$name: images differ under the installed layer"
    [ -f "$dir/stats.json" ] ||
        fail "$name: the loader did not load the layer of $mdir: $(cat "$dir/$name.err")"
    [ "$(stat captured)" = $npipe ] || fail "$name: no capture: $(cat "$dir/stats.json")"
}
library_path() { grep -o '"library_path": "[^"]*"' "$1" | cut -d'"' -f4; }
layer_d=share/vulkan/explicit_layer.d
if [ -n "${PSDB_BUILD_DIR:-}" ]; then
    n_inst=0
    for prefix in "$dir/prefix one" "$dir/opt/psdb"; do
        cmake --install "$PSDB_BUILD_DIR" --prefix "$prefix" >/dev/null || fail "cmake --install"
        manifest="$prefix/$layer_d/VkLayer_psdb_delivery.json"
        [ -f "$manifest" ] || fail "no installed manifest in $prefix"
        lib=$(find "$prefix" -name libVkLayer_psdb_delivery.so | head -n 1)
        [ -n "$lib" ] || fail "no installed layer library in $prefix"
        # Relative to the manifest's folder (a slash, not absolute): the same for every prefix.
        path=$(library_path "$manifest")
        [[ "$path" == */* && "$path" != /* ]] ||
            fail "installed manifest's library_path: $(cat "$manifest")"
        [ "$(readlink -f "$(dirname "$manifest")/$path")" = "$(readlink -f "$lib")" ] ||
            fail "library_path $path does not name $lib"
        installed_run "installed$((++n_inst))" "$(dirname "$manifest")"
    done
    # Moved after the install: nothing in it names the prefix.
    mv "$dir/opt/psdb" "$dir/moved"
    installed_run moved "$dir/moved/$layer_d"
    # Staged with DESTDIR for a prefix that does not exist here.
    DESTDIR="$dir/stage" cmake --install "$PSDB_BUILD_DIR" --prefix /opt/psdb-layer-test \
        >/dev/null || fail "cmake --install with DESTDIR"
    [ ! -e /opt/psdb-layer-test ] || fail "DESTDIR ignored"
    installed_run staged "$dir/stage/opt/psdb-layer-test/$layer_d"
    # An absolute CMAKE_INSTALL_LIBDIR or DATADIR: the manifest names the library by absolute path
    # (layer/manifest.cmake, as the install runs it).
    manifest_cmake="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../layer" && pwd)/manifest.cmake"
    template="$(dirname "$manifest_cmake")/VkLayer_psdb_delivery.json.in"
    libdir=$(dirname "$(find "$dir/prefix one" -name libVkLayer_psdb_delivery.so | head -n 1)")
    libdir_rel=${libdir#"$dir/prefix one/"}
    # name | prefix | LIBDIR | DATADIR | the manifest's folder
    for spec in "abs_libdir|$dir/p3|$libdir|share|$dir/p3/$layer_d" \
        "abs_datadir|$dir/prefix one|$libdir_rel|$dir/data|$dir/data/vulkan/explicit_layer.d"; do
        IFS='|' read -r name prefix ldir ddir mdir <<<"$spec"
        mkdir -p "$dir/staging-$name"
        cmake -DPSDB_LAYER_TEMPLATE="$template" -DPSDB_LAYER_STAGING="$dir/staging-$name" \
            -DPSDB_LAYER_LIBDIR="$ldir" -DPSDB_LAYER_DATADIR="$ddir" \
            -DPSDB_LAYER_LIBRARY=libVkLayer_psdb_delivery.so -DCMAKE_INSTALL_PREFIX="$prefix" \
            -P "$manifest_cmake" >/dev/null || fail "$name: manifest.cmake failed"
        [ "$(library_path "$mdir/VkLayer_psdb_delivery.json")" = "$libdir/libVkLayer_psdb_delivery.so" ] ||
            fail "$name: manifest: $(cat "$mdir/VkLayer_psdb_delivery.json")"
        installed_run "$name" "$mdir"
    done
fi
echo "layer_capture_test: ok"
