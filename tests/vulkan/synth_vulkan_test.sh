#!/usr/bin/env bash
# synth_vulkan_test.sh - psdb synth --api vulkan: N distinct Vulkan entries of both kinds, SPIR-V
# from GLSL, byte-identical for the same arguments, other bytes for another seed; --api d3d12 is
# the default corpus; bad arguments fail with one line. Patches (--changed F [--patch K]):
# deterministic, the fraction asked touched, edits in place and new pipelines after the corpus's,
# every other entry the corpus's bytes in its order. Env: PSDB = the psdb tool.
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

# Patches (--changed F [--patch K]): version N+1 of the corpus.
keys() { sqlite3 "$1" 'SELECT lower(hex(object_key)) FROM entries ORDER BY seq'; }
kinds() { sqlite3 "$1" 'SELECT kind || ":" || count(*) FROM entries GROUP BY kind ORDER BY kind'; }
only_in() { grep -vxF -f "$2" "$1" || true; } # lines of file 1 that file 2 lacks, in order
# check_patch CORPUS PATCH: the patch's entries are distinct and as many as the corpus's, of each
# kind as many; every corpus entry it keeps has the corpus's bytes and order; as many are new as
# are gone. Leaves the count of new entries in $added, and of those placed before the last kept
# entry (edits in place) in $edits.
check_patch() {
    keys "$1" >"$dir/kc"
    keys "$2" >"$dir/kp"
    [ "$(sort -u "$dir/kp" | wc -l)" = "$(wc -l <"$dir/kc")" ] || fail "$2: not N distinct entries"
    [ "$(kinds "$1")" = "$(kinds "$2")" ] || fail "$2: kinds $(kinds "$2"), corpus $(kinds "$1")"
    only_in "$dir/kp" "$dir/kc" >"$dir/added"
    only_in "$dir/kc" "$dir/kp" >"$dir/removed"
    added=$(wc -l <"$dir/added")
    [ "$added" = "$(wc -l <"$dir/removed")" ] || fail "$2: $added new, $(wc -l <"$dir/removed") gone"
    grep -xF -f "$dir/kc" "$dir/kp" >"$dir/kept_p" || true
    grep -xF -f "$dir/kp" "$dir/kc" >"$dir/kept_c" || true
    cmp -s "$dir/kept_p" "$dir/kept_c" || fail "$2: the kept entries are not in the corpus's order"
    changed=$(sqlite3 "$2" "ATTACH '$1' AS c; SELECT count(*) FROM entries p JOIN c.entries q
        ON p.object_key = q.object_key WHERE p.description != q.description OR p.kind != q.kind
        OR p.version != q.version")
    [ "$changed" = 0 ] || fail "$2: $changed kept entries differ from the corpus's bytes"
    local last
    last=$({ grep -nxF -f "$dir/kc" "$dir/kp" || true; } | tail -1 | cut -d: -f1)
    edits=$(head -n "${last:-0}" "$dir/kp" | grep -cvxF -f "$dir/kc" || true)
}

# test_synth_vulkan__patch_is_deterministic_and_keeps_untouched_entries
synth --pipelines 2000 --seed 7 -o "$dir/n.sodb" >"$dir/out_n"
synth --pipelines 2000 --seed 7 --changed 0.05 -o "$dir/p1.sodb" >"$dir/out" || fail "patch failed"
grep -q '^2000 Vulkan pipelines (400 compute, 1600 graphics) from [0-9]* SPIR-V modules -> .* (patch 1: [0-9]* edited, [0-9]* removed and replaced)$' \
    "$dir/out" || fail "patch summary: $(cat "$dir/out")"
synth --pipelines 2000 --seed 7 --changed 5% --patch 1 -o "$dir/p1b.sodb" >/dev/null
cmp -s "$dir/p1.sodb" "$dir/p1b.sodb" || fail "the same patch differs between two runs"
check_patch "$dir/n.sodb" "$dir/p1.sodb"
cp "$dir/added" "$dir/added1"
synth --pipelines 2000 --seed 7 --changed 0.05 --patch 2 -o "$dir/p2.sodb" >/dev/null
check_patch "$dir/n.sodb" "$dir/p2.sodb"
cmp -s "$dir/added1" "$dir/added" && fail "patches 1 and 2 touch the same pipelines"
# Touching nothing is the corpus, byte for byte; the corpus is the same whatever patches exist.
synth --pipelines 2000 --seed 7 --changed 0 -o "$dir/p0.sodb" >/dev/null
cmp -s "$dir/n.sodb" "$dir/p0.sodb" || fail "a patch touching nothing is not the corpus"
synth --pipelines 2000 --seed 7 -o "$dir/n2.sodb" >/dev/null
cmp -s "$dir/n.sodb" "$dir/n2.sodb" || fail "the corpus changed"

# test_synth_vulkan__patch_changes_the_fraction_asked_with_edits_and_new_pipelines: each pipeline is
# touched with probability F, so 2000 x F are new (a binomial count: within 30%, over three
# standard deviations at 5%); about half are edits in place (a changed constant in the GLSL: new
# SPIR-V), half new pipelines after the corpus's.
for f in 5 30; do
    synth --pipelines 2000 --seed 7 --changed "$f%" -o "$dir/p$f.sodb" >"$dir/out"
    check_patch "$dir/n.sodb" "$dir/p$f.sodb"
    want=$((2000 * f / 100))
    [ "$added" -gt $((want * 7 / 10)) ] && [ "$added" -lt $((want * 13 / 10)) ] ||
        fail "$f%: $added of 2000 new, want about $want"
    appended=$((added - edits))
    [ "$edits" -gt $((added / 4)) ] && [ "$appended" -gt $((added / 4)) ] ||
        fail "$f%: $edits edited in place, $appended appended"
    grep -q "(patch 1: $edits edited, $appended removed and replaced)" "$dir/out" ||
        fail "$f%: summary $(cat "$dir/out"), counted $edits edited, $appended appended"
done
# Edits carry new SPIR-V: the patch compiles shader variants the corpus has not.
mods() { sed -n 's/.* from \([0-9]*\) SPIR-V modules.*/\1/p' "$1"; }
[ "$(mods "$dir/out")" -gt "$(mods "$dir/out_n")" ] || fail "no new SPIR-V: $(cat "$dir/out")"
# Everything touched; then half touched in a corpus that fills the whole space of descriptions
# (its new pipelines need the new shaders).
synth --pipelines 200 --seed 3 -o "$dir/s.sodb" >/dev/null
synth --pipelines 200 --seed 3 --changed 1 -o "$dir/s1.sodb" >/dev/null
check_patch "$dir/s.sodb" "$dir/s1.sodb"
[ "$added" = 200 ] || fail "--changed 1: $added of 200 new"
synth --pipelines 100000 -o "$dir/x.sodb" 2>"$dir/err" || true
max=$(sed -n 's/.*at most \([0-9]*\) distinct.*/\1/p' "$dir/err")
synth --pipelines "$max" --seed 3 -o "$dir/m.sodb" >/dev/null
synth --pipelines "$max" --seed 3 --changed 0.5 --patch 9 -o "$dir/m1.sodb" >/dev/null
check_patch "$dir/m.sodb" "$dir/m1.sodb"
[ $((added - edits)) -gt 0 ] || fail "full space: no new pipelines"

# test_synth_vulkan__patch_arguments_checked: one line each, no file left behind.
bad_args() { # EXPECTED-STDERR ARGS...
    local want=$1
    shift
    if synth --pipelines 10 "$@" -o "$dir/x.sodb" 2>"$dir/err" >/dev/null; then fail "accepted $*"; fi
    [ "$(cat "$dir/err")" = "$want" ] || fail "$*: stderr '$(cat "$dir/err")', want '$want'"
    [ ! -e "$dir/x.sodb" ] && [ ! -e "$dir/x.sodb.tmp" ] || fail "$*: a file was left"
}
bad_args 'psdb synth: --patch needs --changed (the fraction of pipelines it touches)' --patch 2
for f in 1.5 101% -0.1 abc 0.0001 5.5% ''; do
    bad_args "psdb synth: --changed: not a fraction 0-1 or 0%-100%: $f" --changed "$f"
done
bad_args 'psdb synth: --patch: not a number >= 1: 0' --changed 0.1 --patch 0
bad_args 'psdb synth: --patch: not a number >= 1: x' --changed 0.1 --patch x
synth --help | grep -q -- '--changed F' || fail "--help lacks --changed"
echo "synth_vulkan_test: ok"
