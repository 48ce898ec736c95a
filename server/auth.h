/* auth.h - bearer tokens (stored hashed, compared in constant time), roles and app scopes. */
#ifndef PSDBD_AUTH_H
#define PSDBD_AUTH_H

#include <stdint.h>

#include "common.h"
#include "index.h"

/* Roles are ordered: each includes the rights of the ones below it, except that the farm's
 * worker routes (claim, extend, done, fail, announce) take a compiler or an admin only
 * (http_authorize_compiler): a publisher signs what it publishes itself. A compiler reads like a
 * reader and publishes PSDBs with a version 2 statement only (schema/HTTP.md, Farm). */
typedef enum psdbd_role {
    PSDBD_ROLE_NONE = 0,
    PSDBD_ROLE_READER = 1,
    PSDBD_ROLE_COMPILER = 2,
    PSDBD_ROLE_PUBLISHER = 3,
    PSDBD_ROLE_ADMIN = 4
} psdbd_role;

/* "admin", "publisher", "compiler", "reader" -> the role; anything else PSDBD_ROLE_NONE. */
psdbd_role psdbd_role_parse(const char *s);
/* The role's name ("none" for PSDBD_ROLE_NONE). */
const char *psdbd_role_name(psdbd_role r);

/* Who made a request. name and scope are malloc'd (psdbd_principal_free). */
typedef struct psdbd_principal {
    psdbd_role role;
    char *name;
    char *scope;
} psdbd_principal;
void psdbd_principal_free(psdbd_principal *p);

typedef enum psdbd_auth_rc {
    PSDBD_AUTH_OK = 0,
    PSDBD_AUTH_MISSING, /* no Authorization header */
    PSDBD_AUTH_INVALID, /* malformed, unknown, wrong secret, expired or revoked */
    PSDBD_AUTH_ERROR    /* the index failed */
} psdbd_auth_rc;

/* Checks an Authorization header value ("Bearer psdb_<selector>_<secret>"). */
psdbd_auth_rc psdbd_auth_check(psdbd_index *ix, const char *authorization, psdbd_principal *out);

/* psdbd_scope_covers, the scope rule, is in common.h: the index's farm queue applies it too. */

/* Makes a new random token: returns it (malloc'd), its selector (16 hex + NUL) and the SHA-256
 * to store. NULL when the random generator fails. */
char *psdbd_token_new(char selector[17], uint8_t hash[32]);

#endif
