#!/usr/bin/env bash
# nginx_test.sh - deploy/nginx/psdbd.conf in a real nginx on loopback (a self-signed certificate made
# here) in front of a real psdbd: resolve over HTTPS (and its short cache), full downloads (second one
# a cache HIT), Range downloads across cache slices, HEAD, headers passed through to psdbd, and
# `psdb install --ca-file` when the tool has it. Env: PSDB, PSDBD; needs nginx, openssl, curl.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
src=${PSDB_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() {
    echo "nginx_test: $*" >&2
    for f in "$dir"/*.log "$dir"/nginx/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
    done
    exit 1
}
dir=$(mktemp -d)
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
[ -x "$NGINX" ] || fail "nginx is not installed (Debian: apt-get install nginx)"
command -v openssl >/dev/null || fail "openssl is not installed"
command -v curl >/dev/null || fail "curl is not installed"
"$NGINX" -V 2>&1 | grep -q -- '--with-http_slice_module' || fail "this nginx lacks the slice module"

psdbd_pid=""
nginx_started=0
ng="$dir/nginx"
cleanup() {
    [ $nginx_started -eq 0 ] || "$NGINX" -p "$ng" -c "$ng/nginx.conf" -e "$ng/error.log" -s stop \
        2>/dev/null || true
    if [ -n "$psdbd_pid" ]; then
        kill -TERM "$psdbd_pid" 2>/dev/null || true
        wait "$psdbd_pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

# ---- psdbd with two published PSDBs (one large enough for several cache slices) ----
for f in 1 2; do
    "$PSDB" synth --app NginxGame --app-version 1.0.0.0 --pipelines 200 --seed "$f" \
        -o "$dir/g$f.sodb" >/dev/null
    "$PSDB" compile "$dir/g$f.sodb" --family "gfx$f" --abi 1 -o "$dir/g$f.psdb" >/dev/null
done
data="$dir/data"
"$PSDBD" token create --data-dir "$data" --role publisher --name pub >"$dir/token"
"$PSDB" keygen -o "$dir/key" >/dev/null
"$PSDBD" key add --data-dir "$data" --name pub --public-key "$dir/key.pub" >/dev/null
token=$(cat "$dir/token")
mkfifo "$dir/psdbd.fifo"
# With the shipped example config (flags override its listen address and data directory).
"$PSDBD" --config "$src/deploy/psdbd.conf.example" --listen 127.0.0.1:0 --data-dir "$data" \
    >"$dir/psdbd.fifo" 2>"$dir/psdbd.log" &
psdbd_pid=$!
exec {psdbd_out}<"$dir/psdbd.fifo"
read -r -t 30 line <&"$psdbd_out" || fail "psdbd did not start"
upstream=${line#psdbd: listening on }
[ "$upstream" != "$line" ] || fail "psdbd's first line: '$line'"
upstream_port=${upstream##*:}
for f in 1 2; do
    "$PSDB" publish --server "$upstream" --token "$token" --key "$dir/key" "$dir/g$f.psdb" \
        >/dev/null || fail "publish g$f"
done
sha1=$(sha256sum "$dir/g1.psdb" | cut -d' ' -f1)
sha2=$(sha256sum "$dir/g2.psdb" | cut -d' ' -f1)
size1=$(stat -c %s "$dir/g1.psdb")
[ "$size1" -gt $((3 * 256 * 1024)) ] || fail "g1.psdb ($size1 bytes) is too small for 3 slices"

# ---- certificate ----
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>"$dir/openssl.log" || fail "openssl req"

# ---- nginx: the shipped server config with its ADAPT values set for this test ----
# Substitutions: cache paths, upstream port, listen address, certificate, and a 256 KiB slice
# (instead of 4 MiB) so that a 2 MB PSDB spans several slices.
mkdir -p "$ng/cache" "$ng/tmp"
start_nginx() {
    local port=$1
    sed -e "s|/var/cache/nginx/|$ng/cache/|" \
        -e "s|server 127.0.0.1:8470;|server 127.0.0.1:$upstream_port;|" \
        -e "s|listen 443 ssl http2;|listen 127.0.0.1:$port ssl http2;|" \
        -e "/listen \[::\]:443/d" \
        -e "s|/etc/ssl/psdbd/fullchain.pem|$dir/cert.pem|" \
        -e "s|/etc/ssl/psdbd/privkey.pem|$dir/key.pem|" \
        -e "s|slice 4m;|slice 256k;|" \
        "$src/deploy/nginx/psdbd.conf" >"$ng/psdbd.conf"
    for want in "$ng/cache/psdbd " "127.0.0.1:$upstream_port;" "127.0.0.1:$port ssl" \
        "$dir/cert.pem" "$dir/key.pem" "slice 256k;"; do
        grep -qF -- "$want" "$ng/psdbd.conf" || fail "deploy/nginx/psdbd.conf: no '$want' after edit"
    done
    ! grep -q '/etc/ssl/\|/var/cache/\|:443' "$ng/psdbd.conf" || fail "an ADAPT value was not replaced"
    cat >"$ng/nginx.conf" <<CONF
user $(id -un) $(id -gn);
worker_processes 1;
pid $ng/nginx.pid;
error_log $ng/error.log info;
events { worker_connections 256; }
http {
    access_log $ng/access.log;
    client_body_temp_path $ng/tmp/body;
    proxy_temp_path $ng/tmp/proxy;
    fastcgi_temp_path $ng/tmp/fastcgi;
    uwsgi_temp_path $ng/tmp/uwsgi;
    scgi_temp_path $ng/tmp/scgi;
    include $ng/psdbd.conf;
}
CONF
    # In daemon mode nginx returns only after its sockets are bound and listening.
    "$NGINX" -p "$ng" -c "$ng/nginx.conf" -e "$ng/error.log" >"$dir/nginx-start.log" 2>&1
}
port=""
for _ in $(seq 10); do
    try=$((20000 + RANDOM % 40000))
    if start_nginx "$try"; then
        port=$try
        break
    fi
    grep -q 'Address already in use' "$dir/nginx-start.log" || fail "nginx: $(cat "$dir/nginx-start.log")"
done
[ -n "$port" ] || fail "no free port for nginx"
nginx_started=1
base="https://127.0.0.1:$port"
c=(curl -sS --cacert "$dir/cert.pem")

header() { tr -d '\r' <"$1" | sed -n "s/^$2: //Ip" | tail -1; }
status() { tr -d '\r' <"$1" | sed -n 's/^HTTP\/[0-9.]* \([0-9]*\).*/\1/p' | tail -1; }
digest() { sha256sum "$1" | cut -d' ' -f1; }

# ---- resolve over HTTPS; anonymous answers are cached briefly, token-bearing ones never ----
q="/v1/resolve?app=NginxGame&app_version=1.0.0.0&family=gfx1&abi_min=1&abi_max=1"
"${c[@]}" -D "$dir/h" -o "$dir/resolve.json" "$base$q" || fail "resolve over HTTPS"
[ "$(status "$dir/h")" = 200 ] || fail "resolve: status $(status "$dir/h")"
grep -q "\"sha256\": *\"$sha1\"" "$dir/resolve.json" || fail "resolve: $(cat "$dir/resolve.json")"
[ "$(header "$dir/h" X-Cache-Status)" = MISS ] || fail "first resolve: $(header "$dir/h" X-Cache-Status)"
"${c[@]}" -D "$dir/h" -o "$dir/resolve2.json" "$base$q" || fail "second resolve"
[ "$(header "$dir/h" X-Cache-Status)" = HIT ] || fail "second resolve: $(header "$dir/h" X-Cache-Status)"
cmp -s "$dir/resolve.json" "$dir/resolve2.json" || fail "cached resolve differs"
"${c[@]}" -D "$dir/h" -o /dev/null -H "Authorization: Bearer $token" "$base$q" || fail "resolve+token"
[ "$(header "$dir/h" X-Cache-Status)" = BYPASS ] || fail "a token-bearing resolve used the cache"

# ---- full download: a MISS, then the same bytes from the cache ----
"${c[@]}" -D "$dir/h" -o "$dir/dl1" "$base/v1/blobs/$sha1" || fail "download"
[ "$(status "$dir/h")" = 200 ] || fail "download: status $(status "$dir/h")"
[ "$(digest "$dir/dl1")" = "$sha1" ] || fail "downloaded bytes do not hash to $sha1"
[ "$(header "$dir/h" X-Cache-Status)" = MISS ] || fail "first download: $(header "$dir/h" X-Cache-Status)"
[ "$(header "$dir/h" ETag)" = "\"$sha1\"" ] || fail "ETag: $(header "$dir/h" ETag)"
"${c[@]}" -D "$dir/h" -o "$dir/dl1b" "$base/v1/blobs/$sha1" || fail "second download"
[ "$(header "$dir/h" X-Cache-Status)" = HIT ] || fail "second download: $(header "$dir/h" X-Cache-Status)"
[ "$(digest "$dir/dl1b")" = "$sha1" ] || fail "cached bytes do not hash to $sha1"
served=$(grep -c "GET /v1/blobs/$sha1" "$dir/psdbd.log" || true)
slices=$(( (size1 + 262143) / 262144 ))
[ "$served" -eq "$slices" ] || fail "psdbd served $served blob requests; want one per slice ($slices)"

# ---- Range: across slice boundaries, from the cache and on a fresh blob ----
check_range() { # check_range SHA FILE FIRST LAST WANT_CACHE
    "${c[@]}" -D "$dir/h" -o "$dir/part" -r "$3-$4" "$base/v1/blobs/$1" || fail "range $3-$4"
    [ "$(status "$dir/h")" = 206 ] || fail "range $3-$4: status $(status "$dir/h")"
    local size
    size=$(stat -c %s "$2")
    [ "$(header "$dir/h" Content-Range)" = "bytes $3-$4/$size" ] ||
        fail "range $3-$4: Content-Range $(header "$dir/h" Content-Range)"
    [ "$(stat -c %s "$dir/part")" -eq $(($4 - $3 + 1)) ] || fail "range $3-$4: length"
    cmp -s -i "$3:0" -n $(($4 - $3 + 1)) "$2" "$dir/part" || fail "range $3-$4: bytes differ"
    [ "$(header "$dir/h" X-Cache-Status)" = "$5" ] ||
        fail "range $3-$4: X-Cache-Status $(header "$dir/h" X-Cache-Status), want $5"
}
check_range "$sha1" "$dir/g1.psdb" 300000 600000 HIT
check_range "$sha1" "$dir/g1.psdb" $((size1 - 1000)) $((size1 - 1)) HIT
check_range "$sha2" "$dir/g2.psdb" 200000 300000 MISS
check_range "$sha2" "$dir/g2.psdb" 200000 300000 HIT
# HEAD: the size without the body.
"${c[@]}" -I -o "$dir/h" "$base/v1/blobs/$sha1" || fail "HEAD"
[ "$(header "$dir/h" Content-Length)" = "$size1" ] || fail "HEAD length $(header "$dir/h" Content-Length)"
# An unknown digest is a 404 through the proxy too.
"${c[@]}" -o /dev/null -w '%{http_code}' "$base/v1/blobs/$(printf '0%.0s' $(seq 64))" >"$dir/code"
[ "$(cat "$dir/code")" = 404 ] || fail "unknown blob: $(cat "$dir/code")"

# ---- headers pass through to psdbd: its token and publish-header checks answer ----
code=$("${c[@]}" -o /dev/null -w '%{http_code}' -X POST --data-binary @"$dir/g1.psdb" \
    "$base/v1/psdbs")
[ "$code" = 401 ] || fail "publish without a token through nginx: $code, want 401"
code=$("${c[@]}" -o "$dir/body" -w '%{http_code}' -X POST --data-binary @"$dir/g1.psdb" \
    -H "Authorization: Bearer $token" "$base/v1/psdbs")
[ "$code" = 400 ] || fail "publish with a token, no signature headers: $code, want 400 ($(cat "$dir/body"))"
"${c[@]}" -o "$dir/apps.json" "$base/v1/apps" || fail "GET /v1/apps"
grep -q NginxGame "$dir/apps.json" || fail "apps: $(cat "$dir/apps.json")"

# ---- psdb install through nginx with the test CA ----
if "$PSDB" install --help >/dev/null 2>&1; then
    mkdir -p "$dir/game" "$dir/registry"
    : >"$dir/game/NginxGame.exe"
    "$PSDB" install --server "$base" --ca-file "$dir/cert.pem" --exe-path "$dir/game/NginxGame.exe" \
        --app NginxGame --app-version 1.0.0.0 --target gfx1:1-1 --trust "$dir/key.pub" \
        --registry "$dir/registry" >"$dir/install.log" 2>&1 ||
        fail "psdb install over HTTPS: $(cat "$dir/install.log")"
    # Without the CA the certificate must not verify.
    if "$PSDB" install --server "$base" --exe-path "$dir/game/NginxGame.exe" --app NginxGame \
        --app-version 1.0.0.0 --target gfx1:1-1 --trust "$dir/key.pub" \
        --registry "$dir/registry2" >"$dir/install2.log" 2>&1; then
        fail "psdb install trusted a self-signed certificate without --ca-file"
    fi
else
    echo "nginx_test: psdb install is not in this build: skipping the install step"
fi
echo "nginx_test: ok"
