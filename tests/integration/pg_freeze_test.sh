#!/usr/bin/env bash
# pg_freeze_test.sh - PostgreSQL stopped with SIGSTOP (a frozen server: it enforces no
# statement_timeout and refuses no connection): a publish, a resolve, a listing, a stats report
# and /readyz each answer 503 within index-statement-timeout plus one second, never hang for the
# outage; once the server runs again (SIGCONT) the same psdbd serves and publishes on its pool
# without a restart and without a broken pooled connection. The cluster is this test's own
# (tests/pg/cluster in a temporary directory), so freezing it disturbs no other test; it is
# resumed however the test ends. Env: PSDB, PSDBD, PSDB_SOURCE_DIR; skips (77) without
# PSDB_TEST_PG_URL (no PostgreSQL in this run).
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
src=${PSDB_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ -z "${PSDB_TEST_PG_URL:-}" ]; then
    echo "pg_freeze_test: skipped: PSDB_TEST_PG_URL is not set (eval \"\$(tests/pg/cluster start)\")"
    exit 77
fi
timeout_ms=2000
limit_s=3.0 # index-statement-timeout + 1 s
dir=$(mktemp -d)
chmod 755 "$dir" # as root the cluster runs as the postgres user, which must reach it
cluster="$src/tests/pg/cluster"
pid=0
frozen=""
thaw() {
    # shellcheck disable=SC2086 # a list of pids
    [ -n "$frozen" ] && kill -CONT $frozen 2>/dev/null || true
    frozen=""
}
fail() {
    thaw
    echo "pg_freeze_test: $*" >&2
    for f in "$dir"/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}
cleanup() {
    thaw
    [ "$pid" -gt 0 ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    "$cluster" stop "$dir/pg" || true
    rm -rf "$dir"
}
trap cleanup EXIT
"$cluster" start "$dir/pg" >/dev/null || fail "start the test's own cluster"
url="$("$cluster" url "$dir/pg")&dbname=postgres"

data="$dir/data"
token=$("$PSDBD" token create --data-dir "$data" --index "$url" --role publisher --name pub)
reader=$("$PSDBD" token create --data-dir "$data" --index "$url" --role reader --name reader)
"$PSDB" keygen -o "$dir/key" >/dev/null
"$PSDBD" key add --data-dir "$data" --index "$url" --name pub --public-key "$dir/key.pub" >/dev/null
for i in 1 2 3; do
    "$PSDB" synth --app Frozen --app-version 1.0.0.0 --pipelines 20 --seed "$i" \
        -o "$dir/g$i.sodb" >/dev/null
    "$PSDB" compile "$dir/g$i.sodb" --family "gfx$i" --abi 1 -o "$dir/g$i.psdb" >/dev/null
done
mkfifo "$dir/psdbd.fifo"
"$PSDBD" --listen 127.0.0.1:0 --data-dir "$data" --index "$url" --threads 4 \
    --index-statement-timeout "$timeout_ms" >"$dir/psdbd.fifo" 2>"$dir/psdbd.log" &
pid=$!
exec {fd}<"$dir/psdbd.fifo"
read -r -t 30 line <&"$fd" || fail "psdbd did not start"
base=${line#psdbd: listening on }
"$PSDB" publish --server "$base" --token "$token" --key "$dir/key" "$dir/g1.psdb" >/dev/null ||
    fail "publish before the freeze"
resolve() { echo "$base/v1/resolve?app=Frozen&app_version=1.0.0.0&family=$1&abi_min=1&abi_max=1"; }
# waitall PIDS...: waits for those (a bare `wait` would wait for psdbd too).
waitall() {
    for p in "$@"; do
        wait "$p" || true
    done
}
# Every pooled connection in use once: the freeze meets connections that were healthy.
jobs=()
for _ in $(seq 8); do
    curl -sf -o /dev/null "$base/v1/psdbs/1" &
    jobs+=($!)
done
waitall "${jobs[@]}"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$(resolve gfx1)")" = 200 ] || fail "resolve before"

# The postmaster and every process it started.
pm=$(head -n 1 "$dir/pg/data/postmaster.pid")
frozen="$pm $(ps -o pid= --ppid "$pm" | tr '\n' ' ')"
# shellcheck disable=SC2086
kill -STOP $frozen
# expect NAME CURL-ARGS...: the request answers 503 within the limit.
expect_503() {
    local name=$1 out code took
    shift
    out=$(curl -s -m 15 -o "$dir/body" -w '%{http_code} %{time_total}' "$@") || true
    code=${out% *}
    took=${out#* }
    echo "pg_freeze_test: frozen: $name: $code in ${took} s"
    [ "$code" = 503 ] || fail "$name with the database frozen: $code after ${took} s, want 503"
    awk -v t="$took" -v l="$limit_s" 'BEGIN { exit !(t <= l) }' ||
        fail "$name with the database frozen took ${took} s, over $limit_s s"
}
expect_503 publish -X POST -H "Authorization: Bearer $token" --data-binary @"$dir/g2.psdb" \
    "$base/v1/psdbs"
expect_503 resolve "$(resolve gfx2)" # not cached: asked for the first time
expect_503 listing "$base/v1/apps"
expect_503 "stats report" "$base/v1/stats/traffic"
expect_503 "manifest" -H "Authorization: Bearer $reader" "$base/v1/psdbs/1"
expect_503 readyz "$base/readyz"
# Several at once, more than the four worker threads: while one request finds out whether the
# database is back, the others answer at once, so none queues behind another's timeout.
jobs=()
for i in $(seq 6); do
    curl -s -m 15 -o /dev/null -w '%{http_code} %{time_total}\n' "$(resolve "gfx$((i + 10))")" \
        >"$dir/parallel.$i" &
    jobs+=($!)
done
waitall "${jobs[@]}"
for i in $(seq 6); do
    read -r code took <"$dir/parallel.$i"
    echo "pg_freeze_test: frozen: parallel resolve $i: $code in $took s"
    [ "$code" = 503 ] || fail "parallel resolve $i with the database frozen: $code"
    awk -v t="$took" -v l="$limit_s" 'BEGIN { exit !(t <= l) }' ||
        fail "parallel resolve $i took ${took} s"
done
thaw

# Back: ready again, and every pooled connection works (none broken from the freeze is reused).
ready=0
for _ in $(seq 100); do
    if [ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ]; then
        ready=1
        break
    fi
    sleep 0.1
done
[ "$ready" -eq 1 ] || fail "/readyz did not come back after the database did"
for round in 1 2 3; do
    jobs=()
    for i in $(seq 8); do
        curl -s -m 10 -o /dev/null -w '%{http_code}\n' "$base/v1/psdbs/1" >"$dir/after.$i" &
        jobs+=($!)
    done
    waitall "${jobs[@]}"
    for i in $(seq 8); do
        [ "$(cat "$dir/after.$i")" = 200 ] ||
            fail "a manifest after the thaw (round $round): $(cat "$dir/after.$i")"
    done
done
[ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$base/v1/apps")" = 200 ] || fail "listing after"
[ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$base/v1/stats/traffic")" = 200 ] ||
    fail "stats after"
"$PSDB" publish --server "$base" --token "$token" --key "$dir/key" "$dir/g3.psdb" >/dev/null ||
    fail "publish after the thaw"
[ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$(resolve gfx3)")" = 200 ] ||
    fail "the PSDB published after the thaw does not resolve"
kill -0 "$pid" || fail "psdbd exited"
grep -q "no answer within" "$dir/psdbd.log" || fail "psdbd did not log the unanswered statements"
grep -q "answers again" "$dir/psdbd.log" || fail "psdbd did not log the database's return"
echo "pg_freeze_test: every request answered 503 within $limit_s s while frozen; serves again after"
