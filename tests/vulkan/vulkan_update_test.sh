#!/usr/bin/env bash
# vulkan_update_test.sh - a Vulkan game's patch on the machine's device (lavapipe in CI): version N
# of a synthetic corpus compiled, a 5% patch compiled with --base: every unchanged pipeline taken
# from version N byte for byte, only the touched ones compiled, the same values as a full compile;
# the VkPipelineCache way (cache parts) alike; a base of another target serves nothing; with
# psdbd, the patch installs as a delta update that downloads at most 10% of the file, and replay
# finds every pipeline in it. Env: PSDB, PSDBD (optional), PSDB_SANITIZE. Exit 77 without a device.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
name=vulkan_update_test
dir=$(mktemp -d)
. "$(dirname "$0")/lib.sh"
trap vk_cleanup EXIT
vk_use_lavapipe
vk_fresh_caches
n=40
synth() { "$PSDB" synth --api vulkan --app VkPatch --app-version 1.0.0.0 --pipelines $n "$@"; }
synth -o "$dir/v1.sodb" >/dev/null
synth --changed 0.05 -o "$dir/p.sodb" >/dev/null
num() { tr -d ' \n' <"$1" | grep -o "\"$2\":[0-9a-z.]*" | head -n 1 | cut -d: -f2; }
compile() { # SODB OUT [ARGS]
    local sodb=$1 out=$2
    shift 2
    "$PSDB" compile "$sodb" --backend vulkan --json -o "$out" "$@" >"$out.json" 2>"$out.err"
}
rc=0
compile "$dir/v1.sodb" "$dir/v1.psdb" || rc=$?
if [ "$rc" != 0 ] && grep -q -i 'no vulkan device\|vkCreateInstance\|device 0' "$dir/v1.psdb.err"; then
    echo "$name: skipped: $(cat "$dir/v1.psdb.err")"
    exit 77
fi
[ "$rc" = 0 ] || fail "compile v1: $(cat "$dir/v1.psdb.err")"
compile "$dir/p.sodb" "$dir/full.psdb" || fail "full compile: $(cat "$dir/full.psdb.err")"
compile "$dir/p.sodb" "$dir/p.psdb" --base "$dir/v1.psdb" || fail "--base: $(cat "$dir/p.psdb.err")"
changed=$(comm -13 <(sqlite3 "$dir/v1.sodb" 'SELECT lower(hex(object_key)) FROM entries' | sort) \
    <(sqlite3 "$dir/p.sodb" 'SELECT lower(hex(object_key)) FROM entries' | sort) | wc -l)
[ "$changed" -gt 0 ] || fail "the patch changed nothing"
[ "$(num "$dir/p.psdb.json" compiled)" = "$changed" ] &&
    [ "$(num "$dir/p.psdb.json" reused)" = "$((n - changed))" ] ||
    fail "--base compiled/reused, $changed changed: $(cat "$dir/p.psdb.json")"
# Byte for byte: every value of the incremental PSDB is the base's or the full compile's.
values() { sqlite3 "$1" "SELECT lower(hex(e.key)) || ' ' || e.type || ' ' || lower(hex(b.sha256))
    FROM value_entries e JOIN blobs b ON b.id = e.blob_id ORDER BY 1"; }
values "$dir/v1.psdb" >"$dir/v1.values"
values "$dir/p.psdb" >"$dir/p.values"
values "$dir/full.psdb" >"$dir/full.values"
cut -d' ' -f1,2 "$dir/p.values" >"$dir/p.keys"
cut -d' ' -f1,2 "$dir/full.values" >"$dir/full.keys"
cut -d' ' -f1,2 "$dir/v1.values" >"$dir/v1.keys"
# Every value a full compile makes is there; what else is there is the base's (a Mesa entry of
# the base that its reused pipelines name, which this compile did not have to make).
[ -z "$(comm -13 "$dir/p.keys" "$dir/full.keys")" ] || fail "--base lacks values a full compile has"
[ -z "$(comm -23 "$dir/p.keys" "$dir/full.keys" | comm -23 - "$dir/v1.keys")" ] ||
    fail "--base holds values neither the base nor a full compile has"
kept=$(comm -12 "$dir/p.values" "$dir/v1.values" | wc -l)
[ "$kept" -gt 0 ] || fail "no value was taken from the base"
"$PSDB" verify "$dir/p.psdb" >/dev/null || fail "the incremental PSDB does not verify"

# The VkPipelineCache way: cache parts whose pipelines are all unchanged are taken whole.
PSDB_VULKAN_STRATEGY=pipeline-cache compile "$dir/v1.sodb" "$dir/c1.psdb" ||
    fail "cache compile: $(cat "$dir/c1.psdb.err")"
PSDB_VULKAN_STRATEGY=pipeline-cache compile "$dir/p.sodb" "$dir/c2.psdb" --base "$dir/c1.psdb" ||
    fail "cache --base: $(cat "$dir/c2.psdb.err")"
[ "$(num "$dir/c2.psdb.json" compiled)" -lt "$n" ] && [ "$(num "$dir/c2.psdb.json" reused)" -gt 0 ] ||
    fail "cache parts reused nothing: $(cat "$dir/c2.psdb.json")"

# A base of another target (a reference-backend PSDB) serves nothing, and says so.
"$PSDB" synth --app VkPatch --app-version 1.0.0.0 --pipelines 10 -o "$dir/r.sodb" >/dev/null
"$PSDB" compile "$dir/r.sodb" --family contoso-gfx9 --abi 3 -o "$dir/r.psdb" >/dev/null
compile "$dir/p.sodb" "$dir/o.psdb" --base "$dir/r.psdb" || fail "foreign base: $(cat "$dir/o.psdb.err")"
[ "$(num "$dir/o.psdb.json" reused)" = 0 ] && grep -q 'does not serve this device' "$dir/o.psdb.err" ||
    fail "a foreign base served: $(cat "$dir/o.psdb.json" "$dir/o.psdb.err")"

# Installed as a delta update, then replayed from the registry: every pipeline a hit.
if [ -n "${PSDBD:-}" ] && [ -x "${PSDBD:-}" ]; then
    vk_start_psdbd "$dir/data"
    install() {
        "$PSDB" install --server "$url" --exe-path /games/vkpatch/game --app VkPatch \
            --app-version 1.0.0.0 --target auto --trust "$dir/key.pub" --json >"$1" 2>&1 ||
            fail "install: $(cat "$1")"
    }
    "$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 1 \
        "$dir/v1.psdb" >/dev/null || fail "publish v1"
    install "$dir/i1.json"
    "$PSDB" publish --server "$url" --token "$(cat "$dir/token")" --key "$dir/key" --serial 2 \
        "$dir/p.psdb" >/dev/null || fail "publish the patch"
    install "$dir/i2.json"
    grep -q '"download": *"delta"' "$dir/i2.json" || fail "not a delta update: $(cat "$dir/i2.json")"
    got=$(num "$dir/i2.json" bytes_downloaded)
    size=$(stat -c %s "$dir/p.psdb")
    [ "$((got * 10))" -le "$size" ] || fail "the delta downloaded $got of $size bytes"
    "$PSDB" replay --backend vulkan "$dir/p.sodb" --exe-path /games/vkpatch/game \
        --min-hit-rate 1 --json >"$dir/replay.json" 2>"$dir/replay.err" ||
        fail "replay of the installed patch: $(cat "$dir/replay.err")"
fi
echo "$name: ok ($changed of $n pipelines changed)"
