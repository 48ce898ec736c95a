/* client.c - the delivery client handle: options, trusted keys, the last error. */
#include "delivery/client_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "registry/install.h"
#include "delivery/publish.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/status_map.h"

void psdb__client_error(psdb_client *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof(c->error), fmt, ap);
    va_end(ap);
    /* The client's message is also the thread's last error (psdb_error_last). */
    psdb__error_set(PSDB_E_FAIL, "%s", c->error);
}

psdb_hr psdb_client_create(const psdb_client_desc *desc, psdb_client **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_client *c = NULL;

    if (!out)
        return PSDB_E_INVALIDARG;
    *out = NULL;
    if (!desc || !desc->server_url ||
        (strncmp(desc->server_url, "http://", 7) != 0 &&
         strncmp(desc->server_url, "https://", 8) != 0) ||
        (desc->num_trusted_keys && !desc->trusted_keys))
        return PSDB_E_INVALIDARG;
    /* Reference counted, and thread-safe in the libcurl Debian 12 ships (7.88, CURL_VERSION_
     * THREADSAFE); balanced by psdb_client_release. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return PSDB_E_FAIL;
    c = calloc(1, sizeof(*c));
    if (!c) {
        curl_global_cleanup();
        return PSDB_E_OUTOFMEMORY;
    }
    c->server_url = psdb__strdup(desc->server_url);
    c->token = psdb__strdup(desc->token);
    c->ca_file = psdb__strdup(desc->ca_file);
    c->pinned_public_key = psdb__strdup(desc->pinned_public_key);
    if (!c->server_url || (desc->token && !c->token) || (desc->ca_file && !c->ca_file) ||
        (desc->pinned_public_key && !c->pinned_public_key)) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    size_t n = strlen(c->server_url);
    while (n > 0 && c->server_url[n - 1] == '/')
        c->server_url[--n] = '\0';
    c->connect_timeout_ms = desc->connect_timeout_ms ? desc->connect_timeout_ms : 10000;
    c->low_speed_timeout_s = desc->low_speed_timeout_s ? desc->low_speed_timeout_s : 30;
    c->max_retries = desc->max_retries ? desc->max_retries : 5;
    c->retry_base_ms = desc->retry_base_ms ? desc->retry_base_ms : 200;
    c->progress = desc->progress;
    c->progress_cancel = desc->progress_cancel;
    c->progress_ctx = desc->progress_ctx;
    c->max_recv_bytes_per_second = desc->max_recv_bytes_per_second;
    if (desc->num_trusted_keys) {
        c->keys = calloc(desc->num_trusted_keys, sizeof(*c->keys));
        if (!c->keys) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
    }
    for (uint32_t i = 0; i < desc->num_trusted_keys; i++) {
        /* A trusted key is a public key: a private one given here is a mistake to report, not a
         * key to use (it would verify, and the publisher's secret would sit on players' machines).
         */
        hr = psdb_key_load_kind(desc->trusted_keys[i], PSDB_KEY_PUBLIC, &c->keys[i], NULL, 0);
        if (hr == PSDB_E_ACCESS)
            hr = PSDB_E_IO;
        if (PSDB_FAILED(hr))
            goto cleanup;
        c->num_keys++;
    }
    *out = c;
    c = NULL;
cleanup:
    psdb_client_release(c);
    return hr;
}

void psdb_client_release(psdb_client *c)
{
    if (!c)
        return;
    free(c->server_url);
    free(c->token);
    free(c->ca_file);
    free(c->pinned_public_key);
    for (uint32_t i = 0; i < c->num_keys; i++)
        psdb_key_release(c->keys[i]);
    free(c->keys);
    free(c);
    curl_global_cleanup();
}

const char *psdb_client_last_error(const psdb_client *c)
{
    return c ? c->error : "";
}
