/* reply.c - psdbd's HTTP responses: queueing with the byte accounting of the access log, JSON
 * bodies and error answers. */
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
#include <linux/sockios.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked (glibc's copy is older) */
#include <netinet/in.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "common.h"
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

enum MHD_Result http_queue(struct MHD_Connection *c, struct req *r, unsigned status,
                           struct MHD_Response *resp, uint64_t body_bytes)
{
    enum MHD_Result ret;
    if (!resp)
        return MHD_NO;
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

enum MHD_Result http_reply_buffer(struct MHD_Connection *c, struct req *r, unsigned status,
                                  const char *type, char *body, size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"psdbd\"");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                r->route == PSDBD_ROUTE_PSDB_GET  ? "GET, HEAD, DELETE"
                                : r->route == PSDBD_ROUTE_PUBLISH ? "POST"
                                                                  : "GET, HEAD");
    return http_queue(c, r, status, resp, len);
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

/* Sends `body` (its reference is taken) as JSON. With c NULL (a publish finishing off the
 * connection's thread) the answer is kept in r until the connection is resumed. */
enum MHD_Result http_reply_json(struct MHD_Connection *c, struct req *r, unsigned status,
                                json_t *body)
{
    size_t len = 0;
    char *text = NULL;
    if (!c) {
        json_decref(r->result_body);
        r->result_body = body;
        r->result_status = status;
        return MHD_YES;
    }
    text = http_json_text(body, &len);
    json_decref(body);
    return http_reply_buffer(c, r, status, JSON_TYPE, text, len);
}

enum MHD_Result http_reply_error(struct MHD_Connection *c, struct req *r, unsigned status,
                                 const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return http_reply_json(c, r, status, json_pack("{s:s, s:s}", "error", code, "message", msg));
}

int http_bad_name(struct MHD_Connection *c, struct req *r, const char *label, const char *name,
                  enum MHD_Result *ret)
{
    char why[128];
    if (psdb__name_check(name, why, sizeof(why)) == 0)
        return 0;
    *ret = http_reply_error(c, r, MHD_HTTP_BAD_REQUEST, "bad_request", "%s %s", label, why);
    return 1;
}

enum MHD_Result http_reply_index_error(struct MHD_Connection *c, struct req *r, psdbd_rc rc)
{
    if (rc == PSDBD_UNAVAILABLE) /* logged where it was found: the log says what happened */
        return http_reply_error(c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "index_unavailable",
                                "the index was removed, replaced or damaged; see the server log");
    if (rc == PSDBD_FULL)
        return http_reply_error(c, r, MHD_HTTP_INSUFFICIENT_STORAGE, "disk_full",
                                "the index cannot be written: no space left on the device");
    return http_reply_error(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                            "the index failed; see the server log");
}
