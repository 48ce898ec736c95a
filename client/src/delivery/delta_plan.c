/* delta_plan.c - the delta update's first pass over the map's recipe: the whole recipe checked,
 * the runs of the blob to fetch listed, and the check a fetched map gets before anything is
 * fetched with it (delta_int.h, delta.h). */
#include "delivery/delta_int.h"

#include <stdlib.h>
#include <string.h>

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

psdb_hr psdb__delta_plan(int fd, const psdb__vmap_layout *l, const uint64_t *sizes,
                         const uint32_t *held, uint64_t file_size, uint64_t have, run_list *rl,
                         psdb__delta_outcome *out)
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    psdb__vmap_recipe st = {.nkeys = l->nkeys, .nv = l->nv};
    uint64_t pos = 0, skel_seen = 0;
    psdb__vmap_stream *zr = calloc(1, sizeof(*zr));
    if (!zr || psdb__vmap_stream_open(zr, fd, l->recipe_at, l->rstored) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint64_t i = 0; i < l->nentries; i++) {
        psdb__vmap_entry e;
        if (psdb__vmap_recipe_next(zr, &st, &e) != 0 || e.len > file_size - pos ||
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
    if (!psdb__vmap_stream_done(zr) || pos != file_size || skel_seen != l->skel ||
        st.next_key != l->nkeys) {
        WHY("the value map is malformed (its recipe does not make the file)");
        goto cleanup;
    }
    hr = PSDB_S_OK;
cleanup:
    if (zr)
        psdb__vmap_stream_close(zr);
    free(zr);
    return hr;
}

void psdb__delta_plan_resume(run_list *rl)
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

/* 1 when the skeleton stream inflates to exactly its stated size, 0 when not, -1 when there is
 * no memory to read it. */
static int skeleton_whole(int fd, const psdb__vmap_layout *l)
{
    int rc = -1;
    psdb__vmap_stream *zs = calloc(1, sizeof(*zs));
    if (!zs || psdb__vmap_stream_open(zs, fd, l->skel_at, l->sstored) != 0)
        goto cleanup;
    rc = 1;
    for (uint64_t n = l->skel; n > 0 && rc == 1;) {
        const uint8_t *p = NULL;
        size_t k = 0;
        if (psdb__vmap_stream_next(zs, n, &p, &k) != 0)
            rc = 0;
        else
            n -= k;
    }
    if (rc == 1 && !psdb__vmap_stream_done(zs))
        rc = 0;
cleanup:
    if (zs)
        psdb__vmap_stream_close(zs);
    free(zs);
    return rc;
}

psdb_hr psdb__delta_check_map(int fd, uint64_t map_size, uint64_t file_size,
                              const uint8_t sha256[32], char why[160])
{
    psdb_hr hr = PSDB_E_INTEGRITY;
    psdb__delta_outcome o = {0}, *out = &o;
    psdb__vmap_layout l;
    psdb__vmap_keys kt = {0};
    uint64_t *sizes = NULL;
    uint32_t *held = NULL;
    run_list rl = {0};
    if (psdb__vmap_layout_read(fd, map_size, file_size, sha256, &l, out->why_not,
                               sizeof(out->why_not)) != 0)
        goto cleanup;
    sizes = malloc((l.nv ? l.nv : 1) * sizeof(*sizes));
    held = malloc((l.nv ? l.nv : 1) * sizeof(*held));
    if (psdb__vmap_keys_open(&kt, fd, &l) != 0 || !sizes || !held) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint64_t i = 0; i < l.nv; i++)
        held[i] = MISSING;
    hr = psdb__vmap_values(fd, &l, &kt, file_size, sizes, NULL, out->why_not, sizeof(out->why_not));
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__delta_plan(fd, &l, sizes, held, file_size, 0, &rl, out);
    if (PSDB_FAILED(hr))
        goto cleanup;
    int whole = skeleton_whole(fd, &l);
    if (whole != 1) {
        hr = whole < 0 ? PSDB_E_OUTOFMEMORY : PSDB_E_INTEGRITY;
        if (whole == 0)
            WHY("the value map's skeleton does not inflate to the file's other bytes");
    }
cleanup:
    psdb__vmap_keys_close(&kt);
    free(sizes);
    free(held);
    free(rl.v);
    snprintf(why, 160, "%s", o.why_not);
    return hr;
}
