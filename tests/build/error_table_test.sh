#!/usr/bin/env bash
# error_table_test.sh - every public function that returns psdb_hr has at least one row in the
# table of tests/unit/error_last_test.c (a failing call whose psdb_error_last() is checked), so a
# new public function without coverage fails here. The few functions named in `gaps` are known not
# to record a message on every failing path yet; each must be absent from the table (remove it
# from gaps when its row is added). Usage: error_table_test.sh [source root]
set -uo pipefail
src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
table=$src/tests/unit/error_last_test.c
fail=0

# None left: every public function returning psdb_hr has its row. A function added here must
# be one that cannot record its message yet, said why in this comment.
gaps=""

# Public functions returning psdb_hr: the identifier before the first "(" of each PSDB_API
# declaration (which may span lines: lines are joined first; preprocessor lines left out).
declared=$(grep -hv '^[[:space:]]*#' "$src"/client/include/psdb/*.h | tr '\n' ' ' |
    grep -oE 'PSDB_API[[:space:]]+psdb_hr[[:space:]]+[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(' |
    sed -E 's/.*[[:space:]]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\($/\1/' | sort -u)
if [ -z "$declared" ]; then
    echo "error_table_test: no public psdb_hr functions found under $src/client/include/psdb" >&2
    exit 1
fi
n=0
for fn in $declared; do
    n=$((n + 1))
    has_row=0
    grep -q "{\"$fn\"," "$table" && has_row=1
    if [[ " $gaps " == *" $fn "* ]]; then
        if [ $has_row -eq 1 ]; then
            echo "error_table_test: $fn has a row now: remove it from gaps" >&2
            fail=1
        fi
    elif [ $has_row -eq 0 ]; then
        echo "error_table_test: $fn returns psdb_hr but has no row in ${table#$src/}" >&2
        fail=1
    fi
done
for fn in $gaps; do
    grep -qx "$fn" <<<"$declared" || {
        echo "error_table_test: gap $fn is not a public function" >&2
        fail=1
    }
done
[ $fail -eq 0 ] && echo "error_table_test: $n public functions returning psdb_hr, all covered or named gaps"
exit $fail
