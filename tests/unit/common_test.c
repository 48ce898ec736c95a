/* common_test.c - the helpers libpsdb, the psdb tool and psdbd share (client/src/common/): one
 * grammar for numbers, versions, UUIDs and names, one status mapping, the last-error message and
 * the migration runner. */
#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "psdb/client.h"
#include "psdb/farm.h"
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

/* The errno values callers act on are named by class in status_map.c alone; each class is
 * exactly its values, so a caller's retry or fallback behaves as its bare comparison did. */
START_TEST(test_common__errno_classes)
{
    static const struct {
        psdb__errno_class c;
        int in[4], n_in;
    } classes[] = {
        {PSDB__ERRNO_INTERRUPTED, {EINTR}, 1},
        {PSDB__ERRNO_ABSENT, {ENOENT}, 1},
        {PSDB__ERRNO_NOT_DIR, {ENOTDIR}, 1},
        {PSDB__ERRNO_NO_SUCH_PATH, {ENOENT, ENOTDIR}, 2},
        {PSDB__ERRNO_EXISTS, {EEXIST}, 1},
        {PSDB__ERRNO_WOULD_BLOCK, {EWOULDBLOCK, EAGAIN}, 2},
        {PSDB__ERRNO_REFUSED, {EPERM}, 1},
        {PSDB__ERRNO_NO_HARD_LINK, {EXDEV, EPERM, EMLINK, ENOTSUP}, 4},
        {PSDB__ERRNO_UNSUPPORTED, {ENOSYS, EINVAL}, 2},
        {PSDB__ERRNO_NOT_A_FILE, {ELOOP, ENXIO}, 2},
    };
    static const int all[] = {EINTR, ENOENT, ENOTDIR, EEXIST, EAGAIN, EPERM,
                              EXDEV, EMLINK, ENOTSUP, ENOSYS, EINVAL, ELOOP,
                              ENXIO, EACCES, ENOSPC,  EIO,    0};
    for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
        for (size_t j = 0; j < sizeof(all) / sizeof(all[0]); j++) {
            int want = 0;
            for (int k = 0; k < classes[i].n_in; k++)
                want |= classes[i].in[k] == all[j];
            ck_assert_msg(psdb__errno_is(all[j], classes[i].c) == want, "class %d, errno %d: %d",
                          (int)classes[i].c, all[j], !want);
        }
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

/* The manifest names the statement its signature covers (schema/HTTP.md, "Farm"): version 1
 * (absent or 1, no source SODB), version 2 (with sodb_sha256), or an SODB's (kind "sodb", no
 * target, version 1); anything else is malformed. The check verifies the statement named, so a
 * signature never passes for another version or kind. */
START_TEST(test_common__manifest_names_its_statement)
{
    static const char target[] = ", \"target\": {\"family\": \"f\", \"abi_version\": 7, "
                                 "\"compiler_version\": 0, \"profile_version\": 0}";
    char sodb_hex[65];
    memset(sodb_hex, 'c', 64);
    sodb_hex[64] = '\0';
    const struct {
        const char *extra; /* members after serial */
        int with_target;
        psdb_hr want;
        uint32_t kind, version;
    } cases[] = {
        {"", 1, PSDB_S_OK, PSDB_MANIFEST_PSDB, 1},
        {", \"statement_version\": 1, \"sodb_sha256\": null", 1, PSDB_S_OK, PSDB_MANIFEST_PSDB, 1},
        {", \"statement_version\": 2, \"sodb_sha256\": \"SODB\"", 1, PSDB_S_OK, PSDB_MANIFEST_PSDB,
         2},
        {", \"kind\": \"psdb\", \"statement_version\": 2, \"sodb_sha256\": \"SODB\"", 1, PSDB_S_OK,
         PSDB_MANIFEST_PSDB, 2},
        {", \"statement_version\": 2", 1, PSDB_E_PROTOCOL, 0, 0},
        {", \"statement_version\": 2, \"sodb_sha256\": \"abc\"", 1, PSDB_E_PROTOCOL, 0, 0},
        {", \"statement_version\": 1, \"sodb_sha256\": \"SODB\"", 1, PSDB_E_PROTOCOL, 0, 0},
        {", \"statement_version\": 3, \"sodb_sha256\": \"SODB\"", 1, PSDB_E_PROTOCOL, 0, 0},
        {", \"statement_version\": \"2\", \"sodb_sha256\": \"SODB\"", 1, PSDB_E_PROTOCOL, 0, 0},
        {", \"kind\": \"sodb\"", 0, PSDB_S_OK, PSDB_MANIFEST_SODB, 1},
        {", \"kind\": \"sodb\"", 1, PSDB_S_OK, PSDB_MANIFEST_SODB, 1},
        {", \"kind\": \"sodb\", \"statement_version\": 2, \"sodb_sha256\": \"SODB\"", 0,
         PSDB_E_PROTOCOL, 0, 0},
        {", \"kind\": \"psdb\"", 0, PSDB_E_PROTOCOL, 0, 0},
        {", \"kind\": \"pipeline\"", 1, PSDB_E_PROTOCOL, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char json[2048], extra[512];
        psdb_manifest *m = NULL;
        const char *at = strstr(cases[i].extra, "SODB");
        if (at)
            snprintf(extra, sizeof(extra), "%.*s%s%s", (int)(at - cases[i].extra), cases[i].extra,
                     sodb_hex, at + 4);
        else
            snprintf(extra, sizeof(extra), "%s", cases[i].extra);
        int n =
            snprintf(json, sizeof(json),
                     "{\"id\": 3, \"sha256\": \"%064d\", \"size\": 1, \"url\": \"/v1/blobs/x\", "
                     "\"app\": {\"name\": \"G\", \"version\": 1, \"engine_version\": 0}%s, "
                     "\"serial\": 3, \"key_id\": \"k\", \"signature\": \"s\"%s}",
                     0, cases[i].with_target ? target : "", extra);
        ck_assert(n > 0 && (size_t)n < sizeof(json));
        psdb_hr hr = psdb_manifest_parse(json, (size_t)n, &m);
        ck_assert_msg(hr == cases[i].want, "case %zu: %s", i, psdb_hr_str(hr));
        if (hr == PSDB_S_OK) {
            ck_assert_uint_eq(m->kind, cases[i].kind);
            ck_assert_uint_eq(m->statement_version, cases[i].version);
            ck_assert_int_eq(m->sodb_sha256[0], cases[i].version == 2 ? 0xcc : 0);
            if (m->kind == PSDB_MANIFEST_SODB)
                ck_assert_ptr_null(m->target.family);
        }
        psdb_manifest_free(m);
    }

    /* The signature check verifies the statement the manifest names. */
    char *dir = tu_mkdtemp(), *key_path = tu_path(dir, "k.key"), *pub = tu_path(dir, "k.key.pub");
    char kid[PSDB_KEY_ID_SIZE], sig[PSDB_SIGNATURE_B64_SIZE];
    psdb_key *key = NULL;
    ck_assert_hr(psdb_keygen(key_path, kid), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(key_path, &key), PSDB_S_OK);
    const char *trusted[] = {pub};
    psdb_client *c = NULL;
    psdb_client_desc desc = {
        .server_url = "http://127.0.0.1:9", .trusted_keys = trusted, .num_trusted_keys = 1};
    ck_assert_hr(psdb_client_create(&desc, &c), PSDB_S_OK);
    psdb_manifest m = {.id = "7", .key_id = kid, .signature = sig, .size = 1, .serial = 3};
    m.app.desc.name = "G";
    m.app.desc.version = 1;
    m.target.family = "f";
    m.target.abi_version = 7;
    psdb_statement st = {.size = 1, .identity = m.app, .target = m.target, .serial = 3};
    st.has_sodb = 1;
    memset(st.sodb_sha256, 0xcc, 32);
    ck_assert_hr(psdb_statement_sign(key, &st, sig), PSDB_S_OK);
    m.statement_version = 2;
    memset(m.sodb_sha256, 0xcc, 32);
    ck_assert_hr(psdb_client_verify_manifest(c, &m), PSDB_S_OK);
    m.sodb_sha256[5] ^= 1; /* another source SODB */
    ck_assert_hr(psdb_client_verify_manifest(c, &m), PSDB_E_SIGNATURE);
    m.sodb_sha256[5] ^= 1;
    m.statement_version = 1; /* the same signature read as version 1 */
    ck_assert_hr(psdb_client_verify_manifest(c, &m), PSDB_E_SIGNATURE);
    psdb_sodb_statement sst = {.size = 1, .identity = m.app, .serial = 3};
    ck_assert_hr(psdb_sodb_statement_sign(key, &sst, sig), PSDB_S_OK);
    m.kind = PSDB_MANIFEST_SODB;
    m.target.family = NULL;
    m.target.abi_version = 0;
    ck_assert_hr(psdb_client_verify_manifest(c, &m), PSDB_S_OK);
    m.kind = PSDB_MANIFEST_PSDB; /* an SODB's signature is no PSDB's */
    m.target.family = "f";
    ck_assert_hr(psdb_client_verify_manifest(c, &m), PSDB_E_SIGNATURE);
    psdb_client_release(c);
    psdb_key_release(key);
    tu_rmtree(dir);
    free(dir);
    free(key_path);
    free(pub);
}
END_TEST

/* A compile job as psdbd serves it (psdb/farm.h): ids and versions in either spelling, the
 * target's range, and what makes it no job. */
START_TEST(test_common__farm_job_reader)
{
    static const struct {
        const char *json;
        psdb_hr want;
    } cases[] = {
        {"{\"id\": 4, \"state\": \"queued\", \"app\": {\"name\": \"G\", \"version\": \"1.0.0.0\"}, "
         "\"sodb_sha256\": \"Z64\", \"sodb_id\": 2, \"target\": {\"family\": \"f\", "
         "\"abi_min\": 1, \"abi_max\": 5, \"profile_version\": 0}, \"demand\": 3, "
         "\"attempts\": 0}",
         PSDB_S_OK},
        {"{\"id\": 4, \"state\": \"queued\", \"app\": {\"name\": \"G\", \"version\": 1}, "
         "\"sodb_sha256\": \"Z64\", \"sodb_id\": \"2\", \"target\": {\"family\": \"f\", "
         "\"abi_min\": 6, \"abi_max\": 5}}",
         PSDB_E_PROTOCOL},
        {"{\"id\": 4, \"state\": \"queued\", \"app\": {\"name\": \"G\", \"version\": 1}, "
         "\"sodb_sha256\": \"Z63\", \"sodb_id\": \"2\", \"target\": {\"family\": \"f\", "
         "\"abi_min\": 1, \"abi_max\": 5}}",
         PSDB_E_PROTOCOL},
        {"{\"id\": -4, \"state\": \"queued\", \"app\": {\"name\": \"G\", \"version\": 1}, "
         "\"sodb_sha256\": \"Z64\", \"sodb_id\": \"2\", \"target\": {\"family\": \"f\", "
         "\"abi_min\": 1, \"abi_max\": 5}}",
         PSDB_E_PROTOCOL},
        {"{\"id\": 4, \"state\": \"queued\", \"app\": {\"name\": \"\", \"version\": 1}, "
         "\"sodb_sha256\": \"Z64\", \"sodb_id\": \"2\", \"target\": {\"family\": \"f\", "
         "\"abi_min\": 1, \"abi_max\": 5}}",
         PSDB_E_PROTOCOL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char json[1024];
        psdb_farm_job j;
        /* The digest's placeholder: 64 zero digits, or 63 (one short). */
        const char *z = strstr(cases[i].json, "Z6");
        ck_assert_ptr_nonnull(z);
        int digits = z[2] == '4' ? 64 : 63;
        int n = snprintf(json, sizeof(json), "%.*s%0*d%s", (int)(z - cases[i].json), cases[i].json,
                         digits, 0, z + 3);
        ck_assert(n > 0 && (size_t)n < sizeof(json));
        psdb_hr hr = psdb_farm_job_parse(json, (size_t)n, &j);
        ck_assert_msg(hr == cases[i].want, "case %zu: %s (%s)", i, psdb_hr_str(hr),
                      psdb_error_last());
        if (hr == PSDB_S_OK) {
            ck_assert_uint_eq(j.id, 4);
            ck_assert_str_eq(j.app_name, "G");
            ck_assert_uint_eq(j.app_version, 0x0001000000000000ull);
            ck_assert_str_eq(j.sodb_id, "2");
            ck_assert_uint_eq(j.abi_max, 5);
            ck_assert_uint_eq(j.demand, 3);
        } else {
            ck_assert_ptr_null(j.app_name);
            ck_assert_ptr_nonnull(strstr(psdb_error_last(), "job: "));
        }
        psdb_farm_job_clear(&j);
    }
    ck_assert_hr(psdb_farm_job_parse(NULL, 0, NULL), PSDB_E_INVALIDARG);
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
        /* Names psdb's rule refuses, which the statement's encoder refuses too (as JSON escapes).
         */
        {"G", "con\\u007fx", "g.exe", "E", PSDB_E_PROTOCOL},
        {"Demo\\u202egnp", "f", "g.exe", "E", PSDB_E_PROTOCOL},
        {"G", "f", "g\\u2028.exe", "E", PSDB_E_PROTOCOL},
        {"G", "f", "g.exe", "E\\u200f", PSDB_E_PROTOCOL},
        {"Caf\\u00e9 \\u30b2\\u30fc\\u30e0", "f", "g.exe", "E", PSDB_S_OK},
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
    hand.app.desc.name = "G";
    hand.target.family = "con\x7f-gfx9";
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
/* UTF-8 of one code point into buf (NUL-terminated). */
static const char *utf8(uint32_t cp, char buf[5])
{
    unsigned char *b = (unsigned char *)buf;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp, b[1] = 0;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6), b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        b[2] = 0;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12), b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)), b[3] = 0;
    } else {
        b[0] = (unsigned char)(0xF0 | cp >> 18), b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        b[4] = 0;
    }
    return buf;
}

/* "Demo" + the code point + "gnp.exe": refused with the kind and code point, at offset 4, and the
 * message names it as U+XXXX. */
static void assert_refused(uint32_t cp, psdb__name_fault_kind kind)
{
    char c[5], name[32], why[128], want[16];
    psdb__name_fault f;
    snprintf(name, sizeof(name), "Demo%sgnp.exe", utf8(cp, c));
    ck_assert_msg(psdb__name_scan(name, &f) == kind, "U+%04X: kind %d, not %d", (unsigned)cp,
                  (int)f.kind, (int)kind);
    ck_assert_uint_eq(f.cp, cp);
    ck_assert_uint_eq(f.offset, 4);
    ck_assert_int_eq(psdb__name_check(name, why, sizeof(why)), -1);
    snprintf(want, sizeof(want), "U+%04X", (unsigned)cp);
    ck_assert_msg(strstr(why, want) && strncmp(why, "contains ", 9) == 0, "U+%04X: '%s'",
                  (unsigned)cp, why);
}

static void assert_accepted(uint32_t cp)
{
    char c[5], name[32], why[128] = "x";
    snprintf(name, sizeof(name), "Demo%sgnp.exe", utf8(cp, c));
    ck_assert_msg(psdb__name_check(name, why, sizeof(why)) == 0, "U+%04X refused: %s", (unsigned)cp,
                  why);
    ck_assert_str_eq(why, "");
}

/* schema/HTTP.md "Names": each refused range at both ends, and the code points just outside it
 * accepted; the whole of C0, DEL and C1; names in other scripts and emoji still accepted; bytes
 * that are not UTF-8 refused with the byte and its offset. */
START_TEST(test_common__names_refuse_controls_formats_separators_and_bad_utf8)
{
    static const struct {
        uint32_t lo, hi;
        psdb__name_fault_kind kind;
    } refused[] = {
        {0x00AD, 0x00AD, PSDB__NAME_FORMAT},    {0x0600, 0x0605, PSDB__NAME_FORMAT},
        {0x061C, 0x061C, PSDB__NAME_FORMAT},    {0x06DD, 0x06DD, PSDB__NAME_FORMAT},
        {0x070F, 0x070F, PSDB__NAME_FORMAT},    {0x0890, 0x0891, PSDB__NAME_FORMAT},
        {0x08E2, 0x08E2, PSDB__NAME_FORMAT},    {0x180E, 0x180E, PSDB__NAME_FORMAT},
        {0x200B, 0x200F, PSDB__NAME_FORMAT},    {0x202A, 0x202E, PSDB__NAME_FORMAT},
        {0x2060, 0x2064, PSDB__NAME_FORMAT},    {0x2066, 0x206F, PSDB__NAME_FORMAT},
        {0xFEFF, 0xFEFF, PSDB__NAME_FORMAT},    {0xFFF9, 0xFFFB, PSDB__NAME_FORMAT},
        {0x110BD, 0x110BD, PSDB__NAME_FORMAT},  {0x110CD, 0x110CD, PSDB__NAME_FORMAT},
        {0x13430, 0x1343F, PSDB__NAME_FORMAT},  {0x1BCA0, 0x1BCA3, PSDB__NAME_FORMAT},
        {0x1D173, 0x1D17A, PSDB__NAME_FORMAT},  {0xE0001, 0xE0001, PSDB__NAME_FORMAT},
        {0xE0020, 0xE007F, PSDB__NAME_FORMAT},  {0x00A0, 0x00A0, PSDB__NAME_SEPARATOR},
        {0x1680, 0x1680, PSDB__NAME_SEPARATOR}, {0x2000, 0x200A, PSDB__NAME_SEPARATOR},
        {0x2028, 0x2029, PSDB__NAME_SEPARATOR}, {0x202F, 0x202F, PSDB__NAME_SEPARATOR},
        {0x205F, 0x205F, PSDB__NAME_SEPARATOR}, {0x3000, 0x3000, PSDB__NAME_SEPARATOR},
        {0x0001, 0x001F, PSDB__NAME_CONTROL},   {0x007F, 0x009F, PSDB__NAME_CONTROL},
    };
    /* Neighbours of the ranges that are letters, marks, symbols or unassigned: not refused. */
    static const uint32_t neighbours[] = {
        0x0020,  0x007E,  0x00A1,  0x00AC,  0x00AE,  0x05FF,  0x0606,  0x061B,  0x061D,  0x06DC,
        0x06DE,  0x070E,  0x0710,  0x088F,  0x0892,  0x08E1,  0x08E3,  0x180D,  0x180F,  0x167F,
        0x1681,  0x1FFF,  0x2010,  0x2027,  0x2030,  0x205E,  0x2065,  0x2070,  0x2FFF,  0x3001,
        0xFEFE,  0xFF00,  0xFFF8,  0xFFFC,  0x110BC, 0x110BE, 0x1342F, 0x13440, 0x1BC9F, 0x1BCA4,
        0x1D172, 0x1D17B, 0xE0000, 0xE0002, 0xE001F, 0xE0080, 0x10FFFF};
    static const char *const good[] = {
        "Demo",
        "Caf\xc3\xa9",                          /* Café */
        "\xe3\x82\xb2\xe3\x83\xbc\xe3\x83\xa0", /* ゲーム */
        "\xf0\x9f\x8e\xae Game",                /* 🎮, an emoji */
        "\xd9\x84\xd8\xb9\xd8\xa8\xd8\xa9",     /* لعبة, right-to-left letters */
        "Space Game 2: the sequel [v1.0] (x64)",
    };
    static const struct {
        const char *s;
        uint32_t byte;
        size_t offset;
    } bad[] = {
        {"bad\xff", 0xFF, 3},
        {"ab\xc0\xaf", 0xC0, 2},        /* overlong "/" */
        {"\xed\xa0\x80", 0xED, 0},      /* a surrogate */
        {"x\xf4\x90\x80\x80", 0xF4, 1}, /* past U+10FFFF */
        {"cut\xe3\x82", 0xE3, 3},       /* a sequence cut by the NUL */
        {"\x80", 0x80, 0},              /* a lone continuation byte */
    };
    char why[128];
    psdb__name_fault f;
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        assert_refused(refused[i].lo, refused[i].kind);
        assert_refused(refused[i].hi, refused[i].kind);
        if (refused[i].hi - refused[i].lo > 1)
            assert_refused(refused[i].lo + (refused[i].hi - refused[i].lo) / 2, refused[i].kind);
    }
    for (size_t i = 0; i < sizeof(neighbours) / sizeof(neighbours[0]); i++)
        assert_accepted(neighbours[i]);
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ck_assert_msg(psdb__name_check(good[i], why, sizeof(why)) == 0, "'%s': %s", good[i], why);
    /* An emoji sequence joined by U+200D is not a name: the joiner is a format character. */
    ck_assert_int_eq(
        psdb__name_check("\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9", why, sizeof(why)), -1);
    ck_assert_str_eq(why, "contains U+200D (a Unicode format character)");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(psdb__name_scan(bad[i].s, &f), PSDB__NAME_NOT_UTF8);
        ck_assert_uint_eq(f.cp, bad[i].byte);
        ck_assert_uint_eq(f.offset, bad[i].offset);
    }
    /* The messages, word for word: what psdbd, libpsdb and the tool all print. */
    ck_assert_int_eq(psdb__name_check("Demo\xe2\x80\xaegnp.exe", why, sizeof(why)), -1);
    ck_assert_str_eq(why, "contains U+202E (a Unicode format character)");
    ck_assert_int_eq(psdb__name_check("a\xe2\x80\xa8"
                                      "b",
                                      why, sizeof(why)),
                     -1);
    ck_assert_str_eq(why, "contains U+2028 (a Unicode space or separator other than U+0020)");
    ck_assert_int_eq(psdb__name_check("esc\x1b[2J", why, sizeof(why)), -1);
    ck_assert_str_eq(why, "contains the control character U+001B");
    ck_assert_int_eq(psdb__name_check("bad\xff", why, sizeof(why)), -1);
    ck_assert_str_eq(why, "is not UTF-8 (byte 0xFF at offset 3)");
    ck_assert_int_eq(psdb__name_check("\xf3\xa0\x80\x81tag", why, sizeof(why)), -1);
    ck_assert_str_eq(why, "contains U+E0001 (a Unicode format character)");
    /* The first fault is the one named; NULL and "" are the callers' rules (present, empty). */
    ck_assert_int_eq(psdb__name_scan("a\xc2\xa0\xe2\x80\xae", &f), PSDB__NAME_SEPARATOR);
    ck_assert_uint_eq(f.cp, 0xA0);
    ck_assert_int_eq(psdb__name_check(NULL, why, sizeof(why)), 0);
    ck_assert_int_eq(psdb__name_check("", NULL, 0), 0);
}
END_TEST

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
    tcase_add_test(tc, test_common__errno_classes);
    tcase_add_test(tc, test_common__last_error_is_per_thread);
    tcase_add_test(tc, test_common__error_ret_fills_only_an_unexplained_failure);
    tcase_add_test(tc, test_common__manifest_reader_uses_the_grammar);
    tcase_add_test(tc, test_common__manifest_reader_refuses_what_no_statement_carries);
    tcase_add_test(tc, test_common__manifest_names_its_statement);
    tcase_add_test(tc, test_common__farm_job_reader);
    tcase_add_test(tc, test_common__migrate_in_one_transaction);
    tcase_add_test(tc, test_common__names_refuse_controls_formats_separators_and_bad_utf8);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
