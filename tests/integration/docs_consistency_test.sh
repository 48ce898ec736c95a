#!/usr/bin/env bash
# docs_consistency_test.sh - the specification and its conformance map stay in step: every rule id
# of schema/MODEL.md has a row in tests/CONFORMANCE.md and every row names a rule of MODEL.md; each
# test CONFORMANCE.md cites exists; each rule id a test name carries exists; documents cite the
# specification as schema/MODEL.md. Env: PSDB_SOURCE_DIR = the source tree (default: this tree).
set -euo pipefail
src=${PSDB_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
model="$src/schema/MODEL.md"
conf="$src/tests/CONFORMANCE.md"
errors=0
fail() {
    echo "docs_consistency_test: $*" >&2
    errors=$((errors + 1))
}
[ -f "$model" ] || { echo "docs_consistency_test: $model: missing" >&2; exit 1; }
[ -f "$conf" ] || { echo "docs_consistency_test: $conf: missing" >&2; exit 1; }

# A rule is a list item that starts with its bold id ("- **E4** ..."); a conformance row is a
# table row whose first cell is an id ("| E4 | ...").
model_ids=$(grep -oE '^- \*\*[A-Z][0-9]+\*\*' "$model" | grep -oE '[A-Z][0-9]+' || true)
conf_ids=$(grep -oE '^\| *[A-Z][0-9]+ *\|' "$conf" | grep -oE '[A-Z][0-9]+' || true)
[ -n "$model_ids" ] || fail "$model: no rule ids found (format '- **A1** ...')"
[ -n "$conf_ids" ] || fail "$conf: no rule rows found (format '| A1 | ...')"

for id in $(printf '%s\n' "$model_ids" | sort | uniq -d); do
    fail "schema/MODEL.md: rule $id is defined more than once"
done
for id in $(printf '%s\n' "$conf_ids" | sort | uniq -d); do
    fail "tests/CONFORMANCE.md: rule $id has more than one row"
done
declare -A in_model=() in_conf=() defined=()
for id in $model_ids; do in_model[$id]=1; done
for id in $conf_ids; do in_conf[$id]=1; done
for id in $model_ids; do
    [ -n "${in_conf[$id]:-}" ] ||
        fail "rule $id of schema/MODEL.md has no row in tests/CONFORMANCE.md"
done
for id in $conf_ids; do
    [ -n "${in_model[$id]:-}" ] ||
        fail "tests/CONFORMANCE.md has a row for $id, which schema/MODEL.md does not define"
done

# Every test CONFORMANCE.md cites exists in the test sources.
sources=$(find "$src/tests" -name '*.c' -o -name '*.sh' | sort)
# shellcheck disable=SC2086
for t in $(grep -ohE '\btest_[a-z0-9_]+__[A-Za-z0-9_]+\b' $sources | sort -u); do defined[$t]=1; done
for t in $(grep -oE 'test_[a-z0-9_]+__[A-Za-z0-9_]+' "$conf" | sort -u); do
    [ -n "${defined[$t]:-}" ] || fail "tests/CONFORMANCE.md cites $t, which no test defines"
done

# Every rule id a test name carries (test_<module>__<ID>_[<ID>_...]<what>) is a rule of MODEL.md.
# shellcheck disable=SC2086
for name in $(grep -ohE 'START_TEST\(test_[a-z0-9_]+__[A-Z][0-9]+_[A-Za-z0-9_]*' $sources |
    sed 's/^START_TEST(//' | sort -u); do
    rest=${name#*__}
    while [[ $rest =~ ^([A-Z][0-9]+)_(.*)$ ]]; do
        id=${BASH_REMATCH[1]}
        rest=${BASH_REMATCH[2]}
        [ -n "${in_model[$id]:-}" ] ||
            fail "$name carries rule id $id, which schema/MODEL.md does not define"
    done
done

# Outside schema/ the specification is cited by its path; inside schema/ a bare MODEL.md is the
# same directory. No project file points outside the project for it.
while IFS= read -r hit; do
    fail "cites MODEL.md without its directory (write schema/MODEL.md): $hit"
done < <(cd "$src" && grep -rnE '(^|[^/A-Za-z_])MODEL\.md' README.md tests/CONFORMANCE.md deploy client/include \
    2>/dev/null || true)
while IFS= read -r hit; do
    fail "cites a document outside the project: $hit"
done < <(cd "$src" && grep -rnE '/work/shared|\.\./shared/|\.\./seeds/' README.md schema tests/CONFORMANCE.md \
    deploy client/include 2>/dev/null || true)

if [ "$errors" -gt 0 ]; then
    echo "docs_consistency_test: $errors problem(s)" >&2
    exit 1
fi
echo "docs_consistency_test: $(printf '%s\n' "$model_ids" | wc -l) rules, in step"
