/* buf.c - growable buffers, bounds-checked little-endian readers, strdup. */
#include "common/buf.h"

#include <stdlib.h>
#include <string.h>

void psdb__buf_free(psdb__buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

void psdb__buf_append(psdb__buf *b, const void *p, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (n > SIZE_MAX - b->len) {
        b->oom = 1;
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n)
            cap = cap > SIZE_MAX / 2 ? b->len + n : cap * 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) {
            b->oom = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void psdb__buf_u8(psdb__buf *b, uint8_t v)
{
    psdb__buf_append(b, &v, 1);
}

void psdb__buf_u32(psdb__buf *b, uint32_t v)
{
    uint8_t t[4];
    psdb__put_le32(t, v);
    psdb__buf_append(b, t, 4);
}

void psdb__buf_u64(psdb__buf *b, uint64_t v)
{
    uint8_t t[8];
    psdb__put_le64(t, v);
    psdb__buf_append(b, t, 8);
}

void psdb__buf_str(psdb__buf *b, const char *s)
{
    if (!s) {
        psdb__buf_u32(b, UINT32_MAX);
        return;
    }
    size_t n = strlen(s);
    if (n >= UINT32_MAX) {
        b->oom = 1;
        return;
    }
    psdb__buf_u32(b, (uint32_t)n);
    psdb__buf_append(b, s, n);
}

psdb_hr psdb__buf_status(const psdb__buf *b)
{
    return b->oom ? PSDB_E_OUTOFMEMORY : PSDB_S_OK;
}

const uint8_t *psdb__rd_bytes(psdb__rd *r, size_t n)
{
    if (r->bad || n > r->len - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}

uint32_t psdb__rd_u32(psdb__rd *r)
{
    const uint8_t *p = psdb__rd_bytes(r, 4);
    return p ? psdb__le32(p) : 0;
}

uint64_t psdb__rd_u64(psdb__rd *r)
{
    const uint8_t *p = psdb__rd_bytes(r, 8);
    return p ? psdb__le64(p) : 0;
}

uint32_t psdb__le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t psdb__le64(const uint8_t *p)
{
    return (uint64_t)psdb__le32(p) | (uint64_t)psdb__le32(p + 4) << 32;
}

void psdb__put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

void psdb__put_le64(uint8_t *p, uint64_t v)
{
    psdb__put_le32(p, (uint32_t)v);
    psdb__put_le32(p + 4, (uint32_t)(v >> 32));
}

char *psdb__strdup(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
