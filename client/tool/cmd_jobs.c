/* cmd_jobs.c - `psdb jobs`: the compile farm's queue and workers as psdbd reports them. */
#include "tool.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static const char usage_text[] =
    "usage: psdb jobs --server URL [--token T] [--state S] [--ca-file FILE] [--json]\n"
    "\n"
    "Lists the compile farm's jobs (GET /v1/jobs; schema/HTTP.md, \"Farm\"): one line per job\n"
    "with its id, state, application and version, target (family:abi_min-abi_max), demand\n"
    "(the resolves that missed it), attempts, the worker holding or having done it, the PSDB it\n"
    "produced and its last error; then one line per worker: its target, when it was last seen,\n"
    "the jobs it finished and its median compile time. --state S: only jobs in state S (queued,\n"
    "leased, done, failed, held). --json prints the server's answer as it is. --token may also\n"
    "come from $PSDB_TOKEN.\n";

static const char *str_of(json_t *o, const char *key, char *buf, size_t size)
{
    json_t *v = json_object_get(o, key);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_integer(v)) {
        snprintf(buf, size, "%lld", (long long)json_integer_value(v));
        return buf;
    }
    if (json_is_real(v)) {
        snprintf(buf, size, "%.2f", json_real_value(v));
        return buf;
    }
    return "-";
}

static void print_table(json_t *doc)
{
    json_t *jobs = json_object_get(doc, "jobs"), *workers = json_object_get(doc, "workers"), *o;
    size_t i;
    char b[8][48];
    printf("%-6s %-7s %-24s %-12s %-28s %6s %4s %-20s %-8s %s\n", "ID", "STATE", "APP", "VERSION",
           "TARGET", "DEMAND", "TRY", "WORKER", "PSDB", "ERROR");
    json_array_foreach(jobs, i, o)
    {
        json_t *app = json_object_get(o, "app"), *t = json_object_get(o, "target");
        char target[256];
        snprintf(target, sizeof(target), "%s:%s-%s", str_of(t, "family", b[0], 48),
                 str_of(t, "abi_min", b[1], 48), str_of(t, "abi_max", b[2], 48));
        tool_printf_safe(stdout, "%-6s %-7s %-24s %-12s %-28s %6s %4s %-20s %-8s %s",
                         str_of(o, "id", b[3], 48), str_of(o, "state", b[4], 48),
                         str_of(app, "name", b[5], 48), str_of(app, "version", b[6], 48), target,
                         str_of(o, "demand", b[7], 48), str_of(o, "attempts", b[0], 48),
                         str_of(o, "worker", b[1], 48), str_of(o, "psdb_id", b[2], 48),
                         json_is_string(json_object_get(o, "last_error"))
                             ? json_string_value(json_object_get(o, "last_error"))
                             : "");
        fputc('\n', stdout);
    }
    printf("%zu jobs\n\n%-28s %-28s %-24s %9s %10s\n", json_array_size(jobs), "WORKER", "TARGET",
           "LAST SEEN", "JOBS DONE", "MEDIAN S");
    json_array_foreach(workers, i, o)
    {
        json_t *t = json_object_get(o, "target");
        char target[256];
        snprintf(target, sizeof(target), "%s:%s", str_of(t, "family", b[0], 48),
                 str_of(t, "abi_version", b[1], 48));
        tool_printf_safe(stdout, "%-28s %-28s %-24s %9s %10s", str_of(o, "worker", b[2], 48),
                         target, str_of(o, "last_seen", b[3], 48), str_of(o, "jobs_done", b[4], 48),
                         str_of(o, "median_compile_s", b[5], 48));
        fputc('\n', stdout);
    }
    printf("%zu workers\n", json_array_size(workers));
}

int cmd_jobs(int argc, char **argv)
{
    psdb_client_desc cd = {.token = getenv("PSDB_TOKEN")};
    psdb_client *client = NULL;
    const char *state = NULL;
    char *text = NULL;
    size_t size = 0;
    int json = 0, rc = 1;
    json_t *doc = NULL;
    if (tool_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (has && tool_server_option(a, argv[i + 1], &cd))
            i++;
        else if (strcmp(a, "--state") == 0 && has)
            state = argv[++i];
        else if (strcmp(a, "--json") == 0)
            json = 1;
        else
            return tool_fail("jobs", "unexpected argument '%s' (see --help)", a);
    }
    if (!cd.server_url)
        return tool_fail("jobs", "--server is required");
    if (state && strcmp(state, "queued") != 0 && strcmp(state, "leased") != 0 &&
        strcmp(state, "done") != 0 && strcmp(state, "failed") != 0 && strcmp(state, "held") != 0)
        return tool_fail("jobs", "unknown --state '%s' (queued, leased, done, failed, held)",
                         state);
    if (PSDB_FAILED(psdb_client_create(&cd, &client))) {
        tool_fail("jobs", "%s", psdb_error_last());
        goto cleanup;
    }
    if (PSDB_FAILED(psdb_client_farm_jobs(client, state, &text, &size))) {
        tool_fail("jobs", "%s", psdb_client_last_error(client));
        goto cleanup;
    }
    doc = json_loadb(text, size, 0, NULL);
    if (!doc) {
        tool_fail("jobs", "the server's answer is not JSON");
        goto cleanup;
    }
    if (json) {
        tool_json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        fputc('\n', stdout);
    } else {
        print_table(doc);
    }
    rc = 0;
cleanup:
    json_decref(doc);
    free(text);
    psdb_client_release(client);
    return rc;
}
