#!/usr/bin/env bash
# error_mappers_test.sh - one mapper per source of failures (issue 24, "One error channel"): an
# errno value is compared with a constant only in client/src/common/status_map.c (psdb__errno_hr,
# psdb__errno_is), and an HTTP status number appears in a comparison only there (psdb__http_hr,
# PSDB__HTTP_*) and in psdbd's one reply table, server/http/reply.c. Anywhere else in libpsdb, the
# tool, psdbd, the layer and the examples, this fails on:
#   - errno compared with a constant: `errno == ENOSPC`, `(e = errno) != EEXIST`, `EINTR == errno`,
#     `switch (errno)`;
#   - a saved errno compared with one: `e == ENOENT`, `case EACCES:` (pthread calls, which return
#     their error number, aside: `pthread_cond_timedwait(...) == ETIMEDOUT` is the wait's end);
#   - an HTTP status literal compared with a status, code or http variable: `status >= 500`,
#     `code == 200`, `404 == http_status`, or a `case 404:` label;
#   - libmicrohttpd's status names (MHD_HTTP_NOT_FOUND...) outside the reply table.
# Comment lines are not code. Last, every kind is planted in a copy of the tree, which must fail
# naming each.
# Usage: error_mappers_test.sh [source root]
set -uo pipefail
shopt -s nullglob
src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
fail=0

mappers=(client/src/common/status_map.c server/http/reply.c)

bad() {
    echo "error_mappers_test: $1" >&2
    fail=1
}

files=()
for f in "$src"/client/src/*/*.[ch] "$src"/client/tool/*.[ch] "$src"/client/tool/*/*.[ch] \
    "$src"/server/*.[ch] "$src"/server/*/*.[ch] "$src"/layer/*.[ch] "$src"/examples/*.[ch]; do
    rel=${f#$src/}
    [[ " ${mappers[*]} " == *" $rel "* ]] && continue
    files+=("$f")
done
[ ${#files[@]} -gt 0 ] || {
    echo "error_mappers_test: no sources under $src" >&2
    exit 1
}

# Lines of code (comment lines and the text of /* ... */ on a code line dropped) as
# "file:line:text".
code=$(awk '
    FNR == 1 { in_comment = 0 }
    {
        l = $0
        if (in_comment) {
            if (index(l, "*/") == 0) next
            l = substr(l, index(l, "*/") + 2)
            in_comment = 0
        }
        while ((i = index(l, "/*")) > 0) {
            rest = substr(l, i + 2)
            j = index(rest, "*/")
            if (j == 0) { l = substr(l, 1, i - 1); in_comment = 1; break }
            l = substr(l, 1, i - 1) " " substr(rest, j + 2)
        }
        sub(/\/\/.*/, "", l)
        if (l ~ /[^ \t]/) print FILENAME ":" FNR ":" l
    }' "${files[@]}")

# rule NAME REGEX [EXCLUDE]: every code line matching REGEX (grep -E), unless it matches EXCLUDE.
rule() {
    local name=$1 re=$2 ex=${3:-}
    while IFS= read -r hit; do
        [ -n "$hit" ] || continue
        bad "${hit#$src/}: $name"
    done < <(grep -E -- "$re" <<<"$code" | { if [ -n "$ex" ]; then grep -vE -- "$ex"; else cat; fi; })
}

econst='E[A-Z][A-Z0-9_]+'
# An operand naming an HTTP status: an identifier (or member, or a call's result) whose name has
# status, code or http in it.
httpv="[A-Za-z0-9_]*([Ss]tatus|STATUS|[Cc]ode|CODE|[Hh]ttp|HTTP)[A-Za-z0-9_]*(\\([^()]*\\))?"
lit='[1-5][0-9][0-9]L?'

rule "errno compared with a constant (use psdb__errno_hr or psdb__errno_is, common/status_map.h)" \
    "(^|[^A-Za-z0-9_])errno[[:space:]]*\\)?[[:space:]]*[!=]=[[:space:]]*${econst}([^A-Za-z0-9_]|$)|(^|[^A-Za-z0-9_])${econst}[[:space:]]*[!=]=[[:space:]]*errno([^A-Za-z0-9_]|$)|switch[[:space:]]*\\([[:space:]]*errno[[:space:]]*\\)"
rule "an errno value compared with a constant (use psdb__errno_hr or psdb__errno_is, common/status_map.h)" \
    "[!=]=[[:space:]]*${econst}([^A-Za-z0-9_]|$)|(^|[^A-Za-z0-9_])${econst}[[:space:]]*[!=]=|case[[:space:]]+${econst}[[:space:]]*:" \
    "pthread_|(^|[^A-Za-z0-9_])errno[[:space:]]*\\)?[[:space:]]*[!=]=|[!=]=[[:space:]]*errno([^A-Za-z0-9_]|$)"
rule "an HTTP status literal in a comparison (use psdb__http_hr / PSDB__HTTP_* in libpsdb, the reply table of server/http/reply.c in psdbd)" \
    "${httpv}[[:space:]]*\\)?[[:space:]]*(==|!=|>=|<=|<|>)[[:space:]]*${lit}([^0-9A-Za-z_]|$)|(^|[^0-9A-Za-z_])${lit}[[:space:]]*(==|!=|>=|<=|<|>)[[:space:]]*\\(?[[:space:]]*${httpv}|case[[:space:]]+${lit}[[:space:]]*:"
rule "an HTTP status named outside psdbd's reply table (server/http/reply.c)" \
    "MHD_HTTP_[A-Z_]+" "MHD_HTTP_(HEADER|METHOD|VERSION|POST_ENCODING)_"

# The test can fail: each kind planted in a copy of the tree must be caught, naming the file
# (ERROR_MAPPERS_PLANTED: the run on the copy, which plants nothing itself).
if [ -z "${ERROR_MAPPERS_PLANTED:-}" ]; then
    plants=(
        'client/src/format/valuemap_write.c|if (errno == ENOSPC) return 1;|errno compared'
        'client/src/delivery/install.c|if ((e = errno) != EEXIST) return 1;|errno compared'
        'server/store.c|int e = errno; if (e == ENOENT) return 0;|an errno value compared'
        'client/tool/main.c|switch (e) { case EACCES: break; }|an errno value compared'
        'client/src/delivery/delta.c|if (status == 404) return 1;|an HTTP status literal'
        'client/src/delivery/transport.c|if (r->status >= 500) return 1;|an HTTP status literal'
        'server/http/upload.c|if (http_code(c) != 200) return 1;|an HTTP status literal'
        'client/tool/cmd_publish.c|switch (code) { case 401: break; }|an HTTP status literal'
        'server/http/blobs.c|return MHD_HTTP_NOT_FOUND;|an HTTP status named outside'
    )
    copy=$(mktemp -d)
    trap 'rm -rf "$copy"' EXIT
    mkdir -p "$copy/client" "$copy/tests"
    cp -r "$src/client/src" "$src/client/tool" "$copy/client/"
    cp -r "$src/server" "$src/layer" "$src/examples" "$copy/"
    for p in "${plants[@]}"; do
        IFS='|' read -r file line _ <<<"$p"
        [ -f "$copy/$file" ] || bad "plant target $file is gone: update the plants"
        printf '%s\n' "$line" >>"$copy/$file"
    done
    out=$(ERROR_MAPPERS_PLANTED=1 bash "$0" "$copy" 2>&1)
    for p in "${plants[@]}"; do
        IFS='|' read -r file line want <<<"$p"
        grep -F "$file:" <<<"$out" | grep -qF "$want" || bad "planted '$line' in $file was not caught"
    done
    # Comment lines are not code: the same text in a comment passes.
    rm -rf "$copy"/*
    mkdir -p "$copy/client" && cp -r "$src/client/src" "$src/client/tool" "$copy/client/"
    cp -r "$src/server" "$src/layer" "$src/examples" "$copy/"
    printf '/* errno == ENOSPC, status >= 500 */\n// code == 200\n/* a\n * case 404:\n */\n' \
        >>"$copy/client/src/common/error.c"
    ERROR_MAPPERS_PLANTED=1 bash "$0" "$copy" >/dev/null 2>&1 ||
        bad "a comment naming errno == ENOSPC or status >= 500 was taken for code"
fi

[ $fail -eq 0 ] && echo "error_mappers_test: ok (${#files[@]} files)"
exit $fail
