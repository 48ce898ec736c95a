/* common_test.c - the helpers libpsdb, the psdb tool and psdbd share (client/src/common/): one
 * grammar for numbers, versions and UUIDs, one status mapping, the last-error message and the
 * migration runner. */
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "psdb/client.h"
#include "psdb/sign.h"

#include "common/error.h"
#include "common/hash.h"
#include "common/migrate.h"
#include "common/parse.h"
#include "common/status_map.h"
#include "version_spellings.h"

/* schema/HTTP.md "Version spellings": every example; the tool and the manifest reader use this
 * same parser, so the tool's former "+7" and the reader's former %u reading are refused. */
START_TEST(test_common__version_grammar_is_the_servers)
{
    for (size_t i = 0; i < sizeof(version_accepted) / sizeof(version_accepted[0]); i++) {
        uint64_t v = 42;
        ck_assert_msg(psdb__parse_version(version_accepted[i].text, &v) == 0, "refused %s",
                      version_accepted[i].text);
        ck_assert_msg(v == version_accepted[i].value, "%s read as %llx", version_accepted[i].text,
                      (unsigned long long)v);
    }
    for (size_t i = 0; i < sizeof(version_refused) / sizeof(version_refused[0]); i++) {
        uint64_t v = 42;
        ck_assert_msg(psdb__parse_version(version_refused[i], &v) != 0, "accepted \"%s\"",
                      version_refused[i]);
        ck_assert_msg(v == 42, "\"%s\" wrote *out on failure", version_refused[i]);
    }
    ck_assert_int_ne(psdb__parse_version(NULL, &(uint64_t){0}), 0);
}
END_TEST

START_TEST(test_common__u64_no_sign_no_space_no_overflow)
{
    uint64_t v = 0;
    ck_assert_int_eq(psdb__parse_u64("0", &v), 0);
    ck_assert_uint_eq(v, 0);
    ck_assert_int_eq(psdb__parse_u64("0x10", &v), 0);
    ck_assert_uint_eq(v, 16);
    ck_assert_int_eq(psdb__parse_u64("0xFFFFFFFFFFFFFFFF", &v), 0);
    ck_assert_uint_eq(v, UINT64_MAX);
    ck_assert_int_eq(psdb__parse_u64("010", &v), 0);
    ck_assert_uint_eq(v, 10); /* decimal, never octal */
    static const char *const refused[] = {"",
                                          "+5",
                                          "-5",
                                          " 5",
                                          "5 ",
                                          "\t5",
                                          "5\n",
                                          "0x",
                                          "0x+1",
                                          "1.0",
                                          "18446744073709551616",
                                          "0x10000000000000000",
                                          "5k"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        ck_assert_msg(psdb__parse_u64(refused[i], &v) != 0, "accepted \"%s\"", refused[i]);
}
END_TEST

START_TEST(test_common__uuid_forms)
{
    uint8_t id[16], back[16];
    char text[37];
    ck_assert_int_eq(psdb__parse_uuid("00112233-4455-6677-8899-AABBCCDDEEFF", id), 0);
    ck_assert_str_eq(psdb__format_uuid(id, text, sizeof(text)),
                     "00112233-4455-6677-8899-aabbccddeeff");
    ck_assert_int_eq(psdb__parse_uuid("00112233445566778899aabbccddeeff", back), 0);
    ck_assert_mem_eq(id, back, 16);
    static const char *const refused[] = {"",
                                          "00112233-4455-6677-8899-aabbccddeef",
                                          "0011223-34455-6677-8899-aabbccddeeff",
                                          "00112233-4455-6677-8899-aabbccddeefg",
                                          "00112233445566778899aabbccddeef",
                                          "{00112233-4455-6677-8899-aabbccddeeff}",
                                          " 00112233445566778899aabbccddeeff"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        ck_assert_msg(psdb__parse_uuid(refused[i], id) != 0, "accepted \"%s\"", refused[i]);
    char v[24];
    ck_assert_str_eq(psdb__format_version(PSDB_VERSION(1, 2, 3, 65535), v, sizeof(v)),
                     "1.2.3.65535");
}
END_TEST

START_TEST(test_common__hex_sha256_crc)
{
    uint8_t d[32], back[32];
    char hex[65];
    psdb__sha256("abc", 3, d);
    psdb__hex(d, 32, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    ck_assert_int_eq(psdb__unhex(hex, back, 32), 0);
    ck_assert_mem_eq(d, back, 32);
    ck_assert_int_ne(psdb__unhex("abc", back, 2), 0);
    ck_assert_int_ne(psdb__unhex("abcd0", back, 2), 0); /* trailing digit */
    psdb__sha256_ctx *c = psdb__sha256_begin();
    ck_assert_ptr_nonnull(c);
    psdb__sha256_update(c, "a", 1);
    psdb__sha256_update(c, "bc", 2);
    psdb__sha256_end(c, back);
    ck_assert_mem_eq(d, back, 32);
    ck_assert_uint_eq(psdb__crc32(0, "123456789", 9), 0xCBF43926u);
}
END_TEST

/* The same failure gives the same status wherever it is met. */
START_TEST(test_common__one_status_mapping)
{
    ck_assert_hr(psdb__errno_hr(EACCES), PSDB_E_ACCESS);
    ck_assert_hr(psdb__errno_hr(EPERM), PSDB_E_ACCESS);
    ck_assert_hr(psdb__errno_hr(EROFS), PSDB_E_ACCESS);
    ck_assert_hr(psdb__errno_hr(ENOSPC), PSDB_E_DISK_FULL);
    ck_assert_hr(psdb__errno_hr(EDQUOT), PSDB_E_DISK_FULL);
    ck_assert_hr(psdb__errno_hr(EFBIG), PSDB_E_DISK_FULL);
    ck_assert_hr(psdb__errno_hr(ENOMEM), PSDB_E_OUTOFMEMORY);
    ck_assert_hr(psdb__errno_hr(EIO), PSDB_E_IO);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_OK, PSDB_E_IO), PSDB_S_OK);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_DONE, PSDB_E_IO), PSDB_S_OK);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_FULL, PSDB_E_CACHE_CORRUPT), PSDB_E_DISK_FULL);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_BUSY, PSDB_E_IO), PSDB_E_BUSY);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_BUSY_SNAPSHOT, PSDB_E_IO), PSDB_E_BUSY);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_READONLY, PSDB_E_IO), PSDB_E_ACCESS);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_NOTADB, PSDB_E_IO), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_IOERR_SHORT_READ, PSDB_E_IO), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_IOERR_WRITE, PSDB_E_CACHE_CORRUPT), PSDB_E_IO);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_NOMEM, PSDB_E_IO), PSDB_E_OUTOFMEMORY);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_TOOBIG, PSDB_E_IO), PSDB_E_INVALIDARG);
    errno = EACCES;
    ck_assert_hr(psdb__sqlite_hr(SQLITE_CANTOPEN, PSDB_E_IO), PSDB_E_ACCESS);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_ERROR, PSDB_E_CACHE_CORRUPT), PSDB_E_CACHE_CORRUPT);
    ck_assert_hr(psdb__sqlite_hr(SQLITE_ERROR, PSDB_E_IO), PSDB_E_IO);
    ck_assert_hr(psdb__http_hr(400), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb__http_hr(401), PSDB_E_ACCESS);
    ck_assert_hr(psdb__http_hr(403), PSDB_E_ACCESS);
    ck_assert_hr(psdb__http_hr(404), PSDB_E_NOT_FOUND);
    ck_assert_hr(psdb__http_hr(409), PSDB_E_ALREADY_EXISTS);
    ck_assert_hr(psdb__http_hr(413), PSDB_E_CACHE_FULL);
    ck_assert_hr(psdb__http_hr(507), PSDB_E_DISK_FULL);
    ck_assert_hr(psdb__http_hr(503), PSDB_E_NETWORK);
    ck_assert_hr(psdb__http_hr(429), PSDB_E_NETWORK);
    ck_assert_hr(psdb__http_hr(418), PSDB_E_PROTOCOL);
    ck_assert_hr(psdb__http_hr(302), PSDB_E_PROTOCOL);
    ck_assert(psdb__http_transient(500) && psdb__http_transient(408) && !psdb__http_transient(404));
}
END_TEST

static void *other_thread(void *arg)
{
    (void)arg;
    psdb__error_set(PSDB_E_IO, "other thread's failure");
    return NULL;
}

START_TEST(test_common__last_error_is_per_thread)
{
    pthread_t t;
    psdb__error_clear();
    ck_assert_str_eq(psdb_error_last(), "");
    ck_assert_hr(psdb__error_set(PSDB_E_ACCESS, "open %s: %s", "x.db", "permission denied"),
                 PSDB_E_ACCESS);
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, NULL);
    ck_assert_str_eq(psdb_error_last(), "open x.db: permission denied");
    psdb__error_default(PSDB_E_ACCESS, "ignored"); /* a precise message for it is there */
    ck_assert_str_eq(psdb_error_last(), "open x.db: permission denied");
    psdb__error_default(PSDB_E_IO, "read y");
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "read y: PSDB_E_IO"));
}
END_TEST

/* The public boundary's net: a failing return with nothing recorded since the mark records
 * "<what>: <status>"; a message recorded deeper in the call (formatted or constant) is kept; a
 * success records nothing; a constant message is read back whole. */
START_TEST(test_common__error_ret_fills_only_an_unexplained_failure)
{
    psdb__error_clear();
    unsigned mark = psdb__error_mark();
    ck_assert_hr(psdb__error_ret(PSDB_S_OK, mark, "psdb_x"), PSDB_S_OK);
    ck_assert_str_eq(psdb_error_last(), "");
    ck_assert_hr(psdb__error_ret(PSDB_E_NOT_FOUND, mark, "psdb_x"), PSDB_E_NOT_FOUND);
    ck_assert_str_eq(psdb_error_last(), "psdb_x: PSDB_E_NOT_FOUND: not found");

    mark = psdb__error_mark();
    ck_assert_hr(psdb__error_const(PSDB_E_INVALIDARG, "psdb_y: NULL out"), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb__error_ret(PSDB_E_INVALIDARG, mark, "psdb_y"), PSDB_E_INVALIDARG);
    ck_assert_str_eq(psdb_error_last(), "psdb_y: NULL out");

    /* A deeper message with another status (mapped on the way up) still explains the failure. */
    mark = psdb__error_mark();
    psdb__error_set(PSDB_E_IO, "open %s: %s", "z.psdb", "no such file");
    ck_assert_hr(psdb__error_ret(PSDB_E_NOT_FOUND, mark, "psdb_z"), PSDB_E_NOT_FOUND);
    ck_assert_str_eq(psdb_error_last(), "open z.psdb: no such file");

    /* A later call's success leaves the message; its failure replaces it. */
    mark = psdb__error_mark();
    psdb__error_ret(PSDB_S_FALSE, mark, "psdb_w");
    ck_assert_str_eq(psdb_error_last(), "open z.psdb: no such file");
    mark = psdb__error_mark();
    psdb__error_ret(PSDB_E_BUSY, mark, "psdb_w");
    ck_assert_ptr_nonnull(strstr(psdb_error_last(), "psdb_w: PSDB_E_BUSY"));
}
END_TEST

/* The manifest reader parses versions and numbers with the same grammar (no more %u reading:
 * signs, spaces and parts of 2^32 or more used to be accepted, "1.2" refused). */
START_TEST(test_common__manifest_reader_uses_the_grammar)
{
    static const struct {
        const char *version, *size;
        psdb_hr want;
    } cases[] = {
        {"\"1.0.2.0\"", "28672", PSDB_S_OK},
        {"\"1.0\"", "28672", PSDB_S_OK},
        {"\"0x0001000000020000\"", "\"28672\"", PSDB_S_OK},
        {"\" +1. 0.2.0\"", "28672", PSDB_E_PROTOCOL},
        {"\"+1.0.2.0\"", "28672", PSDB_E_PROTOCOL},
        {"\"-0.1.2.3\"", "28672", PSDB_E_PROTOCOL},
        {"\"4294967297.0.2.0\"", "28672", PSDB_E_PROTOCOL},
        {"\"+7\"", "28672", PSDB_E_PROTOCOL},
        {"\"1.0.2.0\"", "\" -1\"", PSDB_E_PROTOCOL},
        {"\"1.0.2.0\"", "\"+5\"", PSDB_E_PROTOCOL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char json[1024];
        psdb_manifest *m = NULL;
        int n =
            snprintf(json, sizeof(json),
                     "{\"id\": 3, \"sha256\": \"%064d\", \"size\": %s, \"url\": \"/v1/blobs/x\", "
                     "\"app\": {\"name\": \"G\", \"version\": %s, \"engine_version\": 0}, "
                     "\"target\": {\"family\": \"f\", \"abi_version\": 7, "
                     "\"compiler_version\": 0, \"profile_version\": 0}, \"serial\": 3, "
                     "\"key_id\": \"k\", \"signature\": \"s\"}",
                     0, cases[i].size, cases[i].version);
        ck_assert(n > 0 && (size_t)n < sizeof(json));
        psdb_hr hr = psdb_manifest_parse(json, (size_t)n, &m);
        ck_assert_msg(hr == cases[i].want, "version %s size %s: %s", cases[i].version,
                      cases[i].size, psdb_hr_str(hr));
        psdb_manifest_free(m);
    }
}
END_TEST

/* A manifest whose identity no signed statement can carry (no name, no family, a string over
 * PSDB_STATEMENT_STRING_MAX bytes) is refused by the reader as malformed, and a hand-built one
 * fails the signature check with PSDB_E_SIGNATURE, never PSDB_E_INVALIDARG (the fuzzer found a
 * manifest with an empty family that parsed, then made the check answer INVALIDARG). */
START_TEST(test_common__manifest_reader_refuses_what_no_statement_carries)
{
    static char big[PSDB_STATEMENT_STRING_MAX + 2], max[PSDB_STATEMENT_STRING_MAX + 1];
    memset(big, 'a', sizeof(big) - 1);
    memset(max, 'a', sizeof(max) - 1);
    const struct {
        const char *name, *family, *exe, *engine;
        psdb_hr want;
    } cases[] = {
        {"G", "f", "g.exe", "E", PSDB_S_OK},
        {"G", "", "g.exe", "E", PSDB_E_PROTOCOL},
        {"", "f", "g.exe", "E", PSDB_E_PROTOCOL},
        {"G", big, "g.exe", "E", PSDB_E_PROTOCOL},
        {big, "f", "g.exe", "E", PSDB_E_PROTOCOL},
        {"G", "f", big, "E", PSDB_E_PROTOCOL},
        {"G", "f", "g.exe", big, PSDB_E_PROTOCOL},
        {max, max, max, max, PSDB_S_OK},
        {"G", "f", "", "", PSDB_S_OK},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        static char json[4 * sizeof(big) + 1024];
        psdb_manifest *m = NULL;
        int n =
            snprintf(json, sizeof(json),
                     "{\"id\": 3, \"sha256\": \"%064d\", \"size\": 1, \"url\": \"/v1/blobs/x\", "
                     "\"app\": {\"name\": \"%s\", \"exe_filename\": \"%s\", \"version\": 1, "
                     "\"engine_name\": \"%s\", \"engine_version\": 0}, "
                     "\"target\": {\"family\": \"%s\", \"abi_version\": 7, "
                     "\"compiler_version\": 0, \"profile_version\": 0}, \"serial\": 3, "
                     "\"key_id\": \"k\", \"signature\": \"s\"}",
                     0, cases[i].name, cases[i].exe, cases[i].engine, cases[i].family);
        ck_assert(n > 0 && (size_t)n < sizeof(json));
        psdb_hr hr = psdb_manifest_parse(json, (size_t)n, &m);
        ck_assert_msg(hr == cases[i].want, "case %zu: %s", i, psdb_hr_str(hr));
        ck_assert(hr == PSDB_S_OK ? m != NULL : m == NULL);
        psdb_manifest_free(m);
    }

    psdb_client *c = NULL;
    psdb_client_desc desc = {.server_url = "http://127.0.0.1:9"};
    ck_assert_hr(psdb_client_create(&desc, &c), PSDB_S_OK);
    psdb_manifest hand = {.id = "7", .key_id = "k", .signature = "s"};
    hand.app.desc.name = "G";
    hand.target.family = "";
    ck_assert_hr(psdb_client_verify_manifest(c, &hand), PSDB_E_SIGNATURE);
    ck_assert_ptr_nonnull(strstr(psdb_client_last_error(c), "no signed statement describes it"));
    hand.target.family = big;
    ck_assert_hr(psdb_client_verify_manifest(c, &hand), PSDB_E_SIGNATURE);
    hand.target.family = "f";
    hand.app.desc.name = NULL;
    ck_assert_hr(psdb_client_verify_manifest(c, &hand), PSDB_E_SIGNATURE);
    psdb_client_release(c);
}
END_TEST

static const psdb__sql_file steps_files[] = {
    {"001_a.sql", "CREATE TABLE a(x);", 18},
    {"002_b.sql", "CREATE TABLE b(y);", 18},
    {"003_bad.sql", "CREATE TABLE a(z);", 18}, /* fails: a exists */
};

static int user_version(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Migrations run in order inside one transaction keyed by user_version; a failing step rolls
 * everything back; a database newer than the steps is refused. */
START_TEST(test_common__migrate_in_one_transaction)
{
    sqlite3 *db = NULL;
    char err[256] = "";
    int found = -1;
    psdb__sql_set two = {steps_files, 2}, three = {steps_files, 3}, one = {steps_files, 1};
    ck_assert_int_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    ck_assert_hr(
        psdb__migrate(db, "test.db", &one, 0x54455354, NULL, NULL, &found, err, sizeof(err)),
        PSDB_S_OK);
    ck_assert_int_eq(found, 0);
    ck_assert_int_eq(user_version(db), 1);
    ck_assert_hr(
        psdb__migrate(db, "test.db", &two, 0x54455354, NULL, NULL, &found, err, sizeof(err)),
        PSDB_S_OK);
    ck_assert_int_eq(found, 1);
    ck_assert_int_eq(user_version(db), 2);
    ck_assert_hr(
        psdb__migrate(db, "test.db", &three, 0x54455354, NULL, NULL, NULL, err, sizeof(err)),
        PSDB_E_IO);
    ck_assert_ptr_nonnull(strstr(err, "test.db: 003_bad.sql"));
    ck_assert_int_eq(user_version(db), 2); /* rolled back */
    ck_assert_hr(psdb__migrate(db, "test.db", &one, 0x54455354, NULL, NULL, NULL, err, sizeof(err)),
                 PSDB_E_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "schema version 2 is newer than this binary knows (1)"));
    ck_assert_int_eq(sqlite3_get_autocommit(db), 1); /* no transaction left open */
    sqlite3_close(db);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("common");
    TCase *tc = tcase_create("common");
    tcase_add_test(tc, test_common__version_grammar_is_the_servers);
    tcase_add_test(tc, test_common__u64_no_sign_no_space_no_overflow);
    tcase_add_test(tc, test_common__uuid_forms);
    tcase_add_test(tc, test_common__hex_sha256_crc);
    tcase_add_test(tc, test_common__one_status_mapping);
    tcase_add_test(tc, test_common__last_error_is_per_thread);
    tcase_add_test(tc, test_common__error_ret_fills_only_an_unexplained_failure);
    tcase_add_test(tc, test_common__manifest_reader_uses_the_grammar);
    tcase_add_test(tc, test_common__manifest_reader_refuses_what_no_statement_carries);
    tcase_add_test(tc, test_common__migrate_in_one_transaction);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
