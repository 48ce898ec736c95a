/* statement_fuzz.c - libFuzzer target for the signed statements (schema/STATEMENT.md, client/src/
 * format/sign.c): the PSDB statement version 1, version 2 (naming its source SODB) and the SODB
 * statement. An input is a canonical statement byte string (its domain separator says which)
 * followed by the text of a base64 signature. The statement is read back by the strict reader
 * below (the layout of STATEMENT.md, every length bounds-checked); when it parses, these must hold
 * or the target aborts:
 * - a statement the encoder must refuse (empty name, or family for a PSDB; a string over
 *   PSDB_STATEMENT_STRING_MAX; a string that is not a name by psdb__name_check) is refused with
 *   PSDB_E_INVALIDARG by encode, sign and verify alike;
 * - otherwise the kind's encode gives exactly the bytes read, and PSDB_E_MORE_DATA for a buffer one
 *   byte short;
 * - the kind's verify with the fixed key answers S_OK or PSDB_E_SIGNATURE, the same for the public
 *   and the private half, and S_OK only for the one text its sign writes (Ed25519 is
 *   deterministic and only one base64 spelling is accepted), which always verifies;
 * - a signature of one kind never verifies as another kind's over the same fields (the domains
 *   keep them apart): a version 2 statement's signature is refused as version 1's, and the
 *   reverse. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_key.h"
#include "psdb/sign.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/parse.h"

/* The domains and their NULs (schema/STATEMENT.md). */
static const char domain_v1[] = "psdb-statement-v1";
static const char domain_v2[] = "psdb-statement-v2";
static const char domain_sodb[] = "psdb-sodb-statement-v1";

enum kind { KIND_V1, KIND_V2, KIND_SODB };

static psdb_key *public_key;
static psdb_key *private_key;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (PSDB_FAILED(psdb_key_from_pem(psdb_fuzz_public_pem, sizeof(psdb_fuzz_public_pem) - 1,
                                      &public_key)) ||
        PSDB_FAILED(psdb_key_from_pem(psdb_fuzz_private_pem, sizeof(psdb_fuzz_private_pem) - 1,
                                      &private_key)))
        abort();
    return 0;
}

/* A length-prefixed string as a NUL-terminated copy; NULL when it is cut short or holds a NUL
 * byte (a C string cannot carry one, so no statement of the API encodes to such bytes). */
static char *read_str(psdb__rd *r, size_t *len)
{
    uint32_t n = psdb__rd_u32(r);
    const uint8_t *p = r->bad ? NULL : psdb__rd_bytes(r, n);
    char *s = NULL;
    if (r->bad || (n > 0 && (!p || memchr(p, 0, n))))
        return NULL;
    s = malloc((size_t)n + 1);
    if (!s)
        abort();
    if (n > 0)
        memcpy(s, p, n);
    s[n] = '\0';
    *len = n;
    return s;
}

/* The kind of statement the input's domain names; -1 for none (the reader then consumes it). */
static int read_domain(psdb__rd *r)
{
    const struct {
        const char *text;
        size_t size;
        int kind;
    } domains[] = {{domain_v1, sizeof(domain_v1), KIND_V1},
                   {domain_v2, sizeof(domain_v2), KIND_V2},
                   {domain_sodb, sizeof(domain_sodb), KIND_SODB}};
    for (size_t i = 0; i < sizeof(domains) / sizeof(domains[0]); i++)
        if (r->len - r->pos >= domains[i].size &&
            memcmp(r->p + r->pos, domains[i].text, domains[i].size) == 0) {
            psdb__rd_bytes(r, domains[i].size);
            return domains[i].kind;
        }
    return -1;
}

/* The kind's encode, sign and verify over st (a PSDB statement) or sodb. */
static psdb_hr encode(int kind, const psdb_statement *st, const psdb_sodb_statement *sodb,
                      void *buf, size_t *n)
{
    return kind == KIND_SODB ? psdb_sodb_statement_encode(sodb, buf, n)
                             : psdb_statement_encode(st, buf, n);
}

static psdb_hr sign(int kind, const psdb_statement *st, const psdb_sodb_statement *sodb,
                    char out[PSDB_SIGNATURE_B64_SIZE])
{
    return kind == KIND_SODB ? psdb_sodb_statement_sign(private_key, sodb, out)
                             : psdb_statement_sign(private_key, st, out);
}

static psdb_hr verify(int kind, const psdb_key *key, const psdb_statement *st,
                      const psdb_sodb_statement *sodb, const char *sig)
{
    return kind == KIND_SODB ? psdb_sodb_statement_verify(key, sodb, sig)
                             : psdb_statement_verify(key, st, sig);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    psdb__rd r = {.p = data, .len = size};
    psdb_statement st = {0};
    psdb_sodb_statement sodb = {0};
    char *exe = NULL, *name = NULL, *engine = NULL, *family = NULL, *sig = NULL;
    size_t exe_len = 0, name_len = 0, engine_len = 0, family_len = 0;
    uint8_t *enc = NULL;
    char good[PSDB_SIGNATURE_B64_SIZE];
    int kind = read_domain(&r);
    const uint32_t versions[] = {PSDB_STATEMENT_VERSION, PSDB_STATEMENT_VERSION_SODB,
                                 PSDB_SODB_STATEMENT_VERSION};
    const uint8_t *p;

    if (kind < 0 || psdb__rd_u32(&r) != versions[kind])
        goto cleanup;
    p = psdb__rd_bytes(&r, 32);
    if (r.bad)
        goto cleanup;
    memcpy(st.sha256, p, 32);
    st.size = psdb__rd_u64(&r);
    if (!(exe = read_str(&r, &exe_len)) || !(name = read_str(&r, &name_len)))
        goto cleanup;
    st.identity.desc.version = psdb__rd_u64(&r);
    if (!(engine = read_str(&r, &engine_len)))
        goto cleanup;
    st.identity.desc.engine_version = psdb__rd_u64(&r);
    p = psdb__rd_bytes(&r, 16);
    if (r.bad)
        goto cleanup;
    memcpy(st.identity.app_id, p, 16);
    if (kind != KIND_SODB) {
        if (!(family = read_str(&r, &family_len)))
            goto cleanup;
        st.target.abi_version = psdb__rd_u64(&r);
        st.target.compiler_version = psdb__rd_u64(&r);
        st.target.profile_version = psdb__rd_u64(&r);
    }
    st.serial = psdb__rd_u64(&r);
    if (kind == KIND_V2) {
        p = psdb__rd_bytes(&r, 32);
        if (r.bad)
            goto cleanup;
        memcpy(st.sodb_sha256, p, 32);
        st.has_sodb = 1;
    }
    if (r.bad)
        goto cleanup;
    st.identity.desc.exe_filename = exe;
    st.identity.desc.name = name;
    st.identity.desc.engine_name = engine;
    st.target.family = family;
    memcpy(sodb.sha256, st.sha256, 32);
    sodb.size = st.size;
    sodb.identity = st.identity;
    sodb.serial = st.serial;

    /* The signature text is the rest of the input, read as the C string a manifest would hold. */
    sig = malloc(size - r.pos + 1);
    if (!sig)
        abort();
    memcpy(sig, data + r.pos, size - r.pos);
    sig[size - r.pos] = '\0';

    size_t n = 0;
    psdb_hr hr = encode(kind, &st, &sodb, NULL, &n);
    int refused =
        name_len == 0 || exe_len > PSDB_STATEMENT_STRING_MAX ||
        name_len > PSDB_STATEMENT_STRING_MAX || engine_len > PSDB_STATEMENT_STRING_MAX ||
        psdb__name_check(exe, NULL, 0) || psdb__name_check(name, NULL, 0) ||
        psdb__name_check(engine, NULL, 0) ||
        (kind != KIND_SODB && (family_len == 0 || family_len > PSDB_STATEMENT_STRING_MAX ||
                               psdb__name_check(family, NULL, 0)));
    if (refused) {
        if (hr != PSDB_E_INVALIDARG || sign(kind, &st, &sodb, good) != hr ||
            verify(kind, public_key, &st, &sodb, sig) != hr)
            abort();
        goto cleanup;
    }
    if (hr != PSDB_S_OK || n != r.pos)
        abort();
    enc = malloc(n);
    if (!enc)
        abort();
    size_t short_size = n - 1;
    if (encode(kind, &st, &sodb, enc, &short_size) != PSDB_E_MORE_DATA || short_size != n)
        abort();
    if (encode(kind, &st, &sodb, enc, &n) != PSDB_S_OK || n != r.pos || memcmp(enc, data, n) != 0)
        abort();

    if (sign(kind, &st, &sodb, good) != PSDB_S_OK ||
        verify(kind, public_key, &st, &sodb, good) != PSDB_S_OK)
        abort();
    hr = verify(kind, public_key, &st, &sodb, sig);
    if ((hr != PSDB_S_OK && hr != PSDB_E_SIGNATURE) ||
        verify(kind, private_key, &st, &sodb, sig) != hr ||
        (hr == PSDB_S_OK && strcmp(sig, good) != 0))
        abort();
    if (kind != KIND_SODB) {
        /* The same fields under the other PSDB version: the signature of one never verifies as
         * the other's. */
        st.has_sodb = !st.has_sodb;
        if (psdb_statement_verify(public_key, &st, good) != PSDB_E_SIGNATURE)
            abort();
    }
cleanup:
    free(enc);
    free(sig);
    free(exe);
    free(name);
    free(engine);
    free(family);
    return 0;
}
