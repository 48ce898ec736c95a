#!/usr/bin/env bash
# delivery_trust_test.sh - only proven bytes reach the driver, and the layer's stats say what the
# driver was really given. vkdemo (a program that knows nothing of psdb) runs under the layer on the
# machine's device (lavapipe in CI) with PSDBs that must not be delivered: damaged, replaced or
# repointed after install, a FIFO, a device or a directory where the PSDB should be, a Mesa cache
# whose index is garbage under valid digests, and a Mesa cache that cannot be set up. Each run must
# end with the program's images unchanged, no hang, no crash, and stats that claim no hit the driver
# did not get.
# Env: PSDB, VKDEMO, PSDB_LAYER_DIR, PSDBD (optional: the registry cases), PSDB_SANITIZE.
# Exit 77 without a Vulkan device.
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
fail() { echo "delivery_trust_test: $*" >&2; exit 1; }

lvp=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
if [ -z "${VK_ICD_FILENAMES:-}${VK_DRIVER_FILES:-}" ] && [ -f "$lvp" ]; then
    export VK_ICD_FILENAMES=$lvp VK_DRIVER_FILES=$lvp
fi
if [ -n "${PSDB_SANITIZE:-}" ]; then
    export LSAN_OPTIONS=exitcode=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}
fi
export XDG_CACHE_HOME="$dir/cache" PSDB_REGISTRY_DIR="$dir/registry"
unset MESA_SHADER_CACHE_DIR MESA_DISK_CACHE_READ_ONLY_FOZ_DBS MESA_DISK_CACHE_SINGLE_FILE
unset MESA_SHADER_CACHE_DISABLE PSDB_VULKAN_STRATEGY

rc=0
MESA_SHADER_CACHE_DISABLE=true "$VKDEMO" >"$dir/cold.txt" 2>"$dir/cold.err" || rc=$?
if [ "$rc" = 77 ]; then
    echo "delivery_trust_test: skipped: $(cat "$dir/cold.err")"
    exit 77
fi
[ "$rc" = 0 ] || fail "cold run failed ($rc): $(cat "$dir/cold.err")"
npipe=$(grep -c -e '^compute' -e '^graphics' "$dir/cold.txt")

field() { grep -o "\"$1\": [0-9a-z]*" "$dir/stats.json" | sed 's/.*: //'; }
delivery() { grep -o '"delivery": "[a-z]*"' "$dir/stats.json" | cut -d'"' -f4; }
# run NAME ENV... : vkdemo under the layer with a fresh cache home, bounded in time; the images
# must be the cold run's and no sanitizer may speak.
run() {
    local name=$1 rc=0
    shift
    rm -f "$dir/stats.json"
    rm -rf "$XDG_CACHE_HOME"
    VK_LAYER_PATH="$PSDB_LAYER_DIR" VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery \
        PSDB_LAYER_STATS="$dir/stats.json" timeout 120 env "$@" "$VKDEMO" >"$dir/$name.txt" \
        2>"$dir/$name.err" || rc=$?
    [ "$rc" != 124 ] || fail "$name: vkdemo hung (killed after 120 s): $(cat "$dir/$name.err")"
    [ "$rc" = 0 ] || fail "$name: vkdemo failed ($rc): $(cat "$dir/$name.err")"
    ! grep -q -e 'ERROR: AddressSanitizer' -e 'runtime error:' "$dir/$name.err" ||
        fail "$name: sanitizer report: $(cat "$dir/$name.err")"
    cmp -s "$dir/cold.txt" "$dir/$name.txt" ||
        fail "$name: images differ: $(diff "$dir/cold.txt" "$dir/$name.txt")"
    [ -f "$dir/stats.json" ] || fail "$name: no PSDB_LAYER_STATS file"
}
# expect NAME DELIVERY HITS MISSES REJECTED [stderr pattern]
expect() {
    local got
    got="$(delivery) $(field psdb_hits) $(field psdb_misses) $(field psdb_rejected)"
    [ "$got" = "$2 $3 $4 $5" ] ||
        fail "$1: stats '$got', want '$2 $3 $4 $5': $(cat "$dir/stats.json"); $(cat "$dir/$1.err")"
    [ -z "${6:-}" ] || grep -q -e "$6" "$dir/$1.err" ||
        fail "$1: stderr lacks '$6': $(cat "$dir/$1.err")"
}

sodb="$dir/app.sodb"
MESA_SHADER_CACHE_DISABLE=true VK_LAYER_PATH="$PSDB_LAYER_DIR" \
    VK_INSTANCE_LAYERS=VK_LAYER_PSDB_delivery PSDB_CAPTURE="$sodb" "$VKDEMO" >/dev/null \
    2>"$dir/capture.err" || fail "capture run failed: $(cat "$dir/capture.err")"
"$PSDB" compile "$sodb" --backend vulkan -o "$dir/app.psdb" >/dev/null 2>"$dir/compile.err" ||
    fail "compile: $(cat "$dir/compile.err")"
mesa=0
grep -q 'mesa disk cache)$' "$dir/compile.err" && mesa=1
PSDB_VULKAN_STRATEGY=pipeline-cache "$PSDB" compile "$sodb" --backend vulkan -o "$dir/cache.psdb" \
    >/dev/null 2>"$dir/compile2.err" || fail "compile, pipeline-cache: $(cat "$dir/compile2.err")"

# 1. Delivered as it should be, with what the driver said about it: Mesa's cache gives no creation
# feedback (driver_hits null); with VkPipelineCache data the driver's own count is reported, and
# on a driver that keeps no code in its pipeline cache (lavapipe) it shows the hits it ignored.
run good PSDB_DELIVERY="$dir/app.psdb"
expect good on "$npipe" 0 0
[ "$mesa" = 0 ] || [ "$(field driver_hits)" = null ] || fail "good: $(cat "$dir/stats.json")"
run cache PSDB_DELIVERY="$dir/cache.psdb" PSDB_VULKAN_STRATEGY=pipeline-cache
expect cache on "$npipe" 0 0
dh=$(field driver_hits)
[ "$dh" != null ] && [ "$dh" -le "$npipe" ] || fail "cache: driver_hits: $(cat "$dir/stats.json")"
grep -q "driver hits $dh" "$dir/cache.err" || fail "cache: no driver hits on stderr: $(cat "$dir/cache.err")"

# 2. Mesa's cache cannot be set up: nothing was delivered, and the stats say so.
if [ "$mesa" = 1 ]; then
    : >"$dir/a-file"
    run cachefile PSDB_DELIVERY="$dir/app.psdb" XDG_CACHE_HOME="$dir/a-file"
    expect cachefile off 0 0 0 'not used'
    run cacheproc PSDB_DELIVERY="$dir/app.psdb" MESA_SHADER_CACHE_DIR=/proc/self/psdb-mesa-cache
    expect cacheproc off 0 0 0 'not used'
    run disabled PSDB_DELIVERY="$dir/app.psdb" MESA_SHADER_CACHE_DISABLE=true
    expect disabled off 0 0 0 'MESA_SHADER_CACHE_DISABLE'
fi

# 3. Not a file: refused at once, never waited on.
mkfifo "$dir/fifo.psdb"
run fifo PSDB_DELIVERY="$dir/fifo.psdb"
expect fifo refused 0 "$npipe" "$npipe" 'not a regular file'
run devzero PSDB_DELIVERY=/dev/zero
expect devzero refused 0 "$npipe" "$npipe" 'not a regular file'
run directory PSDB_DELIVERY="$dir"
expect directory refused 0 "$npipe" "$npipe" 'not a regular file'

# 4. Damage in a PSDB named directly: its own content digest and the blob digests catch it.
cp "$dir/app.psdb" "$dir/flipped.psdb"
size=$(stat -c %s "$dir/flipped.psdb")
head -c 4096 /dev/urandom | dd of="$dir/flipped.psdb" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
run flipped PSDB_DELIVERY="$dir/flipped.psdb"
[ "$(field psdb_hits)" = 0 ] || [ "$mesa" = 0 ] || fail "flipped: $(cat "$dir/stats.json")"

# 5. A Mesa cache entry of garbage, under digests that all agree (a PSDB built so): the structure
# check refuses the cache before Mesa reads it.
if [ "$mesa" = 1 ] && command -v python3 >/dev/null; then
    python3 - "$dir/app.psdb" "$dir/badidx.psdb" <<'EOF' || fail "crafting badidx.psdb"
import hashlib, shutil, sqlite3, struct, sys
src, dst = sys.argv[1], sys.argv[2]
shutil.copy(src, dst)
db = sqlite3.connect(dst)
# One of Mesa's cache entries (a 33-byte key, 'm' first): its bytes after the 40-digit hash become
# garbage of the same length.
(bid,) = db.execute("SELECT blob_id FROM value_entries WHERE length(key) = 33 AND "
                    "substr(key, 1, 1) = X'6d' AND type = 0 ORDER BY key LIMIT 1").fetchone()
(old,) = db.execute("SELECT data FROM blobs WHERE id = ?", (bid,)).fetchone()
new = old[:40] + bytes((i * 151 + 7) % 256 for i in range(len(old) - 40))
db.execute("UPDATE blobs SET data = ?, sha256 = ? WHERE id = ?", (new, hashlib.sha256(new).digest(), bid))
# The header's content digest, recomputed as schema/PSDB.md defines it.
def s(v):
    return struct.pack("<I", 0xFFFFFFFF) if v is None else struct.pack("<I", len(v.encode())) + v.encode()
def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)
h = db.execute("SELECT exe_filename, app_name, app_version, engine_name, engine_version, app_id, "
               "family, abi_version, compiler_version, profile_version FROM header").fetchone()
d = hashlib.sha256()
d.update(struct.pack("<II", 0x50534442, 1) + s(h[0]) + s(h[1]) + u64(h[2]) + s(h[3]) + u64(h[4]) +
         h[5] + s(h[6]) + u64(h[7]) + u64(h[8]) + u64(h[9]))
for k, t, sha in db.execute("SELECT v.key, v.type, b.sha256 FROM value_entries v JOIN blobs b "
                            "ON b.id = v.blob_id ORDER BY v.key, v.type"):
    d.update(b"\x01" + struct.pack("<I", len(k)) + k + struct.pack("<I", t) + sha)
for k, ver in db.execute("SELECT key, version FROM value_groups ORDER BY key").fetchall():
    m = [r[0] for r in db.execute("SELECT value_key FROM group_members WHERE group_key = ? "
                                  "ORDER BY idx", (k,))]
    d.update(b"\x02" + struct.pack("<I", len(k)) + k + u64(ver) + struct.pack("<I", len(m)))
    for vk in m:
        d.update(struct.pack("<I", len(vk)) + vk)
d.update(b"\x00")
db.execute("UPDATE header SET content_digest = ?", (d.digest(),))
db.commit()
db.execute("VACUUM")
db.close()
EOF
    "$PSDB" verify "$dir/badidx.psdb" >/dev/null 2>&1 || fail "the crafted PSDB does not verify"
    run badidx PSDB_DELIVERY="$dir/badidx.psdb"
    expect badidx refused 0 "$npipe" "$npipe" 'malformed'
fi

# 6. Installed through the registry: the file must be the one the install verified.
if [ -n "${PSDBD:-}" ] && [ -x "${PSDBD:-}" ]; then
    data="$dir/data"
    vk_start_psdbd "$data"
    pids+=("${vk_pids[@]}")
    "$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 1 \
        "$dir/app.psdb" >"$dir/publish.out" 2>&1 || fail "publish: $(cat "$dir/publish.out")"
    "$PSDB" install --server "$url" --exe-path "$(readlink -f "$VKDEMO")" --app psdb-vkdemo \
        --app-version 1.2.3.0 --target auto --trust "$dir/key.pub" >"$dir/install.out" 2>&1 ||
        fail "install: $(cat "$dir/install.out")"
    stored=$(ls "$PSDB_REGISTRY_DIR"/psdbs/*.psdb)
    [ -f "$stored" ] || fail "no installed PSDB in the store: $stored"
    cp "$stored" "$dir/stored.bak"
    restore() { rm -rf "$stored"; cp "$dir/stored.bak" "$stored"; }
    run registry
    expect registry on "$npipe" 0 0

    # 4 KB flipped in the installed file: not the file the install verified.
    size=$(stat -c %s "$stored")
    head -c 4096 /dev/urandom | dd of="$stored" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
    run reg_flipped
    expect reg_flipped refused 0 "$npipe" "$npipe" 'SHA-256'
    # Another valid PSDB for this device renamed over it.
    restore
    cp "$dir/cache.psdb" "$stored.new" && mv "$stored.new" "$stored"
    run reg_replaced
    expect reg_replaced refused 0 "$npipe" "$npipe" 'SHA-256'
    # A FIFO, then a directory, where the file was.
    rm -f "$stored" && mkfifo "$stored"
    run reg_fifo
    expect reg_fifo refused 0 "$npipe" "$npipe" 'not a regular file'
    rm -f "$stored" && mkdir "$stored"
    run reg_dir
    expect reg_dir refused 0 "$npipe" "$npipe" 'not a regular file'
    # The row pointed at another file (a copy of the very same bytes): nothing vouches for it.
    restore
    cp "$stored" "$dir/elsewhere.psdb"
    sqlite3 "$PSDB_REGISTRY_DIR/registry.db" \
        "UPDATE component_psdbs SET psdb_path = '$dir/elsewhere.psdb'" ||
        fail "cannot edit the registry"
    run reg_elsewhere
    expect reg_elsewhere refused 0 "$npipe" "$npipe" 'records no digest'
    sqlite3 "$PSDB_REGISTRY_DIR/registry.db" "UPDATE component_psdbs SET psdb_path = '$stored'"
    run reg_again
    expect reg_again on "$npipe" 0 0
fi
echo "delivery_trust_test: ok ($npipe pipelines)"
