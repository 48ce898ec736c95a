/* cmd_coverage.c - psdb coverage: which families and ABI ranges psdbd covers for an application,
 * and the ones clients asked for that resolve to nothing (GET /v1/stats/coverage). */
#include "tool.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static const char usage_text[] =
    "usage: psdb coverage --server URL --app NAME [--json] [--token T] [--ca-file F]\n"
    "                     [--pinned-key sha256//BASE64]\n"
    "\n"
    "Lists what psdbd covers for one application: each family with the ranges of\n"
    "consecutive ABI versions it has PSDBs for (the active serial, size, publish time and\n"
    "signer of the PSDB a resolve picks), then what clients asked for on resolves that\n"
    "found nothing and that still resolve to nothing: family, ABI range, profile version,\n"
    "requests and the last day seen, most asked first. Demand counts reach the server's\n"
    "reports every flush interval (psdbd stats-flush-interval).\n"
    "--json prints the server's answer (schema/HTTP.md, GET /v1/stats/coverage).\n"
    "The transfer is the launcher's (psdb_client_coverage): --ca-file and --pinned-key as\n"
    "for psdb install, transient failures retried with backoff.\n"
    "--token may also come from $PSDB_TOKEN. Exit status 0 on an answer, 3 when the server\n"
    "knows nothing of the application, 1 on other failures, 2 on bad arguments.\n";

static void print_table(const json_t *doc)
{
    const json_t *covered = json_object_get(doc, "covered");
    const json_t *missing = json_object_get(doc, "missing");
    const json_t *v;
    size_t i;
    tool_printf_safe(stdout, "application %s", json_string_value(json_object_get(doc, "app")));
    fputc('\n', stdout);
    printf("\ncovered (%zu):\n", json_array_size(covered));
    if (json_array_size(covered))
        printf("  %-24s %-13s %6s %8s %12s  %-20s  %s\n", "family", "ABI", "psdbs", "serial",
               "bytes", "published", "signer");
    json_array_foreach(covered, i, v)
    {
        char abi[48];
        snprintf(abi, sizeof(abi), "%lld-%lld",
                 (long long)json_integer_value(json_object_get(v, "abi_min")),
                 (long long)json_integer_value(json_object_get(v, "abi_max")));
        tool_printf_safe(stdout, "  %-24s %-13s %6lld %8lld %12lld  %-20s  %.16s",
                         json_string_value(json_object_get(v, "family")), abi,
                         (long long)json_integer_value(json_object_get(v, "psdbs")),
                         (long long)json_integer_value(json_object_get(v, "active_serial")),
                         (long long)json_integer_value(json_object_get(v, "size")),
                         json_string_value(json_object_get(v, "published_at")),
                         json_string_value(json_object_get(v, "signer")));
        fputc('\n', stdout);
    }
    printf("\nmissing (%zu):\n", json_array_size(missing));
    if (json_array_size(missing))
        printf("  %-24s %-13s %-12s %9s  %s\n", "family", "ABI", "profile", "requests",
               "last seen");
    json_array_foreach(missing, i, v)
    {
        char abi[48];
        const char *profile = json_string_value(json_object_get(v, "profile_version"));
        snprintf(abi, sizeof(abi), "%lld-%lld",
                 (long long)json_integer_value(json_object_get(v, "abi_min")),
                 (long long)json_integer_value(json_object_get(v, "abi_max")));
        tool_printf_safe(stdout, "  %-24s %-13s %-12s %9lld  %s",
                         json_string_value(json_object_get(v, "family")), abi,
                         profile ? profile : "any",
                         (long long)json_integer_value(json_object_get(v, "requests")),
                         json_string_value(json_object_get(v, "last_seen")));
        fputc('\n', stdout);
    }
}

int cmd_coverage(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},
        {"app", required_argument, NULL, 'a'},
        {"token", required_argument, NULL, 't'},
        {"ca-file", required_argument, NULL, 'c'},
        {"pinned-key", required_argument, NULL, 'P'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *server = NULL, *app = NULL, *token = NULL, *ca = NULL, *pinned = NULL;
    int json = 0, c, rc = 1;
    psdb_client *client = NULL;
    char *answer = NULL;
    size_t answer_size = 0;
    json_t *doc = NULL;
    json_error_t jerr;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            server = optarg;
            break;
        case 'a':
            app = optarg;
            break;
        case 't':
            token = optarg;
            break;
        case 'c':
            ca = optarg;
            break;
        case 'P':
            pinned = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        default:
            fputs(usage_text, stderr);
            return 2;
        }
    }
    if (!server || !app || optind != argc) {
        fprintf(stderr, "psdb coverage: --server and --app are required (see --help)\n");
        return 2;
    }
    if (!*app)
        return tool_fail("coverage", "--app: empty application name");
    if (tool_bad_name("coverage", "--app", app))
        return 1;
    if (strncmp(server, "http://", 7) != 0 && strncmp(server, "https://", 8) != 0)
        return tool_fail("coverage", "--server: not an http:// or https:// URL: '%s'", server);
    if (!token)
        token = getenv("PSDB_TOKEN");
    psdb_client_desc cd = {.server_url = server,
                           .token = token && *token ? token : NULL,
                           .ca_file = ca,
                           .pinned_public_key = pinned};
    psdb_hr hr = psdb_client_create(&cd, &client);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("coverage", "%s", psdb_error_last());
        goto cleanup;
    }
    hr = psdb_client_coverage(client, app, &answer, &answer_size);
    if (hr == PSDB_E_NOT_FOUND) {
        rc = 3;
        tool_fail("coverage", "the server has no PSDBs and no recorded demand for '%s' (%s)", app,
                  psdb_client_last_error(client));
        goto cleanup;
    }
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("coverage", "%s", psdb_client_last_error(client));
        goto cleanup;
    }
    doc = json_loadb(answer, answer_size, 0, &jerr);
    if (!doc) {
        rc = tool_fail("coverage", "the answer is not JSON: %s", jerr.text);
        goto cleanup;
    }
    if (json) {
        if (tool_json_dumpf(doc, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0) {
            rc = tool_fail("coverage", "cannot write the answer");
            goto cleanup;
        }
        fputc('\n', stdout);
    } else {
        print_table(doc);
    }
    rc = fflush(stdout) == 0 ? 0 : tool_fail("coverage", "write stdout failed");
cleanup:
    json_decref(doc);
    free(answer);
    psdb_client_release(client);
    return rc;
}
