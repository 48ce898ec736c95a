/* delta_rebuild.c - the delta update's ordered pass: <dest>.delta written in file order from the
 * skeleton, the key table and the sources, through a buffer hashed on the way out
 * (delta_int.h). */
#include "delivery/delta_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/status_map.h"

static int read_exact(int fd, void *buf, size_t n, uint64_t off)
{
    return psdb__pread_upto(fd, buf, n, off) == (ssize_t)n ? 0 : -1;
}

/* ---- the output ------------------------------------------------------------------------------ */

int psdb__delta_out_flush(out_file *o)
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
    if (o->len == OUT_BUF && psdb__delta_out_flush(o) != 0)
        return NULL;
    *room = OUT_BUF - o->len < want ? OUT_BUF - o->len : want;
    return o->buf + o->len;
}

static void out_commit(out_file *o, size_t n)
{
    o->len += n;
    o->pos += n;
}

int psdb__delta_out_put(out_file *o, const uint8_t *p, size_t n)
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

psdb_hr psdb__delta_out_resume(out_file *of, uint64_t keep)
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

/* n bytes of a map stream into o, or skipped (o NULL). 0, or -1 (the stream is bad, or o->err). */
static int stream_copy(psdb__vmap_stream *r, out_file *o, uint64_t n)
{
    while (n > 0) {
        const uint8_t *p = NULL;
        size_t k = 0;
        if (psdb__vmap_stream_next(r, n, &p, &k) != 0)
            return -1;
        if (o && psdb__delta_out_put(o, p, k) != 0)
            return -1;
        n -= k;
    }
    return 0;
}

/* ---- the sources, read back ------------------------------------------------------------------ */

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

/* ---- the ordered pass ------------------------------------------------------------------------ */

psdb_hr psdb__delta_rebuild_to(rebuild *rb, uint64_t target)
{
    psdb__delta_outcome *out = rb->out;
    psdb_hr hr = PSDB_S_OK;
    while (rb->pos < target && PSDB_SUCCEEDED(hr)) {
        psdb__vmap_entry e;
        if (rb->entries_left == 0 || psdb__vmap_recipe_next(rb->rec, &rb->st, &e) != 0) {
            WHY("the value map is malformed (its recipe changed between passes)");
            hr = PSDB_E_INTEGRITY;
            break;
        }
        rb->entries_left--;
        uint64_t start = rb->pos;
        rb->pos += e.len;
        if (rb->pos <= rb->fetched_to) {
            /* Inside a fetched run: the blob's bytes are in place, the skeleton moves on. */
            if (e.tag == PSDB__VMAP2_TAG_SKELETON && stream_copy(rb->skel, NULL, e.len) != 0) {
                WHY("the value map's skeleton does not inflate to the file's other bytes");
                hr = PSDB_E_INTEGRITY;
            }
        } else if (start < rb->fetched_to) {
            WHY("a fetched run ends inside an entry of the recipe");
            hr = PSDB_E_INTEGRITY;
        } else if (e.tag == PSDB__VMAP2_TAG_SKELETON) {
            if (stream_copy(rb->skel, rb->of, e.len) != 0) {
                hr = rb->of->err ? psdb__errno_hr(rb->of->err) : PSDB_E_INTEGRITY;
                WHY("the value map's skeleton does not inflate to the file's other bytes");
            }
        } else if (e.tag == PSDB__VMAP2_TAG_KEY) {
            uint8_t k[32];
            if (psdb__vmap_key(rb->kt, e.arg, k) != 0 || psdb__delta_out_put(rb->of, k, 32) != 0) {
                hr = rb->of->err ? psdb__errno_hr(rb->of->err) : PSDB_E_IO;
                WHY("cannot write key %llu of the value map", (unsigned long long)e.arg);
            }
        } else if (rb->held[e.arg] == MISSING) {
            WHY("a missing value lies outside every fetched run");
            hr = PSDB_E_INTEGRITY; /* the plan put every missing part in a run */
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
