#!/usr/bin/env bash
# exports_test.sh - libpsdb.so exports exactly its public API: every function a public header
# declares with PSDB_API, and nothing else (no psdb__ internals, no common helper, no bundled
# dependency). The shared library is built with hidden visibility; this guards that it stays so.
# It also needs no Vulkan loader.
# Usage: exports_test.sh <libpsdb.so> <public header dir>
set -euo pipefail
lib=${1:?libpsdb.so}
inc=${2:?include/psdb}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Names declared PSDB_API: the identifier right before the first "(" of each declaration (which
# may span lines: lines are joined first). Preprocessor lines (the PSDB_API definition) are left out.
grep -hv '^[[:space:]]*#' "$inc"/*.h | tr '\n' ' ' | grep -oE 'PSDB_API[^;{(]*\(' |
    sed -E 's/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\($/\1/' | sort -u >"$tmp/declared"
# Defined dynamic symbols of the library (functions and data), versions stripped.
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sed 's/@.*//' | sort -u >"$tmp/exported"

fail=0
if [ ! -s "$tmp/declared" ]; then
    echo "exports_test: no PSDB_API declarations found under $inc" >&2
    exit 1
fi
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [ -n "$extra" ]; then
    echo "exports_test: $lib exports names no public header declares with PSDB_API:" >&2
    echo "$extra" | sed 's/^/  /' >&2
    fail=1
fi
if [ -n "$missing" ]; then
    echo "exports_test: public names declared PSDB_API but not exported by $lib:" >&2
    echo "$missing" | sed 's/^/  /' >&2
    fail=1
fi
# libpsdb opens the Vulkan loader at run time (psdb_client_local_targets), never links it: a
# launcher on a machine without Vulkan must still load libpsdb.
if readelf -d "$lib" | grep -q 'NEEDED.*libvulkan'; then
    echo "exports_test: $lib links the Vulkan loader (DT_NEEDED libvulkan): it must dlopen it" >&2
    fail=1
fi
[ $fail -eq 0 ] && echo "exports_test: $(wc -l <"$tmp/exported") exported names, all public"
exit $fail
