# pg_lib.sh - the PostgreSQL cluster of a benchmark, sourced after `root` (the source tree) is set:
#   bench_pg_start DIR   the cluster PSDB_TEST_PG_URL names, else a private one started under DIR/pg
#                        (tests/pg/cluster; own_cluster set); sets pg_sep, the URL's separator
#   pg_url_for DB        the URL of database DB on that cluster
#   pg_sql DB SQL        one statement on database DB, quiet, rows unaligned
#   bench_pg_stop        stops the private cluster, if one was started
# shellcheck shell=bash
own_cluster=""
pg_sep='?'
bench_pg_start() {
    if [ -z "${PSDB_TEST_PG_URL:-}" ]; then
        own_cluster="$1/pg"
        chmod 755 "$1" # as root the cluster runs as postgres, which must reach its directory
        local env
        env=$("$root/tests/pg/cluster" start "$own_cluster") || return 1
        eval "$env"
    fi
    case "$PSDB_TEST_PG_URL" in *\?*) pg_sep='&' ;; esac
}
pg_url_for() { echo "${PSDB_TEST_PG_URL}${pg_sep}dbname=$1"; }
pg_sql() { psql -qAt -v ON_ERROR_STOP=1 "$(pg_url_for "$1")" -c "$2"; }
bench_pg_stop() {
    if [ -n "$own_cluster" ]; then "$root/tests/pg/cluster" stop "$own_cluster"; fi
}
