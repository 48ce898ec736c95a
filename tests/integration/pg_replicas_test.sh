#!/usr/bin/env bash
# pg_replicas_test.sh - three psdbd replicas on one PostgreSQL index and one shared blob store,
# behind a real nginx upstream: publishes and resolves spread over them; one replica SIGKILLed in
# the middle of publishes and another stopped, the survivor serves every acknowledged PSDB and
# `psdbd check --deep` is clean; two gc runs at once keep every referenced blob; two replicas
# receiving the same blob at once both succeed and leave one file; a pg_dump of the index with a
# copy of the blobs restores into a working data directory.
# Env: PSDB, PSDBD, PSDB_TEST_PG_URL (a cluster: tests/pg/cluster start); skips (77) without it.
set -euo pipefail
: "${PSDB:?set PSDB to the psdb tool}"
: "${PSDBD:?set PSDBD to the psdbd server (built with the server)}"
if [ -z "${PSDB_TEST_PG_URL:-}" ]; then
    echo "pg_replicas_test: skipped: PSDB_TEST_PG_URL is not set (eval \"\$(tests/pg/cluster start)\")"
    exit 77
fi
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
dir=$(mktemp -d)
db="psdbr_$$"
sep='?'
case "$PSDB_TEST_PG_URL" in *\?*) sep='&' ;; esac
url_of() { echo "${PSDB_TEST_PG_URL}${sep}dbname=$1"; }
url=$(url_of "$db")
fail() {
    echo "pg_replicas_test: $*" >&2
    for f in "$dir"/*.log "$dir"/ng/*.log; do
        [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
    done
    exit 1
}
sql() { psql -qAt -v ON_ERROR_STOP=1 "$(url_of "${2:-postgres}")" -c "$1"; }

pids=(0 0 0 0)
ports=(0 0 0 0)
cleanup() {
    [ -f "$dir/ng/nginx.pid" ] && "$NGINX" -p "$dir/ng" -c "$dir/ng/nginx.conf" -e "$dir/ng/error.log" -s stop 2>/dev/null || true
    for p in "${pids[@]}"; do
        [ "$p" -gt 0 ] && kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
    done
    sql "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    sql "DROP DATABASE IF EXISTS ${db}_restored WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
sql "CREATE DATABASE $db" || fail "create database $db"

data="$dir/data" # shared by the three replicas: blobs/ and tmp/ on one filesystem
export PSDBD_INDEX="$url"
"$PSDBD" token create --data-dir "$data" --role publisher --name pub >"$dir/token" || fail "token"
token=$(cat "$dir/token")
"$PSDB" keygen -o "$dir/key" >/dev/null
"$PSDBD" key add --data-dir "$data" --name pub --public-key "$dir/key.pub" >/dev/null || fail "key"
unset PSDBD_INDEX

# start N: replica N on a free port, its URL from the first stdout line (read through a FIFO).
start() {
    local n=$1 line=""
    rm -f "$dir/r$n.fifo"
    mkfifo "$dir/r$n.fifo"
    "$PSDBD" --listen 127.0.0.1:0 --data-dir "$data" --index "$url" --threads 4 \
        --log-requests false >"$dir/r$n.fifo" 2>>"$dir/r$n.log" &
    pids[$n]=$!
    exec {fd}<"$dir/r$n.fifo"
    read -r -t 30 line <&"$fd" || fail "replica $n did not start"
    ports[$n]=${line##*:}
}
start 1
start 2
start 3

# ---- nginx: one upstream of the three replicas; a replica that is gone is skipped ----
mkdir -p "$dir/ng/tmp"
for _ in $(seq 10); do
    port=$((20000 + RANDOM % 40000))
    cat >"$dir/ng/nginx.conf" <<CONF
user $(id -un) $(id -gn);
worker_processes 1;
pid $dir/ng/nginx.pid;
error_log $dir/ng/error.log warn;
events { worker_connections 256; }
http {
    log_format up '\$request_method \$uri \$upstream_addr \$status';
    access_log $dir/ng/access.log up;
    client_body_temp_path $dir/ng/tmp/body;
    proxy_temp_path $dir/ng/tmp/proxy;
    fastcgi_temp_path $dir/ng/tmp/fastcgi;
    uwsgi_temp_path $dir/ng/tmp/uwsgi;
    scgi_temp_path $dir/ng/tmp/scgi;
    upstream psdbd {
        server 127.0.0.1:${ports[1]} max_fails=1 fail_timeout=30s;
        server 127.0.0.1:${ports[2]} max_fails=1 fail_timeout=30s;
        server 127.0.0.1:${ports[3]} max_fails=1 fail_timeout=30s;
    }
    server {
        listen 127.0.0.1:$port;
        client_max_body_size 0;
        location / {
            proxy_pass http://psdbd;
            proxy_http_version 1.1;
            proxy_request_buffering off;
            proxy_next_upstream error timeout http_502 http_503;
        }
    }
}
CONF
    if "$NGINX" -p "$dir/ng" -c "$dir/ng/nginx.conf" -e "$dir/ng/error.log" >"$dir/ng/start.log" 2>&1; then
        break
    fi
    grep -q 'Address already in use' "$dir/ng/start.log" || fail "nginx: $(cat "$dir/ng/start.log")"
    port=0
done
[ "$port" -gt 0 ] || fail "no free port for nginx"
lb="http://127.0.0.1:$port"

# ---- PSDBs: one application each, so each resolves to exactly one ----
N=14
for i in $(seq 1 $N); do
    "$PSDB" synth --app "Rep$i" --app-version 1.0.0.0 --pipelines 30 --seed "$i" \
        -o "$dir/g$i.sodb" >/dev/null
    "$PSDB" compile "$dir/g$i.sodb" --family gfx1 --abi 1 -o "$dir/g$i.psdb" >/dev/null
done
publish() { # publish I SERVER [SERIAL]: appends I to acked when psdbd acknowledged it
    if "$PSDB" publish --server "$2" --token "$token" --key "$dir/key" --serial "${3:-1}" \
        "$dir/g$1.psdb" >/dev/null 2>>"$dir/publish.log"; then
        echo "$1" >>"$dir/acked"
    fi
}
resolve_sha() { # resolve_sha I SERVER: the sha256 the server resolves for Rep$I
    curl -sS "$2/v1/resolve?app=Rep$1&app_version=1.0.0.0&family=gfx1&abi_min=1&abi_max=1" |
        sed -n 's/.*"sha256": *"\([0-9a-f]*\)".*/\1/p'
}
: >"$dir/acked"

# Spread over the replicas through nginx; each acknowledged publish resolves on every replica.
for i in 1 2 3 4 5 6; do
    publish "$i" "$lb"
    want=$(sha256sum "$dir/g$i.psdb" | cut -d' ' -f1)
    for n in 1 2 3; do
        [ "$(resolve_sha "$i" "http://127.0.0.1:${ports[$n]}")" = "$want" ] ||
            fail "Rep$i published through nginx does not resolve on replica $n"
    done
done
[ "$(wc -l <"$dir/acked")" -eq 6 ] || fail "publishes through nginx failed: $(cat "$dir/publish.log")"
# nginx spread them: every replica took publishes.
for n in 1 2 3; do
    grep "^POST /v1/psdbs" "$dir/ng/access.log" | grep -q " 127.0.0.1:${ports[$n]} 201" ||
        fail "replica $n took no publish: $(cat "$dir/ng/access.log")"
done

# ---- replica 1 SIGKILLed in the middle of publishes, replica 2 stopped ----
(
    for i in $(seq 7 $N); do
        publish "$i" "$lb"
    done
) &
loop=$!
sleep 0.3
kill -KILL "${pids[1]}"
wait "${pids[1]}" 2>/dev/null || true
pids[1]=0
kill -TERM "${pids[2]}"
wait "${pids[2]}" 2>/dev/null || true
pids[2]=0
wait "$loop"
acked=$(wc -l <"$dir/acked")
[ "$acked" -ge 8 ] || fail "only $acked publishes acknowledged"
survivor="http://127.0.0.1:${ports[3]}"
while read -r i; do
    want=$(sha256sum "$dir/g$i.psdb" | cut -d' ' -f1)
    [ "$(resolve_sha "$i" "$survivor")" = "$want" ] || fail "acknowledged Rep$i lost on the survivor"
    [ "$(resolve_sha "$i" "$lb")" = "$want" ] || fail "acknowledged Rep$i lost through nginx"
    curl -sS -o "$dir/dl" "$lb/v1/blobs/$want" || fail "download Rep$i"
    [ "$(sha256sum "$dir/dl" | cut -d' ' -f1)" = "$want" ] || fail "Rep$i: downloaded bytes differ"
done <"$dir/acked"
"$PSDBD" check --data-dir "$data" --index "$url" --deep >"$dir/check.log" 2>&1 ||
    fail "check --deep after the kill: $(cat "$dir/check.log")"

# ---- two gc runs at once: one after the other (advisory lock); every referenced blob stays ----
"$PSDBD" gc --data-dir "$data" --index "$url" --grace 0 >"$dir/gc1.log" 2>&1 &
g1=$!
"$PSDBD" gc --data-dir "$data" --index "$url" --grace 0 >"$dir/gc2.log" 2>&1 &
g2=$!
wait "$g1" || fail "gc 1: $(cat "$dir/gc1.log")"
wait "$g2" || fail "gc 2: $(cat "$dir/gc2.log")"
"$PSDBD" check --data-dir "$data" --index "$url" --deep >"$dir/check.log" 2>&1 ||
    fail "check --deep after two gc runs: $(cat "$dir/check.log")"
grep -q "0 unindexed files, 0 problems" "$dir/check.log" || fail "after gc: $(cat "$dir/check.log")"

# ---- the same blob to two replicas at once (two serials): both 201, one file ----
start 1
i=1
want=$(sha256sum "$dir/g$i.psdb" | cut -d' ' -f1)
publish "$i" "http://127.0.0.1:${ports[1]}" 5 &
a=$!
publish "$i" "$survivor" 6 &
b=$!
wait "$a" "$b"
[ "$(grep -c "^$i\$" "$dir/acked")" -eq 3 ] || fail "the same blob at once: $(cat "$dir/publish.log")"
[ "$(find "$data/blobs" -name "$want" | wc -l)" -eq 1 ] || fail "not exactly one file of $want"
[ -z "$(ls -A "$data/tmp")" ] || fail "uploads left in tmp/: $(ls "$data/tmp")"
rows=$(sql "SELECT count(*) FROM psdbs WHERE sha256 = '$want'" "$db")
[ "$rows" -eq 3 ] || fail "$rows rows name $want, want 3 (serials 1, 5, 6)"

# ---- backup the PostgreSQL way and restore: pg_dump, then the blobs; check, serve ----
pg_dump --format=custom --file="$dir/index.dump" "$url" || fail "pg_dump"
mkdir -p "$dir/restored"
cp -a "$data/blobs" "$dir/restored/blobs"
sql "CREATE DATABASE ${db}_restored" || fail "create the restore database"
pg_restore --no-owner --dbname="$(url_of "${db}_restored")" "$dir/index.dump" ||
    fail "pg_restore"
"$PSDBD" check --data-dir "$dir/restored" --index "$(url_of "${db}_restored")" --deep \
    >"$dir/check.log" 2>&1 || fail "check --deep of the restore: $(cat "$dir/check.log")"
pids[0]=0
line=""
mkfifo "$dir/r0.fifo"
"$PSDBD" --listen 127.0.0.1:0 --data-dir "$dir/restored" --index "$(url_of "${db}_restored")" \
    >"$dir/r0.fifo" 2>"$dir/r0.log" &
pids[0]=$!
exec {fd}<"$dir/r0.fifo"
read -r -t 30 line <&"$fd" || fail "psdbd on the restore did not start"
restored="http://127.0.0.1:${line##*:}"
while read -r i; do
    want=$(sha256sum "$dir/g$i.psdb" | cut -d' ' -f1)
    [ "$(resolve_sha "$i" "$restored")" = "$want" ] || fail "Rep$i missing from the restore"
done <"$dir/acked"
echo "pg_replicas_test: $acked publishes acknowledged, all served after losing two replicas"
