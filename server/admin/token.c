/* token.c - `psdbd token create|list|revoke`: bearer tokens, shown once and stored hashed. */
#include "admin_int.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "auth.h"
#include "common.h"

struct token_opts {
    const char *role, *scope;
    char *name;
    uint64_t expires; /* Unix time; 0: never */
};

static void token_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd token create --data-dir DIR [--index URL]\n"
           "                          --role admin|publisher|compiler|reader\n"
           "                          [--scope APP_PATTERN] [--name NAME]\n"
           "                          [--expires-in SECONDS | --expires-at UNIX_TIME] [--json]\n\n"
           "Creates a bearer token and prints it once (only its SHA-256 is stored).\n"
           "--scope is a shell pattern over application names (default '*').\n"
           "A compiler token is a compile farm worker's: it reads, announces, claims and\n"
           "finishes jobs, and publishes PSDBs signed with a version 2 statement only.\n"
           "Also: psdbd token list|revoke (see psdbd token list --help).\n");
}

static int token_option(int val, const char *arg, void *ctx)
{
    struct token_opts *o = ctx;
    uint64_t v = 0;
    switch (val) {
    case 'r':
        o->role = arg;
        break;
    case 's':
        o->scope = arg;
        break;
    case 'n':
        free(o->name);
        o->name = xstrdup(arg);
        break;
    case 'i':
        if (psdb__parse_u64(arg, &v) != 0 || v > INT32_MAX)
            return admin_fail("token create", "bad --expires-in '%s'", arg);
        o->expires = (uint64_t)time(NULL) + v;
        break;
    case 'a':
        if (psdb__parse_u64(arg, &o->expires) != 0 || o->expires == 0 || o->expires > INT64_MAX)
            return admin_fail("token create", "bad --expires-at '%s'", arg);
        break;
    default:
        assert(0 && "an option token_create does not declare");
        return 1;
    }
    return 0;
}

/* Prints the new token (its only appearance), alone or as JSON with its row. */
static int print_token(const char *tok, const struct token_opts *o, int json)
{
    if (json) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:s}", "token", tok, "name", o->name, "role",
                              o->role, "scope", o->scope);
        if (o->expires)
            json_object_set_new(j, "expires_at", json_integer((json_int_t)o->expires));
        json_dumpf(j, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(j);
    } else {
        printf("%s\n", tok);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

static int token_create(int argc, char **argv)
{
    static const struct option opts[] = {
        {"role", required_argument, NULL, 'r'},       {"scope", required_argument, NULL, 's'},
        {"name", required_argument, NULL, 'n'},       {"expires-in", required_argument, NULL, 'i'},
        {"expires-at", required_argument, NULL, 'a'}, {NULL, 0, NULL, 0}};
    struct token_opts o = {NULL, "*", NULL, 0};
    admin_args a = {0};
    char *tok = NULL;
    int rc = 1;
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    char selector[17];
    uint8_t hash[32];
    if ((rc = admin_parse("token create", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON, opts,
                          token_option, &o, token_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    if (psdbd_role_parse(o.role) == PSDBD_ROLE_NONE) {
        rc = admin_fail("token create", "--role must be admin, publisher, compiler or reader");
        goto cleanup;
    }
    if (!*o.scope) {
        rc = admin_fail("token create", "--scope must not be empty");
        goto cleanup;
    }
    if ((o.name && admin_bad_text("token create", "--name", o.name)) ||
        admin_bad_text("token create", "--scope", o.scope))
        goto cleanup;
    if (admin_open_data("token create", &a, 1, &store, &ix) != 0)
        goto cleanup;
    tok = psdbd_token_new(selector, hash);
    if (!tok) {
        rc = admin_fail("token create", "the random generator failed");
        goto cleanup;
    }
    if (!o.name)
        o.name = xasprintf("%s-%s", o.role, selector);
    switch (
        psdbd_index_token_add(ix, o.name, selector, hash, o.role, o.scope, (int64_t)o.expires)) {
    case PSDBD_OK:
        break;
    case PSDBD_EXISTS:
        rc = admin_fail("token create", "a token named '%s' exists", o.name);
        goto cleanup;
    default:
        rc = admin_fail("token create", "the index cannot be written");
        goto cleanup;
    }
    rc = print_token(tok, &o, a.json);
cleanup:
    if (tok) {
        memset(tok, 0, strlen(tok));
        free(tok);
    }
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    free(o.name);
    return rc;
}

int psdbd_cmd_token(int argc, char **argv)
{
    return admin_credential_command("token", "create", token_create, token_usage, argc, argv);
}
