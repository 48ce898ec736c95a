#!/usr/bin/env bash
# deploy_bench.sh - the figures in deploy/SCALING.md: /v1/resolve requests/s and blob bytes/s of one
# psdbd (direct, and through deploy/nginx/psdbd.conf over TLS from its caches), publishes/s through
# `psdb publish`, and index size per 10k PSDBs (rows inserted through psdbd's own index code).
# Usage: tests/bench/deploy_bench.sh [BUILD_DIR]   (default build; needs wrk, nginx, openssl, curl)
# Env: DURATION (seconds per wrk run, default 10), THREADS (psdbd worker threads, default 4).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
PSDB=$build/psdb
PSDBD=$build/psdbd
duration=${DURATION:-10}
threads=${THREADS:-4}
dir=$(mktemp -d)
pids=()
ng="$dir/nginx"
nginx_started=0
cleanup() {
    [ $nginx_started -eq 0 ] || nginx -p "$ng" -c "$ng/nginx.conf" -e "$ng/error.log" -s stop || true
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$dir"
}
trap cleanup EXIT
say() { printf '%s\n' "$*"; }

# start_psdbd NAME DATA_DIR: sets $url (first stdout line, read through a FIFO).
start_psdbd() {
    local line=""
    mkfifo "$dir/$1.fifo"
    "$PSDBD" --listen 127.0.0.1:0 --data-dir "$2" --threads "$threads" --log-requests=false \
        >"$dir/$1.fifo" 2>"$dir/$1.log" &
    pids+=($!)
    exec {fd}<"$dir/$1.fifo"
    read -r -t 30 line <&"$fd"
    url=${line#psdbd: listening on }
}

# bench LABEL wrk-args...: one wrk run; prints requests/s, transfer/s and latency.
bench() {
    local label=$1
    shift
    wrk --latency -d "${duration}s" "$@" >"$dir/wrk.out" 2>&1
    printf '%-44s %10s req/s %10s/s  p50 %8s  p99 %8s\n' "$label" \
        "$(awk '/^Requests\/sec/ {print $2}' "$dir/wrk.out")" \
        "$(awk '/^Transfer\/sec/ {print $2}' "$dir/wrk.out")" \
        "$(awk '$1 == "50%" {print $2}' "$dir/wrk.out")" \
        "$(awk '$1 == "99%" {print $2}' "$dir/wrk.out")"
    grep -q 'Non-2xx' "$dir/wrk.out" && { say "  (non-2xx answers!)"; grep 'Non-2xx' "$dir/wrk.out"; }
    return 0
}

say "machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), $(uname -r)"
say "psdbd: $("$PSDBD" --version), $threads threads, request log off; wrk on the same cores"

# ---- PSDBs: a small one (publish rate) and a 1000-pipeline one (bytes/s) ----
"$PSDB" synth --app BenchGame --app-version 1.0.0.0 --pipelines 40 -o "$dir/s.sodb" >/dev/null
"$PSDB" compile "$dir/s.sodb" --family gfx1 --abi 1 -o "$dir/s.psdb" >/dev/null
"$PSDB" synth --app BenchGame --app-version 1.0.0.0 --pipelines 1000 -o "$dir/b.sodb" >/dev/null
"$PSDB" compile "$dir/b.sodb" --family gfx2 --abi 1 -o "$dir/b.psdb" >/dev/null
big=$(sha256sum "$dir/b.psdb" | cut -d' ' -f1)
say "PSDBs: small $(stat -c %s "$dir/s.psdb") bytes, big $(stat -c %s "$dir/b.psdb") bytes"

data="$dir/data"
"$PSDBD" token create --data-dir "$data" --role publisher --name pub >"$dir/token"
"$PSDB" keygen -o "$dir/key" >/dev/null
"$PSDBD" key add --data-dir "$data" --name pub --public-key "$dir/key.pub" >/dev/null
start_psdbd a "$data"
base=$url
"$PSDB" publish --server "$base" --token "$(cat "$dir/token")" --key "$dir/key" "$dir/b.psdb" \
    >/dev/null

# ---- publishes through the real path: psdb publish (a process each), N serials ----
n=200
size0=$(sqlite3 "$data/index.sqlite" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null &&
    stat -c %s "$data/index.sqlite")
t0=$(date +%s.%N)
for i in $(seq 1 $n); do
    "$PSDB" publish --server "$base" --token "$(cat "$dir/token")" --key "$dir/key" --serial "$i" \
        "$dir/s.psdb" >/dev/null
done
t1=$(date +%s.%N)
sqlite3 "$data/index.sqlite" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
size1=$(stat -c %s "$data/index.sqlite")
say "$(awk -v n=$n -v a="$t0" -v b="$t1" -v s0="$size0" -v s1="$size1" 'BEGIN {
    printf "publish: %d x psdb publish (sequential): %.1f publishes/s; index +%d bytes = %.0f bytes/PSDB", n, n / (b - a), s1 - s0, (s1 - s0) / n }')"

# ---- index size per 10k PSDBs through psdbd_index_publish (one transaction each, FULL sync) ----
cat >"$dir/fill.c" <<'C'
/* fill.c - inserts N PSDB rows through psdbd's index code: 1 app per 20 rows, 5 versions x 4
 * families each, distinct blobs, realistic names, key id and signature lengths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "index.h"
int main(int argc, char **argv)
{
    psdbd_index *ix = NULL;
    char err[256], app[64], family[32], sig[89];
    unsigned long n = strtoul(argv[2], NULL, 10);
    if (psdbd_index_open(argv[1], &ix, err, sizeof(err)) != 0) { fprintf(stderr, "%s\n", err); return 1; }
    memset(sig, 'A', 86); sig[86] = '='; sig[87] = '='; sig[88] = '\0';
    for (unsigned long i = 0; i < n; i++) {
        psdbd_record r;
        memset(&r, 0, sizeof(r));
        snprintf(app, sizeof(app), "Benchmark Application %05lu", i / 20);
        snprintf(family, sizeof(family), "vendor-gfx%lu", i % 4);
        r.app_name = app; r.exe_filename = "BenchmarkApplication-Win64-Shipping.exe";
        r.engine_name = "Unreal Engine"; r.family = family;
        r.app_version = (1ull << 48) | ((i / 4) % 5) << 32; r.engine_version = 5ull << 48;
        for (int k = 0; k < 16; k++) r.app_guid[k] = (unsigned char)(i / 20 >> (k % 4 * 8));
        r.abi_version = 7; r.compiler_version = 2ull << 48; r.profile_version = 1ull << 48;
        r.serial = 1; r.size = 200u << 20;
        snprintf(r.sha256, sizeof(r.sha256), "%064lx", i * 2654435761ul + 1);
        memset(r.key_id, 'c', 64);
        r.signature = sig; r.published_by = "launch-publisher";
        json_t *m = NULL;
        if (psdbd_index_publish(ix, &r, &m) != PSDBD_OK) { fprintf(stderr, "row %lu\n", i); return 1; }
        json_decref(m);
    }
    psdbd_index_close(ix);
    return 0;
}
C
# shellcheck disable=SC2046
cc -O2 -I"$src/server" -I"$src/server/index" -I"$src/client/include" "$dir/fill.c" "$build/libpsdbd_core.a" \
    "$build/libpsdb.a" $(pkg-config --libs libmicrohttpd sqlite3 jansson libcrypto libcurl) \
    -lpthread -lm -o "$dir/fill"
mkdir -p "$dir/ten"
t0=$(date +%s.%N)
"$dir/fill" "$dir/ten/index.sqlite" 10000
t1=$(date +%s.%N)
sqlite3 "$dir/ten/index.sqlite" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null
say "$(awk -v a="$t0" -v b="$t1" -v s="$(stat -c %s "$dir/ten/index.sqlite")" 'BEGIN {
    printf "index: 10000 rows via psdbd_index_publish: %.0f rows/s; index.sqlite %.2f MiB = %.0f bytes/PSDB", 10000 / (b - a), s / 1048576, s / 10000 }')"

# ---- HTTP: direct ----
q="/v1/resolve?app=BenchGame&app_version=1.0.0.0&family=gfx1&abi_min=1&abi_max=1"
curl -fsS "$base$q" >/dev/null
bench "psdbd resolve (c32)" -t2 -c32 "$base$q"
start_psdbd ten "$dir/ten"
q10="/v1/resolve?app=Benchmark%20Application%2000321&app_version=1.2.0.0&family=vendor-gfx2&abi_min=1&abi_max=9"
curl -fsS "$url$q10" >/dev/null
bench "psdbd resolve, 10k-PSDB index (c32)" -t2 -c32 "$url$q10"
bench "psdbd blob $(($(stat -c %s "$dir/b.psdb") / 1048576)) MiB (c8)" -t2 -c8 "$base/v1/blobs/$big"
bench "psdbd healthz (c32)" -t2 -c32 "$base/healthz"

# ---- HTTP: through nginx (TLS) and its caches ----
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
mkdir -p "$ng/cache" "$ng/tmp"
port=$((20000 + RANDOM % 40000))
sed -e "s|/var/cache/nginx/|$ng/cache/|" -e "s|server 127.0.0.1:8470;|server ${base#http://};|" \
    -e "s|listen 443 ssl http2;|listen 127.0.0.1:$port ssl;|" -e "/listen \[::\]:443/d" \
    -e "s|/etc/ssl/psdbd/fullchain.pem|$dir/cert.pem|" -e "s|/etc/ssl/psdbd/privkey.pem|$dir/key.pem|" \
    "$src/deploy/nginx/psdbd.conf" >"$ng/psdbd.conf"
cat >"$ng/nginx.conf" <<CONF
user $(id -un) $(id -gn);
worker_processes 1;
pid $ng/nginx.pid;
error_log $ng/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    client_body_temp_path $ng/tmp/body;
    proxy_temp_path $ng/tmp/proxy;
    fastcgi_temp_path $ng/tmp/fastcgi;
    uwsgi_temp_path $ng/tmp/uwsgi;
    scgi_temp_path $ng/tmp/scgi;
    include $ng/psdbd.conf;
}
CONF
nginx -p "$ng" -c "$ng/nginx.conf" -e "$ng/error.log"
nginx_started=1
tls="https://127.0.0.1:$port"
curl -fsSk "$tls$q" >/dev/null
curl -fsSk "$tls/v1/blobs/$big" >/dev/null
bench "nginx TLS resolve, cache HIT (c32)" -t2 -c32 "$tls$q"
bench "nginx TLS resolve with token, BYPASS (c32)" -t2 -c32 -H "Authorization: Bearer $(cat "$dir/token")" "$tls$q"
bench "nginx TLS blob, cache HIT (c8)" -t2 -c8 "$tls/v1/blobs/$big"
