/* publish.c - psdb_client_publish: the PSDB's statement signed and the file uploaded through the
 * client's transport, the statement in the headers or in the trailer of a chunked upload. */
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
#include "common/fdio.h"
#include "common/hash.h"
#include "common/status_map.h"

#define MAX_RESPONSE (1u << 20)

/* The header form's digest: the whole file, read before the upload starts. */
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
        ssize_t n = psdb__pread_upto(h->fd, buf, BLOCK, at);
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

/* The upload's body: the file, counted as it is sent; in the trailer form the statement is signed
 * once the hasher has read the same file, and sent as the trailer. */
typedef struct upload {
    FILE *f;
    const char *path;
    hasher *h; /* the trailer form's digest; NULL: the header form */
    uint64_t sent;
    const psdb_key *key;
    psdb_statement *st; /* identity, target and serial set; digest and size filled at the end */
    char lines[3][128];
    const char *trailer[4];
} upload;

/* Each attempt sends the file from its first byte; the digest does not change with it. */
static int up_rewind(void *ctx)
{
    upload *u = ctx;
    if (fseek(u->f, 0, SEEK_SET) != 0)
        return -1;
    u->sent = 0;
    return 0;
}

static int up_begin(void *ctx, psdb__attempt *a, const char **range)
{
    (void)range;
    if (up_rewind(ctx) != 0) {
        a->failed =
            psdb__error_set(PSDB_E_IO, "read %s: %s", ((upload *)ctx)->path, strerror(errno));
        return -1;
    }
    return 0;
}

/* A local failure in the middle of the body is not the network's: never retried. */
static ssize_t up_read(void *ctx, psdb__attempt *a, char *out, size_t n)
{
    upload *u = ctx;
    size_t got = fread(out, 1, n, u->f);
    if (got == 0 && ferror(u->f)) {
        a->failed =
            psdb__error_set(PSDB_E_IO, "read %s: %s", u->path, strerror(errno ? errno : EIO));
        return -1;
    }
    u->sent += got;
    return (ssize_t)got;
}

/* Before the chunked body's final CRLF: the hasher has read the file as it was sent, so the
 * statement can be signed and sent as the trailer. A file that changed under the publish (another
 * size read than sent) is not signed; one whose bytes changed at equal size is refused by psdbd,
 * which hashes what it received (statement_mismatch). */
static int up_trailer(void *ctx, psdb__attempt *a, const char *const **lines)
{
    upload *u = ctx;
    char sig[PSDB_SIGNATURE_B64_SIZE], hex[65];
    psdb_hr hr;
    int err = hasher_join(u->h);
    if (err) {
        a->failed = psdb__error_set(PSDB_E_IO, "read %s: %s", u->path, strerror(err));
        return -1;
    }
    if (u->h->size != u->sent) {
        a->failed =
            psdb__error_set(PSDB_E_IO,
                            "read %s: the file changed while it was sent (%llu bytes "
                            "sent, %llu read by the digest)",
                            u->path, (unsigned long long)u->sent, (unsigned long long)u->h->size);
        return -1;
    }
    memcpy(u->st->sha256, u->h->digest, sizeof(u->st->sha256));
    u->st->size = u->sent;
    if (PSDB_FAILED(hr = psdb_statement_sign(u->key, u->st, sig))) {
        a->failed = psdb__error_set(hr, "cannot sign the statement (%s)", psdb_hr_str(hr));
        return -1;
    }
    psdb__hex(u->st->sha256, sizeof(u->st->sha256), hex);
    snprintf(u->lines[0], sizeof(u->lines[0]), "X-Psdb-Sha256: %s", hex);
    snprintf(u->lines[1], sizeof(u->lines[1]), "X-Psdb-Size: %llu", (unsigned long long)u->sent);
    snprintf(u->lines[2], sizeof(u->lines[2]), "X-Psdb-Signature: %s", sig);
    for (int i = 0; i < 3; i++)
        u->trailer[i] = u->lines[i];
    u->trailer[3] = NULL;
    *lines = u->trailer;
    return 0;
}

/* The request's own headers after the client's token header. With a signature, the header form;
 * without (sig NULL), the trailer form's chunked framing and its Trailer declaration; the probe
 * also sends no Expect: it has no body worth holding back. */
typedef struct form_headers {
    char serial[48], kid[32 + PSDB_KEY_ID_SIZE], sig[32 + PSDB_SIGNATURE_B64_SIZE];
    char sodb[32 + 65]; /* X-Psdb-Sodb-Sha256 of a version 2 statement; "" for none */
    const char *v[8];
} form_headers;

static const char *const *headers_of(form_headers *h, uint64_t serial, const char *kid,
                                     const char *sig, int probe)
{
    size_t n = 0;
    if (h->sodb[0])
        h->v[n++] = h->sodb;
    snprintf(h->serial, sizeof(h->serial), "X-Psdb-Serial: %llu", (unsigned long long)serial);
    snprintf(h->kid, sizeof(h->kid), "X-Psdb-Key-Id: %s", kid);
    h->v[n++] = "Content-Type: application/octet-stream";
    h->v[n++] = h->serial;
    h->v[n++] = h->kid;
    if (sig) {
        snprintf(h->sig, sizeof(h->sig), "X-Psdb-Signature: %s", sig);
        h->v[n++] = h->sig;
    } else {
        h->v[n++] = "Transfer-Encoding: chunked";
        h->v[n++] = "Trailer: X-Psdb-Sha256, X-Psdb-Size, X-Psdb-Signature";
    }
    if (probe)
        h->v[n++] = "Expect:";
    h->v[n] = NULL;
    return h->v;
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
static ssize_t probe_read(void *ctx, psdb__attempt *a, char *out, size_t n)
{
    int *sent = ctx;
    (void)a;
    if (*sent || n == 0)
        return 0;
    out[0] = '\0';
    *sent = 1;
    return 1;
}

static int probe_begin(void *ctx, psdb__attempt *a, const char **range)
{
    (void)a;
    (void)range;
    *(int *)ctx = 0;
    return 0;
}

/* A statement that is well formed and describes the probe's body: psdbd checks it and then
 * refuses the body, which is not a PSDB. */
const char *const psdb__publish_probe_trailer[4] = {
    "X-Psdb-Sha256: 6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "X-Psdb-Size: 1",
    /* 64 zero bytes in base64: 86 'A' and the padding of the last byte (88 characters). */
    "X-Psdb-Signature: "
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    "AAAAAAAA==",
    NULL};

static int probe_trailer(void *ctx, psdb__attempt *a, const char *const **lines)
{
    (void)ctx;
    (void)a;
    *lines = psdb__publish_probe_trailer;
    return 0;
}

/* Whether a trailer sent to `url` reaches psdbd: some proxies drop request trailers (nginx does)
 * and servers before the trailer form refuse chunked publishes (411). One trailer-form publish
 * of a single byte answers it: psdbd checks its trailer and then refuses the byte as no PSDB
 * (400 invalid_psdb) only when the trailer arrived (else 400 trailer_missing, or 400 for the
 * missing header statement where a proxy sent the byte with a length). Any other answer chooses
 * the header form, which every psdbd and proxy passes. PSDB_S_OK with *trailer 1 or 0; a probe
 * that got no answer counts as the publish's first attempt: *spent 1, unless it failed for good
 * (then its status, as the publish's). */
static psdb_hr trailers_reach_server(psdb_client *c, const char *url, uint64_t serial,
                                     const char *kid, int *trailer, uint32_t *spent)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__buf body = {0};
    psdb__response res;
    form_headers fh;
    json_t *doc = NULL;
    int sent = 0;
    const psdb__upload up = {.size = -1, .read = probe_read, .trailer = probe_trailer};
    /* One attempt, on a connection of its own: it ends with an error answer, and the upload
     * gets a fresh one. */
    psdb__request r = {.who = "publish",
                       .url = url,
                       .headers = headers_of(&fh, serial, kid, NULL, 1),
                       .flags = PSDB__REQ_FRESH | PSDB__REQ_STATUS_FINAL,
                       .expect = {PSDB__HTTP_BAD_REQUEST},
                       .max_attempts = 1,
                       .body = &body,
                       .body_max = MAX_RESPONSE,
                       .upload = &up,
                       .ctx = &sent,
                       .begin = probe_begin};
    *trailer = 0;
    *spent = 0;
    hr = psdb__transport_run(c, &r, &res);
    if (PSDB_SUCCEEDED(hr)) {
        doc = json_loadb((const char *)body.data, body.len, 0, NULL);
        *trailer = doc && json_is_string(json_object_get(doc, "error")) &&
                   strcmp(json_string_value(json_object_get(doc, "error")), "invalid_psdb") == 0;
    } else if (res.status != 0) {
        hr = PSDB_S_OK; /* another answer: the header form */
    } else if (res.transient && c->max_retries >= 1) {
        /* No answer: the publish's first attempt failed, so that a server that does not answer
         * costs 1 + max_retries connections and timeouts, as without the question. */
        hr = PSDB_S_OK;
        *spent = 1;
    }
    json_decref(doc);
    psdb__buf_free(&body);
    return hr;
}

/* Whether path holds an SODB: an SQLite file whose application_id (header offset 68, big-endian)
 * is 'PSOD' (schema/SODB.md). Anything else is left to the PSDB's checks. */
static psdb_hr file_is_sodb(const char *path, int *is_sodb)
{
    static const char sqlite_magic[16] = "SQLite format 3";
    unsigned char head[72];
    FILE *f = fopen(path, "rb");
    *is_sodb = 0;
    if (!f)
        return psdb__error_set(psdb__errno_hr(errno), "open %s: %s", path, strerror(errno));
    size_t n = fread(head, 1, sizeof(head), f);
    fclose(f);
    *is_sodb = n == sizeof(head) && memcmp(head, sqlite_magic, 16) == 0 &&
               ((uint32_t)head[68] << 24 | (uint32_t)head[69] << 16 | (uint32_t)head[70] << 8 |
                head[71]) == 0x50534F44u;
    return PSDB_S_OK;
}

/* Signs and uploads one PSDB (schema/STATEMENT.md, schema/HTTP.md) to the client's server: the
 * trailer form when the probe finds that a trailer reaches psdbd, else the header form;
 * PSDB_PUBLISH_STATEMENT overrides (psdb_client_publish). r gets the status and the body of the
 * last answer; every failure is recorded in psdb_error_last. */
static psdb_hr publish(psdb_client *c, const psdb_publish_desc *d, psdb_publish_result *r)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_file *pf = NULL;
    psdb_file_info info;
    psdb_key *key = NULL;
    psdb_statement st = {0};
    psdb__buf body = {0};
    psdb__response res = {0};
    FILE *f = NULL;
    upload up = {0};
    hasher hash = {0};
    form_headers fh = {.sodb = ""};
    psdb_sodb *sodb = NULL;
    psdb_sodb_statement sst = {0};
    int is_sodb = 0;
    struct stat sb;
    char sig[PSDB_SIGNATURE_B64_SIZE], kid[PSDB_KEY_ID_SIZE], why[512];
    char *url = NULL;
    const char *form_text = NULL;
    enum publish_form form;
    int header_form = 0, reach = 0;
    uint32_t spent = 0;

    if ((form = form_setting(&form_text)) == FORM_UNKNOWN) {
        hr = psdb__error_set(PSDB_E_INVALIDARG,
                             "PSDB_PUBLISH_STATEMENT must be 'auto', 'trailer' or 'header', not "
                             "'%.64s'",
                             form_text);
        goto cleanup;
    }
    /* The explanation names the key file and what is wrong with it (psdb_key_load_kind). */
    if ((hr = psdb_key_load_kind(d->key_path, PSDB_KEY_PRIVATE, &key, why, sizeof(why))) < 0) {
        psdb__error_set(hr, "%s", why);
        goto cleanup;
    }
    /* The kind comes from the file: an SODB goes to /v1/sodbs with its own statement. */
    if ((hr = file_is_sodb(d->psdb_path, &is_sodb)) < 0)
        goto cleanup;
    if (is_sodb && d->sodb_sha256) {
        hr = psdb__error_set(PSDB_E_INVALIDARG,
                             "%s is an SODB: a source SODB digest is for a PSDB's statement",
                             d->psdb_path);
        goto cleanup;
    }
    if (is_sodb) {
        if ((hr = psdb_sodb_open(d->psdb_path, &sodb)) < 0 ||
            (hr = psdb_sodb_get_identity(sodb, &sst.identity)) < 0) {
            psdb__error_set(hr, "%s: not a valid SODB (%s)", d->psdb_path, psdb_hr_str(hr));
            goto cleanup;
        }
        sst.serial = d->serial;
    } else if ((hr = psdb_file_open(d->psdb_path, NULL, &pf)) < 0 ||
               (hr = psdb_file_get_info(pf, &info)) < 0) {
        psdb__error_set(hr, "%s: neither a valid PSDB nor an SODB (%s)", d->psdb_path,
                        psdb_hr_str(hr));
        goto cleanup;
    }
    f = fopen(d->psdb_path, "rb");
    if (!f || fstat(fileno(f), &sb) != 0) {
        hr = psdb__error_set(PSDB_E_IO, "open %s: %s", d->psdb_path, strerror(errno));
        goto cleanup;
    }
    st.identity = info.identity;
    st.target = info.target;
    st.serial = d->serial;
    if (d->sodb_sha256) {
        char hex[65];
        st.has_sodb = 1;
        memcpy(st.sodb_sha256, d->sodb_sha256, 32);
        psdb__hex(d->sodb_sha256, 32, hex);
        snprintf(fh.sodb, sizeof(fh.sodb), "X-Psdb-Sodb-Sha256: %s", hex);
    }
    if ((hr = psdb_key_id(key, kid)) < 0) {
        psdb__error_set(hr, "cannot sign the statement (%s)", psdb_hr_str(hr));
        goto cleanup;
    }
    /* The client's server URL has no trailing '/' (psdb_client_create strips it). */
    if (asprintf(&url, "%s/v1/%s", c->server_url, is_sodb ? "sodbs" : "psdbs") < 0) {
        url = NULL;
        hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "publish: out of memory");
        goto cleanup;
    }
    /* An SODB and a version 2 statement go in the headers (schema/HTTP.md: the farm's publishes
     * name their statement there), whatever the setting. */
    if (form == FORM_HEADER || is_sodb || d->sodb_sha256)
        header_form = 1;
    else if (form == FORM_AUTO) {
        if (PSDB_FAILED(hr = trailers_reach_server(c, url, d->serial, kid, &reach, &spent)))
            goto cleanup;
        header_form = !reach;
    }
    /* The header form needs the digest before the first byte goes: a whole read of the file
     * before the upload. The trailer form hashes while it sends and signs at the end. */
    if (header_form) {
        if ((hr = hash_file(f, st.sha256, &st.size)) < 0) {
            psdb__error_set(hr, "read %s: %s", d->psdb_path, strerror(errno));
            goto cleanup;
        }
        if (is_sodb) {
            memcpy(sst.sha256, st.sha256, 32);
            sst.size = st.size;
            hr = psdb_sodb_statement_sign(key, &sst, sig);
        } else {
            hr = psdb_statement_sign(key, &st, sig);
        }
        if (hr < 0) {
            psdb__error_set(hr, "cannot sign the statement (%s)", psdb_hr_str(hr));
            goto cleanup;
        }
    } else {
        hash.fd = fileno(f);
        if (pthread_create(&hash.thread, NULL, hash_thread, &hash) != 0) {
            hr = psdb__error_set(PSDB_E_OUTOFMEMORY, "publish: cannot start the hashing thread");
            goto cleanup;
        }
        hash.started = 1;
    }
    up = (upload){.f = f, .path = d->psdb_path, .h = &hash, .key = key, .st = &st};
    const psdb__upload body_src = {.size = header_form ? (int64_t)st.size : -1,
                                   .read = up_read,
                                   .rewind = up_rewind,
                                   .trailer = header_form ? NULL : up_trailer};
    /* Retrying the POST is safe: psdbd answers 200 to a second upload of content it already
     * holds. The progress callback's cancel stops it as it stops a download. */
    psdb__request req = {.who = "publish",
                         .url = url,
                         .headers = headers_of(&fh, d->serial, kid, header_form ? sig : NULL, 0),
                         .expect = {PSDB__HTTP_CREATED, PSDB__HTTP_OK},
                         .attempts_before = spent,
                         .body = &body,
                         .body_max = MAX_RESPONSE,
                         .upload = &body_src,
                         .ctx = &up,
                         .begin = up_begin};
    hr = psdb__transport_run(c, &req, &res);
    r->http_status = res.status;
    if (body.len > 0 && !body.oom && (r->body = malloc(body.len + 1)) != NULL) {
        memcpy(r->body, body.data, body.len);
        r->body[body.len] = '\0';
    }
    /* 201: published; 200: the same PSDB was already there. */
    if (PSDB_SUCCEEDED(hr) && res.status == PSDB__HTTP_OK)
        hr = PSDB_S_FALSE;
cleanup:
    hasher_join(&hash);
    free(url);
    psdb__buf_free(&body);
    if (f)
        fclose(f);
    psdb_file_release(pf);
    psdb_sodb_release(sodb);
    psdb_key_release(key);
    return hr;
}

psdb_hr psdb_client_publish(psdb_client *c, const psdb_publish_desc *d, psdb_publish_result **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_publish_result *r = NULL;

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
    if (!c->token || !d->key_path || !d->psdb_path)
        hr = psdb__error_set(PSDB_E_INVALIDARG,
                             "publish needs the client's token, a key path and a PSDB path");
    else
        hr = publish(c, d, r);
    r->body_size = r->body ? strlen(r->body) : 0;
    if (PSDB_FAILED(hr)) {
        /* One line, the same in the result, psdb_error_last and psdb_client_last_error. */
        psdb__error_ret(hr, err_mark, "publish");
        snprintf(r->message, sizeof(r->message), "%s", psdb_error_last());
        psdb__error_set(hr, "%s", r->message);
    }
    *out = r;
cleanup:
    return psdb__client_ret(c, hr, err_mark, __func__);
}

void psdb_publish_result_free(psdb_publish_result *r)
{
    if (!r)
        return;
    free(r->body);
    free(r);
}
