/* blobs.c - GET /v1/blobs/<sha256>: immutable content-addressed blobs with validators and
 * ranges, served by sendfile; several ranges at once as multipart/byteranges (what a delta update
 * asks for: one request for many runs of missing values instead of one each). */
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

#include "auth.h"
#include "common.h"

/* ---- blobs ----------------------------------------------------------------------------------- */

static int scope_accepts(const char *app, void *ctx)
{
    return psdbd_scope_covers(ctx, app);
}

/* The content of a 304: none (libmicrohttpd never asks for a body it does not send). */
static ssize_t no_content(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    (void)pos;
    (void)buf;
    (void)max;
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void blob_headers(struct MHD_Response *resp, const char *etag, const char *last_modified)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_LAST_MODIFIED, last_modified);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            "public, max-age=31536000, immutable");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
}

/* When the blob was published: the earliest PSDB row naming it. A blob no row names (a leftover
 * that gc has not removed yet) falls back to its file's mtime, which is when it was stored. */
static int64_t blob_published(psdbd_server *srv, const char *digest, int fd)
{
    int64_t t = 0;
    struct stat sb;
    if (psdbd_index_blob_published(srv->ix, digest, &t) == PSDBD_OK)
        return t;
    return fstat(fd, &sb) == 0 ? (int64_t)sb.st_mtime : 0;
}

/* A 304 has no content, and libmicrohttpd 0.9.75 cannot send one without a framing header on a
 * kept-alive connection: a sized response gets "Content-Length: 0" (a claim that the blob is
 * empty; RFC 9110 8.6 allows only the 200's length), an unsized one "Transfer-Encoding: chunked".
 * Unsized and closing the connection, it sends neither. A 304 is rare here (blobs are immutable
 * and cached for a year), so the reconnect costs little. */
static enum MHD_Result reply_not_modified(struct MHD_Connection *c, struct req *r, const char *etag,
                                          const char *lastmod)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, no_content, NULL, NULL);
    if (!resp)
        return MHD_NO;
    MHD_set_response_options(resp, MHD_RF_HTTP_1_0_COMPATIBLE_STRICT, MHD_RO_END);
    blob_headers(resp, etag, lastmod);
    return http_queue(c, r, PSDBD_OUTCOME_NOT_MODIFIED, resp, 0);
}

/* A 416 names the blob's size in Content-Range, as RFC 9110 14.4 asks. */
static enum MHD_Result reply_unsatisfiable(struct MHD_Connection *c, struct req *r, uint64_t size,
                                           const char *etag, const char *lastmod)
{
    char crange[96];
    struct MHD_Response *resp = NULL;
    psdbd_verdict v = {0};
    size_t len = 0;
    char *body = NULL;
    psdbd_verdict_fail(&v, PSDBD_OUTCOME_RANGE_NOT_SATISFIABLE, "the blob has %llu bytes",
                       (unsigned long long)size);
    body = http_verdict_text(&v, &len);
    snprintf(crange, sizeof(crange), "bytes */%llu", (unsigned long long)size);
    resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, JSON_TYPE);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, crange);
    blob_headers(resp, etag, lastmod);
    return http_queue(c, r, v.outcome, resp, len);
}

/* ---- several ranges: multipart/byteranges (RFC 9110 14.6) ---------------------------------- */

#define MAX_RANGES 1024 /* a delta asks for at most a few hundred per request */

typedef struct multipart {
    int fd;
    uint64_t size;
    size_t n, part; /* the ranges, and the one being sent */
    psdbd_range *r;
    uint64_t part_at; /* body offset of the current part's header */
    char boundary[48];
    char head[192];
    size_t head_len;
} multipart;

/* The header of part i (i == n: the closing delimiter). */
static size_t part_head(const multipart *m, size_t i, char *out, size_t cap)
{
    int k = i < m->n ? snprintf(out, cap,
                                "\r\n--%s\r\nContent-Type: " BLOB_TYPE
                                "\r\nContent-Range: bytes %llu-%llu/%llu\r\n\r\n",
                                m->boundary, (unsigned long long)m->r[i].off,
                                (unsigned long long)(m->r[i].off + m->r[i].len - 1),
                                (unsigned long long)m->size)
                     : snprintf(out, cap, "\r\n--%s--\r\n", m->boundary);
    return k < 0 || (size_t)k >= cap ? 0 : (size_t)k;
}

static ssize_t multipart_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    multipart *m = cls;
    for (;;) {
        uint64_t data_at = m->part_at + m->head_len;
        uint64_t end = data_at + (m->part < m->n ? m->r[m->part].len : 0);
        if (pos < m->part_at)
            return MHD_CONTENT_READER_END_WITH_ERROR; /* libmicrohttpd reads in order */
        if (pos < data_at) {
            size_t k = (size_t)(data_at - pos) < max ? (size_t)(data_at - pos) : max;
            memcpy(buf, m->head + (pos - m->part_at), k);
            return (ssize_t)k;
        }
        if (m->part == m->n)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (pos < end) {
            size_t k = (size_t)(end - pos) < max ? (size_t)(end - pos) : max;
            ssize_t got = pread(m->fd, buf, k, (off_t)(m->r[m->part].off + (pos - data_at)));
            return got > 0 ? got : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        m->part++;
        m->part_at = end;
        m->head_len = part_head(m, m->part, m->head, sizeof(m->head));
    }
}

static void multipart_free(void *cls)
{
    multipart *m = cls;
    close(m->fd);
    free(m->r);
    free(m);
}

/* Answers the n ranges of m (which owns fd from here) as one 206 multipart/byteranges. */
static enum MHD_Result reply_multipart(struct MHD_Connection *c, struct req *r, multipart *m,
                                       const char *etag, const char *lastmod)
{
    char type[96];
    uint64_t total = 0;
    char head[sizeof(m->head)];
    for (size_t i = 0; i <= m->n; i++)
        total += part_head(m, i, head, sizeof(head)) + (i < m->n ? m->r[i].len : 0);
    m->head_len = part_head(m, 0, m->head, sizeof(m->head));
    struct MHD_Response *resp =
        MHD_create_response_from_callback(total, 64 * 1024, multipart_read, m, multipart_free);
    if (!resp) {
        multipart_free(m);
        return MHD_NO;
    }
    blob_headers(resp, etag, lastmod);
    snprintf(type, sizeof(type), "multipart/byteranges; boundary=%s", m->boundary);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    return http_queue(c, r, PSDBD_OUTCOME_PARTIAL, resp, total);
}

enum MHD_Result http_serve_blob(psdbd_server *srv, struct MHD_Connection *c, struct req *r,
                                const char *digest)
{
    enum MHD_Result ret = MHD_YES;
    struct MHD_Response *resp = NULL;
    char etag[70], crange[96], lastmod[40];
    uint64_t size = 0, off = 0, len = 0;
    int fd = -1, e, rr, use_range = 1;
    unsigned pre;
    const char *range;
    psdbd_outcome o;
    psdbd_conditions cond;
    if (!psdbd_is_digest(digest))
        return http_reply_error(c, r, PSDBD_OUTCOME_BAD_DIGEST,
                                "a blob is named by 64 lowercase hex digits (its SHA-256)");
    if (http_authorize(srv, c, r, http_reader_role(srv), NULL, &ret) != 0)
        return ret;
    /* A scoped token reads a blob only through a PSDB of an application in its scope; asked
     * before the file is looked at, so a 403 says nothing about whether the blob exists. */
    if (http_scoped(r)) {
        psdbd_rc rc = psdbd_index_blob_apps(srv->ix, digest, scope_accepts, r->who.scope);
        if (rc == PSDBD_NOT_FOUND)
            return http_reply_error(c, r, PSDBD_OUTCOME_OUT_OF_SCOPE,
                                    "no PSDB of an application in the token's scope has this blob");
        if (rc != PSDBD_OK)
            return http_reply_index_error(c, r, rc);
    }
    if ((e = psdbd_store_open_blob(&srv->store, digest, &fd, &size)) != 0) {
        if ((o = psdbd_outcome_of_errno(e, PSDBD_OUTCOME_NOT_FOUND)) == PSDBD_OUTCOME_NOT_FOUND)
            return http_reply_error(c, r, o, "no such blob");
        psdbd_log("open blob %s: %s", digest, strerror(e));
        return http_reply_error(c, r, o, "cannot open the blob");
    }
    snprintf(etag, sizeof(etag), "\"%s\"", digest);
    int64_t published = blob_published(srv, digest, fd);
    psdbd_format_http_date(published, lastmod, sizeof(lastmod));
    cond.if_match = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_MATCH);
    cond.if_none_match =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    cond.if_modified_since =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_MODIFIED_SINCE);
    cond.if_unmodified_since =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_UNMODIFIED_SINCE);
    cond.if_range = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_RANGE);
    pre = psdbd_blob_preconditions(&cond, digest, published, (int64_t)time(NULL), &use_range);
    if (pre == PSDBD_PRECONDITION_FAILED) {
        close(fd);
        return http_reply_error(c, r, PSDBD_OUTCOME_PRECONDITION_FAILED,
                                "the blob does not match If-Match or If-Unmodified-Since");
    }
    if (pre == PSDBD_PRECONDITION_NOT_MODIFIED) {
        close(fd);
        return reply_not_modified(c, r, etag, lastmod);
    }
    range =
        use_range ? MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE) : NULL;
    if (range && strchr(range, ',')) {
        multipart *m = xmalloc(sizeof(*m));
        memset(m, 0, sizeof(*m));
        m->r = xmalloc(MAX_RANGES * sizeof(*m->r));
        m->n = psdbd_parse_ranges(range, size, m->r, MAX_RANGES);
        if (m->n > 0) {
            /* The boundary never meets a part's bytes: parts are framed by their lengths, and
             * a blob does not hold a prefix of its own digest by chance. */
            m->fd = fd;
            m->size = size;
            snprintf(m->boundary, sizeof(m->boundary), "psdb-%.16s", digest);
            return reply_multipart(c, r, m, etag, lastmod);
        }
        free(m->r);
        free(m);
    }
    rr = psdbd_parse_range(range, size, &off, &len);
    if (rr < 0) {
        close(fd);
        return reply_unsatisfiable(c, r, size, etag, lastmod);
    }
    if (rr == 0) {
        off = 0;
        len = size;
    }
    /* The fd belongs to the response from here on; sendfile serves it on plain HTTP. */
    resp = MHD_create_response_from_fd_at_offset64(len, fd, off);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    blob_headers(resp, etag, lastmod);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, BLOB_TYPE);
    if (rr > 0) {
        snprintf(crange, sizeof(crange), "bytes %llu-%llu/%llu", (unsigned long long)off,
                 (unsigned long long)(off + len - 1), (unsigned long long)size);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, crange);
        return http_queue(c, r, PSDBD_OUTCOME_PARTIAL, resp, len);
    }
    return http_queue(c, r, PSDBD_OUTCOME_OK, resp, len);
}
