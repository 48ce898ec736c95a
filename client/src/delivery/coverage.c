/* coverage.c - psdb_client_coverage: GET /v1/stats/coverage with the client's transfers. */
#include "delivery/client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "common/error.h"

#define COVERAGE_MAX_BYTES                                                                         \
    (64u << 20) /* a coverage answer is small; anything this large is not one */

/* The server's one-line reason from an error answer ({"error": ..., "message": ...}), or NULL. */
static char *answer_message(const psdb__buf *body)
{
    json_error_t jerr;
    char *msg = NULL;
    json_t *doc = body->len ? json_loadb((const char *)body->data, body->len, 0, &jerr) : NULL;
    const char *m = json_string_value(json_object_get(doc, "message"));
    if (m)
        msg = strdup(m);
    json_decref(doc);
    return msg;
}

psdb_hr psdb_client_coverage(psdb_client *c, const char *app, char **json, size_t *size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__buf body = {0};
    char *url = NULL, *e_app = NULL, *msg = NULL;
    json_t *doc = NULL;
    json_error_t jerr;
    long status = 0;

    if (!c || !app || !*app || !json || !size)
        return psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_coverage: %s",
                               !c      ? "NULL client"
                               : !app  ? "NULL app"
                               : !*app ? "empty app name"
                                       : "NULL out");
    *json = NULL;
    *size = 0;
    c->error[0] = '\0';
    CURL *h = curl_easy_init();
    if (h)
        e_app = curl_easy_escape(h, app, 0);
    if (h)
        curl_easy_cleanup(h);
    if (!e_app || asprintf(&url, "%s/v1/stats/coverage?app=%s", c->server_url, e_app) < 0) {
        url = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        psdb__client_error(c, "coverage: out of memory");
        goto cleanup;
    }
    hr = psdb__client_get(c, "coverage", url, COVERAGE_MAX_BYTES, &body, &status);
    if (PSDB_FAILED(hr)) {
        /* The server says why in its answer: the application unknown, the token's scope. */
        if (status >= 400 && (msg = answer_message(&body)) != NULL)
            psdb__client_error(c, "coverage: %s answered HTTP %ld: %s", c->server_url, status, msg);
        goto cleanup;
    }
    doc = json_loadb((const char *)body.data, body.len, 0, &jerr);
    if (!json_is_object(doc) || !json_is_array(json_object_get(doc, "covered")) ||
        !json_is_array(json_object_get(doc, "missing"))) {
        hr = PSDB_E_PROTOCOL;
        psdb__client_error(c, "coverage: the server's answer is not a coverage report%s%s",
                           doc ? "" : ": ", doc ? "" : jerr.text);
        goto cleanup;
    }
    *json = malloc(body.len + 1);
    if (!*json) {
        hr = PSDB_E_OUTOFMEMORY;
        psdb__client_error(c, "coverage: out of memory");
        goto cleanup;
    }
    memcpy(*json, body.data, body.len);
    (*json)[body.len] = '\0';
    *size = body.len;
cleanup:
    json_decref(doc);
    free(msg);
    free(url);
    curl_free(e_app);
    psdb__buf_free(&body);
    return hr;
}
