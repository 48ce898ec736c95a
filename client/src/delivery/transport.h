/* transport.h - the delivery client's one HTTP transport (transport.c): resolve, download, the
 * delta's map and ranges, publish and coverage describe their requests, and this runs them.
 *
 * DESIGN
 * A request says what it is: its URL, extra headers, the Range of each attempt, where the answer
 * goes (into memory, or to the request's own write hook) and where an upload comes from, which
 * statuses are the answer it asked for, whether other statuses are worth another attempt, and
 * what the progress callback is told. Everything else is the same for every request and lives
 * here once: the libcurl handle with the project's defaults (TLS verification, no redirects,
 * HTTP/1.1) and the client's token, CA file, pinned key, timeouts and connection share; the
 * attempts, 1 + max_retries of them, with a backoff of retry_base_ms doubled after each (at most
 * 10 s) between them; the progress callback and its cancel, asked every 100 ms while a transfer
 * runs and in 100 ms slices of a backoff; the bandwidth limit, a token bucket over every
 * transfer of the client applied to each answer's bytes before they are kept; and what came of
 * it as a psdb_hr with its one line in psdb_error_last, through the mappers of
 * common/status_map.h. An attempt ends in one of five ways, judged in this order:
 *   cancelled                 PSDB_E_CANCELLED;
 *   a hook's local failure    its status (a disk full, a digest that cannot match), never retried;
 *   an answer asked for       done, unless the request says bytes are still missing: then it is
 *                             retried like a cut transfer and the next Range asks for the rest
 *                             (a GET cut after its status line is such a transfer; an upload that
 *                             got its answer is done whatever came after);
 *   another answer            retried when psdb__http_transient says so and the request allows
 *                             it, else psdb__http_hr of its status;
 *   no answer                 retried when psdb__curl_transient says so or a hook ended the
 *                             transfer, else psdb__curl_hr (PSDB_E_NETWORK).
 * The last attempt's failure is the request's. Every handle is cleaned up when its attempt ends:
 * the connection, its TLS session and the DNS answer stay in the client's share, so the next
 * request to the same server reuses them. */
#ifndef PSDB_TRANSPORT_H
#define PSDB_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "psdb/client.h"

#include "common/buf.h"

/* libcurl's connection cache, DNS cache and TLS sessions, shared by the transfers of one client
 * and of the clients created with share_connections_with it; the lock callbacks make it safe for
 * clients on different threads. Reference counted. */
typedef struct psdb__share psdb__share;

/* The share of a new client: with's (one more reference) or a new one. Initialises libcurl
 * (reference counted; balanced by psdb__share_close). PSDB_S_OK, PSDB_E_FAIL (libcurl did not
 * initialise) or PSDB_E_OUTOFMEMORY, with the last error set. */
psdb_hr psdb__share_open(psdb__share *with, psdb__share **out);
/* Drops a client's reference; the last one frees the share. NULL is a no-op. */
void psdb__share_close(psdb__share *s);

/* Where a request stands, for its hooks. */
typedef struct psdb__attempt {
    uint32_t number; /* 1 for the first attempt */
    long status;     /* the status line of the answer being received; 0 before it */
    /* Set by a hook that ends the whole request, after recording why (psdb__error_set): the
     * request fails with it and is not retried. PSDB_S_OK: none. */
    psdb_hr failed;
} psdb__attempt;

/* The body of an upload (the request is then a POST). */
typedef struct psdb__upload {
    /* Its length, sent as Content-Length; -1: sent chunked (the request's headers then say
     * Transfer-Encoding: chunked). */
    int64_t size;
    /* Up to n bytes into buf: the count, 0 at the end, -1 to end the request (a->failed set). */
    ssize_t (*read)(void *ctx, psdb__attempt *a, char *buf, size_t n);
    /* Back to the first byte, when libcurl must send the body again (a reused connection found
     * closed): 0, or -1. NULL: the body cannot be sent twice in one attempt. */
    int (*rewind)(void *ctx);
    /* After the last byte of a chunked body: the trailer's header lines, NULL-terminated, in
     * *lines (kept by ctx until the attempt ends); 0, or -1 to end the request (a->failed set).
     * NULL: no trailer. */
    int (*trailer)(void *ctx, psdb__attempt *a, const char *const **lines);
} psdb__upload;

#define PSDB__REQ_PROGRESS 0x1u     /* tell the progress callback too (downloads); cancel: always */
#define PSDB__REQ_STATUS_FINAL 0x2u /* a status not asked for ends the request, transient or not   \
                                     */
#define PSDB__REQ_SMALL 0x4u /* a small answer: the whole transfer within 3 connect timeouts */
#define PSDB__REQ_FRESH 0x8u /* a connection of its own, not kept (publish's probe) */

typedef struct psdb__request {
    const char *who; /* begins every message: "resolve", "download", "publish", ... */
    const char *url;
    const char *const *headers; /* request header lines after the token's, NULL-terminated */
    unsigned flags;             /* PSDB__REQ_* */
    long expect[2];             /* the statuses that answer it (0: none); {0, 0}: PSDB__HTTP_OK */
    uint32_t max_attempts;      /* 0: 1 + the client's max_retries */
    /* Attempts of this request the caller already made and lost to a transient failure (publish's
     * probe): they count towards max_attempts, and the first attempt here backs off after them. */
    uint32_t attempts_before;
    /* The answer in memory, whatever its status (emptied before each attempt), at most body_max
     * bytes: more is PSDB_E_PROTOCOL. NULL: the write hook gets the bytes. */
    psdb__buf *body;
    size_t body_max;
    const psdb__upload *upload; /* NULL: a GET */
    /* A file named in the message of a cancel as kept for resuming; NULL: none. */
    const char *kept;
    void *ctx; /* given to every hook */
    /* Before each attempt: resets what the hooks gather and sets *range to the Range header's
     * value for it (left NULL: none; kept by ctx until the attempt ends). 0, or -1 to end the
     * request (a->failed set). NULL: no Range. */
    int (*begin)(void *ctx, psdb__attempt *a, const char **range);
    /* Each line of the answer's header (its status line included, a->status already set): 0 to go
     * on, non-zero to end the attempt, which is retried like a cut transfer unless a->failed. */
    int (*header)(void *ctx, psdb__attempt *a, const char *line, size_t n);
    /* Bytes of the answer, once the bandwidth limit let them through: 0 to take them, non-zero to
     * end the attempt (as header). Not called when body is set; NULL: drained. */
    int (*write)(void *ctx, psdb__attempt *a, const char *p, size_t n);
    /* After an answer asked for: 1 when all of it came, 0 to retry it like a cut transfer (the
     * next begin asks for the rest). NULL: 1. */
    int (*complete)(void *ctx);
    /* What the progress callback, the cancel and the backoff are told: what, done and total
     * (the transport sets the attempt). NULL: {who, 0, 0}. */
    void (*progress)(void *ctx, psdb_progress *p);
} psdb__request;

/* What came of a request, whatever its status. */
typedef struct psdb__response {
    long status;       /* the last answer's status; 0: none came */
    uint32_t attempts; /* made, attempts_before included */
    int transient;     /* the last attempt failed in a way another attempt might not */
} psdb__response;

/* Runs r for the client c (see DESIGN). PSDB_S_OK when an answer asked for came whole; else the
 * failure, with psdb_error_last saying what failed, starting with r->who: PSDB_E_CANCELLED,
 * PSDB_E_OUTOFMEMORY, a hook's status, psdb__http_hr of the answer's status, PSDB_E_NETWORK,
 * PSDB_E_PROTOCOL for an answer over body_max. out (may be NULL) is written in every case. */
psdb_hr psdb__transport_run(psdb_client *c, const psdb__request *r, psdb__response *out);

/* GET url into *body (at most max_bytes), the answer asked for being PSDB__HTTP_OK: a small
 * request (PSDB__REQ_SMALL) of psdb__transport_run, whose statuses it returns. *status gets the
 * last answer's status (0: none); the caller frees *body, which holds the last answer also on
 * failure. */
psdb_hr psdb__transport_get(psdb_client *c, const char *who, const char *url, size_t max_bytes,
                            psdb__buf *body, long *status);

/* Whether the client's progress_cancel asks to stop, given p; 0 without one. */
int psdb__transport_should_stop(const psdb_client *c, const psdb_progress *p);

/* s with every byte but the unreserved ones (RFC 3986: letters, digits, '-', '.', '_', '~')
 * written %XX, for a URL's query; malloc'd (free()), NULL on out of memory. */
char *psdb__url_escape(const char *s);

#endif
