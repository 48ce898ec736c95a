/* index_pg.c - the psdbd index's PostgreSQL engine: a bounded connection pool, migrations under
 * an advisory lock, and reading failures (a lost database is 503 until it answers again). The
 * queries are in index_pg_queries.c.
 *
 * DESIGN
 * Replicas share one database; each psdbd holds a pool of at most `pool` connections, opened when
 * first needed. An operation borrows one connection for its statements and gives it back, so the
 * pool bounds what a psdbd asks of the server, not how many worker threads it has: a thread that
 * finds every connection busy waits up to the statement timeout, then answers 503. Every
 * connection runs with statement_timeout, so a stuck database never pins every worker. A
 * connection that broke (the server restarted, the network went) is closed when given back; the
 * next borrower connects again, so psdbd recovers without a restart. While no connection can be
 * made, psdbd_index_lost is true and /readyz answers 503.
 *
 * A stopped server (SIGSTOP, a frozen VM, a network that drops packets) enforces no
 * statement_timeout and refuses no connection: libpq's blocking calls would wait for the whole
 * outage. So psdbd never blocks in libpq: it connects with PQconnectStartParams/PQconnectPoll and
 * sends each statement with PQsendQueryParams or PQsendQueryPrepared, then polls the socket until
 * a deadline, the statement timeout (plus PG_DEADLINE_GRACE_MS, so that a live server's own
 * timeout, which keeps the connection, comes first). An operation's deadline starts when it asks
 * for a connection: the wait for a pool slot, connecting and its first statement (with its
 * preparation, where the session needs one) share it, so a request answers 503
 * within the timeout however the time was lost. Past the deadline the connection is closed, never
 * pooled again, and the database marked lost (the epoch too: the idle connections are as stuck).
 * There is no PQcancel: libpq 15's waits for the postmaster to close the cancel connection, which
 * a stopped one never does; the server's own statement_timeout ends the statement once it runs
 * again, and the backend exits when it finds its client gone. While the database is lost, every
 * operation answers 503 at once, and a thread of the index's own (the prober) tries the database
 * four times a second until a statement is answered, which marks it back: a request never waits on
 * a lost database, and none queues behind another's wait (libmicrohttpd's pool threads each serve
 * their own connections, so a worker held by a probe would hold its other clients too).
 *
 * The statements requests run are prepared once per pooled connection (psdbd__pg_exec_stmt): a
 * bit per statement and slot says which the slot's session holds, cleared whenever the slot gets
 * another connection, so a reconnect prepares again on first use; a session that lost one anyway
 * (SQLSTATE 26000) has it prepared again, once. Parsing and planning each resolve was most of
 * the server's work for it (deploy/SCALING.md 3.5). The farm's statements (psdbd__pg_exec_farm)
 * share those bits: they have no enum (index_farm.c writes them once for both engines), so each
 * distinct text gets a number on first use, in a table of the index bounded at PG_FARM_STMTS, and
 * the text, not its address, is the key. They run inside transactions, where a lost statement
 * has aborted the transaction already: that operation answers 503 and its connection is closed,
 * so the next one's new session prepares again.
 *
 * Writes are single transactions; concurrent publishes of one identity meet at the unique index
 * psdbs_identity, where the second waits for the first and then fails with a unique violation
 * (a conflict: 409, or the first one's manifest when the bytes are the same). Migrations run in
 * one transaction under pg_advisory_lock(PG_LOCK_CLASS, PG_LOCK_MIGRATE), so replicas starting
 * together migrate once; gc runs under the session lock (PG_LOCK_CLASS, PG_LOCK_GC). */
#include "index_pg_int.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#include "common/status_map.h"

/* Advisory lock keys: the class is the index's application_id ('PSDI'). */
#define PG_LOCK_CLASS "1347634249"
#define PG_LOCK_MIGRATE "1"
#define PG_LOCK_GC "2"
#define PG_CONNECT_TIMEOUT_S "5"
#define PG_POOL_WAIT_MS_DEFAULT 10000
#define PG_DEADLINE_GRACE_MS 500
#define PROBE_EVERY_MS 250L
/* The farm's distinct statements that are prepared (index_farm.c has about 50), and the bits a
 * slot keeps for them and the requests' (psdbd__pg_stmt). */
#define PG_FARM_STMTS 128
#define PG_PREPARED_WORDS ((PSDBD__PG_STMTS + PG_FARM_STMTS + 63) / 64)

struct psdbd__pg {
    char *url;  /* as given: libpq reads it */
    char *name; /* the URL without its password: for messages */
    unsigned timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned size;
    PGconn **conns; /* size slots; NULL: not connected */
    unsigned char *busy;
    /* Per slot, bit k: statement k is prepared on the slot's connection, the requests' first
     * (k = a psdbd__pg_stmt), then the farm's (k = PSDBD__PG_STMTS + its number in farm_sql).
     * Only the thread that holds the slot touches it, and it is cleared whenever the slot's
     * connection is replaced: a new session has no prepared statements. */
    uint64_t (*prepared)[PG_PREPARED_WORDS];
    /* The farm's statements met so far, numbered in the order first run: a copy of each text
     * (compared whole, so a text is its own key whatever its address). Appended under mu, read
     * without it up to farm_n (published after the entry is written); PG_FARM_STMTS at most,
     * so a caller that built its SQL at run time cannot grow it: past it, texts run unprepared. */
    struct {
        char *sql;
        size_t len;
    } farm_sql[PG_FARM_STMTS];
    atomic_size_t farm_n;
    atomic_int farm_full; /* logged once */
    /* A lost connection usually means every idle one is lost too (the server restarted): each
     * loss bumps the epoch, and an idle connection from an older epoch is replaced before use,
     * so a restart costs one failed request, not one per pooled connection. */
    atomic_uint epoch;
    unsigned *conn_epoch;
    atomic_int down; /* the last connection attempt failed or a query lost its connection */
    /* The prober: woken (probe_cv, under mu) when the database is lost, it tries it until it
     * answers. */
    pthread_t prober;
    int probing;
    pthread_cond_t probe_cv;
    atomic_int probe_stop;
    pthread_key_t pin; /* a thread's snapshot connection (PGconn *) */
    PGconn *gc_conn;   /* the session that holds the gc lock */
    /* psdbd_index_watch's thread */
    pthread_t watcher;
    int watching;
    atomic_int stop;
    void (*changed)(void);
};

/* The URL with any password left out, for messages and logs: the user's ":password" and, when a
 * parameter names one, the whole query. */
static char *redact(const char *url)
{
    const char *scheme = strstr(url, "://"), *at, *colon, *query;
    char *out;
    if (!scheme)
        return xstrdup("(postgresql key=value connection string)");
    scheme += 3;
    query = strchr(scheme, '?');
    at = memchr(scheme, '@', query ? (size_t)(query - scheme) : strlen(scheme));
    colon = at ? memchr(scheme, ':', (size_t)(at - scheme)) : NULL;
    out = colon ? xasprintf("%.*s%s", (int)(colon - url), url, at) : xstrdup(url);
    if (strstr(out, "password=") && (query = strchr(out + (scheme - url), '?')) != NULL)
        out[query - out] = '\0';
    return out;
}

/* One trimmed line of libpq's message (they end in newlines, some have several lines). */
static const char *one_line(const char *msg, char *buf, size_t size)
{
    size_t n = 0;
    if (!msg || !*msg)
        return "no message";
    while (msg[n] && msg[n] != '\n' && n + 1 < size) {
        buf[n] = msg[n];
        n++;
    }
    buf[n] = '\0';
    return buf;
}

static void set_down(psdbd_index *ix, int down, const char *why)
{
    char line[256];
    if (atomic_exchange(&ix->pg->down, down) == down)
        return;
    if (down) {
        psdbd_log("index %s cannot be reached (%s): index reads and writes are refused (503) "
                  "until it answers again",
                  ix->pg->name, one_line(why, line, sizeof(line)));
        pthread_mutex_lock(&ix->pg->mu);
        pthread_cond_signal(&ix->pg->probe_cv);
        pthread_mutex_unlock(&ix->pg->mu);
    } else {
        psdbd_log("index %s answers again", ix->pg->name);
    }
}

static int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* When a statement started now must have answered: 0 (no limit) without a statement timeout. */
static int64_t pg_deadline(const struct psdbd__pg *pg)
{
    return pg->timeout_ms ? now_ms() + pg->timeout_ms + PG_DEADLINE_GRACE_MS : 0;
}

/* Waits until c's socket is ready for `events` or until_ms (CLOCK_MONOTONIC; <= 0: no limit)
 * passes: 1 ready, 0 the time passed, -1 the socket failed. */
static int wait_socket(PGconn *c, short events, int64_t until_ms)
{
    struct pollfd p = {PQsocket(c), events, 0};
    int n;
    if (p.fd < 0)
        return -1;
    do {
        int64_t left = until_ms > 0 ? until_ms - now_ms() : -1;
        if (until_ms > 0 && left <= 0)
            return 0;
        n = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
    } while (n < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED));
    return n < 0 ? -1 : n > 0;
}

/* What one round trip sends: a statement's text (simple protocol, or extended with parameters),
 * the preparation of a named statement, or the execution of a prepared one. */
struct pg_call {
    enum { CALL_SIMPLE, CALL_PARAMS, CALL_PREPARE, CALL_PREPARED } op;
    const char *name; /* CALL_PREPARE, CALL_PREPARED */
    const char *sql;  /* CALL_SIMPLE, CALL_PARAMS, CALL_PREPARE */
    const psdbd__pgp *p;
};

static int pg_send(PGconn *c, const struct pg_call *call)
{
    const psdbd__pgp *p = call->p;
    switch (call->op) {
    case CALL_SIMPLE:
        return PQsendQuery(c, call->sql);
    case CALL_PARAMS:
        return PQsendQueryParams(c, call->sql, p->n, NULL, p->v, p->len, p->fmt, 0);
    case CALL_PREPARE:
        /* No types: each parameter's is inferred from the statement, as for CALL_PARAMS. */
        return PQsendPrepare(c, call->name, call->sql, 0, NULL);
    case CALL_PREPARED:
        return PQsendQueryPrepared(c, call->name, p->n, p->v, p->len, p->fmt, 0);
    }
    return 0;
}

/* Sends call on c and waits for the answer until until_ms (<= 0: no limit). Returns the first
 * failed result, else the last one; NULL when c failed, or with *expired set when the time passed
 * (c is then useless: close it). */
static PGresult *pg_run_call(PGconn *c, const struct pg_call *call, int64_t until_ms, int *expired)
{
    PGresult *res = NULL, *r;
    int flushed, w = 1;
    *expired = 0;
    if (!c || !pg_send(c, call))
        return NULL;
    /* Nonblocking: what the socket does not take now is flushed as it drains. */
    while ((flushed = PQflush(c)) == 1 && (w = wait_socket(c, POLLIN | POLLOUT, until_ms)) > 0)
        if (!PQconsumeInput(c))
            return NULL;
    if (flushed != 0) {
        *expired = w == 0;
        return NULL;
    }
    for (;;) {
        while (PQisBusy(c)) {
            if ((w = wait_socket(c, POLLIN, until_ms)) <= 0) {
                *expired = w == 0;
                PQclear(res);
                return NULL;
            }
            if (!PQconsumeInput(c) && PQstatus(c) != CONNECTION_OK) {
                PQclear(res);
                return NULL;
            }
        }
        if (!(r = PQgetResult(c)))
            break;
        ExecStatusType st = PQresultStatus(r);
        if (res && PQresultStatus(res) == PGRES_FATAL_ERROR) {
            PQclear(r); /* the first failure is the answer, as PQexec's */
        } else {
            PQclear(res);
            res = r;
        }
        if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH)
            break; /* no statement of psdbd copies; PQgetResult would not end */
    }
    return res;
}

/* Runs sql (p NULL: the simple protocol, several statements allowed) on c: pg_run_call. */
static PGresult *pg_run(PGconn *c, const char *sql, const psdbd__pgp *p, int64_t until_ms,
                        int *expired)
{
    const struct pg_call call = {p ? CALL_PARAMS : CALL_SIMPLE, NULL, sql, p};
    return pg_run_call(c, &call, until_ms, expired);
}

/* One line of what failed on c: its message, or that it did not answer in time. */
static const char *run_error(const struct psdbd__pg *pg, PGconn *c, int expired, char *buf,
                             size_t size)
{
    if (expired) {
        snprintf(buf, size, "no answer within %u ms (the server is stopped or unreachable)",
                 pg->timeout_ms + PG_DEADLINE_GRACE_MS);
        return buf;
    }
    return one_line(c ? PQerrorMessage(c) : NULL, buf, size);
}

/* The connection_timeout libpq settled on for c (the URL's, else PG_CONNECT_TIMEOUT_S), in ms;
 * 0: none. */
static int64_t connect_timeout_ms(PGconn *c)
{
    PQconninfoOption *opts = PQconninfo(c);
    uint64_t s = 0;
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "connect_timeout") == 0 && o->val &&
            psdb__parse_u64(o->val, &s) != 0)
            s = 0;
    PQconninfoFree(opts);
    return s > INT32_MAX ? INT32_MAX : (int64_t)s * 1000;
}

/* A new connection, nonblocking, with the statement timeout set, made by until_ms (<= 0: within
 * connect_timeout alone); NULL with err. */
static PGconn *pg_connect(struct psdbd__pg *pg, int64_t until_ms, char *err, size_t err_size)
{
    /* connect_timeout first: a value in the URL overrides it (expand_dbname). PQconnectPoll does
     * not enforce it: the loop below does. */
    const char *const keys[] = {"connect_timeout", "dbname", NULL};
    const char *const vals[] = {PG_CONNECT_TIMEOUT_S, pg->url, NULL};
    char line[256], *set = NULL;
    PGresult *res = NULL;
    int expired = 0, w = 1;
    int64_t limit, bound, started = now_ms();
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    PGconn *c = PQconnectStartParams(keys, vals, 1);
    if (!c) {
        snprintf(err, err_size, "connect to %s: out of memory", pg->name);
        goto fail;
    }
    limit = until_ms;
    if ((bound = connect_timeout_ms(c)) > 0 && (limit <= 0 || started + bound < limit))
        limit = started + bound;
    while (PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED &&
           (w = wait_socket(c, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, limit)) > 0)
        st = PQconnectPoll(c);
    if (PQstatus(c) != CONNECTION_OK) {
        if (w == 0)
            snprintf(err, err_size,
                     "connect to %s: no answer within %lld ms (the server is stopped or "
                     "unreachable)",
                     pg->name, (long long)(now_ms() - started));
        else
            snprintf(err, err_size, "connect to %s: %s", pg->name,
                     one_line(PQerrorMessage(c), line, sizeof(line)));
        goto fail;
    }
    if (PQsetnonblocking(c, 1) != 0) {
        snprintf(err, err_size, "connect to %s: cannot make the connection nonblocking", pg->name);
        goto fail;
    }
    set =
        xasprintf("SET statement_timeout = %u; SET client_min_messages = warning", pg->timeout_ms);
    res = pg_run(c, set, NULL, until_ms > 0 ? until_ms : pg_deadline(pg), &expired);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        snprintf(err, err_size, "configure connection to %s: %s", pg->name,
                 run_error(pg, c, expired, line, sizeof(line)));
        goto fail;
    }
    PQclear(res);
    free(set);
    return c;
fail:
    PQclear(res);
    free(set);
    PQfinish(c);
    return NULL;
}

int psdbd__pg_get(psdbd_index *ix, psdbd__pgc *c, psdbd_rc *rc)
{
    struct psdbd__pg *pg = ix->pg;
    PGconn *pinned = pthread_getspecific(pg->pin);
    struct timespec until;
    unsigned wait_ms = pg->timeout_ms ? pg->timeout_ms : PG_POOL_WAIT_MS_DEFAULT;
    char err[512];
    int slot = -1;
    c->conn = NULL;
    c->slot = -1;
    c->until_ms = pg_deadline(pg);
    if (pinned) {
        c->conn = pinned;
        return 0;
    }
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&pg->mu);
    for (;;) {
        /* A connected free slot first: a fresh one costs a connection. */
        for (unsigned i = 0; i < pg->size && slot < 0; i++)
            if (!pg->busy[i] && pg->conns[i])
                slot = (int)i;
        for (unsigned i = 0; i < pg->size && slot < 0; i++)
            if (!pg->busy[i])
                slot = (int)i;
        if (slot >= 0 || pthread_cond_timedwait(&pg->cv, &pg->mu, &until) == ETIMEDOUT)
            break;
    }
    if (slot >= 0)
        pg->busy[slot] = 1;
    pthread_mutex_unlock(&pg->mu);
    if (slot < 0) {
        psdbd_log("index %s: all %u pool connections stayed busy for %u ms (index-pool)", pg->name,
                  pg->size, wait_ms);
        *rc = PSDBD_UNAVAILABLE;
        return -1;
    }
    c->slot = slot;
    /* While the database is lost the prober finds out whether it is back: no request waits. */
    if (atomic_load(&pg->down)) {
        psdbd__pg_put(ix, c);
        *rc = PSDBD_UNAVAILABLE;
        return -1;
    }
    /* Only this thread touches a busy slot's connection. */
    if (pg->conns[slot] && (PQstatus(pg->conns[slot]) != CONNECTION_OK ||
                            pg->conn_epoch[slot] != atomic_load(&pg->epoch))) {
        PQfinish(pg->conns[slot]);
        pg->conns[slot] = NULL;
    }
    if (!pg->conns[slot]) {
        pg->conn_epoch[slot] = atomic_load(&pg->epoch);
        memset(pg->prepared[slot], 0, sizeof(pg->prepared[slot]));
    }
    if (!pg->conns[slot] && !(pg->conns[slot] = pg_connect(pg, c->until_ms, err, sizeof(err)))) {
        set_down(ix, 1, err);
        psdbd__pg_put(ix, c);
        *rc = PSDBD_UNAVAILABLE;
        return -1;
    }
    c->conn = pg->conns[slot];
    return 0;
}

void psdbd__pg_put(psdbd_index *ix, psdbd__pgc *c)
{
    struct psdbd__pg *pg = ix->pg;
    if (c->slot < 0)
        return;
    PGconn *conn = pg->conns[c->slot];
    PGresult *res = NULL;
    int expired = 0, drop = conn && PQstatus(conn) != CONNECTION_OK;
    if (conn && !drop && PQtransactionStatus(conn) != PQTRANS_IDLE) {
        res = pg_run(conn, "ROLLBACK", NULL, pg_deadline(pg), &expired);
        /* A transaction that cannot be ended must not reach the next borrower. */
        drop = PQresultStatus(res) != PGRES_COMMAND_OK;
    }
    if (drop) {
        PQfinish(conn);
        pg->conns[c->slot] = NULL;
        memset(pg->prepared[c->slot], 0, sizeof(pg->prepared[c->slot]));
    }
    PQclear(res);
    pthread_mutex_lock(&pg->mu);
    pg->busy[c->slot] = 0;
    pthread_cond_signal(&pg->cv);
    pthread_mutex_unlock(&pg->mu);
    c->slot = -1;
    c->conn = NULL;
}

int64_t psdbd__pg_int(const char *s)
{
    uint64_t v = 0;
    int neg = s[0] == '-';
    if (psdb__parse_u64(s + neg, &v) != 0 || v > (uint64_t)INT64_MAX + (uint64_t)neg)
        return 0;
    /* -v without overflow for v = 2^63. */
    return neg ? (int64_t)(0 - v) : (int64_t)v;
}

void psdbd__pgp_text(psdbd__pgp *p, const char *s)
{
    assert(p->n < PSDBD__PG_MAX_PARAMS); /* every query's parameters fit the table */
    p->v[p->n] = s ? s : "";
    p->len[p->n] = 0;
    p->fmt[p->n] = 0;
    p->n++;
}

void psdbd__pgp_i64(psdbd__pgp *p, int64_t v)
{
    assert(p->n < PSDBD__PG_MAX_PARAMS);
    snprintf(p->num[p->n], sizeof(p->num[p->n]), "%" PRId64, v);
    psdbd__pgp_text(p, p->num[p->n]);
}

void psdbd__pgp_null(psdbd__pgp *p)
{
    psdbd__pgp_text(p, NULL);
    p->v[p->n - 1] = NULL;
}

void psdbd__pgp_bytes(psdbd__pgp *p, const void *b, size_t n)
{
    psdbd__pgp_text(p, b);
    p->len[p->n - 1] = (int)n;
    p->fmt[p->n - 1] = 1;
}

psdbd_rc psdbd__pg_rc_of(psdbd_index *ix, PGconn *conn, const PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    char line[256];
    const char *msg =
        one_line(res ? PQresultErrorMessage(res) : PQerrorMessage(conn), line, sizeof(line));
    if (!conn || PQstatus(conn) != CONNECTION_OK) {
        atomic_fetch_add(&ix->pg->epoch, 1);
        set_down(ix, 1, conn ? PQerrorMessage(conn) : "no connection");
        return PSDBD_UNAVAILABLE;
    }
    if (state && strcmp(state, "23505") == 0)
        return PSDBD_CONFLICT;
    if (state && strcmp(state, "53100") == 0) {
        psdbd_log("index %s: %s", ix->pg->name, msg);
        return PSDBD_FULL;
    }
    /* 57014: statement timeout (or cancel); 57P0x: shutting down; 53300: too many connections;
     * 08xxx: connection exceptions; 40001/40P01: serialization failure, deadlock (retry). */
    if (state && (strcmp(state, "57014") == 0 || strncmp(state, "57P", 3) == 0 ||
                  strcmp(state, "53300") == 0 || strncmp(state, "08", 2) == 0 ||
                  strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0)) {
        psdbd_log("index %s: %s (SQLSTATE %s): answered 503", ix->pg->name, msg, state);
        return PSDBD_UNAVAILABLE;
    }
    psdbd_log("index %s: %s%s%s", ix->pg->name, msg, state ? ", SQLSTATE " : "",
              state ? state : "");
    return PSDBD_ERROR;
}

/* c's connection did not answer in time, or its session lost a statement inside a transaction:
 * closed now, wherever it came from (a pool slot, the thread's snapshot, the gc lock's session),
 * so that nothing sends on it again. */
static void drop_connection(psdbd_index *ix, psdbd__pgc *c)
{
    struct psdbd__pg *pg = ix->pg;
    if (c->slot >= 0) {
        pg->conns[c->slot] = NULL; /* only this thread touches a busy slot */
        memset(pg->prepared[c->slot], 0, sizeof(pg->prepared[c->slot]));
    } else if (pthread_getspecific(pg->pin) == c->conn)
        pthread_setspecific(pg->pin, NULL);
    else if (pg->gc_conn == c->conn)
        pg->gc_conn = NULL;
    PQfinish(c->conn);
    c->conn = NULL;
}

/* Runs call on c within the operation's deadline (psdbd__pg_exec). *missing (may be NULL): the
 * call named a prepared statement the session does not hold (SQLSTATE 26000: a pooler between
 * psdbd and the server, or a DISCARD), returned as NULL with *rc unset and nothing logged, so
 * that the caller prepares it and runs it again. */
static PGresult *exec_call(psdbd_index *ix, psdbd__pgc *c, const struct pg_call *call, psdbd_rc *rc,
                           int *missing)
{
    struct psdbd__pg *pg = ix->pg;
    int64_t until = c->until_ms > 0 ? c->until_ms : c->until_ms == 0 ? pg_deadline(pg) : 0;
    int expired = 0;
    char why[160];
    const char *state;
    PGresult *res;
    if (c->until_ms > 0)
        c->until_ms = 0; /* the operation's deadline covered its first statement; each next one
                          * has the statement timeout of its own */
    if (!c->conn) {
        *rc = PSDBD_UNAVAILABLE; /* dropped by an earlier statement of this operation */
        return NULL;
    }
    res = pg_run_call(c->conn, call, until, &expired);
    ExecStatusType s = PQresultStatus(res);
    if (res && (s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK)) {
        if (atomic_load(&pg->down))
            set_down(ix, 0, NULL);
        return res;
    }
    if (expired) {
        drop_connection(ix, c);
        atomic_fetch_add(&pg->epoch, 1); /* the idle connections wait on the same server */
        run_error(pg, NULL, 1, why, sizeof(why));
        psdbd_log("index %s: %s: the connection is closed, answered 503", pg->name, why);
        set_down(ix, 1, why);
        *rc = PSDBD_UNAVAILABLE;
        return NULL;
    }
    if (missing && res && PQstatus(c->conn) == CONNECTION_OK &&
        (state = PQresultErrorField(res, PG_DIAG_SQLSTATE)) != NULL &&
        strcmp(state, "26000") == 0) {
        *missing = 1;
        PQclear(res);
        return NULL;
    }
    *rc = psdbd__pg_rc_of(ix, c->conn, res);
    PQclear(res);
    return NULL;
}

PGresult *psdbd__pg_exec(psdbd_index *ix, psdbd__pgc *c, const char *sql, const psdbd__pgp *p,
                         psdbd_rc *rc)
{
    static const psdbd__pgp none; /* the extended protocol: one statement, as with parameters */
    const struct pg_call call = {CALL_PARAMS, NULL, sql, p ? p : &none};
    return exec_call(ix, c, &call, rc, NULL);
}

/* Runs the statement k (the bit of pg->prepared), named `name` on the server, with the text sql,
 * on c's pooled connection: prepared first where c's session does not hold it yet (the
 * preparation and the execution share the operation's deadline), prepared again once where the
 * session lost it (SQLSTATE 26000). Inside a transaction that loss has aborted the transaction,
 * so nothing can run again in it: the connection is closed (the next user's new session prepares
 * what it runs) and the operation answers 503. */
static PGresult *exec_prepared(psdbd_index *ix, psdbd__pgc *c, unsigned k, const char *name,
                               const char *sql, const psdbd__pgp *p, psdbd_rc *rc)
{
    static const psdbd__pgp none;
    struct psdbd__pg *pg = ix->pg;
    uint64_t *word = &pg->prepared[c->slot][k / 64], bit = UINT64_C(1) << (k % 64);
    PGresult *res = NULL;
    int64_t until = c->until_ms;
    assert(c->slot >= 0 && k < PSDBD__PG_STMTS + PG_FARM_STMTS);
    /* Twice at most: a statement the session lost (missing) is prepared again once. */
    for (int attempt = 0; attempt < 2; attempt++) {
        int missing = 0;
        if (!(*word & bit)) {
            const struct pg_call prep = {CALL_PREPARE, name, sql, NULL};
            if (!(res = exec_call(ix, c, &prep, rc, NULL)))
                break;
            PQclear(res);
            res = NULL;
            /* The preparation is part of the statement: both share the operation's deadline,
             * so a frozen server still answers 503 within it (pg_freeze_test). */
            c->until_ms = until;
            *word |= bit;
        }
        const struct pg_call run = {CALL_PREPARED, name, NULL, p ? p : &none};
        if ((res = exec_call(ix, c, &run, rc, &missing)) != NULL || !missing)
            break;
        *word &= ~bit;
        if (PQtransactionStatus(c->conn) == PQTRANS_INERROR) {
            /* Which others it lost is unknown, and preparing one it still holds would fail
             * (42P05) and abort the next transaction: a new session holds none. */
            psdbd_log("index %s: prepared statement %s vanished from its session inside a "
                      "transaction (a DISCARD, a pooler in transaction mode?): the connection is "
                      "closed, answered 503",
                      pg->name, name);
            drop_connection(ix, c);
            *rc = PSDBD_UNAVAILABLE;
            break;
        }
        if (attempt == 1) {
            psdbd_log("index %s: prepared statement %s vanished twice from its session (a "
                      "pooler in transaction mode?)",
                      pg->name, name);
            *rc = PSDBD_ERROR;
        }
    }
    return res;
}

PGresult *psdbd__pg_exec_stmt(psdbd_index *ix, psdbd__pgc *c, psdbd__pg_stmt st,
                              const psdbd__pgp *p, psdbd_rc *rc)
{
    char name[24];
    assert(st < PSDBD__PG_STMTS);
    /* A connection outside the pool (a snapshot's, gc's) lives for one job: the text serves. */
    if (c->slot < 0)
        return psdbd__pg_exec(ix, c, psdbd__pg_stmt_sql[st], p, rc);
    snprintf(name, sizeof(name), "psdbd_%u", (unsigned)st);
    return exec_prepared(ix, c, (unsigned)st, name, psdbd__pg_stmt_sql[st], p, rc);
}

/* The farm statement sql's number in pg->farm_sql, given one on first use; -1 when the table is
 * full (logged once). */
static int farm_number(struct psdbd__pg *pg, const char *sql)
{
    size_t len = strlen(sql), n = atomic_load_explicit(&pg->farm_n, memory_order_acquire), i;
    int k = -1, full = 0;
    for (i = 0; i < n && k < 0; i++)
        if (pg->farm_sql[i].len == len && memcmp(pg->farm_sql[i].sql, sql, len) == 0)
            k = (int)i;
    if (k >= 0)
        return k;
    pthread_mutex_lock(&pg->mu);
    /* Another thread may have added it since: only mu's holder appends. */
    n = atomic_load_explicit(&pg->farm_n, memory_order_relaxed);
    for (; i < n && k < 0; i++)
        if (pg->farm_sql[i].len == len && memcmp(pg->farm_sql[i].sql, sql, len) == 0)
            k = (int)i;
    if (k < 0 && n < PG_FARM_STMTS) {
        pg->farm_sql[n].sql = xstrdup(sql);
        pg->farm_sql[n].len = len;
        atomic_store_explicit(&pg->farm_n, n + 1, memory_order_release);
        k = (int)n;
    }
    full = k < 0 && !atomic_exchange(&pg->farm_full, 1);
    pthread_mutex_unlock(&pg->mu);
    if (full)
        psdbd_log("index %s: more than %d distinct farm statements: the others run unprepared",
                  pg->name, PG_FARM_STMTS);
    return k;
}

PGresult *psdbd__pg_exec_farm(psdbd_index *ix, psdbd__pgc *c, const char *sql, const psdbd__pgp *p,
                              psdbd_rc *rc)
{
    char name[24];
    int k = c->slot >= 0 ? farm_number(ix->pg, sql) : -1;
    if (k < 0)
        return psdbd__pg_exec(ix, c, sql, p, rc);
    snprintf(name, sizeof(name), "psdbd_f%d", k);
    return exec_prepared(ix, c, PSDBD__PG_STMTS + (unsigned)k, name, sql, p, rc);
}

int psdbd__pg_lost(psdbd_index *ix)
{
    return atomic_load(&ix->pg->down);
}

/* Brings the schema up to date on c, under the migration lock held by the caller. *expired: a
 * statement went unanswered (c is useless). */
static int migrate(psdbd_index *ix, PGconn *c, int may_create, int *expired, char *err,
                   size_t err_size)
{
    struct psdbd__pg *pg = ix->pg;
    PGresult *res = NULL;
    char line[256], *set = NULL;
    long long app_id = 0, version = 0;
    int rc = -1;
#define PG_RUN(sql, want)                                                                          \
    (PQclear(res), res = pg_run(c, (sql), NULL, pg_deadline(pg), expired),                         \
     PQresultStatus(res) == (want))
    if (!PG_RUN("BEGIN", PGRES_COMMAND_OK) ||
        !PG_RUN("CREATE TABLE IF NOT EXISTS psdbd_schema (application_id BIGINT NOT NULL, "
                "version INTEGER NOT NULL)",
                PGRES_COMMAND_OK) ||
        !PG_RUN("SELECT application_id, version FROM psdbd_schema", PGRES_TUPLES_OK)) {
        snprintf(err, err_size, "index %s: read the schema version: %s", pg->name,
                 run_error(pg, c, *expired, line, sizeof(line)));
        goto cleanup;
    }
    if (PQntuples(res) > 1) {
        snprintf(err, err_size, "index %s: psdbd_schema has %d rows, not one: not a psdbd index",
                 pg->name, PQntuples(res));
        goto cleanup;
    }
    if (PQntuples(res) == 1) {
        app_id = psdbd__pg_int(PQgetvalue(res, 0, 0));
        version = psdbd__pg_int(PQgetvalue(res, 0, 1));
    }
    if (PQntuples(res) == 1 && app_id != PSDBD_INDEX_APPLICATION_ID) {
        snprintf(err, err_size, "index %s is not a psdbd index (application_id 0x%08llx)", pg->name,
                 app_id);
        goto cleanup;
    }
    if (version == 0 && !may_create) {
        snprintf(err, err_size,
                 "index %s holds no psdbd index and the blob store is not new: restore the "
                 "database (pg_restore, deploy/SCALING.md), or point psdbd at the right one",
                 pg->name);
        goto cleanup;
    }
    if (version < 0 || (unsigned long long)version > psdbd_num_migrations) {
        snprintf(err, err_size,
                 "index %s has schema version %lld, newer than this psdbd knows (%zu): upgrade "
                 "psdbd",
                 pg->name, version, psdbd_num_migrations);
        goto cleanup;
    }
    for (size_t i = (size_t)version; i < psdbd_num_migrations; i++) {
        const psdb__sql_file *f = &psdbd_index_migrations.files[i];
        /* The dialect's own file where there is one, else the shared one. */
        for (size_t j = 0; j < psdbd_index_pg_migrations.count; j++)
            if (strcmp(psdbd_index_pg_migrations.files[j].name, f->name) == 0)
                f = &psdbd_index_pg_migrations.files[j];
        if (!PG_RUN(f->sql, PGRES_COMMAND_OK)) {
            snprintf(err, err_size, "index %s: migration %s: %s", pg->name, f->name,
                     run_error(pg, c, *expired, line, sizeof(line)));
            goto cleanup;
        }
    }
    set = xasprintf(version == 0
                        ? "INSERT INTO psdbd_schema (application_id, version) VALUES (%u, %zu)"
                        : "UPDATE psdbd_schema SET application_id = %u, version = %zu",
                    (unsigned)PSDBD_INDEX_APPLICATION_ID, psdbd_num_migrations);
    if (!PG_RUN(set, PGRES_COMMAND_OK) || !PG_RUN("COMMIT", PGRES_COMMAND_OK)) {
        snprintf(err, err_size, "index %s: record the schema version: %s", pg->name,
                 run_error(pg, c, *expired, line, sizeof(line)));
        goto cleanup;
    }
    if ((size_t)version < psdbd_num_migrations)
        psdbd_log("index %s: migrated from schema version %lld to %zu", pg->name, version,
                  psdbd_num_migrations);
    rc = 0;
cleanup:
#undef PG_RUN
    PQclear(res);
    if (rc != 0 && !*expired && PQtransactionStatus(c) != PQTRANS_IDLE) {
        int late = 0;
        PQclear(pg_run(c, "ROLLBACK", NULL, pg_deadline(pg), &late));
        *expired = late;
    }
    free(set);
    return rc;
}

/* The prober (see DESIGN): asleep while the database answers; while it is lost, a connection and
 * one statement every PROBE_EVERY_MS, each within the statement deadline, until one is answered. */
static void *probe_main(void *arg)
{
    psdbd_index *ix = arg;
    struct psdbd__pg *pg = ix->pg;
    char err[256];
    pthread_mutex_lock(&pg->mu);
    while (!atomic_load(&pg->probe_stop)) {
        if (!atomic_load(&pg->down)) {
            pthread_cond_wait(&pg->probe_cv, &pg->mu);
            continue;
        }
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        at.tv_nsec += PROBE_EVERY_MS * 1000000L;
        if (at.tv_nsec >= 1000000000L) {
            at.tv_sec++;
            at.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&pg->probe_cv, &pg->mu, &at);
        if (atomic_load(&pg->probe_stop))
            break;
        pthread_mutex_unlock(&pg->mu);
        int64_t until = pg_deadline(pg);
        if (!until)
            until = now_ms() + 5000;
        PGconn *c = pg_connect(pg, until, err, sizeof(err));
        int expired = 0;
        PGresult *res = c ? pg_run(c, "SELECT 1", NULL, until, &expired) : NULL;
        if (res && PQresultStatus(res) == PGRES_TUPLES_OK) {
            /* Connections pooled before the loss are as stuck as the lost one. */
            atomic_fetch_add(&pg->epoch, 1);
            set_down(ix, 0, NULL);
        }
        PQclear(res);
        PQfinish(c);
        pthread_mutex_lock(&pg->mu);
    }
    pthread_mutex_unlock(&pg->mu);
    return NULL;
}

int psdbd_index_connect(const char *url, unsigned pool, unsigned statement_timeout_ms,
                        int may_create, psdbd_index **out, char *err, size_t err_size)
{
    psdbd_index *ix = xcalloc(1, sizeof(*ix));
    struct psdbd__pg *pg = xcalloc(1, sizeof(*pg));
    PGconn *c = NULL;
    PGresult *res = NULL;
    char line[256];
    int rc = -1, locked = 0, expired = 0;
    ix->ops = &psdbd__pg_ops;
    ix->pg = pg;
    pg->url = xstrdup(url);
    pg->name = redact(url);
    pg->timeout_ms = statement_timeout_ms;
    pg->size = pool ? pool : PSDBD_INDEX_PG_POOL_DEFAULT;
    pg->conns = xcalloc(pg->size, sizeof(*pg->conns));
    pg->busy = xcalloc(pg->size, 1);
    pg->prepared = xcalloc(pg->size, sizeof(*pg->prepared));
    pg->conn_epoch = xcalloc(pg->size, sizeof(*pg->conn_epoch));
    pthread_mutex_init(&pg->mu, NULL);
    pthread_cond_init(&pg->cv, NULL);
    pthread_cond_init(&pg->probe_cv, NULL);
    pg->probing = pthread_create(&pg->prober, NULL, probe_main, ix) == 0;
    pthread_key_create(&pg->pin, NULL);
    if (!(c = pg_connect(pg, 0, err, err_size)))
        goto cleanup;
    /* The migration lock is a session lock: it outlives the transaction that migrates, and a
     * psdbd killed while holding it releases it with its connection. Waiting for another
     * replica's migration is bounded by the statement timeout, as any statement. */
    res = pg_run(c, "SELECT pg_advisory_lock(" PG_LOCK_CLASS ", " PG_LOCK_MIGRATE ")", NULL,
                 pg_deadline(pg), &expired);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        snprintf(err, err_size, "index %s: take the migration lock: %s", pg->name,
                 run_error(pg, c, expired, line, sizeof(line)));
        goto cleanup;
    }
    locked = 1;
    if (migrate(ix, c, may_create, &expired, err, err_size) != 0)
        goto cleanup;
    ix->version = (int)psdbd_num_migrations;
    rc = 0;
cleanup:
    PQclear(res);
    res = NULL;
    if (locked && !expired) {
        res = pg_run(c, "SELECT pg_advisory_unlock(" PG_LOCK_CLASS ", " PG_LOCK_MIGRATE ")", NULL,
                     pg_deadline(pg), &expired);
        if (rc == 0 && PQresultStatus(res) != PGRES_TUPLES_OK) {
            snprintf(err, err_size, "index %s: release the migration lock: %s", pg->name,
                     run_error(pg, c, expired, line, sizeof(line)));
            rc = -1;
        }
        PQclear(res);
    }
    if (rc == 0) {
        pg->conns[0] = c; /* joins the pool: the first request need not connect */
    } else {
        PQfinish(c);
        psdbd__pg_close(ix);
        ix = NULL;
    }
    *out = ix;
    return rc;
}

static void *watch_main(void *arg)
{
    psdbd_index *ix = arg;
    struct psdbd__pg *pg = ix->pg;
    PGconn *c = NULL;
    PGresult *res = NULL;
    PGnotify *n;
    char err[512];
    int listening = 0, warned = 0, expired = 0;
    while (!atomic_load(&pg->stop)) {
        if (!listening) {
            /* Missed notifications, or none can be received: nothing cached may be trusted. */
            pg->changed();
            PQfinish(c);
            c = pg_connect(pg, 0, err, sizeof(err));
            res =
                c ? pg_run(c, "LISTEN " PSDBD__PG_CHANNEL, NULL, pg_deadline(pg), &expired) : NULL;
            listening = res && PQresultStatus(res) == PGRES_COMMAND_OK;
            PQclear(res);
            res = NULL;
            if (!listening) {
                if (c)
                    run_error(pg, c, expired, err, sizeof(err));
                if (!warned++)
                    psdbd_log("index %s: cannot listen for other replicas' changes (%s): the "
                              "resolve cache is off until it can",
                              pg->name, err);
                for (int i = 0; i < 10 && !atomic_load(&pg->stop); i++)
                    usleep(100000);
                continue;
            }
            if (warned)
                psdbd_log("index %s: listening for other replicas' changes again", pg->name);
            warned = 0;
            pg->changed();
        }
        if (wait_socket(c, POLLIN, now_ms() + 200) < 0 || !PQconsumeInput(c)) {
            listening = 0;
            continue;
        }
        while ((n = PQnotifies(c)) != NULL) {
            pg->changed();
            PQfreemem(n);
        }
    }
    PQfinish(c);
    return NULL;
}

int psdbd__pg_watch(psdbd_index *ix, void (*changed)(void), char *err, size_t err_size)
{
    struct psdbd__pg *pg = ix->pg;
    int e;
    if (pg->watching) {
        snprintf(err, err_size, "index %s: already watched", pg->name);
        return -1;
    }
    pg->changed = changed;
    if ((e = pthread_create(&pg->watcher, NULL, watch_main, ix)) != 0) {
        snprintf(err, err_size, "index %s: start the change listener: %s", pg->name, strerror(e));
        return -1;
    }
    pg->watching = 1;
    return 0;
}

void psdbd__pg_close(psdbd_index *ix)
{
    struct psdbd__pg *pg = ix->pg;
    if (pg->probing) {
        pthread_mutex_lock(&pg->mu);
        atomic_store(&pg->probe_stop, 1);
        pthread_cond_signal(&pg->probe_cv);
        pthread_mutex_unlock(&pg->mu);
        pthread_join(pg->prober, NULL);
    }
    if (pg->watching) {
        atomic_store(&pg->stop, 1);
        pthread_join(pg->watcher, NULL);
    }
    for (unsigned i = 0; i < pg->size; i++)
        PQfinish(pg->conns[i]);
    PQfinish(pthread_getspecific(pg->pin));
    PQfinish(pg->gc_conn);
    pthread_key_delete(pg->pin);
    pthread_cond_destroy(&pg->cv);
    pthread_cond_destroy(&pg->probe_cv);
    pthread_mutex_destroy(&pg->mu);
    free(pg->conns);
    free(pg->busy);
    free(pg->prepared);
    for (size_t i = 0; i < atomic_load(&pg->farm_n); i++)
        free(pg->farm_sql[i].sql);
    free(pg->conn_epoch);
    free(pg->url);
    free(pg->name);
    free(pg);
    free(ix);
}

int psdbd__pg_ping(psdbd_index *ix)
{
    static const char sql[] = "SELECT application_id, version, (SELECT count(*) FROM apps) "
                              "FROM psdbd_schema";
    psdbd__pgc c;
    psdbd_rc rc;
    PGresult *res = NULL;
    int result = -1;
    if (psdbd__pg_get(ix, &c, &rc) != 0)
        return -1;
    if (!(res = psdbd__pg_exec(ix, &c, sql, NULL, &rc)))
        goto cleanup;
    if (PQntuples(res) == 1 && psdbd__pg_int(PQgetvalue(res, 0, 0)) == PSDBD_INDEX_APPLICATION_ID &&
        psdbd__pg_int(PQgetvalue(res, 0, 1)) == ix->version)
        result = 0;
    else
        psdbd_log("index %s: psdbd_schema does not say this psdbd's index (schema version %d)",
                  ix->pg->name, ix->version);
cleanup:
    PQclear(res);
    psdbd__pg_put(ix, &c);
    return result;
}

psdbd_rc psdbd__pg_snapshot(psdbd_index *ix, int begin)
{
    struct psdbd__pg *pg = ix->pg;
    PGconn *pinned = pthread_getspecific(pg->pin);
    psdbd__pgc c = {NULL, -1, 0};
    psdbd_rc rc = PSDBD_OK;
    char err[512];
    PGresult *res = NULL;
    if (!begin) {
        if (pinned) {
            c.conn = pinned;
            res = psdbd__pg_exec(ix, &c, "COMMIT", NULL, &rc);
            PQfinish(c.conn); /* NULL when the COMMIT went unanswered: closed already */
            pthread_setspecific(pg->pin, NULL);
        }
        PQclear(res);
        return rc;
    }
    /* A connection of its own, outside the pool: a long check never holds a slot. */
    if (pinned || !(c.conn = pg_connect(pg, 0, err, sizeof(err)))) {
        if (!pinned)
            set_down(ix, 1, err);
        return pinned ? PSDBD_ERROR : PSDBD_UNAVAILABLE;
    }
    if (!(res = psdbd__pg_exec(ix, &c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", NULL,
                               &rc))) {
        PQfinish(c.conn);
        return rc;
    }
    PQclear(res);
    pthread_setspecific(pg->pin, c.conn);
    return PSDBD_OK;
}

psdbd_rc psdbd__pg_gc_lock(psdbd_index *ix, int lock)
{
    struct psdbd__pg *pg = ix->pg;
    psdbd__pgc c = {NULL, -1, 0};
    psdbd_rc rc = PSDBD_OK;
    char err[512];
    PGresult *res = NULL;
    if (!lock) {
        if (pg->gc_conn) {
            c.conn = pg->gc_conn;
            res = psdbd__pg_exec(
                ix, &c, "SELECT pg_advisory_unlock(" PG_LOCK_CLASS ", " PG_LOCK_GC ")", NULL, &rc);
            PQfinish(pg->gc_conn);
            pg->gc_conn = NULL;
        }
        PQclear(res);
        return rc;
    }
    if (pg->gc_conn)
        return PSDBD_OK;
    if (!(c.conn = pg_connect(pg, 0, err, sizeof(err)))) {
        set_down(ix, 1, err);
        return PSDBD_UNAVAILABLE;
    }
    /* Waits for another replica's gc: no statement timeout on this one, on either side. */
    if (!(res = psdbd__pg_exec(ix, &c, "SET statement_timeout = 0", NULL, &rc))) {
        PQfinish(c.conn);
        return rc;
    }
    PQclear(res);
    c.until_ms = -1;
    if (!(res = psdbd__pg_exec(ix, &c, "SELECT pg_advisory_lock(" PG_LOCK_CLASS ", " PG_LOCK_GC ")",
                               NULL, &rc))) {
        PQfinish(c.conn);
        return rc;
    }
    PQclear(res);
    pg->gc_conn = c.conn;
    return PSDBD_OK;
}

psdbd_rc psdbd__pg_integrity(psdbd_index *ix, int deep, void (*fn)(const char *msg, void *ctx),
                             void *ctx)
{
    /* PostgreSQL checks its own pages (data checksums, amcheck are the operator's); what psdbd
     * can see is that the schema is its own and every table answers. */
    static const char *const tables[] = {"apps", "blobs", "psdbs", "tokens", "keys"};
    psdbd__pgc c;
    psdbd_rc rc = PSDBD_OK, qrc;
    PGresult *res = NULL;
    char *sql = NULL, msg[256];
    if (psdbd__pg_ping(ix) != 0) {
        fn("psdbd_schema does not name this psdbd's schema version", ctx);
        rc = PSDBD_ERROR;
    }
    if (psdbd__pg_get(ix, &c, &qrc) != 0)
        return qrc;
    for (size_t i = 0; deep && i < sizeof(tables) / sizeof(tables[0]); i++) {
        sql = xasprintf("SELECT count(*) FROM %s", tables[i]);
        if (!(res = psdbd__pg_exec(ix, &c, sql, NULL, &qrc))) {
            snprintf(msg, sizeof(msg), "table %s cannot be read", tables[i]);
            fn(msg, ctx);
            rc = qrc;
        }
        PQclear(res);
        res = NULL;
        free(sql);
        sql = NULL;
    }
    psdbd__pg_put(ix, &c);
    return rc;
}
