#!/usr/bin/env bash
# layering_test.sh - the include directions of the tree (README.md, "Layout"), written as data:
#   libpsdb's folders:  common <- format <- driver <- runtime;  format <- registry <- runtime;
#                       format, registry <- delivery
#   the Vulkan component (client/src/vulkan/): common <- vulkan; nothing of libpsdb depends on it
#   its users:          the layer (layer/) and the tool (client/tool/, client/tool/build/), each
#                       through the component's one interface, vulkan/psdb_vulkan.h
#   psdbd (server/):    the public API (psdb/) and common/ only; within it, its modules by
#                       `server_allowed` (store <- value maps <- publish <- http: the store calls
#                       nothing above it, and only the protocol knows HTTP)
#   examples/:          the public API only
# checked on #include lines (quoted ones, and bracketed ones that name a header of client/src/): a
# file of client/src/<folder>/ may include public headers (psdb/...), headers of its own folder,
# and headers of the folders listed for it in `allowed`; a file of a folder in `users` what its
# entry lists. Since every allowed edge of libpsdb points down the list, no include cycle between
# folders can exist (the test also checks that both allowed graphs are acyclic). Within
# runtime/, only the device core (device.c, session.c, cache_session.c) includes its private
# device_int.h, and only server/index/ its private index_int.h. The Vulkan headers are seen by
# client/src/vulkan/ and layer/ only, libcurl's by client/src/delivery/transport.c only (and
# common/status_map.c, which maps its result codes); the layer's build
# compiles nothing outside layer/, and nothing else compiles a source of layer/. Last, every kind
# of violation is planted in a copy of the tree, which must fail naming each.
# Usage: layering_test.sh [source root]
set -uo pipefail
shopt -s nullglob
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
# The folders outside libpsdb and what their files may include: psdb (the public headers), a
# folder name (any header under it: common/, the tool's build/), one header named exactly (a
# component's interface), or self (a header of the file's own folder, named without a folder).
declare -A users=(
    [client/tool]="psdb common build self vulkan/psdb_vulkan.h"
    [client/tool/build]="psdb common build vulkan/psdb_vulkan.h"
    [layer]="psdb self vulkan/psdb_vulkan.h"
    [examples]="psdb"
)
# The tool's remaining uses of library internals (file below client/tool: header), each waiting
# for a public call (say so when adding one; remove it when the include goes away). None: the
# tool writes, compiles and packages SODBs through <psdb/sodb.h> and psdb/derived_pso.h.
known=""
known_flat=$(echo $known)
# psdbd's modules: a file of server/ is the module of its stem (store.c, store.h: store), a file of
# server/<folder>/ the module of its folder (index, http, admin). A module may include its own
# headers and those of the modules listed for it.
declare -A server_allowed=(
    [common]="common"
    [metrics]="common metrics"
    [cache]="common cache"
    [store]="common store"
    [index]="common index"
    [auth]="common index auth"
    [stats]="common index stats"
    [config]="common index stats config"
    [valuemaps]="common store metrics valuemaps"
    [verdict]="common index verdict"
    [publish]="common verdict index store valuemaps auth cache metrics publish"
    [admin]="common config index store valuemaps auth admin"
    [http]="common config auth cache index metrics stats store valuemaps verdict publish http"
    [main]="common config auth cache index metrics stats store valuemaps verdict publish admin http main"
)

bad() {
    echo "layering_test: $1" >&2
    fail=1
}

# acyclic GRAPH NODE...: the allowed graph GRAPH (an associative array's name) is acyclic: every
# node's allowed set is within the nodes up to it in this order, which is a topological order.
acyclic() {
    local -n graph=$1
    local name=$1 order i j dep ok
    shift
    order=("$@")
    for ((i = 0; i < ${#order[@]}; i++)); do
        for dep in ${graph[${order[$i]}]}; do
            ok=0
            for ((j = 0; j <= i; j++)); do [ "${order[$j]}" = "$dep" ] && ok=1; done
            [ $ok -eq 1 ] || bad "$name graph has a cycle: ${order[$i]} -> $dep"
        done
    done
}
acyclic allowed common format driver registry runtime delivery vulkan
acyclic server_allowed common metrics cache store index auth stats config valuemaps verdict \
    publish admin http main
[ "${allowed[runtime]}" != "${allowed[runtime]/delivery/}" ] && bad "runtime must never depend on delivery"

# Every library source sits in a layer folder.
for f in "$src"/client/src/*.c "$src"/client/src/*.h; do
    bad "${f#$src/} is outside every layer folder"
done

lib=("$src"/client/src/*/*.[ch])
tool=("$src"/client/tool/*.[ch] "$src"/client/tool/*/*.[ch])
server=("$src"/server/*.[ch] "$src"/server/*/*.[ch])
layer_files=("$src"/layer/*.[ch])
examples=("$src"/examples/*.[ch])

# Every #include of those files, read once: "file<TAB>header", a bracketed header after a "<".
scan=$(awk '/^[ \t]*#[ \t]*include[ \t]*["<]/ {
    l = $0
    sub(/^[ \t]*#[ \t]*include[ \t]*/, "", l)
    if (substr(l, 1, 1) == "\"") { split(substr(l, 2), a, "\""); print FILENAME "\t" a[1] }
    else { split(substr(l, 2), a, ">"); print FILENAME "\t<" a[1] }
}' "${lib[@]}" "${tool[@]}" "${server[@]}" "${layer_files[@]}" "${examples[@]}")

# A server header: beside the includer, or in server/ or one of its folders (the include path);
# its path on stdout.
server_header() {
    local h
    for h in "$(dirname "$1")/$2" "$src/server/$2" "$src"/server/*/"$2"; do
        [ -e "$h" ] && echo "$h" && return 0
    done
    return 1
}
# The psdbd module of a server file (server_allowed).
server_module() {
    local rel=${1#$src/server/}
    case $rel in
    */*) echo "${rel%%/*}" ;;
    *) echo "${rel%.[ch]}" ;;
    esac
}

while IFS=$'\t' read -r f inc; do
    [ -n "$f" ] || continue
    # A bracketed include is the tree's when it names a header of client/src/ (brackets do not
    # hide an internal); any other is a system header.
    case $inc in '<'*)
        inc=${inc#<}
        [ -f "$src/client/src/$inc" ] || continue
        ;;
    esac
    rel=${f#$src/}
    dir=${rel%/*}
    case $rel in
    client/src/*)
        layer=${dir#client/src/}
        case $inc in
        psdb/*) ;;
        */*)
            [[ " ${allowed[$layer]} " == *" ${inc%%/*} "* ]] ||
                bad "$rel includes \"$inc\": $layer may not depend on ${inc%%/*}"
            [ -e "$src/client/src/$inc" ] || bad "$rel includes \"$inc\", which does not exist"
            ;;
        *) [ -e "$src/client/src/$layer/$inc" ] ||
            bad "$rel includes \"$inc\", not a header of $layer (name the folder)" ;;
        esac
        ;;
    server/*)
        case $inc in
        psdb/* | common/*) ;;
        */*) server_header "$f" "$inc" >/dev/null ||
            bad "$rel includes \"$inc\": psdbd uses libpsdb's public API and common/ only" ;;
        *)
            if ! hdr=$(server_header "$f" "$inc"); then
                bad "$rel includes \"$inc\", not a server header: psdbd uses the public API and common/ only"
            else
                mod=$(server_module "$f")
                dep=$(server_module "$hdr")
                if [ -z "${server_allowed[$mod]+set}" ]; then
                    bad "$rel is in no module of psdbd: add $mod to server_allowed"
                elif [[ " ${server_allowed[$mod]} " != *" $dep "* ]]; then
                    bad "$rel includes \"$inc\": psdbd's $mod may not depend on $dep"
                elif [[ $inc == index_*int.h ]] && [ "$mod" != index ]; then
                    bad "$rel includes \"$inc\", the index's private header: use index.h"
                fi
            fi
            ;;
        esac
        ;;
    *)
        rules=${users[$dir]-}
        ok=0
        for r in $rules; do
            case $r in
            self) [[ $inc != */* ]] && [ -e "$src/$dir/$inc" ] && ok=1 ;;
            */*) [ "$inc" = "$r" ] && ok=1 ;;
            *) [[ $inc == "$r"/* ]] && ok=1 ;;
            esac
        done
        [[ " $known_flat " == *" ${rel#client/tool/}:$inc "* ]] && ok=1
        [ $ok -eq 1 ] || bad "$rel includes \"$inc\": $dir may include only: ${rules:-nothing}"
        ;;
    esac
done <<<"$scan"

# Known exceptions that are gone must leave the list, so it cannot grow stale.
for k in $known; do
    grep -q "#include \"${k#*:}\"" "$src/client/tool/${k%%:*}" 2>/dev/null ||
        bad "known tool exception $k no longer exists: remove it from layering_test.sh"
done

# The device core's private header is the core's own: the files built on the core (pipelines,
# state objects, pipeline library, serialized and derived PSOs, the queue) use runtime/runtime.h.
while read -r f; do
    case ${f##*/} in device.c | session.c | cache_session.c | device_int.h) continue ;; esac
    bad "${f#$src/} includes runtime/device_int.h: only the device core does (use runtime/runtime.h)"
done < <(grep -l '#include "runtime/device_int.h"' "${lib[@]}")

# Only the Vulkan component and the layer see the Vulkan headers: libpsdb's other folders, the
# tool and psdbd build without them (the tool reaches Vulkan through the component).
while read -r f; do
    case $f in "$src"/client/src/vulkan/*) continue ;; esac
    bad "${f#$src/} includes a vulkan header: only client/src/vulkan/ and layer/ do"
done < <(grep -l '^[[:space:]]*#[[:space:]]*include[[:space:]]*<vulkan/' "${lib[@]}" "${tool[@]}" \
    "${server[@]}")

# Only the delivery client's transport sees libcurl (and status_map.c, which maps its result
# codes): every other request describes itself to delivery/transport.h.
while read -r f; do
    case $f in "$src"/client/src/delivery/transport.c | "$src"/client/src/common/status_map.c) continue ;; esac
    bad "${f#$src/} includes a libcurl header: only client/src/delivery/transport.c does (describe the request to delivery/transport.h)"
done < <(grep -l '^[[:space:]]*#[[:space:]]*include[[:space:]]*<curl/' "${lib[@]}" "${tool[@]}" \
    "${server[@]}")

# The layer's build compiles layer/ only (the component is a library it links), and nothing else
# compiles a source of layer/ (comment lines aside).
while read -r l; do
    bad "layer/CMakeLists.txt:$l: the layer's build compiles only layer/ (the Vulkan component is psdb_vulkan)"
done < <(grep -nE '(^|[^A-Za-z_])(target_sources|psdb_build|psdb_tool)([^A-Za-z_]|$)|/[A-Za-z0-9_./-]*\.c([^A-Za-z_]|$)' \
    "$src/layer/CMakeLists.txt" | grep -vE '^[0-9]+:[[:space:]]*#')
for c in "$src"/CMakeLists.txt "$src"/*/CMakeLists.txt "$src"/*/*/CMakeLists.txt; do
    [ "$c" != "$src/layer/CMakeLists.txt" ] || continue
    while read -r l; do
        bad "${c#$src/}:$l: only layer/CMakeLists.txt compiles a source of layer/"
    done < <(grep -nE 'layer/[A-Za-z0-9_]+\.c' "$c" | grep -vE '^[0-9]+:[[:space:]]*#')
done

# The test can fail: every kind of violation, planted in one copy of the tree, must be caught with
# a line naming it (LAYERING_PLANTED: the run on the copy, which plants nothing itself).
if [ -z "${LAYERING_PLANTED:-}" ]; then
    plants=(
        'layer/vk_layer.c|#include "format/sodb.h"|layer/vk_layer.c includes "format/sodb.h"'
        'layer/vk_layer.c|#include <registry/registry.h>|layer/vk_layer.c includes "registry/registry.h"'
        'client/tool/cmd_compile.c|#include "vulkan/vk_backend.h"|client/tool/cmd_compile.c includes "vulkan/vk_backend.h"'
        'client/tool/build/synth_vulkan.c|#include "vulkan/vk_devices.h"|client/tool/build/synth_vulkan.c includes "vulkan/vk_devices.h"'
        'client/src/vulkan/vk_record.c|#include "format/sodb.h"|vulkan may not depend on format'
        'client/src/delivery/install.c|#include "vulkan/psdb_vulkan.h"|delivery may not depend on vulkan'
        'server/main.c|#include "vulkan/psdb_vulkan.h"|server/main.c includes "vulkan/psdb_vulkan.h"'
        'examples/record_sodb.c|#include "common/buf.h"|examples/record_sodb.c includes "common/buf.h"'
        'client/tool/build/baseset.c|#include "format/derivation.h"|client/tool/build/baseset.c includes "format/derivation.h"'
        'client/tool/main.c|#include <vulkan/vulkan.h>|client/tool/main.c includes a vulkan header'
        'layer/CMakeLists.txt|target_sources(psdb_build PRIVATE vk_decode.c)|the layer'"'"'s build compiles only layer/'
        'CMakeLists.txt|add_library(x STATIC ${CMAKE_SOURCE_DIR}/layer/vk_layer.c)|only layer/CMakeLists.txt compiles a source of layer/'
        'server/store.c|#include "valuemaps.h"|psdbd'"'"'s store may not depend on valuemaps'
        'server/publish.c|#include "http_int.h"|psdbd'"'"'s publish may not depend on http'
        'server/http/routes.c|#include "index_int.h"|the index'"'"'s private header'
        'client/src/delivery/resolve.c|#include <curl/curl.h>|client/src/delivery/resolve.c includes a libcurl header'
    )
    copy=$(mktemp -d)
    mkdir -p "$copy/tests"
    if cp -r "$src/client" "$src/layer" "$src/server" "$src/examples" "$src/CMakeLists.txt" "$copy/"; then
        for p in "${plants[@]}"; do
            IFS='|' read -r file line expect <<<"$p"
            printf '%s\n' "$line" >>"$copy/$file"
        done
        out=$(LAYERING_PLANTED=1 bash "$0" "$copy" 2>&1)
        rc=$?
        [ $rc -ne 0 ] || bad "violations planted in a copy of the tree passed: $out"
        for p in "${plants[@]}"; do
            IFS='|' read -r file line expect <<<"$p"
            [[ $out == *"$expect"* ]] || bad "a violation planted in $file ($line) was not caught"
        done
    else
        bad "cannot copy the tree to $copy"
    fi
    rm -rf "$copy"
fi

[ $fail -eq 0 ] && echo "layering_test: include directions follow the layers"
exit $fail
