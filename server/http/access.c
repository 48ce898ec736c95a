/* access.c - who may use a psdbd route: bearer tokens, roles and application scopes. */
#include "http_int.h"

#include <string.h>

#include "auth.h"

/* ---- authentication -------------------------------------------------------------------------- */

/* Checks the token when `need` is not NONE (or when one is sent). Returns 0 when the request may
 * go on; otherwise an error response was queued and *ret says how to return. `app` non-NULL:
 * the token's scope must cover it. */
int http_authorize(psdbd_server *srv, struct MHD_Connection *c, struct req *r, psdbd_role need,
                   const char *app, enum MHD_Result *ret)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (need == PSDBD_ROLE_NONE)
        return 0;
    if (!r->who.name) {
        switch (psdbd_auth_check(srv->ix, h, &r->who)) {
        case PSDBD_AUTH_OK:
            break;
        case PSDBD_AUTH_MISSING:
            *ret = http_reply_error(c, r, PSDBD_OUTCOME_UNAUTHORIZED,
                                    "this endpoint needs a bearer token");
            return -1;
        case PSDBD_AUTH_INVALID:
            *ret = http_reply_error(c, r, PSDBD_OUTCOME_UNAUTHORIZED,
                                    "the token is unknown, expired or revoked");
            return -1;
        default:
            *ret = http_reply_index_error(c, r, psdbd_index_failure(srv->ix));
            return -1;
        }
    }
    if (r->who.role < need) {
        *ret = http_reply_error(c, r, PSDBD_OUTCOME_FORBIDDEN,
                                "the token's role (%s) is not allowed here",
                                psdbd_role_name(r->who.role));
        return -1;
    }
    if (app && r->who.role != PSDBD_ROLE_ADMIN && !psdbd_scope_covers(r->who.scope, app)) {
        *ret = http_reply_error(c, r, PSDBD_OUTCOME_OUT_OF_SCOPE,
                                "the token's scope does not cover this application");
        return -1;
    }
    return 0;
}

int http_authorize_compiler(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                            enum MHD_Result *ret)
{
    if (http_authorize(srv, c, r, PSDBD_ROLE_COMPILER, NULL, ret) != 0)
        return -1;
    if (r->who.role != PSDBD_ROLE_COMPILER && r->who.role != PSDBD_ROLE_ADMIN) {
        *ret = http_reply_error(c, r, PSDBD_OUTCOME_FORBIDDEN,
                                "the token's role (%s) is not allowed here: a compiler's is",
                                psdbd_role_name(r->who.role));
        return -1;
    }
    return 0;
}

psdbd_role http_reader_role(const psdbd_server *srv)
{
    return srv->cfg->readers_need_token ? PSDBD_ROLE_READER : PSDBD_ROLE_NONE;
}

/* True when the request's token limits which applications it sees: a token was checked, it is
 * not an admin's, and its scope is not '*'. Anonymous reads (no token needed) see everything. */
int http_scoped(const struct req *r)
{
    return r->who.name && r->who.role != PSDBD_ROLE_ADMIN &&
           !(r->who.scope && strcmp(r->who.scope, "*") == 0);
}

/* Removes the entries of a listing ({"name": ...} objects) that the token's scope does not
 * cover. */
void http_drop_out_of_scope(const struct req *r, json_t *list)
{
    if (!http_scoped(r) || !json_is_array(list))
        return;
    for (size_t i = json_array_size(list); i-- > 0;) {
        const char *name = json_string_value(json_object_get(json_array_get(list, i), "name"));
        if (!psdbd_scope_covers(r->who.scope, name))
            json_array_remove(list, i);
    }
}
