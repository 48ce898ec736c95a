#!/usr/bin/env bash
# pg_bench.sh - the PostgreSQL index's figures in deploy/SCALING.md §3.5: /v1/resolve requests/s of
# one psdbd on PostgreSQL against one on SQLite (resolve cache on, as always), three replicas behind
# nginx against one replica behind the same nginx, and the publish of a 1 GiB PSDB on either index.
# Medians of PSDB_BENCH_ROUNDS rounds (default 3), ratios; it never fails for speed.
# Usage: tests/bench/pg_bench.sh [BUILD_DIR]   (default build/bench; configured with PSDB_BENCH=ON)
# Env: PSDB_BENCH_SECONDS (per wrk run, default 5), PSDB_BENCH_MIB (default 1024),
#      PSDB_TEST_PG_URL (a cluster; without it one is started with tests/pg/cluster).
# Needs wrk, nginx, curl, psql.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/bench}
secs=${PSDB_BENCH_SECONDS:-5}
mib=${PSDB_BENCH_MIB:-1024}
rounds=${PSDB_BENCH_ROUNDS:-3}
say() { printf '%s\n' "$*"; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPSDB_BENCH=ON >/dev/null
cmake --build "$build" -j2 --target psdbd psdb_tool bench_server_mkpsdb >/dev/null
psdb=$build/psdb
psdbd=$build/psdbd
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

work=$(mktemp -d "${TMPDIR:-/tmp}/psdbd-pgbench-XXXXXX")
. "$root/tests/bench/pg_lib.sh"
bench_pg_start "$work" || exit 1
db="psdbbench_$$"
pg_url=$(pg_url_for "$db")
sql() { pg_sql postgres "$1"; }
pids=()
cleanup() {
    [ -f "$work/ng/nginx.pid" ] && "$nginx_bin" -p "$work/ng" -c "$work/ng/nginx.conf" -s stop 2>/dev/null || true
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    sql "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
    bench_pg_stop
    rm -rf "$work"
}
trap cleanup EXIT
sql "CREATE DATABASE $db"

# start NAME DATA_DIR [FLAGS...]: psdbd on a free port; sets $base.
start() {
    local name=$1 data=$2 line=""
    shift 2
    mkfifo "$work/$name.fifo"
    "$psdbd" --listen 127.0.0.1:0 --data-dir "$data" --threads 4 --max-upload 4G \
        --log-requests false "$@" >"$work/$name.fifo" 2>>"$work/$name.log" &
    pids+=($!)
    exec {fd}<"$work/$name.fifo"
    read -r -t 30 line <&"$fd"
    base=${line#psdbd: listening on }
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
rps() { # rps URL: requests/s of one wrk run
    wrk -t2 -c32 -d"${secs}s" "$1" >"$work/wrk.out" 2>&1
    grep -q 'Non-2xx' "$work/wrk.out" && say "  (non-2xx answers: $(grep Non-2xx "$work/wrk.out"))" >&2
    awk '$1 == "Requests/sec:" { print $2 }' "$work/wrk.out"
}

say "machine: $(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)), load $(cut -d' ' -f1-3 /proc/loadavg)"
say "psdbd: $("$psdbd" --version), 4 threads each; PostgreSQL $(psql -V | awk '{print $3}') on the same cores (unix socket)"

# ---- the same PSDBs in a SQLite and a PostgreSQL data directory ----
"$psdb" synth --app Bench --app-version 1.0.0.0 --pipelines 40 -o "$work/s.sodb" >/dev/null
"$psdb" compile "$work/s.sodb" --family gfx1 --abi 1 -o "$work/s.psdb" >/dev/null
"$psdb" keygen -o "$work/key" >/dev/null
for e in sqlite pg; do
    idx=()
    [ "$e" = pg ] && idx=(--index "$pg_url")
    "$psdbd" token create --data-dir "$work/$e" "${idx[@]}" --role publisher --name b >"$work/$e.token"
    "$psdbd" key add --data-dir "$work/$e" "${idx[@]}" --name b --public-key "$work/key.pub" >/dev/null
done
start sqlite "$work/sqlite"
sq_base=$base
start pg "$work/pg" --index "$pg_url"
pg_base=$base
for b in "$sq_base" "$pg_base"; do
    t=$work/sqlite.token
    [ "$b" = "$pg_base" ] && t=$work/pg.token
    "$psdb" publish --server "$b" --token "$(cat "$t")" --key "$work/key" "$work/s.psdb" >/dev/null
done
q="/v1/resolve?app=Bench&app_version=1.0.0.0&family=gfx1&abi_min=1&abi_max=1"

say "resolve, one psdbd: wrk -t2 -c32 -d${secs}s, $rounds rounds alternating"
: >"$work/r.sqlite"
: >"$work/r.pg"
for _ in $(seq "$rounds"); do
    rps "$sq_base$q" >>"$work/r.sqlite"
    rps "$pg_base$q" >>"$work/r.pg"
done
r_sq=$(median <"$work/r.sqlite")
r_pg=$(median <"$work/r.pg")

# ---- three PostgreSQL replicas behind nginx against one behind the same nginx ----
start pg2 "$work/pg" --index "$pg_url"
pg2_base=$base
start pg3 "$work/pg" --index "$pg_url"
pg3_base=$base
mkdir -p "$work/ng/tmp"
nport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
nport1=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/ng/nginx.conf" <<CONF
user $(id -un) $(id -gn);
worker_processes 2;
pid $work/ng/nginx.pid;
error_log $work/ng/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/ng/tmp/body;
    proxy_temp_path $work/ng/tmp/proxy;
    fastcgi_temp_path $work/ng/tmp/fastcgi;
    uwsgi_temp_path $work/ng/tmp/uwsgi;
    scgi_temp_path $work/ng/tmp/scgi;
    upstream three { server ${pg_base#http://}; server ${pg2_base#http://}; server ${pg3_base#http://}; keepalive 64; }
    upstream one { server ${pg_base#http://}; keepalive 64; }
    server { listen 127.0.0.1:$nport; location / { proxy_pass http://three; proxy_http_version 1.1; proxy_set_header Connection ""; } }
    server { listen 127.0.0.1:$nport1; location / { proxy_pass http://one; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
CONF
"$nginx_bin" -p "$work/ng" -c "$work/ng/nginx.conf" -e "$work/ng/error.log"
say "resolve through nginx (no nginx cache): 3 replicas against 1, $rounds rounds alternating"
: >"$work/r.three"
: >"$work/r.one"
for _ in $(seq "$rounds"); do
    rps "http://127.0.0.1:$nport$q" >>"$work/r.three"
    rps "http://127.0.0.1:$nport1$q" >>"$work/r.one"
done
r_three=$(median <"$work/r.three")
r_one=$(median <"$work/r.one")

# ---- publish of a large PSDB: a new serial each round, alternating engines ----
say "publish of a $mib MiB PSDB, $rounds rounds alternating"
"$build/tests/bench_server_mkpsdb" "$work/big.psdb" "$mib" BigBench
: >"$work/p.sqlite"
: >"$work/p.pg"
for i in $(seq "$rounds"); do
    for e in sqlite pg; do
        b=$sq_base
        [ "$e" = pg ] && b=$pg_base
        t0=$(date +%s.%N)
        "$psdb" publish --server "$b" --token "$(cat "$work/$e.token")" --key "$work/key" \
            --serial "$i" "$work/big.psdb" >/dev/null
        t1=$(date +%s.%N)
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' >>"$work/p.$e"
    done
done
p_sq=$(median <"$work/p.sqlite")
p_pg=$(median <"$work/p.pg")

say ""
say "| measure | PostgreSQL | SQLite / one replica | ratio | target |"
say "|---|---|---|---|---|"
say "| resolve req/s, one psdbd (resolve cache on) | $r_pg | $r_sq | $(ratio "$r_pg" "$r_sq") | >= 0.5 |"
say "| resolve req/s through nginx, 3 replicas vs 1 (2 cores for everything) | $r_three | $r_one | $(ratio "$r_three" "$r_one") | report |"
say "| publish of a $mib MiB PSDB, seconds (ratio: SQLite time / PostgreSQL time) | $p_pg | $p_sq | $(ratio "$p_sq" "$p_pg") | >= 0.9 |"
say "rounds: resolve sqlite $(tr '\n' ' ' <"$work/r.sqlite")/ pg $(tr '\n' ' ' <"$work/r.pg")/ three $(tr '\n' ' ' <"$work/r.three")/ one $(tr '\n' ' ' <"$work/r.one")"
say "rounds: publish sqlite $(tr '\n' ' ' <"$work/p.sqlite")/ pg $(tr '\n' ' ' <"$work/p.pg")"
