#!/usr/bin/env bash
# compile_test.sh - psdb synth + psdb compile end to end: deterministic SODB and PSDB, the target
# changes the bytes, bad input fails with one line. Env: PSDB = the psdb tool.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "compile_test: $*" >&2; exit 1; }

# synth: same arguments -> byte-identical file; another seed -> another file.
"$PSDB" synth --app Game --app-version 1.2.0.0 --pipelines 300 --seed 7 --variants 4 -o "$dir/a.sodb"
"$PSDB" synth --app Game --app-version 1.2.0.0 --pipelines 300 --seed 7 --variants 4 -o "$dir/b.sodb"
cmp -s "$dir/a.sodb" "$dir/b.sodb" || fail "synth is not deterministic"
"$PSDB" synth --app Game --app-version 1.2.0.0 --pipelines 300 --seed 8 -o "$dir/c.sodb"
cmp -s "$dir/a.sodb" "$dir/c.sodb" && fail "another seed gave the same SODB"
"$PSDB" synth --help | grep -q -- '--pipelines' || fail "synth --help"

# compile twice -> identical files and content digests.
"$PSDB" compile "$dir/a.sodb" --family contoso-gfx9 --abi 0x10 --compiler-version 1.0.0.0 \
    --profile-version 2.0.0.0 --cost-ns-per-kib 0 -o "$dir/1.psdb" >"$dir/out1"
"$PSDB" compile "$dir/a.sodb" --family contoso-gfx9 --abi 16 --compiler-version 1.0.0.0 \
    --profile-version 2.0.0.0 --cost-ns-per-kib 0 -o "$dir/2.psdb" --json >"$dir/out2.json"
cmp -s "$dir/1.psdb" "$dir/2.psdb" || fail "compile is not deterministic"
grep -q '^300 pipelines' "$dir/out1" || fail "summary line: $(cat "$dir/out1")"
grep -q '"pipelines": 300' "$dir/out2.json" || fail "json summary: $(cat "$dir/out2.json")"
"$PSDB" compile "$dir/a.sodb" --family contoso-gfx9 --abi 16 --compiler-version 1.0.0.0 \
    --profile-version 2.0.0.0 --cost-ns-per-kib 0 -o "$dir/1b.psdb" --json >"$dir/out1.json"
digest() { grep -o '"content_digest": *"[0-9a-f]\{64\}"' "$1" | grep -o '[0-9a-f]\{64\}'; }
c1=$(digest "$dir/out1.json")
c2=$(digest "$dir/out2.json")
[ -n "$c1" ] && [ "$c1" = "$c2" ] || fail "compile digests differ: '$c1' / '$c2'"
# psdb inspect reports the same content digest for both files, and psdb verify passes them.
"$PSDB" inspect "$dir/1.psdb" --json >"$dir/i1.json"
"$PSDB" inspect "$dir/2.psdb" --json >"$dir/i2.json"
i1=$(digest "$dir/i1.json")
i2=$(digest "$dir/i2.json")
[ -n "$i1" ] && [ "$i1" = "$i2" ] && [ "$i1" = "$c1" ] ||
    fail "inspect digests differ: '$i1' / '$i2' / compile '$c1'"
"$PSDB" verify "$dir/1.psdb" >/dev/null || fail "verify rejected a compiled PSDB"

# Another family -> another file.
"$PSDB" compile "$dir/a.sodb" --family contoso-gfx10 --abi 16 --cost-ns-per-kib 0 \
    -o "$dir/3.psdb" >/dev/null
cmp -s "$dir/1.psdb" "$dir/3.psdb" && fail "another family gave the same PSDB"

# State objects: the corpus appends raytracing pipelines without changing the pipelines before
# them; compiled, every one of them (and every pipeline) is a PSDB hit on replay.
"$PSDB" synth --app Game --app-version 1.0.0.0 --pipelines 300 --seed 9 --variants 6 \
    --state-objects 25 -o "$dir/rt.sodb"
"$PSDB" inspect "$dir/rt.sodb" | grep -q ', 25 state objects' || fail "synth wrote no state objects"
"$PSDB" compile "$dir/rt.sodb" --family contoso-gfx9 --abi 16 --cost-ns-per-kib 0 \
    -o "$dir/rt.psdb" >/dev/null
"$PSDB" replay "$dir/rt.sodb" --family contoso-gfx9 --abi-min 1 --abi-max 16 --psdb "$dir/rt.psdb" \
    --cost-ns-per-kib 1 --json >"$dir/rt.json" || fail "replay failed: $(cat "$dir/rt.json")"
grep -q '"state_objects":{"created":25,"psdb_missed":0' "$dir/rt.json" ||
    fail "state objects not all PSDB hits: $(cat "$dir/rt.json")"
grep -q '"pipeline_states":{"created":300,"psdb_missed":0' "$dir/rt.json" ||
    fail "pipelines not all PSDB hits: $(cat "$dir/rt.json")"

# Bad SODB -> non-zero exit, exactly one line on stderr, no output file.
head -c 5000 /dev/urandom >"$dir/bad.sodb"
if "$PSDB" compile "$dir/bad.sodb" --family f --abi 1 -o "$dir/bad.psdb" 2>"$dir/err"; then
    fail "a bad SODB compiled"
fi
[ "$(wc -l <"$dir/err")" -eq 1 ] || fail "want one line on stderr, got: $(cat "$dir/err")"
[ ! -e "$dir/bad.psdb" ] || fail "a failed compile left an output file"
if "$PSDB" compile "$dir/missing.sodb" --family f --abi 1 -o "$dir/x.psdb" 2>"$dir/err"; then
    fail "a missing SODB compiled"
fi
[ "$(wc -l <"$dir/err")" -eq 1 ] || fail "want one line on stderr, got: $(cat "$dir/err")"
if "$PSDB" compile "$dir/a.sodb" --family f --abi 0 -o "$dir/x.psdb" 2>"$dir/err"; then
    fail "ABI 0 accepted"
fi
[ "$(wc -l <"$dir/err")" -eq 1 ] || fail "want one line on stderr, got: $(cat "$dir/err")"
if "$PSDB" synth --app Game --app-version 1 --pipelines 0 -o "$dir/z.sodb" 2>"$dir/err"; then
    fail "0 pipelines accepted"
fi
[ "$(wc -l <"$dir/err")" -eq 1 ] || fail "want one line on stderr, got: $(cat "$dir/err")"
# --base (the reference backend): a 5% patch compiled against version N takes every unchanged
# unit from it and compiles only the rest; the result is the full compile's content, byte for
# byte. A base of another target, another application or a damaged file serves nothing.
"$PSDB" synth --app Game --app-version 1.2.0.0 --pipelines 300 --seed 7 --variants 4 \
    --changed 0.05 -o "$dir/p.sodb" >/dev/null
compile_p() { "$PSDB" compile "$dir/p.sodb" --family contoso-gfx9 --abi 16 --compiler-version 1.0.0.0 \
    --profile-version 2.0.0.0 --cost-ns-per-kib 0 --json "$@"; }
num() { grep -o "\"$2\": *[0-9a-z]*" "$1" | head -n 1 | sed 's/.*: *//'; }
compile_p -o "$dir/pfull.psdb" >"$dir/pfull.json"
compile_p --base "$dir/1.psdb" -o "$dir/pinc.psdb" >"$dir/pinc.json"
[ "$(digest "$dir/pinc.json")" = "$(digest "$dir/pfull.json")" ] ||
    fail "--base changed the content: $(cat "$dir/pinc.json")"
[ "$(num "$dir/pinc.json" base_used)" = true ] || fail "base not used: $(cat "$dir/pinc.json")"
reused=$(num "$dir/pinc.json" reused)
compiled=$(num "$dir/pinc.json" compiled)
total=$(num "$dir/pfull.json" compiled)
[ "$((reused + compiled))" -eq "$total" ] || fail "reused $reused + compiled $compiled != $total"
[ "$compiled" -gt 0 ] && [ "$((compiled * 100))" -le "$((total * 15))" ] ||
    fail "a 5% patch compiled $compiled of $total units with --base"
for other in "--family contoso-gfx10 --abi 16" "--family contoso-gfx9 --abi 17"; do
    # shellcheck disable=SC2086
    "$PSDB" compile "$dir/p.sodb" $other --compiler-version 1.0.0.0 --profile-version 2.0.0.0 \
        --cost-ns-per-kib 0 --base "$dir/1.psdb" -o "$dir/o.psdb" >"$dir/o.txt"
    grep -q '^base .* does not serve this target' "$dir/o.txt" || fail "$other: $(cat "$dir/o.txt")"
done
"$PSDB" synth --app Other --app-version 1.2.0.0 --pipelines 300 --seed 7 --variants 4 \
    --changed 0.05 -o "$dir/other.sodb" >/dev/null
"$PSDB" compile "$dir/other.sodb" --family contoso-gfx9 --abi 16 --compiler-version 1.0.0.0 \
    --profile-version 2.0.0.0 --cost-ns-per-kib 0 --base "$dir/1.psdb" --json -o "$dir/o.psdb" \
    >"$dir/o.json"
[ "$(num "$dir/o.json" reused)" = 0 ] || fail "another application's base served"
head -c 4096 "$dir/1.psdb" >"$dir/trunc.psdb"
compile_p --base "$dir/trunc.psdb" -o "$dir/t.psdb" >"$dir/t.json"
[ "$(num "$dir/t.json" base_used)" = false ] && [ "$(digest "$dir/t.json")" = "$(digest "$dir/pfull.json")" ] ||
    fail "a truncated base: $(cat "$dir/t.json")"
echo "compile_test: ok"
