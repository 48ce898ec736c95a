/* resolve.c - transfers (curl handles, retries with backoff) and psdb_client_resolve. */
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
#include "common/fdio.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"
#include "common/parse.h"
#include "common/status_map.h"

#define RESOLVE_MAX_BYTES (1u << 20) /* a manifest is small; anything larger is garbage */

/* ---- transfers ----------------------------------------------------------------------------------
 */

/* A handle with the project's defaults (psdb__curl_new) and this client's TLS and timeouts. */
CURL *psdb__client_new_handle(psdb_client *c, const char *url, struct curl_slist **headers)
{
    CURL *h = psdb__curl_new(url, c->token, c->curl_error, headers);
    if (!h)
        return NULL;
    /* Connections, DNS answers and TLS sessions outlive the handle in the client's share, so
     * the next transfer to the same server reuses the connection. */
    curl_easy_setopt(h, CURLOPT_SHARE, psdb__curl_share_handle(c->share));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
    /* A transfer slower than 1 KiB/s (or half the bandwidth limit, when that is lower) for the
     * low-speed time is cut. */
    uint64_t low = 1024;
    if (c->max_recv_bytes_per_second && c->max_recv_bytes_per_second / 2 < low)
        low = c->max_recv_bytes_per_second / 2 ? c->max_recv_bytes_per_second / 2 : 1;
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, (long)low);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->low_speed_timeout_s);
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->pinned_public_key)
        curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, c->pinned_public_key);
    /* No CURLOPT_MAX_RECV_SPEED_LARGE: libcurl averages it over seconds and lets whatever the
     * socket buffers hold through at once (a 4 MB file at 100 KiB/s arrived in 0.7 s on loopback);
     * the write callbacks pace every transfer with psdb__client_pace instead. */
    /* Proxies: nothing here sets CURLOPT_PROXY or CURLOPT_NOPROXY, so libcurl reads http_proxy,
     * https_proxy, all_proxy and no_proxy from the environment as curl(1) does. */
    return h;
}

static double seconds_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

int psdb__client_pace(psdb_client *c, size_t n, const psdb_progress *p)
{
    if (!c->max_recv_bytes_per_second)
        return 0;
    double rate = (double)c->max_recv_bytes_per_second, burst = rate / 8;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!c->pace_started) {
        c->pace_tokens = burst;
        c->pace_started = 1;
    } else {
        c->pace_tokens += rate * seconds_between(&c->pace_at, &now);
    }
    if (c->pace_tokens > burst)
        c->pace_tokens = burst; /* idle time does not save up for a later burst */
    c->pace_at = now;
    c->pace_tokens -= (double)n;
    while (c->pace_tokens < 0) {
        double wait = -c->pace_tokens / rate;
        if (wait > 0.1)
            wait = 0.1;
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        clock_gettime(CLOCK_MONOTONIC, &now);
        c->pace_tokens += rate * seconds_between(&c->pace_at, &now);
        c->pace_at = now;
        if (psdb__client_should_stop(c, p))
            return 1;
    }
    return 0;
}

int psdb__client_should_stop(const psdb_client *c, const psdb_progress *p)
{
    return c->progress_cancel && c->progress_cancel(p, c->progress_ctx) != 0;
}

int psdb__client_transient_curl(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_COULDNT_RESOLVE_HOST:
        return 1;
    default:
        return 0;
    }
}

int psdb__client_backoff(const psdb_client *c, const psdb_progress *p, uint32_t attempt)
{
    uint64_t ms = (uint64_t)c->retry_base_ms << (attempt > 10 ? 10 : attempt - 1);
    if (ms > 10000)
        ms = 10000;
    /* In 100 ms slices, so that a cancel is not held up by a backoff of up to 10 s. */
    while (ms > 0) {
        if (psdb__client_should_stop(c, p))
            return 1;
        uint64_t slice = ms < 100 ? ms : 100;
        struct timespec ts = {0, (long)slice * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        ms -= slice;
    }
    return psdb__client_should_stop(c, p);
}

/* The transfer callback of a small GET: asks progress_cancel at most every 100 ms. */
typedef struct get_watch {
    psdb_client *c;
    const char *who;
    uint32_t attempt;
    int cancelled;
    struct timespec last;
} get_watch;

static int get_xfer(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                    curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    get_watch *w = ctx;
    if (!psdb__every_ms(&w->last, 100))
        return 0;
    psdb_progress p = {w->who, 0, 0, w->attempt};
    w->cancelled = psdb__client_should_stop(w->c, &p);
    return w->cancelled;
}

typedef struct mem_sink {
    psdb__buf *buf;
    size_t max;
    int too_big;
} mem_sink;

static size_t mem_write(char *p, size_t size, size_t n, void *ctx)
{
    mem_sink *s = ctx;
    size_t len = size * n;
    if (len > s->max - s->buf->len) {
        s->too_big = 1;
        return 0;
    }
    psdb__buf_append(s->buf, p, len);
    return s->buf->oom ? 0 : len;
}

psdb_hr psdb__client_get(psdb_client *c, const char *who, const char *url, size_t max_bytes,
                         psdb__buf *body, long *status)
{
    psdb_hr hr = PSDB_S_OK;
    CURL *h = NULL;
    struct curl_slist *headers = NULL;
    mem_sink sink = {body, max_bytes, 0};
    get_watch watch = {0};

    *status = 0;
    for (uint32_t attempt = 1;; attempt++) {
        psdb__buf_free(body);
        sink.too_big = 0;
        *status = 0;
        h = psdb__client_new_handle(c, url, &headers);
        if (!h) {
            hr = PSDB_E_OUTOFMEMORY;
            psdb__client_error(c, "%s: out of memory", who);
            goto cleanup;
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mem_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->connect_timeout_ms * 3);
        if (c->progress_cancel) {
            watch.c = c;
            watch.who = who;
            watch.attempt = attempt;
            watch.cancelled = 0;
            curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, get_xfer);
            curl_easy_setopt(h, CURLOPT_XFERINFODATA, &watch);
            curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        }
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
        curl_easy_cleanup(h);
        h = NULL;
        curl_slist_free_all(headers);
        headers = NULL;
        if (rc == CURLE_OK && *status == 200)
            goto cleanup;
        if (rc == CURLE_ABORTED_BY_CALLBACK && watch.cancelled) {
            hr = PSDB_E_CANCELLED;
            psdb__client_error(c, "%s: %s: cancelled by the progress callback", who, c->server_url);
            goto cleanup;
        }
        if (rc == CURLE_WRITE_ERROR && (sink.too_big || body->oom)) {
            hr = body->oom ? PSDB_E_OUTOFMEMORY : PSDB_E_PROTOCOL;
            psdb__client_error(c, "%s: the server's answer is larger than %zu bytes", who,
                               max_bytes);
            goto cleanup;
        }
        int retry =
            rc != CURLE_OK ? psdb__client_transient_curl(rc) : psdb__http_transient(*status);
        if (!retry || attempt > c->max_retries) {
            if (rc != CURLE_OK) {
                hr = PSDB_E_NETWORK;
                psdb__client_error(c, "%s: %s: %s", who, c->server_url, curl_easy_strerror(rc));
            } else {
                hr = psdb__http_hr(*status);
                psdb__client_error(c, "%s: %s answered HTTP %ld", who, c->server_url, *status);
            }
            goto cleanup;
        }
        psdb_progress wait = {who, 0, 0, attempt};
        if (psdb__client_backoff(c, &wait, attempt)) {
            hr = PSDB_E_CANCELLED;
            psdb__client_error(c, "%s: %s: cancelled by the progress callback", who, c->server_url);
            goto cleanup;
        }
    }
cleanup:
    return hr;
}

static char *url_escape(CURL *h, const char *s)
{
    return curl_easy_escape(h, s ? s : "", 0);
}

psdb_hr psdb_client_resolve(psdb_client *c, const psdb_app_desc *app,
                            const psdb_precompile_target *target, psdb_manifest **out)
{
    psdb_hr hr = PSDB_S_OK;
    CURL *h = NULL;
    char *url = NULL, *e_app = NULL, *e_family = NULL;
    psdb__buf body = {0};
    long status = 0;

    if (!c || !app || !app->name || !target || !out)
        return psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_resolve: NULL %s",
                               !c           ? "client"
                               : !app       ? "app"
                               : !app->name ? "app name"
                               : !target    ? "target"
                                            : "out");
    *out = NULL;
    c->error[0] = '\0';
    h = curl_easy_init();
    if (!h)
        return psdb__error_set(PSDB_E_OUTOFMEMORY, "psdb_client_resolve: out of memory");
    e_app = url_escape(h, app->name);
    e_family = url_escape(h, target->family);
    curl_easy_cleanup(h);
    h = NULL;
    if (!e_app || !e_family) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (asprintf(
            &url, "%s/v1/resolve?app=%s&app_version=%llu&family=%s&abi_min=%llu&abi_max=%llu%s",
            c->server_url, e_app, (unsigned long long)app->version, e_family,
            (unsigned long long)target->abi_min, (unsigned long long)target->abi_max, "") < 0) {
        url = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (target->profile_version) {
        char *u2 = NULL;
        if (asprintf(&u2, "%s&profile_version=%llu", url,
                     (unsigned long long)target->profile_version) < 0) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        free(url);
        url = u2;
    }
    hr = psdb__client_get(c, "resolve", url, RESOLVE_MAX_BYTES, &body, &status);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb_manifest_parse((const char *)body.data, body.len, out);
    if (PSDB_FAILED(hr)) {
        psdb__client_error(c, "resolve: the server's answer is not a valid manifest");
        goto cleanup;
    }
    hr = psdb__client_check_request(c, "resolve", *out, app, NULL, target, NULL);
    if (PSDB_FAILED(hr)) {
        psdb_manifest_free(*out);
        *out = NULL;
    }
cleanup:
    curl_free(e_app);
    curl_free(e_family);
    free(url);
    psdb__buf_free(&body);
    return hr;
}
