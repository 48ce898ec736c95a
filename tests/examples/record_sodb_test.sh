#!/usr/bin/env bash
# record_sodb_test.sh - examples/record_sodb records pipelines through <psdb/sodb.h>, reads them
# back and compiles them; the psdb tool then sees what it recorded (inspect) and a replay of the
# SODB on the compiled PSDB hits every creation, so an engine's own recording is as good as a
# capture. Usage: record_sodb_test.sh RECORD_SODB PSDB_TOOL
set -euo pipefail
example=${1:?record_sodb}
psdb=${2:?psdb tool}
dir=$(mktemp -d "${TMPDIR:-/tmp}/psdb-example-XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() {
    echo "record_sodb_test: $*" >&2
    exit 1
}

"$example" "$dir/game.sodb" "$dir/game.psdb" >"$dir/out" 2>"$dir/err" ||
    fail "record_sodb failed: $(cat "$dir/out" "$dir/err")"
grep -q '^recorded 5 descriptions .*, 5 already there$' "$dir/out" || fail "recording: $(cat "$dir/out")"
grep -q '^read back 5 entries, 0 not as recorded$' "$dir/out" || fail "reading: $(cat "$dir/out")"
grep -q '^compile: 5 of 5 entries$' "$dir/out" || fail "no progress report: $(cat "$dir/out")"
grep -q '^compiled 5 pipelines into .* for example-gfx: 5 groups' "$dir/out" ||
    fail "compiling: $(cat "$dir/out")"
[ ! -s "$dir/err" ] || fail "stderr: $(cat "$dir/err")"

"$psdb" inspect "$dir/game.sodb" >"$dir/inspect"
grep -q 'application: *Record Example 1.0.0.0 (example.exe)' "$dir/inspect" ||
    fail "inspect: $(cat "$dir/inspect")"
grep -q 'entries: *2 compute, 2 graphics, 1 state objects' "$dir/inspect" ||
    fail "inspect: $(cat "$dir/inspect")"
"$psdb" verify "$dir/game.psdb" >/dev/null || fail "psdb verify rejected the compiled PSDB"
"$psdb" replay "$dir/game.sodb" --family example-gfx --abi-min 1 --abi-max 1 \
    --psdb "$dir/game.psdb" --min-hit-rate 1 >"$dir/replay" ||
    fail "replay below a 100% hit rate: $(cat "$dir/replay")"

# A usage error is one line and a non-zero exit.
if "$example" >"$dir/out" 2>"$dir/err"; then fail "no arguments accepted"; fi
[ "$(wc -l <"$dir/err")" -eq 1 ] || fail "usage: want one line, got: $(cat "$dir/err")"
echo "record_sodb_test: recorded, read back, compiled, and replayed at a 100% hit rate"
