/* router.c - psdbd's HTTP API v1 on libmicrohttpd (schema/HTTP.md): the request callbacks,
 * routing and the access log.
 *
 * DESIGN
 * Each worker thread is a libmicrohttpd daemon with its own epoll loop, fed connections by the
 * acceptor (acceptor.c). Every request gets a `struct req` in *req_cls, freed by the completion
 * callback, which also writes the access log line and the metrics. Requests other than publishes
 * are answered on their first callback.
 *
 * A publish (POST /v1/psdbs) is checked on its first callback, before any body byte is read:
 * token, role, the framing (Content-Length against the limit, or chunked with the statement
 * declared for the trailer), the statement headers and the key id. Then each body chunk is hashed
 * and appended to a temporary file in the data directory (never held in memory; a chunked body is
 * counted against the limit as it arrives), and on the final callback, which libmicrohttpd makes
 * once a chunked body's trailer is parsed, the trailer is checked; then the publish service
 * (publish.h) validates the file with libpsdb, checks the signature, fsyncs and renames the blob
 * into the store, and only then commits the index row. That last part can take seconds for a
 * large PSDB, so it runs on a finisher thread while the connection is suspended
 * (MHD_suspend_connection): the worker keeps serving its other connections. Shutdown
 * waits for the finishers, since a suspended connection must not meet MHD_stop_daemon. Anything
 * that ends a publish early removes its temporary file in the completion callback, so a client that
 * disconnects mid-body leaves nothing behind.
 *
 * The request starts in the URI log callback, which sees the target before libmicrohttpd decodes
 * it (an encoded NUL is only visible there) and makes the struct req, so requests libmicrohttpd
 * refuses alone are logged too. Each connection carries a struct conn (its socket context) with
 * the deadline for receiving its current request; libmicrohttpd's own timeout only counts idle
 * time, so a reaper thread shuts down the sockets of connections past their deadline. The
 * deadline is cleared once a response is queued (sending is bounded by the idle timeout) and set
 * afresh when a request completes, for the next one on a keep-alive connection. */
#include "http_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "metrics.h"

/* Hands a read request to its route; publishes (POST) never get here. */
static enum MHD_Result dispatch(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                const char *url, const char *tail)
{
    int get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
    switch (r->route) {
    case PSDBD_ROUTE_HEALTHZ:
        if (!get)
            break;
        return http_reply_json(c, r, PSDBD_OUTCOME_OK, json_pack("{s:s}", "status", "ok"));
    case PSDBD_ROUTE_READYZ:
        if (!get)
            break;
        return http_readyz(srv, c, r);
    case PSDBD_ROUTE_METRICS:
        if (!get)
            break;
        return http_metrics(srv, c, r);
    case PSDBD_ROUTE_RESOLVE:
        if (!get)
            break;
        return http_resolve(srv, c, r);
    case PSDBD_ROUTE_APPS:
        if (!get)
            break;
        return http_apps(srv, c, r);
    case PSDBD_ROUTE_APP_PSDBS:
        if (!get)
            break;
        return http_app_psdbs(srv, c, r, tail);
    case PSDBD_ROUTE_BLOB:
        if (!get)
            break;
        if (strlen(tail) == 64 + 9 && strcmp(tail + 64, "/valuemap") == 0)
            return http_serve_valuemap(srv, c, r, tail, 1);
        if (strlen(tail) == 64 + 12 && strcmp(tail + 64, "/valuemap/v2") == 0)
            return http_serve_valuemap(srv, c, r, tail, 2);
        return http_serve_blob(srv, c, r, tail);
    case PSDBD_ROUTE_PSDB_GET:
        if (strcmp(r->method, "DELETE") == 0) {
            r->route = PSDBD_ROUTE_PSDB_RETIRE;
            return http_psdb_by_id(srv, c, r, tail, 1);
        }
        if (!get)
            break;
        return http_psdb_by_id(srv, c, r, tail, 0);
    case PSDBD_ROUTE_DASHBOARD:
        if (!get)
            break;
        return http_dashboard(srv, c, r, tail);
    case PSDBD_ROUTE_STATS:
        if (!get)
            break;
        return http_stats(srv, c, r, tail);
    case PSDBD_ROUTE_PUBLISH:
        break; /* POST is handled before dispatch */
    case PSDBD_ROUTE_SODBS:
        /* A retire holds the jobs of the SODB: the misses made before it are among them. */
        psdbd_farm_demand_flush(srv->farm_demand);
        if (tail) /* /v1/sodbs/<id> */
            return http_sodb_by_id(srv, c, r, tail);
        if (!get)
            break; /* POST is handled before dispatch */
        return http_sodbs_list(srv, c, r);
    case PSDBD_ROUTE_FARM:
        return http_farm(srv, c, r, tail);
    default:
        return http_reply_error(c, r, PSDBD_OUTCOME_NOT_FOUND, "no such endpoint: %.200s", url);
    }
    return http_reply_error(c, r, PSDBD_OUTCOME_METHOD_NOT_ALLOWED, "%.16s is not allowed here",
                            r->method);
}

/* ---- MHD callbacks --------------------------------------------------------------------------- */

static struct conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static struct req *req_new(psdbd_server *srv, struct MHD_Connection *c)
{
    struct req *r = xcalloc(1, sizeof(*r));
    r->start_ns = psdbd_now_ns();
    r->fd = -1;
    r->cx = conn_of(c);
    atomic_fetch_add(&srv->active, 1);
    return r;
}

/* Called with the request target as received, once the request line is read and before it is
 * percent-decoded: the only place a "%00" can still be seen (the decoded path and arguments end
 * at it). Its result becomes *req_cls, so the request is accounted for even when libmicrohttpd
 * answers it alone (a 431, a malformed header). */
void *http_on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    struct req *r = req_new(cls, c);
    const char *tail = NULL;
    r->bad_uri = psdbd_uri_has_encoded_nul(uri);
    r->path = xstrdup(uri);
    /* The route until the decoded path replaces it: a request that never gets past its
     * headers is still counted under the route it asked for. */
    size_t n = strcspn(uri, "?");
    char *path = xmalloc(n + 1);
    memcpy(path, uri, n);
    path[n] = '\0';
    r->route = psdbd_route_of(path, &tail);
    free(path);
    return r;
}

struct framing {
    unsigned content_length, transfer_encoding;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct framing *f = cls;
    (void)kind;
    (void)value;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->content_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
        f->transfer_encoding++;
    return MHD_YES;
}

/* Checks what every request must satisfy before its route sees it. 0, or an error response was
 * queued and *ret says how to return. */
static int check_request(struct MHD_Connection *c, struct req *r, enum MHD_Result *ret)
{
    struct framing f = {0};
    if (r->bad_uri) {
        *ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                "the request target encodes a NUL byte (%%00)");
        return -1;
    }
    /* libmicrohttpd frames the body by the first Content-Length; a proxy in front may have used
     * another one. Two lengths, or a length beside chunked coding, are a smuggling attempt or a
     * broken client: refused, and the connection closed (RFC 9112 6.3). */
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    if (f.content_length > 1 || (f.content_length && f.transfer_encoding)) {
        *ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST,
                                f.content_length > 1
                                    ? "the request has more than one Content-Length"
                                    : "the request has both Content-Length and Transfer-Encoding");
        return -1;
    }
    return 0;
}

/* Whether an answer decided before this request's body waits for it (http_queue): a
 * Content-Length body of 1 to HTTP_HOLD_BODY_MAX bytes, not chunked, and no Expect: 100-continue
 * (that client sends the body only after a 100, so an answer goes at once and costs no body). */
static int body_worth_holding_for(struct MHD_Connection *c)
{
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *te =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    uint64_t len = 0;
    return cl && !te && !(expect && strcasecmp(expect, "100-continue") == 0) &&
           psdb__parse_u64(cl, &len) == 0 && len > 0 && len <= HTTP_HOLD_BODY_MAX;
}

enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                const char *method, const char *version, const char *upload_data,
                                size_t *upload_data_size, void **req_cls)
{
    psdbd_server *srv = cls;
    struct req *r = *req_cls;
    const char *tail = NULL;
    enum MHD_Result ret = MHD_YES;
    (void)version;
    if (!r) /* on_uri always runs first; kept so that a missing call cannot crash */
        *req_cls = r = req_new(srv, c);
    if (!r->started) {
        r->started = 1;
        snprintf(r->method, sizeof(r->method), "%s", method);
        if (!r->bad_uri) { /* the log shows the decoded path, as routing saw it */
            free(r->path);
            r->path = xstrdup(url);
        }
        r->route = psdbd_route_of(url, &tail);
        if (check_request(c, r, &ret) != 0)
            return ret; /* at once, the connection closed: its framing is not to be trusted */
        /* Other requests are answered once the request is read: libmicrohttpd closes the
         * connection after an answer queued before that point. A publish's early answer waits
         * for the body too (http_queue). */
        if ((r->route == PSDBD_ROUTE_PUBLISH || (r->route == PSDBD_ROUTE_SODBS && !tail)) &&
            strcmp(method, "POST") == 0) {
            r->body_to_come = body_worth_holding_for(c);
            ret = http_publish_begin(srv, c, r);
            r->body_to_come = 0;
        }
        return ret;
    }
    if (r->held) { /* an early answer: the body is read and dropped, then it is sent */
        if (*upload_data_size > 0) {
            *upload_data_size = 0;
            return MHD_YES;
        }
        return http_queue_held(c, r);
    }
    if (r->publishing) {
        if (*upload_data_size > 0) {
            http_publish_chunk(srv, r, upload_data, *upload_data_size);
            *upload_data_size = 0;
            return MHD_YES;
        }
        return http_publish_defer(srv, c, r);
    }
    if (r->finishing) {
        r->finishing = 0;
        return http_reply_verdict(c, r, &r->result);
    }
    if (*upload_data_size > 0 && r->route == PSDBD_ROUTE_FARM && r->status == 0) {
        /* A farm request's JSON body, kept whole (bounded) for its route. */
        if (r->body_len + *upload_data_size > FARM_BODY_MAX) {
            r->body_too_large = 1;
        } else {
            char *grown = realloc(r->body, r->body_len + *upload_data_size + 1);
            if (!grown)
                psdbd_out_of_memory();
            r->body = grown;
            memcpy(r->body + r->body_len, upload_data, *upload_data_size);
            r->body_len += *upload_data_size;
            r->body[r->body_len] = '\0';
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size > 0 || r->status != 0) {
        /* A body on any other request (or after an early answer) is read and dropped, within
         * the request's receive deadline. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    r->route = psdbd_route_of(url, &tail);
    return dispatch(srv, c, r, url, tail);
}

static void sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == ' ')
            *s = '?';
}

/* The access log's and the metrics' name for how a request ended (schema/HTTP.md). */
static const char *abort_reason(enum MHD_RequestTerminationCode toe, int timed_out)
{
    if (timed_out)
        return "timeout"; /* the receive deadline: the reaper shut the socket down */
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK:
        return NULL;
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
        return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR:
        return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
        return "client_abort";
    default:
        return "error"; /* libmicrohttpd gave up: a failed send, a broken request, no memory */
    }
}

static int first_app(const char *app, void *ctx)
{
    char **out = ctx;
    *out = xstrdup(app);
    return 1;
}

void http_on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                       enum MHD_RequestTerminationCode toe)
{
    psdbd_server *srv = cls;
    struct req *r = *req_cls;
    if (!r)
        return;
    *req_cls = NULL;
    double ms = (double)(psdbd_now_ns() - r->start_ns) / 1e6;
    const char *why = abort_reason(toe, r->cx && atomic_load(&r->cx->timed_out));
    uint64_t bytes = r->bytes, now_sent = 0;
    if (!r->started) /* libmicrohttpd answered alone (a malformed or oversized header) */
        r->status = http_status_sent(c);
    if (why) {
        /* What reached the client, not what was planned: the socket's counters since the
         * response was queued, less its header, at most the body. */
        bytes = 0;
        if (r->status && r->sent_known && http_socket_written(r->cx->fd, &now_sent) == 0 &&
            now_sent > r->sent_base + r->header_bytes)
            bytes = now_sent - r->sent_base - r->header_bytes;
        if (bytes > r->bytes)
            bytes = r->bytes;
    }
    psdbd_metrics_request(r->route, why ? 0 : r->status, bytes);
    /* Demand recording: a blob body sent, whole or in part (HEAD and 304s send none). The
     * application, for /metrics, is looked up now that the response is over, so the lookup never
     * delays a download's first byte. */
    if (srv->stats && r->route == PSDBD_ROUTE_BLOB && strcmp(r->method, "GET") == 0 &&
        (r->status == http_status(PSDBD_OUTCOME_OK) ||
         r->status == http_status(PSDBD_OUTCOME_PARTIAL)) &&
        r->path && strncmp(r->path, "/v1/blobs/", 10) == 0) {
        if (psdbd_is_digest(r->path + 10) &&
            psdbd_index_blob_apps(srv->ix, r->path + 10, first_app, &r->stats_app) != PSDBD_OK)
            r->stats_app = NULL; /* a blob no PSDB names: counted without an application */
        psdbd_stats_download(srv->stats, psdbd_stats_today(), r->path + 10, r->stats_app,
                             r->status == http_status(PSDBD_OUTCOME_OK) && !why, bytes);
    }
    if (srv->cfg->log_requests) {
        if (!r->method[0])
            snprintf(r->method, sizeof(r->method), "-");
        if (!r->path)
            r->path = xstrdup("-");
        sanitize(r->method);
        sanitize(r->path);
        fprintf(stderr, "psdbd: access %s %s %u %llu %.3fms %s%s%s\n", r->method, r->path,
                r->status, (unsigned long long)bytes, ms, r->who.name ? r->who.name : "-",
                why ? " aborted=" : "", why ? why : "");
    }
    /* The next request on a keep-alive connection gets a fresh receive deadline. */
    if (r->cx && srv->cfg->request_timeout)
        atomic_store(&r->cx->deadline_ns,
                     psdbd_now_ns() + http_seconds_ns(srv->cfg->request_timeout));
    http_publish_discard(r);
    psdbd_verdict_clear(&r->result);
    psdbd_principal_free(&r->who);
    free(r->key_pem);
    free(r->key_scope);
    free(r->key_families);
    if (r->held) /* the connection ended before the body did */
        MHD_destroy_response(r->held);
    free(r->body);
    free(r->path);
    free(r->stats_app);
    free(r);
    /* Under the lock only while shutdown waits: it looks at `active` under it before waiting. */
    if (atomic_fetch_sub(&srv->active, 1) == 1 && atomic_load(&srv->draining)) {
        pthread_mutex_lock(&srv->lock);
        pthread_cond_broadcast(&srv->idle);
        pthread_mutex_unlock(&srv->lock);
    }
}
