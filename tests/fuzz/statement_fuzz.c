/* statement_fuzz.c - libFuzzer target for the signed statement (schema/STATEMENT.md, client/src/
 * sign.c). An input is a canonical statement byte string followed by the text of a base64
 * signature. The statement is read back by the strict reader below (the layout of STATEMENT.md,
 * every length bounds-checked); when it parses, these must hold or the target aborts:
 * - a statement the encoder must refuse (empty name or family, a string over
 *   PSDB_STATEMENT_STRING_MAX, a string that is not a name by psdb__name_check) is refused with
 *   PSDB_E_INVALIDARG by encode, sign and verify alike;
 * - otherwise psdb_statement_encode gives exactly the bytes read, and PSDB_E_MORE_DATA for a buffer
 *   one byte short;
 * - psdb_statement_verify with the fixed key answers S_OK or PSDB_E_SIGNATURE, the same for the
 *   public and the private half, and S_OK only for the one text psdb_statement_sign writes
 *   (Ed25519 is deterministic and only one base64 spelling is accepted), which always verifies. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_key.h"
#include "psdb/sign.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/parse.h"

#define DOMAIN_SIZE 18 /* "psdb-statement-v1" and its NUL */

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char domain[DOMAIN_SIZE] = "psdb-statement-v1";
    psdb__rd r = {.p = data, .len = size};
    psdb_statement st = {0};
    char *exe = NULL, *name = NULL, *engine = NULL, *family = NULL, *sig = NULL;
    size_t exe_len = 0, name_len = 0, engine_len = 0, family_len = 0;
    uint8_t *enc = NULL;
    char good[PSDB_SIGNATURE_B64_SIZE];

    const uint8_t *p = psdb__rd_bytes(&r, DOMAIN_SIZE);
    if (r.bad || memcmp(p, domain, DOMAIN_SIZE) != 0 || psdb__rd_u32(&r) != PSDB_STATEMENT_VERSION)
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
    if (!(family = read_str(&r, &family_len)))
        goto cleanup;
    st.target.abi_version = psdb__rd_u64(&r);
    st.target.compiler_version = psdb__rd_u64(&r);
    st.target.profile_version = psdb__rd_u64(&r);
    st.serial = psdb__rd_u64(&r);
    if (r.bad)
        goto cleanup;
    st.identity.desc.exe_filename = exe;
    st.identity.desc.name = name;
    st.identity.desc.engine_name = engine;
    st.target.family = family;

    /* The signature text is the rest of the input, read as the C string a manifest would hold. */
    sig = malloc(size - r.pos + 1);
    if (!sig)
        abort();
    memcpy(sig, data + r.pos, size - r.pos);
    sig[size - r.pos] = '\0';

    size_t n = 0;
    psdb_hr hr = psdb_statement_encode(&st, NULL, &n);
    int refused = name_len == 0 || family_len == 0 || exe_len > PSDB_STATEMENT_STRING_MAX ||
                  name_len > PSDB_STATEMENT_STRING_MAX || engine_len > PSDB_STATEMENT_STRING_MAX ||
                  family_len > PSDB_STATEMENT_STRING_MAX || psdb__name_check(exe, NULL, 0) ||
                  psdb__name_check(name, NULL, 0) || psdb__name_check(engine, NULL, 0) ||
                  psdb__name_check(family, NULL, 0);
    if (refused) {
        if (hr != PSDB_E_INVALIDARG || psdb_statement_sign(private_key, &st, good) != hr ||
            psdb_statement_verify(public_key, &st, sig) != hr)
            abort();
        goto cleanup;
    }
    if (hr != PSDB_S_OK || n != r.pos)
        abort();
    enc = malloc(n);
    if (!enc)
        abort();
    size_t short_size = n - 1;
    if (psdb_statement_encode(&st, enc, &short_size) != PSDB_E_MORE_DATA || short_size != n)
        abort();
    if (psdb_statement_encode(&st, enc, &n) != PSDB_S_OK || n != r.pos || memcmp(enc, data, n) != 0)
        abort();

    if (psdb_statement_sign(private_key, &st, good) != PSDB_S_OK ||
        psdb_statement_verify(public_key, &st, good) != PSDB_S_OK)
        abort();
    hr = psdb_statement_verify(public_key, &st, sig);
    if ((hr != PSDB_S_OK && hr != PSDB_E_SIGNATURE) ||
        psdb_statement_verify(private_key, &st, sig) != hr ||
        (hr == PSDB_S_OK && strcmp(sig, good) != 0))
        abort();
cleanup:
    free(enc);
    free(sig);
    free(exe);
    free(name);
    free(engine);
    free(family);
    return 0;
}
