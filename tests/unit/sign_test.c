/* sign_test.c - the signed statement encoding, Ed25519 key files, signing and verification. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *dir;

static void setup(void)
{
    dir = tu_mkdtemp();
}

static void teardown(void)
{
    tu_rmtree(dir);
    free(dir);
    dir = NULL;
}

static psdb_statement sample(void)
{
    psdb_statement st = {
        .size = 12345,
        .identity = {.desc = {.exe_filename = "game.exe",
                              .name = "Game",
                              .version = PSDB_VERSION(1, 2, 3, 4),
                              .engine_name = "Engine",
                              .engine_version = PSDB_VERSION(5, 0, 0, 0)},
                     .app_id = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
        .target = {.family = "contoso-gfx9",
                   .abi_version = 7,
                   .compiler_version = PSDB_VERSION(2, 0, 0, 0),
                   .profile_version = PSDB_VERSION(1, 1, 0, 0)},
        .serial = 42,
    };
    for (int i = 0; i < 32; i++)
        st.sha256[i] = (uint8_t)(0xA0 + i);
    return st;
}

static psdb_key *make_key(const char *name, char id[PSDB_KEY_ID_SIZE])
{
    char *path = tu_path(dir, name);
    psdb_key *key = NULL;
    ck_assert_hr(psdb_keygen(path, id), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(path, &key), PSDB_S_OK);
    free(path);
    return key;
}

START_TEST(test_sign__encoding_is_documented_bytes)
{
    psdb_statement st = sample();
    size_t size = 0;
    ck_assert_hr(psdb_statement_encode(&st, NULL, &size), PSDB_S_OK);
    /* 18 domain + 4 version + 32 digest + 8 size + (4+8) exe + (4+4) name + 8 version
     * + (4+6) engine + 8 engine version + 16 app id + (4+12) family + 4 * 8 target/serial */
    ck_assert_uint_eq(size, 18 + 4 + 32 + 8 + 12 + 8 + 8 + 10 + 8 + 16 + 16 + 32);
    uint8_t *buf = malloc(size);
    size_t small = size - 1;
    ck_assert_hr(psdb_statement_encode(&st, buf, &small), PSDB_E_MORE_DATA);
    ck_assert_uint_eq(small, size);
    ck_assert_hr(psdb_statement_encode(&st, buf, &size), PSDB_S_OK);
    ck_assert_mem_eq(buf, "psdb-statement-v1\0", 18);
    ck_assert_mem_eq(buf + 18, "\x01\0\0\0", 4);
    ck_assert_mem_eq(buf + 22, st.sha256, 32);
    ck_assert_mem_eq(buf + 54, "\x39\x30\0\0\0\0\0\0", 8);
    ck_assert_mem_eq(buf + 62, "\x08\0\0\0game.exe", 12);
    ck_assert_mem_eq(buf + size - 8, "\x2a\0\0\0\0\0\0\0", 8);
    free(buf);
}
END_TEST

START_TEST(test_sign__null_engine_encodes_as_empty)
{
    psdb_statement a = sample(), b = sample();
    a.identity.desc.engine_name = NULL;
    b.identity.desc.engine_name = "";
    uint8_t ba[512], bb[512];
    size_t na = sizeof(ba), nb = sizeof(bb);
    ck_assert_hr(psdb_statement_encode(&a, ba, &na), PSDB_S_OK);
    ck_assert_hr(psdb_statement_encode(&b, bb, &nb), PSDB_S_OK);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(ba, bb, na);
}
END_TEST

START_TEST(test_sign__bad_statement_rejected)
{
    psdb_statement st = sample();
    size_t size = 0;
    st.identity.desc.name = "";
    ck_assert_hr(psdb_statement_encode(&st, NULL, &size), PSDB_E_INVALIDARG);
    st = sample();
    st.target.family = NULL;
    ck_assert_hr(psdb_statement_encode(&st, NULL, &size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_statement_encode(NULL, NULL, &size), PSDB_E_INVALIDARG);
    char *big = malloc(PSDB_STATEMENT_STRING_MAX + 2);
    memset(big, 'x', PSDB_STATEMENT_STRING_MAX + 1);
    big[PSDB_STATEMENT_STRING_MAX + 1] = '\0';
    st = sample();
    st.identity.desc.exe_filename = big;
    ck_assert_hr(psdb_statement_encode(&st, NULL, &size), PSDB_E_INVALIDARG);
    free(big);
}
END_TEST

/* Each name of a statement by psdb's rule for names: a publisher cannot vouch for, and a launcher
 * never verifies, a name that displays as another one; psdb_error_last names field and code point.
 * Names in other scripts and emoji are names. */
START_TEST(test_sign__statement_refuses_names_that_spoof)
{
    static const struct {
        int field; /* 0 exe, 1 name, 2 engine, 3 family */
        const char *value, *want;
    } bad[] = {
        {1, "Demo\xe2\x80\xaegnp.exe", "the application name contains U+202E"},
        {0, "game\xe2\x80\x8b.exe", "the exe filename contains U+200B"},
        {2, "Eng\xc2\xa0ine", "the engine name contains U+00A0"},
        {3, "contoso\xe2\x80\xa8gfx9", "the family contains U+2028"},
        {3, "contoso\x1b[2J", "the family contains the control character U+001B"},
        {1, "Bad\xff", "the application name is not UTF-8"},
    };
    char sig[PSDB_SIGNATURE_B64_SIZE], id[PSDB_KEY_ID_SIZE];
    psdb_key *key = make_key("k", id);
    size_t size = 0;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        psdb_statement st = sample();
        const char **f[4] = {&st.identity.desc.exe_filename, &st.identity.desc.name,
                             &st.identity.desc.engine_name, &st.target.family};
        *f[bad[i].field] = bad[i].value;
        ck_assert_hr(psdb_statement_encode(&st, NULL, &size), PSDB_E_INVALIDARG);
        ck_assert_msg(strstr(psdb_error_last(), bad[i].want), "case %zu: %s", i, psdb_error_last());
        ck_assert_hr(psdb_statement_sign(key, &st, sig), PSDB_E_INVALIDARG);
        ck_assert_hr(psdb_statement_verify(key, &st, sig), PSDB_E_INVALIDARG);
    }
    psdb_statement ok = sample();
    ok.identity.desc.name = "Caf\xc3\xa9 \xe3\x82\xb2\xe3\x83\xbc\xe3\x83\xa0 \xf0\x9f\x8e\xae";
    ok.target.family = "\xd9\x84\xd8\xb9\xd8\xa8\xd8\xa9-gfx";
    ck_assert_hr(psdb_statement_sign(key, &ok, sig), PSDB_S_OK);
    ck_assert_hr(psdb_statement_verify(key, &ok, sig), PSDB_S_OK);
    psdb_key_release(key);
}
END_TEST

START_TEST(test_sign__keygen_files_and_modes)
{
    char id[PSDB_KEY_ID_SIZE], id_pub[PSDB_KEY_ID_SIZE], id_priv[PSDB_KEY_ID_SIZE];
    char *path = tu_path(dir, "k"), *pub = tu_path(dir, "k.pub");
    ck_assert_hr(psdb_keygen(path, id), PSDB_S_OK);
    ck_assert_uint_eq(strlen(id), 64);
    struct stat sb;
    ck_assert_int_eq(stat(path, &sb), 0);
    ck_assert_uint_eq(sb.st_mode & 0777, 0600);
    ck_assert_int_eq(stat(pub, &sb), 0);
    psdb_key *priv = NULL, *pubk = NULL;
    ck_assert_hr(psdb_key_load(path, &priv), PSDB_S_OK);
    ck_assert_hr(psdb_key_load(pub, &pubk), PSDB_S_OK);
    ck_assert(psdb_key_is_private(priv));
    ck_assert(!psdb_key_is_private(pubk));
    ck_assert_hr(psdb_key_id(priv, id_priv), PSDB_S_OK);
    ck_assert_hr(psdb_key_id(pubk, id_pub), PSDB_S_OK);
    ck_assert_str_eq(id, id_priv);
    ck_assert_str_eq(id, id_pub);
    /* An existing key is never overwritten. */
    ck_assert_hr(psdb_keygen(path, NULL), PSDB_E_ALREADY_EXISTS);
    /* The public PEM round-trips through memory. */
    char pem[1024];
    size_t pem_size = sizeof(pem);
    ck_assert_hr(psdb_key_public_pem(priv, pem, &pem_size), PSDB_S_OK);
    psdb_key *again = NULL;
    ck_assert_hr(psdb_key_from_pem(pem, pem_size, &again), PSDB_S_OK);
    ck_assert_hr(psdb_key_id(again, id_pub), PSDB_S_OK);
    ck_assert_str_eq(id, id_pub);
    psdb_key_release(again);
    psdb_key_release(priv);
    psdb_key_release(pubk);
    psdb_key_release(NULL);
    free(path);
    free(pub);
}
END_TEST

START_TEST(test_sign__not_a_key)
{
    char *path = tu_path(dir, "junk");
    psdb_key *key = NULL;
    ck_assert_int_eq(tu_write_file(path, "hello\n", 6), 0);
    ck_assert_hr(psdb_key_load(path, &key), PSDB_E_SIGNATURE);
    ck_assert_ptr_null(key);
    free(path);
    path = tu_path(dir, "missing");
    ck_assert_hr(psdb_key_load(path, &key), PSDB_E_IO);
    free(path);
}
END_TEST

/* psdb_key_load_kind names the file and says what is wrong with it, for each kind of wrong. */
static void expect_refusal(const char *name, const char *content, size_t len, psdb_key_kind want,
                           psdb_hr hr, const char *why_part)
{
    char *path = tu_path(dir, name);
    char why[256];
    psdb_key *key = (psdb_key *)path; /* must come back NULL */
    if (content)
        ck_assert_int_eq(tu_write_file(path, content, len), 0);
    ck_assert_hr(psdb_key_load_kind(path, want, &key, why, sizeof(why)), hr);
    ck_assert_ptr_null(key);
    ck_assert_msg(strncmp(why, path, strlen(path)) == 0, "'%s' does not start with the path", why);
    ck_assert_msg(strstr(why, why_part) != NULL, "'%s' does not say '%s'", why, why_part);
    free(path);
}

START_TEST(test_sign__load_kind_explains_each_refusal)
{
    static const char x25519_pub[] =
        "-----BEGIN PUBLIC KEY-----\n"
        "MCowBQYDK2VuAyEA/Hv+Oo/rJqVuHFJFLA7NnbyZphqROFw+7s/mgaEkSEE=\n"
        "-----END PUBLIC KEY-----\n";
    static const char cert[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    char id[PSDB_KEY_ID_SIZE];
    psdb_key *key = make_key("k", id), *got = NULL;
    char *priv = tu_path(dir, "k"), *pub = tu_path(dir, "k.pub");
    size_t pem_len = 0;
    char *pem = tu_read_file(pub, &pem_len);
    char why[256];

    expect_refusal("missing", NULL, 0, PSDB_KEY_PUBLIC, PSDB_E_IO, "cannot open");
    expect_refusal("empty", "", 0, PSDB_KEY_PUBLIC, PSDB_E_SIGNATURE, "empty");
    expect_refusal("truncated", pem, 40, PSDB_KEY_PUBLIC, PSDB_E_SIGNATURE, "truncated");
    expect_refusal("garbage", "hello\n", 6, PSDB_KEY_ANY, PSDB_E_SIGNATURE, "not a PEM key");
    expect_refusal("x25519.pub", x25519_pub, sizeof(x25519_pub) - 1, PSDB_KEY_PUBLIC,
                   PSDB_E_SIGNATURE, "X25519");
    expect_refusal("cert.pem", cert, sizeof(cert) - 1, PSDB_KEY_PUBLIC, PSDB_E_SIGNATURE,
                   "'CERTIFICATE', not a key");
    /* The wrong half of a good pair. */
    ck_assert_hr(psdb_key_load_kind(priv, PSDB_KEY_PUBLIC, &got, why, sizeof(why)),
                 PSDB_E_SIGNATURE);
    ck_assert_ptr_nonnull(strstr(why, "a private key where a public key is expected"));
    ck_assert_hr(psdb_key_load_kind(pub, PSDB_KEY_PRIVATE, &got, why, sizeof(why)),
                 PSDB_E_SIGNATURE);
    ck_assert_ptr_nonnull(strstr(why, "a public key where the private key is expected"));
    /* The right halves load, and a client refuses a private key as a trusted key. */
    ck_assert_hr(psdb_key_load_kind(pub, PSDB_KEY_PUBLIC, &got, why, sizeof(why)), PSDB_S_OK);
    ck_assert_str_eq(why, "");
    psdb_key_release(got);
    ck_assert_hr(psdb_key_load_kind(priv, PSDB_KEY_PRIVATE, &got, NULL, 0), PSDB_S_OK);
    psdb_key_release(got);
    const char *trust[1] = {priv};
    psdb_client_desc cd = {
        .server_url = "http://127.0.0.1:9", .trusted_keys = trust, .num_trusted_keys = 1};
    psdb_client *c = NULL;
    ck_assert_hr(psdb_client_create(&cd, &c), PSDB_E_SIGNATURE);
    ck_assert_ptr_null(c);
    free(pem);
    free(priv);
    free(pub);
    psdb_key_release(key);
}
END_TEST

START_TEST(test_sign__sign_verify_roundtrip)
{
    char id[PSDB_KEY_ID_SIZE];
    psdb_key *key = make_key("k", id);
    psdb_statement st = sample();
    char sig[PSDB_SIGNATURE_B64_SIZE];
    ck_assert_hr(psdb_statement_sign(key, &st, sig), PSDB_S_OK);
    ck_assert_uint_eq(strlen(sig), 88);
    ck_assert_hr(psdb_statement_verify(key, &st, sig), PSDB_S_OK);
    char *pub = tu_path(dir, "k.pub");
    psdb_key *pubk = NULL;
    ck_assert_hr(psdb_key_load(pub, &pubk), PSDB_S_OK);
    ck_assert_hr(psdb_statement_verify(pubk, &st, sig), PSDB_S_OK);
    /* A public key cannot sign. */
    ck_assert_hr(psdb_statement_sign(pubk, &st, sig), PSDB_E_INVALIDARG);
    psdb_key_release(pubk);
    psdb_key_release(key);
    free(pub);
}
END_TEST

START_TEST(test_sign__tampered_fields_fail)
{
    char id[PSDB_KEY_ID_SIZE];
    psdb_key *key = make_key("k", id);
    psdb_statement st = sample();
    char sig[PSDB_SIGNATURE_B64_SIZE];
    ck_assert_hr(psdb_statement_sign(key, &st, sig), PSDB_S_OK);
    for (int field = 0; field < 13; field++) {
        psdb_statement t = sample();
        switch (field) {
        case 0:
            t.sha256[31] ^= 1;
            break;
        case 1:
            t.size++;
            break;
        case 2:
            t.identity.desc.exe_filename = "other.exe";
            break;
        case 3:
            t.identity.desc.name = "Gamf";
            break;
        case 4:
            t.identity.desc.version++;
            break;
        case 5:
            t.identity.desc.engine_name = "Engina";
            break;
        case 6:
            t.identity.desc.engine_version++;
            break;
        case 7:
            t.identity.app_id[0] ^= 0x80;
            break;
        case 8:
            t.target.family = "contoso-gfx8";
            break;
        case 9:
            t.target.abi_version++;
            break;
        case 10:
            t.target.compiler_version++;
            break;
        case 11:
            t.target.profile_version++;
            break;
        default:
            t.serial++;
            break;
        }
        ck_assert_msg(psdb_statement_verify(key, &t, sig) == PSDB_E_SIGNATURE,
                      "tampered field %d still verifies", field);
    }
    psdb_key_release(key);
}
END_TEST

START_TEST(test_sign__wrong_key_and_malformed_signature)
{
    char id1[PSDB_KEY_ID_SIZE], id2[PSDB_KEY_ID_SIZE];
    psdb_key *k1 = make_key("k1", id1), *k2 = make_key("k2", id2);
    ck_assert_str_ne(id1, id2);
    psdb_statement st = sample();
    char sig[PSDB_SIGNATURE_B64_SIZE];
    ck_assert_hr(psdb_statement_sign(k1, &st, sig), PSDB_S_OK);
    ck_assert_hr(psdb_statement_verify(k2, &st, sig), PSDB_E_SIGNATURE);
    char bad[PSDB_SIGNATURE_B64_SIZE + 1];
    memcpy(bad, sig, sizeof(sig));
    bad[0] = bad[0] == 'A' ? 'B' : 'A';
    ck_assert_hr(psdb_statement_verify(k1, &st, bad), PSDB_E_SIGNATURE);
    ck_assert_hr(psdb_statement_verify(k1, &st, ""), PSDB_E_SIGNATURE);
    ck_assert_hr(psdb_statement_verify(k1, &st, "not base64 at all!"), PSDB_E_SIGNATURE);
    /* The same bytes with the last significant character's unused bits set: another spelling. */
    memcpy(bad, sig, sizeof(sig));
    const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    int v = (int)(strchr(alphabet, bad[85]) - alphabet);
    bad[85] = alphabet[v | 1];
    if (v != (v | 1))
        ck_assert_hr(psdb_statement_verify(k1, &st, bad), PSDB_E_SIGNATURE);
    ck_assert_hr(psdb_statement_verify(NULL, &st, sig), PSDB_E_INVALIDARG);
    psdb_key_release(k1);
    psdb_key_release(k2);
}
END_TEST

/* Version 2 (schema/STATEMENT.md): its own domain and version, the version 1 fields in order, then
 * the source SODB's digest; a version 1 signature never verifies as version 2 and the reverse. */
START_TEST(test_sign__statement_v2_names_the_sodb)
{
    char id[PSDB_KEY_ID_SIZE];
    psdb_key *key = make_key("k", id);
    psdb_statement v1 = sample(), v2 = sample();
    uint8_t b1[1024], b2[1024];
    size_t n1 = sizeof(b1), n2 = sizeof(b2);
    char sig1[PSDB_SIGNATURE_B64_SIZE], sig2[PSDB_SIGNATURE_B64_SIZE];
    v2.has_sodb = 1;
    for (int i = 0; i < 32; i++)
        v2.sodb_sha256[i] = (uint8_t)(0x10 + i);
    ck_assert_hr(psdb_statement_encode(&v1, b1, &n1), PSDB_S_OK);
    ck_assert_hr(psdb_statement_encode(&v2, b2, &n2), PSDB_S_OK);
    ck_assert_uint_eq(n2, n1 + 32);
    ck_assert_mem_eq(b2, "psdb-statement-v2\0", 18);
    ck_assert_mem_eq(b2 + 18, "\x02\0\0\0", 4);
    ck_assert_mem_eq(b2 + 22, b1 + 22, n1 - 22); /* the version 1 fields, in the same order */
    ck_assert_mem_eq(b2 + n1, v2.sodb_sha256, 32);
    ck_assert_hr(psdb_statement_sign(key, &v1, sig1), PSDB_S_OK);
    ck_assert_hr(psdb_statement_sign(key, &v2, sig2), PSDB_S_OK);
    ck_assert_hr(psdb_statement_verify(key, &v2, sig2), PSDB_S_OK);
    ck_assert_hr(psdb_statement_verify(key, &v2, sig1), PSDB_E_SIGNATURE);
    ck_assert_hr(psdb_statement_verify(key, &v1, sig2), PSDB_E_SIGNATURE);
    /* Another source SODB is another statement. */
    v2.sodb_sha256[31] ^= 1;
    ck_assert_hr(psdb_statement_verify(key, &v2, sig2), PSDB_E_SIGNATURE);
    /* has_sodb zero: sodb_sha256 is not part of the statement. */
    v1.sodb_sha256[0] = 0xFF;
    ck_assert_hr(psdb_statement_verify(key, &v1, sig1), PSDB_S_OK);
    psdb_key_release(key);
}
END_TEST

/* The SODB statement: documented bytes, round trip, every field covered, and never mistaken for a
 * PSDB statement. */
START_TEST(test_sign__sodb_statement)
{
    char id[PSDB_KEY_ID_SIZE];
    psdb_key *key = make_key("k", id);
    psdb_statement p = sample();
    psdb_sodb_statement st = {.size = p.size, .identity = p.identity, .serial = 9};
    uint8_t buf[1024];
    size_t n = sizeof(buf), small;
    char sig[PSDB_SIGNATURE_B64_SIZE];
    memcpy(st.sha256, p.sha256, 32);
    ck_assert_hr(psdb_sodb_statement_encode(&st, NULL, &n), PSDB_S_OK);
    /* 23 domain + 4 version + 32 digest + 8 size + (4+8) exe + (4+4) name + 8 version
     * + (4+6) engine + 8 engine version + 16 app id + 8 serial */
    ck_assert_uint_eq(n, 23 + 4 + 32 + 8 + 12 + 8 + 8 + 10 + 8 + 16 + 8);
    small = n - 1;
    ck_assert_hr(psdb_sodb_statement_encode(&st, buf, &small), PSDB_E_MORE_DATA);
    ck_assert_hr(psdb_sodb_statement_encode(&st, buf, &n), PSDB_S_OK);
    ck_assert_mem_eq(buf, "psdb-sodb-statement-v1\0", 23);
    ck_assert_mem_eq(buf + 23, "\x01\0\0\0", 4);
    ck_assert_mem_eq(buf + 27, st.sha256, 32);
    ck_assert_mem_eq(buf + n - 8, "\x09\0\0\0\0\0\0\0", 8);
    ck_assert_hr(psdb_sodb_statement_sign(key, &st, sig), PSDB_S_OK);
    ck_assert_hr(psdb_sodb_statement_verify(key, &st, sig), PSDB_S_OK);
    for (int field = 0; field < 5; field++) {
        psdb_sodb_statement t = st;
        switch (field) {
        case 0:
            t.sha256[0] ^= 1;
            break;
        case 1:
            t.size++;
            break;
        case 2:
            t.identity.desc.version++;
            break;
        case 3:
            t.identity.app_id[15] ^= 1;
            break;
        default:
            t.serial++;
            break;
        }
        ck_assert_msg(psdb_sodb_statement_verify(key, &t, sig) == PSDB_E_SIGNATURE,
                      "tampered SODB statement field %d still verifies", field);
    }
    ck_assert_hr(psdb_sodb_statement_verify(NULL, &st, sig), PSDB_E_INVALIDARG);
    st.identity.desc.name = "";
    ck_assert_hr(psdb_sodb_statement_sign(key, &st, sig), PSDB_E_INVALIDARG);
    st.identity.desc.name = "Game\xe2\x80\xae"; /* U+202E: not a name */
    ck_assert_hr(psdb_sodb_statement_encode(&st, NULL, &n), PSDB_E_INVALIDARG);
    psdb_key_release(key);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sign");
    TCase *tc = tcase_create("sign");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_sign__encoding_is_documented_bytes);
    tcase_add_test(tc, test_sign__null_engine_encodes_as_empty);
    tcase_add_test(tc, test_sign__bad_statement_rejected);
    tcase_add_test(tc, test_sign__statement_refuses_names_that_spoof);
    tcase_add_test(tc, test_sign__keygen_files_and_modes);
    tcase_add_test(tc, test_sign__not_a_key);
    tcase_add_test(tc, test_sign__load_kind_explains_each_refusal);
    tcase_add_test(tc, test_sign__sign_verify_roundtrip);
    tcase_add_test(tc, test_sign__tampered_fields_fail);
    tcase_add_test(tc, test_sign__wrong_key_and_malformed_signature);
    tcase_add_test(tc, test_sign__statement_v2_names_the_sodb);
    tcase_add_test(tc, test_sign__sodb_statement);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
