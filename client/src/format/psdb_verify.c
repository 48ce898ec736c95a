/* psdb_verify.c - psdb_file_verify: the deep check of a PSDB (integrity, every digest, every
 * reference). */
/*
 * DESIGN
 * psdb_file_verify makes every check of schema/PSDB.md ("psdb_file_verify checks everything") on
 * two threads, each with a connection of its own, reading in scan mode (psdb_vfs.c: large blocks
 * instead of a pread per page):
 *   - the second thread runs PRAGMA integrity_check, then joins in hashing blobs if any are left,
 *     then looks up every group member's value key (SQL);
 *   - the calling thread hashes blobs (both claim the next VERIFY_BLOB_CHUNK ids of 1..num_blobs)
 *     and records each blob's digest and length; once no thread hashes any more it checks every
 *     value and group on one scan of value_entries and the group tables against that record,
 *     which also gives the content digest (verify_values).
 * The checks of values and groups were one SQL query each, two of them joining every value with
 * its blob row, and cost more than the hashing on a file of many small values (measured: 0.4 s of
 * 1.1 s for 63k values). The queries remain as verify_exact: whenever the one scan finds anything
 * wrong (or had no record), they run in the order their failures have always been reported, so a
 * damaged file gets the same first reason as before; the one scan alone only ever accepts.
 */
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

/* The page cache (SQLite's cache_size) of a verifying connection while it seeks rows in random
 * order: integrity_check seeks every blob's digest in the index on sha256, the group checks and
 * the value scan seek value keys and groups. These bytes per row of those tables hold them
 * (measured: the cache of 2 MiB a connection gets by default made 38k preads of one 200 MiB file,
 * 4 MiB made 1k; a larger cache costs more in fresh pages than it saves), between SQLite's default
 * and VERIFY_CACHE_MAX. */
#define VERIFY_CACHE_PER_ROW 64u
#define VERIFY_CACHE_MIN ((uint64_t)2 << 20)
#define VERIFY_CACHE_MAX ((uint64_t)64 << 20)

static void verify_cache_size(sqlite3 *db, uint64_t rows)
{
    char sql[64];
    uint64_t bytes = rows > VERIFY_CACHE_MAX / VERIFY_CACHE_PER_ROW ? VERIFY_CACHE_MAX
                                                                    : rows * VERIFY_CACHE_PER_ROW;
    if (bytes < VERIFY_CACHE_MIN)
        bytes = VERIFY_CACHE_MIN;
    snprintf(sql, sizeof(sql), "PRAGMA cache_size = -%llu", (unsigned long long)(bytes >> 10));
    sqlite3_exec(db, sql, NULL, NULL, NULL); /* only faster: not checked */
}

/* The blobs of a PSDB hashed by two threads: each claims the next VERIFY_BLOB_CHUNK ids of 1..last
 * (the writer numbers blobs 1..num_blobs; psdb_file_verify refuses any other id), so the work
 * splits evenly whatever the blob sizes. */
typedef struct blob_scan {
    _Atomic uint64_t next; /* first id of the next chunk */
    uint64_t last;         /* header num_blobs */
    /* What the hashing learns for verify_values, by blob id 1..last: each hashed blob's digest and
     * length (0: not hashed; every blob has bytes), and, filled by the value scan, whether a value
     * names it. NULL: not recorded (a header count no valid file has, or no memory); verify_exact
     * then checks with SQL alone. */
    uint8_t (*sha)[32];
    uint32_t *len;
    uint8_t *ref;
    /* Threads inside blob_scan_run: once none is and every id is claimed, the record is whole
     * (blob_scan_wait). A thread enters before it claims, so none that enters later finds an id
     * left to hash or record. */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    unsigned hashing;
} blob_scan;

static void blob_scan_enter(blob_scan *s)
{
    pthread_mutex_lock(&s->lock);
    s->hashing++;
    pthread_mutex_unlock(&s->lock);
}

static void blob_scan_leave(blob_scan *s)
{
    pthread_mutex_lock(&s->lock);
    if (--s->hashing == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
}

/* Called by a thread whose blob_scan_run returned (every id is claimed): waits until the others
 * have hashed and recorded theirs. */
static void blob_scan_wait(blob_scan *s)
{
    pthread_mutex_lock(&s->lock);
    while (s->hashing > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

/* A blob takes more than this many bytes of a valid PSDB: its row (a 32-byte digest, at least one
 * byte of data, a cell header and pointer) and its entry in the index on sha256 (the digest again
 * and the id). A header claiming more blobs than the file can hold gets no blob_scan arrays. */
#define VERIFY_MIN_BYTES_PER_BLOB 64u

/* What one thread found: rows hashed, and the first failure. */
typedef struct blob_part {
    uint64_t count;
    psdb_hr hr;
    sqlite3_int64 bad_id;
    char msg[256];
} blob_part;

static void blob_scan_run(blob_scan *s, sqlite3 *db, const EVP_MD *sha256, blob_part *out)
{
    sqlite3_stmt *st = NULL;
    /* One context for every blob: EVP_Digest would allocate one and look SHA-256 up each time. */
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = SQLITE_OK;

    blob_scan_enter(s);
    if (!md) {
        out->hr = PSDB_E_OUTOFMEMORY;
        psdb__pf_set_msg(out->msg, sizeof(out->msg), "blobs: out of memory");
        goto cleanup;
    }
    rc = sqlite3_prepare_v2(
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
            uint8_t got[EVP_MAX_MD_SIZE];
            unsigned got_size = 0;
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
            const void *data = sqlite3_column_blob(st, 2);
            int size = sqlite3_column_bytes(st, 2);
            if (EVP_DigestInit_ex2(md, sha256, NULL) != 1 ||
                EVP_DigestUpdate(md, data, (size_t)size) != 1 ||
                EVP_DigestFinal_ex(md, got, &got_size) != 1 || got_size != 32) {
                out->hr = PSDB_E_OUTOFMEMORY;
                psdb__pf_set_msg(out->msg, sizeof(out->msg), "blob %lld: cannot hash it",
                                 (long long)id);
                goto cleanup;
            }
            if (memcmp(got, sqlite3_column_blob(st, 1), 32) != 0) {
                out->hr = PSDB_E_CACHE_CORRUPT;
                out->bad_id = id;
                psdb__pf_set_msg(out->msg, sizeof(out->msg),
                                 "blob %lld: bytes do not match their SHA-256", (long long)id);
                goto cleanup;
            }
            if (s->len) { /* id is in first..last, ids no other thread reads */
                memcpy(s->sha[id], got, 32);
                s->len[id] = (uint32_t)size;
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
    EVP_MD_CTX_free(md);
    blob_scan_leave(s);
}

/* The checks of psdb_file_verify after the blobs', in the order their failures are reported:
 * those of values, then those of groups. */
typedef struct verify_query {
    const char *sql, *what;
} verify_query;

static const verify_query value_checks[] = {
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
};

/* The one check of groups verify_values does not make: group_checks[2]. */
#define GROUP_CHECK_MEMBER_KEYS 2
static const verify_query group_checks[] = {
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

static psdb_hr expect_all_empty(sqlite3 *db, const verify_query *q, size_t n, char *why,
                                size_t why_size)
{
    psdb_hr hr = PSDB_S_OK;
    for (size_t i = 0; i < n && hr >= 0; i++)
        hr = expect_empty(db, q[i].sql, q[i].what, why, why_size);
    return hr;
}

/* The second thread of psdb_file_verify: PRAGMA integrity_check on a connection of its own, then
 * its share of the blobs, then the lookup of every group member's value key. */
typedef struct integrity_job {
    psdb_file *f;
    blob_scan *scan; /* NULL: run alone, no blobs and no lookups */
    psdb_hr hr;      /* integrity_check's finding (or the budget's, spent on the lookups) */
    char msg[256];
    int members; /* the lookups: 1 found every key, 0 missed one (verify_exact names it), -1 not
                    run */
    blob_part blobs;
} integrity_job;

static void integrity_run(integrity_job *job)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    verify_budget budget;
    int rc = SQLITE_OK, scan_on = 1;
    const psdb_file_info *info = &job->f->info;
    char why[256];

    job->members = -1;
    if ((job->hr = psdb__pf_db_open(job->f, &db, job->msg, sizeof(job->msg))) < 0)
        goto cleanup;
    sqlite3_file_control(db, "main", PSDB__FCNTL_SCAN, &scan_on); /* only faster: not checked */
    verify_cache_size(db, info->num_blobs > info->num_values ? info->num_blobs : info->num_values);
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
        blob_scan_run(job->scan, db, job->f->sha256, &job->blobs);
    if (budget.stopped && job->blobs.hr >= 0) {
        job->blobs.hr = PSDB_E_CACHE_CORRUPT;
        psdb__pf_set_msg(job->blobs.msg, sizeof(job->blobs.msg),
                         "verification stopped: more work than a PSDB of %llu bytes can need",
                         (unsigned long long)job->f->file_size);
    }
    /* After the blobs, while the other thread checks values and groups (verify_values). */
    if (job->scan && job->hr >= 0 && job->blobs.hr >= 0) {
        const verify_query *q = &group_checks[GROUP_CHECK_MEMBER_KEYS];
        job->members = expect_empty(db, q->sql, q->what, why, sizeof(why)) >= 0;
        if (budget.stopped) {
            job->hr = PSDB_E_CACHE_CORRUPT;
            psdb__pf_set_msg(job->msg, sizeof(job->msg),
                             "verification stopped: more work than a PSDB of %llu bytes can need",
                             (unsigned long long)job->f->file_size);
        }
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

static psdb_hr expect_no_stray_blob(psdb_file *f, sqlite3 *db, char *why, size_t why_size)
{
    char sql[96];
    /* Only ids 1..num_blobs were hashed: any other is refused (the counts then cover the rest). */
    snprintf(sql, sizeof(sql), "SELECT 1 FROM blobs WHERE id < 1 OR id > %llu",
             (unsigned long long)f->info.num_blobs);
    return expect_empty(db, sql, "blob ids are not 1..num_blobs", why, why_size);
}

/* The checks of values and groups, the header counts and the content digest, by SQL: each check a
 * query of its own, in the order their failures are reported. nblobs: the blobs hashed. */
static psdb_hr verify_exact(psdb_file *f, sqlite3 *db, uint64_t nblobs, char *why, size_t why_size)
{
    psdb_hr hr = PSDB_S_OK;
    content_stats cs = {0};
    char hex[65];

    if ((hr = expect_all_empty(db, value_checks, sizeof(value_checks) / sizeof(value_checks[0]),
                               why, why_size)) < 0 ||
        (hr = expect_all_empty(db, group_checks, sizeof(group_checks) / sizeof(group_checks[0]),
                               why, why_size)) < 0 ||
        (hr = expect_no_stray_blob(f, db, why, why_size)) < 0)
        goto cleanup;
    if ((hr = psdb__pf_compute_content(db, &f->info.identity, &f->info.target, NULL, &cs, why,
                                       why_size)) < 0)
        goto cleanup;
    if (cs.num_values != f->info.num_values || cs.num_groups != f->info.num_groups ||
        cs.num_blobs != f->info.num_blobs || cs.blob_bytes != f->info.blob_bytes ||
        nblobs != cs.num_blobs) {
        hr = PSDB_E_CACHE_CORRUPT;
        psdb__pf_set_msg(
            why, why_size,
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
        psdb__pf_set_msg(why, why_size, "content digest differs from the header (recomputed %s)",
                         hex);
        goto cleanup;
    }
cleanup:
    return hr;
}

/* verify_exact's checks on one scan of value_entries and the group tables against what the blob
 * hashing recorded (blob_scan), psdb__pf_compute_content with the record: each value's key, type,
 * blob and size; every blob named by a value (which with no value naming a missing blob is the
 * count of distinct blob ids); each group's key and version, its members' indexes, every member
 * under a group; the content digest from the recorded digests and the header counts from the
 * record; and the query for stray blob ids as in verify_exact. The lookup of members' value keys
 * is the second thread's. Reads no blob page. 1: every check holds. 0: one does not, the reason
 * in why. -1: nothing was recorded. */
static int verify_values(psdb_file *f, sqlite3 *db, const blob_scan *scan, char *why,
                         size_t why_size)
{
    const content_blobs blobs = {.sha = (const uint8_t(*)[32])scan->sha,
                                 .num = scan->last,
                                 .len = scan->len,
                                 .ref = scan->ref};
    content_stats cs = {0};
    uint64_t bytes = 0;
    char hex[65];

    if (!scan->len)
        return -1;
    if (expect_no_stray_blob(f, db, why, why_size) < 0 ||
        psdb__pf_compute_content(db, &f->info.identity, &f->info.target, &blobs, &cs, why,
                                 why_size) < 0)
        return 0;
    for (uint64_t id = 1; id <= scan->last; id++) {
        if (!scan->len[id] || !scan->ref[id]) {
            psdb__pf_set_msg(why, why_size, "blob %llu: missing or named by no value",
                             (unsigned long long)id);
            return 0;
        }
        bytes += scan->len[id];
    }
    if (cs.num_values != f->info.num_values || cs.num_groups != f->info.num_groups ||
        bytes != f->info.blob_bytes) {
        psdb__pf_set_msg(why, why_size, "header counts differ from the tables");
        return 0;
    }
    if (memcmp(cs.digest, f->info.content_digest, 32) != 0) {
        psdb__hex(cs.digest, 32, hex);
        psdb__pf_set_msg(why, why_size, "content digest differs from the header (recomputed %s)",
                         hex);
        return 0;
    }
    return 1;
}

static void blob_scan_free(blob_scan *s)
{
    free(s->sha);
    free(s->len);
    free(s->ref);
    s->sha = NULL;
    s->len = NULL;
    s->ref = NULL;
}

/* The arrays of blob_scan for blobs 1..n, when a valid file of file_size bytes can hold n blobs
 * and there is memory; else none (only slower). */
static void blob_scan_alloc(blob_scan *s, uint64_t n, uint64_t file_size)
{
    if (n > file_size / VERIFY_MIN_BYTES_PER_BLOB || n >= SIZE_MAX / 64)
        return;
    s->sha = calloc((size_t)n + 1, 32);
    s->len = calloc((size_t)n + 1, sizeof(*s->len));
    s->ref = calloc((size_t)n + 1, 1);
    if (!s->sha || !s->len || !s->ref)
        blob_scan_free(s);
}

psdb_hr psdb_file_verify(psdb_file *f, char *msg, size_t msg_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    conn *c = NULL;
    uint64_t nblobs = 0;
    verify_budget budget = {0};
    integrity_job job = {.hr = PSDB_S_OK};
    blob_scan scan = {
        .sha = NULL, .lock = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER};
    blob_part mine = {.hr = PSDB_S_OK};
    pthread_t job_thread;
    int job_started = 0, scan_on = 1, fast = -1;
    char why[512] = ""; /* the reason, recorded in psdb_error_last; msg is a view of that */
    char fast_why[256] = "";

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
    blob_scan_alloc(&scan, scan.last, f->file_size);
    job.f = f;
    job.scan = &scan;
    job_started = pthread_create(&job_thread, NULL, integrity_main, &job) == 0;
    if (!job_started) {
        job.scan = NULL;
        integrity_run(&job);
    }
    verify_budget_init(f, &budget);
    sqlite3_progress_handler(c->db, VERIFY_PROGRESS_EVERY, verify_progress, &budget);
    sqlite3_file_control(c->db, "main", PSDB__FCNTL_SCAN, &scan_on); /* only faster */

    if (job_started || job.hr >= 0) /* job.hr is the other thread's until the join */
        blob_scan_run(&scan, c->db, f->sha256, &mine);
    blob_scan_wait(&scan);
    /* With the record whole, while the other thread may still check integrity: if it or the other
     * thread's hashing fails, what this finds is not reported. */
    if (mine.hr >= 0) {
        /* The blob pages were read once each; value and group tables are now sought at random. */
        verify_cache_size(c->db, f->info.num_values);
        fast = verify_values(f, c->db, &scan, fast_why, sizeof(fast_why));
    }
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
    if (fast == 1 && nblobs != f->info.num_blobs) {
        fast = 0;
        psdb__pf_set_msg(fast_why, sizeof(fast_why), "%llu blobs hashed, the header says %llu",
                         (unsigned long long)nblobs, (unsigned long long)f->info.num_blobs);
    }
    if (fast == 1 && job.members == 1)
        goto cleanup;
    /* Else the queries decide, unless the one scan or the second thread's lookups refused what
     * they accept: never expected, and never accepted. */
    if ((hr = verify_exact(f, c->db, nblobs, why, sizeof(why))) < 0 ||
        (fast != 0 && job.members != 0))
        goto cleanup;
    hr = PSDB_E_CACHE_CORRUPT;
    psdb__pf_set_msg(why, sizeof(why), "%s",
                     fast == 0 ? fast_why : "a group member's value key was not found");
cleanup:
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
        scan_on = 0;
        sqlite3_file_control(c->db, "main", PSDB__FCNTL_SCAN, &scan_on);
        sqlite3_exec(c->db, PSDB__CONN_CACHE_SIZE_SQL, NULL, NULL, NULL);
        sqlite3_progress_handler(c->db, 0, NULL, NULL);
        psdb__pf_conn_put(f, c);
    }
    blob_scan_free(&scan);
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
    if ((hr = load_blob_digests(f, c, sha)) >= 0) {
        const content_blobs blobs = {.sha = (const uint8_t(*)[32])sha, .num = f->info.num_blobs};
        hr = psdb__pf_compute_content(c->db, &f->info.identity, &f->info.target, &blobs, &cs, msg,
                                      sizeof(msg));
    }
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
