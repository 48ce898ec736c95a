/* reply.c - psdbd's HTTP responses: the one table from an outcome to its status and error code,
 * queueing with the byte accounting of the access log, JSON bodies and the answer of a verdict. */
#include "http_int.h"

#include <assert.h>
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
#include <linux/sockios.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked (glibc's copy is older) */
#include <netinet/in.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "common.h"

/* ---- each outcome's status and error code (schema/HTTP.md, Errors) ------------------------- */

/* The only place an outcome meets an HTTP status: every answer psdbd gives is chosen here. */
static const struct {
    unsigned status;
    const char *code; /* a failure's error code; NULL for a success */
} answers[PSDBD_OUTCOME_COUNT] = {
    [PSDBD_OUTCOME_OK] = {MHD_HTTP_OK, NULL},
    [PSDBD_OUTCOME_CREATED] = {MHD_HTTP_CREATED, NULL},
    [PSDBD_OUTCOME_PARTIAL] = {MHD_HTTP_PARTIAL_CONTENT, NULL},
    [PSDBD_OUTCOME_NOT_MODIFIED] = {MHD_HTTP_NOT_MODIFIED, NULL},
    [PSDBD_OUTCOME_BAD_REQUEST] = {MHD_HTTP_BAD_REQUEST, "bad_request"},
    [PSDBD_OUTCOME_INVALID_PSDB] = {MHD_HTTP_BAD_REQUEST, "invalid_psdb"},
    [PSDBD_OUTCOME_BAD_DIGEST] = {MHD_HTTP_BAD_REQUEST, "bad_digest"},
    [PSDBD_OUTCOME_TRAILER_MISSING] = {MHD_HTTP_BAD_REQUEST, "trailer_missing"},
    [PSDBD_OUTCOME_STATEMENT_MISMATCH] = {MHD_HTTP_BAD_REQUEST, "statement_mismatch"},
    [PSDBD_OUTCOME_UNAUTHORIZED] = {MHD_HTTP_UNAUTHORIZED, "unauthorized"},
    [PSDBD_OUTCOME_FORBIDDEN] = {MHD_HTTP_FORBIDDEN, "forbidden"},
    [PSDBD_OUTCOME_OUT_OF_SCOPE] = {MHD_HTTP_FORBIDDEN, "out_of_scope"},
    [PSDBD_OUTCOME_UNKNOWN_KEY] = {MHD_HTTP_FORBIDDEN, "unknown_key"},
    [PSDBD_OUTCOME_BAD_SIGNATURE] = {MHD_HTTP_FORBIDDEN, "bad_signature"},
    [PSDBD_OUTCOME_NOT_FOUND] = {MHD_HTTP_NOT_FOUND, "not_found"},
    [PSDBD_OUTCOME_NO_VALUE_MAP] = {MHD_HTTP_NOT_FOUND, "no_value_map"},
    [PSDBD_OUTCOME_METHOD_NOT_ALLOWED] = {MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed"},
    [PSDBD_OUTCOME_CONFLICT] = {MHD_HTTP_CONFLICT, "conflict"},
    [PSDBD_OUTCOME_LENGTH_REQUIRED] = {MHD_HTTP_LENGTH_REQUIRED, "length_required"},
    [PSDBD_OUTCOME_PRECONDITION_FAILED] = {MHD_HTTP_PRECONDITION_FAILED, "precondition_failed"},
    [PSDBD_OUTCOME_TOO_LARGE] = {MHD_HTTP_CONTENT_TOO_LARGE, "too_large"},
    [PSDBD_OUTCOME_RANGE_NOT_SATISFIABLE] = {MHD_HTTP_RANGE_NOT_SATISFIABLE,
                                             "range_not_satisfiable"},
    [PSDBD_OUTCOME_INVALID_SODB] = {MHD_HTTP_BAD_REQUEST, "invalid_sodb"},
    [PSDBD_OUTCOME_KEY_SCOPE] = {MHD_HTTP_FORBIDDEN, "key_scope"},
    [PSDBD_OUTCOME_SODB_UNKNOWN] = {MHD_HTTP_FORBIDDEN, "sodb_unknown"},
    [PSDBD_OUTCOME_LEASE_LOST] = {MHD_HTTP_CONFLICT, "lease_lost"},
    [PSDBD_OUTCOME_NO_CONTENT] = {MHD_HTTP_NO_CONTENT, NULL},
    [PSDBD_OUTCOME_INTERNAL] = {MHD_HTTP_INTERNAL_SERVER_ERROR, "internal"},
    [PSDBD_OUTCOME_NOT_READY] = {MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready"},
    [PSDBD_OUTCOME_INDEX_UNAVAILABLE] = {MHD_HTTP_SERVICE_UNAVAILABLE, "index_unavailable"},
    [PSDBD_OUTCOME_DISK_FULL] = {MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full"},
};

unsigned http_status(psdbd_outcome o)
{
    assert(o < PSDBD_OUTCOME_COUNT && answers[o].status != 0);
    return answers[o].status;
}

unsigned http_status_sent(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    return ci && ci->http_status >= 100 && ci->http_status <= 599 ? ci->http_status : 0;
}

/* ---- responses ------------------------------------------------------------------------------- */

/* Bytes the application has written to a TCP socket so far: those the peer acknowledged plus
 * those still in the send queue. A reset connection drops its queue, so what remains counts what
 * reached the client. */
int http_socket_written(int fd, uint64_t *out)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int queued = 0;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof(ti.tcpi_bytes_acked))
        return -1;
    if (ioctl(fd, SIOCOUTQ, &queued) != 0 || queued < 0)
        queued = 0;
    *out = ti.tcpi_bytes_acked + (uint64_t)queued;
    return 0;
}

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind, const char *key,
                                       const char *value)
{
    (void)kind;
    *(uint64_t *)cls += strlen(key) + 2 + (value ? strlen(value) : 0) + 2;
    return MHD_YES;
}

/* The header libmicrohttpd writes for `resp`: status line, our headers, Date, Content-Length and
 * the blank line (a Connection header, when it adds one, is not counted). */
static uint64_t header_size(struct MHD_Response *resp, unsigned status, uint64_t body_len)
{
    char cl[32];
    const char *reason = MHD_get_reason_phrase_for(status);
    uint64_t n = strlen("HTTP/1.1 ") + 3 + 1 + (reason ? strlen(reason) : 0) + 2;
    MHD_get_response_headers(resp, add_header_size, &n);
    n += strlen("Date: ") + 29 + 2;
    if (status != MHD_HTTP_NOT_MODIFIED)
        n += (uint64_t)snprintf(cl, sizeof(cl), "Content-Length: %llu\r\n",
                                (unsigned long long)body_len);
    return n + 2;
}

enum MHD_Result http_queue(struct MHD_Connection *c, struct req *r, psdbd_outcome o,
                           struct MHD_Response *resp, uint64_t body_bytes)
{
    enum MHD_Result ret;
    unsigned status = http_status(o);
    if (!resp)
        return MHD_NO;
    /* Decided before a body that is on its way: libmicrohttpd would send this and close the
     * connection unread, and a proxy still streaming the body to psdbd (nginx) meets a broken
     * pipe and answers 502 in place of this. So it waits for the body, read and dropped within
     * the request's receive deadline (http_on_request), when that body is small enough to be
     * worth reading (HTTP_HOLD_BODY_MAX) and its client did not ask for 100-continue (that one
     * sends nothing before an answer). */
    if (r->body_to_come && !r->held) {
        r->held = resp;
        r->held_outcome = o;
        r->held_bytes = body_bytes;
        return MHD_YES;
    }
    r->status = status;
    r->bytes = strcmp(r->method, "HEAD") == 0 ? 0 : body_bytes;
    /* The request is read (or refused): the receive deadline no longer applies; a slow reader
     * of the answer is bounded by the idle timeout. */
    if (r->cx) {
        atomic_store(&r->cx->deadline_ns, 0);
        r->sent_known = http_socket_written(r->cx->fd, &r->sent_base) == 0;
        r->header_bytes = header_size(resp, status, body_bytes);
    }
    ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result http_reply_buffer(struct MHD_Connection *c, struct req *r, psdbd_outcome o,
                                  const char *type, char *body, size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (o == PSDBD_OUTCOME_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"psdbd\"");
    if (o == PSDBD_OUTCOME_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                r->route == PSDBD_ROUTE_PSDB_GET  ? "GET, HEAD, DELETE"
                                : r->route == PSDBD_ROUTE_PUBLISH ? "POST"
                                                                  : "GET, HEAD");
    return http_queue(c, r, o, resp, len);
}

enum MHD_Result http_queue_held(struct MHD_Connection *c, struct req *r)
{
    struct MHD_Response *resp = r->held;
    r->held = NULL;
    return http_queue(c, r, r->held_outcome, resp, r->held_bytes);
}

/* The compact text of a JSON value with a newline (malloc'd, NUL-terminated); *len excludes
 * the NUL. */
char *http_json_text(const json_t *v, size_t *len)
{
    char *text = json_dumps(v, JSON_COMPACT);
    if (!text)
        psdbd_out_of_memory();
    size_t n = strlen(text);
    char *nl = realloc(text, n + 2);
    if (!nl)
        psdbd_out_of_memory();
    nl[n] = '\n';
    nl[n + 1] = '\0';
    *len = n + 1;
    return nl;
}

enum MHD_Result http_reply_json(struct MHD_Connection *c, struct req *r, psdbd_outcome o,
                                json_t *body)
{
    size_t len = 0;
    char *text = http_json_text(body, &len);
    json_decref(body);
    return http_reply_buffer(c, r, o, JSON_TYPE, text, len);
}

char *http_verdict_text(const psdbd_verdict *v, size_t *len)
{
    json_t *body = NULL;
    char *text = NULL;
    assert(v->outcome < PSDBD_OUTCOME_COUNT && answers[v->outcome].code);
    body = json_pack("{s:s, s:s}", "error", answers[v->outcome].code, "message", v->message);
    if (!body)
        psdbd_out_of_memory();
    text = http_json_text(body, len);
    json_decref(body);
    return text;
}

enum MHD_Result http_reply_verdict(struct MHD_Connection *c, struct req *r, psdbd_verdict *v)
{
    size_t len = 0;
    char *text = NULL;
    json_t *body = v->body;
    assert(v->outcome < PSDBD_OUTCOME_COUNT);
    v->body = NULL;
    if (!answers[v->outcome].code)
        return body ? http_reply_json(c, r, v->outcome, body) : MHD_NO;
    json_decref(body);
    text = http_verdict_text(v, &len);
    return http_reply_buffer(c, r, v->outcome, JSON_TYPE, text, len);
}

enum MHD_Result http_reply_error(struct MHD_Connection *c, struct req *r, psdbd_outcome o,
                                 const char *fmt, ...)
{
    psdbd_verdict v = {0};
    va_list ap;
    va_start(ap, fmt);
    psdbd_verdict_vfail(&v, o, fmt, ap);
    va_end(ap);
    return http_reply_verdict(c, r, &v);
}

int http_bad_name(struct MHD_Connection *c, struct req *r, const char *label, const char *name,
                  enum MHD_Result *ret)
{
    char why[128];
    if (psdb__name_check(name, why, sizeof(why)) == 0)
        return 0;
    *ret = http_reply_error(c, r, PSDBD_OUTCOME_BAD_REQUEST, "%s %s", label, why);
    return 1;
}

enum MHD_Result http_reply_index_error(struct MHD_Connection *c, struct req *r, psdbd_rc rc)
{
    psdbd_verdict v = {0};
    psdbd_verdict_index(&v, rc);
    return http_reply_verdict(c, r, &v);
}
