/* publish.c - the libcurl upload behind `psdb publish`, and the curl handle setup shared with the
 * delivery client. */
#include "delivery/publish.h"
#include "delivery/client_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/status_map.h"

#define MAX_RESPONSE (1u << 20)

CURL *psdb__curl_new(const char *url, const char *token, char *errbuf, struct curl_slist **headers)
{
    CURL *c = curl_easy_init();
    char *auth = NULL;
    *headers = NULL;
    if (!c)
        return NULL;
    errbuf[0] = '\0';
    if (token) {
        if (asprintf(&auth, "Authorization: Bearer %s", token) < 0) {
            curl_easy_cleanup(c);
            return NULL;
        }
        *headers = curl_slist_append(NULL, auth);
        free(auth);
        if (!*headers) {
            curl_easy_cleanup(c);
            return NULL;
        }
    }
    if (curl_easy_setopt(c, CURLOPT_URL, url) != CURLE_OK) {
        curl_slist_free_all(*headers);
        *headers = NULL;
        curl_easy_cleanup(c);
        return NULL;
    }
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "psdb/" PSDB_VERSION_STRING);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (*headers)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, *headers);
    return c;
}

struct sink {
    psdb__buf buf;
    int too_big;
};

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
    struct sink *s = ctx;
    size_t len = size * n;
    if (s->buf.len + len > MAX_RESPONSE) {
        s->too_big = 1;
        return 0;
    }
    psdb__buf_append(&s->buf, data, len);
    return s->buf.oom ? 0 : len;
}

static size_t on_read(char *out, size_t size, size_t n, void *ctx)
{
    FILE *f = ctx;
    size_t got = fread(out, 1, size * n, f);
    if (got == 0 && ferror(f))
        return CURL_READFUNC_ABORT;
    return got;
}

static psdb_hr hash_file(FILE *f, uint8_t digest[32], uint64_t *size)
{
    psdb__sha256_ctx *c = psdb__sha256_begin();
    uint8_t buf[65536];
    size_t n;
    uint64_t total = 0;
    if (!c)
        return PSDB_E_OUTOFMEMORY;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        psdb__sha256_update(c, buf, n);
        total += n;
    }
    psdb__sha256_end(c, digest);
    if (ferror(f))
        return PSDB_E_IO;
    *size = total;
    return PSDB_S_OK;
}

/* 201: published; 200: the same PSDB was already there (S_FALSE); errors as everywhere else. */
static psdb_hr status_hr(long status)
{
    if (status == 201)
        return PSDB_S_OK;
    if (status == 200)
        return PSDB_S_FALSE;
    return psdb__http_hr(status);
}

/* The trailer form's digest, on a thread of its own: it reads the file with pread (which leaves
 * the sending side's file offset alone) while curl sends it, so hashing and sending overlap on a
 * machine with a core to spare instead of taking turns on one thread. */
typedef struct hasher {
    pthread_t thread;
    int fd;
    int started, joined;
    uint8_t digest[32];
    uint64_t size;
    int err; /* errno of a failed read, or ENOMEM; 0: none */
} hasher;

static void *hash_thread(void *arg)
{
    hasher *h = arg;
    enum { BLOCK = 1 << 20 };
    uint8_t *buf = malloc(BLOCK);
    psdb__sha256_ctx *c = psdb__sha256_begin();
    uint64_t at = 0;
    if (!buf || !c) {
        h->err = ENOMEM;
        goto cleanup;
    }
    for (;;) {
        ssize_t n = pread(h->fd, buf, BLOCK, (off_t)at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            h->err = errno ? errno : EIO;
            goto cleanup;
        }
        if (n == 0)
            break;
        psdb__sha256_update(c, buf, (size_t)n);
        at += (uint64_t)n;
    }
    h->size = at;
cleanup:
    if (c)
        psdb__sha256_end(c, h->digest);
    free(buf);
    return NULL;
}

/* Waits for the digest; 0 when it is there, else the errno that stopped it. */
static int hasher_join(hasher *h)
{
    if (h->started && !h->joined) {
        pthread_join(h->thread, NULL);
        h->joined = 1;
    }
    return h->started ? h->err : EINVAL;
}

/* The trailer form's read side: what is sent is counted; the hasher reads the same file. */
struct upload {
    FILE *f;
    hasher *h;
    uint64_t sent;
    int read_errno; /* the read failed (0: it did not) */
    /* for the trailer */
    const psdb_key *key;
    psdb_statement *st; /* identity, target and serial set; digest and size filled at the end */
    psdb_hr sign_hr;    /* a failed signature (S_OK: none) */
    int changed;        /* the file's size moved while it was sent */
};

static size_t on_read_counting(char *out, size_t size, size_t n, void *ctx)
{
    struct upload *u = ctx;
    size_t got = fread(out, 1, size * n, u->f);
    if (got == 0 && ferror(u->f)) {
        u->read_errno = errno ? errno : EIO;
        return CURL_READFUNC_ABORT;
    }
    u->sent += got;
    return got;
}

/* curl rewinds the body when it must send the request again (a reused connection found closed).
 * Only a rewind to the start is asked for; the file's digest does not change with it. */
static int on_seek_upload(void *ctx, curl_off_t offset, int origin)
{
    struct upload *u = ctx;
    if (offset != 0 || origin != SEEK_SET)
        return CURL_SEEKFUNC_CANTSEEK;
    if (fseek(u->f, 0, SEEK_SET) != 0)
        return CURL_SEEKFUNC_FAIL;
    u->sent = 0;
    return CURL_SEEKFUNC_OK;
}

/* Called by curl before the chunked body's final CRLF: the hasher has read the file as it was
 * sent, so the statement can be signed and sent as the trailer. A file that changed under the
 * publish (another size read than sent) is not signed; one whose bytes changed at equal size is
 * refused by psdbd, which hashes what it received (statement_mismatch). */
static int on_trailer(struct curl_slist **list, void *ctx)
{
    struct upload *u = ctx;
    char sig[PSDB_SIGNATURE_B64_SIZE], hex[65];
    char lines[3][128];
    int rc = CURL_TRAILERFUNC_ABORT;

    int err = hasher_join(u->h);
    if (err) {
        u->read_errno = err;
        goto cleanup;
    }
    if (u->h->size != u->sent) {
        u->changed = 1;
        goto cleanup;
    }
    memcpy(u->st->sha256, u->h->digest, sizeof(u->st->sha256));
    u->st->size = u->sent;
    if ((u->sign_hr = psdb_statement_sign(u->key, u->st, sig)) < 0)
        goto cleanup;
    psdb__hex(u->st->sha256, sizeof(u->st->sha256), hex);
    snprintf(lines[0], sizeof(lines[0]), "X-Psdb-Sha256: %s", hex);
    snprintf(lines[1], sizeof(lines[1]), "X-Psdb-Size: %llu", (unsigned long long)u->sent);
    snprintf(lines[2], sizeof(lines[2]), "X-Psdb-Signature: %s", sig);
    for (int i = 0; i < 3; i++) {
        struct curl_slist *l = curl_slist_append(*list, lines[i]);
        if (!l) { /* curl frees what was appended when the callback aborts */
            u->sign_hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        *list = l;
    }
    rc = CURL_TRAILERFUNC_OK;
cleanup:
    return rc;
}

/* Before each attempt: nothing sent, no failure seen. */
static void upload_reset(struct upload *u)
{
    u->sent = 0;
    u->read_errno = 0;
    u->sign_hr = PSDB_S_OK;
    u->changed = 0;
}

/* The request's own headers after the client's token header: appended to *headers. With a
 * signature, the header form; without (sig NULL), the trailer form's chunked framing and its
 * Trailer declaration. */
static psdb_hr add_headers(struct curl_slist **headers, uint64_t serial, const char *kid,
                           const char *sig)
{
    psdb_hr hr = PSDB_S_OK;
    char *line = NULL;
    struct curl_slist *h;

    for (int i = 0; i < (sig ? 4 : 5); i++) {
        int len = i == 0   ? asprintf(&line, "Content-Type: application/octet-stream")
                  : i == 1 ? asprintf(&line, "X-Psdb-Serial: %llu", (unsigned long long)serial)
                  : i == 2 ? asprintf(&line, "X-Psdb-Key-Id: %s", kid)
                  : sig    ? asprintf(&line, "X-Psdb-Signature: %s", sig)
                  : i == 3
                      ? asprintf(&line, "Transfer-Encoding: chunked")
                      : asprintf(&line, "Trailer: X-Psdb-Sha256, X-Psdb-Size, X-Psdb-Signature");
        h = len < 0 ? NULL : curl_slist_append(*headers, line);
        if (len < 0)
            line = NULL;
        free(line);
        line = NULL;
        if (!h) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        *headers = h;
    }
cleanup:
    return hr;
}

/* How a publish chooses its form (PSDB_PUBLISH_STATEMENT): "auto" (unset or empty) asks the
 * server first (trailers_reach_server), "trailer" and "header" force one. */
enum publish_form { FORM_AUTO, FORM_TRAILER, FORM_HEADER, FORM_UNKNOWN };

static enum publish_form form_setting(const char **value)
{
    const char *v = getenv("PSDB_PUBLISH_STATEMENT");
    *value = v;
    if (!v || !*v || strcmp(v, "auto") == 0)
        return FORM_AUTO;
    if (strcmp(v, "trailer") == 0)
        return FORM_TRAILER;
    return strcmp(v, "header") == 0 ? FORM_HEADER : FORM_UNKNOWN;
}

/* The probe's body: one zero byte. Not empty, since a proxy may turn an empty chunked body into
 * "Content-Length: 0" (nginx does), which psdbd would refuse for want of a length before it looked
 * for a trailer. */
static size_t on_read_probe(char *out, size_t size, size_t n, void *ctx)
{
    int *sent = ctx;
    if (*sent || size * n == 0)
        return 0;
    out[0] = '\0';
    *sent = 1;
    return 1;
}

/* A statement that is well formed and describes the probe's body: psdbd checks it and then
 * refuses the body, which is not a PSDB. */
const char *const psdb__publish_probe_trailer[3] = {
    "X-Psdb-Sha256: 6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "X-Psdb-Size: 1",
    /* 64 zero bytes in base64: 86 'A' and the padding of the last byte (88 characters). */
    "X-Psdb-Signature: "
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAA=="};

static int on_probe_trailer(struct curl_slist **list, void *ctx)
{
    const char *const *lines = psdb__publish_probe_trailer;
    (void)ctx;
    for (size_t i = 0; i < 3; i++) {
        struct curl_slist *l = curl_slist_append(*list, lines[i]);
        if (!l)
            return CURL_TRAILERFUNC_ABORT;
        *list = l;
    }
    return CURL_TRAILERFUNC_OK;
}

/* Whether a trailer sent to `url` reaches psdbd: some proxies drop request trailers (nginx does)
 * and servers before the trailer form refuse chunked publishes (411). One trailer-form publish
 * of a single byte answers it: psdbd checks its trailer and then refuses the byte as no PSDB
 * (400 invalid_psdb) only when the trailer arrived (else 400 trailer_missing, or 400 for the
 * missing header statement where a proxy sent the byte with a length). Any other answer, or
 * none, chooses the header form, which every psdbd and proxy passes. 1: use the trailer form;
 * 0: the header form; PSDB_E_OUTOFMEMORY. *cc is the transfer's result (not CURLE_OK: no answer
 * came, which the caller counts as the publish's first failed attempt). */
static int trailers_reach_server(psdb_client *client, const char *url, uint64_t serial,
                                 const char *kid, CURLcode *cc)
{
    int rc = 0;
    long status = 0;
    struct curl_slist *headers = NULL, *h;
    struct sink sink = {0};
    json_t *doc = NULL;
    int sent = 0;
    CURL *c = psdb__client_new_handle(client, url, &headers);
    *cc = CURLE_OK;
    if (!c || PSDB_FAILED(add_headers(&headers, serial, kid, NULL)) ||
        !(h = curl_slist_append(headers, "Expect:"))) { /* no body to hold back */
        rc = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    headers = h;
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read_probe);
    curl_easy_setopt(c, CURLOPT_READDATA, &sent);
    curl_easy_setopt(c, CURLOPT_TRAILERFUNCTION, on_probe_trailer);
    /* The probe's connection ends with an error answer: the upload gets a fresh one. */
    curl_easy_setopt(c, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
    if ((*cc = curl_easy_perform(c)) != CURLE_OK)
        goto cleanup;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status != 400 || sink.buf.oom || sink.buf.len == 0)
        goto cleanup;
    doc = json_loadb((const char *)sink.buf.data, sink.buf.len, 0, NULL);
    rc = doc && json_is_string(json_object_get(doc, "error")) &&
         strcmp(json_string_value(json_object_get(doc, "error")), "invalid_psdb") == 0;
cleanup:
    json_decref(doc);
    if (c)
        curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    psdb__buf_free(&sink.buf);
    return rc;
}

psdb_hr psdb__publish(psdb_client *client, const psdb__publish_desc *d, long *status, char **body,
                      char *msg, size_t msg_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_file *pf = NULL;
    psdb_file_info info;
    psdb_key *key = NULL;
    psdb_statement st = {0};
    FILE *f = NULL;
    CURL *c = NULL;
    struct curl_slist *headers = NULL;
    struct sink sink = {0};
    struct upload up = {0};
    hasher hash = {0};
    struct stat sb;
    char sig[PSDB_SIGNATURE_B64_SIZE], kid[PSDB_KEY_ID_SIZE];
    char *url = NULL;
    const char *form_text = NULL;
    enum publish_form form;
    int header_form = 0;
    uint32_t first_attempt = 1;
    CURLcode cc = CURLE_OK;

    *status = 0;
    *body = NULL;
    msg[0] = '\0';
    if (!client || !d || !d->token || !d->key_path || !d->psdb_path) {
        snprintf(msg, msg_size, "server, token, key and file are required");
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    if ((form = form_setting(&form_text)) == FORM_UNKNOWN) {
        snprintf(msg, msg_size,
                 "PSDB_PUBLISH_STATEMENT must be 'auto', 'trailer' or 'header', not '%.64s'",
                 form_text);
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    /* The explanation names the key file and what is wrong with it (psdb_key_load_kind). */
    if ((hr = psdb_key_load_kind(d->key_path, PSDB_KEY_PRIVATE, &key, msg, msg_size)) < 0)
        goto cleanup;
    if ((hr = psdb_file_open(d->psdb_path, NULL, &pf)) < 0 ||
        (hr = psdb_file_get_info(pf, &info)) < 0) {
        snprintf(msg, msg_size, "%s: not a valid PSDB (%s)", d->psdb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    f = fopen(d->psdb_path, "rb");
    if (!f || fstat(fileno(f), &sb) != 0) {
        snprintf(msg, msg_size, "open %s: %s", d->psdb_path, strerror(errno));
        hr = PSDB_E_IO;
        goto cleanup;
    }
    st.identity = info.identity;
    st.target = info.target;
    st.serial = d->serial;
    if ((hr = psdb_key_id(key, kid)) < 0) {
        snprintf(msg, msg_size, "cannot sign the statement (%s)", psdb_hr_str(hr));
        goto cleanup;
    }
    /* The client's server URL has no trailing '/' (psdb_client_create strips it). */
    if (asprintf(&url, "%s/v1/psdbs", client->server_url) < 0) {
        url = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (form == FORM_HEADER)
        header_form = 1;
    else if (form == FORM_AUTO) {
        int reach = trailers_reach_server(client, url, d->serial, kid, &cc);
        if (reach < 0) {
            hr = PSDB_E_OUTOFMEMORY;
            snprintf(msg, msg_size, "publish: out of memory");
            goto cleanup;
        }
        header_form = !reach;
        /* No answer: the publish's first attempt failed, so that a server that does not answer
         * costs 1 + max_retries connections and timeouts, as without the question. */
        if (cc != CURLE_OK) {
            psdb_progress wait = {d->psdb_path, 0, (uint64_t)sb.st_size, 1};
            if (!psdb__client_transient_curl(cc) || client->max_retries < 1) {
                snprintf(msg, msg_size, "publish: %s: %s (after 1 attempt)", url,
                         client->curl_error[0] ? client->curl_error : curl_easy_strerror(cc));
                hr = PSDB_E_NETWORK;
                goto cleanup;
            }
            if (psdb__client_backoff(client, &wait, 1)) {
                snprintf(msg, msg_size, "publish: %s: cancelled by the progress callback", url);
                hr = PSDB_E_CANCELLED;
                goto cleanup;
            }
            first_attempt = 2;
        }
    }
    /* The header form needs the digest before the first byte goes: a whole read of the file
     * before the upload. The trailer form hashes while it sends and signs at the end. */
    if (header_form) {
        if ((hr = hash_file(f, st.sha256, &st.size)) < 0) {
            snprintf(msg, msg_size, "read %s: %s", d->psdb_path, strerror(errno));
            goto cleanup;
        }
        if ((hr = psdb_statement_sign(key, &st, sig)) < 0) {
            snprintf(msg, msg_size, "cannot sign the statement (%s)", psdb_hr_str(hr));
            goto cleanup;
        }
    }
    up.f = f;
    up.h = &hash;
    up.key = key;
    up.st = &st;
    if (!header_form) {
        hash.fd = fileno(f);
        if (pthread_create(&hash.thread, NULL, hash_thread, &hash) != 0) {
            hr = PSDB_E_OUTOFMEMORY;
            snprintf(msg, msg_size, "publish: cannot start the hashing thread");
            goto cleanup;
        }
        hash.started = 1;
    }
    /* The same handle setup as resolve and download: the client's CA file, pinned key, connect
     * and low-speed timeouts; and the same retry rule. Retrying the POST is safe: psdbd answers
     * 200 to a second upload of content it already holds. */
    for (uint32_t attempt = first_attempt;; attempt++) {
        *status = 0;
        free(*body);
        *body = NULL;
        psdb__buf_free(&sink.buf);
        sink = (struct sink){0};
        rewind(f);
        upload_reset(&up);
        c = psdb__client_new_handle(client, url, &headers);
        if (!c ||
            PSDB_FAILED(hr = add_headers(&headers, d->serial, kid, header_form ? sig : NULL))) {
            hr = PSDB_E_OUTOFMEMORY;
            snprintf(msg, msg_size, "publish: out of memory");
            goto cleanup;
        }
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        if (header_form) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)st.size);
            curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
            curl_easy_setopt(c, CURLOPT_READDATA, f);
        } else {
            /* No length: curl sends the body chunked (the Transfer-Encoding header above), with
             * Expect: 100-continue, so a refusal of the headers costs no body byte. */
            curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read_counting);
            curl_easy_setopt(c, CURLOPT_READDATA, &up);
            curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek_upload);
            curl_easy_setopt(c, CURLOPT_SEEKDATA, &up);
            curl_easy_setopt(c, CURLOPT_TRAILERFUNCTION, on_trailer);
            curl_easy_setopt(c, CURLOPT_TRAILERDATA, &up);
        }
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
        cc = curl_easy_perform(c);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
        curl_easy_cleanup(c);
        c = NULL;
        curl_slist_free_all(headers);
        headers = NULL;
        if (sink.buf.len > 0 && !sink.buf.oom) {
            *body = malloc(sink.buf.len + 1);
            if (*body) {
                memcpy(*body, sink.buf.data, sink.buf.len);
                (*body)[sink.buf.len] = '\0';
            }
        }
        /* A local failure in the middle of the body is not the network's: never retried. */
        if (up.read_errno) {
            snprintf(msg, msg_size, "read %s: %s", d->psdb_path, strerror(up.read_errno));
            hr = PSDB_E_IO;
            goto cleanup;
        }
        if (up.changed) {
            snprintf(msg, msg_size,
                     "read %s: the file changed while it was sent (%llu bytes "
                     "sent, %llu read by the digest)",
                     d->psdb_path, (unsigned long long)up.sent, (unsigned long long)hash.size);
            hr = PSDB_E_IO;
            goto cleanup;
        }
        if (PSDB_FAILED(up.sign_hr)) {
            hr = up.sign_hr;
            snprintf(msg, msg_size, "cannot sign the statement (%s)", psdb_hr_str(hr));
            goto cleanup;
        }
        int failed_transfer = cc != CURLE_OK && *status == 0;
        int retry =
            failed_transfer ? psdb__client_transient_curl(cc) : psdb__http_transient(*status);
        if (retry && attempt <= client->max_retries) {
            /* The progress callback's cancel stops a publish's backoff as it stops a download's. */
            psdb_progress wait = {d->psdb_path, 0, (uint64_t)sb.st_size, attempt};
            if (psdb__client_backoff(client, &wait, attempt)) {
                snprintf(msg, msg_size, "publish: %s: cancelled by the progress callback", url);
                hr = PSDB_E_CANCELLED;
                goto cleanup;
            }
            continue;
        }
        if (failed_transfer) {
            snprintf(msg, msg_size, "publish: %s: %s (after %u attempt%s)", url,
                     client->curl_error[0] ? client->curl_error : curl_easy_strerror(cc), attempt,
                     attempt == 1 ? "" : "s");
            hr = PSDB_E_NETWORK;
            goto cleanup;
        }
        hr = status_hr(*status);
        if (hr < 0)
            snprintf(msg, msg_size, "publish: %s answered HTTP %ld", url, *status);
        break;
    }
cleanup:
    hasher_join(&hash);
    free(url);
    if (c)
        curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    psdb__buf_free(&sink.buf);
    if (f)
        fclose(f);
    psdb_file_release(pf);
    psdb_key_release(key);
    return hr;
}

psdb_hr psdb_client_publish(psdb_client *c, const psdb_publish_desc *d, psdb_publish_result **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_publish_result *r = NULL;
    psdb__publish_desc pd;

    psdb__error_clear();
    if (out)
        *out = NULL;
    if (!c || !d || !out) {
        hr = psdb__error_set(PSDB_E_INVALIDARG, "psdb_client_publish: NULL client, desc or out");
        goto cleanup;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "psdb_client_publish: out of memory");
        goto cleanup;
    }
    c->error[0] = '\0';
    if (!c->token || !d->key_path || !d->psdb_path) {
        snprintf(r->message, sizeof(r->message),
                 "publish needs the client's token, a key path and a PSDB path");
        hr = PSDB_E_INVALIDARG;
    } else {
        pd = (psdb__publish_desc){.token = c->token,
                                  .key_path = d->key_path,
                                  .serial = d->serial,
                                  .psdb_path = d->psdb_path};
        hr = psdb__publish(c, &pd, &r->http_status, &r->body, r->message, sizeof(r->message));
        r->body_size = r->body ? strlen(r->body) : 0;
    }
    if (PSDB_FAILED(hr)) {
        if (!r->message[0])
            snprintf(r->message, sizeof(r->message), "publish: %s", psdb_hr_str(hr));
        /* The same line is the client's and the thread's last error. */
        psdb__client_error(c, "%s", r->message);
    }
    *out = r;
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_publish_result_free(psdb_publish_result *r)
{
    if (!r)
        return;
    free(r->body);
    free(r);
}
