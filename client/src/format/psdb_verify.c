/* psdb_verify.c - psdb_file_verify: the deep check of a PSDB (integrity, every digest, every
 * reference). */
#include "format/psdbfile_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <sqlite3.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/hash.h"
#include "common/status_map.h"

static psdb_hr expect_empty(sqlite3 *db, const char *sql, const char *what, char *msg,
                            size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        hr = PSDB_E_CACHE_CORRUPT;
        psdb__pf_set_msg(msg, msg_size, "%s", what);
    } else if (rc != SQLITE_DONE) {
        hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(msg, msg_size, "%s: %s", what, sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
    return hr;
}

/* Work bound of psdb_file_verify, in SQLite VM instructions: VERIFY_OPS_PER_BYTE per byte of the
 * file plus VERIFY_OPS_BASE. Every query of the verification is a scan or an index seek per row on
 * the schema psdb__pf_check_schema enforces, so a well-formed file needs a small fraction of this
 * (a file of one-byte values, the densest, measured about 4 instructions per byte); the bound only
 * stops a query that some input made worse than linear. The progress handler is called every
 * VERIFY_PROGRESS_EVERY instructions. */
#define VERIFY_OPS_PER_BYTE 64u
#define VERIFY_OPS_BASE 10000000u
#define VERIFY_PROGRESS_EVERY 1000

typedef struct verify_budget {
    uint64_t left; /* calls of verify_progress still allowed */
    int stopped;
} verify_budget;

static int verify_progress(void *arg)
{
    verify_budget *b = arg;
    if (b->left == 0) {
        b->stopped = 1;
        return 1; /* interrupts the statement: SQLITE_INTERRUPT */
    }
    b->left--;
    return 0;
}

static void verify_budget_init(const psdb_file *f, verify_budget *b)
{
    b->stopped = 0;
    b->left = (f->file_size > (UINT64_MAX - VERIFY_OPS_BASE) / VERIFY_OPS_PER_BYTE
                   ? UINT64_MAX
                   : f->file_size * VERIFY_OPS_PER_BYTE + VERIFY_OPS_BASE) /
              VERIFY_PROGRESS_EVERY;
}

/* psdb_file_check's SHA256 reads the file in pieces of this many bytes. */
#define HASH_CHUNK ((size_t)1 << 20)

/* Blob ids are claimed in chunks of this many by the threads that hash them. */
#define VERIFY_BLOB_CHUNK 16

/* The blobs of a PSDB hashed by two threads: each claims the next VERIFY_BLOB_CHUNK ids of 1..last
 * (the writer numbers blobs 1..num_blobs; psdb_file_verify refuses any other id), so the work
 * splits evenly whatever the blob sizes. */
typedef struct blob_scan {
    _Atomic uint64_t next; /* first id of the next chunk */
    uint64_t last;         /* header num_blobs */
} blob_scan;

/* What one thread found: rows hashed, and the first failure. */
typedef struct blob_part {
    uint64_t count;
    psdb_hr hr;
    sqlite3_int64 bad_id;
    char msg[256];
} blob_part;

static void blob_scan_run(blob_scan *s, sqlite3 *db, blob_part *out)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        db, "SELECT id, sha256, data FROM blobs WHERE id BETWEEN ?1 AND ?2 ORDER BY id", -1, &st,
        NULL);

    if (rc != SQLITE_OK)
        goto sqlite_fail;
    for (;;) {
        uint64_t first = atomic_fetch_add(&s->next, VERIFY_BLOB_CHUNK);
        if (first > s->last)
            break;
        uint64_t last =
            s->last - first < VERIFY_BLOB_CHUNK ? s->last : first + VERIFY_BLOB_CHUNK - 1;
        sqlite3_bind_int64(st, 1, (sqlite3_int64)first);
        sqlite3_bind_int64(st, 2, (sqlite3_int64)last);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            uint8_t got[32];
            sqlite3_int64 id = sqlite3_column_int64(st, 0);
            if (sqlite3_column_type(st, 1) != SQLITE_BLOB ||
                sqlite3_column_type(st, 2) != SQLITE_BLOB || sqlite3_column_bytes(st, 1) != 32 ||
                sqlite3_column_bytes(st, 2) == 0) {
                out->hr = PSDB_E_CACHE_CORRUPT;
                out->bad_id = id;
                psdb__pf_set_msg(out->msg, sizeof(out->msg), "blob %lld: malformed row",
                                 (long long)id);
                goto cleanup;
            }
            psdb__sha256(sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2), got);
            if (memcmp(got, sqlite3_column_blob(st, 1), 32) != 0) {
                out->hr = PSDB_E_CACHE_CORRUPT;
                out->bad_id = id;
                psdb__pf_set_msg(out->msg, sizeof(out->msg),
                                 "blob %lld: bytes do not match their SHA-256", (long long)id);
                goto cleanup;
            }
            out->count++;
        }
        sqlite3_reset(st);
        if (rc != SQLITE_DONE)
            goto sqlite_fail;
    }
    goto cleanup;
sqlite_fail:
    out->hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
    out->bad_id = 0;
    psdb__pf_set_msg(out->msg, sizeof(out->msg), "blobs: %s", sqlite3_errmsg(db));
cleanup:
    if (out->hr < 0)
        atomic_store(&s->next, UINT64_MAX / 2); /* the other thread stops at its next chunk */
    sqlite3_finalize(st);
}

/* The second thread of psdb_file_verify: PRAGMA integrity_check on a connection of its own, then
 * its share of the blobs. */
typedef struct integrity_job {
    psdb_file *f;
    blob_scan *scan;
    psdb_hr hr;
    char msg[256];
    blob_part blobs;
} integrity_job;

static void integrity_run(integrity_job *job)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    verify_budget budget;
    int rc = SQLITE_OK;

    if ((job->hr = psdb__pf_db_open(job->f, &db, job->msg, sizeof(job->msg))) < 0)
        goto cleanup;
    verify_budget_init(job->f, &budget);
    sqlite3_progress_handler(db, VERIFY_PROGRESS_EVERY, verify_progress, &budget);
    rc = sqlite3_prepare_v2(db, "PRAGMA integrity_check(1)", -1, &st, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_step(st);
    if (budget.stopped) {
        job->hr = PSDB_E_CACHE_CORRUPT;
        psdb__pf_set_msg(job->msg, sizeof(job->msg),
                         "integrity_check stopped: more work than a PSDB of %llu bytes can need",
                         (unsigned long long)job->f->file_size);
    } else if (rc != SQLITE_ROW) {
        job->hr = psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT);
        psdb__pf_set_msg(job->msg, sizeof(job->msg), "integrity_check: %s", sqlite3_errmsg(db));
    } else if (!sqlite3_column_text(st, 0) ||
               strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0) {
        char e[64];
        job->hr = PSDB_E_CACHE_CORRUPT;
        psdb__pf_set_msg(job->msg, sizeof(job->msg), "integrity_check: %s",
                         psdb__pf_msg_name((const char *)sqlite3_column_text(st, 0), e));
    }
    sqlite3_finalize(st);
    st = NULL;
    if (job->hr < 0 && job->scan)
        atomic_store(&job->scan->next, UINT64_MAX / 2); /* its finding is reported: stop hashing */
    if (job->hr >= 0 && job->scan)
        blob_scan_run(job->scan, db, &job->blobs);
    if (budget.stopped && job->blobs.hr >= 0) {
        job->blobs.hr = PSDB_E_CACHE_CORRUPT;
        psdb__pf_set_msg(job->blobs.msg, sizeof(job->blobs.msg),
                         "verification stopped: more work than a PSDB of %llu bytes can need",
                         (unsigned long long)job->f->file_size);
    }
cleanup:
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void *integrity_main(void *arg)
{
    integrity_run(arg);
    return NULL;
}

psdb_hr psdb_file_verify(psdb_file *f, char *msg, size_t msg_size)
{
    const unsigned err_mark = psdb__error_mark();
    static const struct {
        const char *sql, *what;
    } checks[] = {
        {"SELECT 1 FROM value_entries v LEFT JOIN blobs b ON b.id = v.blob_id WHERE b.id IS NULL",
         "a value references a missing blob"},
        {"SELECT 1 FROM value_entries WHERE typeof(key) != 'blob' OR length(key) = 0 "
         "OR typeof(type) != 'integer' OR type NOT BETWEEN 0 AND 3",
         "a value has a malformed key or type"},
        {"SELECT 1 FROM value_entries v JOIN blobs b ON b.id = v.blob_id "
         "WHERE typeof(v.size) != 'integer' OR v.size != length(b.data)",
         "a value's size differs from its blob's"},
        /* With no dangling blob_id (checked above), counts suffice; value_entries has no index
         * on blob_id, so a NOT EXISTS per blob would be quadratic. */
        {"SELECT 1 WHERE (SELECT count(DISTINCT blob_id) FROM value_entries) != "
         "(SELECT count(*) FROM blobs)",
         "a blob is not referenced by any value"},
        {"SELECT 1 FROM value_groups WHERE typeof(key) != 'blob' OR length(key) = 0 "
         "OR typeof(version) != 'integer'",
         "a group has a malformed key or version"},
        {"SELECT 1 FROM group_members m WHERE NOT EXISTS (SELECT 1 FROM value_groups g "
         "WHERE g.key = m.group_key)",
         "a group member belongs to no group"},
        {"SELECT 1 FROM group_members m WHERE NOT EXISTS (SELECT 1 FROM value_entries v "
         "WHERE v.key = m.value_key)",
         "a group references a missing value key"},
        {"SELECT 1 FROM group_members GROUP BY group_key "
         "HAVING min(idx) != 0 OR max(idx) != count(*) - 1",
         "a group's member indexes are not 0..n-1"},
    };
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    sqlite3_stmt *st = NULL;
    content_stats cs = {0};
    uint64_t nblobs = 0;
    verify_budget budget = {0};
    integrity_job job = {.hr = PSDB_S_OK};
    blob_scan scan;
    blob_part mine = {.hr = PSDB_S_OK};
    pthread_t job_thread;
    int job_started = 0;
    char ids_sql[96];
    char hex[65];
    char why[512] = ""; /* the reason, recorded in psdb_error_last; msg is a view of that */

    if (!f) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_file_verify: NULL file");
        goto cleanup;
    }
    if ((hr = psdb__pf_conn_get(f, &c)) < 0) {
        psdb__pf_set_msg(why, sizeof(why), "cannot open a connection: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    /* SQLite's integrity check reads every page, as the blob hashing does: a second thread with
     * a connection of its own runs it, then joins this one in hashing blobs, so the two cost
     * about half their sum (publish runs this; measured). */
    atomic_init(&scan.next, 1);
    scan.last = f->info.num_blobs;
    job.f = f;
    job.scan = &scan;
    job_started = pthread_create(&job_thread, NULL, integrity_main, &job) == 0;
    if (!job_started) {
        job.scan = NULL;
        integrity_run(&job);
    }
    verify_budget_init(f, &budget);
    sqlite3_progress_handler(c->db, VERIFY_PROGRESS_EVERY, verify_progress, &budget);

    if (job_started || job.hr >= 0) /* job.hr is the other thread's until the join */
        blob_scan_run(&scan, c->db, &mine);
    if (job_started) {
        pthread_join(job_thread, NULL);
        job_started = 0;
    }
    if (job.hr < 0)
        goto cleanup; /* reported below */
    if (mine.hr < 0 || job.blobs.hr < 0) {
        /* The lower blob id first; a failure without one (SQLite's) before either. */
        const blob_part *bad = mine.hr >= 0                     ? &job.blobs
                               : job.blobs.hr >= 0              ? &mine
                               : job.blobs.bad_id < mine.bad_id ? &job.blobs
                                                                : &mine;
        hr = bad->hr;
        psdb__pf_set_msg(why, sizeof(why), "%s", bad->msg);
        goto cleanup;
    }
    nblobs = mine.count + job.blobs.count;

    for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
        if ((hr = expect_empty(c->db, checks[i].sql, checks[i].what, why, sizeof(why))) < 0)
            goto cleanup;
    /* Only ids 1..num_blobs were hashed: any other is refused (the counts then cover the rest). */
    snprintf(ids_sql, sizeof(ids_sql), "SELECT 1 FROM blobs WHERE id < 1 OR id > %llu",
             (unsigned long long)f->info.num_blobs);
    if ((hr = expect_empty(c->db, ids_sql, "blob ids are not 1..num_blobs", why, sizeof(why))) < 0)
        goto cleanup;

    if ((hr = psdb__pf_compute_content(c->db, &f->info.identity, &f->info.target, NULL, 0, &cs, why,
                                       sizeof(why))) < 0)
        goto cleanup;
    if (cs.num_values != f->info.num_values || cs.num_groups != f->info.num_groups ||
        cs.num_blobs != f->info.num_blobs || cs.blob_bytes != f->info.blob_bytes ||
        nblobs != cs.num_blobs) {
        hr = PSDB_E_CACHE_CORRUPT;
        psdb__pf_set_msg(
            why, sizeof(why),
            "header counts differ from the tables (values %llu/%llu, groups %llu/%llu, "
            "blobs %llu/%llu, blob bytes %llu/%llu)",
            (unsigned long long)f->info.num_values, (unsigned long long)cs.num_values,
            (unsigned long long)f->info.num_groups, (unsigned long long)cs.num_groups,
            (unsigned long long)f->info.num_blobs, (unsigned long long)cs.num_blobs,
            (unsigned long long)f->info.blob_bytes, (unsigned long long)cs.blob_bytes);
        goto cleanup;
    }
    if (memcmp(cs.digest, f->info.content_digest, 32) != 0) {
        hr = PSDB_E_CACHE_CORRUPT;
        psdb__hex(cs.digest, 32, hex);
        psdb__pf_set_msg(why, sizeof(why), "content digest differs from the header (recomputed %s)",
                         hex);
        goto cleanup;
    }
cleanup:
    sqlite3_finalize(st);
    if (job_started)
        pthread_join(job_thread, NULL);
    /* Damaged pages explain whatever else failed: SQLite's finding comes first. */
    if (job.hr < 0) {
        hr = job.hr;
        psdb__pf_set_msg(why, sizeof(why), "%s", job.msg);
    } else if (budget.stopped) {
        hr = PSDB_E_CACHE_CORRUPT;
        psdb__pf_set_msg(
            why, sizeof(why),
            "verification stopped: more work than a PSDB of %llu bytes can need (crafted "
            "content)",
            (unsigned long long)f->file_size);
    }
    if (c) {
        sqlite3_progress_handler(c->db, 0, NULL, NULL);
        psdb__pf_conn_put(f, c);
    }
    /* The reason is the thread's last error, unless a deeper call recorded why. */
    if (PSDB_FAILED(hr) && psdb__error_mark() == err_mark && why[0])
        psdb__error_set(hr, "psdb_file_verify: %s", why);
    return psdb__error_view(psdb__error_ret(hr, err_mark, __func__), msg, msg_size, "ok");
}

psdb_hr psdb_file_open_verified(const char *path, char *msg, size_t msg_size, psdb_file **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_file *f = NULL;
    char why[512] = ""; /* the open's reason, recorded in psdb_error_last; msg is a view of it */

    if (out)
        *out = NULL;
    if ((hr = psdb__file_open_msg(path, NULL, out ? &f : NULL, why, sizeof(why))) < 0)
        goto cleanup;
    if ((hr = psdb_file_verify(f, NULL, 0)) < 0)
        goto cleanup;
    *out = f;
    f = NULL;
cleanup:
    psdb_file_release(f);
    if (PSDB_FAILED(hr) && psdb__error_mark() == err_mark && why[0])
        psdb__error_set(hr, "psdb_file_open_verified: %s", why);
    return psdb__error_view(psdb__error_ret(hr, err_mark, __func__), msg, msg_size, "ok");
}

/* The whole file as open (the descriptor every connection reads), through SHA-256. */
static psdb_hr hash_file(psdb_file *f, uint8_t out[32])
{
    psdb_hr hr = PSDB_S_OK;
    psdb__sha256_ctx *sha = psdb__sha256_begin();
    uint8_t *buf = malloc(HASH_CHUNK);
    uint64_t off = 0;

    if (!sha || !buf) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (;;) {
        ssize_t n = psdb__pread_upto(f->pages->fd, buf, HASH_CHUNK, off);
        if (n < 0) {
            hr = psdb__error_set(psdb__errno_hr(errno), "psdb_file_check: read: %s",
                                 strerror(errno));
            goto cleanup;
        }
        if (n == 0)
            break;
        psdb__sha256_update(sha, buf, (size_t)n);
        off += (uint64_t)n;
    }
    if (off != f->file_size) {
        hr = psdb__error_set(PSDB_E_CACHE_CORRUPT,
                             "psdb_file_check: the file is %llu bytes, %llu when it was opened",
                             (unsigned long long)off, (unsigned long long)f->file_size);
        goto cleanup;
    }
    psdb__sha256_end(sha, out);
    sha = NULL;
cleanup:
    if (sha) {
        uint8_t junk[32];
        psdb__sha256_end(sha, junk);
    }
    free(buf);
    return hr;
}

/* Reads every blob's digest by id from the blobs table's index on sha256 (its pairs of digest and
 * id, a few pages: no blob page is read) into sha[1..num_blobs]: each id of 1..num_blobs exactly
 * once, no other. */
static psdb_hr load_blob_digests(psdb_file *f, conn *c, uint8_t (*sha)[32])
{
    psdb_hr hr = PSDB_S_OK;
    sqlite3_stmt *st = NULL;
    uint64_t n = 0;
    unsigned char *seen = calloc((size_t)f->info.num_blobs + 1, 1);
    int rc;

    if (!seen) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    rc = sqlite3_prepare_v2(c->db, "SELECT id, sha256 FROM blobs", -1, &st, NULL);
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
        if ((rc = sqlite3_step(st)) != SQLITE_ROW)
            break;
        sqlite3_int64 id = sqlite3_column_int64(st, 0);
        if (sqlite3_column_type(st, 1) != SQLITE_BLOB || sqlite3_column_bytes(st, 1) != 32 ||
            id < 1 || (uint64_t)id > f->info.num_blobs || seen[id]) {
            hr = psdb__error_set(PSDB_E_CACHE_CORRUPT,
                                 "psdb_file_check: blob %lld: malformed digest, an id outside "
                                 "1..%llu or named twice",
                                 (long long)id, (unsigned long long)f->info.num_blobs);
            goto cleanup;
        }
        seen[id] = 1;
        memcpy(sha[id], sqlite3_column_blob(st, 1), 32);
        n++;
    }
    if (rc != SQLITE_DONE) {
        hr = psdb__error_set(psdb__sqlite_hr(rc, PSDB_E_CACHE_CORRUPT),
                             "psdb_file_check: blob digests: %s", sqlite3_errmsg(c->db));
        goto cleanup;
    }
    if (n != f->info.num_blobs)
        hr = psdb__error_set(PSDB_E_CACHE_CORRUPT,
                             "psdb_file_check: %llu blob digests, the header says %llu",
                             (unsigned long long)n, (unsigned long long)f->info.num_blobs);
cleanup:
    sqlite3_finalize(st);
    free(seen);
    return hr;
}

/* The content digest recomputed from the tables without reading a blob's bytes: every blob's
 * digest (load_blob_digests), every value's key, type and blob, every group. Bounded like
 * psdb_file_verify. On success the blob digests become f->checked: every later fetch compares a
 * blob's bytes with the digest proven here. */
static psdb_hr check_content(psdb_file *f)
{
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    content_stats cs = {0};
    verify_budget budget = {0};
    char msg[256] = "";
    char hex[65];
    uint8_t(*sha)[32] = NULL, (*none)[32] = NULL;

    if (f->info.num_blobs >= SIZE_MAX / 32 || !(sha = calloc((size_t)f->info.num_blobs + 1, 32))) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if ((hr = psdb__pf_conn_get(f, &c)) < 0)
        goto cleanup;
    verify_budget_init(f, &budget);
    sqlite3_progress_handler(c->db, VERIFY_PROGRESS_EVERY, verify_progress, &budget);
    if ((hr = load_blob_digests(f, c, sha)) >= 0)
        hr = psdb__pf_compute_content(c->db, &f->info.identity, &f->info.target, sha,
                                      f->info.num_blobs, &cs, msg, sizeof(msg));
    sqlite3_progress_handler(c->db, 0, NULL, NULL);
    if (budget.stopped) {
        hr = psdb__error_set(PSDB_E_CACHE_CORRUPT,
                             "psdb_file_check: stopped: more work than a PSDB of %llu bytes can "
                             "need (crafted content)",
                             (unsigned long long)f->file_size);
        goto cleanup;
    }
    if (hr < 0) {
        if (msg[0])
            psdb__error_set(hr, "psdb_file_check: %s", msg);
        goto cleanup;
    }
    if (cs.num_values != f->info.num_values || cs.num_groups != f->info.num_groups ||
        memcmp(cs.digest, f->info.content_digest, 32) != 0) {
        psdb__hex(cs.digest, 32, hex);
        hr = psdb__error_set(PSDB_E_CACHE_CORRUPT,
                             "psdb_file_check: the values and groups are not the ones the header's "
                             "content digest names (recomputed %s)",
                             hex);
        goto cleanup;
    }
    /* Proven: published once (a second check of the same file proves the same digests). */
    if (atomic_compare_exchange_strong(&f->checked, &none, sha))
        sha = NULL;
cleanup:
    if (c)
        psdb__pf_conn_put(f, c);
    free(sha);
    return hr;
}

psdb_hr psdb_file_check(psdb_file *f, uint32_t flags, const uint8_t expected[32])
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint8_t got[32];
    char hex[2][65];

    if (!f || (flags != PSDB_FILE_CHECK_CONTENT && flags != PSDB_FILE_CHECK_SHA256) ||
        (flags == PSDB_FILE_CHECK_SHA256 && !expected)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_file_check: NULL file, unknown flags, or SHA256 without "
                               "an expected digest");
        goto cleanup;
    }
    if (flags == PSDB_FILE_CHECK_SHA256) {
        if ((hr = hash_file(f, got)) < 0)
            goto cleanup;
    } else {
        if ((hr = check_content(f)) < 0)
            goto cleanup;
        memcpy(got, f->info.content_digest, 32);
    }
    if (expected && memcmp(got, expected, 32) != 0) {
        psdb__hex(got, 32, hex[0]);
        psdb__hex(expected, 32, hex[1]);
        hr = psdb__error_set(PSDB_E_CACHE_CORRUPT, "psdb_file_check: %s %s, expected %s",
                             flags == PSDB_FILE_CHECK_SHA256 ? "the file's SHA-256 is"
                                                             : "the content digest is",
                             hex[0], hex[1]);
        goto cleanup;
    }
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}
