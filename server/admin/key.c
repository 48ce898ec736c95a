/* key.c - `psdbd key add|list|revoke`: the publishers' Ed25519 public keys that sign publishes. */
#include "admin_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "psdb/psdb.h"

#include "common.h"

struct key_opts {
    const char *name, *file, *scope, *families;
};

static void key_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd key add --data-dir DIR [--index URL] --name NAME --public-key FILE.pub\n"
           "                     [--scope APP_PATTERN] [--families FAMILY_PATTERN] [--json]\n\n"
           "Registers a publisher's Ed25519 public key (as written by 'psdb keygen'). Publishes\n"
           "signed by it are accepted for applications matching --scope (default '*'), and PSDBs\n"
           "for adapter families matching --families (default '*'; refused 403 key_scope).\n"
           "A compile farm's key (a compiler's) is registered the same way.\n");
}

static int key_option(int val, const char *arg, void *ctx)
{
    struct key_opts *o = ctx;
    if (val == 'n')
        o->name = arg;
    else if (val == 'k')
        o->file = arg;
    else if (val == 's')
        o->scope = arg;
    else if (val == 'f')
        o->families = arg;
    else
        assert(0 && "an option key_add does not declare");
    return 0;
}

/* The PEM text of the public half of the key in `file` (malloc'd), with *id its key id; NULL
 * after a message. */
static char *load_public_pem(const char *file, char id[PSDB_KEY_ID_SIZE])
{
    psdb_key *key = NULL;
    char *pem = NULL;
    size_t pem_size = 0;
    psdb_hr hr;
    if ((hr = psdb_key_load(file, &key)) != PSDB_S_OK) {
        admin_fail("key add", "%s: not an Ed25519 PEM key (%s)", file, psdb_hr_str(hr));
        goto cleanup;
    }
    if (psdb_key_is_private(key))
        fprintf(stderr,
                "psdbd key add: warning: %s is a private key; only its public half is "
                "stored\n",
                file);
    psdb_key_id(key, id);
    psdb_key_public_pem(key, NULL, &pem_size);
    pem = xmalloc(pem_size + 1);
    pem_size++;
    if (psdb_key_public_pem(key, pem, &pem_size) != PSDB_S_OK) {
        admin_fail("key add", "cannot encode the public key");
        free(pem);
        pem = NULL;
    }
cleanup:
    psdb_key_release(key);
    return pem;
}

static int key_add(int argc, char **argv)
{
    static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
                                         {"public-key", required_argument, NULL, 'k'},
                                         {"scope", required_argument, NULL, 's'},
                                         {"families", required_argument, NULL, 'f'},
                                         {NULL, 0, NULL, 0}};
    struct key_opts o = {NULL, NULL, "*", "*"};
    admin_args a = {0};
    char *pem = NULL;
    int rc = 1;
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    char id[PSDB_KEY_ID_SIZE];
    if ((rc = admin_parse("key add", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON, opts, key_option, &o,
                          key_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    if (!o.name || !*o.name || !o.file || !*o.scope || !*o.families) {
        rc = admin_fail("key add", "--name and --public-key are required, --scope and --families "
                                   "not empty (see --help)");
        goto cleanup;
    }
    if (admin_bad_text("key add", "--name", o.name) ||
        admin_bad_text("key add", "--scope", o.scope) ||
        admin_bad_text("key add", "--families", o.families))
        goto cleanup;
    if (!(pem = load_public_pem(o.file, id)))
        goto cleanup;
    if (admin_open_data("key add", &a, 1, &store, &ix) != 0)
        goto cleanup;
    switch (psdbd_index_key_add(ix, o.name, id, pem, o.scope, o.families)) {
    case PSDBD_OK:
        break;
    case PSDBD_EXISTS:
        rc = admin_fail("key add", "a key named '%s' or with id %s is already registered", o.name,
                        id);
        goto cleanup;
    default:
        rc = admin_fail("key add", "the index cannot be written");
        goto cleanup;
    }
    if (a.json) {
        json_t *j = json_pack("{s:s, s:s, s:s, s:s}", "name", o.name, "key_id", id, "scope",
                              o.scope, "families", o.families);
        json_dumpf(j, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(j);
    } else {
        printf("%s\n", id);
    }
    rc = 0;
cleanup:
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    free(pem);
    return rc;
}

int psdbd_cmd_key(int argc, char **argv)
{
    return admin_credential_command("key", "add", key_add, key_usage, argc, argv);
}
