/* client.c - the delivery client handle: options, trusted keys, the last error. */
#include "delivery/client_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
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

struct psdb__curl_share {
    CURLSH *sh;
    pthread_mutex_t locks[CURL_LOCK_DATA_LAST]; /* one per kind of shared data */
    atomic_uint refs;
};

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ctx)
{
    (void)h;
    (void)access; /* libcurl's shared data has no readers-only access worth a rwlock here */
    psdb__curl_share *s = ctx;
    pthread_mutex_lock(&s->locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
    (void)h;
    psdb__curl_share *s = ctx;
    pthread_mutex_unlock(&s->locks[data]);
}

static void share_unref(psdb__curl_share *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    /* Every easy handle is cleaned up when its transfer ends, so none is attached any more. */
    curl_share_cleanup(s->sh);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&s->locks[i]);
    free(s);
}

static psdb_hr share_new(psdb__curl_share **out)
{
    psdb__curl_share *s = calloc(1, sizeof(*s));
    int n = 0;
    *out = NULL;
    if (!s)
        return PSDB_E_OUTOFMEMORY;
    for (; n < CURL_LOCK_DATA_LAST; n++)
        if (pthread_mutex_init(&s->locks[n], NULL) != 0)
            break;
    s->sh = n == CURL_LOCK_DATA_LAST ? curl_share_init() : NULL;
    if (!s->sh || curl_share_setopt(s->sh, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
        curl_share_setopt(s->sh, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
        curl_share_setopt(s->sh, CURLSHOPT_USERDATA, s) != CURLSHE_OK ||
        curl_share_setopt(s->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK ||
        curl_share_setopt(s->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        curl_share_setopt(s->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK) {
        if (s->sh)
            curl_share_cleanup(s->sh);
        while (n-- > 0)
            pthread_mutex_destroy(&s->locks[n]);
        free(s);
        return PSDB_E_OUTOFMEMORY;
    }
    atomic_init(&s->refs, 1);
    *out = s;
    return PSDB_S_OK;
}

CURLSH *psdb__curl_share_handle(const psdb__curl_share *s)
{
    return s->sh;
}

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
    /* Reference counted, and thread-safe in the libcurl Debian 12 ships (7.88, CURL_VERSION_
     * THREADSAFE); balanced by psdb_client_release. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return psdb__error_set(PSDB_E_FAIL, "psdb_client_create: libcurl did not initialise");
    c = calloc(1, sizeof(*c));
    if (!c) {
        curl_global_cleanup();
        return psdb__error_set(PSDB_E_OUTOFMEMORY, "psdb_client_create: out of memory");
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
    if (desc->share_connections_with) {
        c->share = desc->share_connections_with->share;
        atomic_fetch_add(&c->share->refs, 1);
    } else {
        hr = share_new(&c->share);
        if (PSDB_FAILED(hr))
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
    share_unref(c->share);
    free(c);
    curl_global_cleanup();
}

const char *psdb_client_last_error(const psdb_client *c)
{
    return c ? c->error : "";
}
