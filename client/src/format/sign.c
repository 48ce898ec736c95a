/* sign.c - the signed statements of a published PSDB (versions 1 and 2) and of a published SODB,
 * and Ed25519 keys (OpenSSL EVP_PKEY). */
#include "psdb/sign.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "common/buf.h"
#include "common/hash.h"
#include "common/parse.h"
#include "common/status_map.h"
#include "common/error.h"

/* schema/STATEMENT.md: the domain separator keeps a statement signature from ever verifying as a
 * signature over some other message made with the same key. */
static const char statement_domain[] = "psdb-statement-v1"; /* followed by its NUL on the wire */
static const char statement_v2_domain[] = "psdb-statement-v2";
static const char sodb_statement_domain[] = "psdb-sodb-statement-v1";

struct psdb_key {
    EVP_PKEY *pkey;
    int is_private;
};

/* A name of the statement: at most PSDB_STATEMENT_STRING_MAX bytes and, since a signature makes
 * it what launchers and dashboards show as the publisher's word, a name by the one rule
 * (psdb__name_check): no control, format or separator character that could make it read as
 * another name. */
static psdb_hr put_str(psdb__buf *b, const char *field, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    char why[128];
    if (n > PSDB_STATEMENT_STRING_MAX)
        return psdb__error_set(PSDB_E_INVALIDARG,
                               "signed statement: the %s is longer than %u bytes", field,
                               PSDB_STATEMENT_STRING_MAX);
    if (psdb__name_check(s, why, sizeof(why)) != 0)
        return psdb__error_set(PSDB_E_INVALIDARG, "signed statement: the %s %s", field, why);
    psdb__buf_u32(b, (uint32_t)n);
    psdb__buf_append(b, s, n);
    return PSDB_S_OK;
}

/* The application identity, as both kinds of statement carry it. */
static psdb_hr put_identity(psdb__buf *b, const psdb_app_identity *id)
{
    psdb_hr hr = PSDB_S_OK;
    const psdb_app_desc *d = &id->desc;
    if ((hr = put_str(b, "exe filename", d->exe_filename)) < 0 ||
        (hr = put_str(b, "application name", d->name)) < 0)
        return hr;
    psdb__buf_u64(b, d->version);
    if ((hr = put_str(b, "engine name", d->engine_name)) < 0)
        return hr;
    psdb__buf_u64(b, d->engine_version);
    psdb__buf_append(b, id->app_id, 16);
    return hr;
}

static psdb_hr encode(const psdb_statement *st, psdb__buf *b)
{
    psdb_hr hr = PSDB_S_OK;
    const psdb_app_desc *d = &st->identity.desc;
    if (!d->name || !*d->name || !st->target.family || !*st->target.family) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "signed statement: no application name or no target family");
        goto cleanup;
    }
    /* Version 2 has its own domain: a version 1 signature never verifies as a version 2 one of
     * the same fields, and the reverse. */
    if (st->has_sodb) {
        psdb__buf_append(b, statement_v2_domain, sizeof(statement_v2_domain));
        psdb__buf_u32(b, PSDB_STATEMENT_VERSION_SODB);
    } else {
        psdb__buf_append(b, statement_domain, sizeof(statement_domain));
        psdb__buf_u32(b, PSDB_STATEMENT_VERSION);
    }
    psdb__buf_append(b, st->sha256, 32);
    psdb__buf_u64(b, st->size);
    if ((hr = put_identity(b, &st->identity)) < 0)
        goto cleanup;
    if ((hr = put_str(b, "family", st->target.family)) < 0)
        goto cleanup;
    psdb__buf_u64(b, st->target.abi_version);
    psdb__buf_u64(b, st->target.compiler_version);
    psdb__buf_u64(b, st->target.profile_version);
    psdb__buf_u64(b, st->serial);
    if (st->has_sodb)
        psdb__buf_append(b, st->sodb_sha256, 32);
    hr = psdb__buf_status(b);
cleanup:
    return hr;
}

static psdb_hr encode_sodb(const psdb_sodb_statement *st, psdb__buf *b)
{
    psdb_hr hr = PSDB_S_OK;
    if (!st->identity.desc.name || !*st->identity.desc.name) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "signed SODB statement: no application name");
        goto cleanup;
    }
    psdb__buf_append(b, sodb_statement_domain, sizeof(sodb_statement_domain));
    psdb__buf_u32(b, PSDB_SODB_STATEMENT_VERSION);
    psdb__buf_append(b, st->sha256, 32);
    psdb__buf_u64(b, st->size);
    if ((hr = put_identity(b, &st->identity)) < 0)
        goto cleanup;
    psdb__buf_u64(b, st->serial);
    hr = psdb__buf_status(b);
cleanup:
    return hr;
}

/* The encoded bytes into the caller's buffer, by the encode functions' size rule. */
static psdb_hr copy_out(const psdb__buf *b, void *buf, size_t *size)
{
    psdb_hr hr = PSDB_S_OK;
    if (buf && *size < b->len)
        hr = PSDB_E_MORE_DATA;
    else if (buf)
        memcpy(buf, b->data, b->len);
    *size = b->len;
    return hr;
}

psdb_hr psdb_statement_encode(const psdb_statement *st, void *buf, size_t *size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb__buf b = {0};
    psdb_hr hr = PSDB_S_OK;
    if (!st || !size) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_statement_encode: NULL st or size");
        goto cleanup;
    }
    if ((hr = encode(st, &b)) < 0)
        goto cleanup;
    hr = copy_out(&b, buf, size);
cleanup:
    psdb__buf_free(&b);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_sodb_statement_encode(const psdb_sodb_statement *st, void *buf, size_t *size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb__buf b = {0};
    psdb_hr hr = PSDB_S_OK;
    if (!st || !size) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_sodb_statement_encode: NULL st or size");
        goto cleanup;
    }
    if ((hr = encode_sodb(st, &b)) < 0)
        goto cleanup;
    hr = copy_out(&b, buf, size);
cleanup:
    psdb__buf_free(&b);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* Writes a PEM file with O_EXCL so an existing key is never replaced. */
static psdb_hr write_pem(const char *path, mode_t mode, EVP_PKEY *pkey, int private_half)
{
    psdb_hr hr = PSDB_S_OK;
    FILE *f = NULL;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        hr = psdb__errno_is(errno, PSDB__ERRNO_EXISTS) ? PSDB_E_ALREADY_EXISTS : PSDB_E_IO;
        goto cleanup;
    }
    f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        hr = PSDB_E_IO;
        goto cleanup;
    }
    int ok = private_half ? PEM_write_PrivateKey(f, pkey, NULL, NULL, 0, NULL, NULL)
                          : PEM_write_PUBKEY(f, pkey);
    if (!ok || fflush(f) != 0 || fsync(fileno(f)) != 0)
        hr = PSDB_E_IO;
cleanup:
    if (f && fclose(f) != 0 && hr >= 0)
        hr = PSDB_E_IO;
    return hr;
}

static psdb_hr raw_public(const EVP_PKEY *pkey, uint8_t raw[32])
{
    size_t n = 32;
    if (EVP_PKEY_get_raw_public_key(pkey, raw, &n) != 1 || n != 32)
        return PSDB_E_FAIL;
    return PSDB_S_OK;
}

static psdb_hr key_id_of(const EVP_PKEY *pkey, char out[PSDB_KEY_ID_SIZE])
{
    uint8_t raw[32], digest[32];
    psdb_hr hr = raw_public(pkey, raw);
    if (hr < 0)
        return hr;
    psdb__sha256(raw, sizeof(raw), digest);
    psdb__hex(digest, sizeof(digest), out);
    return PSDB_S_OK;
}

psdb_hr psdb_keygen(const char *keyfile, char key_id[PSDB_KEY_ID_SIZE])
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    EVP_PKEY *pkey = NULL;
    char *pub_path = NULL;
    int wrote_private = 0;
    if (!keyfile || !*keyfile) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_keygen: NULL or empty key file path");
        goto cleanup;
    }
    if (asprintf(&pub_path, "%s.pub", keyfile) < 0) {
        pub_path = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* Refuse before writing anything when the .pub is already there. */
    if (access(pub_path, F_OK) == 0) {
        hr = PSDB_E_ALREADY_EXISTS;
        goto cleanup;
    }
    pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    if (!pkey) {
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    if ((hr = write_pem(keyfile, 0600, pkey, 1)) < 0)
        goto cleanup;
    wrote_private = 1;
    if ((hr = write_pem(pub_path, 0644, pkey, 0)) < 0)
        goto cleanup;
    if (key_id)
        hr = key_id_of(pkey, key_id);
cleanup:
    if (hr < 0 && wrote_private) {
        unlink(keyfile);
        if (pub_path)
            unlink(pub_path);
    }
    EVP_PKEY_free(pkey);
    free(pub_path);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* An encrypted private key must not make OpenSSL prompt for a passphrase on the terminal (its
 * default callback does): psdb keys are never encrypted, so no passphrase is ever given. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return -1;
}

static void set_why(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The explanation goes to the caller's buffer when there is one, and always to the thread's last
 * error (psdb_error_last), so psdb_key_load, which passes no buffer, says why too. */
static void set_why(char *why, size_t why_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    psdb__error_setv(PSDB_E_FAIL, fmt, ap);
    va_end(ap);
    if (why && why_size)
        snprintf(why, why_size, "%s", psdb_error_last());
}

/* The label of the first "-----BEGIN <label>-----" line, into label (NUL-terminated); 0 when
 * there is none, -1 when it is there but the text ends before its "-----END " line. */
static int pem_label(const char *pem, size_t len, char *label, size_t label_size)
{
    static const char begin[] = "-----BEGIN ", end[] = "-----END ";
    const char *b = memmem(pem, len, begin, sizeof(begin) - 1);
    label[0] = '\0';
    if (!b)
        return 0;
    const char *l = b + sizeof(begin) - 1;
    size_t rest = len - (size_t)(l - pem), k = 0;
    while (k < rest && k + 1 < label_size && l[k] != '-' && l[k] != '\n' &&
           (unsigned char)l[k] >= 0x20 && (unsigned char)l[k] < 0x7f) {
        label[k] = l[k];
        k++;
    }
    label[k] = '\0';
    return memmem(l, rest, end, sizeof(end) - 1) ? 1 : -1;
}

/* Parses PEM text as an Ed25519 key of the kind wanted; `name` (the file, or "PEM text") starts
 * the explanation of a refusal. */
static psdb_hr key_parse(const char *name, const char *pem, size_t len, psdb_key_kind want,
                         psdb_key **out, char *why, size_t why_size)
{
    psdb_hr hr = PSDB_E_SIGNATURE;
    BIO *bio = NULL;
    EVP_PKEY *pkey = NULL;
    psdb_key *key = NULL;
    int is_private = 0;
    char label[48];

    if (len == 0) {
        set_why(why, why_size, "%s: empty, not a key", name);
        goto cleanup;
    }
    int framed = pem_label(pem, len, label, sizeof(label));
    if (framed == 0) {
        set_why(why, why_size, "%s: not a PEM key (no -----BEGIN line)", name);
        goto cleanup;
    }
    if (framed < 0) {
        set_why(why, why_size, "%s: truncated (its PEM '%s' has no -----END line)", name, label);
        goto cleanup;
    }
    if (strcmp(label, "ENCRYPTED PRIVATE KEY") == 0) {
        set_why(why, why_size,
                "%s: an encrypted private key; psdb keys are unencrypted (psdb keygen)", name);
        goto cleanup;
    }
    bio = BIO_new_mem_buf(pem, (int)len);
    if (!bio) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* Private keys are tried first; a public PEM makes that fail, then the same bytes are read
     * again as a public key. */
    pkey = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
    if (pkey) {
        is_private = 1;
    } else {
        BIO_free(bio);
        bio = BIO_new_mem_buf(pem, (int)len);
        if (!bio) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        pkey = PEM_read_bio_PUBKEY(bio, NULL, no_passphrase, NULL);
    }
    if (!pkey) {
        if (strstr(label, "KEY"))
            set_why(why, why_size, "%s: damaged (its PEM '%s' does not decode as a key)", name,
                    label);
        else
            set_why(why, why_size, "%s: a PEM '%s', not a key", name, label);
        goto cleanup;
    }
    if (!EVP_PKEY_is_a(pkey, "ED25519")) {
        const char *type = EVP_PKEY_get0_type_name(pkey);
        set_why(why, why_size, "%s: %s %s key; psdb keys are Ed25519", name,
                is_private ? "a private" : "a public", type ? type : "non-Ed25519");
        goto cleanup;
    }
    if (want == PSDB_KEY_PUBLIC && is_private) {
        set_why(why, why_size,
                "%s: a private key where a public key is expected (give the .pub file psdb "
                "keygen wrote beside it; the private key stays with the publisher)",
                name);
        goto cleanup;
    }
    if (want == PSDB_KEY_PRIVATE && !is_private) {
        set_why(why, why_size,
                "%s: a public key where the private key is expected (the file psdb keygen -o "
                "wrote, not its .pub)",
                name);
        goto cleanup;
    }
    key = calloc(1, sizeof(*key));
    if (!key) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    key->pkey = pkey;
    key->is_private = is_private;
    pkey = NULL;
    *out = key;
    hr = PSDB_S_OK;
cleanup:
    if (hr == PSDB_E_OUTOFMEMORY)
        set_why(why, why_size, "%s: out of memory", name);
    if (hr < 0)
        ERR_clear_error(); /* a failed parse must not leave errors for the caller's next call */
    EVP_PKEY_free(pkey);
    BIO_free(bio);
    return hr;
}

psdb_hr psdb_key_from_pem(const char *pem, size_t len, psdb_key **out)
{
    const unsigned err_mark = psdb__error_mark();
    if (!pem || !out || len > INT32_MAX)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, __func__);
    *out = NULL;
    return psdb__error_ret(key_parse("PEM text", pem, len, PSDB_KEY_ANY, out, NULL, 0), err_mark,
                           __func__);
}

psdb_hr psdb_key_load_kind(const char *path, psdb_key_kind want, psdb_key **out, char *why,
                           size_t why_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    FILE *f = NULL;
    char buf[16384];
    size_t n = 0;
    if (why && why_size)
        why[0] = '\0';
    if (!path || !out ||
        (want != PSDB_KEY_ANY && want != PSDB_KEY_PUBLIC && want != PSDB_KEY_PRIVATE)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_key_load_kind: NULL path or out, or an unknown key kind");
        set_why(why, why_size, "key: no file named");
        goto cleanup;
    }
    *out = NULL;
    f = fopen(path, "rb");
    if (!f) {
        hr = psdb__errno_hr(errno);
        set_why(why, why_size, "%s: cannot open: %s", path, strerror(errno));
        goto cleanup;
    }
    n = fread(buf, 1, sizeof(buf), f);
    if (ferror(f)) {
        hr = PSDB_E_IO;
        set_why(why, why_size, "%s: cannot read: %s", path, strerror(errno));
        goto cleanup;
    }
    if (n == sizeof(buf)) { /* far larger than any Ed25519 PEM */
        hr = PSDB_E_SIGNATURE;
        set_why(why, why_size, "%s: larger than %zu bytes, not a key file", path, sizeof(buf) - 1);
        goto cleanup;
    }
    hr = key_parse(path, buf, n, want, out, why, why_size);
cleanup:
    if (f)
        fclose(f);
    OPENSSL_cleanse(buf, sizeof(buf));
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_key_load(const char *path, psdb_key **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = psdb_key_load_kind(path, PSDB_KEY_ANY, out, NULL, 0);
    /* psdb_key_load has always said PSDB_E_IO for any file it cannot open. */
    return psdb__error_ret(hr == PSDB_E_ACCESS ? PSDB_E_IO : hr, err_mark, __func__);
}

psdb_hr psdb_key_public_pem(const psdb_key *key, char *buf, size_t *size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    BIO *bio = NULL;
    char *mem = NULL;
    if (!key || !size) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_key_public_pem: NULL key or size");
        goto cleanup;
    }
    bio = BIO_new(BIO_s_mem());
    if (!bio) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (!PEM_write_bio_PUBKEY(bio, key->pkey)) {
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    long len = BIO_get_mem_data(bio, &mem);
    if (len < 0) {
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    if (!buf || *size < (size_t)len + 1) {
        hr = psdb__error_const(PSDB_E_MORE_DATA,
                               "psdb_key_public_pem: the buffer is smaller than the PEM text");
    } else {
        memcpy(buf, mem, (size_t)len);
        buf[len] = '\0';
    }
    *size = (size_t)len;
cleanup:
    BIO_free(bio);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_key_id(const psdb_key *key, char out[PSDB_KEY_ID_SIZE])
{
    const unsigned err_mark = psdb__error_mark();
    if (!key || !out)
        return psdb__error_ret(PSDB_E_INVALIDARG, err_mark, __func__);
    return psdb__error_ret(key_id_of(key->pkey, out), err_mark, __func__);
}

int psdb_key_is_private(const psdb_key *key)
{
    return key && key->is_private;
}

/* Signs an encoded message with a private key into the base64 of its signature. */
static psdb_hr sign_message(const psdb_key *key, const psdb__buf *msg,
                            char out[PSDB_SIGNATURE_B64_SIZE])
{
    psdb_hr hr = PSDB_S_OK;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t sig[64];
    size_t sig_len = sizeof(sig);
    if (!ctx) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* Ed25519 is one-shot: no digest is named, the whole message goes to DigestSign. */
    if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, key->pkey) != 1 ||
        EVP_DigestSign(ctx, sig, &sig_len, msg->data, msg->len) != 1 || sig_len != 64) {
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    if (EVP_EncodeBlock((unsigned char *)out, sig, 64) != 88)
        hr = PSDB_E_FAIL;
cleanup:
    EVP_MD_CTX_free(ctx);
    return hr;
}

psdb_hr psdb_statement_sign(const psdb_key *key, const psdb_statement *st,
                            char out[PSDB_SIGNATURE_B64_SIZE])
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__buf msg = {0};
    if (!key || !st || !out || !key->is_private) {
        hr =
            psdb__error_const(PSDB_E_INVALIDARG, "psdb_statement_sign: NULL key, statement or out, "
                                                 "or a public key (signing needs the private one)");
        goto cleanup;
    }
    if ((hr = encode(st, &msg)) < 0)
        goto cleanup;
    hr = sign_message(key, &msg, out);
cleanup:
    psdb__buf_free(&msg);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_sodb_statement_sign(const psdb_key *key, const psdb_sodb_statement *st,
                                 char out[PSDB_SIGNATURE_B64_SIZE])
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__buf msg = {0};
    if (!key || !st || !out || !key->is_private) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_sodb_statement_sign: NULL key, statement or out, or a public "
                               "key (signing needs the private one)");
        goto cleanup;
    }
    if ((hr = encode_sodb(st, &msg)) < 0)
        goto cleanup;
    hr = sign_message(key, &msg, out);
cleanup:
    psdb__buf_free(&msg);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* Decodes exactly the spelling psdb_statement_sign writes: 88 characters, "==" padding, and a
 * re-encoding that gives the same text (so no two spellings of one signature are accepted). */
static int decode_signature(const char *b64, uint8_t sig[64])
{
    uint8_t tmp[66];
    char again[PSDB_SIGNATURE_B64_SIZE];
    if (strlen(b64) != 88 || b64[86] != '=' || b64[87] != '=')
        return -1;
    if (EVP_DecodeBlock(tmp, (const unsigned char *)b64, 88) != 66)
        return -1;
    memcpy(sig, tmp, 64);
    if (EVP_EncodeBlock((unsigned char *)again, sig, 64) != 88 || memcmp(again, b64, 88) != 0)
        return -1;
    return 0;
}

/* Verifies a base64 signature over an encoded message; `fn` names the public function. */
static psdb_hr verify_message(const psdb_key *key, const psdb__buf *msg, const char *signature_b64,
                              const char *fn)
{
    psdb_hr hr = PSDB_S_OK;
    EVP_MD_CTX *ctx = NULL;
    uint8_t sig[64];
    if (decode_signature(signature_b64, sig) != 0) {
        hr = psdb__error_set(PSDB_E_SIGNATURE,
                             "%s: the signature is not a canonical base64 Ed25519 signature", fn);
        goto cleanup;
    }
    ctx = EVP_MD_CTX_new();
    if (!ctx) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, key->pkey) != 1) {
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    if (EVP_DigestVerify(ctx, sig, sizeof(sig), msg->data, msg->len) != 1) {
        ERR_clear_error();
        hr = psdb__error_set(PSDB_E_SIGNATURE,
                             "%s: the signature does not match the statement and key", fn);
    }
cleanup:
    EVP_MD_CTX_free(ctx);
    return hr;
}

psdb_hr psdb_statement_verify(const psdb_key *key, const psdb_statement *st,
                              const char *signature_b64)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__buf msg = {0};
    if (!key || !st || !signature_b64) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_statement_verify: NULL key, st or signature_b64");
        goto cleanup;
    }
    if ((hr = encode(st, &msg)) < 0)
        goto cleanup;
    hr = verify_message(key, &msg, signature_b64, __func__);
cleanup:
    psdb__buf_free(&msg);
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_sodb_statement_verify(const psdb_key *key, const psdb_sodb_statement *st,
                                   const char *signature_b64)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__buf msg = {0};
    if (!key || !st || !signature_b64) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_sodb_statement_verify: NULL key, st or signature_b64");
        goto cleanup;
    }
    if ((hr = encode_sodb(st, &msg)) < 0)
        goto cleanup;
    hr = verify_message(key, &msg, signature_b64, __func__);
cleanup:
    psdb__buf_free(&msg);
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_key_release(psdb_key *key)
{
    if (!key)
        return;
    EVP_PKEY_free(key->pkey);
    free(key);
}
