/* coverage.c - psdb_client_coverage: GET /v1/stats/coverage through the client's transport. */
#include "delivery/client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
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
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__buf body = {0};
    char *url = NULL, *e_app = NULL, *msg = NULL;
    json_t *doc = NULL;
    json_error_t jerr;
    long status = 0;

    if (!c || !app || !*app || !json || !size) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_coverage: %s",
                             !c      ? "NULL client"
                             : !app  ? "NULL app"
                             : !*app ? "empty app name"
                                     : "NULL out");
        goto cleanup;
    }
    *json = NULL;
    *size = 0;
    e_app = psdb__url_escape(app);
    if (!e_app || asprintf(&url, "%s/v1/stats/coverage?app=%s", c->server_url, e_app) < 0) {
        url = NULL;
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "coverage: out of memory");
        goto cleanup;
    }
    hr = psdb__transport_get(c, "coverage", url, COVERAGE_MAX_BYTES, &body, &status);
    if (PSDB_FAILED(hr)) {
        /* The server says why in its answer: the application unknown, the token's scope. */
        if (status != 0 && (msg = answer_message(&body)) != NULL)
            psdb__error_set(hr, "coverage: %s answered HTTP %ld: %s", c->server_url, status, msg);
        goto cleanup;
    }
    doc = json_loadb((const char *)body.data, body.len, 0, &jerr);
    if (!json_is_object(doc) || !json_is_array(json_object_get(doc, "covered")) ||
        !json_is_array(json_object_get(doc, "missing"))) {
        hr = psdb__error_set(PSDB_E_PROTOCOL,
                             "coverage: the server's answer is not a coverage report%s%s",
                             doc ? "" : ": ", doc ? "" : jerr.text);
        goto cleanup;
    }
    *json = malloc(body.len + 1);
    if (!*json) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "coverage: out of memory");
        goto cleanup;
    }
    memcpy(*json, body.data, body.len);
    (*json)[body.len] = '\0';
    *size = body.len;
cleanup:
    json_decref(doc);
    free(msg);
    free(url);
    free(e_app);
    psdb__buf_free(&body);
    return psdb__client_ret(c, hr, err_mark, __func__);
}
