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
    printf("usage: psdbd %s list --data-dir DIR [--json]\n"
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

static int revoke(const char *cmd, const char *what, sqlite3 *db, const char *name)
{
    sqlite3_stmt *st = NULL;
    int rc = 1;
    const char *sql = strcmp(what, "token") == 0
                          ? "UPDATE tokens SET revoked_at = ?2 WHERE name = ?1"
                          : "UPDATE keys SET revoked_at = ?2 WHERE name = ?1";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = admin_fail(cmd, "index: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, (int64_t)time(NULL));
    if (sqlite3_step(st) != SQLITE_DONE) {
        rc = admin_fail(cmd, "index: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    if (sqlite3_changes(db) == 0) {
        rc = admin_fail(cmd, "no %s named '%s'", what, name);
        goto cleanup;
    }
    printf("revoked %s %s\n", what, name);
    rc = 0;
cleanup:
    sqlite3_finalize(st);
    return rc;
}

static int list(const char *cmd, const char *what, sqlite3 *db, int json)
{
    int tokens = strcmp(what, "token") == 0, rc = 1;
    sqlite3_stmt *st = NULL;
    json_t *rows = NULL;
    const char *sql = tokens ? "SELECT name, role, scope, created_at, expires_at, revoked_at "
                               "FROM tokens ORDER BY name"
                             : "SELECT name, key_id, scope, created_at, NULL, revoked_at "
                               "FROM keys ORDER BY name";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = admin_fail(cmd, "index: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    rows = json_array();
    while (sqlite3_step(st) == SQLITE_ROW) {
        char when[40];
        json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "name", sqlite3_column_text(st, 0),
                              tokens ? "role" : "key_id", sqlite3_column_text(st, 1), "scope",
                              sqlite3_column_text(st, 2), "created_at",
                              psdbd_format_time(sqlite3_column_int64(st, 3), when, sizeof(when)));
        if (sqlite3_column_type(st, 4) != SQLITE_NULL)
            json_object_set_new(
                o, "expires_at",
                json_string(psdbd_format_time(sqlite3_column_int64(st, 4), when, sizeof(when))));
        json_object_set_new(o, "revoked", json_boolean(sqlite3_column_type(st, 5) != SQLITE_NULL));
        json_array_append_new(rows, o);
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
    sqlite3_finalize(st);
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
    if (admin_open_data(cmd, a.dir, 0, &store, &ix) != 0)
        goto cleanup;
    if (is_revoke)
        rc = revoke(cmd, what, psdbd_index_db(ix), lo.name);
    else
        rc = list(cmd, what, psdbd_index_db(ix), a.json);
cleanup:
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    free(a.dir);
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
