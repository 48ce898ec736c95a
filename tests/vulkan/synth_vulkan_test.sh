#!/usr/bin/env bash
# synth_vulkan_test.sh - psdb synth --api vulkan: N distinct Vulkan entries of both kinds, SPIR-V
# from GLSL, byte-identical for the same arguments, other bytes for another seed; --api d3d12 is
# the default corpus; bad arguments fail with one line. Env: PSDB = the psdb tool.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "synth_vulkan_test: $*" >&2; exit 1; }
synth() { "$PSDB" synth --api vulkan --app VkGame --app-version 1.2.0.0 "$@"; }

synth --pipelines 1000 --seed 7 -o "$dir/a.sodb" >"$dir/out" || fail "synth failed"
grep -q '^1000 Vulkan pipelines (200 compute, 800 graphics) from [0-9]* SPIR-V modules' "$dir/out" ||
    fail "summary: $(cat "$dir/out")"
synth --pipelines 1000 --seed 7 -o "$dir/b.sodb" >/dev/null
cmp -s "$dir/a.sodb" "$dir/b.sodb" || fail "not deterministic"
synth --pipelines 1000 --seed 8 -o "$dir/c.sodb" >/dev/null
cmp -s "$dir/a.sodb" "$dir/c.sodb" && fail "another seed gave the same SODB"

"$PSDB" inspect --json "$dir/a.sodb" >"$dir/inspect.json"
for kv in '"vulkan_compute": 200' '"vulkan_graphics": 800' '"compute": 0' '"graphics": 0' \
    '"name": "VkGame"' '"version": "1.2.0.0"'; do
    grep -q "$kv" "$dir/inspect.json" || fail "inspect lacks $kv: $(cat "$dir/inspect.json")"
done
# Every entry carries the Vulkan header and SPIR-V (magic word 0x07230203), and is distinct.
bad=$(sqlite3 "$dir/a.sodb" "SELECT count(*) FROM entries WHERE NOT (
    (kind = 4 AND hex(substr(description, 1, 12)) = '564B43500100000000000000') OR
    (kind = 5 AND hex(substr(description, 1, 12)) = '564B47500100000000000000'))
    OR instr(description, X'03022307') = 0")
[ "$bad" = 0 ] || fail "$bad entries without a Vulkan header or SPIR-V"
[ "$(sqlite3 "$dir/a.sodb" 'SELECT count(DISTINCT object_key) FROM entries')" = 1000 ] ||
    fail "entries are not distinct"

# The D3D12 corpus is unchanged with --api d3d12.
"$PSDB" synth --app G --app-version 1.0.0.0 --pipelines 50 -o "$dir/d1.sodb" >/dev/null
"$PSDB" synth --api d3d12 --app G --app-version 1.0.0.0 --pipelines 50 -o "$dir/d2.sodb" >/dev/null
cmp -s "$dir/d1.sodb" "$dir/d2.sodb" || fail "--api d3d12 differs from the default"

# Bad arguments: one line naming the option, no file left behind.
if synth --pipelines 100000 -o "$dir/x.sodb" 2>"$dir/err"; then fail "accepted 100000"; fi
grep -q '^psdb synth: --pipelines: at most [0-9]* distinct Vulkan pipelines, not 100000$' "$dir/err" ||
    fail "too many: $(cat "$dir/err")"
if "$PSDB" synth --api metal --app V --app-version 1 --pipelines 1 -o "$dir/x.sodb" 2>"$dir/err"; then
    fail "accepted --api metal"
fi
grep -q '^psdb synth: --api: not d3d12 or vulkan: metal$' "$dir/err" || fail "api: $(cat "$dir/err")"
if synth --pipelines 0 -o "$dir/x.sodb" 2>"$dir/err"; then fail "accepted 0 pipelines"; fi
[ ! -e "$dir/x.sodb" ] && [ ! -e "$dir/x.sodb.tmp" ] || fail "a failed synth left a file"
synth --help | grep -q -- '--pipelines' || fail "synth --api vulkan --help"
echo "synth_vulkan_test: ok"
