#!/usr/bin/env bash
# tools_public_api_test.sh - the installed psdb and psdbd use libpsdb the way an outside program
# does: through the names the public headers declare PSDB_API, plus the shared helpers of
# client/src/common/, whether they link the shared or the static libpsdb. (Their sources' includes
# are layering_test.sh's: the public headers, common/, their own and the Vulkan component's.)
#   1. Objects (how the binary links does not matter): of the symbols the programs' own objects
#      (with the libraries of their own: the tool's build/ and the Vulkan component) leave
#      undefined and neither they nor libpsdb_common.a define, those libpsdb.a defines are all
#      PSDB_API names. This is what holds a statically linked tool to the public API.
#   2. Installed binaries (cmake --install into a temporary prefix): one that loads libpsdb.so
#      finds the installed one beside it, needs from it only PSDB_API names, and carries no copy
#      of a PSDB_API function itself (a second psdb_error_last would read another thread-local
#      message than the library writes).
# Usage: tools_public_api_test.sh SRC BUILD LIBPSDB_A COMMON_A PROGRAM:OBJ[,OBJ...] [PROGRAM:...]
# where PROGRAM is the installed name (psdb, psdbd) and OBJ its own objects and archives.
set -uo pipefail
src=${1:?source root}
build=${2:?build dir}
libpsdb_a=${3:?libpsdb.a}
common_a=${4:?libpsdb_common.a}
shift 4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/psdb-tools-api-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() {
    echo "tools_public_api_test: $1" >&2
    fail=1
}
command -v nm >/dev/null && command -v readelf >/dev/null || {
    echo "tools_public_api_test: nm and readelf (binutils) are needed" >&2
    exit 1
}

# The public names: the identifier before the first "(" of each PSDB_API declaration.
grep -hv '^[[:space:]]*#' "$src"/client/include/psdb/*.h | tr '\n' ' ' |
    grep -oE 'PSDB_API[^;{(]*\(' | sed -E 's/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*\($/\1/' |
    sort -u >"$tmp/public"
[ -s "$tmp/public" ] || bad "no PSDB_API declarations under $src/client/include/psdb"

# ---- 1. objects ----------------------------------------------------------------------------------
global='NF == 3 && $2 ~ /^[TDBRVWCiu]$/ {print $3}' # defined, not file-local
nm --defined-only "$libpsdb_a" 2>/dev/null | awk "$global" | sort -u >"$tmp/libpsdb"
nm --defined-only "$common_a" 2>/dev/null | awk "$global" | sort -u >"$tmp/common"
[ -s "$tmp/libpsdb" ] || bad "no symbols in $libpsdb_a"
programs=()
for spec in "$@"; do
    prog=${spec%%:*}
    programs+=("$prog")
    IFS=, read -r -a objs <<<"${spec#*:}"
    nm --defined-only "${objs[@]}" 2>/dev/null | awk "$global" | sort -u >"$tmp/own"
    nm --undefined-only "${objs[@]}" 2>/dev/null | awk '$1 == "U" {print $2}' | sort -u |
        comm -23 - "$tmp/own" | comm -23 - "$tmp/common" >"$tmp/needed"
    [ -s "$tmp/needed" ] || bad "$prog: its objects need nothing: the check below proves nothing"
    internal=$(comm -12 "$tmp/needed" "$tmp/libpsdb" | comm -23 - "$tmp/public")
    [ -z "$internal" ] ||
        bad "$prog uses libpsdb internals: $(echo "$internal" | head -8 | tr '\n' ' ')"
    used=$(comm -12 "$tmp/needed" "$tmp/public" | wc -l)
    [ "$used" -gt 0 ] || bad "$prog: its objects use no public libpsdb function"
    [ -n "$internal" ] || echo "tools_public_api_test: $prog's objects use $used public libpsdb" \
        "functions and no internal"
done

# ---- 2. installed binaries -----------------------------------------------------------------------
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log" >&2
    bad "cmake --install $build failed"
}
for prog in "${programs[@]}"; do
    bin=$tmp/prefix/bin/$prog
    [ -x "$bin" ] || { bad "$prog is not installed in bin/"; continue; }
    if ! readelf -d "$bin" | grep -q 'NEEDED.*\[libpsdb\.so'; then
        echo "tools_public_api_test: installed $prog links libpsdb statically (checked on its objects)"
        continue
    fi
    lib=$(ldd "$bin" | awk '$1 ~ /^libpsdb\.so/ {print $3}')
    case $lib in
    "$tmp"/prefix/*) ;;
    *) bad "installed $prog loads libpsdb.so from '${lib:-nowhere}', not from the prefix beside it" ;;
    esac
    nm -D --undefined-only "$bin" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/undef"
    nm -D --defined-only "$lib" 2>/dev/null | awk '{print $3}' | sed 's/@.*//' |
        sort -u >"$tmp/exported"
    outside=$(comm -12 "$tmp/undef" "$tmp/libpsdb" | comm -23 - "$tmp/public")
    [ -z "$outside" ] || bad "installed $prog needs non-public names: $(echo "$outside" | head -8)"
    missing=$(comm -12 "$tmp/undef" "$tmp/public" | comm -23 - "$tmp/exported")
    [ -z "$missing" ] || bad "installed $prog needs names libpsdb.so does not export: $missing"
    # The full symbol table where the binary has one (a stripped one: its dynamic table).
    { nm --defined-only "$bin" 2>/dev/null || nm -D --defined-only "$bin"; } | awk "$global" |
        sort -u >"$tmp/defined"
    copies=$(comm -12 "$tmp/defined" "$tmp/public")
    [ -z "$copies" ] || bad "installed $prog carries its own copy of: $(echo "$copies" | head -8)"
    echo "tools_public_api_test: installed $prog loads the installed libpsdb.so," \
        "$(comm -12 "$tmp/undef" "$tmp/public" | wc -l) public names"
done
[ $fail -eq 0 ] && echo "tools_public_api_test: psdb and psdbd use libpsdb's public API only"
exit $fail
