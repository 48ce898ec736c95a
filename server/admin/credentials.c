/* credentials.c - `psdbd token|key list|revoke`: the rows of tokens and keys (never a secret),
 * and revoking one by name. */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common.h"

struct list_opts {
    const char *what; /* "token" or "key" */
    const char *name; /* --name */
};

static void list_usage(void *ctx)
{
    const char *what = ((struct list_opts *)ctx)->what;
    printf("usage: psdbd %s list --data-dir DIR [--index URL] [--json]\n"
           "       psdbd %s revoke --data-dir DIR --name NAME\n\n"
           "Lists the %ss (names, scopes, dates; never a secret), or revokes one: it is\n"
           "refused from then on, and its row is kept for the record.\n",
           what, what, what);
}

static int list_option(int val, const char *arg, void *ctx)
{
    (void)val; /* --name is the only one */
    ((struct list_opts *)ctx)->name = arg;
    return 0;
}

static int revoke(const char *cmd, const char *what, psdbd_index *ix, const char *name)
{
    psdbd_credential kind =
        strcmp(what, "token") == 0 ? PSDBD_CREDENTIAL_TOKEN : PSDBD_CREDENTIAL_KEY;
    psdbd_rc rc = psdbd_index_credential_revoke(ix, kind, name);
    if (rc == PSDBD_NOT_FOUND)
        return admin_fail(cmd, "no %s named '%s'", what, name);
    if (rc != PSDBD_OK)
        return admin_fail(cmd, "index: cannot revoke %s '%s' (the log above says why)", what, name);
    printf("revoked %s %s\n", what, name);
    return 0;
}

static int list(const char *cmd, const char *what, psdbd_index *ix, int json)
{
    int tokens = strcmp(what, "token") == 0, rc = 1;
    json_t *rows = NULL;
    if (psdbd_index_credential_list(ix, tokens ? PSDBD_CREDENTIAL_TOKEN : PSDBD_CREDENTIAL_KEY,
                                    &rows) != PSDBD_OK) {
        rc = admin_fail(cmd, "index: cannot list the %ss (the log above says why)", what);
        goto cleanup;
    }
    if (json) {
        json_dumpf(rows, stdout, JSON_COMPACT);
        fputc('\n', stdout);
    } else {
        size_t i;
        json_t *o;
        json_array_foreach(rows, i, o)
        {
            printf("%-24s %-10.64s %-16s %s%s\n", json_string_value(json_object_get(o, "name")),
                   json_string_value(json_object_get(o, tokens ? "role" : "key_id")),
                   json_string_value(json_object_get(o, "scope")),
                   json_string_value(json_object_get(o, "created_at")),
                   json_is_true(json_object_get(o, "revoked")) ? " revoked" : "");
        }
    }
    rc = 0;
cleanup:
    json_decref(rows);
    return rc;
}

int admin_list_or_revoke(const char *what, int argc, char **argv)
{
    static const struct option opts[] = {{"name", required_argument, NULL, 'n'},
                                         {NULL, 0, NULL, 0}};
    struct list_opts lo = {what, NULL};
    int is_revoke = strcmp(argv[0], "revoke") == 0, rc = 1;
    admin_args a = {0};
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    char cmd[32];
    snprintf(cmd, sizeof(cmd), "%s %s", what, argv[0]);
    if ((rc = admin_parse(cmd, argc, argv, ADMIN_DATA_DIR | ADMIN_JSON, opts, list_option, &lo,
                          list_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    if (is_revoke && !lo.name) {
        rc = admin_fail(cmd, "--name is required");
        goto cleanup;
    }
    rc = 1;
    if (admin_open_data(cmd, &a, 0, &store, &ix) != 0)
        goto cleanup;
    if (is_revoke)
        rc = revoke(cmd, what, ix, lo.name);
    else
        rc = list(cmd, what, ix, a.json);
cleanup:
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    return rc;
}

int admin_credential_command(const char *what, const char *verb, int (*run)(int, char **),
                             void (*usage)(void *), int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "list") == 0 || strcmp(argv[1], "revoke") == 0))
        return admin_list_or_revoke(what, argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], verb) == 0)
        return run(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(NULL);
        return 0;
    }
    return admin_fail(what, "expected '%s %s|list|revoke' (see --help)", what, verb);
}

int admin_verb_command(const char *what, const admin_verb *verbs, size_t n, void (*usage)(void *),
                       int argc, char **argv)
{
    char names[128] = "";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc >= 2 && strcmp(argv[1], verbs[i].name) == 0)
            return verbs[i].run(argc - 1, argv + 1);
        int w = snprintf(names + used, sizeof(names) - used, "%s'%s'",
                         i == 0       ? ""
                         : i + 1 == n ? " or "
                                      : ", ",
                         verbs[i].name);
        if (w > 0 && (size_t)w < sizeof(names) - used)
            used += (size_t)w;
    }
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(NULL);
        return 0;
    }
    return admin_fail(what, "expected %s (see psdbd %s --help)", names, what);
}
