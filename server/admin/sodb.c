/* sodb.c - `psdbd sodb list|retire`: the published SODBs of the compile farm, and retiring one as
 * DELETE /v1/sodbs/{id} does, for an operator on the data directory (schema/HTTP.md, Farm). */
#include "admin_int.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common.h"

/* What `retired_by` records for a retire from this command (an HTTP retire records the token's
 * name). */
#define RETIRED_BY "psdbd sodb retire"

struct sodb_opts {
    const char *app, *app_version; /* list: as given, checked after the options */
    int retired;                   /* list --retired */
};

static void sodb_usage(void *ctx)
{
    (void)ctx;
    printf("usage: psdbd sodb list --data-dir DIR [--index URL] [--app NAME [--app-version V]]\n"
           "                       [--retired] [--json]\n"
           "       psdbd sodb retire --data-dir DIR [--index URL] [--json] ID\n\n"
           "list: the published SODBs (of NAME, at version V), by application, newest version and\n"
           "serial first, one line each: id, application, version, serial, size, published at,\n"
           "SHA-256, signing key (--json: {\"sodbs\":[manifest...]}, schema/HTTP.md, Farm);\n"
           "--retired lists retired ones too (marked \"retired\").\n"
           "retire: retires SODB ID as DELETE /v1/sodbs/ID does: it is no longer listed, makes\n"
           "no job (misses and job add take the newest SODB of the version still published),\n"
           "is claimed by no worker and no version 2 PSDB may name it; its queued jobs are held\n"
           "(\"its SODB was retired\"). Prints what it retired and how many jobs it held (--json:\n"
           "the manifest, with \"jobs_held\"). Refused: an ID that is not a positive number, no\n"
           "SODB with that ID, one retired already. A psdbd serving DIR sees it at once.\n");
}

static int sodb_option(int val, const char *arg, void *ctx)
{
    struct sodb_opts *o = ctx;
    switch (val) {
    case 'a':
        o->app = arg;
        break;
    case 'v':
        o->app_version = arg;
        break;
    case 'r':
        o->retired = 1;
        break;
    default:
        assert(0 && "an option sodb does not declare");
        return 1;
    }
    return 0;
}

/* An SODB id: a positive decimal number that fits the index's integers. 0, or 1 after a message. */
static int parse_id(const char *cmd, const char *text, int64_t *id)
{
    uint64_t v = 0;
    if (!text)
        return admin_fail(cmd, "the SODB's ID is required (psdbd sodb list shows them)");
    if (!*text || strlen(text) > 19 || text[strspn(text, "0123456789")] != '\0' ||
        psdb__parse_u64(text, &v) != 0 || v == 0 || v > INT64_MAX)
        return admin_fail(cmd,
                          "bad SODB ID '%s' (a positive decimal number; psdbd sodb list "
                          "shows them)",
                          text);
    *id = (int64_t)v;
    return 0;
}

/* "NAME VERSION, serial N" of a manifest, for messages. */
static void describe(const json_t *m, char *buf, size_t size)
{
    const json_t *app = json_object_get(m, "app");
    snprintf(buf, size, "%s %s, serial %lld", json_string_value(json_object_get(app, "name")),
             json_string_value(json_object_get(app, "version")),
             (long long)json_integer_value(json_object_get(m, "serial")));
}

static void print_line(const json_t *m)
{
    const json_t *app = json_object_get(m, "app");
    const char *retired = json_string_value(json_object_get(m, "retired_at"));
    printf("%-6lld %-24s %-14s serial %-6lld %12lld bytes  %s  sha256 %.16s  key %.16s%s%s\n",
           (long long)json_integer_value(json_object_get(m, "id")),
           json_string_value(json_object_get(app, "name")),
           json_string_value(json_object_get(app, "version")),
           (long long)json_integer_value(json_object_get(m, "serial")),
           (long long)json_integer_value(json_object_get(m, "size")),
           json_string_value(json_object_get(m, "created_at")),
           json_string_value(json_object_get(m, "sha256")),
           json_string_value(json_object_get(m, "key_id")), retired ? "  retired " : "",
           retired ? retired : "");
}

static int sodb_list(int argc, char **argv)
{
    static const struct option opts[] = {{"app", required_argument, NULL, 'a'},
                                         {"app-version", required_argument, NULL, 'v'},
                                         {"retired", no_argument, NULL, 'r'},
                                         {NULL, 0, NULL, 0}};
    struct sodb_opts o = {0};
    admin_args a = {0};
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    json_t *list = NULL;
    uint64_t version = 0;
    int rc;
    if ((rc = admin_parse("sodb list", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON, opts, sodb_option,
                          &o, sodb_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    /* Checked before the data directory is opened, as job add's. */
    if (o.app_version && !o.app)
        admin_fail("sodb list", "--app-version needs --app");
    else if (o.app && !*o.app)
        admin_fail("sodb list", "--app must not be empty");
    else if (o.app && admin_bad_text("sodb list", "--app", o.app)) {
        /* admin_bad_text said why */
    } else if (o.app_version && psdb__parse_version(o.app_version, &version) != 0)
        admin_fail("sodb list", "bad --app-version '%s' (a.b.c.d or a number)", o.app_version);
    else
        rc = 0;
    if (rc != 0 || (rc = admin_open_data("sodb list", &a, 0, &store, &ix)) != 0)
        goto cleanup;
    rc = 1;
    if (psdbd_index_sodb_list_admin(ix, o.app, o.app_version != NULL, version, o.retired, &list) !=
        PSDBD_OK) {
        admin_fail("sodb list", "index: cannot list the SODBs (the log above says why)");
        goto cleanup;
    }
    if (a.json) {
        json_dumpf(list, stdout, JSON_COMPACT);
        fputc('\n', stdout);
    } else {
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(list, "sodbs"), i, m)
        {
            print_line(m);
        }
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
cleanup:
    json_decref(list);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    return rc;
}

static int sodb_retire(int argc, char **argv)
{
    admin_args a = {0};
    psdbd_store store = {0};
    psdbd_index *ix = NULL;
    json_t *m = NULL;
    int64_t id = 0, held = 0;
    int retired_now = 0, rc;
    char what[200];
    if ((rc = admin_parse("sodb retire", argc, argv, ADMIN_DATA_DIR | ADMIN_JSON | ADMIN_OPERAND,
                          NULL, NULL, NULL, sodb_usage, &a)) != ADMIN_GO_ON)
        goto cleanup;
    rc = 1;
    if (parse_id("sodb retire", a.operand, &id) != 0 ||
        admin_open_data("sodb retire", &a, 0, &store, &ix) != 0)
        goto cleanup;
    switch (psdbd_index_sodb_retire(ix, id, RETIRED_BY, &retired_now, &held, &m)) {
    case PSDBD_OK:
        break;
    case PSDBD_NOT_FOUND:
        admin_fail("sodb retire", "no SODB with ID %lld (psdbd sodb list --retired shows them)",
                   (long long)id);
        goto cleanup;
    default:
        admin_fail("sodb retire", "index: cannot retire SODB %lld (the log above says why)",
                   (long long)id);
        goto cleanup;
    }
    describe(m, what, sizeof(what));
    if (!retired_now) {
        const char *at = json_string_value(json_object_get(m, "retired_at"));
        admin_fail("sodb retire", "SODB %lld (%s) was retired already, at %s", (long long)id, what,
                   at ? at : "an unknown time");
        goto cleanup;
    }
    if (a.json) {
        json_object_set_new(m, "jobs_held", json_integer((json_int_t)held));
        json_dumpf(m, stdout, JSON_COMPACT);
        fputc('\n', stdout);
    } else {
        printf("retired SODB %lld (%s); %lld queued job%s held\n", (long long)id, what,
               (long long)held, held == 1 ? "" : "s");
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
cleanup:
    json_decref(m);
    psdbd_index_close(ix);
    psdbd_store_close(&store);
    admin_args_free(&a);
    return rc;
}

int psdbd_cmd_sodb(int argc, char **argv)
{
    static const admin_verb verbs[] = {{"list", sodb_list}, {"retire", sodb_retire}};
    return admin_verb_command("sodb", verbs, sizeof(verbs) / sizeof(verbs[0]), sodb_usage, argc,
                              argv);
}
