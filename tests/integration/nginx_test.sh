#!/usr/bin/env bash
# nginx_test.sh - deploy/nginx/psdbd.conf in a real nginx on loopback (a self-signed certificate made
# here) in front of a real psdbd: resolve over HTTPS (and its short cache), full downloads (second one
# a cache HIT), Range downloads across cache slices, HEAD, headers passed through to psdbd, and
# `psdb install --ca-file`. Env: PSDB, PSDBD; needs nginx, openssl, curl.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
src=${PSDB_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() {
    echo "nginx_test: $*" >&2
    for f in "$dir"/*.log "$dir"/nginx*/*.log; do
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

psdbd_pids=()
nginx_dirs=()
cleanup() {
    for d in "${nginx_dirs[@]}"; do
        "$NGINX" -p "$d" -c "$d/nginx.conf" -e "$d/error.log" -s stop 2>/dev/null || true
    done
    for p in "${psdbd_pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
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
# start_psdbd NAME DATA_DIR [FLAGS...]: psdbd on a free loopback port, with the shipped example
# config (flags override its listen address and data directory); sets $upstream and
# $upstream_port from its first stdout line, read through a FIFO (psdbd is listening by then).
start_psdbd() {
    local name=$1 data=$2 line=""
    shift 2
    mkfifo "$dir/$name.fifo"
    "$PSDBD" --config "$src/deploy/psdbd.conf.example" --listen 127.0.0.1:0 --data-dir "$data" \
        "$@" >"$dir/$name.fifo" 2>"$dir/$name.log" &
    psdbd_pids+=($!)
    exec {fd}<"$dir/$name.fifo"
    read -r -t 30 line <&"$fd" || fail "$name: psdbd did not start"
    upstream=${line#psdbd: listening on }
    [ "$upstream" != "$line" ] || fail "$name: psdbd's first line: '$line'"
    upstream_port=${upstream##*:}
}
start_psdbd psdbd "$data"
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
# start_nginx DIR [SED_EXPR...]: nginx with prefix DIR in front of psdbd at $upstream_port, on a
# free port (sets $port). Substitutions: cache paths, upstream port, listen address, certificate,
# and a 256 KiB slice (instead of 4 MiB) so that a 2 MB PSDB spans several slices.
nginx_conf() {
    local ng=$1 port=$2
    shift 2
    sed -e "s|/var/cache/nginx/|$ng/cache/|" \
        -e "s|server 127.0.0.1:8470;|server 127.0.0.1:$upstream_port;|" \
        -e "s|listen 443 ssl http2;|listen 127.0.0.1:$port ssl http2;|" \
        -e "/listen \[::\]:443/d" \
        -e "s|/etc/ssl/psdbd/fullchain.pem|$dir/cert.pem|" \
        -e "s|/etc/ssl/psdbd/privkey.pem|$dir/key.pem|" \
        -e "s|slice 4m;|slice 256k;|" "$@" \
        "$src/deploy/nginx/psdbd.conf" >"$ng/psdbd.conf"
    for want in "$ng/cache/psdbd " "127.0.0.1:$upstream_port;" "127.0.0.1:$port ssl" \
        "$dir/cert.pem" "$dir/key.pem" "slice 256k;"; do
        grep -qF -- "$want" "$ng/psdbd.conf" || fail "deploy/nginx/psdbd.conf: no '$want' after edit"
    done
    # The shipped listen lines, not any ":443": the free port chosen above may contain 443.
    ! grep -q '/etc/ssl/\|/var/cache/\|listen 443\|listen \[::\]:443' "$ng/psdbd.conf" ||
        fail "an ADAPT value was not replaced"
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
}
start_nginx() {
    local ng=$1 try
    shift
    mkdir -p "$ng/cache" "$ng/tmp"
    for _ in $(seq 10); do
        try=$((20000 + RANDOM % 40000))
        nginx_conf "$ng" "$try" "$@"
        # In daemon mode nginx returns only after its sockets are bound and listening.
        if "$NGINX" -p "$ng" -c "$ng/nginx.conf" -e "$ng/error.log" >"$ng/start.log" 2>&1; then
            port=$try
            nginx_dirs+=("$ng")
            return 0
        fi
        grep -q 'Address already in use' "$ng/start.log" || fail "nginx: $(cat "$ng/start.log")"
    done
    fail "no free port for nginx"
}
start_nginx "$dir/nginx"
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
# Several ranges (a delta update's runs): psdbd's multipart/byteranges, not the slice cache's whole
# blob.
"${c[@]}" -D "$dir/h" -o "$dir/multi" -r "0-9,300000-300009" "$base/v1/blobs/$sha1" ||
    fail "several ranges"
[ "$(status "$dir/h")" = 206 ] || fail "several ranges: status $(status "$dir/h")"
header "$dir/h" Content-Type | grep -q '^multipart/byteranges; boundary=' ||
    fail "several ranges: Content-Type $(header "$dir/h" Content-Type)"
grep -qa "^Content-Range: bytes 300000-300009/$size1" "$dir/multi" || fail "several ranges: parts"
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
mkdir -p "$dir/game" "$dir/registry"
: >"$dir/game/NginxGame.exe"
"$PSDB" install --server "$base" --ca-file "$dir/cert.pem" --exe-path "$dir/game/NginxGame.exe" \
    --app NginxGame --app-version 1.0.0.0 --target gfx1:1-1 --trust "$dir/key.pub" \
    --registry "$dir/registry" >"$dir/install.log" 2>&1 ||
    fail "psdb install over HTTPS: $(cat "$dir/install.log")"
"$PSDB" registry list --registry "$dir/registry" | grep -q gfx1 ||
    fail "psdb install over HTTPS registered nothing"
# Without the CA the certificate must not verify.
if "$PSDB" install --server "$base" --exe-path "$dir/game/NginxGame.exe" --app NginxGame \
    --app-version 1.0.0.0 --target gfx1:1-1 --trust "$dir/key.pub" \
    --registry "$dir/registry2" >"$dir/install2.log" 2>&1; then
    fail "psdb install trusted a self-signed certificate without --ca-file"
fi
# ---- a private server: readers need a token, and auth_request guards the blob cache ----
pdata="$dir/private"
"$PSDBD" token create --data-dir "$pdata" --role publisher --name pub >"$dir/ptoken"
"$PSDBD" token create --data-dir "$pdata" --role reader --name reader >"$dir/rtoken"
"$PSDBD" key add --data-dir "$pdata" --name pub --public-key "$dir/key.pub" >/dev/null
start_psdbd private "$pdata" --readers-need-token=true
"$PSDB" publish --server "$upstream" --token "$(cat "$dir/ptoken")" --key "$dir/key" \
    "$dir/g1.psdb" >/dev/null || fail "publish to the private server"
start_nginx "$dir/nginx-private" -e "s|# auth_request /_psdbd_auth;|auth_request /_psdbd_auth;|"
grep -q '^ *auth_request /_psdbd_auth;' "$dir/nginx-private/psdbd.conf" ||
    fail "deploy/nginx/psdbd.conf: no commented auth_request line to enable"
pbase="https://127.0.0.1:$port"
reader=(-H "Authorization: Bearer $(cat "$dir/rtoken")")
"${c[@]}" -D "$dir/h" -o "$dir/p1" "${reader[@]}" "$pbase/v1/blobs/$sha1" || fail "private download"
[ "$(status "$dir/h")" = 200 ] || fail "private download: status $(status "$dir/h")"
[ "$(digest "$dir/p1")" = "$sha1" ] || fail "private download: bytes"
"${c[@]}" -D "$dir/h" -o "$dir/p2" "${reader[@]}" "$pbase/v1/blobs/$sha1" || fail "private again"
[ "$(header "$dir/h" X-Cache-Status)" = HIT ] || fail "private second download not a HIT"
[ "$(digest "$dir/p2")" = "$sha1" ] || fail "private cached bytes"
# The blob is cached now; without a valid token nginx must still refuse it.
code=$("${c[@]}" -o /dev/null -w '%{http_code}' "$pbase/v1/blobs/$sha1")
[ "$code" = 401 ] || fail "cached private blob without a token: $code, want 401"
code=$("${c[@]}" -o /dev/null -w '%{http_code}' -r 0-99 "$pbase/v1/blobs/$sha1")
[ "$code" = 401 ] || fail "cached private Range without a token: $code, want 401"
code=$("${c[@]}" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$dir/ptoken")x" \
    "$pbase/v1/blobs/$sha1")
[ "$code" = 401 ] || [ "$code" = 403 ] || fail "cached private blob with a bad token: $code"
"${c[@]}" -D "$dir/h" -o "$dir/part" "${reader[@]}" -r 300000-300099 "$pbase/v1/blobs/$sha1" ||
    fail "private Range"
[ "$(status "$dir/h")" = 206 ] || fail "private Range: status $(status "$dir/h")"
cmp -s -i 300000:0 -n 100 "$dir/g1.psdb" "$dir/part" || fail "private Range: bytes"
# An unknown digest: psdbd's HEAD answers 404, which auth_request reports as 500 (documented).
code=$("${c[@]}" -o /dev/null -w '%{http_code}' "${reader[@]}" \
    "$pbase/v1/blobs/$(printf '0%.0s' $(seq 64))")
[ "$code" = 500 ] || fail "private unknown blob: $code, want 500 (deploy/README.md)"
code=$("${c[@]}" -o /dev/null -w '%{http_code}' "$pbase$q")
[ "$code" = 401 ] || fail "private resolve without a token: $code, want 401"
"${c[@]}" -D "$dir/h" -o "$dir/presolve.json" "${reader[@]}" "$pbase$q" || fail "private resolve"
[ "$(status "$dir/h")" = 200 ] || fail "private resolve with a token: $(status "$dir/h")"
[ "$(header "$dir/h" X-Cache-Status)" = BYPASS ] || fail "private resolve used the shared cache"
# ---- psdb publish through nginx ----
# nginx drops request trailers: psdb publish's first, empty request finds its trailer missing
# (trailer_missing), so the tool hashes first and sends the statement in the headers, and the
# publish goes through. Forcing the trailer form through nginx fails and says why.
"$PSDB" publish --server "$base" --ca-file "$dir/cert.pem" --token "$token" --key "$dir/key" \
    --serial 9 "$dir/g1.psdb" >"$dir/pub.log" 2>&1 || fail "publish through nginx: $(cat "$dir/pub.log")"
grep -q "^published id .* serial 9" "$dir/pub.log" || fail "publish through nginx: $(cat "$dir/pub.log")"
if PSDB_PUBLISH_STATEMENT=trailer "$PSDB" publish --server "$base" --ca-file "$dir/cert.pem" \
    --token "$token" --key "$dir/key" --serial 10 "$dir/g1.psdb" >"$dir/pub2.log" 2>&1; then
    fail "a forced trailer-form publish through nginx succeeded: nginx passes trailers now?"
fi
grep -q "trailer_missing" "$dir/pub2.log" || fail "forced trailer form through nginx: $(cat "$dir/pub2.log")"
echo "nginx_test: ok"
