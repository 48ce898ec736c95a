/* cmd_coverage.c - psdb coverage: which families and ABI ranges psdbd covers for an application,
 * and the ones clients asked for that resolve to nothing (GET /v1/stats/coverage). */
#include "tool.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

static const char usage_text[] =
    "usage: psdb coverage --server URL --app NAME [--json] [--token T] [--ca-file F]\n"
    "\n"
    "Lists what psdbd covers for one application: each family with the ranges of\n"
    "consecutive ABI versions it has PSDBs for (the active serial, size, publish time and\n"
    "signer of the PSDB a resolve picks), then what clients asked for on resolves that\n"
    "found nothing and that still resolve to nothing: family, ABI range, profile version,\n"
    "requests and the last day seen, most asked first. Demand counts reach the server's\n"
    "reports every flush interval (psdbd stats-flush-interval).\n"
    "--json prints the server's answer (schema/HTTP.md, GET /v1/stats/coverage).\n"
    "--token may also come from $PSDB_TOKEN. Exit status 0 on an answer, 3 when the server\n"
    "knows nothing of the application, 1 on other failures, 2 on bad arguments.\n";

#define MAX_ANSWER (64u << 20) /* a coverage answer is small; anything this large is not one */

struct body {
    char *data;
    size_t len;
    int too_big;
};

static size_t on_data(char *p, size_t size, size_t n, void *ctx)
{
    struct body *b = ctx;
    size_t add = size * n;
    if (add > MAX_ANSWER - b->len) {
        b->too_big = 1;
        return 0;
    }
    char *grown = realloc(b->data, b->len + add + 1);
    if (!grown)
        return 0;
    memcpy(grown + b->len, p, add);
    b->data = grown;
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}

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
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *server = NULL, *app = NULL, *token = NULL, *ca = NULL;
    int json = 0, c, rc = 1;
    CURL *curl = NULL;
    char *esc = NULL, *url = NULL, *auth = NULL, errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *headers = NULL;
    struct body b = {0};
    json_t *doc = NULL;
    json_error_t jerr;
    long status = 0;
    CURLcode cc;

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
    if (strncmp(server, "http://", 7) != 0 && strncmp(server, "https://", 8) != 0)
        return tool_fail("coverage", "--server: not an http:// or https:// URL: '%s'", server);
    if (!token)
        token = getenv("PSDB_TOKEN");
    if (!(curl = curl_easy_init())) {
        rc = tool_fail("coverage", "curl_easy_init failed");
        goto cleanup;
    }
    if (!(esc = curl_easy_escape(curl, app, 0))) {
        rc = tool_fail("coverage", "out of memory");
        goto cleanup;
    }
    size_t n = strlen(server);
    while (n > 0 && server[n - 1] == '/')
        n--;
    if (asprintf(&url, "%.*s/v1/stats/coverage?app=%s", (int)n, server, esc) < 0) {
        url = NULL;
        rc = tool_fail("coverage", "out of memory");
        goto cleanup;
    }
    if (token && *token) {
        if (asprintf(&auth, "Authorization: Bearer %s", token) < 0 ||
            !(headers = curl_slist_append(NULL, auth))) {
            rc = tool_fail("coverage", "out of memory");
            goto cleanup;
        }
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (ca)
        curl_easy_setopt(curl, CURLOPT_CAINFO, ca);
    if ((cc = curl_easy_perform(curl)) != CURLE_OK) {
        rc = tool_fail("coverage", "GET %s: %s", url,
                       b.too_big   ? "the answer is larger than 64 MiB"
                       : errbuf[0] ? errbuf
                                   : curl_easy_strerror(cc));
        goto cleanup;
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    doc = b.data ? json_loadb(b.data, b.len, 0, &jerr) : NULL;
    if (status != 200) {
        const char *msg = json_string_value(json_object_get(doc, "message"));
        rc = status == 404 ? 3 : 1;
        if (status == 404 && msg && strstr(msg, "application"))
            tool_fail("coverage", "the server has no PSDBs and no recorded demand for '%s'", app);
        else
            tool_fail("coverage", "GET %s: HTTP %ld%s%s", url, status, msg ? ": " : "",
                      msg ? msg : "");
        goto cleanup;
    }
    if (!json_is_object(doc) || !json_is_array(json_object_get(doc, "covered")) ||
        !json_is_array(json_object_get(doc, "missing"))) {
        rc = tool_fail("coverage", "GET %s: the answer is not a coverage report%s%s", url,
                       doc ? "" : ": ", doc ? "" : jerr.text);
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
    free(b.data);
    curl_slist_free_all(headers);
    free(auth);
    free(url);
    curl_free(esc);
    if (curl)
        curl_easy_cleanup(curl);
    return rc;
}
