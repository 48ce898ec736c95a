# lib.sh - what the benchmark scripts share, sourced after `say` is defined:
#   bench_work PREFIX                   makes $work, a new directory under $TMPDIR, and $pids, an
#                                       empty list, and traps EXIT: every pid in $pids is stopped
#                                       and $work removed
#   bench_psdbd OUT LOG PSDBD [flags]   starts PSDBD --listen 127.0.0.1:0 [flags], its standard
#                                       output in OUT, its errors appended to LOG, in the background
#                                       (under $BENCH_SERVER_CPUS when set: taskset -c); waits for
#                                       its address; sets bench_pid and bench_url; exits 1 with
#                                       LOG's last lines when it does not start
#   bench_free_port                     prints a free loopback port
#   bench_nginx_conf FILE DIR ROOT PORT [CONNECTIONS]
#                                       writes FILE, an nginx configuration serving ROOT on
#                                       127.0.0.1:PORT (sendfile, no access log, keep-alive without
#                                       limit), its pid and error log under DIR; workers: one per
#                                       CPU of $BENCH_SERVER_CPUS when set, else auto
#   bench_nginx CONF LOG                starts nginx on CONF in the background (under
#                                       $BENCH_SERVER_CPUS when set); sets bench_pid
#   bench_client CMD...                 runs a load generator (under $BENCH_CLIENT_CPUS when set)
#   bench_cpus                          prints how many CPUs the servers may run on
# BENCH_SERVER_CPUS and BENCH_CLIENT_CPUS (taskset lists, e.g. 0 and 1) keep the servers and the
# load generator on separate CPUs, so that a request's latency is the server's and not a wait for
# the client's own core.
# shellcheck shell=bash

# bench_pinned CPUS CMD...: execs CMD, under taskset when CPUS is set (taskset execs CMD in turn):
# run it in a subshell, `(bench_pinned ...) &`, so that $! is CMD's own pid, the one a kill must
# reach (a function run in the background would leave CMD behind when killed).
bench_pinned() {
    local cpus=$1
    shift
    if [ -n "$cpus" ]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi
}

# bench_cpus: the CPUs the servers may run on ($BENCH_SERVER_CPUS's, else all)
bench_cpus() {
    if [ -n "${BENCH_SERVER_CPUS:-}" ]; then taskset -c "$BENCH_SERVER_CPUS" nproc; else nproc; fi
}

bench_work() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/$1-XXXXXX")
    pids=()
    trap bench_cleanup EXIT
}

bench_cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}

bench_psdbd() {
    local out=$1 log=$2 bin=$3
    shift 3
    # Emptied here, not by the redirection below: that one runs in the child, and the wait could
    # read a previous server's address from the file first.
    : >"$out"
    (bench_pinned "${BENCH_SERVER_CPUS:-}" "$bin" --listen 127.0.0.1:0 "$@") >"$out" 2>>"$log" &
    bench_pid=$!
    for _ in $(seq 200); do
        grep -q 'listening on' "$out" 2>/dev/null && break
        kill -0 "$bench_pid" 2>/dev/null || break
        sleep 0.05
    done
    bench_url=$(sed -n 's/^psdbd: listening on //p' "$out")
    [ -n "$bench_url" ] || { say "psdbd did not start: $(tail -3 "$log")"; exit 1; }
}

bench_free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

bench_nginx_conf() {
    local file=$1 dir=$2 www=$3 port=$4 conns=${5:-4096} workers=auto
    [ -z "${BENCH_SERVER_CPUS:-}" ] || workers=$(bench_cpus)
    # Workers run as the invoking user so they can read the blob store's 0640 files.
    cat >"$file" <<CONF
user $(id -un) $(id -gn);
worker_processes $workers;
worker_rlimit_nofile $((3 * conns + 1024));
pid $dir/nginx.pid;
error_log $dir/nginx.error.log;
events { worker_connections $((conns + 1000)); }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    types { application/json json; }
    default_type application/octet-stream;
    server { listen 127.0.0.1:$port; root $www; }
}
CONF
}

bench_nginx() {
    local nginx_bin
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
    (bench_pinned "${BENCH_SERVER_CPUS:-}" "$nginx_bin" -c "$1" -g 'daemon off;') 2>>"$2" &
    bench_pid=$!
}

bench_client() {
    (bench_pinned "${BENCH_CLIENT_CPUS:-}" "$@")
}
