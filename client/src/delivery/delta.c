/* delta.c - value-level delta updates: rebuild a newer PSDB from installed ones, the blob's
 * version 2 value map and ranges of the blob (delta.h; the steps: delta_int.h; the format:
 * schema/VALUEMAP.md). */
#include "delivery/delta_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fdio.h"
#include "common/status_map.h"

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
    psdb__vmap_digest *nd = NULL;
    uint32_t *held = NULL;
    uint64_t *sizes = NULL;
    run_list rl = {0};
    psdb__vmap_layout l;
    uint64_t map_size = 0, have = 0, readable = 0;
    psdb__vmap_stream *zrec = NULL, *zskel = NULL;
    psdb__vmap_keys kt = {.fd = -1};
    out_file of = {.fd = -1};
    const fetcher fetch_as = {.what = dest_path, .total = m->size};
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
    char scratch[sizeof(out->why_not)];
    if (sb.st_size > 0 && psdb__vmap_layout_read(map_fd, (uint64_t)sb.st_size, m->size, m->sha256,
                                                 &l, scratch, sizeof(scratch)) == 0) {
        map_size = (uint64_t)sb.st_size;
        out->map_reused = 1;
    } else {
        if (ftruncate(map_fd, 0) != 0) {
            hr = psdb__errno_hr(errno);
            WHY("cannot truncate %s: %s", map_path, strerror(errno));
            goto cleanup;
        }
        hr = psdb__delta_fetch_map(c, &fetch_as, map_url, m->size, map_fd, &map_size);
        out->downloaded = map_size;
        if (PSDB_FAILED(hr)) {
            WHY("no value map from the server (%s)", psdb_hr_str(hr));
            goto cleanup;
        }
        hr = PSDB_E_INTEGRITY;
        if (psdb__vmap_layout_read(map_fd, map_size, m->size, m->sha256, &l, out->why_not,
                                   sizeof(out->why_not)) != 0)
            goto cleanup;
    }
    keep_map = 1;
    held = malloc((l.nv ? l.nv : 1) * sizeof(*held));
    sizes = malloc((l.nv ? l.nv : 1) * sizeof(*sizes));
    nd = malloc((l.nv ? l.nv : 1) * sizeof(*nd));
    olds = calloc(nsources ? nsources : 1, sizeof(*olds));
    if (psdb__vmap_keys_open(&kt, map_fd, &l) != 0 || !held || !sizes || !nd || !olds) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (size_t k = 0; k < nsources; k++)
        olds[k].fd = -1;
    hr = psdb__vmap_values(map_fd, &l, &kt, m->size, sizes, nd, out->why_not, sizeof(out->why_not));
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* Which values the sources hold (same digest and size), the first source first. */
    psdb__delta_held_begin(&ls, nd, l.nv, sizes, held);
    psdb_hr first_failure = PSDB_S_OK;
    for (size_t k = 0; k < nsources && ls.missing > 0; k++) {
        /* Another application's file is walked only when its digest index (a fortieth of its
         * size or less) names a value still missing: most hold none. */
        hr = k == 0 ? PSDB_S_FALSE
                    : psdb__value_digests_foreach(sources[k], psdb__delta_lacks_digest, &ls);
        if (hr == PSDB_S_FALSE)
            hr = psdb__delta_walk_source(&ls, sources[k], (uint32_t)k, l.nv);
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
    hr = psdb__vmap_keys_load(&kt, KEYS_IN_MEMORY, out->why_not, sizeof(out->why_not));
    if (PSDB_FAILED(hr))
        goto cleanup;
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
    hr = psdb__delta_plan(map_fd, &l, sizes, held, m->size, have, &rl, out);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__delta_plan_resume(&rl);
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
        psdb__vmap_stream_open(zrec, map_fd, l.recipe_at, l.rstored) != 0 ||
        psdb__vmap_stream_open(zskel, map_fd, l.skel_at, l.sstored) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    hr = psdb__delta_out_resume(&of, rl.resume_at);
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
    hr = psdb__delta_fetch_runs(c, &fetch_as, url, &rb, rl.v, rl.n, &got);
    out->downloaded += got;
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__delta_rebuild_to(&rb, m->size);
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
    if (psdb__delta_out_flush(&of) != 0) {
        hr = psdb__errno_hr(of.err);
        WHY("cannot write %s: %s", part, strerror(of.err));
        goto cleanup;
    }
    if (!psdb__vmap_stream_done(zskel) || of.pos != m->size) {
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
        const char *why_not = NULL;
        hr = psdb__rename_hr(errno, PSDB_E_ACCESS, &why_not);
        WHY("cannot put the rebuilt file in place: %s", why_not);
        goto cleanup;
    }
    /* The rename durable before the registry names the file, as after a full download. */
    psdb__fsync_dir_of(dest_path);
    out->used = 1;
    hr = PSDB_S_OK;
cleanup:
    /* Only a cancel keeps anything: a refused map or output must not be trusted again. */
    if (hr != PSDB_E_CANCELLED)
        keep_map = keep_part = 0;
    if (hr == PSDB_E_CANCELLED) {
        if (keep_part)
            psdb__delta_out_flush(&of);
        psdb__error_set(hr,
                        "install: %s: delta update cancelled by the progress callback at %llu of "
                        "%llu bytes; %s is kept for resuming",
                        dest_path, (unsigned long long)of.pos, (unsigned long long)m->size,
                        keep_part  ? part
                        : keep_map ? map_path
                                   : "nothing");
    }
    if (zrec)
        psdb__vmap_stream_close(zrec);
    if (zskel)
        psdb__vmap_stream_close(zskel);
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
    psdb__vmap_keys_close(&kt);
    free(ls.ov);
    free(ls.r);
    return hr;
}
