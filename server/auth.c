/* auth.c - bearer tokens (stored hashed, compared in constant time), roles and app scopes.
 *
 * A token is "psdb_<selector>_<secret>": 8 random bytes of selector and 32 of secret, in hex. The
 * selector is an index key, not a secret; the row stores SHA-256 of the whole token, compared
 * with CRYPTO_memcmp, so neither a database dump nor response timing reveals a usable token. */
#include "auth.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "common.h"

#define TOKEN_PREFIX "psdb_"
#define SELECTOR_HEX 16
#define SECRET_HEX 64
#define TOKEN_LEN (5 + SELECTOR_HEX + 1 + SECRET_HEX)

psdbd_role psdbd_role_parse(const char *s)
{
    if (!s)
        return PSDBD_ROLE_NONE;
    if (strcmp(s, "admin") == 0)
        return PSDBD_ROLE_ADMIN;
    if (strcmp(s, "publisher") == 0)
        return PSDBD_ROLE_PUBLISHER;
    if (strcmp(s, "reader") == 0)
        return PSDBD_ROLE_READER;
    if (strcmp(s, "compiler") == 0)
        return PSDBD_ROLE_COMPILER;
    return PSDBD_ROLE_NONE;
}

const char *psdbd_role_name(psdbd_role r)
{
    switch (r) {
    case PSDBD_ROLE_READER:
        return "reader";
    case PSDBD_ROLE_COMPILER:
        return "compiler";
    case PSDBD_ROLE_PUBLISHER:
        return "publisher";
    case PSDBD_ROLE_ADMIN:
        return "admin";
    default:
        return "none";
    }
}

void psdbd_principal_free(psdbd_principal *p)
{
    if (!p)
        return;
    free(p->name);
    free(p->scope);
    memset(p, 0, sizeof(*p));
}

psdbd_auth_rc psdbd_auth_check(psdbd_index *ix, const char *authorization, psdbd_principal *out)
{
    psdbd_token_row row = {0};
    psdbd_auth_rc rc = PSDBD_AUTH_INVALID;
    char selector[SELECTOR_HEX + 1];
    uint8_t hash[32];
    const char *tok;
    memset(out, 0, sizeof(*out));
    if (!authorization)
        return PSDBD_AUTH_MISSING;
    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        goto cleanup;
    tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    if (strlen(tok) != TOKEN_LEN || strncmp(tok, TOKEN_PREFIX, 5) != 0 ||
        !psdbd_is_lower_hex(tok + 5, SELECTOR_HEX) || tok[5 + SELECTOR_HEX] != '_' ||
        !psdbd_is_lower_hex(tok + 6 + SELECTOR_HEX, SECRET_HEX))
        goto cleanup;
    memcpy(selector, tok + 5, SELECTOR_HEX);
    selector[SELECTOR_HEX] = '\0';
    switch (psdbd_index_token_find(ix, selector, &row)) {
    case PSDBD_OK:
        break;
    case PSDBD_NOT_FOUND:
        goto cleanup;
    default:
        rc = PSDBD_AUTH_ERROR;
        goto cleanup;
    }
    psdb__sha256(tok, TOKEN_LEN, hash);
    if (CRYPTO_memcmp(hash, row.hash, 32) != 0 || row.revoked ||
        (row.expires_at && row.expires_at <= (int64_t)time(NULL)))
        goto cleanup;
    out->role = psdbd_role_parse(row.role);
    out->name = row.name;
    out->scope = row.scope;
    row.name = row.scope = NULL;
    rc = out->role == PSDBD_ROLE_NONE ? PSDBD_AUTH_INVALID : PSDBD_AUTH_OK;
cleanup:
    psdbd_token_row_free(&row);
    OPENSSL_cleanse(hash, sizeof(hash));
    return rc;
}

char *psdbd_token_new(char selector[17], uint8_t hash[32])
{
    uint8_t raw[8 + 32];
    char *tok = NULL;
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return NULL;
    tok = xmalloc(TOKEN_LEN + 1);
    memcpy(tok, TOKEN_PREFIX, 5);
    psdb__hex(raw, 8, tok + 5);
    tok[5 + SELECTOR_HEX] = '_';
    psdb__hex(raw + 8, 32, tok + 6 + SELECTOR_HEX);
    memcpy(selector, tok + 5, SELECTOR_HEX);
    selector[SELECTOR_HEX] = '\0';
    psdb__sha256(tok, TOKEN_LEN, hash);
    OPENSSL_cleanse(raw, sizeof(raw));
    return tok;
}
