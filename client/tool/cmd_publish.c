/* cmd_publish.c - `psdb publish`: sign a PSDB's statement and upload it to psdbd. */
#include "tool.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static void usage(void)
{
    printf("usage: psdb publish --server URL --token T --key KEYFILE [--serial N] [--ca-file FILE] "
           "[--json] FILE.psdb|FILE.sodb\n\n"
           "Signs the PSDB's statement (digest, size, identity, target, serial; see\n"
           "schema/STATEMENT.md) with KEYFILE and uploads the file to psdbd (POST /v1/psdbs).\n"
           "An SODB (the kind comes from the file, not its name) is signed with the SODB\n"
           "statement (digest, size, identity, serial) and uploaded to POST /v1/sodbs, for the\n"
           "compile farm's workers (psdb worker); its statement always goes in the headers.\n"
           "Prints the manifest the server answers. --token may also come from $PSDB_TOKEN.\n"
           "--serial defaults to 1. --ca-file: a PEM CA bundle for https (default: the\n"
           "system's). Exit status 0 when the PSDB is published (or was already).\n\n"
           "The file is hashed while it is sent and the statement goes in the trailer of the\n"
           "chunked upload (schema/HTTP.md), when a first one-byte request shows that trailers\n"
           "reach psdbd; else (a proxy that drops them, such as nginx, or an older psdbd) it is\n"
           "hashed first and the statement sent in the headers. PSDB_PUBLISH_STATEMENT=header\n"
           "or =trailer forces one form (default: auto).\n");
}

int cmd_publish(int argc, char **argv)
{
    psdb_publish_desc d = {.serial = 1};
    psdb_client_desc cd = {.token = getenv("PSDB_TOKEN")};
    psdb_client *client = NULL;
    psdb_publish_result *res = NULL;
    int json = 0, rc = 1;
    long status = 0;
    json_t *doc = NULL;
    psdb_hr hr;
    if (tool_wants_help(argc, argv)) {
        usage();
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (has && tool_server_option(a, argv[i + 1], &cd))
            i++;
        else if (strcmp(a, "--key") == 0 && has)
            d.key_path = argv[++i];
        else if (strcmp(a, "--serial") == 0 && has) {
            if (psdb__parse_u64(argv[++i], &d.serial) != 0)
                return tool_fail("publish", "bad --serial '%s'", argv[i]);
        } else if (strcmp(a, "--json") == 0)
            json = 1;
        else if (a[0] == '-' || d.psdb_path)
            return tool_fail("publish", "unexpected argument '%s' (see --help)", a);
        else
            d.psdb_path = a;
    }
    if (!cd.server_url || !cd.token || !d.key_path || !d.psdb_path)
        return tool_fail("publish",
                         "--server, --token, --key and FILE.psdb (or FILE.sodb) are required");
    hr = psdb_client_create(&cd, &client);
    if (PSDB_FAILED(hr)) {
        tool_fail("publish", "bad --server '%s': %s", cd.server_url,
                  hr == PSDB_E_INVALIDARG ? "not an http:// or https:// URL" : psdb_hr_str(hr));
        goto cleanup;
    }
    hr = psdb_client_publish(client, &d, &res);
    status = res ? res->http_status : 0;
    doc = res && res->body ? json_loads(res->body, 0, NULL) : NULL;
    if (PSDB_FAILED(hr)) {
        const char *m = json_string_value(json_object_get(doc, "message"));
        const char *e = json_string_value(json_object_get(doc, "error"));
        if (m)
            tool_fail("publish", "server refused (%ld %s): %s", status, e ? e : "", m);
        else
            tool_fail("publish", "%s", res && res->message[0] ? res->message : psdb_hr_str(hr));
        goto cleanup;
    }
    if (!doc) {
        tool_fail("publish", "the server's answer is not JSON");
        goto cleanup;
    }
    if (json) {
        tool_json_dumpf(doc, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    } else {
        tool_printf_safe(stdout, "%s id %lld sha256 %s serial %lld",
                         hr == PSDB_S_OK ? "published" : "already published",
                         (long long)json_integer_value(json_object_get(doc, "id")),
                         json_string_value(json_object_get(doc, "sha256")),
                         (long long)json_integer_value(json_object_get(doc, "serial")));
        fputc('\n', stdout);
    }
    rc = 0;
cleanup:
    json_decref(doc);
    psdb_publish_result_free(res);
    psdb_client_release(client);
    return rc;
}
