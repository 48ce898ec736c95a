#!/usr/bin/env bash
# psdbd_links_public_api_test.sh - psdbd uses libpsdb the way an outside program does: it loads
# the shared libpsdb (which exports the public API only) and carries no copy of libpsdb's code,
# so a call from the server into a libpsdb internal cannot link.
# Env: PSDBD = the psdbd binary (the test is skipped without it).
set -euo pipefail
fail() { echo "psdbd_links_public_api_test: $*" >&2; exit 1; }
if [ -z "${PSDBD:-}" ]; then
    echo "psdbd_links_public_api_test: no psdbd built (PSDB_SERVER=OFF): skipped"
    exit 0
fi
command -v nm >/dev/null || fail "nm (binutils) is needed"

# The dynamic section names libpsdb.so: psdbd resolves libpsdb's functions from it at load time.
readelf -d "$PSDBD" | grep -q 'NEEDED.*\[libpsdb\.so' ||
    fail "$PSDBD does not load libpsdb.so (linked statically against libpsdb?)"

# No libpsdb API function is defined inside psdbd: each public name (psdb_x) it uses is undefined
# there. The internal names psdbd may carry (psdb__x) are the shared helpers of psdb_common,
# which it links by design, and nothing else.
defined=$(nm --defined-only "$PSDBD" | awk '$2 ~ /^[TDBRW]$/ && $3 ~ /^psdb_[^_]/ { print $3 }')
[ -z "$defined" ] || fail "psdbd carries libpsdb code: $(echo "$defined" | head -5 | tr '\n' ' ')"
if [ -n "${PSDB_BUILD_DIR:-}" ] && [ -e "$PSDB_BUILD_DIR/libpsdb_common.a" ]; then
    internal=$(nm --defined-only "$PSDBD" | awk '$2 ~ /^[TDBRW]$/ && $3 ~ /^psdb__/ { print $3 }' |
        sort -u | comm -23 - <(nm --defined-only "$PSDB_BUILD_DIR/libpsdb_common.a" 2>/dev/null |
        awk '$2 ~ /^[TDBRW]$/ { print $3 }' | sort -u))
    [ -z "$internal" ] || fail "psdbd carries libpsdb internals beyond psdb_common: $internal"
fi
used=$(nm --undefined-only "$PSDBD" | awk '$2 ~ /^psdb_[^_]/' | wc -l)
[ "$used" -gt 0 ] || fail "psdbd uses no libpsdb function: the check above proves nothing"

# And each of them is one libpsdb exports.
lib=$(ldd "$PSDBD" | awk '$1 ~ /^libpsdb\.so/ { print $3 }')
[ -n "$lib" ] && [ -e "$lib" ] || fail "libpsdb.so is not found by the loader for $PSDBD"
exported=$(nm -D --defined-only "$lib" | awk '{ print $3 }' | sort -u)
missing=$(nm --undefined-only "$PSDBD" | awk '$2 ~ /^psdb_[^_]/ { print $2 }' | sort -u |
    comm -23 - <(echo "$exported"))
[ -z "$missing" ] || fail "psdbd needs names libpsdb does not export: $missing"
echo "psdbd_links_public_api_test: ok ($used libpsdb functions, all from the shared library)"
