/* transport.c - the delivery client's one HTTP transport: the libcurl handle and share, attempts
 * and backoff, cancel, the bandwidth limit and what a request came to (transport.h). */
#include "delivery/transport.h"

#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "delivery/client_int.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/status_map.h"

#define BACKOFF_MAX_MS 10000u
#define SLICE_MS 100u /* the longest a sleep goes without asking the cancel */

/* ---- the share ------------------------------------------------------------------------------ */

struct psdb__share {
    CURLSH *sh;
    pthread_mutex_t locks[CURL_LOCK_DATA_LAST]; /* one per kind of shared data */
    atomic_uint refs;
};

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ctx)
{
    (void)h;
    (void)access; /* libcurl's shared data has no readers-only access worth a rwlock here */
    psdb__share *s = ctx;
    pthread_mutex_lock(&s->locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
    (void)h;
    psdb__share *s = ctx;
    pthread_mutex_unlock(&s->locks[data]);
}

static psdb_hr share_new(psdb__share **out)
{
    psdb__share *s = calloc(1, sizeof(*s));
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

psdb_hr psdb__share_open(psdb__share *with, psdb__share **out)
{
    psdb_hr hr = PSDB_S_OK;
    *out = NULL;
    /* Reference counted, and thread-safe in the libcurl Debian 12 ships (7.88, CURL_VERSION_
     * THREADSAFE). */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return psdb__error_set(PSDB_E_FAIL, "psdb_client_create: libcurl did not initialise");
    if (with) {
        atomic_fetch_add(&with->refs, 1);
        *out = with;
    } else if (PSDB_FAILED(hr = share_new(out))) {
        curl_global_cleanup();
        psdb__error_set(hr, "psdb_client_create: out of memory");
    }
    return hr;
}

void psdb__share_close(psdb__share *s)
{
    if (!s)
        return;
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        /* Every easy handle is cleaned up when its attempt ends, so none is attached any more. */
        curl_share_cleanup(s->sh);
        for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
            pthread_mutex_destroy(&s->locks[i]);
        free(s);
    }
    curl_global_cleanup();
}

/* ---- time, cancel, backoff and the bandwidth limit --------------------------------------------
 */

static double seconds_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

/* Sleeps about s seconds (at most SLICE_MS); a signal only makes it shorter, and every caller
 * measures the time again afterwards. */
static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int psdb__transport_should_stop(const psdb_client *c, const psdb_progress *p)
{
    return c->progress_cancel && c->progress_cancel(p, c->progress_ctx) != 0;
}

/* Sleeps the backoff after attempt `attempt` (retry_base_ms doubled after each attempt, at most
 * BACKOFF_MAX_MS) in slices that ask the cancel, so that a cancel is not held up by it. 1 when
 * the caller asked to stop, else 0. */
static int backoff(const psdb_client *c, const psdb_progress *p, uint32_t attempt)
{
    uint64_t ms = (uint64_t)c->retry_base_ms << (attempt > 10 ? 10 : attempt - 1);
    struct timespec start, now;
    int stop = 0;
    if (ms > BACKOFF_MAX_MS)
        ms = BACKOFF_MAX_MS;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!(stop = psdb__transport_should_stop(c, p))) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left = (double)ms / 1000.0 - seconds_between(&start, &now);
        if (left <= 0)
            break;
        nap(left < SLICE_MS / 1000.0 ? left : SLICE_MS / 1000.0);
    }
    return stop;
}

/* The client's bandwidth limit, applied to each n bytes received before they are kept: a token
 * bucket of max_recv_bytes_per_second over every transfer of the client, at most an eighth of a
 * second of bytes in a burst, idle time not saved up. Sleeps until the bytes are allowed, in
 * slices that ask the cancel with p. 1 when it asked to stop, else 0. (libcurl's own
 * CURLOPT_MAX_RECV_SPEED_LARGE averages over seconds and lets whatever the socket buffers hold
 * through at once: a 4 MB file at 100 KiB/s arrived in 0.7 s on loopback.) */
static int pace(psdb_client *c, size_t n, const psdb_progress *p)
{
    int stop = 0;
    if (!c->max_recv_bytes_per_second)
        return 0; /* no limit: nothing to keep */
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
        c->pace_tokens = burst;
    c->pace_at = now;
    c->pace_tokens -= (double)n;
    while (c->pace_tokens < 0 && !stop) {
        double wait = -c->pace_tokens / rate;
        nap(wait < SLICE_MS / 1000.0 ? wait : SLICE_MS / 1000.0);
        clock_gettime(CLOCK_MONOTONIC, &now);
        c->pace_tokens += rate * seconds_between(&c->pace_at, &now);
        c->pace_at = now;
        stop = psdb__transport_should_stop(c, p);
    }
    return stop;
}

/* ---- one attempt ------------------------------------------------------------------------------
 */

/* An attempt in flight, for the libcurl callbacks. */
typedef struct xfer {
    psdb_client *c;
    const psdb__request *r;
    psdb__attempt a;
    int cancelled; /* the cancel asked to stop */
    int too_big;   /* the answer was over r->body_max */
    int ended;     /* a hook ended the transfer */
    struct timespec last_progress;
} xfer;

static psdb_progress progress_of(const xfer *x)
{
    psdb_progress p = {x->r->who, 0, 0, 0};
    if (x->r->progress)
        x->r->progress(x->r->ctx, &p);
    p.attempt = x->a.number;
    return p;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
    xfer *x = ctx;
    size_t len = size * n;
    /* The status line of each answer (an interim 100 Continue comes before the final one). */
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        x->a.status = sp ? strtol(sp + 1, NULL, 10) : 0;
    }
    if (x->r->header && x->r->header(x->r->ctx, &x->a, p, len) != 0) {
        x->ended = 1;
        return 0;
    }
    return len;
}

static size_t on_write(char *p, size_t size, size_t n, void *ctx)
{
    xfer *x = ctx;
    size_t len = size * n;
    psdb_progress at = progress_of(x);
    if (pace(x->c, len, &at)) {
        x->cancelled = 1;
        return 0;
    }
    if (x->r->body) {
        if (len > x->r->body_max - x->r->body->len) {
            x->too_big = 1;
            return 0;
        }
        psdb__buf_append(x->r->body, p, len);
        return x->r->body->oom ? 0 : len;
    }
    if (x->r->write && x->r->write(x->r->ctx, &x->a, p, len) != 0) {
        x->ended = 1;
        return 0;
    }
    return len;
}

/* Asks the cancel (and tells the progress callback, for PSDB__REQ_PROGRESS) at most every 100 ms;
 * libcurl calls it at least about once a second even while no byte flows. A non-zero return ends
 * the transfer with CURLE_ABORTED_BY_CALLBACK. */
static int on_xfer(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                   curl_off_t ulnow)
{
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    xfer *x = ctx;
    if (!psdb__every_ms(&x->last_progress, SLICE_MS))
        return 0;
    psdb_progress p = progress_of(x);
    if ((x->r->flags & PSDB__REQ_PROGRESS) && x->c->progress)
        x->c->progress(&p, x->c->progress_ctx);
    x->cancelled = psdb__transport_should_stop(x->c, &p);
    return x->cancelled;
}

static size_t on_read(char *out, size_t size, size_t n, void *ctx)
{
    xfer *x = ctx;
    ssize_t got = x->r->upload->read(x->r->ctx, &x->a, out, size * n);
    if (got < 0) {
        x->ended = 1;
        return CURL_READFUNC_ABORT;
    }
    return (size_t)got;
}

/* libcurl rewinds the body when it must send the request again (a reused connection found
 * closed); only a rewind to the start is ever asked for. */
static int on_seek(void *ctx, curl_off_t offset, int origin)
{
    xfer *x = ctx;
    if (offset != 0 || origin != SEEK_SET || !x->r->upload->rewind)
        return CURL_SEEKFUNC_CANTSEEK;
    return x->r->upload->rewind(x->r->ctx) == 0 ? CURL_SEEKFUNC_OK : CURL_SEEKFUNC_FAIL;
}

static int on_trailer(struct curl_slist **list, void *ctx)
{
    xfer *x = ctx;
    const char *const *lines = NULL;
    if (x->r->upload->trailer(x->r->ctx, &x->a, &lines) != 0) {
        x->ended = 1;
        return CURL_TRAILERFUNC_ABORT;
    }
    for (size_t i = 0; lines && lines[i]; i++) {
        struct curl_slist *l = curl_slist_append(*list, lines[i]);
        if (!l) { /* libcurl frees what was appended when the callback aborts */
            x->a.failed = psdb__error_set(PSDB_E_OUTOFMEMORY, "%s: out of memory", x->r->who);
            return CURL_TRAILERFUNC_ABORT;
        }
        *list = l;
    }
    return CURL_TRAILERFUNC_OK;
}

/* A handle for one attempt: the project's defaults, the client's token, TLS settings, timeouts
 * and share, and the request's headers, Range, body and callbacks. NULL on out of memory. */
static CURL *new_handle(xfer *x, const char *range, char *errbuf, struct curl_slist **headers)
{
    psdb_client *c = x->c;
    const psdb__request *r = x->r;
    CURL *h = curl_easy_init();
    char *auth = NULL;
    struct curl_slist *l = NULL;
    int ok = 0;
    *headers = NULL;
    if (!h)
        goto cleanup;
    if (c->token) {
        if (asprintf(&auth, "Authorization: Bearer %s", c->token) < 0) {
            auth = NULL;
            goto cleanup;
        }
        if (!(l = curl_slist_append(NULL, auth)))
            goto cleanup;
        *headers = l;
    }
    for (size_t i = 0; r->headers && r->headers[i]; i++) {
        if (!(l = curl_slist_append(*headers, r->headers[i])))
            goto cleanup;
        *headers = l;
    }
    if (curl_easy_setopt(h, CURLOPT_URL, r->url) != CURLE_OK ||
        (range && curl_easy_setopt(h, CURLOPT_RANGE, range) != CURLE_OK))
        goto cleanup;
    errbuf[0] = '\0';
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "psdb/" PSDB_VERSION_STRING);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (*headers)
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, *headers);
    /* Connections, DNS answers and TLS sessions outlive the handle in the client's share, so
     * the next transfer to the same server reuses the connection. */
    curl_easy_setopt(h, CURLOPT_SHARE, c->share->sh);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
    /* A transfer slower than 1 KiB/s (or half the bandwidth limit, when that is lower) for the
     * low-speed time is cut. */
    uint64_t low = 1024;
    if (c->max_recv_bytes_per_second && c->max_recv_bytes_per_second / 2 < low)
        low = c->max_recv_bytes_per_second / 2 ? c->max_recv_bytes_per_second / 2 : 1;
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, (long)low);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->low_speed_timeout_s);
    if (r->flags & PSDB__REQ_SMALL)
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)c->connect_timeout_ms * 3);
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->pinned_public_key)
        curl_easy_setopt(h, CURLOPT_PINNEDPUBLICKEY, c->pinned_public_key);
    /* Proxies: nothing here sets CURLOPT_PROXY or CURLOPT_NOPROXY, so libcurl reads http_proxy,
     * https_proxy, all_proxy and no_proxy from the environment as curl(1) does. */
    if (r->flags & PSDB__REQ_FRESH)
        curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (c->progress_cancel || ((r->flags & PSDB__REQ_PROGRESS) && c->progress)) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xfer);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    if (r->upload) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        /* Without a length libcurl sends the body chunked (the request's Transfer-Encoding
         * header), with Expect: 100-continue, so a refusal of the headers costs no body byte. */
        if (r->upload->size >= 0)
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->upload->size);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, x);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, x);
        if (r->upload->trailer) {
            curl_easy_setopt(h, CURLOPT_TRAILERFUNCTION, on_trailer);
            curl_easy_setopt(h, CURLOPT_TRAILERDATA, x);
        }
    }
    ok = 1;
cleanup:
    free(auth);
    if (!ok) {
        curl_slist_free_all(*headers);
        *headers = NULL;
        if (h)
            curl_easy_cleanup(h);
        h = NULL;
    }
    return h;
}

static int expected(const psdb__request *r, long status)
{
    if (!r->expect[0])
        return status == PSDB__HTTP_OK;
    return status == r->expect[0] || (r->expect[1] && status == r->expect[1]);
}

/* What an attempt came to. */
enum verdict { DONE, RETRY, FAIL };

/* Judges one finished attempt (transport.h's order) and records the failure it ends with; a
 * retried attempt records what it would end with if no attempt were left. */
static enum verdict judge(xfer *x, CURLcode rc, long status, const char *errbuf, psdb_hr *hr,
                          int *transient)
{
    const psdb__request *r = x->r;
    const char *url = r->url;
    enum verdict v = FAIL;
    *transient = 0;
    if (x->cancelled) {
        psdb_progress p = progress_of(x);
        char at[96] = "";
        if (p.total > 0)
            snprintf(at, sizeof(at), " at %llu of %llu bytes", (unsigned long long)p.done,
                     (unsigned long long)p.total);
        *hr = psdb__error_set(
            PSDB_E_CANCELLED, "%s: %s: cancelled by the progress callback%s%s%s%s", r->who, url, at,
            r->kept ? "; " : "", r->kept ? r->kept : "", r->kept ? " is kept for resuming" : "");
    } else if (PSDB_FAILED(x->a.failed)) {
        *hr = x->a.failed;
    } else if (x->too_big || (r->body && r->body->oom)) {
        *hr = x->too_big ? PSDB_E_PROTOCOL : PSDB_E_OUTOFMEMORY;
        psdb__error_set(*hr, "%s: the server's answer is larger than %zu bytes", r->who,
                        r->body_max);
    } else if (status && expected(r, status) && (rc == CURLE_OK || r->upload)) {
        v = !r->complete || r->complete(r->ctx) ? DONE : RETRY;
        *transient = v == RETRY;
        if (v == RETRY)
            *hr = psdb__error_set(PSDB_E_NETWORK,
                                  "%s: %s: the answer stopped short (after %u "
                                  "attempt%s)",
                                  r->who, url, x->a.number, x->a.number == 1 ? "" : "s");
    } else if (status && !expected(r, status)) {
        /* An answer, even when the connection broke after it: the status says what happened. */
        *transient = !(r->flags & PSDB__REQ_STATUS_FINAL) && psdb__http_transient(status);
        v = *transient ? RETRY : FAIL;
        char after[40] = "";
        if (x->a.number > 1)
            snprintf(after, sizeof(after), " (after %u attempts)", x->a.number);
        *hr = psdb__error_set(psdb__http_hr(status), "%s: %s answered HTTP %ld%s", r->who, url,
                              status, after);
    } else {
        /* No answer, or a GET cut after its status line. */
        *transient = x->ended || psdb__curl_transient(rc);
        v = *transient ? RETRY : FAIL;
        const char *why = x->ended            ? "the server's answer does not fit the request"
                          : rc == CURLE_OK    ? "the answer stopped short"
                          : errbuf[0] != '\0' ? errbuf
                                              : curl_easy_strerror(rc);
        *hr = psdb__error_set(rc == CURLE_OK || x->ended ? PSDB_E_NETWORK : psdb__curl_hr(rc),
                              "%s: %s: %s (after %u attempt%s)", r->who, url, why, x->a.number,
                              x->a.number == 1 ? "" : "s");
    }
    return v;
}

psdb_hr psdb__transport_run(psdb_client *c, const psdb__request *r, psdb__response *out)
{
    psdb_hr hr = PSDB_S_OK;
    xfer x = {.c = c, .r = r};
    uint32_t attempt = r->attempts_before;
    uint32_t max = r->max_attempts ? r->max_attempts : 1 + c->max_retries;
    if (max <= attempt)
        max = attempt + 1; /* the caller's attempts leave this call one at least */
    long status = 0;
    int transient = attempt > 0;
    char errbuf[CURL_ERROR_SIZE];
    CURL *h = NULL;
    struct curl_slist *headers = NULL;

    for (;;) {
        if (attempt > 0) {
            /* The failure of the attempt before this one is what the request ends with. */
            if (!transient || attempt >= max)
                goto cleanup;
            psdb_progress wait = progress_of(&x);
            wait.attempt = attempt;
            if (backoff(c, &wait, attempt)) {
                x.cancelled = 1;
                judge(&x, CURLE_OK, 0, "", &hr, &transient);
                goto cleanup;
            }
        }
        const char *range = NULL;
        const unsigned mark = psdb__error_mark();
        x.a = (psdb__attempt){.number = ++attempt};
        x.cancelled = x.too_big = x.ended = 0;
        if (r->body)
            psdb__buf_free(r->body);
        if (r->begin && r->begin(r->ctx, &x.a, &range) != 0) {
            hr = PSDB_FAILED(x.a.failed) ? x.a.failed : PSDB_E_OUTOFMEMORY;
            transient = 0;
            goto cleanup;
        }
        h = new_handle(&x, range, errbuf, &headers);
        if (!h) {
            hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "%s: out of memory", r->who);
            transient = 0;
            goto cleanup;
        }
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (status < PSDB__HTTP_OK)
            status = 0; /* an interim answer (1xx) only: none */
        curl_easy_cleanup(h);
        h = NULL;
        curl_slist_free_all(headers);
        headers = NULL;
        enum verdict v = judge(&x, rc, status, errbuf, &hr, &transient);
        if (PSDB_FAILED(hr) && psdb__error_mark() == mark) /* a hook that did not say why */
            psdb__error_set(hr, "%s: %s: %s", r->who, r->url, psdb_hr_str(hr));
        if (v == DONE) {
            hr = PSDB_S_OK;
            goto cleanup;
        }
        if (v == FAIL)
            goto cleanup;
    }
cleanup:
    if (out)
        *out = (psdb__response){status, attempt, PSDB_FAILED(hr) && transient};
    return hr;
}

psdb_hr psdb__transport_get(psdb_client *c, const char *who, const char *url, size_t max_bytes,
                            psdb__buf *body, long *status)
{
    psdb__response res;
    psdb__request r = {
        .who = who, .url = url, .flags = PSDB__REQ_SMALL, .body = body, .body_max = max_bytes};
    psdb_hr hr = psdb__transport_run(c, &r, &res);
    *status = res.status;
    return hr;
}

char *psdb__url_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = n < SIZE_MAX / 3 ? malloc(n * 3 + 1) : NULL, *o = out;
    if (!out)
        return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}
