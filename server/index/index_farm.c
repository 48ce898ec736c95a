/* index_farm.c - the compile farm's index (schema/INDEX.md, Farm): published SODBs, the job queue
 * with its leases, and the workers, written once over the engines' two farm primitives
 * (index_int.h: a transaction and one statement in it).
 *
 * DESIGN
 * Every change is one transaction, so a job is never seen half-changed. A claim first lists the
 * candidates without locking them, then takes them one by one with a statement that re-checks
 * the row's state and, on PostgreSQL, locks it with FOR UPDATE SKIP LOCKED: two replicas claiming
 * at once skip each other's row rather than wait for it, and a row another claim already took no
 * longer matches. On SQLite the transaction is BEGIN IMMEDIATE: one writer at a time, so the
 * re-check is enough. The lease operations (extend, done, fail) change a row only where its lease
 * is the caller's (an UPDATE ... WHERE lease = $n), so a worker whose lease expired and was taken
 * by another gets lease_lost, whichever replica it asks. Unsigned 64-bit numbers are stored with
 * the top bit flipped (psdbd_u64_to_db), as in psdbs. */
#include "index_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/rand.h>

#include "common.h"

#define I64(v)                                                                                     \
    {                                                                                              \
        PSDBD__ARG_I64, (int64_t)(v), NULL, 0                                                      \
    }
#define U64(v)                                                                                     \
    {                                                                                              \
        PSDBD__ARG_I64, psdbd_u64_to_db(v), NULL, 0                                                \
    }
#define TXT(v)                                                                                     \
    {                                                                                              \
        PSDBD__ARG_TEXT, 0, (v), 0                                                                 \
    }
#define NUL_                                                                                       \
    {                                                                                              \
        PSDBD__ARG_NULL, 0, NULL, 0                                                                \
    }
#define NARGS(a) (sizeof(a) / sizeof((a)[0]))
#define RUN(tx, sql, args, fn, ctx) run(tx, sql, args, NARGS(args), fn, ctx)

static psdbd_rc run(psdbd__tx *tx, const char *sql, const psdbd__arg *args, size_t n,
                    psdbd__row_fn fn, void *ctx)
{
    return tx->ix->ops->farm_run(tx, sql, args, n, fn, ctx);
}

static int is_pg(const psdbd__tx *tx)
{
    return strcmp(tx->ix->ops->engine, "postgresql") == 0;
}

/* ---- rows -------------------------------------------------------------------------------------
 */

struct one {
    int found;
    int64_t v[4];
    char text[4][80];
};

/* The first row: up to 4 numbers, and the same columns' text (cut to 79 bytes). */
static int one_row(const psdbd__row *row, void *ctx)
{
    struct one *o = ctx;
    o->found = 1;
    for (int i = 0; i < 4; i++) {
        o->v[i] = row->i64(row->row, i);
        snprintf(o->text[i], sizeof(o->text[i]), "%s", row->text(row->row, i));
    }
    return 1;
}

static json_t *version_json(const psdbd__row *row, int i)
{
    char buf[32];
    return json_string(
        psdb__format_version(psdbd_u64_from_db(row->i64(row->row, i)), buf, sizeof(buf)));
}

static json_t *time_json(const psdbd__row *row, int i)
{
    char when[40];
    if (row->is_null(row->row, i))
        return json_null();
    return json_string(psdbd_format_time(row->i64(row->row, i), when, sizeof(when)));
}

static json_t *text_or_null(const psdbd__row *row, int i)
{
    return row->is_null(row->row, i) ? json_null() : json_string(row->text(row->row, i));
}

#define SODB_COLS                                                                                  \
    "s.id, a.name, s.exe_filename, s.app_version, s.engine_name, s.engine_version, s.app_guid, "   \
    "s.serial, s.sha256, s.size, s.key_id, s.signature, s.created_at, s.retired_at "               \
    "FROM sodbs s JOIN apps a ON a.id = s.app "

/* The SODB manifest (schema/HTTP.md, Farm) of a row selected with SODB_COLS. */
static json_t *sodb_manifest_of(const psdbd__row *row)
{
    char uuid[40], url[96];
    uint8_t guid[16] = {0};
    void *rw = row->row;
    if (row->blob(rw, 6, guid, sizeof(guid)) != 16)
        memset(guid, 0, sizeof(guid));
    snprintf(url, sizeof(url), "/v1/blobs/%s", row->text(rw, 8));
    json_t *app = json_pack("{s:s?, s:s?, s:o, s:s?, s:o, s:s}", "name", row->text(rw, 1),
                            "exe_filename", row->text(rw, 2), "version", version_json(row, 3),
                            "engine_name", row->text(rw, 4), "engine_version", version_json(row, 5),
                            "app_id", psdb__format_uuid(guid, uuid, sizeof(uuid)));
    json_t *m = json_pack("{s:I, s:s, s:s, s:I, s:s, s:o*, s:I, s:o, s:s, s:s, s:b}", "id",
                          (json_int_t)row->i64(rw, 0), "kind", "sodb", "sha256", row->text(rw, 8),
                          "size", (json_int_t)row->i64(rw, 9), "url", url, "app", app, "serial",
                          (json_int_t)psdbd_u64_from_db(row->i64(rw, 7)), "created_at",
                          time_json(row, 12), "key_id", row->text(rw, 10), "signature",
                          row->text(rw, 11), "retired", !row->is_null(rw, 13));
    if (!m)
        psdbd_out_of_memory();
    if (!row->is_null(rw, 13))
        json_object_set_new(m, "retired_at", time_json(row, 13));
    return m;
}

static int sodb_rows(const psdbd__row *row, void *ctx)
{
    json_array_append_new(ctx, sodb_manifest_of(row));
    return 0;
}

#define JOB_COLS                                                                                   \
    "j.id, j.state, a.name, s.app_version, s.sha256, s.id, j.family, j.abi_min, j.abi_max, "       \
    "j.profile_version, j.demand, j.attempts, j.last_error, j.worker, j.lease_expires, "           \
    "j.psdb_id, j.created_at, j.updated_at "                                                       \
    "FROM jobs j JOIN sodbs s ON s.id = j.sodb JOIN apps a ON a.id = s.app "

/* The JOB (schema/HTTP.md, Farm) of a row selected with JOB_COLS. */
static json_t *job_of(const psdbd__row *row)
{
    void *rw = row->row;
    char psdb_id[24];
    snprintf(psdb_id, sizeof(psdb_id), "%lld", (long long)row->i64(rw, 15));
    json_t *j = json_pack(
        "{s:I, s:s, s:{s:s, s:o}, s:s, s:I, s:{s:s, s:I, s:I, s:o}, s:I, s:I, s:o, s:o, s:o, "
        "s:o, s:o, s:o}",
        "id", (json_int_t)row->i64(rw, 0), "state", row->text(rw, 1), "app", "name",
        row->text(rw, 2), "version", version_json(row, 3), "sodb_sha256", row->text(rw, 4),
        "sodb_id", (json_int_t)row->i64(rw, 5), "target", "family", row->text(rw, 6), "abi_min",
        (json_int_t)psdbd_u64_from_db(row->i64(rw, 7)), "abi_max",
        (json_int_t)psdbd_u64_from_db(row->i64(rw, 8)), "profile_version", version_json(row, 9),
        "demand", (json_int_t)row->i64(rw, 10), "attempts", (json_int_t)row->i64(rw, 11),
        "last_error", text_or_null(row, 12), "worker", text_or_null(row, 13), "lease_expires",
        time_json(row, 14), "psdb_id", row->is_null(rw, 15) ? json_null() : json_string(psdb_id),
        "created_at", time_json(row, 16), "updated_at", time_json(row, 17));
    if (!j)
        psdbd_out_of_memory();
    return j;
}

static int job_rows(const psdbd__row *row, void *ctx)
{
    json_array_append_new(ctx, job_of(row));
    return 0;
}

static int job_row(const psdbd__row *row, void *ctx)
{
    json_t **out = ctx;
    *out = job_of(row);
    return 1;
}

static psdbd_rc job_json(psdbd__tx *tx, int64_t id, json_t **out)
{
    static const char sql[] = "SELECT " JOB_COLS "WHERE j.id = $1";
    const psdbd__arg a[] = {I64(id)};
    psdbd_rc rc = RUN(tx, sql, a, job_row, out);
    return rc == PSDBD_OK && !*out ? PSDBD_ERROR : rc;
}

/* ---- SODBs ------------------------------------------------------------------------------------
 */

struct sodb_publish {
    const psdbd_sodb_record *r;
    json_t *out;
    psdbd_rc found;
};

static psdbd_rc sodb_publish_tx(psdbd__tx *tx, void *ctx)
{
    static const char find_sql[] =
        "SELECT " SODB_COLS "WHERE a.name = $1 AND s.app_version = $2 AND s.exe_filename = $3 "
        "AND s.engine_name = $4 AND s.engine_version = $5 AND s.app_guid = $6 AND s.serial = $7";
    static const char app_sql[] =
        "INSERT INTO apps (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING";
    static const char blob_sql[] = "INSERT INTO blobs (sha256, size, created_at) VALUES ($1, $2, "
                                   "$3) ON CONFLICT (sha256) DO NOTHING";
    static const char insert_sql[] =
        "INSERT INTO sodbs (app, app_version, exe_filename, engine_name, engine_version, app_guid, "
        "serial, sha256, size, key_id, signature, created_at, published_by) "
        "SELECT id, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 FROM apps WHERE name = $1";
    static const char by_sha_sql[] =
        "SELECT " SODB_COLS "WHERE a.name = $1 AND s.app_version = $2 AND s.exe_filename = $3 "
        "AND s.engine_name = $4 AND s.engine_version = $5 AND s.app_guid = $6 AND s.serial = $7";
    struct sodb_publish *p = ctx;
    const psdbd_sodb_record *r = p->r;
    int64_t now = (int64_t)time(NULL);
    json_t *found = json_array();
    psdbd_rc rc;
    const psdbd__arg id[] = {TXT(r->app_name),
                             U64(r->app_version),
                             TXT(r->exe_filename ? r->exe_filename : ""),
                             TXT(r->engine_name ? r->engine_name : ""),
                             U64(r->engine_version),
                             {PSDBD__ARG_BLOB, 0, (const char *)r->app_guid, 16},
                             U64(r->serial),
                             TXT(r->sha256),
                             I64(r->size),
                             TXT(r->key_id),
                             TXT(r->signature),
                             I64(now),
                             TXT(r->published_by ? r->published_by : "")};
    const psdbd__arg app[] = {TXT(r->app_name), I64(now)};
    const psdbd__arg blob[] = {TXT(r->sha256), I64(r->size), I64(now)};
    if ((rc = run(tx, find_sql, id, 7, sodb_rows, found)) != PSDBD_OK)
        goto cleanup;
    if (json_array_size(found) > 0) {
        json_t *m = json_array_get(found, 0);
        const char *sha = json_string_value(json_object_get(m, "sha256"));
        p->found = sha && strcmp(sha, r->sha256) == 0 ? PSDBD_EXISTS : PSDBD_CONFLICT;
        if (p->found == PSDBD_EXISTS)
            p->out = json_incref(m);
        goto cleanup; /* nothing written: committing is harmless */
    }
    if ((rc = RUN(tx, app_sql, app, NULL, NULL)) != PSDBD_OK ||
        (rc = RUN(tx, blob_sql, blob, NULL, NULL)) != PSDBD_OK ||
        (rc = RUN(tx, insert_sql, id, NULL, NULL)) != PSDBD_OK)
        goto cleanup;
    json_array_clear(found);
    if ((rc = run(tx, by_sha_sql, id, 7, sodb_rows, found)) != PSDBD_OK)
        goto cleanup;
    p->out = json_incref(json_array_get(found, 0));
    rc = p->out ? PSDBD_OK : PSDBD_ERROR;
cleanup:
    json_decref(found);
    return rc;
}

psdbd_rc psdbd_index_sodb_publish(psdbd_index *ix, const psdbd_sodb_record *r, json_t **out)
{
    struct sodb_publish p = {r, NULL, PSDBD_OK};
    psdbd_rc rc = ix->ops->farm_tx(ix, 1, sodb_publish_tx, &p);
    if (rc == PSDBD_OK && p.found != PSDBD_OK)
        rc = p.found;
    if ((rc == PSDBD_OK || rc == PSDBD_EXISTS) && out) {
        *out = p.out;
        p.out = NULL;
    }
    json_decref(p.out);
    return rc;
}

struct sodb_list {
    const char *app;
    int has_version;
    uint64_t version;
    const char *sha256;
    json_t *list;
};

static psdbd_rc sodb_list_tx(psdbd__tx *tx, void *ctx)
{
    static const char app_sql[] = "SELECT " SODB_COLS "WHERE a.name = $1 AND s.retired_at IS NULL "
                                  "ORDER BY s.app_version DESC, s.serial DESC";
    static const char version_sql[] =
        "SELECT " SODB_COLS "WHERE a.name = $1 AND s.app_version = $2 AND s.retired_at IS NULL "
        "ORDER BY s.serial DESC";
    static const char sha_sql[] = "SELECT " SODB_COLS "WHERE s.sha256 = $1 AND s.retired_at IS "
                                  "NULL ORDER BY s.created_at DESC, s.id DESC LIMIT 1";
    struct sodb_list *l = ctx;
    if (l->sha256) {
        const psdbd__arg a[] = {TXT(l->sha256)};
        return RUN(tx, sha_sql, a, sodb_rows, l->list);
    }
    const psdbd__arg a[] = {TXT(l->app), U64(l->version)};
    return run(tx, l->has_version ? version_sql : app_sql, a, l->has_version ? 2 : 1, sodb_rows,
               l->list);
}

psdbd_rc psdbd_index_sodb_list(psdbd_index *ix, const char *app, int has_version,
                               uint64_t app_version, json_t **out)
{
    struct sodb_list l = {app, has_version, app_version, NULL, json_array()};
    psdbd_rc rc = ix->ops->farm_tx(ix, 0, sodb_list_tx, &l);
    if (rc == PSDBD_OK)
        *out = json_pack("{s:O}", "sodbs", l.list);
    json_decref(l.list);
    return rc;
}

psdbd_rc psdbd_index_sodb_find(psdbd_index *ix, const char *sha256, json_t **out)
{
    struct sodb_list l = {NULL, 0, 0, sha256, json_array()};
    psdbd_rc rc = ix->ops->farm_tx(ix, 0, sodb_list_tx, &l);
    if (rc == PSDBD_OK && json_array_size(l.list) == 0)
        rc = PSDBD_NOT_FOUND;
    if (rc == PSDBD_OK)
        *out = json_incref(json_array_get(l.list, 0));
    json_decref(l.list);
    return rc;
}

struct sodb_admin_list {
    const char *app; /* NULL: every application */
    int has_version;
    uint64_t version;
    int with_retired;
    json_t *list;
};

static int sodb_admin_rows(const psdbd__row *row, void *ctx)
{
    struct sodb_admin_list *l = ctx;
    if ((l->has_version && psdbd_u64_from_db(row->i64(row->row, 3)) != l->version) ||
        (!l->with_retired && !row->is_null(row->row, 13)))
        return 0;
    json_array_append_new(l->list, sodb_manifest_of(row));
    return 0;
}

static psdbd_rc sodb_list_admin_tx(psdbd__tx *tx, void *ctx)
{
    /* An operator's listing: few rows (an application has an SODB per version and serial), so
     * the version and retired filters are the row callback's. */
    static const char all_sql[] =
        "SELECT " SODB_COLS "ORDER BY a.name, s.app_version DESC, s.serial DESC, s.id DESC";
    static const char app_sql[] =
        "SELECT " SODB_COLS "WHERE a.name = $1 ORDER BY s.app_version DESC, s.serial DESC, "
        "s.id DESC";
    struct sodb_admin_list *l = ctx;
    const psdbd__arg a[] = {TXT(l->app)};
    return l->app ? RUN(tx, app_sql, a, sodb_admin_rows, l)
                  : run(tx, all_sql, NULL, 0, sodb_admin_rows, l);
}

psdbd_rc psdbd_index_sodb_list_admin(psdbd_index *ix, const char *app, int has_version,
                                     uint64_t app_version, int with_retired, json_t **out)
{
    struct sodb_admin_list l = {app, has_version, app_version, with_retired, json_array()};
    psdbd_rc rc = ix->ops->farm_tx(ix, 0, sodb_list_admin_tx, &l);
    if (rc == PSDBD_OK)
        *out = json_pack("{s:O}", "sodbs", l.list);
    json_decref(l.list);
    return rc;
}

struct sodb_retire {
    int64_t id;
    const char *by;
    int retire;      /* 0: only read the manifest */
    int retired_now; /* this transaction retired it */
    int64_t held;    /* queued jobs it held */
    json_t *list;
};

static psdbd_rc sodb_retire_tx(psdbd__tx *tx, void *ctx)
{
    static const char get_sql[] = "SELECT " SODB_COLS "WHERE s.id = $1";
    static const char retire_sql[] =
        "UPDATE sodbs SET retired_at = $2, retired_by = $3 WHERE id = $1 AND retired_at IS NULL";
    /* Its queued jobs can no longer be claimed (claims skip retired SODBs): held, saying why,
     * rather than queued for ever. A leased one ends with its worker's refused publish. */
    static const char jobs_sql[] =
        "UPDATE jobs SET state = 'held', last_error = 'its SODB was retired', updated_at = $2 "
        "WHERE sodb = $1 AND state = 'queued'";
    struct sodb_retire *rt = ctx;
    int64_t now = (int64_t)time(NULL);
    const psdbd__arg a[] = {I64(rt->id), I64(now), TXT(rt->by ? rt->by : "")};
    psdbd_rc rc = PSDBD_OK;
    if (rt->retire && (rc = RUN(tx, retire_sql, a, NULL, NULL)) != PSDBD_OK)
        return rc;
    rt->retired_now = rt->retire && tx->changes > 0;
    rt->held = 0;
    if (rt->retired_now) {
        if ((rc = run(tx, jobs_sql, a, 2, NULL, NULL)) != PSDBD_OK)
            return rc;
        rt->held = tx->changes;
    }
    return run(tx, get_sql, a, 1, sodb_rows, rt->list);
}

/* The SODB manifest of `id`, after retiring it when `retire` (*retired_now and *held, each may
 * be NULL: psdbd_index_sodb_retire). */
static psdbd_rc sodb_by_id(psdbd_index *ix, int64_t id, const char *by, int retire,
                           int *retired_now, int64_t *held, json_t **out)
{
    struct sodb_retire rt = {id, by, retire, 0, 0, json_array()};
    psdbd_rc rc = ix->ops->farm_tx(ix, retire, sodb_retire_tx, &rt);
    if (rc == PSDBD_OK && json_array_size(rt.list) == 0)
        rc = PSDBD_NOT_FOUND;
    if (rc == PSDBD_OK)
        *out = json_incref(json_array_get(rt.list, 0));
    if (retired_now)
        *retired_now = rc == PSDBD_OK && rt.retired_now;
    if (held)
        *held = rc == PSDBD_OK ? rt.held : 0;
    json_decref(rt.list);
    return rc;
}

psdbd_rc psdbd_index_sodb_get(psdbd_index *ix, int64_t id, json_t **out)
{
    return sodb_by_id(ix, id, NULL, 0, NULL, NULL, out);
}

psdbd_rc psdbd_index_sodb_retire(psdbd_index *ix, int64_t id, const char *by, int *retired_now,
                                 int64_t *held, json_t **out)
{
    return sodb_by_id(ix, id, by, 1, retired_now, held, out);
}

/* ---- jobs -------------------------------------------------------------------------------------
 */

/* The range of stored profile versions whose top 32 bits are those of `profile`, the test of
 * psdbd_index_resolve. */
static void profile_range(uint64_t profile, int64_t *lo, int64_t *hi)
{
    *lo = psdbd_u64_to_db(profile & ~(uint64_t)0xFFFFFFFF);
    *hi = psdbd_u64_to_db(profile | (uint64_t)0xFFFFFFFF);
}

struct demand {
    const psdbd_job_key *k;
    int64_t demand;
    const psdbd_job_bounds *bounds;
    int created;
    json_t *out;
};

static psdbd_rc newest_sodb(psdbd__tx *tx, const char *app, uint64_t version, int64_t *id)
{
    static const char sql[] = "SELECT s.id FROM sodbs s JOIN apps a ON a.id = s.app "
                              "WHERE a.name = $1 AND s.app_version = $2 AND s.retired_at IS NULL "
                              "ORDER BY s.serial DESC, s.id DESC LIMIT 1";
    const psdbd__arg a[] = {TXT(app), U64(version)};
    struct one o = {0};
    psdbd_rc rc = RUN(tx, sql, a, one_row, &o);
    if (rc == PSDBD_OK && !o.found)
        rc = PSDBD_NOT_FOUND;
    *id = o.v[0];
    return rc;
}

/* *over when a new job of sodb and family would pass the bounds on open (queued or leased)
 * jobs. Only these count: a done job was compiled, a held one waits for a person, and jobs of
 * ABIs no worker serves stay queued, so what a flood of misses opens stays within the bounds. */
static psdbd_rc over_bounds(psdbd__tx *tx, int64_t sodb, const char *family,
                            const psdbd_job_bounds *b, int *over)
{
    static const char sql[] =
        "SELECT count(*), coalesce(sum(CASE WHEN family = $2 THEN 1 ELSE 0 END), 0) FROM jobs "
        "WHERE sodb = $1 AND state IN ('queued', 'leased')";
    const psdbd__arg a[] = {I64(sodb), TXT(family)};
    struct one o = {0};
    psdbd_rc rc = RUN(tx, sql, a, one_row, &o);
    *over = rc == PSDBD_OK && ((b->per_sodb > 0 && o.v[0] >= b->per_sodb) ||
                               (b->per_family > 0 && o.v[1] >= b->per_family));
    return rc;
}

/* The open job of sodb and k's family whose ABI range is nearest k's (overlapping first, then
 * by the gap between the ranges), in o. */
static psdbd_rc nearest_job(psdbd__tx *tx, int64_t sodb, const psdbd_job_key *k, struct one *o)
{
    /* The stored ABIs are flipped (psdbd_u64_to_db), which keeps order and differences. */
    static const char sql[] =
        "SELECT id FROM jobs WHERE sodb = $1 AND family = $2 AND state IN ('queued', 'leased') "
        "ORDER BY CASE WHEN abi_max < $3 THEN $3 - abi_max WHEN abi_min > $4 THEN abi_min - $4 "
        "ELSE 0 END, demand DESC, id LIMIT 1";
    const psdbd__arg a[] = {I64(sodb), TXT(k->family), U64(k->abi_min), U64(k->abi_max)};
    return RUN(tx, sql, a, one_row, o);
}

static psdbd_rc demand_tx(psdbd__tx *tx, void *ctx)
{
    static const char find_sql[] =
        "SELECT id FROM jobs WHERE sodb = $1 AND family = $2 AND abi_min = $3 AND abi_max = $4 "
        "AND profile_version = $5";
    static const char bump_sql[] =
        "UPDATE jobs SET demand = demand + $2, updated_at = $3, state = CASE WHEN state = 'done' "
        "AND $2 > 0 THEN 'queued' ELSE state END WHERE id = $1";
    static const char insert_sql[] =
        "INSERT INTO jobs (sodb, family, abi_min, abi_max, profile_version, state, demand, "
        "created_at, updated_at) VALUES ($1, $2, $3, $4, $5, 'queued', $6, $7, $7) "
        "ON CONFLICT (sodb, family, abi_min, abi_max, profile_version) "
        "DO UPDATE SET demand = jobs.demand + excluded.demand RETURNING id";
    struct demand *d = ctx;
    const psdbd_job_key *k = d->k;
    int64_t sodb = 0, now = (int64_t)time(NULL);
    struct one o = {0};
    psdbd_rc rc = newest_sodb(tx, k->app, k->app_version, &sodb);
    if (rc != PSDBD_OK)
        return rc;
    const psdbd__arg key[] = {I64(sodb),       TXT(k->family),          U64(k->abi_min),
                              U64(k->abi_max), U64(k->profile_version), I64(d->demand),
                              I64(now)};
    if ((rc = run(tx, find_sql, key, 5, one_row, &o)) != PSDBD_OK)
        return rc;
    if (!o.found && d->bounds) {
        int over = 0;
        if ((rc = over_bounds(tx, sodb, k->family, d->bounds, &over)) != PSDBD_OK)
            return rc;
        if (over) {
            d->created = -1;
            if ((rc = nearest_job(tx, sodb, k, &o)) != PSDBD_OK || !o.found)
                return rc;
        }
    }
    if (o.found) {
        const psdbd__arg b[] = {I64(o.v[0]), I64(d->demand), I64(now)};
        if ((rc = RUN(tx, bump_sql, b, NULL, NULL)) != PSDBD_OK)
            return rc;
    } else {
        if ((rc = RUN(tx, insert_sql, key, one_row, &o)) != PSDBD_OK)
            return rc;
        d->created = 1;
    }
    return job_json(tx, o.v[0], &d->out);
}

psdbd_rc psdbd_index_job_demand(psdbd_index *ix, const psdbd_job_key *k, int64_t demand,
                                const psdbd_job_bounds *bounds, int *created, json_t **out)
{
    struct demand d = {k, demand, bounds, 0, NULL};
    psdbd_rc rc = ix->ops->farm_tx(ix, 1, demand_tx, &d);
    if (created)
        *created = d.created;
    if (rc == PSDBD_OK && out) {
        *out = d.out;
        d.out = NULL;
    }
    json_decref(d.out);
    return rc;
}

static psdbd_rc worker_seen(psdbd__tx *tx, const psdbd_farm_target *t, int64_t now)
{
    static const char sql[] =
        "INSERT INTO workers (name, family, abi_version, compiler_version, profile_version, "
        "last_seen) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO UPDATE SET "
        "family = excluded.family, abi_version = excluded.abi_version, compiler_version = "
        "excluded.compiler_version, profile_version = excluded.profile_version, last_seen = "
        "excluded.last_seen";
    const psdbd__arg a[] = {TXT(t->worker),           TXT(t->family),          U64(t->abi_version),
                            U64(t->compiler_version), U64(t->profile_version), I64(now)};
    return RUN(tx, sql, a, NULL, NULL);
}

struct announce {
    const psdbd_farm_target *t;
    const char *scope;
    int64_t created;
    json_t *todo; /* [[sodb id, app], ...] */
};

static int todo_rows(const psdbd__row *row, void *ctx)
{
    json_array_append_new(
        ctx, json_pack("[I, s]", (json_int_t)row->i64(row->row, 0), row->text(row->row, 1)));
    return 0;
}

static psdbd_rc announce_tx(psdbd__tx *tx, void *ctx)
{
    /* Rule (b): the newest SODB of each application (newest version, then serial) without a
     * PSDB of the target's family and ABI. */
    static const char todo_sql[] =
        "SELECT s.id, a.name FROM sodbs s JOIN apps a ON a.id = s.app WHERE s.retired_at IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM sodbs t WHERE t.app = s.app AND t.retired_at IS NULL AND "
        "(t.app_version > s.app_version OR (t.app_version = s.app_version AND (t.serial > "
        "s.serial OR (t.serial = s.serial AND t.id > s.id))))) "
        "AND NOT EXISTS (SELECT 1 FROM psdbs p WHERE p.app = s.app AND p.app_version = "
        "s.app_version AND p.family = $1 AND p.abi_version = $2 AND p.retired_at IS NULL) "
        "ORDER BY s.id";
    static const char insert_sql[] =
        "INSERT INTO jobs (sodb, family, abi_min, abi_max, profile_version, state, demand, "
        "created_at, updated_at) VALUES ($1, $2, $3, $3, $4, 'queued', 0, $5, $5) "
        "ON CONFLICT (sodb, family, abi_min, abi_max, profile_version) DO NOTHING";
    struct announce *an = ctx;
    int64_t now = (int64_t)time(NULL);
    psdbd_rc rc = worker_seen(tx, an->t, now);
    const psdbd__arg q[] = {TXT(an->t->family), U64(an->t->abi_version)};
    if (rc != PSDBD_OK || (rc = RUN(tx, todo_sql, q, todo_rows, an->todo)) != PSDBD_OK)
        return rc;
    for (size_t i = 0; i < json_array_size(an->todo); i++) {
        json_t *e = json_array_get(an->todo, i);
        if (!psdbd_scope_covers(an->scope, json_string_value(json_array_get(e, 1))))
            continue;
        const psdbd__arg a[] = {I64(json_integer_value(json_array_get(e, 0))), TXT(an->t->family),
                                U64(an->t->abi_version), U64(0), I64(now)};
        if ((rc = RUN(tx, insert_sql, a, NULL, NULL)) != PSDBD_OK)
            return rc;
        an->created += tx->changes;
    }
    return PSDBD_OK;
}

psdbd_rc psdbd_index_worker_announce(psdbd_index *ix, const psdbd_farm_target *t, const char *scope,
                                     int64_t *created)
{
    struct announce an = {t, scope, 0, json_array()};
    psdbd_rc rc = ix->ops->farm_tx(ix, 1, announce_tx, &an);
    *created = rc == PSDBD_OK ? an.created : 0;
    json_decref(an.todo);
    return rc;
}

struct claim {
    const psdbd_farm_target *t;
    const char *scope;
    int64_t lease_s, max_attempts;
    json_t *cands; /* [[job id, app], ...] */
    json_t *out;
};

/* A new lease token: 16 random bytes in hex. */
static int new_lease(char out[33])
{
    uint8_t raw[16];
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return -1;
    psdb__hex(raw, sizeof(raw), out);
    return 0;
}

struct locked {
    int found;
    int64_t attempts, app, app_version, abi_min, abi_max, profile, expired;
    char state[16];
};

static int locked_row(const psdbd__row *row, void *ctx)
{
    struct locked *l = ctx;
    l->found = 1;
    l->attempts = row->i64(row->row, 0);
    snprintf(l->state, sizeof(l->state), "%s", row->text(row->row, 1));
    l->app = row->i64(row->row, 2);
    l->app_version = row->i64(row->row, 3);
    l->abi_min = row->i64(row->row, 4);
    l->abi_max = row->i64(row->row, 5);
    l->profile = row->i64(row->row, 6);
    return 1;
}

static int base_row(const psdbd__row *row, void *ctx)
{
    json_t **out = ctx;
    *out = psdbd__manifest_of(row);
    return 1;
}

/* Takes job `id` for the claim when it is still claimable: 1 taken (c->out set), 0 not (taken by
 * another, done at claim, held), or -1 with *rc. */
static int claim_one(psdbd__tx *tx, struct claim *c, int64_t id, int64_t now, psdbd_rc *rc)
{
#define CLAIMABLE_SQL                                                                              \
    "SELECT j.attempts, j.state, s.app, s.app_version, j.abi_min, j.abi_max, j.profile_version "   \
    "FROM jobs j JOIN sodbs s ON s.id = j.sodb WHERE j.id = $1 AND s.retired_at IS NULL AND "      \
    "(j.state = 'queued' OR (j.state = 'leased' AND j.lease_expires < $2)) "
    static const char lock_sql[] = CLAIMABLE_SQL;
    static const char lock_pg_sql[] = CLAIMABLE_SQL "FOR UPDATE OF j SKIP LOCKED";
    static const char cell_sql[] =
        "SELECT p.id FROM psdbs p WHERE p.app = $1 AND p.app_version = $2 AND p.family = $3 "
        "AND p.abi_version BETWEEN $4 AND $5 AND p.retired_at IS NULL AND ($6 = 0 OR "
        "p.profile_version BETWEEN $7 AND $8) ORDER BY p.abi_version DESC, p.serial DESC LIMIT 1";
    static const char done_sql[] =
        "UPDATE jobs SET state = 'done', psdb_id = $2, lease = NULL, lease_expires = NULL, "
        "updated_at = $3 WHERE id = $1";
    static const char held_sql[] =
        "UPDATE jobs SET state = 'held', lease = NULL, lease_expires = NULL, updated_at = $2, "
        "last_error = $3 WHERE id = $1";
    static const char lease_sql[] =
        "UPDATE jobs SET state = 'leased', lease = $2, lease_expires = $3, worker = $4, "
        "claimed_at = $5, attempts = attempts + 1, updated_at = $5 WHERE id = $1";
    static const char serial_sql[] =
        "SELECT max(p.serial) FROM psdbs p WHERE p.app = $1 AND p.app_version = $2 AND "
        "p.family = $3 AND p.abi_version = $4";
    static const char base_sql[] =
        "SELECT " PSDBD__PSDB_COLS "WHERE p.app = $1 AND p.app_version < $2 AND p.family = $3 AND "
        "p.abi_version = $4 AND p.retired_at IS NULL ORDER BY p.app_version DESC, p.serial DESC "
        "LIMIT 1";
    struct locked l = {0};
    struct one o = {0};
    int64_t lo = 0, hi = 0;
    char lease[33];
    json_t *job = NULL, *base = NULL;
    const psdbd__arg a[] = {I64(id), I64(now)};
    if ((*rc = RUN(tx, is_pg(tx) ? lock_pg_sql : lock_sql, a, locked_row, &l)) != PSDBD_OK)
        return -1;
    if (!l.found)
        return 0;
    if (strcmp(l.state, "leased") == 0 && l.attempts >= c->max_attempts) {
        char why[96];
        snprintf(why, sizeof(why), "the lease expired on attempt %lld of %lld",
                 (long long)l.attempts, (long long)c->max_attempts);
        const psdbd__arg h[] = {I64(id), I64(now), TXT(why)};
        *rc = RUN(tx, held_sql, h, NULL, NULL);
        return *rc == PSDBD_OK ? 0 : -1;
    }
    uint64_t profile = psdbd_u64_from_db(l.profile);
    profile_range(profile, &lo, &hi);
    const psdbd__arg cell[] = {
        I64(l.app),     I64(l.app_version), TXT(c->t->family), I64(l.abi_min),
        I64(l.abi_max), I64(profile != 0),  I64(lo),           I64(hi)};
    if ((*rc = RUN(tx, cell_sql, cell, one_row, &o)) != PSDBD_OK)
        return -1;
    if (o.found) { /* compiled already (a publish outside the farm, or another job's) */
        const psdbd__arg d[] = {I64(id), I64(o.v[0]), I64(now)};
        *rc = RUN(tx, done_sql, d, NULL, NULL);
        return *rc == PSDBD_OK ? 0 : -1;
    }
    if (new_lease(lease) != 0) {
        psdbd_log("farm: the random generator failed");
        *rc = PSDBD_ERROR;
        return -1;
    }
    const psdbd__arg ls[] = {I64(id), TXT(lease), I64(now + c->lease_s), TXT(c->t->worker),
                             I64(now)};
    const psdbd__arg sb[] = {I64(l.app), I64(l.app_version), TXT(c->t->family),
                             U64(c->t->abi_version)};
    memset(&o, 0, sizeof(o));
    if ((*rc = RUN(tx, lease_sql, ls, NULL, NULL)) != PSDBD_OK ||
        (*rc = RUN(tx, serial_sql, sb, one_row, &o)) != PSDBD_OK ||
        (*rc = RUN(tx, base_sql, sb, base_row, &base)) != PSDBD_OK ||
        (*rc = job_json(tx, id, &job)) != PSDBD_OK) {
        json_decref(base);
        return -1;
    }
    /* The next serial of this identity and target: above every PSDB's, so the publish that ends
     * the job never conflicts with one made before. */
    uint64_t serial = o.text[0][0] ? psdbd_u64_from_db(o.v[0]) + 1 : 1;
    c->out = json_pack("{s:o, s:s, s:I, s:o}", "job", job, "lease", lease, "serial",
                       (json_int_t)serial, "base", base ? base : json_null());
    return 1;
}

static psdbd_rc claim_tx(psdbd__tx *tx, void *ctx)
{
    static const char cands_sql[] =
        "SELECT j.id, a.name FROM jobs j JOIN sodbs s ON s.id = j.sodb JOIN apps a ON "
        "a.id = s.app WHERE j.family = $1 AND $2 BETWEEN j.abi_min AND j.abi_max AND "
        "(j.profile_version = $3 OR j.profile_version BETWEEN $4 AND $5) AND s.retired_at IS NULL "
        "AND (j.state = 'queued' OR (j.state = 'leased' AND j.lease_expires < $6)) "
        "ORDER BY j.demand DESC, j.id LIMIT 64";
    struct claim *c = ctx;
    int64_t now = (int64_t)time(NULL), lo = 0, hi = 0;
    psdbd_rc rc = worker_seen(tx, c->t, now);
    profile_range(c->t->profile_version, &lo, &hi);
    const psdbd__arg q[] = {TXT(c->t->family), U64(c->t->abi_version), U64(0), I64(lo), I64(hi),
                            I64(now)};
    if (rc != PSDBD_OK || (rc = RUN(tx, cands_sql, q, todo_rows, c->cands)) != PSDBD_OK)
        return rc;
    for (size_t i = 0; i < json_array_size(c->cands); i++) {
        json_t *e = json_array_get(c->cands, i);
        if (!psdbd_scope_covers(c->scope, json_string_value(json_array_get(e, 1))))
            continue;
        int got = claim_one(tx, c, json_integer_value(json_array_get(e, 0)), now, &rc);
        if (got != 0)
            return got > 0 ? PSDBD_OK : rc;
    }
    return PSDBD_OK; /* nothing claimed; what was marked done or held is committed */
}

psdbd_rc psdbd_index_job_claim(psdbd_index *ix, const psdbd_farm_target *t, const char *scope,
                               int64_t lease_s, int64_t max_attempts, json_t **out)
{
    struct claim c = {t, scope, lease_s, max_attempts, json_array(), NULL};
    psdbd_rc rc = ix->ops->farm_tx(ix, 1, claim_tx, &c);
    if (rc == PSDBD_OK && !c.out)
        rc = PSDBD_NOT_FOUND;
    if (rc == PSDBD_OK) {
        *out = c.out;
        c.out = NULL;
    }
    json_decref(c.out);
    json_decref(c.cands);
    return rc;
}

/* After a lease operation changed no row: PSDBD_NOT_FOUND when the job does not exist, else
 * PSDBD_CONFLICT (the lease is not, or no longer, the caller's). */
static psdbd_rc lease_lost(psdbd__tx *tx, int64_t id)
{
    static const char sql[] = "SELECT id FROM jobs WHERE id = $1";
    const psdbd__arg a[] = {I64(id)};
    struct one o = {0};
    psdbd_rc rc = RUN(tx, sql, a, one_row, &o);
    if (rc != PSDBD_OK)
        return rc;
    return o.found ? PSDBD_CONFLICT : PSDBD_NOT_FOUND;
}

struct lease_op {
    int64_t id;
    const char *lease;
    int64_t lease_s, psdb_id, max_attempts;
    const char *error;
    int64_t result; /* extend: the new expiry; done: the compile seconds; fail: held */
};

static psdbd_rc extend_tx(psdbd__tx *tx, void *ctx)
{
    static const char sql[] = "UPDATE jobs SET lease_expires = $3, updated_at = $4 WHERE id = $1 "
                              "AND state = 'leased' AND lease = $2";
    struct lease_op *op = ctx;
    int64_t now = (int64_t)time(NULL);
    const psdbd__arg a[] = {I64(op->id), TXT(op->lease), I64(now + op->lease_s), I64(now)};
    psdbd_rc rc = RUN(tx, sql, a, NULL, NULL);
    if (rc != PSDBD_OK)
        return rc;
    if (tx->changes != 1)
        return lease_lost(tx, op->id);
    op->result = now + op->lease_s;
    return PSDBD_OK;
}

static psdbd_rc done_tx(psdbd__tx *tx, void *ctx)
{
    static const char job_sql[] =
        "SELECT j.claimed_at, j.worker, s.sha256, j.family FROM jobs j JOIN sodbs s ON "
        "s.id = j.sodb WHERE j.id = $1 AND j.state = 'leased' AND j.lease = $2";
    static const char psdb_sql[] =
        "SELECT id FROM psdbs WHERE id = $1 AND sodb_sha256 = $2 AND family = $3";
    static const char done_sql[] =
        "UPDATE jobs SET state = 'done', psdb_id = $3, lease = NULL, lease_expires = NULL, "
        "last_error = NULL, updated_at = $4 WHERE id = $1 AND state = 'leased' AND lease = $2";
    static const char worker_sql[] =
        "UPDATE workers SET jobs_done = jobs_done + 1, last_seen = $2 WHERE name = $1";
    static const char time_sql[] =
        "INSERT INTO job_times (worker, seconds, done_at) VALUES ($1, $2, $3)";
    struct lease_op *op = ctx;
    int64_t now = (int64_t)time(NULL);
    struct one j = {0}, p = {0};
    const psdbd__arg a[] = {I64(op->id), TXT(op->lease), I64(op->psdb_id), I64(now)};
    psdbd_rc rc = run(tx, job_sql, a, 2, one_row, &j);
    if (rc != PSDBD_OK)
        return rc;
    if (!j.found)
        return lease_lost(tx, op->id);
    const psdbd__arg pa[] = {I64(op->psdb_id), TXT(j.text[2]), TXT(j.text[3])};
    if ((rc = RUN(tx, psdb_sql, pa, one_row, &p)) != PSDBD_OK)
        return rc;
    if (!p.found)
        return PSDBD_EXISTS;
    if ((rc = RUN(tx, done_sql, a, NULL, NULL)) != PSDBD_OK)
        return rc;
    if (tx->changes != 1)
        return PSDBD_CONFLICT;
    op->result = now > j.v[0] ? now - j.v[0] : 0;
    const psdbd__arg w[] = {TXT(j.text[1]), I64(now)};
    const psdbd__arg t[] = {TXT(j.text[1]), I64(op->result), I64(now)};
    if ((rc = RUN(tx, worker_sql, w, NULL, NULL)) != PSDBD_OK)
        return rc;
    return RUN(tx, time_sql, t, NULL, NULL);
}

static psdbd_rc fail_tx(psdbd__tx *tx, void *ctx)
{
    static const char sql[] =
        "UPDATE jobs SET state = CASE WHEN attempts >= $3 THEN 'held' ELSE 'queued' END, "
        "last_error = $4, lease = NULL, lease_expires = NULL, updated_at = $5 "
        "WHERE id = $1 AND state = 'leased' AND lease = $2";
    static const char state_sql[] = "SELECT state FROM jobs WHERE id = $1";
    struct lease_op *op = ctx;
    int64_t now = (int64_t)time(NULL);
    struct one o = {0};
    const psdbd__arg a[] = {I64(op->id), TXT(op->lease), I64(op->max_attempts), TXT(op->error),
                            I64(now)};
    psdbd_rc rc = RUN(tx, sql, a, NULL, NULL);
    if (rc != PSDBD_OK)
        return rc;
    if (tx->changes != 1)
        return lease_lost(tx, op->id);
    if ((rc = run(tx, state_sql, a, 1, one_row, &o)) != PSDBD_OK)
        return rc;
    op->result = strcmp(o.text[0], "held") == 0;
    return PSDBD_OK;
}

psdbd_rc psdbd_index_job_extend(psdbd_index *ix, int64_t id, const char *lease, int64_t lease_s,
                                int64_t *expires)
{
    struct lease_op op = {id, lease, lease_s, 0, 0, NULL, 0};
    psdbd_rc rc = ix->ops->farm_tx(ix, 1, extend_tx, &op);
    *expires = op.result;
    return rc;
}

psdbd_rc psdbd_index_job_done(psdbd_index *ix, int64_t id, const char *lease, int64_t psdb_id,
                              int64_t *seconds)
{
    struct lease_op op = {id, lease, 0, psdb_id, 0, NULL, 0};
    psdbd_rc rc = ix->ops->farm_tx(ix, 1, done_tx, &op);
    *seconds = op.result;
    return rc;
}

psdbd_rc psdbd_index_job_fail(psdbd_index *ix, int64_t id, const char *lease, const char *error,
                              int64_t max_attempts, int *held)
{
    struct lease_op op = {id, lease, 0, 0, max_attempts, error, 0};
    psdbd_rc rc = ix->ops->farm_tx(ix, 1, fail_tx, &op);
    *held = (int)op.result;
    return rc;
}

struct requeue {
    int64_t id;
    int changed;
    json_t *out;
};

static psdbd_rc requeue_tx(psdbd__tx *tx, void *ctx)
{
    /* A fresh start: the attempts that held it and their error go, so that the next
     * job-max-attempts failures hold it again. A retired SODB's job stays held: no claim would
     * take it. */
    static const char sql[] =
        "UPDATE jobs SET state = 'queued', attempts = 0, last_error = NULL, worker = NULL, "
        "lease = NULL, lease_expires = NULL, updated_at = $2 WHERE id = $1 AND state = 'held' "
        "AND sodb IN (SELECT id FROM sodbs WHERE retired_at IS NULL)";
    static const char get_sql[] = "SELECT " JOB_COLS "WHERE j.id = $1";
    struct requeue *rq = ctx;
    const psdbd__arg a[] = {I64(rq->id), I64((int64_t)time(NULL))};
    psdbd_rc rc = RUN(tx, sql, a, NULL, NULL);
    if (rc != PSDBD_OK)
        return rc;
    rq->changed = tx->changes > 0;
    json_decref(rq->out); /* a retried transaction's */
    rq->out = NULL;
    return run(tx, get_sql, a, 1, job_row, &rq->out);
}

psdbd_rc psdbd_index_job_requeue(psdbd_index *ix, int64_t id, json_t **out)
{
    struct requeue rq = {id, 0, NULL};
    psdbd_rc rc = ix->ops->farm_tx(ix, 1, requeue_tx, &rq);
    if (rc == PSDBD_OK && !rq.out)
        rc = PSDBD_NOT_FOUND;
    else if (rc == PSDBD_OK && !rq.changed)
        rc = PSDBD_CONFLICT;
    if (rq.out && (rc == PSDBD_OK || rc == PSDBD_CONFLICT)) {
        *out = rq.out;
        rq.out = NULL;
    }
    json_decref(rq.out);
    return rc;
}

/* ---- listings ---------------------------------------------------------------------------------
 */

struct listing {
    const char *state;
    json_t *jobs, *workers;
    int64_t counts[4];
};

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

struct times {
    int64_t v[101];
    size_t n;
};

static int time_rows(const psdbd__row *row, void *ctx)
{
    struct times *t = ctx;
    t->v[t->n++] = row->i64(row->row, 0);
    return t->n == sizeof(t->v) / sizeof(t->v[0]);
}

static int worker_rows(const psdbd__row *row, void *ctx)
{
    char buf[32];
    json_t *w =
        json_pack("{s:s, s:{s:s, s:I, s:s, s:s}, s:o, s:I, s:n}", "worker", row->text(row->row, 0),
                  "target", "family", row->text(row->row, 1), "abi_version",
                  (json_int_t)psdbd_u64_from_db(row->i64(row->row, 2)), "compiler_version",
                  psdb__format_version(psdbd_u64_from_db(row->i64(row->row, 3)), buf, sizeof(buf)),
                  "profile_version", "", "last_seen", time_json(row, 5), "jobs_done",
                  (json_int_t)row->i64(row->row, 6), "median_compile_s");
    if (!w)
        psdbd_out_of_memory();
    json_object_set_new(json_object_get(w, "target"), "profile_version", version_json(row, 4));
    json_array_append_new(ctx, w);
    return 0;
}

static psdbd_rc list_tx(psdbd__tx *tx, void *ctx)
{
    static const char all_sql[] = "SELECT " JOB_COLS "ORDER BY j.id DESC LIMIT 1000";
    static const char state_sql[] =
        "SELECT " JOB_COLS "WHERE j.state = $1 ORDER BY j.id DESC LIMIT 1000";
    static const char failed_sql[] =
        "SELECT " JOB_COLS "WHERE j.last_error IS NOT NULL ORDER BY j.id DESC LIMIT 1000";
    static const char workers_sql[] =
        "SELECT name, family, abi_version, compiler_version, profile_version, last_seen, "
        "jobs_done FROM workers ORDER BY name";
    static const char times_sql[] =
        "SELECT seconds FROM job_times WHERE worker = $1 ORDER BY id DESC LIMIT 101";
    struct listing *l = ctx;
    const psdbd__arg a[] = {TXT(l->state ? l->state : "")};
    const char *sql = !l->state                         ? all_sql
                      : strcmp(l->state, "failed") == 0 ? failed_sql
                                                        : state_sql;
    psdbd_rc rc = run(tx, sql, a, sql == state_sql ? 1 : 0, job_rows, l->jobs);
    if (rc != PSDBD_OK || (rc = run(tx, workers_sql, NULL, 0, worker_rows, l->workers)) != PSDBD_OK)
        return rc;
    for (size_t i = 0; i < json_array_size(l->workers); i++) {
        json_t *w = json_array_get(l->workers, i);
        struct times t = {{0}, 0};
        const psdbd__arg n[] = {TXT(json_string_value(json_object_get(w, "worker")))};
        if ((rc = RUN(tx, times_sql, n, time_rows, &t)) != PSDBD_OK)
            return rc;
        if (t.n == 0)
            continue;
        qsort(t.v, t.n, sizeof(t.v[0]), cmp_i64);
        double median = t.n % 2 ? (double)t.v[t.n / 2]
                                : ((double)t.v[t.n / 2 - 1] + (double)t.v[t.n / 2]) / 2.0;
        json_object_set_new(w, "median_compile_s", json_real(median));
    }
    return PSDBD_OK;
}

psdbd_rc psdbd_index_jobs_list(psdbd_index *ix, const char *state, json_t **out)
{
    struct listing l = {state, json_array(), json_array(), {0}};
    psdbd_rc rc = ix->ops->farm_tx(ix, 0, list_tx, &l);
    if (rc == PSDBD_OK)
        *out = json_pack("{s:O, s:O}", "jobs", l.jobs, "workers", l.workers);
    json_decref(l.jobs);
    json_decref(l.workers);
    return rc;
}

static int count_rows(const psdbd__row *row, void *ctx)
{
    static const char *const states[] = {"queued", "leased", "done", "held"};
    int64_t *counts = ctx;
    for (int i = 0; i < 4; i++)
        if (strcmp(row->text(row->row, 0), states[i]) == 0)
            counts[i] = row->i64(row->row, 1);
    return 0;
}

static psdbd_rc counts_tx(psdbd__tx *tx, void *ctx)
{
    static const char sql[] = "SELECT state, count(*) FROM jobs GROUP BY state";
    return run(tx, sql, NULL, 0, count_rows, ctx);
}

psdbd_rc psdbd_index_job_counts(psdbd_index *ix, int64_t out[4])
{
    memset(out, 0, 4 * sizeof(out[0]));
    return ix->ops->farm_tx(ix, 0, counts_tx, out);
}

struct cells {
    size_t limit;
    int (*visible)(const char *app, void *ctx);
    void *ctx;
    json_t *cells;
    int truncated;
};

static int cell_rows(const psdbd__row *row, void *ctx)
{
    struct cells *c = ctx;
    void *rw = row->row;
    char id[24];
    if (c->visible && !c->visible(row->text(rw, 0), c->ctx))
        return 0;
    if (json_array_size(c->cells) == c->limit) {
        c->truncated = 1;
        return 1;
    }
    snprintf(id, sizeof(id), "%lld", (long long)row->i64(rw, 5));
    json_t *cell =
        json_pack("{s:s, s:o, s:s, s:I, s:I, s:s, s:o}", "app", row->text(rw, 0), "app_version",
                  version_json(row, 1), "family", row->text(rw, 2), "abi_version",
                  (json_int_t)psdbd_u64_from_db(row->i64(rw, 3)), "psdbs",
                  (json_int_t)row->i64(rw, 4), "newest_id", id, "worker", text_or_null(row, 6));
    if (!cell)
        psdbd_out_of_memory();
    json_array_append_new(c->cells, cell);
    return 0;
}

static psdbd_rc cells_tx(psdbd__tx *tx, void *ctx)
{
    /* The worker is the one whose job ended with the cell's newest PSDB (none for a version 2
     * PSDB published outside the farm's jobs). Rows past the scope's are skipped in cell_rows,
     * so the scan stops at 10000 rows whatever the index holds. */
    static const char sql[] =
        "SELECT g.name, g.app_version, g.family, g.abi_version, g.n, g.newest, (SELECT j.worker "
        "FROM jobs j WHERE j.psdb_id = g.newest AND j.state = 'done' ORDER BY j.id DESC LIMIT 1) "
        "FROM (SELECT a.name AS name, p.app_version AS app_version, p.family AS family, "
        "p.abi_version AS abi_version, count(*) AS n, max(p.id) AS newest FROM psdbs p JOIN apps "
        "a ON a.id = p.app WHERE p.statement_version = 2 AND p.retired_at IS NULL "
        "GROUP BY a.name, p.app_version, p.family, p.abi_version) g "
        "ORDER BY g.name, g.app_version DESC, g.family, g.abi_version LIMIT 10000";
    return run(tx, sql, NULL, 0, cell_rows, ctx);
}

psdbd_rc psdbd_index_farm_cells(psdbd_index *ix, size_t limit,
                                int (*visible)(const char *app, void *ctx), void *ctx, json_t **out)
{
    struct cells c = {limit, visible, ctx, json_array(), 0};
    psdbd_rc rc = ix->ops->farm_tx(ix, 0, cells_tx, &c);
    if (rc == PSDBD_OK)
        *out = json_pack("{s:O, s:b}", "cells", c.cells, "truncated", c.truncated);
    json_decref(c.cells);
    return rc;
}
