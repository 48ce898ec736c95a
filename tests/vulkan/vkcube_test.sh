#!/usr/bin/env bash
# vkcube_test.sh - a program the project did not write, end to end: Khronos' vkcube (Debian's
# vulkan-tools), which passes applicationVersion 0, runs under Xvfb on the machine's device
# (lavapipe) with VK_LAYER_PSDB_delivery. Its capture names it vkcube 0.0.0.1 (schema/SODB.md
# section 3.1); `psdb compile --backend vulkan` compiles it, `psdb publish` sends it to a psdbd
# started here, `psdb install --target auto --app vkcube --app-version 0.0.0.1` installs it, and
# vkcube runs again with every pipeline a PSDB hit found through the registry. A capture survives
# vkcube being killed (SIGKILL, SIGTERM) a second after its pipelines exist: the SODB, left in WAL
# mode, still holds them for psdb inspect and psdb compile.
# Env: PSDB, PSDBD, PSDB_LAYER_DIR, PSDB_SANITIZE. Exit 77 (skipped) without vkcube, Xvfb or a
# Vulkan device, or in a sanitizer build (vkcube does not carry the runtime the layer then needs).
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server}"
: "${PSDB_LAYER_DIR:?set PSDB_LAYER_DIR to the folder of VkLayer_psdb_delivery.json}"
skip() {
    echo "vkcube_test: skipped: $*"
    exit 77
}
for p in vkcube xvfb-run Xvfb xauth; do
    command -v "$p" >/dev/null || skip "no $p (Debian: vulkan-tools, xvfb, xauth)"
done
[ -z "${PSDB_SANITIZE:-}" ] || skip "a sanitizer build: vkcube lacks the sanitizer runtime"
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    chmod -R u+w "$dir" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh" # vk_start_psdbd
fail() {
    echo "vkcube_test: $*" >&2
    exit 1
}

lvp=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -f "$lvp" ]; then
    export VK_ICD_FILENAMES=$lvp VK_DRIVER_FILES=$lvp
fi
# Every run gets its own empty cache home: the layer writes Mesa's shipped cache under it.
export XDG_CACHE_HOME="$dir/cache" PSDB_REGISTRY_DIR="$dir/registry"
unset MESA_SHADER_CACHE_DIR MESA_DISK_CACHE_READ_ONLY_FOZ_DBS MESA_DISK_CACHE_SINGLE_FILE
vkcube=$(readlink -f "$(command -v vkcube)")
frames=50

under_layer() {
    rm -f "$dir/stats.json"
    VK_LAYER_PATH="$PSDB_LAYER_DIR" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery \
        PSDB_LAYER_STATS="$dir/stats.json" "$@"
}
field() { grep -o "\"$1\": [0-9]*" "$dir/stats.json" | grep -o '[0-9]*$'; }
delivery() { grep -o '"delivery": "[a-z]*"' "$dir/stats.json" | cut -d'"' -f4; }
# The Vulkan entries psdb inspect reads from an SODB (empty when it cannot read one).
entries() {
    local j
    j=$("$PSDB" inspect --json "$1" 2>/dev/null) || return 0
    echo $(($(grep -o '"vulkan_compute": [0-9]*' <<<"$j" | grep -o '[0-9]*$') + \
        $(grep -o '"vulkan_graphics": [0-9]*' <<<"$j" | grep -o '[0-9]*$')))
}
identity_check() { # SODB
    "$PSDB" inspect --json "$1" >"$dir/inspect.json" || fail "inspect $1"
    for kv in '"name": "vkcube"' '"version": "0.0.0.1"' '"exe_filename": "vkcube"'; do
        grep -q "$kv" "$dir/inspect.json" || fail "$1 lacks $kv: $(cat "$dir/inspect.json")"
    done
}
compile_check() { # SODB PSDB
    "$PSDB" compile "$1" --backend vulkan -o "$2" >"$dir/compile.out" 2>&1 ||
        fail "compile $1: $(cat "$dir/compile.out")"
    grep -q "^$npipe vulkan pipelines (.*), 0 failed" "$dir/compile.out" ||
        fail "compile $1: $(cat "$dir/compile.out")"
}

rc=0
xvfb-run -a vkcube --c "$frames" >"$dir/cold.out" 2>&1 || rc=$?
[ "$rc" = 0 ] || skip "vkcube does not run here ($rc): $(tail -n 3 "$dir/cold.out")"

# 1. Capture: the layer's stats count the pipelines, the SODB names vkcube 0.0.0.1.
sodb="$dir/vkcube.sodb"
under_layer env PSDB_CAPTURE="$sodb" xvfb-run -a vkcube --c "$frames" >"$dir/capture.out" 2>&1 ||
    fail "vkcube under the layer: $(cat "$dir/capture.out")"
[ -f "$dir/stats.json" ] || fail "the layer was not loaded: $(cat "$dir/capture.out")"
npipe=$(field pipelines)
[ "$npipe" -gt 0 ] && [ "$(field captured)" = "$npipe" ] ||
    fail "capture: $(cat "$dir/stats.json") $(cat "$dir/capture.out")"
[ "$(entries "$sodb")" = "$npipe" ] || fail "the SODB holds $(entries "$sodb") of $npipe pipelines"
identity_check "$sodb"

# 2. Compiled on the device, published to psdbd, installed for this machine's device.
compile_check "$sodb" "$dir/vkcube.psdb"
data="$dir/data"
vk_start_psdbd "$data"
pids+=("${vk_pids[@]}")
"$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 1 \
    "$dir/vkcube.psdb" >"$dir/publish.out" 2>&1 || fail "publish: $(cat "$dir/publish.out")"
"$PSDB" install --server "$url" --exe-path "$vkcube" --app vkcube --app-version 0.0.0.1 \
    --target auto --trust "$dir/key.pub" --json >"$dir/install.json" 2>&1 ||
    fail "install --target auto: $(cat "$dir/install.json")"

# 3. vkcube again, unmodified: the layer finds the PSDB in the registry by vkcube's path, every
# pipeline a hit.
rm -rf "$XDG_CACHE_HOME"
under_layer xvfb-run -a vkcube --c "$frames" >"$dir/delivered.out" 2>&1 ||
    fail "vkcube delivered: $(cat "$dir/delivered.out")"
[ "$(delivery)" = on ] && [ "$(field pipelines)" = "$npipe" ] &&
    [ "$(field psdb_hits)" = "$npipe" ] && [ "$(field psdb_misses)" = 0 ] ||
    fail "registry delivery: $(cat "$dir/stats.json") $(cat "$dir/delivered.out")"

# 4. Killed while capturing, a second after its pipelines are in the SODB (vkcube without --c
# renders until it is killed): every one of them survives, in the WAL the writer never closed.
for sig in KILL TERM; do
    ksodb="$dir/killed-$sig.sodb"
    rm -f "$dir/pid"
    # shellcheck disable=SC2016 # expanded by the inner shell
    under_layer env PSDB_CAPTURE="$ksodb" xvfb-run -a sh -c 'echo $$ >"$1" && exec "$2"' sh \
        "$dir/pid" "$vkcube" >"$dir/killed-$sig.out" 2>&1 &
    xpid=$!
    pids+=("$xpid")
    for _ in $(seq 300); do
        [ -s "$dir/pid" ] && [ "$(entries "$ksodb")" = "$npipe" ] && break
        kill -0 "$xpid" 2>/dev/null || fail "SIG$sig: vkcube ended: $(cat "$dir/killed-$sig.out")"
        sleep 0.1
    done
    [ "$(entries "$ksodb")" = "$npipe" ] || fail "SIG$sig: the capture never held the pipelines"
    sleep 1
    vpid=$(cat "$dir/pid")
    kill -0 "$vpid" || fail "SIG$sig: vkcube is not running: $(cat "$dir/killed-$sig.out")"
    kill -"$sig" "$vpid"
    rc=0
    wait "$xpid" || rc=$?
    [ "$rc" != 0 ] || fail "SIG$sig: vkcube exited 0: $(cat "$dir/killed-$sig.out")"
    # The writer did not close: no line of its own, the entries in the -wal beside the file.
    ! grep -q '^psdb layer: capture' "$dir/killed-$sig.out" ||
        fail "SIG$sig: the capture was closed: $(cat "$dir/killed-$sig.out")"
    [ -s "$ksodb-wal" ] || fail "SIG$sig: no -wal beside the SODB: $(ls -l "$dir")"
    [ "$(entries "$ksodb")" = "$npipe" ] ||
        fail "SIG$sig: after the kill the SODB holds $(entries "$ksodb") of $npipe pipelines"
    identity_check "$ksodb"
    compile_check "$ksodb" "$dir/killed-$sig.psdb"
done

# 5. The killed capture copied to a folder its reader may not write in: with its -wal and -shm it
# reads whole (the -shm read-only); without the -shm SQLite cannot read the -wal, which is said as
# access denied, not as a corrupt file. As root the reader is nobody; otherwise the folder is
# made read-only.
reader=()
if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null &&
    runuser -u nobody -- test -x "$PSDB" 2>/dev/null; then
    reader=(runuser -u nobody --)
    chmod 755 "$dir"
fi
if [ "$(id -u)" != 0 ] || [ ${#reader[@]} -gt 0 ]; then
    ro="$dir/ro"
    mkdir "$ro"
    cp "$dir/killed-KILL.sodb" "$dir/killed-KILL.sodb-wal" "$dir/killed-KILL.sodb-shm" "$ro/"
    chmod 644 "$ro"/*
    chmod 555 "$ro"
    "${reader[@]}" "$PSDB" inspect --json "$ro/killed-KILL.sodb" >"$dir/ro.json" 2>&1 ||
        fail "read-only folder: $(cat "$dir/ro.json")"
    n=$(($(grep -o '"vulkan_compute": [0-9]*' "$dir/ro.json" | grep -o '[0-9]*$') + \
        $(grep -o '"vulkan_graphics": [0-9]*' "$dir/ro.json" | grep -o '[0-9]*$')))
    [ "$n" = "$npipe" ] || fail "read-only folder: $n of $npipe pipelines: $(cat "$dir/ro.json")"
    chmod 755 "$ro" && rm "$ro/killed-KILL.sodb-shm" && chmod 555 "$ro"
    if "${reader[@]}" "$PSDB" inspect "$ro/killed-KILL.sodb" >"$dir/noshm.out" 2>&1; then
        fail "read without its -shm in a read-only folder: $(cat "$dir/noshm.out")"
    fi
    grep -q 'PSDB_E_ACCESS' "$dir/noshm.out" || fail "without its -shm: $(cat "$dir/noshm.out")"
    chmod 755 "$ro"
fi
echo "vkcube_test: ok ($npipe pipelines)"
