/* cmd_registry.c - `psdb registry list`: what a shader cache registry holds (applications,
 * components, PSDB per adapter family), as text or JSON. */
#include "tool.h"

#include <jansson.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: psdb registry list [--registry DIR] [--json]\n\n"
               "Lists the registered applications, their components and each component's PSDB\n"
               "per adapter family, read through a read-only explorer.\n\n"
               "  --registry DIR  registry root (default: $PSDB_REGISTRY_DIR, else\n"
               "                  $XDG_DATA_HOME/psdb, else ~/.local/share/psdb)\n"
               "  --json          print JSON: [{exe_path, name, version, ..., components:\n"
               "                  [{name, sodb_path, psdbs: [{family, path, status, serial,\n"
               "                  sha256, built_here, sodb_sha256}]}]}]\n\n"
               "built_here: psdb install --compile-missing compiled it on this machine (the text\n"
               "says \"(built here)\"); sodb_sha256: the SODB it was compiled from, when known.\n\n"
               "Each PSDB file is hashed and given a status: ok (the SHA-256 psdb install\n"
               "recorded), unverified (present, no digest recorded), missing (no regular file\n"
               "there: absent, a FIFO, or a link where psdb install put its file), or\n"
               "mismatch (damaged). Run psdb install again for an application whose PSDB is\n"
               "missing or damaged: it downloads it again. The exit status is 0 either way.\n");
}

/* Groups the explorer's flat rows (ordered by exe path, component, family) into JSON. */
typedef struct listing {
    json_t *apps;
    json_t *app;  /* current application (borrowed from apps) */
    json_t *comp; /* current component (borrowed) */
    int failed;
    unsigned broken; /* PSDBs missing or not matching their digest */
} listing;

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

static int collect(const psdb_registry_entry *e, void *ctx)
{
    listing *l = ctx;
    char v[32], ev[32];
    const char *cur = l->app ? json_string_value(json_object_get(l->app, "exe_path")) : NULL;
    if (!cur || strcmp(cur, e->exe_path) != 0) {
        l->app = json_pack("{s:s, s:o, s:s, s:s, s:o, s:s, s:s, s:[]}", "exe_path", e->exe_path,
                           "exe_filename", str_or_null(e->app->exe_filename), "name", e->app->name,
                           "version", psdb__format_version(e->app->version, v, 32), "engine_name",
                           str_or_null(e->app->engine_name), "engine_version",
                           psdb__format_version(e->app->engine_version, ev, 32), "installer",
                           e->installer ? e->installer : "", "components");
        if (!l->app || json_array_append_new(l->apps, l->app) != 0) {
            l->failed = 1;
            goto cleanup;
        }
        l->comp = NULL;
    }
    if (!e->component)
        goto cleanup;
    const char *cname = l->comp ? json_string_value(json_object_get(l->comp, "name")) : NULL;
    if (!cname || strcmp(cname, e->component) != 0) {
        l->comp = json_pack("{s:s, s:o, s:[]}", "name", e->component, "sodb_path",
                            str_or_null(e->sodb_path), "psdbs");
        if (!l->comp ||
            json_array_append_new(json_object_get(l->app, "components"), l->comp) != 0) {
            l->failed = 1;
            goto cleanup;
        }
    }
    if (e->adapter_family) {
        psdb_registry_file_state state = PSDB_REGISTRY_FILE_MISSING;
        const char *status = PSDB_FAILED(psdb_registry_entry_check(e, &state))
                                 ? "unreadable"
                                 : psdb_registry_file_state_str(state);
        if (state == PSDB_REGISTRY_FILE_MISSING || state == PSDB_REGISTRY_FILE_MISMATCH)
            l->broken++;
        json_t *p = json_pack(
            "{s:s, s:s, s:s, s:I, s:o, s:b, s:o}", "family", e->adapter_family, "path",
            e->psdb_path, "status", status, "serial", (json_int_t)e->installed_serial, "sha256",
            str_or_null(e->installed_sha256), "built_here", e->installed_built_here, "sodb_sha256",
            str_or_null(e->installed_sodb_sha256));
        if (!p || json_array_append_new(json_object_get(l->comp, "psdbs"), p) != 0)
            l->failed = 1;
    }
cleanup:
    return l->failed; /* non-zero stops the walk */
}

static void print_text(json_t *apps)
{
    size_t i, j, k;
    json_t *app, *comp, *p;
    if (json_array_size(apps) == 0)
        printf("no applications registered\n");
    json_array_foreach(apps, i, app)
    {
        tool_printf_safe(stdout, "%s  %s %s  (installer %s)",
                         json_string_value(json_object_get(app, "exe_path")),
                         json_string_value(json_object_get(app, "name")),
                         json_string_value(json_object_get(app, "version")),
                         json_string_value(json_object_get(app, "installer")));
        fputc('\n', stdout);
        json_array_foreach(json_object_get(app, "components"), j, comp)
        {
            const char *sodb = json_string_value(json_object_get(comp, "sodb_path"));
            tool_printf_safe(stdout, "  component %s%s%s",
                             json_string_value(json_object_get(comp, "name")),
                             sodb ? "  sodb " : "", sodb ? sodb : "");
            fputc('\n', stdout);
            json_array_foreach(json_object_get(comp, "psdbs"), k, p)
            {
                const char *status = json_string_value(json_object_get(p, "status"));
                int flag = strcmp(status, "ok") != 0 && strcmp(status, "unverified") != 0;
                int here = json_is_true(json_object_get(p, "built_here"));
                tool_printf_safe(stdout, "    %-24s %s%s%s%s%s",
                                 json_string_value(json_object_get(p, "family")),
                                 json_string_value(json_object_get(p, "path")), flag ? "  [" : "",
                                 flag ? status : "", flag ? "]" : "", here ? "  (built here)" : "");
                fputc('\n', stdout);
            }
        }
    }
}

int cmd_registry(int argc, char **argv)
{
    const char *root = NULL;
    int json = 0, rc = 1;
    psdb_explorer *exp = NULL;
    listing l = {0};
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "list") != 0) {
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--registry") == 0 && i + 1 < argc) {
            root = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else {
            rc = tool_fail("registry", "unknown argument '%s' (try --help)", argv[i]);
            goto cleanup;
        }
    }
    psdb_hr hr = psdb_explorer_open(root, &exp);
    if (PSDB_FAILED(hr)) {
        if (*psdb_error_last())
            rc = tool_fail("registry", "%s", psdb_error_last());
        else
            rc = tool_fail("registry", "opening the registry failed: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    l.apps = json_array();
    if (!l.apps) {
        rc = tool_fail("registry", "out of memory");
        goto cleanup;
    }
    hr = psdb_explorer_foreach(exp, collect, &l);
    if (PSDB_FAILED(hr) || l.failed) {
        rc = tool_fail("registry", "reading the registry failed: %s",
                       l.failed             ? "out of memory"
                       : *psdb_error_last() ? psdb_error_last()
                                            : psdb_hr_str(hr));
        goto cleanup;
    }
    if (json) {
        if (tool_json_dumpf(l.apps, stdout, JSON_INDENT(2)) != 0) {
            rc = tool_fail("registry", "writing JSON failed");
            goto cleanup;
        }
        fputc('\n', stdout);
    } else {
        print_text(l.apps);
    }
    if (l.broken)
        fprintf(stderr,
                "psdb registry: %u registered PSDB%s missing or damaged: run psdb install again "
                "for %s\n",
                l.broken, l.broken == 1 ? " is" : "s are",
                l.broken == 1 ? "its application" : "their applications");
    rc = 0;
cleanup:
    json_decref(l.apps);
    psdb_explorer_release(exp);
    return rc;
}
