#!/usr/bin/env bash
# run_local_test.sh - deploy/run-local, the README's quick start, from a clean build directory:
# it builds, creates credentials on the first start only, publishes the demo PSDB, serves it and
# the dashboard with the demo's traffic, stops
# cleanly on SIGTERM, and starts again on the same data without new credentials.
set -euo pipefail
src=${PSDB_SOURCE_DIR:?}
work=$(mktemp -d "${TMPDIR:-/tmp}/psdb-run-local-XXXXXX")
pid=
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "run_local_test: $*" >&2; cat "$work/err" >&2 2>/dev/null; exit 1; }
export PSDBD_DATA_DIR=$work/data PSDBD_LISTEN=127.0.0.1:0 PSDB_BUILD_DIR=$work/build

# start: runs deploy/run-local in the background until it says it is serving; sets pid and url.
start() {
    : >"$work/err"
    "$src/deploy/run-local" >"$work/out" 2>"$work/err" &
    pid=$!
    for _ in $(seq 900); do
        grep -q 'run-local: serving' "$work/err" && break
        kill -0 "$pid" 2>/dev/null || fail "run-local exited before serving"
        sleep 0.2
    done
    url=$(sed -n 's/^run-local: serving \(http[^ ]*\) from.*/\1/p' "$work/err")
    [ -n "$url" ] || fail "run-local did not say where it serves"
}
stop() {
    kill -TERM "$pid"
    wait "$pid" || fail "run-local did not exit 0 on SIGTERM"
    pid=
}

start
grep -q 'token:' "$work/err" || fail "first start printed no publisher token"
curl -sf "$url/healthz" >/dev/null || fail "psdbd is not serving"
psdb=$PSDB_BUILD_DIR/psdb
"$psdb" resolve --server "$url" --app "PSDB Demo" --app-version 1.0.0.0 --family demo-gfx1 \
    --abi-min 1 --abi-max 1 >"$work/resolve" || fail "the demo PSDB does not resolve"
# The dashboard and the demo's traffic: the page is served, and the demo's miss on demo-gfx2
# reaches the coverage report once run-local's SIGUSR1 flush is done.
curl -sf -o /dev/null -w '%{content_type}' "$url/" | grep -q '^text/html' || fail "no dashboard at /"
seen=
for _ in $(seq 50); do
    if curl -sf "$url/v1/stats/coverage?app=PSDB%20Demo" | grep -q '"family":"demo-gfx2"'; then
        seen=1
        break
    fi
    sleep 0.2
done
[ -n "$seen" ] || fail "the demo's missing coverage (demo-gfx2) is not in /v1/stats/coverage"
token=$(cat "$PSDBD_DATA_DIR/credentials/publisher.token")
stop
curl -s -o /dev/null "$url/healthz" && fail "psdbd still answers after SIGTERM"

start
grep -q 'token:' "$work/err" && fail "second start made new credentials"
[ "$(cat "$PSDBD_DATA_DIR/credentials/publisher.token")" = "$token" ] || fail "token changed"
"$psdb" resolve --server "$url" --app "PSDB Demo" --app-version 1.0.0.0 --family demo-gfx1 \
    --abi-min 1 --abi-max 1 | cmp -s - "$work/resolve" || fail "the demo changed on restart"
stop
echo "run_local_test: builds, serves the demo, stops on SIGTERM, restarts on the same data"
