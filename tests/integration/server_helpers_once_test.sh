#!/usr/bin/env bash
# server_helpers_once_test.sh - psdbd writes none of libpsdb's shared helpers again: hex, SHA-256,
# number and version parsing, UTF-8 decoding and the rule for names, and the errno/SQLite status
# classes come from client/src/common/, out-of-memory ends the daemon through psdbd_out_of_memory
# alone, and every HTTP status is chosen in one place. Each check names the class of
# copy it refuses, so a new copy in any server file fails here.
# Env: PSDB_SOURCE_DIR = the source tree (default: this tree).
set -euo pipefail
src=${PSDB_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
errors=0
# refuse WHAT PATTERN [ALLOWED-FILE]: no line of a server C file matches PATTERN (extended regex),
# comments included, except in ALLOWED-FILE.
refuse() {
    local what=$1 pattern=$2 allowed=${3:-}
    local hits
    hits=$(cd "$src" && grep -rnE --include='*.c' --include='*.h' "$pattern" server |
        { if [ -n "$allowed" ]; then grep -v "^$allowed:"; else cat; fi; } || true)
    if [ -n "$hits" ]; then
        echo "server_helpers_once_test: $what:" >&2
        echo "$hits" >&2
        errors=$((errors + 1))
    fi
}
refuse "a hex digit table (use psdb__hex)" '0123456789abcdef|0123456789ABCDEF'
refuse "SHA-256 through OpenSSL directly (use psdb__sha256*)" 'EVP_(Digest|MD_CTX|sha256)|SHA256\('
refuse "a number parsed by strtoul/strtoull (use psdb__parse_u64 or psdb__parse_version)" \
    'strto(u?ll?|umax)\('
refuse "a disk-full errno test of its own (use psdb__errno_hr)" 'ENOSPC|EDQUOT'
refuse "a SQLite full/corrupt test of its own (use psdb__sqlite_hr)" \
    'SQLITE_(FULL|CORRUPT|NOTADB)\b'
refuse "a bare abort() (out of memory goes through psdbd_out_of_memory)" '\babort\(\)' \
    'server/common.c'
refuse "a UTF-8 decoder or name rule of its own (use psdb__utf8_seq, psdb__name_check)" \
    '& 0x[eE]0\)? ?== ?0x[cC]0|0x[cC]2 && .*0x9[fF]'
# Every status psdbd answers with is chosen in one table, http/reply.c's (an outcome of verdict.h
# to its status and error code): no other server file names one, as libmicrohttpd's MHD_HTTP_
# constant or as a number where a status is set, compared or passed. Two tables of their own stay:
# metrics.c's status labels of /metrics (libmicrohttpd's own answers among them) and http_parse.h's
# results of RFC 9110's precondition evaluation, which are statuses by definition.
status_hits=$(cd "$src" && {
    grep -rnE --include='*.c' --include='*.h' 'MHD_HTTP_[A-Z_]+' server |
        grep -vE 'MHD_HTTP_(HEADER|METHOD|VERSION)_'
    grep -rnE --include='*.c' --include='*.h' \
        '(status|http_reply_[a-z]+|http_queue)\b[^;]*[^0-9.][1-5][0-9][0-9]\b' server |
        grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/?\*|//)'
} | grep -vE '^server/(http/reply\.c|metrics\.c|http/http_parse\.h):' || true)
if [ -n "$status_hits" ]; then
    echo "server_helpers_once_test: an HTTP status outside http/reply.c's table (answer with a" \
        "psdbd_outcome through http_reply_verdict, http_reply_error or http_queue):" >&2
    echo "$status_hits" >&2
    errors=$((errors + 1))
fi
[ "$errors" -eq 0 ] || exit 1
echo "server_helpers_once_test: ok"
