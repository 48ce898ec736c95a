/* server_index_pg_test.c - the PostgreSQL index's sessions: the statements requests run are
 * prepared once per pooled connection and prepared again on a new session (the database
 * restarted) or when the session lost them, the farm's statements too (once each, whatever
 * the number of claims); migration 5 reaches an index of schema version 4.
 * Needs a PostgreSQL cluster (PSDB_TEST_PG_URL, from tests/run or tests/pg/cluster); skips (77)
 * without it. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "index.h"
#include "index_pg_int.h"

static char *pg_db, *pg_url, *maint_url;
static psdbd_index *ix;

/* base?dbname=NAME: a later dbname parameter wins over the URL's database. */
static char *url_for(const char *db)
{
    const char *base = getenv("PSDB_TEST_PG_URL");
    char *u = NULL;
    ck_assert_int_ge(asprintf(&u, "%s%sdbname=%s", base, strchr(base, '?') ? "&" : "?", db), 0);
    return u;
}

/* One statement with psql on url: its first output line (malloc'd, "" for none), NULL when psql
 * failed. */
static char *psql(const char *url, const char *sql)
{
    char *cmd = NULL, *out = NULL, *text = NULL, *dir = tu_mkdtemp(), *file = tu_path(dir, "out");
    ck_assert_int_ge(asprintf(&cmd, "psql -qAt -v ON_ERROR_STOP=1 '%s' -c \"%s\"", url, sql), 0);
    if (tu_run(cmd, file) == 0 && (text = tu_read_file(file, NULL)) != NULL) {
        text[strcspn(text, "\n")] = '\0';
        out = text;
    }
    tu_rmtree(dir);
    free(dir);
    free(file);
    free(cmd);
    return out;
}

/* Ends every session on the test's database, as a restart of the server would. */
static void end_sessions(void)
{
    char *sql = NULL;
    ck_assert_int_ge(asprintf(&sql,
                              "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE datname = '%s' AND pid <> pg_backend_pid()",
                              pg_db),
                     0);
    free(psql(maint_url, sql));
    free(sql);
}

static void connect_index(void)
{
    char err[512];
    /* One pooled connection: the session a resolve ran on is the one the test looks at. */
    ck_assert_msg(psdbd_index_connect(pg_url, 1, 10000, 1, &ix, err, sizeof(err)) == 0, "%s", err);
}

static void setup(void)
{
    char *sql = NULL, *out;
    maint_url = url_for("postgres");
    ck_assert_int_ge(asprintf(&pg_db, "psdbpg_%ld_%ld", (long)getpid(), (long)time(NULL)), 0);
    ck_assert_int_ge(asprintf(&sql, "CREATE DATABASE %s", pg_db), 0);
    ck_assert_ptr_nonnull(out = psql(maint_url, sql));
    free(out);
    free(sql);
    pg_url = url_for(pg_db);
    connect_index();
}

static void teardown(void)
{
    char *sql = NULL;
    psdbd_index_close(ix);
    ix = NULL;
    ck_assert_int_ge(asprintf(&sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", pg_db), 0);
    free(psql(maint_url, sql));
    free(sql);
    free(pg_db);
    free(pg_url);
    free(maint_url);
}

static void publish(uint64_t abi, uint64_t serial, char blob)
{
    psdbd_record r = {0};
    r.app_name = "Game";
    r.exe_filename = "game.exe";
    r.engine_name = "eng";
    r.family = "gfx1";
    r.app_version = 1;
    r.abi_version = abi;
    r.serial = serial;
    r.size = 1000 + serial;
    memset(r.sha256, blob, 64);
    memset(r.key_id, 'k', 64);
    r.signature = "sig";
    r.published_by = "ci";
    ck_assert_int_eq(psdbd_index_publish(ix, &r, NULL), PSDBD_OK);
}

/* The resolve of Game 1 on gfx1, ABI 1..9: its status, and the answer's id and serial in *id
 * and *serial when found. */
static psdbd_rc resolve(int64_t *id, int64_t *serial)
{
    psdbd_query q = {"Game", 1, "gfx1", 1, 9, 0, 0};
    json_t *m = NULL;
    psdbd_rc rc = psdbd_index_resolve(ix, &q, &m);
    if (rc == PSDBD_OK) {
        *id = json_integer_value(json_object_get(m, "id"));
        *serial = json_integer_value(json_object_get(m, "serial"));
        ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "app"), "name")),
                         "Game");
    }
    json_decref(m);
    return rc;
}

/* Runs sql on the pool's one connection, the session requests use: the first row's first
 * column (malloc'd; "" for no row). */
static char *on_pooled_session(const char *sql)
{
    psdbd__pgc c;
    psdbd_rc rc = PSDBD_OK;
    PGresult *res = NULL;
    char *out;
    ck_assert_int_eq(psdbd__pg_get(ix, &c, &rc), 0);
    ck_assert_ptr_nonnull(res = psdbd__pg_exec(ix, &c, sql, NULL, &rc));
    out = xstrdup(PQntuples(res) > 0 && PQnfields(res) > 0 ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    psdbd__pg_put(ix, &c);
    return out;
}

/* The resolve's prepared statement on the pooled session: "executions generic" of psdbd_0 (the
 * resolve, PSDBD__PG_RESOLVE), "" when that session does not hold it. */
static char *resolve_statement(void)
{
    return on_pooled_session("SELECT (generic_plans + custom_plans) || ' ' || generic_plans FROM "
                             "pg_prepared_statements WHERE name = 'psdbd_0'");
}

/* Resolves until the index answers (the prober finds a lost database again within a second). */
static psdbd_rc resolve_when_back(int64_t *id, int64_t *serial)
{
    psdbd_rc rc = PSDBD_UNAVAILABLE;
    for (int i = 0; i < 100 && (rc = resolve(id, serial)) == PSDBD_UNAVAILABLE; i++)
        usleep(50000);
    return rc;
}

START_TEST(test_server_index_pg__resolve_prepared_once_per_session_and_again_after_a_restart)
{
    int64_t id = 0, serial = 0, want = 0;
    char *st;
    ck_assert_int_eq(PSDBD__PG_RESOLVE, 0); /* the name resolve_statement() looks for */
    publish(1, 1, 'a');
    publish(2, 1, 'b');
    publish(2, 2, 'c');
    publish(3, 1, 'd');
    ck_assert_int_eq(resolve(&want, &serial), PSDBD_OK);
    ck_assert_int_eq(serial, 1); /* ABI 3, the largest, wins over ABI 2's serial 2 */
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(resolve(&id, &serial), PSDBD_OK);
        ck_assert_int_eq(id, want);
    }
    /* Prepared once, executed 8 times; PostgreSQL settles on the generic plan after 5 custom
     * ones: no planning per request. */
    st = resolve_statement();
    ck_assert_str_eq(st, "8 3");
    free(st);

    /* The session ends as in a restart of the database: the next statement on it fails
     * (answered 503 once), the pool connects again, and the new session prepares again. */
    end_sessions();
    ck_assert_int_eq(resolve_when_back(&id, &serial), PSDBD_OK);
    ck_assert_int_eq(id, want);
    st = resolve_statement();
    ck_assert_str_eq(st, "1 0");
    free(st);

    /* A session that lost its statements (a DISCARD, a pooler in between): prepared again, the
     * request answered. */
    free(on_pooled_session("DEALLOCATE ALL"));
    st = resolve_statement();
    ck_assert_str_eq(st, "");
    free(st);
    ck_assert_int_eq(resolve(&id, &serial), PSDBD_OK);
    ck_assert_int_eq(id, want);
    st = resolve_statement();
    ck_assert_str_eq(st, "1 0");
    free(st);
}
END_TEST

/* The plan the pooled session runs the resolve with (EXPLAIN of its prepared statement), one
 * line a row (malloc'd). */
static char *resolve_plan(void)
{
    psdbd__pgc c;
    psdbd_rc rc = PSDBD_OK;
    PGresult *res = NULL;
    size_t len = 0, at = 0;
    char *text;
    ck_assert_int_eq(psdbd__pg_get(ix, &c, &rc), 0);
    ck_assert_ptr_nonnull(
        res = psdbd__pg_exec(ix, &c,
                             "EXPLAIN (COSTS OFF) EXECUTE psdbd_0('Game', 1, 'gfx1', 1, 9, "
                             "-9223372036854775808, 9223372036854775807)",
                             NULL, &rc));
    for (int r = 0; r < PQntuples(res); r++)
        len += strlen(PQgetvalue(res, r, 0)) + 1;
    text = xcalloc(1, len + 1);
    for (int r = 0; r < PQntuples(res); r++) {
        size_t n = strlen(PQgetvalue(res, r, 0));
        memcpy(text + at, PQgetvalue(res, r, 0), n);
        text[at + n] = '\n';
        at += n + 1;
    }
    PQclear(res);
    psdbd__pg_put(ix, &c);
    return text;
}

START_TEST(test_server_index_pg__resolve_reads_one_row_of_a_cell_of_many_serials)
{
    /* Forty serials on one ABI among 5,000 rows of other applications: the answer is the
     * newest; the plan is the backward scan of psdbs_resolve_active under the LIMIT, no sort of
     * the cell (a table of a few pages is read whole, rightly: hence the others). */
    int64_t id = 0, serial = 0;
    char *plan;
    for (int s = 1; s <= 40; s++)
        publish(2, (uint64_t)s, (char)('a' + s % 26));
    free(psql(pg_url, "INSERT INTO apps (name, created_at) SELECT 'Other' || g, 0 FROM "
                      "generate_series(1, 200) g"));
    free(psql(pg_url, "INSERT INTO psdbs (app, exe_filename, app_version, engine_name, "
                      "engine_version, app_guid, family, abi_version, compiler_version, "
                      "profile_version, serial, sha256, size, key_id, signature, created_at, "
                      "published_by) SELECT a.id, 'o.exe', v, 'e', 0, "
                      "decode(repeat('00', 16), 'hex'), 'gfx' || f, 1, 0, 0, 1, repeat('a', 64), "
                      "1, repeat('k', 64), 's', 0, 'ci' FROM apps a, generate_series(1, 5) v, "
                      "generate_series(1, 5) f WHERE a.name LIKE 'Other%'"));
    free(on_pooled_session("ANALYZE psdbs"));
    for (int i = 0; i < 6; i++) { /* past PostgreSQL's five custom plans */
        ck_assert_int_eq(resolve(&id, &serial), PSDBD_OK);
        ck_assert_int_eq(serial, 40);
    }
    plan = resolve_plan();
    ck_assert_msg(strstr(plan, "Index Scan Backward using psdbs_resolve_active"), "%s", plan);
    ck_assert_msg(!strstr(plan, "Sort"), "%s", plan);
    free(plan);
}
END_TEST

START_TEST(test_server_index_pg__migration_5_reaches_an_index_of_version_4)
{
    int64_t id = 0, serial = 0, want = 0;
    char *out;
    publish(1, 1, 'a');
    publish(1, 2, 'b');
    ck_assert_int_eq(resolve(&want, &serial), PSDBD_OK);
    psdbd_index_close(ix);
    ix = NULL;
    /* The index as psdbd of schema version 4 left it. */
    free(psql(pg_url, "DROP INDEX psdbs_resolve_active"));
    free(psql(pg_url, "UPDATE psdbd_schema SET version = 4"));
    connect_index();
    ck_assert_int_eq(psdbd_index_schema_version(ix), 5);
    out = psql(pg_url, "SELECT version FROM psdbd_schema");
    ck_assert_str_eq(out, "5");
    free(out);
    out = psql(pg_url, "SELECT indexdef FROM pg_indexes WHERE indexname = 'psdbs_resolve_active'");
    ck_assert_ptr_nonnull(strstr(out, "WHERE (retired_at IS NULL)"));
    free(out);
    ck_assert_int_eq(resolve(&id, &serial), PSDBD_OK);
    ck_assert_int_eq(id, want);
    ck_assert_int_eq(serial, 2);
}
END_TEST

/* ---- the farm's statements ----------------------------------------------------------------- */

static int unavailable; /* the farm operations answered 503 (retried by FARM_OK) */

/* Runs a farm operation, again while it answers 503 (the prober finds a lost database again
 * within a second; each answer counted in `unavailable`), and checks that it answered OK. */
#define FARM_OK(call)                                                                              \
    do {                                                                                           \
        psdbd_rc rc_ = PSDBD_UNAVAILABLE;                                                          \
        for (int i_ = 0; i_ < 100 && (rc_ = (call)) == PSDBD_UNAVAILABLE; i_++) {                  \
            unavailable++;                                                                         \
            usleep(50000);                                                                         \
        }                                                                                          \
        ck_assert_msg(rc_ == PSDBD_OK, "%s answered %d", #call, (int)rc_);                         \
    } while (0)

/* One job's life for application App<n>, each step through the farm's statements: its SODB
 * published, a worker's announce queues the job, the worker claims it, extends the lease,
 * publishes the PSDB and reports the job done. */
static void farm_cycle(int n)
{
    char app[32];
    psdbd_sodb_record s = {0};
    psdbd_record r = {0};
    psdbd_farm_target t = {"w1", "gfx1", 1, 1, 0};
    json_t *sodb = NULL, *claim = NULL, *psdb = NULL;
    int64_t created = 0, expires = 0, seconds = 0, job, psdb_id;
    const char *lease;
    snprintf(app, sizeof(app), "App%d", n);
    s.app_name = app;
    s.exe_filename = "app.exe";
    s.engine_name = "eng";
    s.app_version = 1;
    s.serial = 1;
    s.size = 100;
    snprintf(s.sha256, sizeof(s.sha256), "%064d", n);
    memset(s.key_id, 'k', 64);
    s.signature = "sig";
    s.published_by = "studio";
    FARM_OK(psdbd_index_sodb_publish(ix, &s, &sodb));
    FARM_OK(psdbd_index_worker_announce(ix, &t, "*", &created));
    ck_assert_int_eq(created, 1);
    FARM_OK(psdbd_index_job_claim(ix, &t, "*", 60, 3, &claim));
    job = json_integer_value(json_object_get(json_object_get(claim, "job"), "id"));
    lease = json_string_value(json_object_get(claim, "lease"));
    ck_assert_ptr_nonnull(lease);
    FARM_OK(psdbd_index_job_extend(ix, job, lease, 120, &expires));
    ck_assert_int_gt(expires, 0);
    r.app_name = app;
    r.exe_filename = "app.exe";
    r.engine_name = "eng";
    r.family = "gfx1";
    r.app_version = 1;
    r.abi_version = 1;
    r.compiler_version = 1;
    r.serial = 1;
    r.size = 1000;
    memset(r.sha256, 'c', 64);
    memset(r.key_id, 'k', 64);
    r.signature = "sig";
    r.published_by = "w1";
    r.statement_version = 2;
    memcpy(r.sodb_sha256, s.sha256, sizeof(r.sodb_sha256));
    FARM_OK(psdbd_index_publish(ix, &r, &psdb));
    psdb_id = json_integer_value(json_object_get(psdb, "id"));
    FARM_OK(psdbd_index_job_done(ix, job, lease, psdb_id, &seconds));
    json_decref(sodb);
    json_decref(claim);
    json_decref(psdb);
}

/* The farm's statements the pooled session holds: "count executions", 0 0 for none. */
static char *farm_statements(void)
{
    return on_pooled_session("SELECT count(*) || ' ' || coalesce(sum(generic_plans + "
                             "custom_plans), 0) FROM pg_prepared_statements WHERE name LIKE "
                             "'psdbd\\_f%'");
}

START_TEST(test_server_index_pg__farm_statements_prepared_once_per_session)
{
    long n1 = 0, n2 = 0, runs1 = 0, runs2 = 0;
    char *st, *dup;
    farm_cycle(0);
    st = farm_statements();
    ck_assert_int_eq(sscanf(st, "%ld %ld", &n1, &runs1), 2);
    free(st);
    /* Every statement of the cycle prepared: none runs as text, parsed and planned anew. */
    ck_assert_int_ge(n1, 10);
    ck_assert_int_ge(runs1, n1);
    for (int i = 1; i <= 5; i++)
        farm_cycle(i);
    st = farm_statements();
    ck_assert_int_eq(sscanf(st, "%ld %ld", &n2, &runs2), 2);
    free(st);
    /* The same statements, run again: none prepared anew per call, each text once. */
    ck_assert_int_eq(n2, n1);
    ck_assert_int_ge(runs2, runs1 * 6);
    dup = on_pooled_session("SELECT count(*) FROM (SELECT statement FROM pg_prepared_statements "
                            "GROUP BY statement HAVING count(*) > 1) d");
    ck_assert_str_eq(dup, "0");
    free(dup);
    ck_assert_int_eq(unavailable, 0);
}
END_TEST

START_TEST(test_server_index_pg__farm_prepared_again_after_a_restart_or_a_discard)
{
    long n = 0, runs = 0;
    char *st;
    farm_cycle(0);
    /* The session ends as in a restart of the database: the farm answers 503 until the prober
     * finds the database again, the pool connects again and the new session prepares the farm's
     * statements again. */
    end_sessions();
    farm_cycle(1);
    st = farm_statements();
    ck_assert_int_eq(sscanf(st, "%ld %ld", &n, &runs), 2);
    free(st);
    ck_assert_int_ge(n, 10);

    /* A session that lost its statements (a DISCARD, a pooler in between): the farm's
     * transaction that met it aborted, answered 503 once, and its connection was closed; the
     * next session prepares again. */
    free(on_pooled_session("DEALLOCATE ALL"));
    unavailable = 0;
    farm_cycle(2);
    ck_assert_int_le(unavailable, 1);
    st = farm_statements();
    ck_assert_int_eq(sscanf(st, "%ld %ld", &n, &runs), 2);
    free(st);
    ck_assert_int_ge(n, 10);
    farm_cycle(3);
    ck_assert_int_le(unavailable, 1);

    /* A session that lost one statement but holds the others: still one 503, not a session
     * whose preparations fail (42P05) because psdbd took it to have lost them all. */
    free(on_pooled_session("DEALLOCATE psdbd_f1"));
    unavailable = 0;
    farm_cycle(4);
    farm_cycle(5);
    ck_assert_int_le(unavailable, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_index_pg");
    TCase *tc = tcase_create("sessions");
    if (!getenv("PSDB_TEST_PG_URL")) {
        printf("server_index_pg_test: skipped: PSDB_TEST_PG_URL is not set "
               "(eval \"$(tests/pg/cluster start)\")\n");
        return 77;
    }
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(
        tc, test_server_index_pg__resolve_prepared_once_per_session_and_again_after_a_restart);
    tcase_add_test(tc, test_server_index_pg__resolve_reads_one_row_of_a_cell_of_many_serials);
    tcase_add_test(tc, test_server_index_pg__migration_5_reaches_an_index_of_version_4);
    tcase_add_test(tc, test_server_index_pg__farm_statements_prepared_once_per_session);
    tcase_add_test(tc, test_server_index_pg__farm_prepared_again_after_a_restart_or_a_discard);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
