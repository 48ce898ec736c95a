/* psdbfile_test.c - the PSDB file: writing, reading, validation, lookups, digests, bad inputs. */
#include "testutil.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sqlite3.h>

#include "format/psdbfile_internal.h"
#include "common/buf.h"
#include "common/hash.h"

#define FAMILY "contoso-gfx9"
#define ABI 7u
#define PROFILE PSDB_VERSION(1, 2, 3, 4)
#define NKEYS 40

static char *tmpdir;

static void setup(void)
{
    tmpdir = tu_mkdtemp();
}

static void teardown(void)
{
    tu_rmtree(tmpdir);
    free(tmpdir);
    tmpdir = NULL;
}

static const psdb_app_identity sample_identity = {
    .desc = {.exe_filename = "game.exe",
             .name = "Sample Game",
             .version = PSDB_VERSION(1, 0, 2, 0),
             .engine_name = "Engine",
             .engine_version = PSDB_VERSION(5, 1, 0, 0)},
    .app_id = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
};

static psdb_target sample_target(void)
{
    psdb_target t = {.family = FAMILY,
                     .abi_version = ABI,
                     .compiler_version = PSDB_VERSION(2, 0, 0, 1),
                     .profile_version = PROFILE};
    return t;
}

static psdb_adapter_desc sample_adapter(void)
{
    psdb_adapter_desc a = {.vendor_id = 0x1234,
                           .device_id = 0x5678,
                           .family = FAMILY,
                           .abi_min = 5,
                           .abi_max = 9,
                           .compiler_version = PSDB_VERSION(2, 0, 0, 1),
                           .app_profile_version = PROFILE};
    return a;
}

/* Value bytes of key i and type t: object code ~1 KiB with a recognisable pattern, metadata
 * short. Keys 30..39 share their object code with keys 0..9 (deduplication). */
static size_t sample_value(int i, uint32_t t, uint8_t *buf)
{
    int src = i >= 30 ? i - 30 : i;
    size_t n = t == PSDB_VALUE_OBJECT_CODE ? 1000 + (size_t)src : 40 + (size_t)(i % 7);
    for (size_t j = 0; j < n; j++)
        buf[j] = (uint8_t)(t == PSDB_VALUE_OBJECT_CODE ? (src * 31 + (int)j * 7) : (i + (int)j));
    if (t == PSDB_VALUE_OBJECT_CODE) {
        char tag[32];
        snprintf(tag, sizeof(tag), "OBJ%03d-CODE", src % 1000);
        memcpy(buf, tag, 11);
    }
    return n;
}

static void sample_key(int i, char key[8])
{
    snprintf(key, 8, "k%03d", i % 1000);
}

/* Writes the sample content, in forward (order 0) or a shuffled (order 1) put order. */
static void write_sample(const char *path, int order)
{
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    uint8_t *buf = malloc(4096);
    ck_assert_hr(psdb_writer_create(path, &sample_identity, &t, &w), PSDB_S_OK);
    for (int n = 0; n < NKEYS; n++) {
        int i = order == 0 ? n : (n * 17 + 5) % NKEYS;
        char key[8];
        sample_key(i, key);
        for (uint32_t k = 0; k < 2; k++) {
            uint32_t type = order == 0 ? k : 1 - k;
            size_t size = sample_value(i, type, buf);
            ck_assert_hr(psdb_writer_put_value(w, key, 4, type, buf, size), PSDB_S_OK);
        }
    }
    for (int n = 0; n < NKEYS / 2; n++) {
        int g = order == 0 ? n : NKEYS / 2 - 1 - n;
        char gkey[16], k1[8], k2[8];
        snprintf(gkey, sizeof(gkey), "group-%02d", g);
        sample_key(2 * g, k1);
        sample_key(2 * g + 1, k2);
        psdb_value_ref refs[2] = {{k1, 4}, {k2, 4}};
        ck_assert_hr(psdb_writer_put_group(w, gkey, strlen(gkey), 100 + (uint64_t)g, 2, refs),
                     PSDB_S_OK);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    free(buf);
}

static char *sample_file(const char *name)
{
    char *p = tu_path(tmpdir, name);
    write_sample(p, 0);
    return p;
}

static psdb_hr open_status(const char *path, const psdb_adapter_desc *a)
{
    psdb_file *f = NULL;
    psdb_hr hr = psdb_file_open(path, a, &f);
    ck_assert(hr < 0 ? f == NULL : f != NULL);
    psdb_file_release(f);
    return hr;
}

/* Runs SQL against a copy of a PSDB with a writable SQLite connection. */
static void exec_sql(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    char *err = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    ck_assert_msg(rc == SQLITE_OK, "%s: %s", sql, err ? err : "?");
    sqlite3_close(db);
}

/* ---- C1: content round trip ------------------------------------------------------------------ */

START_TEST(test_psdbfile__C1_roundtrip_identity_target_values_groups)
{
    char *p = sample_file("a.psdb");
    psdb_file *f = NULL;
    psdb_file_info info;
    uint8_t buf[4096], want[4096];
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    ck_assert_str_eq(info.identity.desc.exe_filename, "game.exe");
    ck_assert_str_eq(info.identity.desc.name, "Sample Game");
    ck_assert_str_eq(info.identity.desc.engine_name, "Engine");
    ck_assert_uint_eq(info.identity.desc.version, PSDB_VERSION(1, 0, 2, 0));
    ck_assert_uint_eq(info.identity.desc.engine_version, PSDB_VERSION(5, 1, 0, 0));
    ck_assert_mem_eq(info.identity.app_id, sample_identity.app_id, 16);
    ck_assert_str_eq(info.target.family, FAMILY);
    ck_assert_uint_eq(info.target.abi_version, ABI);
    ck_assert_uint_eq(info.target.compiler_version, PSDB_VERSION(2, 0, 0, 1));
    ck_assert_uint_eq(info.target.profile_version, PROFILE);
    ck_assert_uint_eq(info.num_values, 2 * NKEYS);
    ck_assert_uint_eq(info.num_groups, NKEYS / 2);
    /* Keys 30..39 repeat the object code of keys 0..9: stored once. */
    ck_assert_uint_eq(info.num_blobs, 2 * NKEYS - 10);
    for (int i = 0; i < NKEYS; i++) {
        char key[8];
        sample_key(i, key);
        for (uint32_t t = 0; t < 2; t++) {
            size_t n = sizeof(buf), wn = sample_value(i, t, want);
            ck_assert_hr(psdb_file_find_value(f, key, 4, t, buf, &n), PSDB_S_OK);
            ck_assert_uint_eq(n, wn);
            ck_assert_mem_eq(buf, want, n);
        }
    }
    char hexd[65];
    char msg[256];
    psdb__hex(info.content_digest, 32, hexd);
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_S_OK);
    ck_assert_str_eq(msg, "ok");
    psdb_file_release(f);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C1_identical_blobs_stored_once)
{
    char *p = tu_path(tmpdir, "dedup.psdb");
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    psdb_file *f = NULL;
    psdb_file_info info;
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_S_OK);
    for (int i = 0; i < 10; i++) {
        char key[8];
        sample_key(i, key);
        ck_assert_hr(psdb_writer_put_value(w, key, 4, PSDB_VALUE_OBJECT_CODE, "same", 4),
                     PSDB_S_OK);
        ck_assert_hr(psdb_writer_put_value(w, key, 4, PSDB_VALUE_DEBUG_PDB, "same", 4), PSDB_S_OK);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.num_values, 20);
    ck_assert_uint_eq(info.num_blobs, 1);
    ck_assert_uint_eq(info.blob_bytes, 4);
    psdb_file_release(f);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C1_put_value_duplicates)
{
    char *p = tu_path(tmpdir, "dup.psdb");
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, 0, "abc", 3), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, 0, "abc", 3), PSDB_S_FALSE);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, 0, "abd", 3), PSDB_E_CACHE_HASH_COLLISION);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, 1, "abd", 3), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, 4, "abd", 3), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, 2, "abd", 0), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_put_value(w, "k", 0, 2, "abd", 3), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_put_value(w, NULL, 1, 2, "abd", 3), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_put_value(NULL, "k", 1, 2, "abd", 3), PSDB_E_INVALIDARG);
    psdb_value_ref refs[2] = {{"k", 1}, {"missing", 7}};
    ck_assert_hr(psdb_writer_put_group(w, "g", 1, 1, 2, refs), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_writer_put_group(w, "g", 1, 1, 1, refs), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_group(w, "g", 1, 1, 1, refs), PSDB_E_ALREADY_EXISTS);
    ck_assert_hr(psdb_writer_put_group(w, "g", 1, 2, 1, refs), PSDB_E_ALREADY_EXISTS);
    ck_assert_hr(psdb_writer_put_group(w, "h", 1, 2, 1, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_put_group(w, "h", 1, 2, 0, NULL), PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_put_value(w, "z", 1, 0, "abc", 3), PSDB_E_INVALIDARG);
    psdb_writer_release(w);

    psdb_file *f = NULL;
    psdb_file_info info;
    char msg[256];
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.num_values, 2);
    ck_assert_uint_eq(info.num_groups, 2);
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_S_OK);
    psdb_file_release(f);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C1_writer_rejects_bad_targets)
{
    char *p = tu_path(tmpdir, "bad.psdb");
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    char longfam[PSDB_ADAPTER_FAMILY_MAX + 1];
    memset(longfam, 'f', sizeof(longfam));
    longfam[PSDB_ADAPTER_FAMILY_MAX] = '\0';

    t.abi_version = 0;
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_E_INVALIDARG);
    t.abi_version = UINT64_MAX;
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_E_INVALIDARG);
    t = sample_target();
    t.family = "";
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_E_INVALIDARG);
    t.family = NULL;
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_E_INVALIDARG);
    longfam[PSDB_ADAPTER_FAMILY_MAX - 1] = '\0'; /* 127 bytes: the longest allowed */
    t.family = longfam;
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_S_OK);
    psdb_writer_release(w);
    w = NULL;
    longfam[PSDB_ADAPTER_FAMILY_MAX - 1] = 'f'; /* 128 bytes */
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_E_INVALIDARG);
    t = sample_target();
    psdb_app_identity id = sample_identity;
    id.desc.name = NULL;
    ck_assert_hr(psdb_writer_create(p, &id, &t, &w), PSDB_E_INVALIDARG);
    id = sample_identity;
    id.desc.engine_name = NULL;
    ck_assert_hr(psdb_writer_create(p, &id, &t, &w), PSDB_E_INVALIDARG);
    id.desc.engine_version = 0;
    ck_assert_hr(psdb_writer_create(p, &id, &t, &w), PSDB_S_OK);
    psdb_writer_release(w);
    ck_assert_hr(psdb_writer_create(NULL, &id, &t, &w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_create(p, NULL, &t, &w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_create(p, &id, NULL, &w), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_writer_create(p, &id, &t, NULL), PSDB_E_INVALIDARG);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C1_writer_renames_into_place)
{
    char *p = tu_path(tmpdir, "atomic.psdb");
    char *tmp = tu_path(tmpdir, "atomic.psdb.tmp");
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    struct stat sb;

    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, 0, "abc", 3), PSDB_S_OK);
    ck_assert_int_ne(stat(p, &sb), 0);
    ck_assert_int_eq(stat(tmp, &sb), 0);
    psdb_writer_release(w); /* unfinished: the temporary file goes */
    ck_assert_int_ne(stat(tmp, &sb), 0);
    ck_assert_int_ne(stat(p, &sb), 0);

    w = NULL;
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k", 1, 0, "abc", 3), PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    ck_assert_int_eq(stat(p, &sb), 0);
    ck_assert_int_ne(stat(tmp, &sb), 0);
    psdb_writer_release(w);
    ck_assert_int_eq(stat(p, &sb), 0);
    ck_assert_hr(open_status(p, NULL), PSDB_S_OK);
    free(p);
    free(tmp);
}
END_TEST

START_TEST(test_psdbfile__C1_schema_copy_matches_schema_file)
{
    size_t n = 0;
    char *sql = tu_read_file(PSDB_TEST_DATA "/../../schema/psdb.sql", &n);
    ck_assert_ptr_nonnull(sql);
    ck_assert_str_eq(psdb__psdb_schema_sql, sql);
    free(sql);
}
END_TEST

/* ---- C2: validation at open ------------------------------------------------------------------ */

START_TEST(test_psdbfile__C2_bad_arguments_and_missing_file)
{
    char *p = tu_path(tmpdir, "absent.psdb");
    psdb_file *f = NULL;
    psdb_adapter_desc a = sample_adapter();
    ck_assert_hr(psdb_file_open(NULL, NULL, &f), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_file_open(p, NULL, NULL), PSDB_E_INVALIDARG);
    a.family = NULL;
    ck_assert_hr(psdb_file_open(p, &a, &f), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_E_IO);
    ck_assert_hr(psdb_file_open(tmpdir, NULL, &f), PSDB_E_IO);
    ck_assert_ptr_null(f);
    psdb_file_release(NULL);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_path_with_uri_characters)
{
    char *p = tu_path(tmpdir, "a b?c=1#d%20e&f.psdb");
    psdb_file *f = NULL;
    size_t n = 0;
    write_sample(p, 0);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_find_value(f, "k001", 4, 0, NULL, &n), PSDB_S_OK);
    psdb_file_release(f);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_not_sqlite_is_corrupt)
{
    char *p = tu_path(tmpdir, "text.psdb");
    psdb_adapter_desc a = sample_adapter();
    ck_assert_int_eq(tu_write_file(p, "this is not a database, just some text\n", 39), 0);
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(open_status(p, &a), PSDB_E_CACHE_CORRUPT);
    ck_assert_int_eq(tu_write_file(p, "", 0), 0);
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    /* SQLite's magic followed by garbage. */
    char junk[4096];
    memset(junk, 0xA5, sizeof(junk));
    memcpy(junk, "SQLite format 3", 16);
    ck_assert_int_eq(tu_write_file(p, junk, sizeof(junk)), 0);
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_other_sqlite_file_is_corrupt)
{
    char *p = tu_path(tmpdir, "other.db");
    char msg[256];
    psdb_file *f = NULL;
    exec_sql(p, "CREATE TABLE t (x); INSERT INTO t VALUES (1);");
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb__file_open_msg(p, NULL, &f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(strstr(msg, "not a PSDB"), "%s", msg);
    /* An SODB (another application_id) is not a PSDB either. */
    exec_sql(p, "PRAGMA application_id = 1347637060;");
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    uint32_t appid = 0;
    ck_assert_int_eq(psdb__sqlite_application_id(p, &appid), 0);
    ck_assert_uint_eq(appid, PSDB__SODB_APPLICATION_ID);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_newer_schema_version_is_corrupt)
{
    char *p = sample_file("v99.psdb");
    char msg[256];
    psdb_file *f = NULL;
    exec_sql(p, "PRAGMA user_version = 99;");
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb__file_open_msg(p, NULL, &f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(strstr(msg, "schema version 99"), "%s", msg);
    exec_sql(p, "PRAGMA user_version = 0;");
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    exec_sql(p, "PRAGMA user_version = 1;");
    ck_assert_hr(open_status(p, NULL), PSDB_S_OK);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_truncated_is_corrupt)
{
    char *p = sample_file("trunc.psdb");
    size_t n = 0;
    char *bytes = tu_read_file(p, &n);
    psdb_adapter_desc a = sample_adapter();
    ck_assert_uint_gt(n, 8192);
    /* A whole page short, half a page short, just the SQLite header, less than the header. */
    const size_t cuts[] = {n - 4096, n - 2048, n - 1, 100, 60};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
        ck_assert_int_eq(tu_write_file(p, bytes, cuts[i]), 0);
        ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
        ck_assert_hr(open_status(p, &a), PSDB_E_CACHE_CORRUPT);
    }
    free(bytes);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_missing_table_is_corrupt)
{
    const char *tables[] = {"header", "blobs", "value_entries", "value_groups", "group_members"};
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
        char *p = sample_file("missing.psdb");
        char sql[128], msg[256];
        psdb_file *f = NULL;
        snprintf(sql, sizeof(sql), "DROP TABLE %s;", tables[i]);
        exec_sql(p, sql);
        ck_assert_hr(psdb__file_open_msg(p, NULL, &f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
        ck_assert_msg(strstr(msg, tables[i]), "%s: %s", tables[i], msg);
        free(p);
    }
    /* A table replaced by a view of the same shape, and an extra table. */
    char *p = sample_file("view.psdb");
    exec_sql(p, "ALTER TABLE value_groups RENAME TO g2; "
                "CREATE VIEW value_groups AS SELECT key, version FROM g2;");
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    free(p);
    p = sample_file("extra.psdb");
    exec_sql(p, "CREATE TABLE extra (x);");
    ck_assert_hr(open_status(p, NULL), PSDB_E_CACHE_CORRUPT);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_malformed_header_row_is_corrupt)
{
    const char *edits[] = {
        "DELETE FROM header;",
        "UPDATE header SET abi_version = 0;",
        "UPDATE header SET abi_version = -1;", /* UINT64_MAX */
        "UPDATE header SET family = '';",
        "UPDATE header SET family = substr(hex(zeroblob(64)), 1, 128);",
        "UPDATE header SET app_version = 'one';",
        "UPDATE header SET engine_name = NULL;", /* engine_version stays non-zero */
        "UPDATE header SET num_blobs = 1000000000;",
        "PRAGMA ignore_check_constraints = ON; UPDATE header SET app_id = x'00';",
        "PRAGMA ignore_check_constraints = ON; UPDATE header SET content_digest = 'abc';",
        "PRAGMA ignore_check_constraints = ON; INSERT INTO header SELECT 2, exe_filename, app_name,"
        " app_version, engine_name, engine_version, app_id, family, abi_version, compiler_version,"
        " profile_version, num_values, num_groups, num_blobs, blob_bytes, content_digest FROM"
        " header;",
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char *p = sample_file("hdr.psdb");
        char msg[256];
        psdb_file *f = NULL;
        exec_sql(p, edits[i]);
        ck_assert_hr(psdb__file_open_msg(p, NULL, &f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
        ck_assert_msg(strstr(msg, "header"), "%s: %s", edits[i], msg);
        free(p);
    }
}
END_TEST

START_TEST(test_psdbfile__C2_corruption_checked_before_compatibility)
{
    char *p = sample_file("order.psdb");
    psdb_adapter_desc a = sample_adapter();
    a.family = "other-family";
    a.abi_min = a.abi_max = 100;
    exec_sql(p, "PRAGMA user_version = 2;");
    ck_assert_hr(open_status(p, &a), PSDB_E_CACHE_CORRUPT);
    exec_sql(p, "PRAGMA user_version = 1;");
    /* Family is checked before the versions. */
    ck_assert_hr(open_status(p, &a), PSDB_E_ADAPTER_NOT_FOUND);
    free(p);
}
END_TEST

/* ---- C2: the schema is compared exactly, before anything in it is evaluated ----------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Rewrites the stored CREATE statement of one schema entry: `from` replaced by `to` in its text.
 * The table's rows are untouched, so only the schema check can tell. */
static void rewrite_schema(const char *path, const char *name, const char *from, const char *to)
{
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, '%s', "
             "'%s') WHERE name = '%s' AND instr(sql, '%s') > 0; SELECT CASE changes() WHEN 1 "
             "THEN 1 ELSE abs(-9223372036854775807 - 1) END;",
             from, to, name, from);
    exec_sql(path, sql);
}

/* Open refuses the file quickly and names the schema (and so never reached a statement that could
 * evaluate what the file stores: a generated column below takes minutes, or calls a function that
 * does not exist); `psdb verify` refuses it the same way. */
static void assert_schema_refused(const char *path, const char *what)
{
    psdb_file *f = NULL;
    char msg[256], cmd[1024];
    double t0 = now_s();
    psdb_hr hr = psdb__file_open_msg(path, NULL, &f, msg, sizeof(msg));
    double dt = now_s() - t0;
    ck_assert_msg(hr == PSDB_E_CACHE_CORRUPT, "%s: open gave %s", what, psdb_hr_str(hr));
    ck_assert_msg(f == NULL, "%s", what);
    ck_assert_msg(strstr(msg, "schema") || strstr(msg, "SQLite header"), "%s: %s", what, msg);
    ck_assert_msg(dt < 2.0, "%s: open took %.1f s", what, dt);

    char *out = tu_path(tmpdir, "verify.txt");
    size_t n = 0;
    snprintf(cmd, sizeof(cmd), "%s verify %s", PSDB_TOOL, path);
    t0 = now_s();
    ck_assert_msg(tu_run(cmd, out) != 0, "%s: psdb verify accepted it", what);
    dt = now_s() - t0;
    char *text = tu_read_file(out, &n);
    ck_assert_msg(text && (strstr(text, "schema") || strstr(text, "SQLite header")), "%s: %s", what,
                  text ? text : "");
    ck_assert_msg(dt < 5.0, "%s: psdb verify took %.1f s", what, dt);
    free(text);
    free(out);
}

/* A copy of the PSDB at `from` under tmpdir/name (writing a PSDB costs fsyncs; copying does not).
 */
static char *copy_of(const char *from, const char *name)
{
    size_t n = 0;
    char *bytes = tu_read_file(from, &n);
    char *p = tu_path(tmpdir, name);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_int_eq(tu_write_file(p, bytes, n), 0);
    free(bytes);
    return p;
}

/* A slow expression: about a second per evaluation, once per row. */
#define SLOW_EXPR "length(hex(zeroblob(100000000 + length(key))))"

START_TEST(test_psdbfile__C2_schema_compared_exactly_before_evaluation)
{
    static const struct {
        const char *what, *name, *from, *to; /* a rewrite of a stored statement, or */
        const char *sql;                     /* plain SQL on the file */
    } edits[] = {
        {"virtual generated column (slow)", "value_entries", "PRIMARY KEY (key, type)",
         "g INTEGER GENERATED ALWAYS AS (" SLOW_EXPR ") VIRTUAL NOT NULL, PRIMARY KEY (key, type)",
         NULL},
        {"generated column with CHECK (slow)", "blobs", "data   BLOB NOT NULL",
         "data   BLOB NOT NULL, g GENERATED ALWAYS AS (length(hex(zeroblob(100000000 + id)))) "
         "CHECK (g > 0)",
         NULL},
        {"generated column calling an unknown function", "value_groups", "version INTEGER NOT NULL",
         "version INTEGER NOT NULL, g AS (no_such_function(key)) VIRTUAL", NULL},
        {"column type changed", "value_entries", "size    INTEGER", "size    TEXT", NULL},
        {"CHECK constraint changed", "value_entries", "BETWEEN 0 AND 3", "BETWEEN 0 AND 9", NULL},
        {"NOT NULL dropped", "group_members", "value_key BLOB NOT NULL", "value_key BLOB", NULL},
        {"collation added", "header", "family           TEXT NOT NULL",
         "family           TEXT NOT NULL COLLATE NOCASE", NULL},
        {"default expression added", "header", "exe_filename     TEXT,",
         "exe_filename     TEXT DEFAULT (''game.exe''),", NULL},
        {"CHECK with a slow expression", "header", "CHECK (id = 1)",
         "CHECK (id = 1 AND length(hex(zeroblob(100000000))) > 0)", NULL},
        {"WITHOUT ROWID dropped", "value_groups", ") WITHOUT ROWID", ")", NULL},
        {"extra table", NULL, NULL, NULL, "CREATE TABLE extra (x);"},
        {"sqlite_stat1", NULL, NULL, NULL, "ANALYZE;"},
        {"sqlite_sequence", NULL, NULL, NULL,
         "CREATE TABLE s (id INTEGER PRIMARY KEY AUTOINCREMENT); INSERT INTO s VALUES (NULL);"},
        {"extra index", NULL, NULL, NULL, "CREATE INDEX ix ON value_entries (blob_id);"},
        {"expression index", NULL, NULL, NULL,
         "CREATE INDEX ix ON blobs (length(data) + id); PRAGMA writable_schema = ON; UPDATE "
         "sqlite_schema SET sql = replace(sql, 'length(data) + id', '" SLOW_EXPR "') "
         "WHERE name = 'ix';"},
        {"partial index", NULL, NULL, NULL,
         "CREATE INDEX ix ON value_entries (size) WHERE size > 0;"},
        {"extra trigger", NULL, NULL, NULL,
         "CREATE TRIGGER t AFTER INSERT ON blobs BEGIN SELECT 1; END;"},
        {"extra view", NULL, NULL, NULL,
         "CREATE VIEW v AS SELECT " SLOW_EXPR " FROM value_entries;"},
        {"table replaced by a view", NULL, NULL, NULL,
         "ALTER TABLE value_groups RENAME TO g2; CREATE VIEW value_groups AS SELECT key, version "
         "FROM g2;"},
        {"column renamed", NULL, NULL, NULL,
         "ALTER TABLE value_groups RENAME COLUMN version TO ver;"},
        {"column added", NULL, NULL, NULL, "ALTER TABLE header ADD COLUMN extra INTEGER;"},
        {"table renamed", NULL, NULL, NULL,
         "ALTER TABLE group_members RENAME TO members; CREATE TABLE group_members (group_key "
         "BLOB NOT NULL REFERENCES value_groups (key), idx INTEGER NOT NULL, value_key BLOB NOT "
         "NULL, x, PRIMARY KEY (group_key, idx)) WITHOUT ROWID;"},
    };
    char *good = sample_file("good.psdb");
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char *p = copy_of(good, "schema.psdb");
        if (edits[i].sql)
            exec_sql(p, edits[i].sql);
        else
            rewrite_schema(p, edits[i].name, edits[i].from, edits[i].to);
        assert_schema_refused(p, edits[i].what);
        free(p);
    }
    free(good);
}
END_TEST

START_TEST(test_psdbfile__C2_schema_whitespace_case_and_comments_ignored)
{
    /* The same statements written otherwise by another writer: same tokens, same meaning. */
    char *p = sample_file("spacing.psdb");
    psdb_file *f = NULL;
    char msg[256];
    exec_sql(p, "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = "
                "replace(replace(lower(sql), '    ', ' /* c */ '), ',', ' ,' || char(10)) "
                "WHERE type = 'table';");
    ck_assert_hr(psdb__file_open_msg(p, NULL, &f, msg, sizeof(msg)), PSDB_S_OK);
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_S_OK);
    psdb_file_release(f);
    /* But a quoted name is another token. */
    rewrite_schema(p, "value_groups", "version integer", "\"version\" integer");
    assert_schema_refused(p, "quoted column name");
    free(p);
}
END_TEST

/* Sets byte `off` of the SQLite header to v. */
static void poke_header(const char *path, long off, uint8_t v)
{
    FILE *fp = fopen(path, "r+b");
    ck_assert_ptr_nonnull(fp);
    ck_assert_int_eq(fseek(fp, off, SEEK_SET), 0);
    ck_assert_int_eq(fputc(v, fp), v);
    ck_assert_int_eq(fclose(fp), 0);
}

START_TEST(test_psdbfile__C2_header_settings_must_be_the_writers)
{
    static const struct {
        const char *what, *sql;
        long off;
        uint8_t v;
    } edits[] = {
        {"auto_vacuum", "PRAGMA auto_vacuum = FULL; VACUUM;", 0, 0},
        {"incremental vacuum", "PRAGMA auto_vacuum = INCREMENTAL; VACUUM;", 0, 0},
        {"WAL mode", "PRAGMA journal_mode = WAL; PRAGMA journal_mode = WAL;", 0, 0},
        {"UTF-16 text", NULL, 59, 2},
        {"reserved bytes per page", NULL, 20, 8},
        {"schema format 1", NULL, 47, 1},
        {"reserved header byte", NULL, 80, 1},
    };
    char *good = sample_file("good.psdb");
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char *p = copy_of(good, "hdrset.psdb");
        if (edits[i].sql)
            exec_sql(p, edits[i].sql);
        else
            poke_header(p, edits[i].off, edits[i].v);
        assert_schema_refused(p, edits[i].what);
        free(p);
    }
    free(good);
    /* A UTF-16 database made by SQLite itself from psdb.sql. */
    char *q = tu_path(tmpdir, "utf16.psdb");
    char sql[8192];
    snprintf(sql, sizeof(sql), "PRAGMA encoding = 'UTF-16le'; %s", psdb__psdb_schema_sql);
    exec_sql(q, sql);
    assert_schema_refused(q, "UTF-16 database");
    free(q);
}
END_TEST

/* Verification stays linear on crafted content: groups with many members that all name one
 * missing-looking value, and a member list far longer than the header claims. */
START_TEST(test_psdbfile__C2_verify_bounded_on_large_groups)
{
    char *p = sample_file("biggroup.psdb");
    psdb_file *f = NULL;
    char msg[256];
    exec_sql(p, "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) "
                "INSERT INTO group_members SELECT CAST('group-00' AS BLOB), i, CAST('k000' AS "
                "BLOB) FROM n; UPDATE header SET num_groups = 4000000000;");
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_E_CACHE_CORRUPT); /* count > file size */
    exec_sql(p, "UPDATE header SET num_groups = 20;");
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    double t0 = now_s();
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(now_s() - t0 < 5.0, "verify took %.1f s", now_s() - t0);
    ck_assert_msg(strstr(msg, "content digest"), "%s", msg);
    psdb_file_release(f);
    free(p);
}
END_TEST

/* ---- A3: compatibility with the driver ------------------------------------------------------ */

START_TEST(test_psdbfile__A3_family_must_match)
{
    char *p = sample_file("fam.psdb");
    psdb_adapter_desc a = sample_adapter();
    ck_assert_hr(open_status(p, &a), PSDB_S_OK);
    a.family = "contoso-gfx10";
    ck_assert_hr(open_status(p, &a), PSDB_E_ADAPTER_NOT_FOUND);
    a.family = "Contoso-gfx9"; /* case matters: family strings are IHV-defined identifiers */
    ck_assert_hr(open_status(p, &a), PSDB_E_ADAPTER_NOT_FOUND);
    a.family = "";
    ck_assert_hr(open_status(p, &a), PSDB_E_ADAPTER_NOT_FOUND);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__A3_abi_within_driver_range)
{
    char *p = sample_file("abi.psdb");
    psdb_adapter_desc a = sample_adapter();
    a.abi_min = ABI;
    a.abi_max = ABI;
    ck_assert_hr(open_status(p, &a), PSDB_S_OK); /* abi == min == max */
    a.abi_min = 1;
    ck_assert_hr(open_status(p, &a), PSDB_S_OK); /* abi == max */
    a.abi_min = ABI;
    a.abi_max = 1000;
    ck_assert_hr(open_status(p, &a), PSDB_S_OK); /* abi == min */
    a.abi_min = ABI + 1;
    ck_assert_hr(open_status(p, &a), PSDB_E_DRIVER_VERSION_MISMATCH);
    a.abi_min = 1;
    a.abi_max = ABI - 1;
    ck_assert_hr(open_status(p, &a), PSDB_E_DRIVER_VERSION_MISMATCH);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__A3_profile_top_32_bits_must_match)
{
    char *p = sample_file("prof.psdb");
    psdb_adapter_desc a = sample_adapter();
    a.app_profile_version = PSDB_VERSION(1, 2, 9, 9); /* lower 32 bits differ: compatible */
    ck_assert_hr(open_status(p, &a), PSDB_S_OK);
    a.app_profile_version = PSDB_VERSION(1, 2, 0, 0);
    ck_assert_hr(open_status(p, &a), PSDB_S_OK);
    a.app_profile_version = PSDB_VERSION(1, 3, 3, 4);
    ck_assert_hr(open_status(p, &a), PSDB_E_DRIVER_VERSION_MISMATCH);
    a.app_profile_version = PSDB_VERSION(2, 2, 3, 4);
    ck_assert_hr(open_status(p, &a), PSDB_E_DRIVER_VERSION_MISMATCH);
    free(p);
}
END_TEST

/* ---- C3: lookups ----------------------------------------------------------------------------- */

START_TEST(test_psdbfile__C3_size_then_data)
{
    char *p = sample_file("look.psdb");
    psdb_file *f = NULL;
    uint8_t want[4096], buf[4096];
    size_t wn = sample_value(3, PSDB_VALUE_OBJECT_CODE, want), n = 0;
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, PSDB_VALUE_OBJECT_CODE, NULL, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, wn);
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, PSDB_VALUE_OBJECT_CODE, buf, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, wn);
    ck_assert_mem_eq(buf, want, wn);
    /* A short buffer: MORE_DATA and the size written back, nothing else changed. */
    n = 10;
    memset(buf, 0xEE, sizeof(buf));
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, PSDB_VALUE_OBJECT_CODE, buf, &n),
                 PSDB_E_MORE_DATA);
    ck_assert_uint_eq(n, wn);
    ck_assert_uint_eq(buf[0], 0xEE);
    n = wn; /* exactly enough */
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, PSDB_VALUE_OBJECT_CODE, buf, &n), PSDB_S_OK);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, PSDB_VALUE_METADATA, buf, &n), PSDB_S_OK);
    ck_assert_uint_eq(n, sample_value(3, PSDB_VALUE_METADATA, want));
    free(p);
    psdb_file_release(f);
}
END_TEST

START_TEST(test_psdbfile__C3_absent_is_not_found)
{
    char *p = sample_file("absent.psdb");
    psdb_file *f = NULL;
    uint8_t buf[16];
    size_t n = 0;
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_find_value(f, "nope", 4, 0, NULL, &n), PSDB_E_NOT_FOUND);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "nope", 4, 0, buf, &n), PSDB_E_NOT_FOUND);
    /* The key exists, the type does not. */
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, PSDB_VALUE_DEBUG_PDB, NULL, &n),
                 PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, PSDB_VALUE_PERFORMANCE_DATA, buf, &n),
                 PSDB_E_NOT_FOUND);
    /* A prefix of a key is another key. */
    ck_assert_hr(psdb_file_find_value(f, "k00", 3, 0, NULL, &n), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, 4, NULL, &n), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_file_find_value(f, "k003", 0, 0, NULL, &n), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_file_find_value(f, NULL, 4, 0, NULL, &n), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, 0, NULL, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_file_find_value(NULL, "k003", 4, 0, NULL, &n), PSDB_E_INVALIDARG);
    psdb_file_release(f);
    free(p);
}
END_TEST

/* Flips one byte of key 5's object code inside the raw file. */
static void flip_object_code(const char *path)
{
    size_t n = 0;
    uint8_t *bytes = (uint8_t *)tu_read_file(path, &n);
    uint8_t *hit = memmem(bytes, n, "OBJ005-CODE", 11);
    ck_assert_ptr_nonnull(hit);
    hit[200] ^= 0x40;
    ck_assert_int_eq(tu_write_file(path, bytes, n), 0);
    free(bytes);
}

START_TEST(test_psdbfile__C2_C3_flipped_blob_found_at_lookup)
{
    char *p = sample_file("flip.psdb");
    psdb_file *f = NULL;
    uint8_t buf[4096];
    size_t n = 0;
    char msg[256];
    flip_object_code(p);
    /* The damage is inside a blob: the file still opens (open reads no blob). */
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_find_value(f, "k005", 4, 0, NULL, &n), PSDB_S_OK);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k005", 4, 0, buf, &n), PSDB_E_CACHE_CORRUPT);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k005", 4, 0, buf, &n), PSDB_E_CACHE_CORRUPT);
    /* Key 35 shares the blob. */
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k035", 4, 0, buf, &n), PSDB_E_CACHE_CORRUPT);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k006", 4, 0, buf, &n), PSDB_S_OK);
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(strstr(msg, "SHA-256"), "%s", msg);
    psdb_file_release(f);
    free(p);
}
END_TEST

/* ---- What an installed PSDB's reader proves before it hands bytes on ------------------------- */

static void sha256_of_file(const char *path, uint8_t out[32])
{
    size_t n = 0;
    char *bytes = tu_read_file(path, &n);
    ck_assert_ptr_nonnull(bytes);
    psdb__sha256(bytes, n, out);
    free(bytes);
}

START_TEST(test_psdbfile__C4_check_proves_content_and_file_digests)
{
    char *p = sample_file("check.psdb");
    psdb_file *f = NULL;
    psdb_file_info info;
    uint8_t sha[32], other[32];
    sha256_of_file(p, sha);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_get_info(f, &info), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, NULL), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, info.content_digest), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_SHA256, sha), PSDB_S_OK);
    memcpy(other, info.content_digest, 32);
    other[31] ^= 1;
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, other), PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(strstr(psdb_error_last(), "content digest"), "%s", psdb_error_last());
    memcpy(other, sha, 32);
    other[0] ^= 1;
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_SHA256, other), PSDB_E_CACHE_CORRUPT);
    ck_assert_msg(strstr(psdb_error_last(), "SHA-256"), "%s", psdb_error_last());
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_SHA256, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_file_check(f, 0, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT | PSDB_FILE_CHECK_SHA256, sha),
                 PSDB_E_INVALIDARG);
    psdb_file_release(f);

    /* Damage inside a blob's bytes: the tables still name the signed content, the file's digest
     * no longer does, and the blob itself is refused at its fetch. */
    flip_object_code(p);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, info.content_digest), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_SHA256, sha), PSDB_E_CACHE_CORRUPT);
    psdb_file_release(f);

    /* A blob replaced with its digest (bytes and digest agree, a lookup would serve them): the
     * content digest no longer matches. */
    write_sample(p, 0);
    exec_sql(p, "UPDATE blobs SET data = X'0102030405', sha256 = "
                "X'74f81fe167d99b4cb41d6d0ccda82278caee9f3e2f25d5e5a3936ff3dcec60d0' "
                "WHERE id = 3");
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, NULL), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, info.content_digest),
                 PSDB_E_CACHE_CORRUPT);
    psdb_file_release(f);
    /* A value pointed at another blob. */
    write_sample(p, 0);
    exec_sql(p,
             "UPDATE value_entries SET blob_id = 1 WHERE key = CAST('k007' AS BLOB) AND type = 0");
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, info.content_digest),
                 PSDB_E_CACHE_CORRUPT);
    psdb_file_release(f);
    free(p);
}
END_TEST

/* Once the content digest is proven, a blob is checked against the digest the proof covered, not
 * against its row's column: a file changed afterwards (bytes and row digest made to agree) is
 * refused at the fetch. */
START_TEST(test_psdbfile__C4_fetch_after_check_uses_the_proven_digests)
{
    char *p = sample_file("proven.psdb");
    psdb_file *f = NULL;
    uint8_t buf[4096], want[4096], old_sha[32], new_sha[32];
    size_t n = 0, m = sample_value(5, PSDB_VALUE_OBJECT_CODE, want);

    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, NULL), PSDB_S_OK);
    /* In place (the same inode the open checked): key 5's object code and every copy of its
     * digest, so that the row, the index and the bytes all agree on the new value. */
    psdb__sha256(want, m, old_sha);
    uint8_t *bytes = (uint8_t *)tu_read_file(p, &n);
    uint8_t *hit = memmem(bytes, n, "OBJ005-CODE", 11);
    ck_assert_ptr_nonnull(hit);
    hit[200] ^= 0x40;
    memcpy(want, hit, m);
    psdb__sha256(want, m, new_sha);
    int copies = 0;
    for (uint8_t *q = bytes; (q = memmem(q, n - (size_t)(q - bytes), old_sha, 32)) != NULL;
         q += 32) {
        memcpy(q, new_sha, 32);
        copies++;
    }
    ck_assert_int_ge(copies, 1);
    FILE *fp = fopen(p, "r+b");
    ck_assert_ptr_nonnull(fp);
    ck_assert_uint_eq(fwrite(bytes, 1, n, fp), n);
    fclose(fp);
    free(bytes);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k005", 4, PSDB_VALUE_OBJECT_CODE, buf, &n),
                 PSDB_E_CACHE_CORRUPT);
    /* Another value, untouched, is served. */
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k006", 4, PSDB_VALUE_OBJECT_CODE, buf, &n), PSDB_S_OK);
    psdb_file_release(f);
    /* Without a proof the changed file reads as its rows say (what the proof is for). */
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k005", 4, PSDB_VALUE_OBJECT_CODE, buf, &n), PSDB_S_OK);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_CONTENT, NULL), PSDB_E_CACHE_CORRUPT);
    psdb_file_release(f);
    free(p);
}
END_TEST

/* A FIFO, a device or a directory named as a PSDB is refused at once (opening a FIFO for reading
 * blocks until a writer comes, which would hang a game at start). */
START_TEST(test_psdbfile__C2_fifo_device_directory_refused_without_blocking)
{
    char *fifo = tu_path(tmpdir, "fifo.psdb");
    const char *paths[] = {fifo, "/dev/zero", tmpdir};
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        psdb_file *f = NULL;
        time_t t0 = time(NULL);
        alarm(20); /* a blocking open fails the test instead of hanging it */
        psdb_hr hr = psdb_file_open(paths[i], NULL, &f);
        alarm(0);
        ck_assert_msg(PSDB_FAILED(hr), "%s opened", paths[i]);
        ck_assert_ptr_null(f);
        ck_assert_int_le(time(NULL) - t0, 2);
        ck_assert_msg(strstr(psdb_error_last(), "not a regular file"), "%s: %s", paths[i],
                      psdb_error_last());
    }
    free(fifo);
}
END_TEST

/* Inside a group walk (which holds a connection), each lookup needs another one: opened now,
 * after the path changed. */
static int lookup_in_walk(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                          void *ctx)
{
    psdb_file *f = ((void **)ctx)[0];
    int *wrong = ((void **)ctx)[1];
    uint8_t buf[4096], want[4096];
    (void)key;
    (void)key_size;
    (void)version;
    (void)num_values;
    for (int i = 0; i < NKEYS; i++) {
        char k[8];
        size_t n = sizeof(buf), m = sample_value(i, PSDB_VALUE_OBJECT_CODE, want);
        sample_key(i, k);
        if (psdb_file_find_value(f, k, 4, PSDB_VALUE_OBJECT_CODE, buf, &n) != PSDB_S_OK || n != m ||
            memcmp(buf, want, n) != 0)
            (*wrong)++;
    }
    return 1; /* one group is enough */
}

/* A file renamed over the path after the open is never read: every connection, also one opened
 * later for a lookup, reads the file the open checked. */
START_TEST(test_psdbfile__C2_reads_the_file_it_opened_whatever_the_path_names_later)
{
    char *p = sample_file("bound.psdb");
    char *q = tu_path(tmpdir, "other.psdb");
    psdb_file *f = NULL;
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    uint8_t junk[1200];
    uint8_t sha[32];
    int wrong = 0;
    void *ctx[2];
    char msg[256];

    sha256_of_file(p, sha);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    /* Another PSDB with the same keys and other bytes takes the name. */
    memset(junk, 0x5a, sizeof(junk));
    ck_assert_hr(psdb_writer_create(q, &sample_identity, &t, &w), PSDB_S_OK);
    for (int i = 0; i < NKEYS; i++) {
        char key[8];
        sample_key(i, key);
        ck_assert_hr(psdb_writer_put_value(w, key, 4, PSDB_VALUE_OBJECT_CODE, junk, sizeof(junk)),
                     PSDB_S_OK);
    }
    ck_assert_hr(psdb_writer_put_group(w, "g", 1, 1, 0, NULL), PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    ck_assert_int_eq(rename(q, p), 0);

    ctx[0] = f;
    ctx[1] = &wrong;
    ck_assert_hr(psdb_file_foreach_group(f, lookup_in_walk, ctx), PSDB_S_FALSE);
    ck_assert_int_eq(wrong, 0);
    ck_assert_hr(psdb_file_check(f, PSDB_FILE_CHECK_SHA256, sha), PSDB_S_OK);
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_S_OK);
    psdb_file_release(f);
    free(p);
    free(q);
}
END_TEST

/* ---- The in-memory key index agrees with the SQL path ---------------------------------------- */

/* Every status, size and byte of a lookup on f equals the one on g. */
static void assert_same_answers(psdb_file *f, psdb_file *g)
{
    static const char *extra[] = {"nope", "k00", "k0030", "text"};
    uint8_t a[4096], b[4096];

    for (int i = 0; i < NKEYS + 4; i++) {
        char key[8];
        const char *k = key;
        size_t ks = 4;
        if (i < NKEYS) {
            sample_key(i, key);
        } else {
            k = extra[i - NKEYS];
            ks = strlen(k);
        }
        for (uint32_t t = 0; t < PSDB_VALUE_TYPE_COUNT; t++) {
            size_t caps[3] = {0, 10, sizeof(a)};
            for (int c = 0; c < 3; c++) {
                size_t na = caps[c], nb = caps[c];
                memset(a, 0xA5, sizeof(a));
                memset(b, 0xA5, sizeof(b));
                psdb_hr ha = psdb_file_find_value(f, k, ks, t, c ? a : NULL, &na);
                psdb_hr hb = psdb_file_find_value(g, k, ks, t, c ? b : NULL, &nb);
                ck_assert_msg(ha == hb, "key %.*s type %u cap %zu: %08x vs %08x", (int)ks, k, t,
                              caps[c], (unsigned)ha, (unsigned)hb);
                ck_assert_uint_eq(na, nb);
                ck_assert_mem_eq(a, b, sizeof(a));
            }
        }
    }
}

/* Opens path twice, one handle kept on SQL and one with the index built, and compares them. */
static void compare_paths(const char *path, int want_index)
{
    psdb_file *sql = NULL, *idx = NULL;

    ck_assert_hr(psdb_file_open(path, NULL, &sql), PSDB_S_OK);
    ck_assert_hr(psdb_file_open(path, NULL, &idx), PSDB_S_OK);
    psdb__file_index_disable(sql);
    ck_assert_int_eq(psdb__file_index_wait(sql), 0);
    ck_assert_int_eq(psdb__file_index_wait(idx), want_index);
    ck_assert_uint_eq(psdb__file_index_bytes(sql), 0);
    ck_assert(want_index ? psdb__file_index_bytes(idx) > 0 : psdb__file_index_bytes(idx) == 0);
    assert_same_answers(idx, sql);
    psdb_file_release(sql);
    psdb_file_release(idx);
}

START_TEST(test_psdbfile__C3_index_agrees_with_sql)
{
    char *p = sample_file("index.psdb");
    compare_paths(p, 1);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_C3_index_keeps_malformed_rows_corrupt)
{
    char *p = sample_file("index-bad.psdb");
    psdb_file *f = NULL;
    uint8_t buf[4096];
    size_t n = sizeof(buf);
    /* A text size, a negative blob id, a dangling blob id, a type out of range, a text key. */
    exec_sql(p,
             "PRAGMA ignore_check_constraints = 1;"
             "UPDATE value_entries SET size = 'big' WHERE key = CAST('k001' AS BLOB) AND type = 0;"
             "UPDATE value_entries SET blob_id = -4 WHERE key = CAST('k002' AS BLOB) AND type = 1;"
             "UPDATE value_entries SET blob_id = 999999 WHERE key = CAST('k003' AS BLOB) AND "
             "type = 0;"
             "UPDATE value_entries SET type = 7 WHERE key = CAST('k004' AS BLOB) AND type = 1;"
             "INSERT INTO value_entries VALUES ('text', 0, 1, 1000);");
    compare_paths(p, 1);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_int_eq(psdb__file_index_wait(f), 1);
    ck_assert_hr(psdb_file_find_value(f, "k001", 4, 0, NULL, &n), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_file_find_value(f, "k002", 4, 1, buf, &n), PSDB_E_CACHE_CORRUPT);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k003", 4, 0, buf, &n), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_file_find_value(f, "k004", 4, 1, NULL, &n), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_file_find_value(f, "text", 4, 0, NULL, &n), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb_file_find_value(f, "k005", 4, 0, NULL, &n), PSDB_S_OK);
    psdb_file_release(f);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_index_gives_up_on_unreadable_table)
{
    char *p = sample_file("index-ids.psdb");
    /* A blob id beyond 32 bits: the index is not built, lookups keep answering through SQL. */
    exec_sql(p, "UPDATE value_entries SET blob_id = 5000000000 WHERE key = CAST('k001' AS BLOB) "
                "AND type = 0;");
    compare_paths(p, 0);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_flipped_blob_corrupt_with_index)
{
    char *p = sample_file("index-flip.psdb");
    psdb_file *f = NULL;
    uint8_t buf[4096];
    size_t n = sizeof(buf);
    flip_object_code(p);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_int_eq(psdb__file_index_wait(f), 1);
    ck_assert_hr(psdb_file_find_value(f, "k005", 4, 0, buf, &n), PSDB_E_CACHE_CORRUPT);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k006", 4, 0, buf, &n), PSDB_S_OK);
    psdb_file_release(f);
    free(p);
}
END_TEST

/* Bytes of value type t of key i in the direct-read file: object code of 1 byte to 5 KiB, a fifth
 * of it around the size where a blob row stops fitting on one 4 KiB leaf (SQLite then spills it
 * onto overflow pages and the direct read leaves it to SQLite), and short metadata. */
static size_t direct_value(int i, uint32_t t, uint8_t *buf)
{
    size_t n = t == PSDB_VALUE_OBJECT_CODE
                   ? (i % 5 == 0 ? 3980 + (size_t)(i % 160) : 1 + (size_t)(i * 37 % 5000))
                   : 40 + (size_t)(i % 50);
    for (size_t j = 0; j < n; j++)
        buf[j] = (uint8_t)(i * 13 + (int)j * (t + 3) + (int)(j >> 8));
    return n;
}

/* Writes keys d00000.. d<n-1> with the values of direct_value. */
static void write_direct(const char *path, int n)
{
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    uint8_t *buf = malloc(8192);
    ck_assert_ptr_nonnull(buf);
    ck_assert_hr(psdb_writer_create(path, &sample_identity, &t, &w), PSDB_S_OK);
    for (int i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof(key), "d%05d", i);
        for (uint32_t type = 0; type < 2; type++) {
            size_t size = direct_value(i, type, buf);
            ck_assert_hr(psdb_writer_put_value(w, key, strlen(key), type, buf, size), PSDB_S_OK);
        }
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    free(buf);
}

START_TEST(test_psdbfile__C3_direct_blob_reads_match_the_writer)
{
    enum { N = 3000 };
    char *p = tu_path(tmpdir, "direct.psdb");
    psdb_file *f = NULL;
    uint8_t *want = malloc(8192), *got = malloc(8192);
    uint64_t fetches = 0;
    ck_assert_ptr_nonnull(want);
    ck_assert_ptr_nonnull(got);
    write_direct(p, N);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_int_eq(psdb__file_index_wait(f), 1);
    /* Forward (first fetches, each blob hashed), then backward and by strides (repeat fetches,
     * on leaves other than the last one read): 3000 keys give a blobs B-tree of three levels. */
    for (int pass = 0; pass < 3; pass++) {
        for (int n = 0; n < N; n++) {
            int i = pass == 0 ? n : pass == 1 ? N - 1 - n : (int)((uint64_t)n * 1237 % N);
            char key[16];
            snprintf(key, sizeof(key), "d%05d", i);
            for (uint32_t type = 0; type < 2; type++) {
                size_t wn = direct_value(i, type, want), gn = 8192;
                ck_assert_hr(psdb_file_find_value(f, key, strlen(key), type, got, &gn), PSDB_S_OK);
                ck_assert_uint_eq(gn, wn);
                ck_assert_msg(memcmp(got, want, wn) == 0, "key %d type %u differs", i, type);
                fetches++;
            }
        }
    }
    /* Every blob that fits on its leaf is read without SQLite (4 in 5 object codes and every
     * metadata); those that spill go through SQLite and are still right. */
    uint64_t direct = psdb__file_direct_reads(f);
    ck_assert_uint_gt(direct, fetches * 3 / 4);
    ck_assert_uint_lt(direct, fetches);
    psdb_file_release(f);
    free(want);
    free(got);
    free(p);
}
END_TEST

/* Pages of the blobs table (interior, leaf and overflow) of the PSDB at path, through SQLite's
 * dbstat table; *n receives their number. */
static uint32_t *blob_pages(const char *path, size_t *n)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    uint32_t *pages = NULL;
    *n = 0;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT pageno FROM dbstat WHERE name = 'blobs' ORDER "
                                        "BY pageno",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        pages = realloc(pages, (*n + 1) * sizeof(*pages));
        ck_assert_ptr_nonnull(pages);
        pages[(*n)++] = (uint32_t)sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return pages;
}

/* The direct blob read parses B-tree pages of an untrusted file: with a byte of a blobs page
 * damaged (a page header, a cell pointer, a varint, a record header, the bytes), every fetch
 * gives the written bytes or PSDB_E_CACHE_CORRUPT, never other bytes, and never reads out of
 * bounds (the asan tree runs this too). */
START_TEST(test_psdbfile__C2_C3_damaged_blob_pages_never_served)
{
    enum { N = 400, ROUNDS = 120 };
    char *p = tu_path(tmpdir, "pristine.psdb"), *q = tu_path(tmpdir, "damaged.psdb");
    uint8_t *want = malloc(8192), *got = malloc(8192);
    size_t size = 0, npages = 0;
    uint64_t seed = 99;
    int ok = 0, corrupt = 0;
    ck_assert_ptr_nonnull(want);
    ck_assert_ptr_nonnull(got);
    write_direct(p, N);
    uint8_t *pristine = (uint8_t *)tu_read_file(p, &size);
    uint32_t *pages = blob_pages(p, &npages);
    ck_assert_ptr_nonnull(pristine);
    ck_assert_uint_gt(npages, 10);
    for (int round = 0; round < ROUNDS; round++) {
        uint8_t *bytes = malloc(size);
        psdb_file *f = NULL;
        ck_assert_ptr_nonnull(bytes);
        memcpy(bytes, pristine, size);
        /* Half of the damage lands in the first 64 bytes of a page (page header, cell pointers,
         * the first cells' varints), the rest anywhere on it; the root page is hit too. */
        for (int d = 0; d < 1 + round % 3; d++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t r = seed >> 16;
            size_t page = round % 10 == 0 ? 0 : (size_t)(r % npages);
            size_t off = (r >> 20) % 2 ? (size_t)(r >> 24) % 64 : (size_t)(r >> 24) % 4096;
            size_t at = (size_t)(pages[page] - 1) * 4096 + off;
            ck_assert_uint_lt(at, size);
            bytes[at] ^= (uint8_t)((r >> 36) | 1);
        }
        ck_assert_int_eq(tu_write_file(q, bytes, size), 0);
        free(bytes);
        ck_assert_hr(psdb_file_open(q, NULL, &f), PSDB_S_OK);
        ck_assert_int_eq(psdb__file_index_wait(f), 1);
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < N; i++) {
                char key[16];
                snprintf(key, sizeof(key), "d%05d", i);
                for (uint32_t type = 0; type < 2; type++) {
                    size_t wn = direct_value(i, type, want), gn = 8192;
                    psdb_hr hr = psdb_file_find_value(f, key, strlen(key), type, got, &gn);
                    ck_assert_msg(hr == PSDB_S_OK || hr == PSDB_E_CACHE_CORRUPT,
                                  "round %d key %d type %u: %08x", round, i, type, (unsigned)hr);
                    if (hr == PSDB_S_OK) {
                        ck_assert_uint_eq(gn, wn);
                        ck_assert_msg(memcmp(got, want, wn) == 0,
                                      "round %d key %d type %u: other bytes served", round, i,
                                      type);
                    }
                    ok += hr == PSDB_S_OK;
                    corrupt += hr == PSDB_E_CACHE_CORRUPT;
                }
            }
        }
        psdb_file_release(f);
    }
    /* The damage was seen, and most values stayed readable. */
    ck_assert_int_gt(corrupt, 0);
    ck_assert_int_gt(ok, corrupt);
    free(pages);
    free(pristine);
    free(want);
    free(got);
    free(p);
    free(q);
}
END_TEST

START_TEST(test_psdbfile__C2_truncated_under_reader_is_corrupt)
{
    char *p = sample_file("index-trunc.psdb");
    psdb_file *f = NULL;
    uint8_t buf[4096];
    int ok = 0, corrupt = 0;
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_int_eq(psdb__file_index_wait(f), 1);
    /* Some blobs verified and interior pages cached before the file shrinks under the reader. */
    for (int i = 0; i < NKEYS; i += 2) {
        char key[8];
        size_t n = sizeof(buf);
        sample_key(i, key);
        ck_assert_hr(psdb_file_find_value(f, key, 4, 0, buf, &n), PSDB_S_OK);
    }
    ck_assert_int_eq(truncate(p, 3 * 4096), 0);
    for (int i = 0; i < NKEYS; i++) {
        char key[8];
        sample_key(i, key);
        for (uint32_t t = 0; t < 2; t++) {
            size_t n = sizeof(buf);
            psdb_hr hr = psdb_file_find_value(f, key, 4, t, buf, &n);
            ck_assert_msg(hr == PSDB_S_OK || hr == PSDB_E_CACHE_CORRUPT, "%08x", (unsigned)hr);
            ok += hr == PSDB_S_OK;
            corrupt += hr == PSDB_E_CACHE_CORRUPT;
        }
    }
    /* Blobs past the cut cannot be read: they are reported, not returned; every lookup
     * answered one way or the other. */
    ck_assert_int_gt(corrupt, 0);
    ck_assert_int_eq(ok + corrupt, 2 * NKEYS);
    psdb_file_release(f);
    free(p);
}
END_TEST

typedef struct first_job {
    psdb_file *f;
    pthread_barrier_t *go;
    int errors;
} first_job;

static void *first_lookup_thread(void *arg)
{
    first_job *job = arg;
    uint8_t buf[4096], want[4096];
    pthread_barrier_wait(job->go);
    for (int i = 0; i < NKEYS; i++) {
        char key[8];
        size_t n = sizeof(buf), wn = sample_value(i, 0, want);
        sample_key(i, key);
        if (psdb_file_find_value(job->f, key, 4, 0, buf, &n) != PSDB_S_OK || n != wn ||
            memcmp(buf, want, wn) != 0)
            job->errors++;
    }
    return NULL;
}

START_TEST(test_psdbfile__C3_concurrent_first_lookups_share_one_index)
{
    char *p = sample_file("index-race.psdb");
    psdb_file *f = NULL;
    pthread_t th[4];
    first_job jobs[4];
    pthread_barrier_t go;
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_int_eq(pthread_barrier_init(&go, NULL, 4), 0);
    for (int i = 0; i < 4; i++) {
        jobs[i] = (first_job){.f = f, .go = &go};
        ck_assert_int_eq(pthread_create(&th[i], NULL, first_lookup_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(jobs[i].errors, 0);
    }
    pthread_barrier_destroy(&go);
    size_t bytes = psdb__file_index_bytes(f);
    ck_assert_int_eq(psdb__file_index_wait(f), 1);
    ck_assert(bytes == 0 || bytes == psdb__file_index_bytes(f));
    psdb_file_release(f);
    /* Released while the build may still run: the build stops, nothing leaks (ASan). */
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    size_t n = 0;
    ck_assert_hr(psdb_file_find_value(f, "k001", 4, 0, NULL, &n), PSDB_S_OK);
    psdb_file_release(f);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_C3_structural_damage_found_at_lookup)
{
    char *p = sample_file("dangling.psdb");
    psdb_file *f = NULL;
    uint8_t buf[4096];
    size_t n = 0;
    char msg[256];
    exec_sql(p, "UPDATE value_entries SET blob_id = 999999 WHERE key = CAST('k001' AS BLOB) "
                "AND type = 0; UPDATE blobs SET data = 'text' WHERE id = (SELECT blob_id FROM "
                "value_entries WHERE key = CAST('k002' AS BLOB) AND type = 1);");
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    /* A size query reads value_entries only; the data fetch meets the damage. */
    ck_assert_hr(psdb_file_find_value(f, "k001", 4, 0, NULL, &n), PSDB_S_OK);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k001", 4, 0, buf, &n), PSDB_E_CACHE_CORRUPT);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k001", 4, 1, buf, &n), PSDB_S_OK);
    n = sizeof(buf);
    ck_assert_hr(psdb_file_find_value(f, "k002", 4, 1, buf, &n), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
    psdb_file_release(f);
    free(p);
}
END_TEST

START_TEST(test_psdbfile__C2_verify_finds_broken_references)
{
    static const struct {
        const char *sql, *want;
    } edits[] = {
        {"INSERT INTO group_members VALUES (CAST('group-00' AS BLOB), 2, CAST('zzz' AS BLOB));",
         "missing value key"},
        {"DELETE FROM group_members WHERE idx = 0 AND group_key = CAST('group-03' AS BLOB);",
         "indexes"},
        {"UPDATE header SET num_values = num_values - 1;", "counts"},
        {"UPDATE header SET compiler_version = 99;", "content digest"},
        {"UPDATE value_groups SET version = 5 WHERE key = CAST('group-01' AS BLOB);",
         "content digest"},
        {"INSERT INTO blobs (sha256, data) VALUES "
         "(x'4bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c385a5d7cce23c7785459a', x'01');",
         "not referenced"},
        {"UPDATE value_entries SET size = size + 1 WHERE key = CAST('k007' AS BLOB) AND type = 1;",
         "size"},
        {"INSERT INTO group_members VALUES (CAST('nogroup' AS BLOB), 0, CAST('k001' AS BLOB));",
         "no group"},
        /* Each of these is found by one check alone: the content digest covers neither sizes
         * nor unreferenced blobs nor the header counts. */
        {"INSERT INTO blobs (id, sha256, data) VALUES ((SELECT max(id) + 1 FROM blobs), "
         "x'4bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c385a5d7cce23c7785459a', x'01'); "
         "UPDATE header SET num_blobs = num_blobs + 1, blob_bytes = blob_bytes + 1;",
         "not referenced"},
        {"UPDATE header SET blob_bytes = blob_bytes + 1;", "counts"},
        {"UPDATE header SET num_blobs = num_blobs - 1;", "blob ids"},
        {"UPDATE header SET num_groups = num_groups + 1;", "counts"},
        {"UPDATE group_members SET idx = idx + 10 WHERE group_key = CAST('group-02' AS BLOB);",
         "indexes"},
        {"UPDATE value_entries SET size = CAST(size AS TEXT) || 'x' WHERE key = CAST('k003' AS "
         "BLOB) AND type = 0;",
         "size"},
        {"UPDATE value_entries SET blob_id = 999999 WHERE key = CAST('k004' AS BLOB) AND type = 1;",
         "missing blob"},
        /* Consistent references, but a blob id outside 1..num_blobs, which no hashing thread
         * claims. */
        {"UPDATE blobs SET id = 1000 WHERE id = 1; UPDATE value_entries SET blob_id = 1000 WHERE "
         "blob_id = 1;",
         "blob ids"},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        char *p = sample_file("refs.psdb");
        psdb_file *f = NULL;
        char msg[256];
        exec_sql(p, edits[i].sql);
        ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
        ck_assert_msg(psdb_file_verify(f, msg, sizeof(msg)) == PSDB_E_CACHE_CORRUPT, "%s",
                      edits[i].sql);
        ck_assert_msg(strstr(msg, edits[i].want) && !strchr(msg, '\n'), "%s: %s", edits[i].sql,
                      msg);
        psdb_file_release(f);
        free(p);
    }
}
END_TEST

static int collect_group(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                         void *ctx)
{
    int *count = ctx;
    char want[16];
    snprintf(want, sizeof(want), "group-%02d", *count);
    ck_assert_uint_eq(key_size, strlen(want));
    ck_assert_mem_eq(key, want, key_size);
    ck_assert_uint_eq(version, 100 + (uint64_t)*count);
    ck_assert_uint_eq(num_values, 2);
    return ++*count == 5;
}

START_TEST(test_psdbfile__C1_foreach_group_in_key_order)
{
    char *p = tu_path(tmpdir, "groups.psdb");
    psdb_file *f = NULL;
    int count = 0;
    write_sample(p, 1);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    ck_assert_hr(psdb_file_foreach_group(f, collect_group, &count), PSDB_S_FALSE);
    ck_assert_int_eq(count, 5);
    ck_assert_hr(psdb_file_foreach_group(f, NULL, &count), PSDB_E_INVALIDARG);
    psdb_file_release(f);
    free(p);
}
END_TEST

typedef struct lookup_job {
    psdb_file *f;
    int seed;
    int errors;
} lookup_job;

static void *lookup_thread(void *arg)
{
    lookup_job *job = arg;
    uint8_t buf[4096], want[4096];
    unsigned s = (unsigned)job->seed;
    for (int it = 0; it < 3000; it++) {
        s = s * 1103515245u + 12345u;
        int i = (int)((s >> 8) % NKEYS);
        uint32_t t = (s >> 20) & 1;
        char key[8];
        size_t n = 0, wn = sample_value(i, t, want);
        sample_key(i, key);
        if (psdb_file_find_value(job->f, key, 4, t, NULL, &n) != PSDB_S_OK || n != wn)
            job->errors++;
        n = sizeof(buf);
        if (psdb_file_find_value(job->f, key, 4, t, buf, &n) != PSDB_S_OK || n != wn ||
            memcmp(buf, want, wn) != 0)
            job->errors++;
    }
    return NULL;
}

START_TEST(test_psdbfile__C3_concurrent_lookups)
{
    char *p = sample_file("threads.psdb");
    psdb_file *f = NULL;
    pthread_t th[8];
    lookup_job jobs[8];
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    for (int i = 0; i < 8; i++) {
        jobs[i] = (lookup_job){.f = f, .seed = i + 1};
        ck_assert_int_eq(pthread_create(&th[i], NULL, lookup_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(jobs[i].errors, 0);
    }
    psdb_file_release(f);
    free(p);
}
END_TEST

/* A walk that parks inside its callback (holding its connection) until released. */
typedef struct parked {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int inside, release;
    psdb_file *f;
    psdb_hr hr;
} parked;

static int park_in_callback(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                            void *ctx)
{
    parked *p = ctx;
    (void)key;
    (void)key_size;
    (void)version;
    (void)num_values;
    pthread_mutex_lock(&p->lock);
    p->inside = 1;
    pthread_cond_broadcast(&p->cond);
    while (!p->release)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return 1;
}

static void *walk_thread(void *arg)
{
    parked *p = arg;
    p->hr = psdb_file_foreach_group(p->f, park_in_callback, p);
    return NULL;
}

START_TEST(test_psdbfile__C3_lookup_not_blocked_by_another_thread)
{
    char *path = sample_file("parallel.psdb");
    parked p = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    pthread_t th;
    uint8_t buf[4096];
    size_t n = sizeof(buf);
    ck_assert_hr(psdb_file_open(path, NULL, &p.f), PSDB_S_OK);
    ck_assert_int_eq(pthread_create(&th, NULL, walk_thread, &p), 0);
    pthread_mutex_lock(&p.lock);
    while (!p.inside)
        pthread_cond_wait(&p.cond, &p.lock);
    pthread_mutex_unlock(&p.lock);
    /* The other thread is in the middle of a read on the same psdb_file; this one proceeds. */
    ck_assert_hr(psdb_file_find_value(p.f, "k004", 4, 0, buf, &n), PSDB_S_OK);
    pthread_mutex_lock(&p.lock);
    p.release = 1;
    pthread_cond_broadcast(&p.cond);
    pthread_mutex_unlock(&p.lock);
    pthread_join(th, NULL);
    ck_assert_hr(p.hr, PSDB_S_FALSE);
    psdb_file_release(p.f);
    free(path);
}
END_TEST

/* ---- C4: deterministic content digest and bytes ---------------------------------------------- */

START_TEST(test_psdbfile__C4_same_content_any_order_same_bytes)
{
    char *a = tu_path(tmpdir, "order0.psdb"), *b = tu_path(tmpdir, "order1.psdb");
    size_t na = 0, nb = 0;
    write_sample(a, 0);
    write_sample(b, 1);
    char *ba = tu_read_file(a, &na), *bb = tu_read_file(b, &nb);
    ck_assert_uint_eq(na, nb);
    ck_assert_msg(memcmp(ba, bb, na) == 0, "files differ");
    psdb_file *fa = NULL, *fb = NULL;
    psdb_file_info ia, ib;
    ck_assert_hr(psdb_file_open(a, NULL, &fa), PSDB_S_OK);
    ck_assert_hr(psdb_file_open(b, NULL, &fb), PSDB_S_OK);
    psdb_file_get_info(fa, &ia);
    psdb_file_get_info(fb, &ib);
    ck_assert_mem_eq(ia.content_digest, ib.content_digest, 32);
    psdb_file_release(fa);
    psdb_file_release(fb);
    free(ba);
    free(bb);
    free(a);
    free(b);
}
END_TEST

static void digest_of_one(const char *path, const char *family, uint64_t version, uint8_t out[32])
{
    psdb_writer *w = NULL;
    psdb_file *f = NULL;
    psdb_file_info info;
    psdb_target t = sample_target();
    t.family = family;
    ck_assert_hr(psdb_writer_create(path, &sample_identity, &t, &w), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "key", 3, PSDB_VALUE_METADATA, "meta", 4), PSDB_S_OK);
    psdb_value_ref r = {"key", 3};
    ck_assert_hr(psdb_writer_put_group(w, "grp", 3, version, 1, &r), PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    ck_assert_hr(psdb_file_open(path, NULL, &f), PSDB_S_OK);
    psdb_file_get_info(f, &info);
    memcpy(out, info.content_digest, 32);
    psdb_file_release(f);
}

static void put_str(psdb__buf *b, const char *s)
{
    psdb__buf_str(b, s);
}

START_TEST(test_psdbfile__C4_digest_follows_documented_serialisation)
{
    char *p = tu_path(tmpdir, "one.psdb");
    uint8_t got[32], want[32], blob[32];
    psdb__buf b = {0};
    psdb_target t = sample_target();
    digest_of_one(p, FAMILY, 42, got);

    /* schema/PSDB.md, "Content digest", byte for byte. */
    psdb__buf_u32(&b, 0x50534442u);
    psdb__buf_u32(&b, 1);
    put_str(&b, "game.exe");
    put_str(&b, "Sample Game");
    psdb__buf_u64(&b, PSDB_VERSION(1, 0, 2, 0));
    put_str(&b, "Engine");
    psdb__buf_u64(&b, PSDB_VERSION(5, 1, 0, 0));
    psdb__buf_append(&b, sample_identity.app_id, 16);
    put_str(&b, FAMILY);
    psdb__buf_u64(&b, t.abi_version);
    psdb__buf_u64(&b, t.compiler_version);
    psdb__buf_u64(&b, t.profile_version);
    psdb__buf_u8(&b, 1);
    psdb__buf_u32(&b, 3);
    psdb__buf_append(&b, "key", 3);
    psdb__buf_u32(&b, PSDB_VALUE_METADATA);
    psdb__sha256("meta", 4, blob);
    psdb__buf_append(&b, blob, 32);
    psdb__buf_u8(&b, 2);
    psdb__buf_u32(&b, 3);
    psdb__buf_append(&b, "grp", 3);
    psdb__buf_u64(&b, 42);
    psdb__buf_u32(&b, 1);
    psdb__buf_u32(&b, 3);
    psdb__buf_append(&b, "key", 3);
    psdb__buf_u8(&b, 0);
    ck_assert_hr(psdb__buf_status(&b), PSDB_S_OK);
    psdb__sha256(b.data, b.len, want);
    ck_assert_mem_eq(got, want, 32);

    /* Any change of content changes the digest. */
    uint8_t other[32];
    digest_of_one(p, FAMILY, 43, other);
    ck_assert_int_ne(memcmp(got, other, 32), 0);
    digest_of_one(p, "contoso-gfx10", 42, other);
    ck_assert_int_ne(memcmp(got, other, 32), 0);
    psdb__buf_free(&b);
    free(p);
}
END_TEST

/* ---- Verifying a file of many blocks -------------------------------------------------------- */

#define LARGE_KEYS 1200

/* Value bytes of large-sample key i and type t: object code of 200 B to 12 KiB (two thirds spill
 * onto overflow pages), or short metadata; led by a tag "LRG<i>-<t>:" and pseudo-random after it,
 * so that any 64 bytes of a value are found in the file once. */
static size_t large_value(int i, uint32_t t, uint8_t *buf)
{
    size_t n =
        t == PSDB_VALUE_OBJECT_CODE ? 200 + (size_t)(i * 7919 % 12000) : 60 + (size_t)(i % 50);
    uint32_t x = 2463534242u ^ (uint32_t)(i * 2 + (int)t + 1) * 2654435761u;
    int tag = snprintf((char *)buf, 16, "LRG%05d-%u:", i, t);
    for (size_t j = (size_t)tag; j < n; j++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[j] = (uint8_t)(x >> 24);
    }
    return n;
}

/* A PSDB of LARGE_KEYS keys (two values each) in groups of three: about 7 MiB, many times the
 * blocks a verifying connection keeps (psdb_vfs.c, scan mode). */
static char *large_file(const char *name)
{
    char *p = tu_path(tmpdir, name);
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    uint8_t *buf = malloc(16384);
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_S_OK);
    for (int i = 0; i < LARGE_KEYS; i++) {
        char key[16];
        snprintf(key, sizeof(key), "key%05d", i);
        for (uint32_t k = 0; k < 2; k++) {
            size_t size = large_value(i, k, buf);
            ck_assert_hr(psdb_writer_put_value(w, key, strlen(key), k, buf, size), PSDB_S_OK);
        }
    }
    for (int g = 0; g < LARGE_KEYS / 3; g++) {
        char gkey[16], k[3][16];
        psdb_value_ref refs[3];
        snprintf(gkey, sizeof(gkey), "grp%05d", g);
        for (int m = 0; m < 3; m++) {
            snprintf(k[m], sizeof(k[m]), "key%05d", 3 * g + m);
            refs[m] = (psdb_value_ref){k[m], strlen(k[m])};
        }
        ck_assert_hr(psdb_writer_put_group(w, gkey, strlen(gkey), (uint64_t)g, 3, refs), PSDB_S_OK);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
    free(buf);
    return p;
}

/* psdb_file_verify reads the whole file in blocks: a page read is a system call only when it is
 * far from the previous one (measured before blocks: 3.5 preads per page of a file of many small
 * values, integrity_check walking its trees backwards and the blob threads skipping each other's
 * chunks). */
START_TEST(test_psdbfile__C2_verify_reads_the_file_in_blocks)
{
    char *p = large_file("blocks.psdb");
    psdb_file *f = NULL;
    char msg[256];
    struct stat sb;
    ck_assert_int_eq(stat(p, &sb), 0);
    uint64_t pages = (uint64_t)sb.st_size / 4096;
    ck_assert_uint_gt(pages, 1500);
    ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
    uint64_t before = psdb__file_reads(f);
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_S_OK);
    uint64_t reads = psdb__file_reads(f) - before;
    ck_assert_msg(reads < pages / 8, "%llu reads for %llu pages", (unsigned long long)reads,
                  (unsigned long long)pages);
    /* Lookups after the verification read as before (no block kept, blobs still checked). */
    uint8_t buf[16384], want[16384];
    for (int i = 0; i < LARGE_KEYS; i += 97) {
        char key[16];
        size_t n = sizeof(buf), wn = large_value(i, 0, want);
        snprintf(key, sizeof(key), "key%05d", i);
        ck_assert_hr(psdb_file_find_value(f, key, strlen(key), 0, buf, &n), PSDB_S_OK);
        ck_assert_uint_eq(n, wn);
        ck_assert_mem_eq(buf, want, n);
    }
    psdb_file_release(f);
    free(p);
}
END_TEST

/* The blob id of key i's value of type t in a large file. */
static long long large_blob_id(const char *path, int i, uint32_t t)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char key[16];
    long long id = -1;
    snprintf(key, sizeof(key), "key%05d", i);
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db,
                                        "SELECT blob_id FROM value_entries WHERE key = ?1 AND "
                                        "type = ?2",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_blob(st, 1, key, (int)strlen(key), SQLITE_STATIC);
    sqlite3_bind_int(st, 2, (int)t);
    if (sqlite3_step(st) == SQLITE_ROW)
        id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    ck_assert_int_gt(id, 0);
    return id;
}

/* A byte flipped inside one blob of a file read in blocks is found, and named as always: the blob
 * whose bytes do not match, wherever it lies (on its leaf, on an overflow page, in the last block)
 * and whichever thread hashes it; `psdb verify` refuses the file with that reason. */
START_TEST(test_psdbfile__C2_verify_finds_a_flipped_blob_in_a_large_file)
{
    static const struct {
        int key;
        uint32_t type;
        size_t at; /* byte of the value flipped */
    } cases[] = {
        {5, 0, 100},              /* 3795 bytes, whole on its leaf */
        {1, 0, 6000},             /* 8119 bytes: on an overflow page */
        {600, 1, 20},             /* metadata in the middle of the file */
        {LARGE_KEYS - 1, 0, 150}, /* the last key's, near the end of the file */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        char *p = large_file("flip-large.psdb");
        psdb_file *f = NULL;
        uint8_t value[16384];
        char msg[256], want[96], cmd[1024];
        size_t n = 0, vn = large_value(cases[c].key, cases[c].type, value);
        ck_assert_uint_lt(cases[c].at, vn);
        long long id = large_blob_id(p, cases[c].key, cases[c].type);
        uint8_t *bytes = (uint8_t *)tu_read_file(p, &n);
        uint8_t *hit = memmem(bytes, n, value, 12); /* the tag: the value's first bytes */
        ck_assert_ptr_nonnull(hit);
        /* The flipped byte itself: found by its neighbourhood, wherever SQLite put it. */
        uint8_t *at =
            cases[c].at < 4000 ? hit + cases[c].at : memmem(bytes, n, value + cases[c].at, 64);
        ck_assert_ptr_nonnull(at);
        *at ^= 0x20;
        ck_assert_int_eq(tu_write_file(p, bytes, n), 0);
        free(bytes);
        ck_assert_hr(psdb_file_open(p, NULL, &f), PSDB_S_OK);
        ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_E_CACHE_CORRUPT);
        snprintf(want, sizeof(want), "blob %lld: bytes do not match their SHA-256", id);
        ck_assert_msg(strstr(msg, want), "key %d: %s", cases[c].key, msg);
        psdb_file_release(f);
        char *out = tu_path(tmpdir, "flip-large.txt");
        snprintf(cmd, sizeof(cmd), "%s verify %s", PSDB_TOOL, p);
        ck_assert_int_ne(tu_run(cmd, out), 0);
        char *text = tu_read_file(out, &n);
        ck_assert_msg(text && strstr(text, want), "%s", text ? text : "(no output)");
        free(text);
        free(out);
        unlink(p);
        free(p);
    }
}
END_TEST

/* ---- The psdb tool: inspect and verify ------------------------------------------------------- */

START_TEST(test_psdbfile__C2_tool_inspect_and_verify)
{
    char *p = sample_file("tool.psdb");
    char *out = tu_path(tmpdir, "out.txt");
    char cmd[1024];
    size_t n = 0;
    json_error_t err;

    snprintf(cmd, sizeof(cmd), "%s verify %s", PSDB_TOOL, p);
    ck_assert_int_eq(tu_run(cmd, out), 0);
    char *text = tu_read_file(out, &n);
    ck_assert_msg(strncmp(text, "ok", 2) == 0, "%s", text);
    free(text);

    snprintf(cmd, sizeof(cmd), "%s inspect --json %s", PSDB_TOOL, p);
    ck_assert_int_eq(tu_run(cmd, out), 0);
    json_t *root = json_load_file(out, 0, &err);
    ck_assert_msg(root != NULL, "%s", err.text);
    ck_assert_str_eq(json_string_value(json_object_get(root, "kind")), "psdb");
    json_t *target = json_object_get(root, "target");
    ck_assert_str_eq(json_string_value(json_object_get(target, "family")), FAMILY);
    ck_assert_int_eq(json_integer_value(json_object_get(target, "abi_version")), ABI);
    ck_assert_str_eq(json_string_value(json_object_get(target, "profile_version")), "1.2.3.4");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(root, "app"), "name")),
                     "Sample Game");
    ck_assert_int_eq(json_integer_value(json_object_get(root, "num_values")), 2 * NKEYS);
    ck_assert_int_eq(json_integer_value(json_object_get(root, "num_groups")), NKEYS / 2);
    ck_assert_uint_eq(strlen(json_string_value(json_object_get(root, "content_digest"))), 64);
    json_decref(root);

    flip_object_code(p);
    snprintf(cmd, sizeof(cmd), "%s verify %s", PSDB_TOOL, p);
    ck_assert_int_ne(tu_run(cmd, out), 0);
    text = tu_read_file(out, &n);
    ck_assert_msg(strstr(text, "SHA-256") && strchr(text, '\n') == text + n - 1, "%s", text);
    free(text);

    /* An SODB is recognised by its application_id and read with the SODB reader: a broken one
     * is reported as corrupt, a real one by identity and entry counts. */
    char *sodb = tu_path(tmpdir, "x.sodb");
    exec_sql(sodb, "PRAGMA application_id = 1347637060; CREATE TABLE t (x);");
    snprintf(cmd, sizeof(cmd), "%s inspect %s", PSDB_TOOL, sodb);
    free(sodb);
    char *out2 = tu_path(tmpdir, "out2.txt");
    ck_assert_int_ne(tu_run(cmd, out2), 0);
    text = tu_read_file(out2, &n);
    ck_assert_msg(strstr(text, "PSDB_E_CACHE_CORRUPT"), "%s", text);
    free(text);
    char *good = tu_path(tmpdir, "good.sodb");
    psdb_app_identity sid = {.desc = {.name = "Sample Game", .version = PSDB_VERSION(1, 0, 0, 0)}};
    psdb_sodb_writer *sw = NULL;
    ck_assert_hr(psdb_sodb_writer_open(good, &sid, &sw), PSDB_S_OK);
    psdb_sodb_writer_release(sw);
    snprintf(cmd, sizeof(cmd), "%s inspect --json %s", PSDB_TOOL, good);
    free(good);
    ck_assert_int_eq(tu_run(cmd, out2), 0);
    text = tu_read_file(out2, &n);
    json_t *sj = json_loads(text, 0, NULL);
    ck_assert_msg(sj != NULL, "%s", text);
    ck_assert_str_eq(json_string_value(json_object_get(sj, "kind")), "sodb");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(sj, "app"), "name")),
                     "Sample Game");
    json_decref(sj);
    free(text);
    free(out2);
    free(out);
    free(p);
}
END_TEST

/* ---- Replay of the fuzz corpus: every file opens or fails cleanly -----------------------------
 */

static void exercise(const char *path)
{
    static const psdb_hr allowed[] = {PSDB_S_OK,
                                      PSDB_S_FALSE,
                                      PSDB_E_CACHE_CORRUPT,
                                      PSDB_E_NOT_FOUND,
                                      PSDB_E_MORE_DATA,
                                      PSDB_E_ADAPTER_NOT_FOUND,
                                      PSDB_E_DRIVER_VERSION_MISMATCH,
                                      PSDB_E_IO};
    psdb_adapter_desc a = sample_adapter();
    psdb_file *f = NULL;
    psdb_hr hrs[8];
    size_t nh = 0;
    char msg[256];
    hrs[nh++] = psdb_file_open(path, &a, &f);
    psdb_file_release(f);
    f = NULL;
    hrs[nh++] = psdb_file_open(path, NULL, &f);
    if (f) {
        uint8_t buf[64];
        size_t n = 0;
        hrs[nh++] = psdb_file_find_value(f, "k001", 4, 0, NULL, &n);
        n = sizeof(buf);
        hrs[nh++] = psdb_file_find_value(f, "k001", 4, 1, buf, &n);
        hrs[nh++] = psdb_file_verify(f, msg, sizeof(msg));
    }
    psdb_file_release(f);
    for (size_t i = 0; i < nh; i++) {
        int ok = 0;
        for (size_t j = 0; j < sizeof(allowed) / sizeof(allowed[0]); j++)
            ok |= hrs[i] == allowed[j];
        ck_assert_msg(ok, "%s: step %zu gave %s", path, i, psdb_hr_str(hrs[i]));
    }
}

START_TEST(test_psdbfile__C2_corpus_replays_cleanly)
{
    const char *dir = PSDB_TEST_DATA "/../fuzz/corpus/psdbfile";
    DIR *d = opendir(dir);
    struct dirent *e = NULL;
    int count = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char *p = tu_path(dir, e->d_name);
        exercise(p);
        free(p);
        count++;
    }
    closedir(d);
    ck_assert_int_gt(count, 3);
    /* The valid seed must stay valid: a schema change regenerates the corpus (PSDB_WRITE_CORPUS).
     */
    psdb_file *f = NULL;
    char msg[256];
    ck_assert_hr(psdb__file_open_msg(PSDB_TEST_DATA "/../fuzz/corpus/psdbfile/valid_tiny.psdb",
                                     NULL, &f, msg, sizeof(msg)),
                 PSDB_S_OK);
    ck_assert_hr(psdb_file_verify(f, msg, sizeof(msg)), PSDB_S_OK);
    psdb_file_release(f);
}
END_TEST

/* PSDB_WRITE_CORPUS=DIR regenerates the seed corpus (tests/fuzz/corpus/psdbfile). */
static void write_corpus(const char *dir)
{
    char *p = NULL;
    psdb_writer *w = NULL;
    psdb_target t = sample_target();
    uint8_t code[300];
    for (size_t i = 0; i < sizeof(code); i++)
        code[i] = (uint8_t)(i * 13);
    p = tu_path(dir, "valid_tiny.psdb");
    ck_assert_hr(psdb_writer_create(p, &sample_identity, &t, &w), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k001", 4, 0, code, sizeof(code)), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k001", 4, 1, "meta", 4), PSDB_S_OK);
    ck_assert_hr(psdb_writer_put_value(w, "k002", 4, 0, code, sizeof(code)), PSDB_S_OK);
    psdb_value_ref r[2] = {{"k001", 4}, {"k002", 4}};
    ck_assert_hr(psdb_writer_put_group(w, "g1", 2, 1, 2, r), PSDB_S_OK);
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);

    size_t n = 0;
    char *bytes = tu_read_file(p, &n);
    char *q = tu_path(dir, "truncated.psdb");
    ck_assert_int_eq(tu_write_file(q, bytes, n - 4096), 0);
    free(q);
    q = tu_path(dir, "not_sqlite.psdb");
    ck_assert_int_eq(tu_write_file(q, "PSDB? no: plain text\n", 21), 0);
    free(q);
    q = tu_path(dir, "flipped_blob.psdb");
    uint8_t *hit = memmem(bytes, n, code, sizeof(code));
    ck_assert_ptr_nonnull(hit);
    hit[100] ^= 1;
    ck_assert_int_eq(tu_write_file(q, bytes, n), 0);
    hit[100] ^= 1;
    free(q);
    const struct {
        const char *name, *sql;
    } edits[] = {
        {"user_version_99.psdb", "PRAGMA user_version = 99;"},
        {"missing_table.psdb", "DROP TABLE group_members;"},
        {"no_header_row.psdb", "DELETE FROM header;"},
        {"dangling_blob.psdb", "UPDATE value_entries SET blob_id = 77;"},
        {"other_family.psdb", "UPDATE header SET family = 'other';"},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
        q = tu_path(dir, edits[i].name);
        ck_assert_int_eq(tu_write_file(q, bytes, n), 0);
        exec_sql(q, edits[i].sql);
        exec_sql(q, "VACUUM;");
        free(q);
    }
    free(bytes);
    free(p);
}

START_TEST(write_seed_corpus)
{
    write_corpus(getenv("PSDB_WRITE_CORPUS"));
}
END_TEST

int main(void)
{
    const char *corpus = getenv("PSDB_WRITE_CORPUS");
    if (corpus && *corpus) {
        Suite *cs = suite_create("corpus");
        TCase *ctc = tcase_create("corpus");
        tcase_add_test(ctc, write_seed_corpus);
        suite_add_tcase(cs, ctc);
        return tu_run_suite(cs);
    }
    Suite *s = suite_create("psdbfile");
    TCase *tc = tcase_create("psdbfile");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_psdbfile__C1_roundtrip_identity_target_values_groups);
    tcase_add_test(tc, test_psdbfile__C1_identical_blobs_stored_once);
    tcase_add_test(tc, test_psdbfile__C1_put_value_duplicates);
    tcase_add_test(tc, test_psdbfile__C1_writer_rejects_bad_targets);
    tcase_add_test(tc, test_psdbfile__C1_writer_renames_into_place);
    tcase_add_test(tc, test_psdbfile__C1_schema_copy_matches_schema_file);
    tcase_add_test(tc, test_psdbfile__C1_foreach_group_in_key_order);
    tcase_add_test(tc, test_psdbfile__C2_bad_arguments_and_missing_file);
    tcase_add_test(tc, test_psdbfile__C2_path_with_uri_characters);
    tcase_add_test(tc, test_psdbfile__C2_not_sqlite_is_corrupt);
    tcase_add_test(tc, test_psdbfile__C2_other_sqlite_file_is_corrupt);
    tcase_add_test(tc, test_psdbfile__C2_newer_schema_version_is_corrupt);
    tcase_add_test(tc, test_psdbfile__C2_truncated_is_corrupt);
    tcase_add_test(tc, test_psdbfile__C2_missing_table_is_corrupt);
    tcase_add_test(tc, test_psdbfile__C2_malformed_header_row_is_corrupt);
    tcase_add_test(tc, test_psdbfile__C2_corruption_checked_before_compatibility);
    tcase_add_test(tc, test_psdbfile__C2_schema_compared_exactly_before_evaluation);
    tcase_add_test(tc, test_psdbfile__C2_schema_whitespace_case_and_comments_ignored);
    tcase_add_test(tc, test_psdbfile__C2_header_settings_must_be_the_writers);
    tcase_add_test(tc, test_psdbfile__C2_verify_bounded_on_large_groups);
    tcase_add_test(tc, test_psdbfile__C2_C3_flipped_blob_found_at_lookup);
    tcase_add_test(tc, test_psdbfile__C4_check_proves_content_and_file_digests);
    tcase_add_test(tc, test_psdbfile__C4_fetch_after_check_uses_the_proven_digests);
    tcase_add_test(tc, test_psdbfile__C2_fifo_device_directory_refused_without_blocking);
    tcase_add_test(tc, test_psdbfile__C2_reads_the_file_it_opened_whatever_the_path_names_later);
    tcase_add_test(tc, test_psdbfile__C3_index_agrees_with_sql);
    tcase_add_test(tc, test_psdbfile__C2_C3_index_keeps_malformed_rows_corrupt);
    tcase_add_test(tc, test_psdbfile__C2_index_gives_up_on_unreadable_table);
    tcase_add_test(tc, test_psdbfile__C2_flipped_blob_corrupt_with_index);
    tcase_add_test(tc, test_psdbfile__C3_concurrent_first_lookups_share_one_index);
    tcase_add_test(tc, test_psdbfile__C2_truncated_under_reader_is_corrupt);
    tcase_add_test(tc, test_psdbfile__C3_direct_blob_reads_match_the_writer);
    tcase_add_test(tc, test_psdbfile__C2_C3_damaged_blob_pages_never_served);
    tcase_add_test(tc, test_psdbfile__C2_C3_structural_damage_found_at_lookup);
    tcase_add_test(tc, test_psdbfile__C2_verify_finds_broken_references);
    tcase_add_test(tc, test_psdbfile__C2_verify_reads_the_file_in_blocks);
    tcase_add_test(tc, test_psdbfile__C2_verify_finds_a_flipped_blob_in_a_large_file);
    tcase_add_test(tc, test_psdbfile__C2_corpus_replays_cleanly);
    tcase_add_test(tc, test_psdbfile__C2_tool_inspect_and_verify);
    tcase_add_test(tc, test_psdbfile__A3_family_must_match);
    tcase_add_test(tc, test_psdbfile__A3_abi_within_driver_range);
    tcase_add_test(tc, test_psdbfile__A3_profile_top_32_bits_must_match);
    tcase_add_test(tc, test_psdbfile__C3_size_then_data);
    tcase_add_test(tc, test_psdbfile__C3_absent_is_not_found);
    tcase_add_test(tc, test_psdbfile__C3_concurrent_lookups);
    tcase_add_test(tc, test_psdbfile__C3_lookup_not_blocked_by_another_thread);
    tcase_add_test(tc, test_psdbfile__C4_same_content_any_order_same_bytes);
    tcase_add_test(tc, test_psdbfile__C4_digest_follows_documented_serialisation);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
