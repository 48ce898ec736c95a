/* delta.c - value-level delta updates: rebuild a newer PSDB from an installed one, the blob's
 * version 2 value map and ranges of the blob (delta.h; the format: schema/VALUEMAP.md).
 *
 * DESIGN
 * The map comes first (nothing local is read for a server without one); its value table gives
 * the digest of every value of the new file, sorted, and each source (installed PSDBs of the same
 * family, the application's own first) is walked once and matched against it: a value is held by
 * the first source with a row of the same digest and size, and a source stops being walked once
 * nothing is missing. The rebuild is then one ordered pass over the map's recipe that writes
 * <dest>.delta sequentially through a 1 MiB buffer and hashes each buffer as it goes out: no page
 * is written twice, no byte is read back. A first pass over the recipe checks it whole and lists
 * the runs of bytes to fetch (missing values, merged across gaps smaller than COALESCE_GAP); the
 * second (rebuild_to) takes every byte from the skeleton stream, the key table or a source, except
 * those of the runs, which fetch_runs asks for a few hundred at a time in one multi-range request
 * and puts straight into the buffer as each part arrives, the pass having written what lies
 * before it. A cancel keeps <dest>.delta and the map: the next attempt re-hashes the output up to
 * its last whole recipe entry and goes on from there. Memory: 36 bytes a value of the new file
 * while the sources are walked, then 12; 24 bytes a held value and 16 a range of it; 16 per run;
 * the key table when it is at most KEYS_IN_MEMORY (loaded only after the digests are dropped;
 * else read through a window or key by key from the map file; the value table's digests are read
 * from it forward, in key order); and fixed buffers. */
#include "delivery/delta.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include "common/fdio.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/status_map.h"
#include "format/valuemap_walk.h"

/* Bytes between two missing values that are fetched rather than paying another request: a cell
 * header and a few keys, not a held value of typical size. */
#define COALESCE_GAP 512u
#define OUT_BUF (1u << 20)
#define ZBUF (1u << 16)
#define KEYS_IN_MEMORY (24u << 20) /* a 1 GiB PSDB of small values has about 18 MiB */
#define KEY_WINDOW 2048u           /* keys: 64 KiB */
#define OLD_WINDOW (1u << 20)
/* Bytes of Range header per request: a few hundred runs, within every server's header limits. */
#define MULTI_RANGE_HEADER 4000u
#define MISSING UINT32_MAX

/* ---- the output: sequential, buffered, hashed on the way out --------------------------------- */

typedef struct out_file {
    int fd;
    uint8_t *buf;
    size_t len;
    uint64_t pos; /* file offset of buf[0] + len: bytes produced so far */
    psdb__sha256_ctx *sha;
    int err; /* errno of a failed write; sticky */
} out_file;

static int out_flush(out_file *o)
{
    if (o->err)
        return -1;
    psdb__sha256_update(o->sha, o->buf, o->len);
    if (psdb__write_all(o->fd, o->buf, o->len) != 0) {
        o->err = errno;
        return -1;
    }
    o->len = 0;
    return 0;
}

/* Room for up to want bytes at the end of the buffer (at least one): *room says how many. */
static uint8_t *out_room(out_file *o, size_t want, size_t *room)
{
    if (o->len == OUT_BUF && out_flush(o) != 0)
        return NULL;
    *room = OUT_BUF - o->len < want ? OUT_BUF - o->len : want;
    return o->buf + o->len;
}

static void out_commit(out_file *o, size_t n)
{
    o->len += n;
    o->pos += n;
}

static int out_put(out_file *o, const uint8_t *p, size_t n)
{
    while (n > 0) {
        size_t room = 0;
        uint8_t *d = out_room(o, n, &room);
        if (!d)
            return -1;
        memcpy(d, p, room);
        out_commit(o, room);
        p += room;
        n -= room;
    }
    return 0;
}

/* ---- fetching -------------------------------------------------------------------------------- */

/* A transfer handle kept across the ranged fetches of one update: one handle and its socket
 * set-up, not one per run; and what the progress callback is told of the update. */
typedef struct fetcher {
    CURL *h;
    struct curl_slist *headers;
    const char *what; /* the file being rebuilt */
    uint64_t total;   /* its size */
} fetcher;

typedef struct fetch_sink {
    psdb_client *c;
    const fetcher *f;
    int fd;           /* the map: written at its offset */
    out_file *of;     /* a run of the blob: appended to the output */
    uint64_t at, end; /* next offset to receive, and the end of what was asked */
    long status;
    int bad, cancelled, write_errno;
    struct timespec last;
} fetch_sink;

static size_t fetch_write(char *p, size_t size, size_t n, void *ctx)
{
    fetch_sink *s = ctx;
    size_t len = size * n;
    if (s->status != 200 && s->status != 206)
        return len; /* an error page: drained */
    if (len > s->end - s->at) {
        s->bad = 1;
        return 0;
    }
    psdb_progress at = {s->f->what, s->of ? s->of->pos : 0, s->f->total, 1};
    if (psdb__client_pace(s->c, len, &at)) {
        s->cancelled = 1;
        return 0;
    }
    if (s->of) {
        if (out_put(s->of, (const uint8_t *)p, len) != 0) {
            s->write_errno = s->of->err;
            return 0;
        }
    } else if (psdb__pwrite_all(s->fd, p, len, s->at) != 0) {
        s->write_errno = errno;
        return 0;
    }
    s->at += len;
    return len;
}

static size_t fetch_header(char *p, size_t size, size_t n, void *ctx)
{
    fetch_sink *s = ctx;
    size_t len = size * n;
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        s->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    }
    if (s->status == 206 && len > 14 && strncasecmp(p, "Content-Range:", 14) == 0) {
        unsigned long long start = 0;
        const char *b = memchr(p, ' ', len);
        if (!b || sscanf(b, " bytes %llu-", &start) != 1 || start != s->at)
            s->bad = 1;
    }
    return len;
}

/* The delta's transfers report progress (bytes of the new file produced, resumed ones included)
 * and ask the progress callback's cancel at most every 100 ms, as downloads do. */
static int ask_cancel(psdb_client *c, const fetcher *f, const out_file *of, struct timespec *last,
                      int *cancelled)
{
    if ((!c->progress && !c->progress_cancel) || !psdb__every_ms(last, 100))
        return 0;
    psdb_progress p = {f->what, of ? of->pos : 0, f->total, 1};
    if (c->progress)
        c->progress(&p, c->progress_ctx);
    *cancelled = psdb__client_should_stop(c, &p);
    return *cancelled;
}

static int fetch_xfer(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c2, curl_off_t d)
{
    (void)a;
    (void)b;
    (void)c2;
    (void)d;
    fetch_sink *s = ctx;
    return ask_cancel(s->c, s->f, s->of, &s->last, &s->cancelled);
}

static void fetcher_close(fetcher *f)
{
    if (f->h)
        curl_easy_cleanup(f->h);
    curl_slist_free_all(f->headers);
    f->h = NULL;
    f->headers = NULL;
}

/* GETs url into fd at 0 (the whole answer, at most len bytes; of NULL) or [off, off + len) of it
 * into of (ranged), with f's handle. Transient failures retry as downloads do: a whole fetch
 * starts over, a ranged one asks for the rest of its run. */
static psdb_hr fetch(psdb_client *c, fetcher *f, const char *url, out_file *of, uint64_t off,
                     uint64_t len, int fd, uint64_t *got)
{
    psdb_hr hr = PSDB_S_OK;
    uint64_t at = off;
    for (uint32_t attempt = 1;; attempt++) {
        fetch_sink s = {.c = c, .f = f, .fd = fd, .of = of, .at = at, .end = off + len};
        char range[64];
        long status = 0;
        if (!f->h && !(f->h = psdb__client_new_handle(c, url, &f->headers))) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        CURL *h = f->h;
        if (of) {
            snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)at,
                     (unsigned long long)(off + len - 1));
            curl_easy_setopt(h, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fetch_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, fetch_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &s);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, fetch_xfer);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &s);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        *got += s.at - at;
        if (s.cancelled) {
            hr = PSDB_E_CANCELLED;
            goto cleanup;
        }
        if (s.write_errno) {
            hr = psdb__errno_hr(s.write_errno);
            goto cleanup;
        }
        if (s.bad || (rc == CURLE_OK && of && status != 206) ||
            (rc == CURLE_OK && !of && status != 200)) {
            hr = status == 404 ? PSDB_E_NOT_FOUND : PSDB_E_PROTOCOL;
            goto cleanup;
        }
        if (rc == CURLE_OK && (!of || s.at == off + len)) {
            if (!of)
                *got = s.at;
            goto cleanup;
        }
        if ((rc != CURLE_OK && !psdb__client_transient_curl(rc)) || attempt > c->max_retries) {
            hr = PSDB_E_NETWORK;
            goto cleanup;
        }
        psdb_progress wait = {"delta", 0, 0, attempt};
        if (psdb__client_backoff(c, &wait, attempt)) {
            hr = PSDB_E_CANCELLED;
            goto cleanup;
        }
        if (of)
            at = s.at; /* what came is in the output: ask for the rest */
        else
            *got -= s.at; /* the map starts over */
    }
cleanup:
    return hr;
}

/* ---- the values held locally ----------------------------------------------------------------- */

/* A value of the new file, by digest, while the sources are walked. */
typedef struct need {
    uint8_t sha[32];
    uint32_t value; /* its index in the map's value table */
} need;

/* A value held by a source: where its bytes lie there. */
typedef struct old_value {
    uint64_t size;
    uint64_t first; /* index into ranges */
    uint32_t n;
    uint32_t src; /* index into the sources */
} old_value;

/* What the walks of the sources found: held[i] is the old_value of value i, or MISSING. */
typedef struct local_set {
    const need *need;
    size_t nneed;
    const uint64_t *sizes;
    uint32_t *held;
    uint64_t missing; /* values with held[i] == MISSING */
    old_value *ov;
    size_t n, cap;
    psdb__byte_range *r;
    size_t nr, rcap;
    uint32_t src; /* the source being walked */
    int oom;
} local_set;

static int cmp_need(const void *a, const void *b)
{
    return memcmp(((const need *)a)->sha, ((const need *)b)->sha, 32);
}

/* The first need with this digest or a greater one. */
static size_t need_lower_bound(const need *v, size_t n, const uint8_t sha[32])
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (memcmp(v[mid].sha, sha, 32) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint32_t add_old(local_set *s, uint64_t size, const psdb__byte_range *r, size_t nr)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        old_value *v = realloc(s->ov, cap * sizeof(*v));
        if (!v)
            return MISSING;
        s->ov = v;
        s->cap = cap;
    }
    while (s->nr + nr > s->rcap) {
        size_t cap = s->rcap ? s->rcap * 2 : 1024;
        psdb__byte_range *x = realloc(s->r, cap * sizeof(*x));
        if (!x)
            return MISSING;
        s->r = x;
        s->rcap = cap;
    }
    s->ov[s->n] = (old_value){size, s->nr, (uint32_t)nr, s->src};
    memcpy(s->r + s->nr, r, nr * sizeof(*r));
    s->nr += nr;
    return (uint32_t)s->n++;
}

/* A row of a source: held for every value of the new file with its digest and size that no
 * earlier source holds (a digest as recorded: a lie only makes the rebuild fail its check). Stops
 * the walk once nothing is missing. */
static int on_source_value(const uint8_t sha256[32], uint64_t size, const psdb__byte_range *r,
                           size_t nr, void *ctx)
{
    local_set *s = ctx;
    uint32_t slot = MISSING;
    for (size_t i = need_lower_bound(s->need, s->nneed, sha256);
         i < s->nneed && memcmp(s->need[i].sha, sha256, 32) == 0; i++) {
        uint32_t v = s->need[i].value;
        if (s->held[v] != MISSING || s->sizes[v] != size)
            continue;
        if (slot == MISSING && (slot = add_old(s, size, r, nr)) == MISSING)
            return s->oom = 1;
        s->held[v] = slot;
        s->missing--;
    }
    return s->missing == 0;
}

/* A digest of a source: whether the new file has a value of it that no source holds yet. */
static int lacks_digest(const uint8_t sha256[32], void *ctx)
{
    const local_set *s = ctx;
    for (size_t i = need_lower_bound(s->need, s->nneed, sha256);
         i < s->nneed && memcmp(s->need[i].sha, sha256, 32) == 0; i++)
        if (s->held[s->need[i].value] == MISSING)
            return 1;
    return 0;
}

/* Walks one source; a source that cannot be read gives nothing, not even what its walk found
 * before it failed. */
static psdb_hr walk_source(local_set *s, const char *path, uint32_t src, uint64_t nv)
{
    size_t n0 = s->n, nr0 = s->nr;
    s->src = src;
    psdb_hr hr = psdb__value_map_foreach(path, on_source_value, s);
    if (s->oom)
        return PSDB_E_OUTOFMEMORY;
    if (PSDB_FAILED(hr) && s->n > n0) {
        for (uint64_t i = 0; i < nv; i++)
            if (s->held[i] != MISSING && s->held[i] >= n0) {
                s->held[i] = MISSING;
                s->missing++;
            }
        s->n = n0;
        s->nr = nr0;
    }
    return hr;
}

/* ---- reading the map ------------------------------------------------------------------------- */

static int read_exact(int fd, void *buf, size_t n, uint64_t off)
{
    return psdb__pread_upto(fd, buf, n, off) == (ssize_t)n ? 0 : -1;
}

/* One zlib stream of the map file, [at, end), read as bytes and varints. Sticky `bad`: after any
 * error every read fails. */
typedef struct zreader {
    int fd;
    uint64_t at, end;
    z_stream z;
    int open, ended, bad;
    uint8_t in[ZBUF], out[ZBUF];
    size_t pos, len; /* unread inflated bytes: out[pos..len) */
} zreader;

static int zr_init(zreader *r, int fd, uint64_t at, uint64_t size)
{
    r->fd = fd;
    r->at = at;
    r->end = at + size;
    if (inflateInit(&r->z) != Z_OK)
        return -1;
    r->open = 1;
    return 0;
}

static void zr_close(zreader *r)
{
    if (r->open)
        inflateEnd(&r->z);
    r->open = 0;
}

/* One inflate call into out, after reading the next part of the stream when the input is used
 * up: inflate's status, or Z_ERRNO when the read failed. */
static int zr_step(zreader *r)
{
    if (r->z.avail_in == 0 && r->at < r->end) {
        size_t n = r->end - r->at < ZBUF ? (size_t)(r->end - r->at) : ZBUF;
        if (read_exact(r->fd, r->in, n, r->at) != 0)
            return Z_ERRNO;
        r->at += n;
        r->z.next_in = r->in;
        r->z.avail_in = (uInt)n;
    }
    r->z.next_out = r->out;
    r->z.avail_out = ZBUF;
    return inflate(&r->z, Z_NO_FLUSH);
}

static int zr_fill(zreader *r)
{
    while (!r->bad && r->pos == r->len) {
        if (r->ended) {
            r->bad = 1; /* read past the stream's end */
            break;
        }
        int zr = zr_step(r);
        if (zr == Z_ERRNO) {
            r->bad = 1;
            break;
        }
        r->pos = 0;
        r->len = ZBUF - r->z.avail_out;
        if (zr == Z_STREAM_END)
            r->ended = 1;
        else if (zr != Z_OK || (r->len == 0 && r->z.avail_in == 0))
            r->bad = 1;
    }
    return r->bad ? -1 : 0;
}

/* LEB128: 7 bits a byte, least significant first, at most 10 bytes. */
static uint64_t zr_varint(zreader *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (zr_fill(r) != 0)
            return 0;
        uint8_t b = r->out[r->pos++];
        if (shift == 63 && b > 1) {
            r->bad = 1;
            return 0;
        }
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = 1;
    return 0;
}

/* n bytes into o, or skipped (o NULL). */
static int zr_copy(zreader *r, out_file *o, uint64_t n)
{
    while (n > 0) {
        if (zr_fill(r) != 0)
            return -1;
        size_t k = r->len - r->pos < n ? r->len - r->pos : (size_t)n;
        if (o && out_put(o, r->out + r->pos, k) != 0)
            return -1;
        r->pos += k;
        n -= k;
    }
    return 0;
}

/* The stream ended exactly at its stored size, every inflated byte read. */
static int zr_done(zreader *r)
{
    if (r->bad || r->pos != r->len)
        return 0;
    while (!r->ended) {
        int zr = zr_step(r);
        if (zr == Z_ERRNO)
            return 0;
        if (r->z.avail_out != ZBUF)
            return 0; /* more bytes than the recipe used */
        if (zr == Z_STREAM_END)
            r->ended = 1;
        else if (zr != Z_OK || (r->z.avail_in == 0 && r->at == r->end))
            return 0; /* cut short */
    }
    return r->at == r->end && r->z.avail_in == 0;
}

static uint64_t unzigzag(uint64_t v)
{
    return (v >> 1) ^ (0 - (v & 1));
}

typedef struct keys {
    int fd;
    uint64_t at, n;
    uint8_t *mem; /* the whole table, when small enough */
    uint8_t *win; /* else KEY_WINDOW keys from win_first, win_n of them read */
    uint64_t win_first, win_n;
} keys;

/* Key id: from the table in memory, else through the window when reads go forward (the value
 * table names digests in nearly increasing order, new keys come in order), else one pread. */
static int key_get(keys *k, uint64_t id, uint8_t out[32])
{
    int rc = 0;
    if (id >= k->n) {
        rc = -1;
    } else if (k->mem) {
        memcpy(out, k->mem + id * 32, 32);
    } else if (k->win && id >= k->win_first && id < k->win_first + 2 * KEY_WINDOW) {
        if (id >= k->win_first + k->win_n) {
            uint64_t n = k->n - id < KEY_WINDOW ? k->n - id : KEY_WINDOW;
            rc = read_exact(k->fd, k->win, (size_t)n * 32, k->at + id * 32);
            k->win_first = id;
            k->win_n = rc == 0 ? n : 0;
        }
        if (rc == 0)
            memcpy(out, k->win + (id - k->win_first) * 32, 32);
    } else {
        rc = read_exact(k->fd, out, 32, k->at + id * 32);
        if (rc == 0 && k->win && k->win_n == 0) /* the first read starts the window */
            k->win_first = id + 1;
    }
    return rc;
}

/* Reads the whole key table into memory when it is at most KEYS_IN_MEMORY: the value table names
 * keys in no order a window follows (a key each pread otherwise). 0, or -1 with errno. */
static int keys_load(keys *k)
{
    if (k->mem || k->n * 32 > KEYS_IN_MEMORY)
        return 0;
    k->mem = malloc(k->n ? (size_t)k->n * 32 : 1);
    if (!k->mem) {
        errno = ENOMEM;
        return -1;
    }
    errno = 0;
    if (read_exact(k->fd, k->mem, (size_t)(k->n * 32), k->at) != 0) {
        if (errno == 0)
            errno = EIO; /* a short read: the map file changed under us */
        free(k->mem);
        k->mem = NULL;
        return -1;
    }
    return 0;
}

static void keys_unload(keys *k)
{
    free(k->mem);
    k->mem = NULL;
}

typedef struct run {
    uint64_t start, end;
} run;

typedef struct recipe_entry {
    unsigned tag;
    uint64_t len;   /* bytes of the file it produces */
    uint64_t arg;   /* skeleton: -, key: id, value: index */
    uint64_t in_at; /* value: offset in the value */
} recipe_entry;

/* The next recipe entry, checked against the map's counts; state carries what the checks need. */
typedef struct recipe_state {
    uint64_t next_key, value, nkeys, nv;
} recipe_state;

static int recipe_next(zreader *r, recipe_state *st, recipe_entry *e)
{
    uint64_t x = zr_varint(r);
    e->tag = (unsigned)(x & 3);
    x >>= 2;
    switch (e->tag) {
    case PSDB__VMAP2_TAG_SKELETON:
        e->len = x;
        return r->bad || x == 0 ? -1 : 0;
    case PSDB__VMAP2_TAG_KEY:
        if (x == 0) {
            if (st->next_key >= st->nkeys)
                return -1;
            e->arg = st->next_key++;
        } else {
            if (x - 1 >= st->next_key)
                return -1; /* a reference forward: keys are numbered in order of first use */
            e->arg = x - 1;
        }
        e->len = 32;
        return r->bad ? -1 : 0;
    case PSDB__VMAP2_TAG_VALUE:
        st->value += unzigzag(x);
        e->arg = st->value;
        e->in_at = zr_varint(r);
        e->len = zr_varint(r);
        if (r->bad || e->arg >= st->nv || e->len == 0 || e->len > UINT32_MAX)
            return -1;
        return 0;
    default:
        return -1;
    }
}

/* A source read through a window: held values come in nearly the source's order, so one read
 * serves many of them. The window is allocated on first use: the installed PSDB of the same
 * application gets OLD_WINDOW, any other source a quarter of it. */
typedef struct old_file {
    int fd;
    uint8_t *buf;
    size_t cap;
    uint64_t start, len;
} old_file;

static int old_read(old_file *f, uint8_t *dst, size_t n, uint64_t off)
{
    if (f->buf && off >= f->start && off + n <= f->start + f->len) {
        memcpy(dst, f->buf + (off - f->start), n);
        return 0;
    }
    if (n >= f->cap / 2)
        return read_exact(f->fd, dst, n, off);
    if (!f->buf && !(f->buf = malloc(f->cap)))
        return read_exact(f->fd, dst, n, off);
    ssize_t r = psdb__pread_upto(f->fd, f->buf, f->cap, off);
    if (r < 0)
        return -1;
    size_t got = (size_t)r;
    f->start = off;
    f->len = got;
    if (got < n)
        return -1;
    memcpy(dst, f->buf, n);
    return 0;
}

/* Copies bytes [in_at, in_at + len) of a held value into the output; cursor keeps the range
 * where the last copy of that value ended ([0] its index, [1] its offset in the value), since
 * parts come in order. */
static psdb_hr copy_old(old_file *old, const local_set *ls, const old_value *lv, uint64_t in_at,
                        uint64_t len, out_file *o, uint64_t cursor[2])
{
    if (cursor[1] > in_at || cursor[0] >= lv->n) {
        cursor[0] = 0;
        cursor[1] = 0;
    }
    while (len > 0) {
        while (cursor[0] < lv->n && cursor[1] + ls->r[lv->first + cursor[0]].length <= in_at) {
            cursor[1] += ls->r[lv->first + cursor[0]].length;
            cursor[0]++;
        }
        if (cursor[0] >= lv->n)
            return PSDB_E_INTEGRITY; /* past the old value's end */
        const psdb__byte_range *sr = &ls->r[lv->first + cursor[0]];
        uint64_t skip = in_at - cursor[1];
        size_t room = 0;
        uint64_t want = sr->length - skip < len ? sr->length - skip : len;
        uint8_t *d = out_room(o, (size_t)(want < OUT_BUF ? want : OUT_BUF), &room);
        if (!d)
            return psdb__errno_hr(o->err);
        if (old_read(old, d, room, sr->offset + skip) != 0)
            return PSDB_E_IO;
        out_commit(o, room);
        in_at += room;
        len -= room;
    }
    return PSDB_S_OK;
}

#define WHY(...) snprintf(out->why_not, sizeof(out->why_not), __VA_ARGS__)

/* ---- the ordered pass ------------------------------------------------------------------------ */

/* The state of the second pass: where the recipe and the output are, and where fetched bytes
 * already stand in the output (entries before fetched_to were the blob's bytes). */
typedef struct rebuild {
    zreader *rec, *skel;
    recipe_state st;
    uint64_t pos, entries_left, fetched_to;
    const uint32_t *held;
    const local_set *ls;
    old_file *olds; /* one per source */
    keys *kt;
    out_file *of;
    uint64_t cursor[2], cursor_value;
    const char *const *sources;
    psdb__delta_outcome *out;
} rebuild;

/* Produces the file from the recipe up to target, an entry boundary: local bytes written,
 * entries that a fetched run covered skipped. */
static psdb_hr rebuild_to(rebuild *rb, uint64_t target)
{
    psdb__delta_outcome *out = rb->out;
    psdb_hr hr = PSDB_S_OK;
    while (rb->pos < target && PSDB_SUCCEEDED(hr)) {
        recipe_entry e;
        if (rb->entries_left == 0 || recipe_next(rb->rec, &rb->st, &e) != 0) {
            WHY("the value map is malformed (its recipe changed between passes)");
            hr = PSDB_E_INTEGRITY;
            break;
        }
        rb->entries_left--;
        uint64_t start = rb->pos;
        rb->pos += e.len;
        if (rb->pos <= rb->fetched_to) {
            /* Inside a fetched run: the blob's bytes are in place, the skeleton moves on. */
            if (e.tag == PSDB__VMAP2_TAG_SKELETON && zr_copy(rb->skel, NULL, e.len) != 0) {
                WHY("the value map's skeleton does not inflate to the file's other bytes");
                hr = PSDB_E_INTEGRITY;
            }
        } else if (start < rb->fetched_to) {
            WHY("a fetched run ends inside an entry of the recipe");
            hr = PSDB_E_INTEGRITY;
        } else if (e.tag == PSDB__VMAP2_TAG_SKELETON) {
            if (zr_copy(rb->skel, rb->of, e.len) != 0) {
                hr = rb->of->err ? psdb__errno_hr(rb->of->err) : PSDB_E_INTEGRITY;
                WHY("the value map's skeleton does not inflate to the file's other bytes");
            }
        } else if (e.tag == PSDB__VMAP2_TAG_KEY) {
            uint8_t k[32];
            if (key_get(rb->kt, e.arg, k) != 0 || out_put(rb->of, k, 32) != 0) {
                hr = rb->of->err ? psdb__errno_hr(rb->of->err) : PSDB_E_IO;
                WHY("cannot write key %llu of the value map", (unsigned long long)e.arg);
            }
        } else if (rb->held[e.arg] == MISSING) {
            WHY("a missing value lies outside every fetched run");
            hr = PSDB_E_INTEGRITY; /* pass 1 put every missing part in a run */
        } else {
            if (rb->cursor_value != e.arg) {
                rb->cursor[0] = rb->cursor[1] = 0;
                rb->cursor_value = e.arg;
            }
            const old_value *lv = &rb->ls->ov[rb->held[e.arg]];
            hr = copy_old(&rb->olds[lv->src], rb->ls, lv, e.in_at, e.len, rb->of, rb->cursor);
            if (PSDB_FAILED(hr))
                WHY("cannot copy a value from %s (%s)", rb->sources[lv->src], psdb_hr_str(hr));
        }
    }
    if (PSDB_SUCCEEDED(hr) && rb->pos != target) {
        WHY("a fetched run starts inside an entry of the recipe");
        hr = PSDB_E_INTEGRITY;
    }
    return hr;
}

/* One request for runs[first..last) as "Range: a-b,c-d,...": the answer is a 206
 * multipart/byteranges whose parts are read by their Content-Range (a part may span several runs
 * when the server merged them), or a single-part 206 (a server that answers the first range
 * only, or merged them all). Each part starts where the pass stands: the pass writes the local
 * bytes before it first, then the part goes straight to the output. */
typedef struct multi_sink {
    psdb_client *c;
    const fetcher *f;
    rebuild *rb;
    const run *runs;
    size_t next, last; /* the next run expected, and the end of the batch */
    long status;
    int multipart, not_multi, cancelled;
    char boundary[80];
    size_t boundary_len;
    char line[256];
    size_t line_len;
    int in_data, have_range, ended;
    uint64_t a, b, remaining, part_last_run;
    uint64_t body_bytes;
    psdb_hr failed;
    struct timespec last_check;
} multi_sink;

static int parse_content_range(const char *p, size_t len, uint64_t *a, uint64_t *b)
{
    char tmp[128];
    unsigned long long x = 0, y = 0;
    if (len >= sizeof(tmp))
        return -1;
    memcpy(tmp, p, len);
    tmp[len] = '\0';
    const char *v = strchr(tmp, ':');
    if (!v || sscanf(v + 1, " bytes %llu-%llu/", &x, &y) != 2 || y < x)
        return -1;
    *a = x;
    *b = y;
    return 0;
}

static size_t multi_header(char *p, size_t size, size_t n, void *ctx)
{
    multi_sink *s = ctx;
    size_t len = size * n;
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        const char *sp = memchr(p, ' ', len);
        s->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        s->multipart = s->have_range = 0;
    } else if (len > 13 && strncasecmp(p, "Content-Type:", 13) == 0) {
        const char *b = NULL;
        for (size_t i = 13; i + 9 <= len && !b; i++)
            if (strncasecmp(p + i, "boundary=", 9) == 0)
                b = p + i + 9;
        if (b) {
            size_t k = 0;
            while (b + k < p + len && b[k] != '\r' && b[k] != '\n' && b[k] != ';' && b[k] != ' ')
                k++;
            if (k > 0 && k + 2 < sizeof(s->boundary)) {
                s->boundary[0] = s->boundary[1] = '-';
                memcpy(s->boundary + 2, b, k);
                s->boundary_len = k + 2;
                s->multipart = 1;
            }
        }
    } else if (len > 14 && strncasecmp(p, "Content-Range:", 14) == 0) {
        s->have_range = parse_content_range(p, len, &s->a, &s->b) == 0;
    }
    return len;
}

/* A part [a, b] begins: it must start at the next run and end at the end of a run of the batch. */
static int part_begin(multi_sink *s)
{
    size_t j = s->next;
    if (j >= s->last || s->a != s->runs[j].start)
        return -1;
    while (j < s->last && s->runs[j].end < s->b + 1)
        j++;
    if (j == s->last || s->runs[j].end != s->b + 1)
        return -1;
    s->part_last_run = j;
    psdb_hr hr = rebuild_to(s->rb, s->a);
    if (PSDB_FAILED(hr)) {
        s->failed = hr;
        return -1;
    }
    s->remaining = s->b - s->a + 1;
    s->in_data = 1;
    s->have_range = 0;
    return 0;
}

static int part_data(multi_sink *s, const char *p, size_t k)
{
    if (out_put(s->rb->of, (const uint8_t *)p, k) != 0) {
        s->failed = psdb__errno_hr(s->rb->of->err);
        return -1;
    }
    s->remaining -= k;
    if (s->remaining == 0) {
        s->rb->fetched_to = s->b + 1;
        s->next = (size_t)s->part_last_run + 1;
        s->in_data = 0;
    }
    return 0;
}

static size_t multi_write(char *p, size_t size, size_t n, void *ctx)
{
    multi_sink *s = ctx;
    size_t len = size * n, i = 0;
    if (s->status != 206) {
        s->not_multi = s->status == 200; /* several ranges ignored: the whole blob would come */
        return s->status == 200 ? 0 : len;
    }
    s->body_bytes += len;
    psdb_progress at = {s->f->what, s->rb->of->pos, s->f->total, 1};
    if (psdb__client_pace(s->c, len, &at)) {
        s->cancelled = 1;
        return 0;
    }
    if (!s->multipart) { /* one part: the Content-Range of the answer */
        if (!s->in_data && (!s->have_range || part_begin(s) != 0))
            return 0;
        if (len > s->remaining || part_data(s, p, len) != 0)
            return 0;
        return len;
    }
    while (i < len) {
        if (s->in_data) {
            size_t k = len - i < s->remaining ? len - i : (size_t)s->remaining;
            if (part_data(s, p + i, k) != 0)
                return 0;
            i += k;
            continue;
        }
        if (s->ended) /* the epilogue, if any */
            return len;
        char ch = p[i++];
        if (ch != '\n') {
            if (s->line_len + 1 >= sizeof(s->line))
                return 0; /* no header line of ours is this long */
            s->line[s->line_len++] = ch;
            continue;
        }
        size_t l = s->line_len;
        s->line_len = 0;
        if (l > 0 && s->line[l - 1] == '\r')
            l--;
        if (l == 0) {
            if (s->have_range && part_begin(s) != 0)
                return 0;
        } else if (l == s->boundary_len + 2 && memcmp(s->line, s->boundary, s->boundary_len) == 0 &&
                   memcmp(s->line + s->boundary_len, "--", 2) == 0) {
            s->ended = 1;
        } else if (l == s->boundary_len && memcmp(s->line, s->boundary, l) == 0) {
            s->have_range = 0;
        } else if (l > 14 && strncasecmp(s->line, "Content-Range:", 14) == 0) {
            s->have_range = parse_content_range(s->line, l, &s->a, &s->b) == 0;
            if (!s->have_range)
                return 0;
        }
    }
    return len;
}

static int multi_xfer(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c2, curl_off_t d)
{
    (void)a;
    (void)b;
    (void)c2;
    (void)d;
    multi_sink *s = ctx;
    return ask_cancel(s->c, s->f, s->rb->of, &s->last_check, &s->cancelled);
}

/* Fetches every run in file order while the pass writes the bytes between them: batches of runs
 * in one multi-range request each; a server that answers a whole blob to several ranges, or a
 * batch that fails, leaves the rest to one ranged request per run (with the download's retries,
 * which resume a run where it stopped). */
static psdb_hr fetch_runs(psdb_client *c, fetcher *f, const char *url, rebuild *rb, const run *runs,
                          size_t nruns, uint64_t *got)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__delta_outcome *out = rb->out;
    int multi = 1;
    char *range = malloc(MULTI_RANGE_HEADER + 64);
    if (!range)
        hr = PSDB_E_OUTOFMEMORY;
    for (size_t ri = 0; ri < nruns && PSDB_SUCCEEDED(hr);) {
        size_t last = ri, used = 0;
        while (multi && last < nruns && used < MULTI_RANGE_HEADER) {
            int k = snprintf(range + used, 64, "%s%llu-%llu", last > ri ? "," : "",
                             (unsigned long long)runs[last].start,
                             (unsigned long long)runs[last].end - 1);
            used += (size_t)k;
            last++;
        }
        if (multi && last - ri >= 2) {
            multi_sink s = {.c = c, .f = f, .rb = rb, .runs = runs, .next = ri, .last = last};
            if (!f->h && !(f->h = psdb__client_new_handle(c, url, &f->headers))) {
                hr = PSDB_E_OUTOFMEMORY;
                break;
            }
            curl_easy_setopt(f->h, CURLOPT_RANGE, range);
            curl_easy_setopt(f->h, CURLOPT_WRITEFUNCTION, multi_write);
            curl_easy_setopt(f->h, CURLOPT_WRITEDATA, &s);
            curl_easy_setopt(f->h, CURLOPT_HEADERFUNCTION, multi_header);
            curl_easy_setopt(f->h, CURLOPT_HEADERDATA, &s);
            curl_easy_setopt(f->h, CURLOPT_XFERINFOFUNCTION, multi_xfer);
            curl_easy_setopt(f->h, CURLOPT_XFERINFODATA, &s);
            curl_easy_setopt(f->h, CURLOPT_NOPROGRESS, 0L);
            CURLcode rc = curl_easy_perform(f->h);
            *got += s.body_bytes;
            if (s.cancelled) {
                hr = PSDB_E_CANCELLED;
                break;
            }
            if (PSDB_FAILED(s.failed)) {
                hr = s.failed; /* the pass refused the map or could not write: no retry */
                break;
            }
            if (rc != CURLE_OK || s.next == ri || s.not_multi)
                multi = 0; /* not the answer asked for: one run a request from here */
            if (s.in_data && s.rb->of->pos > runs[s.next].start) {
                /* Cut inside a part: the rest of that part's runs as one ranged request. */
                uint64_t from = s.rb->of->pos, to = runs[s.part_last_run].end;
                hr = fetch(c, f, url, rb->of, from, to - from, -1, got);
                if (PSDB_FAILED(hr)) {
                    WHY("fetching bytes %llu-%llu of the blob failed (%s)",
                        (unsigned long long)from, (unsigned long long)to - 1, psdb_hr_str(hr));
                    break;
                }
                rb->fetched_to = to;
                s.next = (size_t)s.part_last_run + 1;
            }
            ri = s.next;
            continue;
        }
        /* One run. */
        hr = rebuild_to(rb, runs[ri].start);
        if (PSDB_FAILED(hr))
            break;
        hr = fetch(c, f, url, rb->of, runs[ri].start, runs[ri].end - runs[ri].start, -1, got);
        if (PSDB_FAILED(hr)) {
            WHY("fetching bytes %llu-%llu of the blob failed (%s)",
                (unsigned long long)runs[ri].start, (unsigned long long)runs[ri].end - 1,
                psdb_hr_str(hr));
            break;
        }
        rb->fetched_to = runs[ri].end;
        ri++;
    }
    free(range);
    return hr;
}

/* ---- the map, checked ------------------------------------------------------------------------ */

/* Where the sections of a version 2 map lie, from its header (schema/VALUEMAP.md). */
typedef struct map_layout {
    uint64_t size, nv, nkeys, nentries, skel, vstored, rstored, sstored;
    uint64_t keys_at, values_at, recipe_at, skel_at;
} map_layout;

/* Reads and checks the header of the map in fd (map_size bytes) against the PSDB it must
 * describe. Every count is bounded by what the map or the file could hold before any sum is
 * formed: a value takes two bytes of its table at least, and deflate inflates at most 1032-fold,
 * so a map cannot make the client allocate more than its own size warrants. */
static int map_layout_read(int fd, uint64_t map_size, uint64_t file_size, const uint8_t sha256[32],
                           map_layout *l, psdb__delta_outcome *out)
{
    static const uint8_t zero[16];
    uint8_t head[PSDB__VMAP2_HEADER_SIZE];
    if (map_size < sizeof(head) || read_exact(fd, head, sizeof(head), 0) != 0 ||
        memcmp(head, PSDB__VMAP_MAGIC, 8) != 0) {
        WHY("the value map does not describe this PSDB");
        return -1;
    }
    if (psdb__le32(head + 8) != PSDB__VMAP2_VERSION) {
        WHY("the value map is version %u, this launcher reads version %u",
            (unsigned)psdb__le32(head + 8), PSDB__VMAP2_VERSION);
        return -1;
    }
    if (psdb__le32(head + 12) != 0 || memcmp(head + 112, zero, 16) != 0 ||
        psdb__le64(head + 16) != file_size || memcmp(head + 24, sha256, 32) != 0) {
        WHY("the value map does not describe this PSDB");
        return -1;
    }
    l->size = map_size;
    l->nv = psdb__le64(head + 56);
    l->nkeys = psdb__le64(head + 64);
    l->nentries = psdb__le64(head + 72);
    l->skel = psdb__le64(head + 80);
    l->vstored = psdb__le64(head + 88);
    l->rstored = psdb__le64(head + 96);
    l->sstored = psdb__le64(head + 104);
    l->keys_at = sizeof(head);
    if (l->vstored > map_size || l->rstored > map_size || l->sstored > map_size ||
        l->nkeys > map_size / 32 || l->nv > file_size / 32 || l->nv > l->vstored * 516 ||
        l->nv >= MISSING || l->nentries > file_size || l->skel > file_size ||
        l->keys_at + l->nkeys * 32 + l->vstored + l->rstored + l->sstored != map_size) {
        WHY("the value map is malformed (its sections do not fill it)");
        return -1;
    }
    l->values_at = l->keys_at + l->nkeys * 32;
    l->recipe_at = l->values_at + l->vstored;
    l->skel_at = l->recipe_at + l->rstored;
    return 0;
}

/* The value table: the size of every value, and (nd non-NULL) its digest for the walks of the
 * sources. */
static int cmp_need_key(const void *a, const void *b)
{
    uint64_t x, y;
    memcpy(&x, ((const need *)a)->sha, sizeof(x));
    memcpy(&y, ((const need *)b)->sha, sizeof(y));
    return (x > y) - (x < y);
}

/* Replaces the key id each nd[i].sha holds by that key's digest. The value table names keys in
 * no order a window follows (a pread each for most values), so the ids are sorted first and the
 * key table read forward once through the window: no memory beyond the window, a read per
 * KEY_WINDOW keys. 0, or -1 with errno. */
static int digests_of_keys(keys *kt, need *nd, size_t n)
{
    qsort(nd, n, sizeof(*nd), cmp_need_key);
    for (size_t i = 0; i < n; i++) {
        uint64_t id;
        memcpy(&id, nd[i].sha, sizeof(id));
        if (kt->win_n == 0 || id >= kt->win_first + kt->win_n) {
            uint64_t count = kt->n - id < KEY_WINDOW ? kt->n - id : KEY_WINDOW;
            errno = 0;
            kt->win_n = 0;
            if (read_exact(kt->fd, kt->win, (size_t)count * 32, kt->at + id * 32) != 0) {
                if (errno == 0)
                    errno = EIO; /* a short read: the map file changed under us */
                return -1;
            }
            kt->win_first = id;
            kt->win_n = count;
        }
        memcpy(nd[i].sha, kt->win + (id - kt->win_first) * 32, 32);
    }
    return 0;
}

static psdb_hr map_values(int fd, const map_layout *l, keys *kt, uint64_t file_size,
                          uint64_t *sizes, need *nd, psdb__delta_outcome *out)
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    zreader *zv = calloc(1, sizeof(*zv));
    if (!zv || zr_init(zv, fd, l->values_at, l->vstored) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint64_t i = 0, id = 0; i < l->nv; i++) {
        id += unzigzag(zr_varint(zv));
        sizes[i] = zr_varint(zv);
        if (zv->bad || id >= kt->n || sizes[i] == 0 || sizes[i] > file_size) {
            WHY("the value map is malformed (value %llu)", (unsigned long long)i);
            goto cleanup;
        }
        if (nd) {
            memcpy(nd[i].sha, &id, sizeof(id)); /* the key id, until digests_of_keys */
            nd[i].value = (uint32_t)i;
        }
    }
    if (!zr_done(zv)) {
        WHY("the value map is malformed (its value table)");
        goto cleanup;
    }
    if (nd && digests_of_keys(kt, nd, (size_t)l->nv) != 0) {
        hr = PSDB_E_IO;
        WHY("cannot read the value map's keys: %s", strerror(errno));
        goto cleanup;
    }
    hr = PSDB_S_OK;
cleanup:
    if (zv)
        zr_close(zv);
    free(zv);
    return hr;
}

/* What the first pass over the recipe gives: the runs of bytes to fetch (the parts of the values
 * not held, merged across gaps of at most COALESCE_GAP) and the last entry boundary at or below
 * `have`, where an interrupted attempt's output can be taken up. */
typedef struct run_list {
    run *v;
    size_t n, cap;
    uint64_t bytes, resume_at;
} run_list;

static int runs_add(run_list *rl, uint64_t start, uint64_t end)
{
    if (rl->n > 0 && start <= rl->v[rl->n - 1].end + COALESCE_GAP) {
        rl->bytes += end - rl->v[rl->n - 1].end;
        rl->v[rl->n - 1].end = end;
        return 0;
    }
    if (rl->n == rl->cap) {
        size_t cap = rl->cap ? rl->cap * 2 : 256;
        run *x = realloc(rl->v, cap * sizeof(*x));
        if (!x)
            return -1;
        rl->v = x;
        rl->cap = cap;
    }
    rl->v[rl->n++] = (run){start, end};
    rl->bytes += end - start;
    return 0;
}

/* Pass 1: the whole recipe checked against the value table and the file size. */
static psdb_hr map_runs(int fd, const map_layout *l, const uint64_t *sizes, const uint32_t *held,
                        uint64_t file_size, uint64_t have, run_list *rl, psdb__delta_outcome *out)
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    recipe_state st = {.nkeys = l->nkeys, .nv = l->nv};
    uint64_t pos = 0, skel_seen = 0;
    zreader *zr = calloc(1, sizeof(*zr));
    if (!zr || zr_init(zr, fd, l->recipe_at, l->rstored) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint64_t i = 0; i < l->nentries; i++) {
        recipe_entry e;
        if (recipe_next(zr, &st, &e) != 0 || e.len > file_size - pos ||
            (e.tag == PSDB__VMAP2_TAG_VALUE &&
             (e.in_at > sizes[e.arg] || e.len > sizes[e.arg] - e.in_at))) {
            WHY("the value map is malformed (recipe entry %llu)", (unsigned long long)i);
            goto cleanup;
        }
        if (e.tag == PSDB__VMAP2_TAG_SKELETON)
            skel_seen += e.len;
        if (e.tag == PSDB__VMAP2_TAG_VALUE && held[e.arg] == MISSING &&
            runs_add(rl, pos, pos + e.len) != 0) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        pos += e.len;
        if (pos <= have)
            rl->resume_at = pos;
    }
    if (!zr_done(zr) || pos != file_size || skel_seen != l->skel || st.next_key != l->nkeys) {
        WHY("the value map is malformed (its recipe does not make the file)");
        goto cleanup;
    }
    hr = PSDB_S_OK;
cleanup:
    if (zr)
        zr_close(zr);
    free(zr);
    return hr;
}

/* Drops what lies before resume_at from the runs: a run that straddles it (resume_at is an
 * entry boundary, and runs are made of whole entries) starts there. */
static void runs_resume(run_list *rl)
{
    size_t k = 0;
    while (k < rl->n && rl->v[k].end <= rl->resume_at)
        k++;
    if (k > 0) {
        memmove(rl->v, rl->v + k, (rl->n - k) * sizeof(*rl->v));
        rl->n -= k;
    }
    if (rl->n > 0 && rl->v[0].start < rl->resume_at)
        rl->v[0].start = rl->resume_at;
    rl->bytes = 0;
    for (size_t i = 0; i < rl->n; i++)
        rl->bytes += rl->v[i].end - rl->v[i].start;
}

psdb_hr psdb__delta_check_map(int fd, uint64_t map_size, uint64_t file_size,
                              const uint8_t sha256[32], char why[160])
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    psdb__delta_outcome o = {0}, *out = &o;
    map_layout l;
    keys kt = {.fd = fd};
    uint64_t *sizes = NULL;
    uint32_t *held = NULL;
    run_list rl = {0};
    zreader *zs = NULL;
    if (map_layout_read(fd, map_size, file_size, sha256, &l, out) != 0)
        goto cleanup;
    kt.at = l.keys_at;
    kt.n = l.nkeys;
    kt.win = malloc((size_t)KEY_WINDOW * 32);
    sizes = malloc((l.nv ? l.nv : 1) * sizeof(*sizes));
    held = malloc((l.nv ? l.nv : 1) * sizeof(*held));
    zs = calloc(1, sizeof(*zs));
    if (!kt.win || !sizes || !held || !zs) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint64_t i = 0; i < l.nv; i++)
        held[i] = MISSING;
    hr = map_values(fd, &l, &kt, file_size, sizes, NULL, out);
    if (PSDB_SUCCEEDED(hr))
        hr = map_runs(fd, &l, sizes, held, file_size, 0, &rl, out);
    if (PSDB_FAILED(hr))
        goto cleanup;
    if (zr_init(zs, fd, l.skel_at, l.sstored) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (zr_copy(zs, NULL, l.skel) != 0 || !zr_done(zs)) {
        hr = PSDB_E_INTEGRITY;
        WHY("the value map's skeleton does not inflate to the file's other bytes");
    }
cleanup:
    if (zs)
        zr_close(zs);
    free(zs);
    free(kt.win);
    free(sizes);
    free(held);
    free(rl.v);
    snprintf(why, 160, "%s", o.why_not);
    return hr;
}

/* ---- the update ------------------------------------------------------------------------------ */

/* Takes up <dest>.delta of an interrupted attempt: its first `keep` bytes hashed, the rest cut. */
static psdb_hr resume_output(out_file *of, uint64_t keep)
{
    uint64_t at = 0;
    while (at < keep) {
        size_t n = keep - at < OUT_BUF ? (size_t)(keep - at) : OUT_BUF;
        if (read_exact(of->fd, of->buf, n, at) != 0)
            return PSDB_E_IO;
        psdb__sha256_update(of->sha, of->buf, n);
        at += n;
    }
    if (ftruncate(of->fd, (off_t)keep) != 0 || lseek(of->fd, (off_t)keep, SEEK_SET) < 0)
        return psdb__errno_hr(errno);
    of->pos = keep;
    return PSDB_S_OK;
}

/* Removes what an attempt must not leave for the next to trust: the file open as fd when that
 * is still its name, else (not opened by this attempt) a regular file of ours at path. Anything
 * else at the name (another user's file, a link, a FIFO) was never used and stays. */
static void drop(const char *path, int fd)
{
    int own = fd >= 0 ? -1 : psdb__open_file(path, O_RDONLY, 0, PSDB__OPEN_OURS, NULL, 0);
    psdb__unlink_same(path, fd >= 0 ? fd : own);
    if (own >= 0)
        close(own);
}

psdb_hr psdb__client_delta(psdb_client *c, const psdb_manifest *m, const char *const *sources,
                           size_t nsources, const char *dest_path, psdb__delta_outcome *out)
{
    psdb_hr hr = PSDB_S_OK;
    char *url = NULL, *map_url = NULL, *map_path = NULL, *part = NULL;
    int map_fd = -1, keep_map = 0, keep_part = 0; /* on a cancel: a whole map, an output */
    old_file *olds = NULL;
    local_set ls = {0};
    need *nd = NULL;
    uint32_t *held = NULL;
    uint64_t *sizes = NULL;
    run_list rl = {0};
    map_layout l;
    uint64_t map_size = 0, have = 0, readable = 0;
    zreader *zrec = NULL, *zskel = NULL;
    keys kt = {.fd = -1};
    out_file of = {.fd = -1};
    fetcher fmap = {.what = dest_path, .total = m->size}, fblob = fmap;
    struct stat sb;
    char why[128];

    memset(out, 0, sizeof(*out));
    url = psdb__client_blob_url(c, m);
    if (!url || asprintf(&map_url, "%s/valuemap/v2", url) < 0 ||
        asprintf(&map_path, "%s.valuemap", dest_path) < 0 ||
        asprintf(&part, "%s.delta", dest_path) < 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    /* The map: the one an interrupted attempt fetched when it is whole and describes this PSDB
     * (the rebuild checks it like a fetched one), else fetched, at most the PSDB's size (a map as
     * large as the blob cannot make the update smaller). It is reused, so it must be a file of
     * ours: a link planted at the name would have the map written through it. */
    map_fd = psdb__open_file(map_path, O_RDWR | O_CREAT, 0644, PSDB__OPEN_OURS, why, sizeof(why));
    if (map_fd < 0) {
        hr = psdb__errno_hr(errno);
        WHY("cannot open %s: %s", map_path, why);
        goto cleanup;
    }
    if (fstat(map_fd, &sb) != 0) {
        hr = psdb__errno_hr(errno);
        WHY("cannot stat %s: %s", map_path, strerror(errno));
        goto cleanup;
    }
    psdb__delta_outcome scratch;
    if (sb.st_size > 0 &&
        map_layout_read(map_fd, (uint64_t)sb.st_size, m->size, m->sha256, &l, &scratch) == 0) {
        map_size = (uint64_t)sb.st_size;
        out->map_reused = 1;
    } else {
        if (ftruncate(map_fd, 0) != 0) {
            hr = psdb__errno_hr(errno);
            WHY("cannot truncate %s: %s", map_path, strerror(errno));
            goto cleanup;
        }
        hr = fetch(c, &fmap, map_url, NULL, 0, m->size, map_fd, &map_size);
        fetcher_close(&fmap);
        out->downloaded = map_size;
        if (PSDB_FAILED(hr)) {
            WHY("no value map from the server (%s)", psdb_hr_str(hr));
            goto cleanup;
        }
        hr = PSDB_E_INTEGRITY;
        if (map_layout_read(map_fd, map_size, m->size, m->sha256, &l, out) != 0)
            goto cleanup;
    }
    keep_map = 1;
    kt.fd = map_fd;
    kt.at = l.keys_at;
    kt.n = l.nkeys;
    kt.win = malloc((size_t)KEY_WINDOW * 32);
    held = malloc((l.nv ? l.nv : 1) * sizeof(*held));
    sizes = malloc((l.nv ? l.nv : 1) * sizeof(*sizes));
    nd = malloc((l.nv ? l.nv : 1) * sizeof(*nd));
    olds = calloc(nsources ? nsources : 1, sizeof(*olds));
    if (!kt.win || !held || !sizes || !nd || !olds) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (size_t k = 0; k < nsources; k++)
        olds[k].fd = -1;
    hr = map_values(map_fd, &l, &kt, m->size, sizes, nd, out);
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* Which values the sources hold (same digest and size), the first source first. */
    qsort(nd, (size_t)l.nv, sizeof(*nd), cmp_need);
    for (uint64_t i = 0; i < l.nv; i++)
        held[i] = MISSING;
    ls = (local_set){
        .need = nd, .nneed = (size_t)l.nv, .sizes = sizes, .held = held, .missing = l.nv};
    psdb_hr first_failure = PSDB_S_OK;
    for (size_t k = 0; k < nsources && ls.missing > 0; k++) {
        /* Another application's file is walked only when its digest index (a fortieth of its
         * size or less) names a value still missing: most hold none. */
        hr = k == 0 ? PSDB_S_FALSE : psdb__value_digests_foreach(sources[k], lacks_digest, &ls);
        if (hr == PSDB_S_FALSE)
            hr = walk_source(&ls, sources[k], (uint32_t)k, l.nv);
        if (hr == PSDB_E_OUTOFMEMORY)
            goto cleanup;
        if (PSDB_SUCCEEDED(hr))
            readable++;
        else if (PSDB_SUCCEEDED(first_failure))
            first_failure = hr;
    }
    if (readable == 0 && nsources > 0 && ls.missing > 0) {
        hr = first_failure;
        WHY("the installed PSDB %s cannot be read (%s)", sources[0], psdb_hr_str(hr));
        goto cleanup;
    }
    free(nd); /* the digests have done their work: the key table may come in */
    nd = NULL;
    for (size_t i = 0; i < ls.n; i++) {
        old_file *f = &olds[ls.ov[i].src];
        if (f->cap == 0) {
            f->cap = ls.ov[i].src == 0 ? OLD_WINDOW : OLD_WINDOW / 4;
            out->sources++;
        }
    }
    if (keys_load(&kt) != 0) {
        hr = psdb__errno_hr(errno);
        WHY("cannot read the value map's keys: %s", strerror(errno));
        goto cleanup;
    }
    /* An interrupted attempt's output is taken up from its last entry boundary. Reused like the
     * map, so a file of ours only: through a planted link the rebuild would cut and overwrite
     * another file. */
    of.fd = psdb__open_file(part, O_RDWR | O_CREAT, 0644, PSDB__OPEN_OURS, why, sizeof(why));
    if (of.fd < 0) {
        hr = psdb__errno_hr(errno);
        WHY("cannot prepare %s: %s", part, why);
        goto cleanup;
    }
    if (fstat(of.fd, &sb) != 0) {
        hr = psdb__errno_hr(errno);
        WHY("cannot stat %s: %s", part, strerror(errno));
        goto cleanup;
    }
    have = (uint64_t)sb.st_size;
    hr = map_runs(map_fd, &l, sizes, held, m->size, have, &rl, out);
    if (PSDB_FAILED(hr))
        goto cleanup;
    runs_resume(&rl);
    /* Not worth its extra requests and local work unless it saves a sixteenth of the file. */
    uint64_t cost = (out->map_reused ? 0 : map_size) + rl.bytes;
    if (cost / 15 >= m->size / 16) {
        hr = PSDB_S_FALSE;
        WHY("a delta of %llu bytes would not be smaller than the file by a sixteenth",
            (unsigned long long)cost);
        goto cleanup;
    }
    /* Pass 2: the file, in order. The sources are installed PSDBs of ours (install.c chose
     * them so); one replaced since by something else is refused here. */
    for (size_t k = 0; k < nsources; k++)
        if (olds[k].cap && (olds[k].fd = psdb__open_file(sources[k], O_RDONLY, 0, PSDB__OPEN_OURS,
                                                         why, sizeof(why))) < 0) {
            hr = psdb__errno_hr(errno);
            WHY("cannot open %s: %s", sources[k], why);
            goto cleanup;
        }
    of.buf = malloc(OUT_BUF);
    of.sha = psdb__sha256_begin();
    zrec = calloc(1, sizeof(*zrec));
    zskel = calloc(1, sizeof(*zskel));
    if (!of.buf || !of.sha || !zrec || !zskel ||
        zr_init(zrec, map_fd, l.recipe_at, l.rstored) != 0 ||
        zr_init(zskel, map_fd, l.skel_at, l.sstored) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = resume_output(&of, rl.resume_at);
    if (PSDB_FAILED(hr)) {
        WHY("cannot take up %s: %s", part, psdb_hr_str(hr));
        goto cleanup;
    }
    out->resumed = rl.resume_at;
    keep_part = 1;
    rebuild rb = {.rec = zrec,
                  .skel = zskel,
                  .st = {.nkeys = l.nkeys, .nv = l.nv},
                  .entries_left = l.nentries,
                  .fetched_to = rl.resume_at, /* the bytes before it are in place */
                  .held = held,
                  .ls = &ls,
                  .olds = olds,
                  .kt = &kt,
                  .of = &of,
                  .cursor_value = MISSING,
                  .sources = sources,
                  .out = out};
    uint64_t got = 0;
    hr = fetch_runs(c, &fblob, url, &rb, rl.v, rl.n, &got);
    out->downloaded += got;
    if (PSDB_SUCCEEDED(hr))
        hr = rebuild_to(&rb, m->size);
    if (hr == PSDB_E_CANCELLED)
        goto cleanup; /* what was produced stays for the next attempt, the map too */
    if (PSDB_FAILED(hr)) {
        if (!out->why_not[0])
            WHY("the rebuild failed (%s)", psdb_hr_str(hr));
        goto cleanup;
    }
    hr = PSDB_E_INTEGRITY;
    if (rb.entries_left != 0) {
        WHY("the value map is malformed (its recipe does not make the file)");
        goto cleanup;
    }
    if (out_flush(&of) != 0) {
        hr = psdb__errno_hr(of.err);
        WHY("cannot write %s: %s", part, strerror(of.err));
        goto cleanup;
    }
    if (!zr_done(zskel) || of.pos != m->size) {
        WHY("the value map's skeleton does not inflate to the file's other bytes");
        goto cleanup;
    }
    /* The same acceptance as a full download: the manifest's size and SHA-256. */
    uint8_t got_sha[32];
    psdb__sha256_end(of.sha, got_sha);
    of.sha = NULL;
    if (memcmp(got_sha, m->sha256, 32) != 0) {
        WHY("the rebuilt file does not match the manifest's SHA-256");
        goto cleanup;
    }
    if (fsync(of.fd) != 0 || psdb__rename_same(part, dest_path, of.fd) != 0) {
        hr = psdb__errno_hr(errno);
        WHY("cannot put the rebuilt file in place: %s",
            errno == EPERM ? "it was replaced while it was written" : strerror(errno));
        goto cleanup;
    }
    /* The rename durable before the registry names the file, as after a full download. */
    psdb__fsync_dir_of(dest_path);
    out->used = 1;
    hr = PSDB_S_OK;
cleanup:
    fetcher_close(&fmap);
    fetcher_close(&fblob);
    /* Only a cancel keeps anything: a refused map or output must not be trusted again. */
    if (hr != PSDB_E_CANCELLED)
        keep_map = keep_part = 0;
    if (hr == PSDB_E_CANCELLED) {
        if (keep_part)
            out_flush(&of);
        psdb__client_error(c,
                           "install: %s: delta update cancelled by the progress callback at %llu "
                           "of %llu bytes; %s is kept for resuming",
                           dest_path, (unsigned long long)of.pos, (unsigned long long)m->size,
                           keep_part  ? part
                           : keep_map ? map_path
                                      : "nothing");
    }
    if (zrec)
        zr_close(zrec);
    if (zskel)
        zr_close(zskel);
    free(zrec);
    free(zskel);
    if (of.sha) {
        uint8_t discard[32];
        psdb__sha256_end(of.sha, discard);
    }
    free(of.buf);
    if (map_path && !keep_map)
        drop(map_path, map_fd);
    if (map_fd >= 0)
        close(map_fd);
    if (part && !out->used && !keep_part)
        drop(part, of.fd);
    if (of.fd >= 0)
        close(of.fd);
    for (size_t k = 0; olds && k < nsources; k++) {
        if (olds[k].fd >= 0)
            close(olds[k].fd);
        free(olds[k].buf);
    }
    free(olds);
    if (!out->used && PSDB_SUCCEEDED(hr))
        hr = PSDB_S_FALSE;
    free(url);
    free(map_url);
    free(map_path);
    free(part);
    free(held);
    free(sizes);
    free(nd);
    free(rl.v);
    keys_unload(&kt);
    free(kt.win);
    free(ls.ov);
    free(ls.r);
    return hr;
}
