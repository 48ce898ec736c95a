/* client.c - the delivery client handle: options, trusted keys, its view of the last error. */
#include "delivery/client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/parse.h"

psdb_hr psdb__client_ret(psdb_client *c, psdb_hr hr, unsigned mark, const char *what)
{
    hr = psdb__error_ret(hr, mark, what);
    if (c)
        snprintf(c->last_error, sizeof(c->last_error), "%s",
                 PSDB_FAILED(hr) ? psdb_error_last() : "");
    return hr;
}

psdb_hr psdb_client_create(const psdb_client_desc *desc, psdb_client **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_client *c = NULL;

    if (!out)
        return psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_create: NULL out");
    *out = NULL;
    if (!desc || !desc->server_url)
        return psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_create: no server_url");
    if (strncmp(desc->server_url, "http://", 7) != 0 &&
        strncmp(desc->server_url, "https://", 8) != 0)
        return psdb__error_set(PSDB_E_INVALIDARG,
                               "psdb_client_create: server_url must begin with http:// or "
                               "https://");
    if (desc->num_trusted_keys && !desc->trusted_keys)
        return psdb__error_set(PSDB_E_INVALIDARG,
                               "psdb_client_create: num_trusted_keys is %u but trusted_keys is "
                               "NULL",
                               desc->num_trusted_keys);
    c = calloc(1, sizeof(*c));
    if (!c)
        return psdb__error_set(PSDB_E_OUTOFMEMORY, "psdb_client_create: out of memory");
    c->server_url = psdb__strdup(desc->server_url);
    c->token = psdb__strdup(desc->token);
    c->ca_file = psdb__strdup(desc->ca_file);
    c->pinned_public_key = psdb__strdup(desc->pinned_public_key);
    if (!c->server_url || (desc->token && !c->token) || (desc->ca_file && !c->ca_file) ||
        (desc->pinned_public_key && !c->pinned_public_key)) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = psdb__share_open(desc->share_connections_with ? desc->share_connections_with->share : NULL,
                          &c->share);
    if (PSDB_FAILED(hr))
        goto cleanup;
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
    return psdb__error_ret(hr, err_mark, __func__);
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
    psdb__share_close(c->share);
    free(c);
}

const char *psdb_client_last_error(const psdb_client *c)
{
    return c ? c->last_error : "";
}
