#!/usr/bin/env bash
# pg_restart_test.sh - PostgreSQL stopped and started again under load: while it is down, psdbd
# answers 503 (never 500, never a hang past the statement timeout) and /readyz says not ready;
# once it is back the same psdbd process serves and publishes again, with no restart. The cluster
# is this test's own (tests/pg/cluster in a temporary directory), so stopping it disturbs no other
# test. Env: PSDB, PSDBD, PSDB_SOURCE_DIR; skips (77) without PSDB_TEST_PG_URL (no PostgreSQL in
# this run).
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
src=${PSDB_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
if [ -z "${PSDB_TEST_PG_URL:-}" ]; then
    echo "pg_restart_test: skipped: PSDB_TEST_PG_URL is not set (eval \"\$(tests/pg/cluster start)\")"
    exit 77
fi
dir=$(mktemp -d)
chmod 755 "$dir" # as root the cluster runs as the postgres user, which must reach it
cluster="$src/tests/pg/cluster"
pid=0
loader=0
fail() {
    echo "pg_restart_test: $*" >&2
    for f in "$dir"/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}
cleanup() {
    [ "$loader" -gt 0 ] && kill "$loader" 2>/dev/null || true
    [ "$pid" -gt 0 ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    "$cluster" stop "$dir/pg" || true
    rm -rf "$dir"
}
trap cleanup EXIT
"$cluster" start "$dir/pg" >/dev/null || fail "start the test's own cluster"
url="$("$cluster" url "$dir/pg")&dbname=postgres"

data="$dir/data"
token=$("$PSDBD" token create --data-dir "$data" --index "$url" --role publisher --name pub)
"$PSDB" keygen -o "$dir/key" >/dev/null
"$PSDBD" key add --data-dir "$data" --index "$url" --name pub --public-key "$dir/key.pub" >/dev/null
for i in 1 2; do
    "$PSDB" synth --app Restart --app-version 1.0.0.0 --pipelines 20 --seed "$i" \
        -o "$dir/g$i.sodb" >/dev/null
    "$PSDB" compile "$dir/g$i.sodb" --family "gfx$i" --abi 1 -o "$dir/g$i.psdb" >/dev/null
done
mkfifo "$dir/psdbd.fifo"
# A short statement timeout: a request never waits long for a database that is gone.
"$PSDBD" --listen 127.0.0.1:0 --data-dir "$data" --index "$url" --threads 4 \
    --index-statement-timeout 2000 >"$dir/psdbd.fifo" 2>"$dir/psdbd.log" &
pid=$!
exec {fd}<"$dir/psdbd.fifo"
read -r -t 30 line <&"$fd" || fail "psdbd did not start"
base=${line#psdbd: listening on }
"$PSDB" publish --server "$base" --token "$token" --key "$dir/key" "$dir/g1.psdb" >/dev/null ||
    fail "publish before the restart"
q="$base/v1/resolve?app=Restart&app_version=1.0.0.0&family=gfx1&abi_min=1&abi_max=1"

# Load: manifests by id (never cached) and resolves, one after the other, statuses recorded.
(
    while :; do
        curl -s -m 10 -o /dev/null -w '%{http_code}\n' "$base/v1/psdbs/1" || echo timeout
        curl -s -m 10 -o /dev/null -w '%{http_code}\n' "$q" || echo timeout
    done
) >"$dir/statuses" 2>/dev/null &
loader=$!
sleep 1
"$cluster" stop "$dir/pg"
sleep 3
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$base/readyz")
[ "$code" = 503 ] || fail "/readyz with the database stopped: $code, want 503"
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$base/v1/psdbs/1")
[ "$code" = 503 ] || fail "a manifest with the database stopped: $code, want 503"
"$cluster" start "$dir/pg" >/dev/null || fail "start the cluster again"
ready=0
for _ in $(seq 100); do
    if [ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ]; then
        ready=1
        break
    fi
    sleep 0.1
done
[ "$ready" -eq 1 ] || fail "/readyz did not come back after the database did"
# Ready means ready: no pooled connection from before the restart fails a request now.
for _ in $(seq 20); do
    code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$base/v1/psdbs/1")
    [ "$code" = 200 ] || fail "a manifest after /readyz said ready: $code"
done
sleep 1
kill "$loader"
wait "$loader" 2>/dev/null || true
loader=0
kill -0 "$pid" || fail "psdbd exited"
# Under load every answer was a success or a 503: never a 500, never a timeout.
bad=$(grep -cvE '^(200|503)$' "$dir/statuses" || true)
[ "$bad" -eq 0 ] || fail "$bad answers other than 200/503: $(sort "$dir/statuses" | uniq -c)"
grep -q '^503$' "$dir/statuses" || fail "no 503 while the database was down"
[ "$(tail -n 4 "$dir/statuses" | sort -u)" = 200 ] || fail "not back to 200: $(tail -n 4 "$dir/statuses")"
# The same process writes again.
"$PSDB" publish --server "$base" --token "$token" --key "$dir/key" "$dir/g2.psdb" >/dev/null ||
    fail "publish after the restart"
grep -q "cannot be reached" "$dir/psdbd.log" || fail "psdbd did not log the lost database"
grep -q "answers again" "$dir/psdbd.log" || fail "psdbd did not log the database's return"
echo "pg_restart_test: $(grep -c '^503$' "$dir/statuses") answers 503 while down, $(grep -c '^200$' "$dir/statuses") 200, no restart"
