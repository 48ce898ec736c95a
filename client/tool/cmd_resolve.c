/* cmd_resolve.c - psdb resolve: ask psdbd which PSDB fits one target. */
#include "tool.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "psdb/client.h"
#include "common/buf.h"
#include "common/hash.h"

static const char usage_text[] =
    "usage: psdb resolve --server URL --app NAME --app-version V --family F\n"
    "                    --abi-min A --abi-max B [--profile-version V] [--token T] [--ca-file F]\n"
    "                    [--json]\n"
    "\n"
    "Asks psdbd for the best PSDB for one adapter target: same family, ABI in [A, B], profile\n"
    "version's top 32 bits equal when given; the larger ABI, then profile, then serial wins.\n"
    "Prints the manifest; exits 3 when no PSDB fits.\n";

/* Prints a manifest: the server's JSON as served, or one line of text. */
void tool_print_manifest(const psdb_manifest *m, int json)
{
    char sha[65];
    if (json) {
        /* The server's JSON, re-encoded with every non-ASCII character as \uXXXX: jansson
         * writes DEL and C1 controls raw otherwise. */
        json_t *doc = json_loads(m->json, 0, NULL);
        if (!doc || tool_json_dumpf(doc, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER))
            fputs("{}", stdout);
        fputc('\n', stdout);
        json_decref(doc);
        return;
    }
    psdb__hex(m->sha256, 32, sha);
    tool_printf_safe(stdout, "%s  %s:%llu  serial %llu  %llu bytes  sha256 %s", m->id,
                     m->target.family, (unsigned long long)m->target.abi_version,
                     (unsigned long long)m->serial, (unsigned long long)m->size, sha);
    fputc('\n', stdout);
}

int cmd_resolve(int argc, char **argv)
{
    static const struct option opts[] = {
        {"server", required_argument, NULL, 's'},
        {"app", required_argument, NULL, 'a'},
        {"app-version", required_argument, NULL, 'v'},
        {"family", required_argument, NULL, 'f'},
        {"abi-min", required_argument, NULL, 'm'},
        {"abi-max", required_argument, NULL, 'M'},
        {"profile-version", required_argument, NULL, 'p'},
        {"token", required_argument, NULL, 't'},
        {"ca-file", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *server = NULL, *app = NULL, *family = NULL, *token = NULL, *ca = NULL;
    uint64_t version = 0, abi_min = 0, abi_max = 0, profile = 0;
    int have_version = 0, have_min = 0, have_max = 0, json = 0, c;
    psdb_client *client = NULL;
    psdb_manifest *m = NULL;
    int rc = 1;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            server = optarg;
            break;
        case 'a':
            app = optarg;
            break;
        case 'f':
            family = optarg;
            break;
        case 't':
            token = optarg;
            break;
        case 'c':
            ca = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'v':
            if (psdb__parse_version(optarg, &version) != 0)
                return tool_fail("resolve", "--app-version: not a version: '%s'", optarg);
            have_version = 1;
            break;
        case 'm':
            if (psdb__parse_u64(optarg, &abi_min) != 0)
                return tool_fail("resolve", "--abi-min: not a number: '%s'", optarg);
            have_min = 1;
            break;
        case 'M':
            if (psdb__parse_u64(optarg, &abi_max) != 0)
                return tool_fail("resolve", "--abi-max: not a number: '%s'", optarg);
            have_max = 1;
            break;
        case 'p':
            if (psdb__parse_version(optarg, &profile) != 0)
                return tool_fail("resolve", "--profile-version: not a version: '%s'", optarg);
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        default:
            fputs(usage_text, stderr);
            return 2;
        }
    }
    if (!server || !app || !family || !have_version || !have_min || !have_max || optind != argc)
        return tool_fail("resolve", "--server, --app, --app-version, --family, --abi-min and "
                                    "--abi-max are required (see --help)");
    if (strlen(family) >= PSDB_ADAPTER_FAMILY_MAX)
        return tool_fail("resolve", "--family: longer than %d bytes", PSDB_ADAPTER_FAMILY_MAX - 1);
    if (tool_bad_name("resolve", "--app", app) || tool_bad_name("resolve", "--family", family))
        return 1;
    if (!token)
        token = getenv("PSDB_TOKEN");
    psdb_client_desc cd = {.server_url = server, .token = token, .ca_file = ca};
    psdb_hr hr = psdb_client_create(&cd, &client);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("resolve", "client: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_app_desc ad = {.name = app, .version = version};
    psdb_precompile_target t = {.abi_min = abi_min, .abi_max = abi_max, .profile_version = profile};
    snprintf(t.family, sizeof(t.family), "%s", family);
    hr = psdb_client_resolve(client, &ad, &t, &m);
    if (hr == PSDB_E_NOT_FOUND) {
        rc = 3;
        tool_fail("resolve", "no PSDB for %s on %s ABI %llu-%llu", app, family,
                  (unsigned long long)abi_min, (unsigned long long)abi_max);
        goto cleanup;
    }
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("resolve", "%s", psdb_client_last_error(client));
        goto cleanup;
    }
    tool_print_manifest(m, json);
    rc = 0;
cleanup:
    psdb_manifest_free(m);
    psdb_client_release(client);
    return rc;
}
