/* valuemap_read.c - reading a version 2 value map that a launcher fetched: header, streams, keys,
 * values and recipe entries, each checked (valuemap_read.h). */
#include "format/valuemap_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "psdb/valuemap.h"

#include "common/buf.h"
#include "common/error.h"
#include "common/fdio.h"
#include "common/status_map.h"

/* n bytes at off, all of them. 0, or -1 (a failed or short read: the map file changed). */
static int read_exact(int fd, void *buf, size_t n, uint64_t off)
{
    return psdb__pread_upto(fd, buf, n, off) == (ssize_t)n ? 0 : -1;
}

/* ---- the header ------------------------------------------------------------------------------ */

psdb_hr psdb_value_map_read_info(const char *path, psdb_value_map_info *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint8_t head[PSDB__VMAP_PREFIX_SIZE];
    uint32_t reserved = 0;
    char why[160];
    int fd = -1;
    if (out)
        memset(out, 0, sizeof(*out));
    if (!path || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_value_map_read_info: NULL path or out");
        goto cleanup;
    }
    fd = psdb__open_file(path, O_RDONLY, 0, PSDB__OPEN_FOLLOW, why, sizeof(why));
    if (fd < 0) {
        hr = psdb__error_set(psdb__errno_hr(errno), "value map %s: %s", path, why);
        goto cleanup;
    }
    ssize_t n = psdb__pread_upto(fd, head, sizeof(head), 0);
    if (n < 0) {
        hr =
            psdb__error_set(psdb__errno_hr(errno), "value map %s: read: %s", path, strerror(errno));
        goto cleanup;
    }
    if ((size_t)n < sizeof(head) ||
        psdb__vmap_get_prefix(head, &out->version, &reserved, &out->psdb_size, out->psdb_sha256) !=
            0 ||
        reserved != 0) {
        hr = psdb__error_set(PSDB_E_CACHE_CORRUPT, "value map %s: not a value map (%s)", path,
                             (size_t)n < sizeof(head) ? "shorter than its header"
                             : reserved != 0          ? "reserved field not zero"
                                                      : "no PSDBVMAP magic");
        goto cleanup;
    }
cleanup:
    if (fd >= 0)
        close(fd);
    if (PSDB_FAILED(hr) && out)
        memset(out, 0, sizeof(*out));
    return psdb__error_ret(hr, err_mark, __func__);
}

int psdb__vmap_layout_read(int fd, uint64_t map_size, uint64_t file_size, const uint8_t sha256[32],
                           psdb__vmap_layout *l, char *why, size_t why_size)
{
    static const uint8_t zero[16];
    uint8_t head[PSDB__VMAP2_HEADER_SIZE], named[32];
    uint32_t version = 0, reserved = 0;
    uint64_t size = 0;
    if (map_size < sizeof(head) || read_exact(fd, head, sizeof(head), 0) != 0 ||
        psdb__vmap_get_prefix(head, &version, &reserved, &size, named) != 0) {
        snprintf(why, why_size, "the value map does not describe this PSDB");
        return -1;
    }
    if (version != PSDB__VMAP2_VERSION) {
        snprintf(why, why_size, "the value map is version %u, this launcher reads version %u",
                 (unsigned)version, PSDB__VMAP2_VERSION);
        return -1;
    }
    if (reserved != 0 || memcmp(head + 112, zero, 16) != 0 || size != file_size ||
        memcmp(named, sha256, 32) != 0) {
        snprintf(why, why_size, "the value map does not describe this PSDB");
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
        l->nv >= UINT32_MAX || l->nentries > file_size || l->skel > file_size ||
        l->keys_at + l->nkeys * 32 + l->vstored + l->rstored + l->sstored != map_size) {
        snprintf(why, why_size, "the value map is malformed (its sections do not fill it)");
        return -1;
    }
    l->values_at = l->keys_at + l->nkeys * 32;
    l->recipe_at = l->values_at + l->vstored;
    l->skel_at = l->recipe_at + l->rstored;
    return 0;
}

/* ---- the zlib streams ------------------------------------------------------------------------ */

int psdb__vmap_stream_open(psdb__vmap_stream *r, int fd, uint64_t at, uint64_t size)
{
    r->fd = fd;
    r->at = at;
    r->end = at + size;
    if (inflateInit(&r->z) != Z_OK)
        return -1;
    r->open = 1;
    return 0;
}

void psdb__vmap_stream_close(psdb__vmap_stream *r)
{
    if (r->open)
        inflateEnd(&r->z);
    r->open = 0;
}

/* One inflate call into out, after reading the next part of the stream when the input is used
 * up: inflate's status, or Z_ERRNO when the read failed. */
static int stream_step(psdb__vmap_stream *r)
{
    if (r->z.avail_in == 0 && r->at < r->end) {
        size_t n = r->end - r->at < PSDB__VMAP_ZBUF ? (size_t)(r->end - r->at) : PSDB__VMAP_ZBUF;
        if (read_exact(r->fd, r->in, n, r->at) != 0)
            return Z_ERRNO;
        r->at += n;
        r->z.next_in = r->in;
        r->z.avail_in = (uInt)n;
    }
    r->z.next_out = r->out;
    r->z.avail_out = PSDB__VMAP_ZBUF;
    return inflate(&r->z, Z_NO_FLUSH);
}

static int stream_fill(psdb__vmap_stream *r)
{
    while (!r->bad && r->pos == r->len) {
        if (r->ended) {
            r->bad = 1; /* read past the stream's end */
            break;
        }
        int zr = stream_step(r);
        if (zr == Z_ERRNO) {
            r->bad = 1;
            break;
        }
        r->pos = 0;
        r->len = PSDB__VMAP_ZBUF - r->z.avail_out;
        if (zr == Z_STREAM_END)
            r->ended = 1;
        else if (zr != Z_OK || (r->len == 0 && r->z.avail_in == 0))
            r->bad = 1;
    }
    return r->bad ? -1 : 0;
}

uint64_t psdb__vmap_stream_varint(psdb__vmap_stream *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (stream_fill(r) != 0)
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

int psdb__vmap_stream_next(psdb__vmap_stream *r, uint64_t n, const uint8_t **p, size_t *k)
{
    if (stream_fill(r) != 0)
        return -1;
    *p = r->out + r->pos;
    *k = r->len - r->pos < n ? r->len - r->pos : (size_t)n;
    r->pos += *k;
    return 0;
}

int psdb__vmap_stream_done(psdb__vmap_stream *r)
{
    if (r->bad || r->pos != r->len)
        return 0;
    while (!r->ended) {
        int zr = stream_step(r);
        if (zr == Z_ERRNO)
            return 0;
        if (r->z.avail_out != PSDB__VMAP_ZBUF)
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

/* ---- the key table --------------------------------------------------------------------------- */

int psdb__vmap_keys_open(psdb__vmap_keys *k, int fd, const psdb__vmap_layout *l)
{
    *k = (psdb__vmap_keys){.fd = fd, .at = l->keys_at, .n = l->nkeys};
    k->win = malloc((size_t)PSDB__VMAP_KEY_WINDOW * 32);
    return k->win ? 0 : -1;
}

void psdb__vmap_keys_close(psdb__vmap_keys *k)
{
    psdb__vmap_keys_unload(k);
    free(k->win);
    k->win = NULL;
}

int psdb__vmap_key(psdb__vmap_keys *k, uint64_t id, uint8_t out[32])
{
    int rc = 0;
    if (id >= k->n) {
        rc = -1;
    } else if (k->mem) {
        memcpy(out, k->mem + id * 32, 32);
    } else if (k->win && id >= k->win_first && id < k->win_first + 2 * PSDB__VMAP_KEY_WINDOW) {
        if (id >= k->win_first + k->win_n) {
            uint64_t n = k->n - id < PSDB__VMAP_KEY_WINDOW ? k->n - id : PSDB__VMAP_KEY_WINDOW;
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

psdb_hr psdb__vmap_keys_load(psdb__vmap_keys *k, uint64_t max_bytes, char *why, size_t why_size)
{
    if (k->mem || k->n * 32 > max_bytes)
        return PSDB_S_OK;
    k->mem = malloc(k->n ? (size_t)k->n * 32 : 1);
    if (!k->mem) {
        snprintf(why, why_size, "cannot read the value map's keys: out of memory");
        return PSDB_E_OUTOFMEMORY;
    }
    errno = 0;
    if (read_exact(k->fd, k->mem, (size_t)(k->n * 32), k->at) != 0) {
        snprintf(why, why_size, "cannot read the value map's keys: %s",
                 errno ? strerror(errno) : "the file is shorter than its header says");
        free(k->mem);
        k->mem = NULL;
        return PSDB_E_IO;
    }
    return PSDB_S_OK;
}

void psdb__vmap_keys_unload(psdb__vmap_keys *k)
{
    free(k->mem);
    k->mem = NULL;
}

/* ---- the value table ------------------------------------------------------------------------- */

static int cmp_digest_key(const void *a, const void *b)
{
    uint64_t x, y;
    memcpy(&x, ((const psdb__vmap_digest *)a)->sha256, sizeof(x));
    memcpy(&y, ((const psdb__vmap_digest *)b)->sha256, sizeof(y));
    return (x > y) - (x < y);
}

/* Replaces the key id each d[i].sha256 holds by that key's digest. The value table names keys in
 * no order a window follows (a read each for most values), so the ids are sorted first and the
 * key table read forward once through the window: no memory beyond the window, a read per
 * PSDB__VMAP_KEY_WINDOW keys. 0, or -1 (a failed or short read). */
static int digests_of_keys(psdb__vmap_keys *kt, psdb__vmap_digest *d, size_t n)
{
    qsort(d, n, sizeof(*d), cmp_digest_key);
    for (size_t i = 0; i < n; i++) {
        uint64_t id;
        memcpy(&id, d[i].sha256, sizeof(id));
        if (kt->win_n == 0 || id >= kt->win_first + kt->win_n) {
            uint64_t count =
                kt->n - id < PSDB__VMAP_KEY_WINDOW ? kt->n - id : PSDB__VMAP_KEY_WINDOW;
            kt->win_n = 0;
            if (read_exact(kt->fd, kt->win, (size_t)count * 32, kt->at + id * 32) != 0)
                return -1;
            kt->win_first = id;
            kt->win_n = count;
        }
        memcpy(d[i].sha256, kt->win + (id - kt->win_first) * 32, 32);
    }
    return 0;
}

psdb_hr psdb__vmap_values(int fd, const psdb__vmap_layout *l, psdb__vmap_keys *kt,
                          uint64_t file_size, uint64_t *sizes, psdb__vmap_digest *digests,
                          char *why, size_t why_size)
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    psdb__vmap_stream *zv = calloc(1, sizeof(*zv));
    if (!zv || psdb__vmap_stream_open(zv, fd, l->values_at, l->vstored) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint64_t i = 0, id = 0; i < l->nv; i++) {
        id += unzigzag(psdb__vmap_stream_varint(zv));
        sizes[i] = psdb__vmap_stream_varint(zv);
        if (zv->bad || id >= kt->n || sizes[i] == 0 || sizes[i] > file_size) {
            snprintf(why, why_size, "the value map is malformed (value %llu)",
                     (unsigned long long)i);
            goto cleanup;
        }
        if (digests) {
            memcpy(digests[i].sha256, &id, sizeof(id)); /* the key id, until digests_of_keys */
            digests[i].value = (uint32_t)i;
        }
    }
    if (!psdb__vmap_stream_done(zv)) {
        snprintf(why, why_size, "the value map is malformed (its value table)");
        goto cleanup;
    }
    errno = 0;
    if (digests && digests_of_keys(kt, digests, (size_t)l->nv) != 0) {
        hr = PSDB_E_IO;
        snprintf(why, why_size, "cannot read the value map's keys: %s",
                 errno ? strerror(errno) : "the file is shorter than its header says");
        goto cleanup;
    }
    hr = PSDB_S_OK;
cleanup:
    if (zv)
        psdb__vmap_stream_close(zv);
    free(zv);
    return hr;
}

/* ---- the recipe ------------------------------------------------------------------------------ */

int psdb__vmap_recipe_next(psdb__vmap_stream *r, psdb__vmap_recipe *st, psdb__vmap_entry *e)
{
    uint64_t x = psdb__vmap_stream_varint(r);
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
        e->in_at = psdb__vmap_stream_varint(r);
        e->len = psdb__vmap_stream_varint(r);
        if (r->bad || e->arg >= st->nv || e->len == 0 || e->len > UINT32_MAX)
            return -1;
        return 0;
    default:
        return -1;
    }
}
