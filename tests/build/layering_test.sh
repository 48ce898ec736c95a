#!/usr/bin/env bash
# layering_test.sh - the folders of libpsdb depend one way (README.md, "Layout"):
#   common <- format <- driver <- runtime;  format <- registry <- runtime;  format, registry <- delivery
#   common <- vulkan (the Vulkan device identity and the machine's devices; nothing depends on it)
# checked on #include lines: a file of client/src/<layer>/ may include public headers (psdb/...),
# headers of its own folder, and headers of the layers listed for it below; nothing else. Since
# every allowed edge points down the list, no include cycle between folders can exist (the test
# also checks that the allowed graph itself is acyclic). client/tool/*.c may include psdb/,
# common/, build/ (the tool-side builders of client/tool/build/) and its own headers; server/ may
# include psdb/, common/ and its own headers. Within runtime/, only the device core (device.c,
# session.c, cache_session.c) includes its private device_int.h. Usage: layering_test.sh [source root]
set -uo pipefail
src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
fail=0

declare -A allowed=(
    [common]="common"
    [format]="common format"
    [driver]="common format driver"
    [registry]="common format registry"
    [runtime]="common format driver registry runtime"
    [delivery]="common format registry delivery"
    [vulkan]="common vulkan"
)
# The tool's remaining uses of library internals, each waiting for a public call (say so when
# adding one; remove the line when the include goes away).
tool_known=""

bad() {
    echo "layering_test: $1" >&2
    fail=1
}

# The allowed graph is acyclic: every layer's allowed set is within the sets of layers above it
# in this order, which is a topological order.
order=(common format driver registry runtime delivery vulkan)
for ((i = 0; i < ${#order[@]}; i++)); do
    for dep in ${allowed[${order[$i]}]}; do
        ok=0
        for ((j = 0; j <= i; j++)); do [ "${order[$j]}" = "$dep" ] && ok=1; done
        [ $ok -eq 1 ] || bad "allowed graph has a cycle: ${order[$i]} -> $dep"
    done
done
[ "${allowed[runtime]}" != "${allowed[runtime]/delivery/}" ] && bad "runtime must never depend on delivery"

# Every library source sits in a layer folder.
for f in "$src"/client/src/*.c "$src"/client/src/*.h; do
    [ -e "$f" ] && bad "${f#$src/} is outside every layer folder"
done

includes() { # file -> the quoted include targets, one per line
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"
}

for layer in "${!allowed[@]}"; do
    for f in "$src"/client/src/$layer/*.[ch]; do
        [ -e "$f" ] || continue
        while read -r inc; do
            case $inc in
            psdb/*) continue ;;
            */*)
                dir=${inc%%/*}
                [[ " ${allowed[$layer]} " == *" $dir "* ]] ||
                    bad "${f#$src/} includes \"$inc\": $layer may not depend on $dir"
                [ -e "$src/client/src/$inc" ] || bad "${f#$src/} includes \"$inc\", which does not exist"
                ;;
            *) [ -e "$src/client/src/$layer/$inc" ] ||
                bad "${f#$src/} includes \"$inc\", not a header of $layer (name the folder)" ;;
            esac
        done < <(includes "$f")
    done
done

# The device core's private header is the core's own: the files built on the core (pipelines,
# state objects, pipeline library, serialized and derived PSOs, the queue) use runtime/runtime.h.
for f in "$src"/client/src/*/*.[ch]; do
    case ${f##*/} in device.c | session.c | cache_session.c | device_int.h) continue ;; esac
    grep -q '#include "runtime/device_int.h"' "$f" &&
        bad "${f#$src/} includes runtime/device_int.h: only the device core does (use runtime/runtime.h)"
done

# Only client/src/vulkan/ sees the Vulkan headers: the rest of libpsdb builds without them.
for f in "$src"/client/src/*/*.[ch]; do
    case $f in "$src"/client/src/vulkan/*) continue ;; esac
    grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*<vulkan/' "$f" &&
        bad "${f#$src/} includes a vulkan header: only client/src/vulkan/ does"
done

for f in "$src"/client/tool/*.[ch]; do
    [ -e "$f" ] || continue
    base=${f##*/}
    while read -r inc; do
        case $inc in
        psdb/* | common/* | build/*) continue ;;
        */*)
            [[ " $tool_known " == *" $base:$inc "* ]] ||
                bad "client/tool/$base includes \"$inc\": the tool uses the public API, common/ and build/ only"
            ;;
        *) [ -e "$src/client/tool/$inc" ] || bad "client/tool/$base includes \"$inc\", not a tool header" ;;
        esac
    done < <(includes "$f")
done
# Known exceptions that are gone must leave the list, so it cannot grow stale.
for k in $tool_known; do
    grep -q "#include \"${k#*:}\"" "$src/client/tool/${k%%:*}" 2>/dev/null ||
        bad "known tool exception $k no longer exists: remove it from layering_test.sh"
done

# A server header: beside the includer, or in server/ or one of its folders (the include path).
server_header() {
    [ -e "$(dirname "$1")/$2" ] || [ -e "$src/server/$2" ] || compgen -G "$src/server/*/$2" >/dev/null
}
for f in "$src"/server/*.[ch] "$src"/server/*/*.[ch]; do
    [ -e "$f" ] || continue
    while read -r inc; do
        case $inc in
        psdb/* | common/*) continue ;;
        */*) server_header "$f" "$inc" ||
            bad "${f#$src/} includes \"$inc\": psdbd uses libpsdb's public API and common/ only" ;;
        *) server_header "$f" "$inc" ||
            bad "${f#$src/} includes \"$inc\", not a server header: psdbd uses the public API and common/ only" ;;
        esac
    done < <(includes "$f")
done

[ $fail -eq 0 ] && echo "layering_test: include directions follow the layers"
exit $fail
