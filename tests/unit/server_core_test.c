/* server_core_test.c - psdbd internals: settings, ranges, ETags, tokens, the index and A3. */
#include "testutil.h"
#include "version_spellings.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string.h>

#include <sqlite3.h>

#include "auth.h"
#include "common.h"
#include "config.h"
#include "http.h"
#include "http_parse.h"
#include "index.h"
#include "metrics.h"
#include "store.h"
#include "verdict.h"

static char *dir;
static psdbd_index *ix;

static void setup(void)
{
    char err[512];
    dir = tu_mkdtemp();
    char *path = tu_path(dir, "index.sqlite");
    ck_assert_msg(psdbd_index_create(path, &ix, err, sizeof(err)) == 0, "%s", err);
    free(path);
}

static void teardown(void)
{
    psdbd_index_close(ix);
    ix = NULL;
    tu_rmtree(dir);
    free(dir);
}

START_TEST(test_server_core__config_file_and_flags)
{
    psdbd_config cfg;
    char err[512];
    psdbd_config_defaults(&cfg);
    ck_assert_str_eq(cfg.listen, "127.0.0.1:8470");
    ck_assert_uint_eq(cfg.max_upload, 8ull << 30);
    char *path = tu_path(dir, "psdbd.conf");
    const char *text = "# comment\n\nlisten = 0.0.0.0:9000\nmax-upload = 64K  # inline\n"
                       "readers-need-token = yes\nthreads=8\n";
    tu_write_file(path, text, strlen(text));
    ck_assert_int_eq(psdbd_config_load(&cfg, path, err, sizeof(err)), 0);
    ck_assert_str_eq(cfg.listen, "0.0.0.0:9000");
    ck_assert_uint_eq(cfg.max_upload, 65536);
    ck_assert_int_eq(cfg.readers_need_token, 1);
    ck_assert_uint_eq(cfg.threads, 8);
    ck_assert_int_eq(psdbd_config_set(&cfg, "threads", "0", err, sizeof(err)), -1);
    ck_assert_int_eq(psdbd_config_set(&cfg, "max-upload", "12Q", err, sizeof(err)), -1);
    ck_assert_int_eq(psdbd_config_set(&cfg, "nope", "1", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "unknown setting"));
    const char *bad = "listen 127.0.0.1:1\n";
    tu_write_file(path, bad, strlen(bad));
    ck_assert_int_eq(psdbd_config_load(&cfg, path, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, ":1:"));
    psdbd_config_free(&cfg);
    free(path);
}
END_TEST

START_TEST(test_server_core__parse_numbers)
{
    uint64_t v = 0;
    ck_assert_int_eq(psdb__parse_version("1.2.3.4", &v), 0);
    ck_assert_uint_eq(v, PSDB_VERSION(1, 2, 3, 4));
    ck_assert_int_eq(psdb__parse_version("1.2", &v), 0);
    ck_assert_uint_eq(v, PSDB_VERSION(1, 2, 0, 0));
    ck_assert_int_eq(psdb__parse_version("1.70000", &v), -1);
    ck_assert_int_eq(psdb__parse_version("1.2.3.4.5", &v), -1);
    ck_assert_int_eq(psdb__parse_u64("0x10", &v), 0);
    ck_assert_uint_eq(v, 16);
    ck_assert_int_eq(psdb__parse_u64("-1", &v), -1);
    ck_assert_int_eq(psdb__parse_u64("18446744073709551616", &v), -1);
    ck_assert_int_eq(psdb__parse_u64("12abc", &v), -1);
    ck_assert_int_eq(psdbd_parse_size("2G", &v), 0);
    ck_assert_uint_eq(v, 2ull << 30);
    /* The stored form of u64 keeps unsigned order under signed comparison. */
    ck_assert(psdbd_u64_to_db(0) < psdbd_u64_to_db(1));
    ck_assert(psdbd_u64_to_db(INT64_MAX) < psdbd_u64_to_db((uint64_t)INT64_MAX + 1));
    ck_assert(psdbd_u64_to_db(UINT64_MAX - 1) < psdbd_u64_to_db(UINT64_MAX));
    ck_assert_uint_eq(psdbd_u64_from_db(psdbd_u64_to_db(0xFFFF000012345678ull)),
                      0xFFFF000012345678ull);
}
END_TEST

/* The version spellings psdbd accepts (schema/HTTP.md, "Version spellings"): every row is pinned,
 * so a change of the grammar shows up here and in that section together. A refused spelling must
 * also leave *out untouched. */
START_TEST(test_server_core__version_spellings_grammar)
{
    /* psdbd's query parameters go through the one version parser: the grammar's examples. */
    for (size_t i = 0; i < sizeof(version_accepted) / sizeof(version_accepted[0]); i++) {
        uint64_t v = 0xDEADull;
        ck_assert_msg(psdb__parse_version(version_accepted[i].text, &v) == 0, "refused \"%s\"",
                      version_accepted[i].text);
        ck_assert_msg(v == version_accepted[i].value, "\"%s\" gave 0x%016llx",
                      version_accepted[i].text, (unsigned long long)v);
    }
    for (size_t i = 0; i < sizeof(version_refused) / sizeof(version_refused[0]); i++) {
        uint64_t v = 0xDEADull;
        ck_assert_msg(psdb__parse_version(version_refused[i], &v) == -1, "accepted \"%s\"",
                      version_refused[i]);
        ck_assert_msg(v == 0xDEADull, "\"%s\" changed the output", version_refused[i]);
    }
    ck_assert_int_eq(psdb__parse_version(NULL, NULL), -1);
}
END_TEST

START_TEST(test_server_core__ranges_and_etags)
{
    uint64_t off = 0, len = 0;
    ck_assert_int_eq(psdbd_parse_range("bytes=0-9", 100, &off, &len), 1);
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(len, 10);
    ck_assert_int_eq(psdbd_parse_range("bytes=90-200", 100, &off, &len), 1);
    ck_assert_uint_eq(len, 10);
    ck_assert_int_eq(psdbd_parse_range("bytes=-30", 100, &off, &len), 1);
    ck_assert_uint_eq(off, 70);
    ck_assert_int_eq(psdbd_parse_range("bytes=-300", 100, &off, &len), 1);
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(len, 100);
    ck_assert_int_eq(psdbd_parse_range("bytes=50-", 100, &off, &len), 1);
    ck_assert_uint_eq(len, 50);
    ck_assert_int_eq(psdbd_parse_range("bytes=100-", 100, &off, &len), -1);
    ck_assert_int_eq(psdbd_parse_range("bytes=-0", 100, &off, &len), -1);
    ck_assert_int_eq(psdbd_parse_range("bytes=0-", 0, &off, &len), -1);
    ck_assert_int_eq(psdbd_parse_range("bytes=5-1", 100, &off, &len), 0);
    ck_assert_int_eq(psdbd_parse_range("bytes=0-1,5-6", 100, &off, &len), 0);
    ck_assert_int_eq(psdbd_parse_range("items=0-1", 100, &off, &len), 0);
    ck_assert_int_eq(psdbd_parse_range("bytes=x-1", 100, &off, &len), 0);
    ck_assert_int_eq(psdbd_parse_range("bytes=0x10-", 100, &off, &len), 0);
    ck_assert_int_eq(psdbd_parse_range(NULL, 100, &off, &len), 0);
    /* Sizes over 4 GiB. */
    ck_assert_int_eq(psdbd_parse_range("bytes=5000000000-", 6000000000ull, &off, &len), 1);
    ck_assert_uint_eq(len, 1000000000ull);

    /* Several ranges (what a delta update asks for): ascending, disjoint, closed, inside. */
    psdbd_range rs[4];
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,5-6, 90-99", 100, rs, 4), 3);
    ck_assert_uint_eq(rs[0].off, 0);
    ck_assert_uint_eq(rs[0].len, 2);
    ck_assert_uint_eq(rs[1].off, 5);
    ck_assert_uint_eq(rs[2].off, 90);
    ck_assert_uint_eq(rs[2].len, 10);
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=5000000000-5000000001,5999999990-5999999999",
                                         6000000000ull, rs, 4),
                      2);
    ck_assert_uint_eq(rs[1].len, 10);
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1", 100, rs, 4), 0);        /* one range */
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=5-6,0-1", 100, rs, 4), 0);    /* unordered */
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-5,5-6", 100, rs, 4), 0);    /* overlapping */
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-4,5-6", 100, rs, 4), 0);    /* touching */
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,5-", 100, rs, 4), 0);     /* open */
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,-5", 100, rs, 4), 0);     /* suffix */
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,95-100", 100, rs, 4), 0); /* past the end */
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,3-4,6-7,9-10,12-13", 100, rs, 4), 0);
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,,5-6", 100, rs, 4), 0);
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,5-6x", 100, rs, 4), 0);
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,5-6,", 100, rs, 4), 0);
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,0x5-0x6", 100, rs, 4), 0);
    ck_assert_uint_eq(psdbd_parse_ranges("bytes=0-1,123456789012345678901234-5", 100, rs, 4), 0);
    ck_assert_uint_eq(psdbd_parse_ranges("items=0-1,5-6", 100, rs, 4), 0);
    ck_assert_uint_eq(psdbd_parse_ranges(NULL, 100, rs, 4), 0);

    const char *sha = "0932e7eb35728098e2f102f21f38ee11458d745d063846890ebca1219612a43a";
    ck_assert(psdbd_etag_matches(
        "\"0932e7eb35728098e2f102f21f38ee11458d745d063846890ebca1219612a43a\"", sha));
    ck_assert(psdbd_etag_matches(
        "\"x\", W/\"0932e7eb35728098e2f102f21f38ee11458d745d063846890ebca1219612a43a\"", sha));
    ck_assert(psdbd_etag_matches("*", sha));
    ck_assert(!psdbd_etag_matches("\"0932e7eb\"", sha));
    ck_assert(!psdbd_etag_matches(NULL, sha));
    ck_assert(psdbd_is_digest(sha));
    ck_assert(!psdbd_is_digest("0932E7EB35728098e2f102f21f38ee11458d745d063846890ebca1219612a43a"));
    ck_assert(!psdbd_is_digest("../etc/passwd"));
}
END_TEST

START_TEST(test_server_core__slow_client_settings)
{
    psdbd_config cfg;
    char err[512];
    psdbd_config_defaults(&cfg);
    /* A deadline by default: without one a trickling client holds its connection forever. */
    ck_assert_uint_eq(cfg.request_timeout, 30);
    ck_assert_uint_eq(cfg.upload_min_rate, 64 * 1024);
    ck_assert_uint_eq(cfg.max_connections, 1024);
    ck_assert_uint_eq(cfg.max_connections_per_ip, 0);
    ck_assert_int_eq(psdbd_config_set(&cfg, "request-timeout", "5", err, sizeof(err)), 0);
    ck_assert_uint_eq(cfg.request_timeout, 5);
    ck_assert_int_eq(psdbd_config_set(&cfg, "request-timeout", "0", err, sizeof(err)), 0);
    ck_assert_int_eq(psdbd_config_set(&cfg, "request-timeout", "-1", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "request-timeout"));
    ck_assert_int_eq(psdbd_config_set(&cfg, "upload-min-rate", "1M", err, sizeof(err)), 0);
    ck_assert_uint_eq(cfg.upload_min_rate, 1 << 20);
    ck_assert_int_eq(psdbd_config_set(&cfg, "upload-min-rate", "fast", err, sizeof(err)), -1);
    psdbd_config_free(&cfg);
}
END_TEST

START_TEST(test_server_core__connection_memory_settings)
{
    psdbd_config cfg;
    char err[512];
    psdbd_config_defaults(&cfg);
    /* A download holds about half its pool: small for the connections that read, large for
     * the ones that begin with a POST, whose body chunks are as large as their pool allows. */
    ck_assert_uint_eq(cfg.connection_memory, 8 * 1024);
    ck_assert_uint_eq(cfg.upload_connection_memory, 64 * 1024);
    const char *keys[] = {"connection-memory", "upload-connection-memory"};
    for (int i = 0; i < 2; i++) {
        unsigned *v = i ? &cfg.upload_connection_memory : &cfg.connection_memory;
        ck_assert_int_eq(psdbd_config_set(&cfg, keys[i], "4K", err, sizeof(err)), 0);
        ck_assert_uint_eq(*v, 4096);
        ck_assert_int_eq(psdbd_config_set(&cfg, keys[i], "16M", err, sizeof(err)), 0);
        ck_assert_uint_eq(*v, 16u << 20);
        ck_assert_int_eq(psdbd_config_set(&cfg, keys[i], "4095", err, sizeof(err)), -1);
        ck_assert_ptr_nonnull(strstr(err, keys[i]));
        ck_assert_int_eq(psdbd_config_set(&cfg, keys[i], "17M", err, sizeof(err)), -1);
        ck_assert_int_eq(psdbd_config_set(&cfg, keys[i], "lots", err, sizeof(err)), -1);
        ck_assert_uint_eq(*v, 16u << 20);
    }
    psdbd_config_free(&cfg);
}
END_TEST

START_TEST(test_server_core__request_target_and_signature_checks)
{
    ck_assert(psdbd_uri_has_encoded_nul("/v1/blobs/ab%00"));
    ck_assert(psdbd_uri_has_encoded_nul("/v1/resolve?app=a%00b"));
    ck_assert(!psdbd_uri_has_encoded_nul("/v1/resolve?app=a%20b%0"));
    ck_assert(!psdbd_uri_has_encoded_nul("/v1/resolve?app=%0a%100"));
    char sig[89];
    memset(sig, 'A', 86);
    memcpy(sig + 86, "==", 3);
    ck_assert(psdbd_is_signature_b64(sig));
    sig[85] = 'B'; /* 0b000001: a pad bit set */
    ck_assert(!psdbd_is_signature_b64(sig));
    sig[85] = 'w'; /* 0b110000: data bits only */
    ck_assert(psdbd_is_signature_b64(sig));
    sig[3] = '-'; /* base64url is not base64 */
    ck_assert(!psdbd_is_signature_b64(sig));
    ck_assert(!psdbd_is_signature_b64("AAAA"));
    ck_assert(!psdbd_is_signature_b64(NULL));
    const char *tail = NULL;
    ck_assert_int_eq(psdbd_route_of("/v1/apps/x/psdbs", &tail), PSDBD_ROUTE_APP_PSDBS);
    ck_assert_str_eq(tail, "x/psdbs");
    ck_assert_int_eq(psdbd_route_of("/v1/apps//psdbs", &tail), PSDBD_ROUTE_OTHER);
    ck_assert_ptr_null(tail);
    /* /v1/sodbs is the listing and the upload (no tail); /v1/sodbs/<id> one SODB. */
    ck_assert_int_eq(psdbd_route_of("/v1/sodbs", &tail), PSDBD_ROUTE_SODBS);
    ck_assert_ptr_null(tail);
    ck_assert_int_eq(psdbd_route_of("/v1/sodbs/12", &tail), PSDBD_ROUTE_SODBS);
    ck_assert_str_eq(tail, "12");
}
END_TEST

/* The Trailer header of a trailer-form publish: a comma-separated list, optional spaces and tabs
 * around each name, names in any case, repeated or unknown names harmless; a name is matched
 * whole, never as a prefix or inside another token. */
START_TEST(test_server_core__trailer_header_names)
{
    ck_assert_uint_eq(psdbd_trailer_names(NULL), 0);
    ck_assert_uint_eq(psdbd_trailer_names(""), 0);
    ck_assert_uint_eq(psdbd_trailer_names("X-Psdb-Sha256, X-Psdb-Size, X-Psdb-Signature"),
                      PSDBD_TRAILER_ALL);
    ck_assert_uint_eq(psdbd_trailer_names("x-psdb-signature,X-PSDB-SIZE,\tx-psdb-sha256\t"),
                      PSDBD_TRAILER_ALL);
    ck_assert_uint_eq(psdbd_trailer_names(" ,Expires, X-Psdb-Size ,, X-Psdb-Size"),
                      PSDBD_TRAILER_SIZE);
    ck_assert_uint_eq(psdbd_trailer_names("X-Psdb-Signatures, X-Psdb-Sha2567, X-Psdb-Siz"), 0);
    ck_assert_uint_eq(psdbd_trailer_names("X-Psdb-Sha256 X-Psdb-Size"), 0);
    ck_assert_uint_eq(psdbd_trailer_names("X-Psdb-Signature;q=1"), 0);
    for (unsigned i = 0; i < PSDBD_TRAILER_FIELDS; i++)
        ck_assert_uint_eq(psdbd_trailer_names(psdbd_trailer_field(i)), 1u << i);
    ck_assert_ptr_null(psdbd_trailer_field(PSDBD_TRAILER_FIELDS));
}
END_TEST

START_TEST(test_server_core__http_dates_and_preconditions)
{
    int64_t t = 0;
    /* RFC 9110 5.6.7's three forms of one instant. */
    ck_assert_int_eq(psdbd_parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT", &t), 0);
    ck_assert_int_eq(t, 784111777);
    ck_assert_int_eq(psdbd_parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", &t), 0);
    ck_assert_int_eq(t, 784111777);
    ck_assert_int_eq(psdbd_parse_http_date("Sun Nov  6 08:49:37 1994", &t), 0);
    ck_assert_int_eq(t, 784111777);
    ck_assert_int_eq(psdbd_parse_http_date("Thu, 29 Feb 2024 00:00:00 GMT", &t), 0);
    ck_assert_int_eq(psdbd_parse_http_date("Fri, 30 Feb 2024 00:00:00 GMT", &t), -1);
    ck_assert_int_eq(psdbd_parse_http_date("Sun, 06 Nov 1994 08:49:37 UTC", &t), -1);
    ck_assert_int_eq(psdbd_parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT ", &t), -1);
    ck_assert_int_eq(psdbd_parse_http_date("784111777", &t), -1);
    char buf[40];
    ck_assert_str_eq(psdbd_format_http_date(784111777, buf, sizeof(buf)),
                     "Sun, 06 Nov 1994 08:49:37 GMT");
    ck_assert_str_eq(psdbd_format_http_date(0, buf, sizeof(buf)), "Thu, 01 Jan 1970 00:00:00 GMT");

    const char *sha = "0932e7eb35728098e2f102f21f38ee11458d745d063846890ebca1219612a43a";
    char tag[80], weak[80];
    snprintf(tag, sizeof(tag), "\"%s\"", sha);
    snprintf(weak, sizeof(weak), "W/\"%s\"", sha);
    ck_assert(psdbd_etag_matches_strong(tag, sha));
    ck_assert(!psdbd_etag_matches_strong(weak, sha));
    ck_assert(psdbd_etag_matches(weak, sha));
    ck_assert(psdbd_etag_matches_strong("*", sha));
    ck_assert(!psdbd_etag_matches("\"a,b\" junk", sha));

    int64_t lm = 784111777, now = lm + 1000;
    int use_range = 0;
    psdbd_conditions c = {0};
    ck_assert_uint_eq(psdbd_blob_preconditions(&c, sha, lm, now, &use_range), 0);
    ck_assert_int_eq(use_range, 1);
    c.if_match = "\"other\"";
    ck_assert_uint_eq(psdbd_blob_preconditions(&c, sha, lm, now, &use_range), 412);
    c.if_match = tag;
    c.if_none_match = tag;
    ck_assert_uint_eq(psdbd_blob_preconditions(&c, sha, lm, now, &use_range), 304);
    /* If-None-Match wins over If-Modified-Since. */
    c = (psdbd_conditions){.if_none_match = "\"other\"",
                           .if_modified_since = "Sun, 06 Nov 1994 08:49:37 GMT"};
    ck_assert_uint_eq(psdbd_blob_preconditions(&c, sha, lm, now, &use_range), 0);
    c.if_none_match = NULL;
    ck_assert_uint_eq(psdbd_blob_preconditions(&c, sha, lm, now, &use_range), 304);
    c.if_modified_since = "Sun, 06 Nov 1994 08:49:36 GMT";
    ck_assert_uint_eq(psdbd_blob_preconditions(&c, sha, lm, now, &use_range), 0);
    c = (psdbd_conditions){.if_unmodified_since = "Sun, 06 Nov 1994 08:49:36 GMT"};
    ck_assert_uint_eq(psdbd_blob_preconditions(&c, sha, lm, now, &use_range), 412);
    c = (psdbd_conditions){.if_range = "Sun, 06 Nov 1994 08:49:37 GMT"};
    ck_assert_uint_eq(psdbd_blob_preconditions(&c, sha, lm, now, &use_range), 0);
    ck_assert_int_eq(use_range, 1);
    c.if_range = weak;
    psdbd_blob_preconditions(&c, sha, lm, now, &use_range);
    ck_assert_int_eq(use_range, 0);
}
END_TEST

START_TEST(test_server_core__tokens_hashed_and_checked)
{
    char selector[17];
    uint8_t hash[32];
    psdbd_principal who;
    char *tok = psdbd_token_new(selector, hash);
    ck_assert_uint_eq(strlen(tok), 5 + 16 + 1 + 64);
    ck_assert_int_eq(psdbd_index_token_add(ix, "t1", selector, hash, "publisher", "Game*", 0),
                     PSDBD_OK);
    ck_assert_int_eq(psdbd_index_token_add(ix, "t1", "ffffffffffffffff", hash, "reader", "*", 0),
                     PSDBD_EXISTS);
    char *hdr = NULL;
    ck_assert_int_ge(asprintf(&hdr, "Bearer %s", tok), 0);
    ck_assert_int_eq(psdbd_auth_check(ix, hdr, &who), PSDBD_AUTH_OK);
    ck_assert_int_eq(who.role, PSDBD_ROLE_PUBLISHER);
    ck_assert_str_eq(who.name, "t1");
    ck_assert(psdbd_scope_covers(who.scope, "GameOne"));
    ck_assert(!psdbd_scope_covers(who.scope, "Other"));
    psdbd_principal_free(&who);
    hdr[strlen(hdr) - 1] ^= 1; /* one bit of the secret */
    ck_assert_int_eq(psdbd_auth_check(ix, hdr, &who), PSDBD_AUTH_INVALID);
    ck_assert_int_eq(psdbd_auth_check(ix, NULL, &who), PSDBD_AUTH_MISSING);
    ck_assert_int_eq(psdbd_auth_check(ix, "Basic abc", &who), PSDBD_AUTH_INVALID);
    /* The database holds the hash, not the token. */
    sqlite3 *db = psdbd_index_db(ix);
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(
        sqlite3_prepare_v2(db, "SELECT count(*) FROM tokens WHERE hash = ?1", -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_blob(st, 1, hash, 32, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    /* Expired. */
    free(tok);
    tok = psdbd_token_new(selector, hash);
    ck_assert_int_eq(psdbd_index_token_add(ix, "t2", selector, hash, "reader", "*", 1000),
                     PSDBD_OK);
    free(hdr);
    ck_assert_int_ge(asprintf(&hdr, "Bearer %s", tok), 0);
    ck_assert_int_eq(psdbd_auth_check(ix, hdr, &who), PSDBD_AUTH_INVALID);
    free(hdr);
    free(tok);
}
END_TEST

static psdbd_record rec(uint64_t abi, uint64_t profile, uint64_t serial, char c)
{
    psdbd_record r = {.app_name = "Game",
                      .exe_filename = "g.exe",
                      .engine_name = "",
                      .family = "fam",
                      .app_version = 1,
                      .abi_version = abi,
                      .profile_version = profile,
                      .serial = serial,
                      .size = 10,
                      .signature = "sig",
                      .published_by = "t"};
    memset(r.sha256, c, 64);
    r.sha256[64] = '\0';
    memset(r.key_id, 'k', 64);
    r.key_id[64] = '\0';
    return r;
}

static int64_t publish(psdbd_record r)
{
    json_t *m = NULL;
    ck_assert_int_eq(psdbd_index_publish(ix, &r, &m), PSDBD_OK);
    int64_t id = json_integer_value(json_object_get(m, "id"));
    json_decref(m);
    return id;
}

static int64_t resolve(uint64_t lo, uint64_t hi, int has_profile, uint64_t profile)
{
    psdbd_query q = {.app = "Game",
                     .app_version = 1,
                     .family = "fam",
                     .abi_min = lo,
                     .abi_max = hi,
                     .has_profile = has_profile,
                     .profile_version = profile};
    json_t *m = NULL;
    psdbd_rc rc = psdbd_index_resolve(ix, &q, &m);
    if (rc == PSDBD_NOT_FOUND)
        return -1;
    ck_assert_int_eq(rc, PSDBD_OK);
    int64_t id = json_integer_value(json_object_get(m, "id"));
    json_decref(m);
    return id;
}

START_TEST(test_server_core__A3_index_order_with_large_values)
{
    const uint64_t big = 0xF000000000000000ull; /* above 2^63: the biased storage must order it */
    int64_t a = publish(rec(5, PSDB_VERSION(1, 0, 0, 0), 1, 'a'));
    int64_t b = publish(rec(big, PSDB_VERSION(1, 0, 0, 0), 1, 'b'));
    int64_t c = publish(rec(big, PSDB_VERSION(1, 0, 9, 0), 1, 'c'));
    int64_t d = publish(rec(big, PSDB_VERSION(1, 0, 9, 0), 0xFFFFFFFFFFFFFFF0ull, 'd'));
    int64_t e = publish(rec(big, PSDB_VERSION(0xFFFF, 0, 0, 0), 1, 'e'));
    ck_assert_int_eq(resolve(1, UINT64_MAX - 1, 1, PSDB_VERSION(1, 0, 0, 0)), d);
    ck_assert_int_eq(resolve(1, UINT64_MAX - 1, 1, PSDB_VERSION(0xFFFF, 0, 5, 5)), e);
    ck_assert_int_eq(resolve(1, big - 1, 1, PSDB_VERSION(1, 0, 0, 0)), a);
    ck_assert_int_eq(resolve(6, big - 1, 0, 0), -1);
    ck_assert_int_eq(resolve(1, UINT64_MAX - 1, 1, PSDB_VERSION(1, 1, 0, 0)), -1);
    json_t *m = NULL;
    ck_assert_int_eq(psdbd_index_retire(ix, d, "t", &m), PSDBD_OK);
    json_decref(m);
    ck_assert_int_eq(resolve(1, UINT64_MAX - 1, 1, PSDB_VERSION(1, 0, 0, 0)), c);
    ck_assert_int_eq(psdbd_index_retire(ix, 999, "t", &m), PSDBD_NOT_FOUND);
    (void)b;
    /* Same identity + serial: same bytes exist, other bytes conflict. */
    psdbd_record again = rec(5, PSDB_VERSION(1, 0, 0, 0), 1, 'a');
    ck_assert_int_eq(psdbd_index_publish(ix, &again, &m), PSDBD_EXISTS);
    json_decref(m);
    psdbd_record other = rec(5, PSDB_VERSION(1, 0, 0, 0), 1, 'z');
    ck_assert_int_eq(psdbd_index_publish(ix, &other, NULL), PSDBD_CONFLICT);
}
END_TEST

START_TEST(test_server_core__index_open_never_creates)
{
    char err[512];
    psdbd_index *other = NULL;
    char *missing = tu_path(dir, "missing.sqlite"), *empty = tu_path(dir, "empty.sqlite");
    char *path = tu_path(dir, "index.sqlite");
    struct stat sb;
    /* Opening a missing index fails and leaves no file. */
    ck_assert_int_eq(psdbd_index_open(missing, &other, err, sizeof(err)), -1);
    ck_assert_ptr_null(other);
    ck_assert_ptr_nonnull(strstr(err, "missing"));
    ck_assert_int_ne(access(missing, F_OK), 0);
    /* A zero-byte file is not migrated into a new index, and is not written to. */
    ck_assert_int_eq(tu_write_file(empty, "", 0), 0);
    ck_assert_int_eq(psdbd_index_open(empty, &other, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "empty or not a psdbd index"));
    ck_assert_int_eq(stat(empty, &sb), 0);
    ck_assert_int_eq(sb.st_size, 0);
    /* The new index was linked into place whole: nothing left under the name it was built at. */
    char *built = tu_path(dir, "index.sqlite.new");
    ck_assert_int_ne(access(built, F_OK), 0);
    free(built);
    /* Creating over an existing file is refused. */
    ck_assert_int_eq(psdbd_index_create(path, &other, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "already there"));
    /* The index carries psdbd's application_id. */
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA application_id", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq((uint32_t)sqlite3_column_int(st, 0), PSDBD_INDEX_APPLICATION_ID);
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(missing);
    free(empty);
    free(path);
}
END_TEST

static void *other_thread_db(void *arg)
{
    return psdbd_index_db(arg);
}

START_TEST(test_server_core__index_removed_is_unavailable)
{
    char *path = tu_path(dir, "index.sqlite");
    json_t *m = NULL;
    pthread_t t;
    void *db = (void *)1;
    publish(rec(5, 0, 1, 'a'));
    ck_assert_int_eq(psdbd_index_ping(ix), 0);
    ck_assert(!psdbd_index_lost(ix));
    ck_assert_int_eq(unlink(path), 0);
    /* This thread's open connection still reaches the unlinked file: it must not be used. */
    ck_assert(psdbd_index_lost(ix));
    ck_assert_int_ne(psdbd_index_ping(ix), 0);
    psdbd_record r = rec(6, 0, 1, 'b');
    ck_assert_int_eq(psdbd_index_publish(ix, &r, NULL), PSDBD_UNAVAILABLE);
    ck_assert_int_eq(psdbd_index_retire(ix, 1, "t", NULL), PSDBD_UNAVAILABLE);
    ck_assert_int_eq(psdbd_index_list_apps(ix, &m), PSDBD_UNAVAILABLE);
    psdbd_token_row row;
    ck_assert_int_eq(psdbd_index_token_find(ix, "0123456789abcdef", &row), PSDBD_UNAVAILABLE);
    /* A thread without a connection yet gets none, and creates no file. */
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread_db, ix), 0);
    ck_assert_int_eq(pthread_join(t, &db), 0);
    ck_assert_ptr_null(db);
    ck_assert_int_ne(access(path, F_OK), 0);
    free(path);
}
END_TEST

/* In a child with a non-root identity (access() ignores permissions for root): the index
 * made unreadable under an open index is lost. Exit status 0 when it behaves. */
static int unreadable_child(const char *path)
{
    char err[512];
    psdbd_index *mine = NULL;
    if (setgid(65534) != 0 || setuid(65534) != 0)
        return 10;
    if (psdbd_index_open(path, &mine, err, sizeof(err)) != 0)
        return 11;
    if (psdbd_index_lost(mine) || psdbd_index_ping(mine) != 0)
        return 12;
    if (chmod(path, 0) != 0)
        return 13;
    if (!psdbd_index_lost(mine) || psdbd_index_ping(mine) == 0)
        return 14;
    json_t *m = NULL;
    if (psdbd_index_list_apps(mine, &m) != PSDBD_UNAVAILABLE)
        return 15;
    if (chmod(path, 0644) != 0 || psdbd_index_lost(mine) || psdbd_index_ping(mine) != 0)
        return 16; /* made usable again: served again */
    psdbd_index_close(mine);
    return 0;
}

START_TEST(test_server_core__index_unreadable_is_unavailable)
{
    char *path = tu_path(dir, "index.sqlite"), *cmd = NULL;
    int st = 0;
    psdbd_index_close(ix);
    ix = NULL;
    ck_assert_int_ge(asprintf(&cmd, "chown -R 65534:65534 %s", dir), 0);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(unreadable_child(path));
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child step %d failed",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    free(path);
}
END_TEST

START_TEST(test_server_core__migrations_refuse_newer)
{
    char err[512];
    psdbd_index *again = NULL;
    char *path = tu_path(dir, "index.sqlite");
    ck_assert_int_eq(psdbd_index_schema_version(ix), (int)psdbd_num_migrations);
    psdbd_index_close(ix);
    ix = NULL;
    /* Reopening is a no-op; a newer schema is refused. */
    ck_assert_int_eq(psdbd_index_open(path, &again, err, sizeof(err)), 0);
    psdbd_index_close(again);
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "PRAGMA user_version = 1000", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(psdbd_index_open(path, &again, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "newer than this psdbd knows"));
    free(path);
}
END_TEST

/* Column col of every row of sql on the file at path, each followed by a comma (malloc'd). */
static char *sqlite_column(const char *path, const char *sql, int col)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char *out = xstrdup("");
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
        char *next = xasprintf("%s%s,", out, (const char *)sqlite3_column_text(st, col));
        free(out);
        out = next;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
}

START_TEST(test_server_core__migration_5_reaches_an_index_of_version_4)
{
    char err[512], *names;
    char *path = tu_path(dir, "index.sqlite");
    int64_t a = publish(rec(2, 0, 1, 'a'));
    int64_t b = publish(rec(2, 0, 2, 'b'));
    (void)a;
    psdbd_index_close(ix);
    ix = NULL;
    /* The index as psdbd of schema version 4 left it. */
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(
        sqlite3_exec(db, "DROP INDEX IF EXISTS psdbs_resolve_active; PRAGMA user_version = 4", NULL,
                     NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);
    ck_assert_msg(psdbd_index_open(path, &ix, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(psdbd_index_schema_version(ix), 5);
    names = sqlite_column(path,
                          "SELECT name FROM sqlite_master WHERE type = 'index' AND name = "
                          "'psdbs_resolve_active'",
                          0);
    ck_assert_str_eq(names, "psdbs_resolve_active,");
    free(names);
    /* Resolves read it: the newest serial first, no sort of the cell. */
    names = sqlite_column(
        path,
        "EXPLAIN QUERY PLAN SELECT p.id FROM psdbs p JOIN apps a ON a.id = p.app WHERE "
        "a.name = 'Game' AND p.app_version = 1 AND p.family = 'f' AND p.abi_version "
        "BETWEEN 1 AND 5 AND p.profile_version BETWEEN 0 AND 9 AND p.retired_at IS NULL "
        "ORDER BY p.abi_version DESC, p.profile_version DESC, p.serial DESC, p.id DESC "
        "LIMIT 1",
        3);
    ck_assert_msg(strstr(names, "psdbs_resolve_active") && !strstr(names, "TEMP B-TREE"), "%s",
                  names);
    free(names);
    ck_assert_int_eq(resolve(1, 9, 0, 0), b);
    free(path);
}
END_TEST

/* Applications whose name starts with 'A' (the test's scope). */
static int starts_with_a(const char *app, void *ctx)
{
    (*(int *)ctx)++;
    return app[0] == 'A';
}

START_TEST(test_server_core__metrics_filter_reads_escaped_app_labels)
{
    static const char text[] =
        "# HELP psdbd_demand_resolves_total Resolves.\n"
        "# TYPE psdbd_demand_resolves_total counter\n"
        "psdbd_http_requests_total{route=\"resolve\",status=\"200\"} 3\n"
        "psdbd_demand_resolves_total{app=\"Game\",result=\"hit\"} 1\n"
        "psdbd_demand_resolves_total{app=\"A\\\"b\\\\c\\nd\",result=\"hit\"} 2\n"
        "psdbd_demand_downloads_total{kind=\"complete\",app=\"Alpha\"} 4\n"
        "psdbd_demand_resolves_total{app=\"other\",result=\"miss\"} 5\n"
        "psdbd_demand_resolves_total{app=\"Aunterminated} 6\n"
        "psdbd_resolve_total{result=\"hit\"} 7";
    char *out = NULL;
    size_t n = 0;
    int asked = 0;
    FILE *f = open_memstream(&out, &n);
    ck_assert_ptr_nonnull(f);
    psdbd_metrics_copy_visible(f, text, starts_with_a, &asked);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_str_eq(out, "# HELP psdbd_demand_resolves_total Resolves.\n"
                          "# TYPE psdbd_demand_resolves_total counter\n"
                          "psdbd_http_requests_total{route=\"resolve\",status=\"200\"} 3\n"
                          "psdbd_demand_resolves_total{app=\"A\\\"b\\\\c\\nd\",result=\"hit\"} 2\n"
                          "psdbd_demand_downloads_total{kind=\"complete\",app=\"Alpha\"} 4\n"
                          "psdbd_resolve_total{result=\"hit\"} 7");
    /* Game, A"b\c<newline>d, Alpha, other: an unreadable label is left out without asking. */
    ck_assert_int_eq(asked, 4);
    free(out);
}
END_TEST

/* Each failure psdbd meets maps onto one outcome, once, whatever route met it: a full disk is
 * disk_full, the server's own I/O internal, a missing file what the caller says absence means, and
 * what libpsdb finds wrong with a client's input the caller's refusal. */
START_TEST(test_server_core__verdict_maps_each_failure_once)
{
    psdbd_verdict v = {0};
    ck_assert_int_eq(psdbd_outcome_of_errno(ENOSPC, PSDBD_OUTCOME_INTERNAL),
                     PSDBD_OUTCOME_DISK_FULL);
    ck_assert_int_eq(psdbd_outcome_of_errno(EDQUOT, PSDBD_OUTCOME_INTERNAL),
                     PSDBD_OUTCOME_DISK_FULL);
    ck_assert_int_eq(psdbd_outcome_of_errno(EFBIG, PSDBD_OUTCOME_INTERNAL),
                     PSDBD_OUTCOME_DISK_FULL);
    ck_assert_int_eq(psdbd_outcome_of_errno(EACCES, PSDBD_OUTCOME_NOT_FOUND),
                     PSDBD_OUTCOME_INTERNAL);
    ck_assert_int_eq(psdbd_outcome_of_errno(ENOMEM, PSDBD_OUTCOME_NOT_FOUND),
                     PSDBD_OUTCOME_INTERNAL);
    ck_assert_int_eq(psdbd_outcome_of_errno(ENOENT, PSDBD_OUTCOME_NOT_FOUND),
                     PSDBD_OUTCOME_NOT_FOUND);
    ck_assert_int_eq(psdbd_outcome_of_errno(ENOENT, PSDBD_OUTCOME_INTERNAL),
                     PSDBD_OUTCOME_INTERNAL);
    ck_assert_int_eq(psdbd_outcome_of_hr(PSDB_E_DISK_FULL, PSDBD_OUTCOME_INVALID_PSDB),
                     PSDBD_OUTCOME_DISK_FULL);
    ck_assert_int_eq(psdbd_outcome_of_hr(PSDB_E_IO, PSDBD_OUTCOME_INVALID_PSDB),
                     PSDBD_OUTCOME_INTERNAL);
    ck_assert_int_eq(psdbd_outcome_of_hr(PSDB_E_ACCESS, PSDBD_OUTCOME_NO_VALUE_MAP),
                     PSDBD_OUTCOME_INTERNAL);
    ck_assert_int_eq(psdbd_outcome_of_hr(PSDB_E_CACHE_CORRUPT, PSDBD_OUTCOME_INVALID_PSDB),
                     PSDBD_OUTCOME_INVALID_PSDB);
    ck_assert_int_eq(psdbd_outcome_of_hr(PSDB_E_UNSUPPORTED, PSDBD_OUTCOME_NO_VALUE_MAP),
                     PSDBD_OUTCOME_NO_VALUE_MAP);
    ck_assert_int_eq(psdbd_verdict_index(&v, PSDBD_UNAVAILABLE), -1);
    ck_assert_int_eq(v.outcome, PSDBD_OUTCOME_INDEX_UNAVAILABLE);
    psdbd_verdict_index(&v, PSDBD_FULL);
    ck_assert_int_eq(v.outcome, PSDBD_OUTCOME_DISK_FULL);
    psdbd_verdict_index(&v, PSDBD_ERROR);
    ck_assert_int_eq(v.outcome, PSDBD_OUTCOME_INTERNAL);
    ck_assert_str_eq(v.message, "the index failed; see the server log");
    /* A message quoting bytes that are not UTF-8, or cut inside a character, is made UTF-8. */
    char quote[600];
    memset(quote, 'a', sizeof(quote));
    memcpy(quote + 508, "\xc3\xa9\xc3\xa9", 4); /* the buffer ends inside the second */
    quote[sizeof(quote) - 1] = '\0';
    psdbd_verdict_fail(&v, PSDBD_OUTCOME_NOT_FOUND, "%s", quote);
    ck_assert_uint_eq(strlen(v.message), sizeof(v.message) - 1);
    ck_assert_str_eq(v.message + 508, "\xc3\xa9?");
    psdbd_verdict_fail(&v, PSDBD_OUTCOME_BAD_REQUEST, "no such endpoint: %s", "/\xff\xc0\x80x");
    ck_assert_str_eq(v.message, "no such endpoint: /???x");
    psdbd_verdict_clear(&v);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_core");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_server_core__config_file_and_flags);
    tcase_add_test(tc, test_server_core__parse_numbers);
    tcase_add_test(tc, test_server_core__version_spellings_grammar);
    tcase_add_test(tc, test_server_core__ranges_and_etags);
    tcase_add_test(tc, test_server_core__slow_client_settings);
    tcase_add_test(tc, test_server_core__connection_memory_settings);
    tcase_add_test(tc, test_server_core__request_target_and_signature_checks);
    tcase_add_test(tc, test_server_core__trailer_header_names);
    tcase_add_test(tc, test_server_core__http_dates_and_preconditions);
    tcase_add_test(tc, test_server_core__tokens_hashed_and_checked);
    tcase_add_test(tc, test_server_core__A3_index_order_with_large_values);
    tcase_add_test(tc, test_server_core__migrations_refuse_newer);
    tcase_add_test(tc, test_server_core__migration_5_reaches_an_index_of_version_4);
    tcase_add_test(tc, test_server_core__index_open_never_creates);
    tcase_add_test(tc, test_server_core__index_removed_is_unavailable);
    tcase_add_test(tc, test_server_core__metrics_filter_reads_escaped_app_labels);
    tcase_add_test(tc, test_server_core__verdict_maps_each_failure_once);
    if (geteuid() == 0) /* it needs to become another user */
        tcase_add_test(tc, test_server_core__index_unreadable_is_unavailable);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
