/* psdb/sign.h - the signed statements of a published PSDB and of a published SODB
 * (schema/STATEMENT.md) and Ed25519 keys.
 *
 * The trust chain of the compile farm: a studio signs its SODB (psdb_sodb_statement, with a
 * publisher key); a compiler signs each PSDB built from it with a version 2 statement naming the
 * SODB's SHA-256 (psdb_statement with has_sodb set); a launcher trusts the studio's and the
 * compilers' keys. A PSDB built without a source SODB keeps the version 1 statement. */
#ifndef PSDB_SIGN_H
#define PSDB_SIGN_H

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a publisher vouches for: one PSDB's bytes (digest and size), the application it was built
 * for, its target and the publisher-chosen serial; with has_sodb non-zero also the SODB it was
 * compiled from (the version 2 statement; has_sodb zero: version 1, sodb_sha256 ignored). Strings
 * are borrowed. A NULL exe_filename or engine_name is encoded like an empty string. A statement
 * zero-initialised apart from the version 1 fields is a version 1 statement. */
typedef struct psdb_statement {
    uint8_t sha256[32]; /* SHA-256 of the whole PSDB file */
    uint64_t size;      /* size of the PSDB file in bytes */
    psdb_app_identity identity;
    psdb_target target;
    uint64_t serial;
    int has_sodb;            /* non-zero: version 2, naming sodb_sha256 */
    uint8_t sodb_sha256[32]; /* SHA-256 of the SODB file the PSDB was compiled from */
} psdb_statement;

/* Versions of the canonical encoding written by psdb_statement_encode: 1 without a source SODB,
 * 2 with one (has_sodb). */
#define PSDB_STATEMENT_VERSION 1u
#define PSDB_STATEMENT_VERSION_SODB 2u

/* What a studio vouches for when it publishes an SODB: its bytes (digest and size), the
 * application it records and the publisher-chosen serial. Strings are borrowed, encoded as in
 * psdb_statement (schema/STATEMENT.md, SODB statement). */
typedef struct psdb_sodb_statement {
    uint8_t sha256[32]; /* SHA-256 of the whole SODB file */
    uint64_t size;      /* size of the SODB file in bytes */
    psdb_app_identity identity;
    uint64_t serial;
} psdb_sodb_statement;
/* Version of the canonical encoding written by psdb_sodb_statement_encode. */
#define PSDB_SODB_STATEMENT_VERSION 1u
/* Longest string field accepted in a statement, in bytes. */
#define PSDB_STATEMENT_STRING_MAX 4096u
/* Buffer sizes, NUL included: a signature in base64 and a key id in lowercase hex. */
#define PSDB_SIGNATURE_B64_SIZE 89u
#define PSDB_KEY_ID_SIZE 65u

/* An Ed25519 key: a private key (it can sign and verify) or a public key (it can verify).
 * Thread safety: every function in this header is thread-safe, and one psdb_key may be used by
 * several threads at once (it is never modified after loading); only psdb_key_release must not
 * race with other uses of the same key. */
typedef struct psdb_key psdb_key;

/* Writes the canonical byte string of `st` (schema/STATEMENT.md) into buf. *size in is the
 * capacity of buf and receives the length needed. buf NULL: S_OK with the length only; buf too
 * small: PSDB_E_MORE_DATA. PSDB_E_INVALIDARG: st or size NULL, name or family NULL or empty, a
 * string longer than PSDB_STATEMENT_STRING_MAX, or a string that is not a name by psdb's rule for
 * names (schema/STATEMENT.md: well-formed UTF-8 without control characters, Unicode format
 * characters such as U+202E, or separators other than U+0020; psdb_error_last names the field
 * and the code point). Thread-safe. */
PSDB_API psdb_hr psdb_statement_encode(const psdb_statement *st, void *buf, size_t *size);

/* Creates a new Ed25519 key pair and writes the private key to `keyfile` (PKCS#8 PEM, mode 0600)
 * and the public key to `keyfile`.pub (SubjectPublicKeyInfo PEM, mode 0644). Neither file may
 * exist yet: PSDB_E_ALREADY_EXISTS otherwise (nothing is overwritten). PSDB_E_INVALIDARG on a
 * NULL or empty path, PSDB_E_IO when a file cannot be written (no partial key is left behind),
 * PSDB_E_FAIL when OpenSSL fails. When key_id is non-NULL it receives the new key's id. */
PSDB_API psdb_hr psdb_keygen(const char *keyfile, char key_id[PSDB_KEY_ID_SIZE]);

/* Loads a PEM key file: a private key (as written by psdb_keygen) or a public key (the .pub
 * file). Only Ed25519 keys are accepted. PSDB_E_INVALIDARG (NULL), PSDB_E_IO (cannot read),
 * PSDB_E_SIGNATURE (not a PEM Ed25519 key), PSDB_E_OUTOFMEMORY. *out is the caller's, released
 * with psdb_key_release. */
PSDB_API psdb_hr psdb_key_load(const char *path, psdb_key **out);

/* What a key file is expected to hold (psdb_key_load_kind). */
typedef enum psdb_key_kind {
    PSDB_KEY_ANY = 0,     /* a private or a public key */
    PSDB_KEY_PUBLIC = 1,  /* a public key (a launcher's trusted key): a private key is refused */
    PSDB_KEY_PRIVATE = 2, /* a private key (a publisher signing) */
} psdb_key_kind;

/* psdb_key_load that checks the kind of key too and says why a file is refused: why (may be
 * NULL; why_size bytes, NUL-terminated, truncated to fit) receives one line that starts with the
 * path and says what is wrong: it cannot be opened or read (with strerror), is empty, larger than
 * any key file, not PEM, a truncated PEM, a PEM of something else (a certificate), a damaged or
 * encrypted key, a key of another type (RSA, X25519, ...), or a private key where a public one is
 * wanted or the reverse. "" on success. Statuses: S_OK; PSDB_E_INVALIDARG (NULL path or out, an
 * unknown kind); PSDB_E_IO (cannot read); PSDB_E_ACCESS (permission denied); PSDB_E_SIGNATURE
 * (every other refusal); PSDB_E_OUTOFMEMORY. Never prompts for a passphrase. *out is the
 * caller's, released with psdb_key_release; NULL on failure. Thread-safe. */
PSDB_API psdb_hr psdb_key_load_kind(const char *path, psdb_key_kind want, psdb_key **out, char *why,
                                    size_t why_size);

/* Same as psdb_key_load from PEM text in memory (len bytes, no NUL needed). */
PSDB_API psdb_hr psdb_key_from_pem(const char *pem, size_t len, psdb_key **out);

/* Writes the public half of `key` as SubjectPublicKeyInfo PEM into buf (NUL-terminated). *size in
 * is the capacity; it receives the length needed without the NUL. PSDB_E_MORE_DATA when buf is
 * too small (buf may be NULL to ask the size), PSDB_E_INVALIDARG on NULL key or size. */
PSDB_API psdb_hr psdb_key_public_pem(const psdb_key *key, char *buf, size_t *size);

/* The key id: lowercase hex of the SHA-256 of the 32-byte raw Ed25519 public key (64 digits).
 * The same for a private key and its .pub file. PSDB_E_INVALIDARG on NULL. */
PSDB_API psdb_hr psdb_key_id(const psdb_key *key, char out[PSDB_KEY_ID_SIZE]);

/* Non-zero when `key` holds a private key. */
PSDB_API int psdb_key_is_private(const psdb_key *key);

/* Signs the canonical encoding of `st` with a private key; `out` receives the 64-byte Ed25519
 * signature in standard base64 with padding (88 characters + NUL). PSDB_E_INVALIDARG (NULL, a
 * public-only key, or a statement psdb_statement_encode rejects), PSDB_E_FAIL (OpenSSL),
 * PSDB_E_OUTOFMEMORY. A psdb_key may be used from several threads at once. */
PSDB_API psdb_hr psdb_statement_sign(const psdb_key *key, const psdb_statement *st,
                                     char out[PSDB_SIGNATURE_B64_SIZE]);

/* Verifies a base64 signature (as written by psdb_statement_sign; no other spelling of the same
 * bytes is accepted) over `st` with `key` (public or private). S_OK when it verifies;
 * PSDB_E_SIGNATURE when it is malformed or does not verify; PSDB_E_INVALIDARG on NULL or a
 * statement psdb_statement_encode rejects; PSDB_E_OUTOFMEMORY. Thread-safe. */
PSDB_API psdb_hr psdb_statement_verify(const psdb_key *key, const psdb_statement *st,
                                       const char *signature_b64);

/* The SODB statement's trio: as psdb_statement_encode, _sign and _verify, over the SODB
 * statement's own encoding (its own domain separator, so that neither kind of signature ever
 * verifies as the other). PSDB_E_INVALIDARG also when the application name is NULL or empty.
 * Thread-safe. */
PSDB_API psdb_hr psdb_sodb_statement_encode(const psdb_sodb_statement *st, void *buf, size_t *size);
PSDB_API psdb_hr psdb_sodb_statement_sign(const psdb_key *key, const psdb_sodb_statement *st,
                                          char out[PSDB_SIGNATURE_B64_SIZE]);
PSDB_API psdb_hr psdb_sodb_statement_verify(const psdb_key *key, const psdb_sodb_statement *st,
                                            const char *signature_b64);

/* Releases a key (NULL is a no-op). */
PSDB_API void psdb_key_release(psdb_key *key);

#ifdef __cplusplus
}
#endif
#endif
