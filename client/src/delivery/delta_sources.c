/* delta_sources.c - the values of the new file that installed PSDBs already hold: each source
 * walked once against the map's digests, the first source that holds a value giving it
 * (delta_int.h). */
#include "delivery/delta_int.h"

#include <stdlib.h>
#include <string.h>

static int cmp_digest(const void *a, const void *b)
{
    return memcmp(((const psdb__vmap_digest *)a)->sha256, ((const psdb__vmap_digest *)b)->sha256,
                  32);
}

void psdb__delta_held_begin(local_set *s, psdb__vmap_digest *need, uint64_t nv,
                            const uint64_t *sizes, uint32_t *held)
{
    qsort(need, (size_t)nv, sizeof(*need), cmp_digest);
    for (uint64_t i = 0; i < nv; i++)
        held[i] = MISSING;
    *s =
        (local_set){.need = need, .nneed = (size_t)nv, .sizes = sizes, .held = held, .missing = nv};
}

/* The first need with this digest or a greater one. */
static size_t need_lower_bound(const psdb__vmap_digest *v, size_t n, const uint8_t sha[32])
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (memcmp(v[mid].sha256, sha, 32) < 0)
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
         i < s->nneed && memcmp(s->need[i].sha256, sha256, 32) == 0; i++) {
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

int psdb__delta_lacks_digest(const uint8_t sha256[32], void *ctx)
{
    const local_set *s = ctx;
    for (size_t i = need_lower_bound(s->need, s->nneed, sha256);
         i < s->nneed && memcmp(s->need[i].sha256, sha256, 32) == 0; i++)
        if (s->held[s->need[i].value] == MISSING)
            return 1;
    return 0;
}

psdb_hr psdb__delta_walk_source(local_set *s, const char *path, uint32_t src, uint64_t nv)
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
