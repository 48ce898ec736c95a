/* vk_compile.c - `psdb compile --backend vulkan`: every Vulkan entry of an SODB replayed on the
 * device, and what the driver compiled written into a PSDB for the device's identity.
 *
 * DESIGN: a PSDB is delivered again as a value-level delta after every patch of its game, so no
 * value may hold what changes when any pipeline does (schema/COMPILER.md section 5). With
 * VK_KHR_pipeline_binary each pipeline's binaries are its own value. Otherwise, where the driver's
 * VkPipelineCache carries code, the pipelines are bucketed by key into parts of a few pipelines,
 * each part one cache value (a device merges them once: one creation then finds every pipeline);
 * for lavapipe the compile runs with Mesa's single-file disk cache in a private folder and each of
 * its entries becomes a value of its own, the cache file reassembled at delivery.
 *
 * With a base (the PSDB of the previous version, for the same device): a pipeline whose key the
 * base holds is taken from it byte for byte (the NVIDIA driver's data differs from compile to
 * compile, so recompiling an unchanged pipeline would make its value new), and only the others are
 * compiled; a cache part whose members are all unchanged is taken whole; Mesa's entries of the base
 * are kept beside the new ones. */
#include "vulkan/vk_backend.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Pipelines per cache part, on average: a part is new when any of its pipelines is, so small
 * parts keep a patch's new bytes near its changed pipelines' share; each part is one cache a
 * device creates and merges once. A part is a range of keys (their leading bits), and the compile
 * visits the pipelines in key order: one part's cache is open at a time, written out when the
 * compile leaves its range, so memory does not grow with the corpus. */
#define PART_PIPELINES 4u
/* The most pipelines a PSDB keeps as pipeline binaries. The NVIDIA driver (580.159.04, H200)
 * refuses creations from binaries with VK_PIPELINE_COMPILE_REQUIRED after 1,786 of them on one
 * device (about 4,096 binaries, 2.3 a pipeline), whatever their size and with its internal cache
 * on or off; the layer then creates them as the application asked. Larger corpora keep their
 * code in cache parts, which serve any number. */
#define BINARY_PIPELINES_MAX 1500u

static const char MESA_META[] = "mesa-disk-cache";
static const char CACHE_META[] = "vk-pipeline-cache";
static const char BINARY_META[] = "vk-pipeline-binary";

/* The cache parts of one compile: the pipelines' keys, bucketed, and per bucket whether the
 * base's part can be taken whole. */
typedef struct vparts {
    uint64_t k;          /* buckets: a power of two */
    unsigned bits;       /* log2(k): a bucket is the key's leading `bits` bits */
    uint64_t open;       /* the bucket the compile is in (UINT64_MAX: none yet) */
    uint64_t cursor;     /* keys[cursor..] are those of buckets not written yet */
    uint8_t (*keys)[32]; /* every Vulkan entry's key, sorted */
    uint64_t n, cap;
    uint8_t *clean;         /* [k]: take the base's part */
    VkPipelineCache *cache; /* [k]: the part being built, or VK_NULL_HANDLE */
} vparts;

typedef struct vcompile {
    vkbe_dev *d;
    psdb_writer *w;
    psdb_file *base; /* proven and fitting the device, or NULL */
    vparts parts;
    vkbe_compile_stats st;
    FILE *progress;
    double last_progress, t0;
    uint64_t total, index;
    psdb_hr hr;
    char *err;
    size_t err_size;
    char first_failure[256];
} vcompile;

static uint64_t bucket_of(const vparts *p, const uint8_t key[32])
{
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h = h << 8 | key[i];
    return p->bits ? h >> (64 - p->bits) : 0;
}

static void part_key(const vparts *p, uint64_t bucket, uint8_t out[33])
{
    char name[96];
    int n = snprintf(name, sizeof(name), "psdb-vulkan:cache-part:%llu:%llu",
                     (unsigned long long)p->k, (unsigned long long)bucket);
    vkid_piece_key(VKID_PIECE_CACHE_PART, name, (size_t)n, out);
}

static int cmp_key(const void *a, const void *b)
{
    return memcmp(a, b, 32);
}

/* Copies the values of key (each type the base has) and its group of one from the base. */
static psdb_hr copy_from_base(vcompile *c, const void *key, size_t key_size, uint64_t version,
                              uint64_t *bytes)
{
    psdb_hr hr = PSDB_S_OK;
    for (uint32_t t = 0; t < PSDB_VALUE_TYPE_COUNT && PSDB_SUCCEEDED(hr); t++) {
        void *b = NULL;
        size_t n = 0;
        psdb_hr got = vkdl_value(c->base, key, key_size, t, &b, &n);
        if (got == PSDB_E_NOT_FOUND)
            continue;
        hr = PSDB_FAILED(got) ? got : psdb_writer_put_value(c->w, key, key_size, t, b, n);
        if (t == PSDB_VALUE_OBJECT_CODE && bytes)
            *bytes += n;
        free(b);
    }
    psdb_value_ref ref = {key, key_size};
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(c->w, key, key_size, version, 1, &ref);
    return hr;
}

static int base_has(psdb_file *f, const void *key, size_t key_size, uint32_t type)
{
    size_t n = 0;
    return f && psdb_file_find_value(f, key, key_size, type, NULL, &n) == PSDB_S_OK;
}

static int collect_key(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                       size_t desc_size, void *arg)
{
    vparts *p = arg;
    (void)version, (void)desc, (void)desc_size;
    if (kind != PSDB_SODB_VK_COMPUTE && kind != PSDB_SODB_VK_GRAPHICS)
        return 0;
    if (p->n == p->cap) {
        uint64_t cap = p->cap ? p->cap * 2 : 256;
        uint8_t(*k)[32] = realloc(p->keys, cap * 32);
        if (!k)
            return 1;
        p->keys = k;
        p->cap = cap;
    }
    memcpy(p->keys[p->n++], key, 32);
    return 0;
}

/* The parts of the compile: every entry's key (an SODB holds each once), the bucket count (a power
 * of two, so that a patch that keeps the count keeps every bucket), and which buckets hold exactly
 * the members of the base's part of that bucket (its METADATA lists them, sorted). */
static psdb_hr parts_plan(vcompile *c, psdb_sodb *s)
{
    vparts *p = &c->parts;
    psdb_hr hr = psdb_sodb_foreach(s, collect_key, p);
    if (PSDB_FAILED(hr))
        return hr;
    if (p->n == 0)
        return PSDB_S_OK;
    qsort(p->keys, (size_t)p->n, 32, cmp_key);
    p->k = 1;
    while (p->k * PART_PIPELINES < p->n)
        p->k *= 2, p->bits++;
    p->open = UINT64_MAX;
    p->clean = calloc((size_t)p->k, 1);
    p->cache = calloc((size_t)p->k, sizeof(*p->cache));
    if (!p->clean || !p->cache)
        return PSDB_E_OUTOFMEMORY;
    /* Sorted keys: each bucket's members are the run [i, j). */
    for (uint64_t i = 0, j; c->base && i < p->n; i = j) {
        uint64_t b = bucket_of(p, p->keys[i]);
        for (j = i + 1; j < p->n && bucket_of(p, p->keys[j]) == b; j++)
            ;
        uint8_t key[33];
        void *members = NULL;
        size_t n = 0;
        part_key(p, b, key);
        if (vkdl_value(c->base, key, sizeof(key), PSDB_VALUE_METADATA, &members, &n) != PSDB_S_OK)
            continue;
        /* Same members: the same keys, in the same (sorted) order. */
        p->clean[b] = n == (j - i) * 32 && memcmp(members, p->keys[i], n) == 0;
        free(members);
    }
    return PSDB_S_OK;
}

static void parts_free(vcompile *c)
{
    vparts *p = &c->parts;
    for (uint64_t b = 0; p->cache && b < p->k; b++)
        if (p->cache[b])
            vkDestroyPipelineCache(c->d->device, p->cache[b], NULL);
    free(p->keys);
    free(p->clean);
    free(p->cache);
    memset(p, 0, sizeof(*p));
}

/* Writes part b, once the compile has left its range: a clean one from the base, the others from
 * the cache its members were merged into, which is then destroyed (a part whose members all failed
 * has none and is left out). Parts are written in increasing order. */
static psdb_hr part_flush(vcompile *c, uint64_t b)
{
    vparts *p = &c->parts;
    psdb_hr hr = PSDB_S_OK;
    uint8_t key[33];
    void *data = NULL;
    size_t n = 0;
    uint64_t first;
    while (p->cursor < p->n && bucket_of(p, p->keys[p->cursor]) < b)
        p->cursor++;
    for (first = p->cursor; p->cursor < p->n && bucket_of(p, p->keys[p->cursor]) == b;)
        p->cursor++;
    part_key(p, b, key);
    if (p->clean[b]) {
        p->clean[b] = 0;
        if (PSDB_FAILED(hr = copy_from_base(c, key, sizeof(key), 1, &c->st.code_bytes)))
            snprintf(c->err, c->err_size, "copying cache part %llu from the base failed: %s",
                     (unsigned long long)b, psdb_hr_str(hr));
        return hr;
    }
    if (!p->cache[b])
        return PSDB_S_OK;
    VkResult r = vkGetPipelineCacheData(c->d->device, p->cache[b], &n, NULL);
    if (r == VK_SUCCESS && !(data = malloc(n ? n : 1)))
        r = VK_ERROR_OUT_OF_HOST_MEMORY;
    if (r == VK_SUCCESS)
        r = vkGetPipelineCacheData(c->d->device, p->cache[b], &n, data);
    vkDestroyPipelineCache(c->d->device, p->cache[b], NULL);
    p->cache[b] = VK_NULL_HANDLE;
    if (r != VK_SUCCESS || vkid_check_cache_header(&c->d->id, data, n) != 0) {
        snprintf(c->err, c->err_size, "reading cache part %llu failed: VkResult %d",
                 (unsigned long long)b, (int)r);
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    psdb_value_ref ref = {key, sizeof(key)};
    hr = psdb_writer_put_value(c->w, key, sizeof(key), PSDB_VALUE_OBJECT_CODE, data, n);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_value(c->w, key, sizeof(key), PSDB_VALUE_METADATA, p->keys[first],
                                   (size_t)(p->cursor - first) * 32);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(c->w, key, sizeof(key), 1, 1, &ref);
    if (PSDB_FAILED(hr))
        snprintf(c->err, c->err_size, "writing cache part %llu failed: %s", (unsigned long long)b,
                 psdb_hr_str(hr));
    c->st.code_bytes += n;
cleanup:
    free(data);
    return hr;
}

/* Writes every part not written yet (the last one the compile was in). */
static psdb_hr parts_write(vcompile *c)
{
    psdb_hr hr = PSDB_S_OK;
    for (uint64_t b = 0; b < c->parts.k && PSDB_SUCCEEDED(hr); b++)
        hr = part_flush(c, b);
    return hr;
}

static void progress_line(vcompile *c)
{
    if (c->progress && vkbe_now() - c->last_progress >= 2.0) {
        c->last_progress = vkbe_now();
        fprintf(c->progress,
                "psdb compile: %llu/%llu pipelines (%llu taken from the base), %llu failed, "
                "%.1f s\n",
                (unsigned long long)c->index, (unsigned long long)c->total,
                (unsigned long long)c->st.reused, (unsigned long long)c->st.failed,
                c->last_progress - c->t0);
        fflush(c->progress);
    }
}

static int compile_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                         size_t desc_size, void *arg)
{
    vcompile *c = arg;
    vkdec_pipeline p;
    vkbe_got got;
    memset(&got, 0, sizeof(got));
    psdb_hr hr = PSDB_S_OK;
    vkid_strategy strategy = c->d->id.strategy;
    const char *meta = strategy == VKID_MESA_DISK_CACHE   ? MESA_META
                       : strategy == VKID_PIPELINE_BINARY ? BINARY_META
                                                          : CACHE_META;
    if (kind != PSDB_SODB_VK_COMPUTE && kind != PSDB_SODB_VK_GRAPHICS)
        return 0; /* D3D12 entries: the reference compiler's */
    c->index++;
    uint64_t bucket = strategy == VKID_PIPELINE_CACHE ? bucket_of(&c->parts, key) : 0;
    if (strategy == VKID_PIPELINE_CACHE && bucket != c->parts.open) {
        /* Key order: the compile has left the open part's range for good. */
        if (c->parts.open != UINT64_MAX && PSDB_FAILED(hr = part_flush(c, c->parts.open))) {
            c->hr = hr; /* part_flush said why */
            return 1;
        }
        c->parts.open = bucket;
    }
    /* Unchanged since the base: its values, byte for byte (for a cache part, the part decides). */
    int reuse = strategy == VKID_PIPELINE_CACHE
                    ? c->parts.clean[bucket]
                    : base_has(c->base, key, 32, PSDB_VALUE_METADATA) &&
                          (strategy == VKID_MESA_DISK_CACHE ||
                           base_has(c->base, key, 32, PSDB_VALUE_OBJECT_CODE));
    if (reuse) {
        hr = strategy == VKID_PIPELINE_CACHE
                 ? psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_METADATA, meta, strlen(meta))
                 : copy_from_base(c, key, 32, version, &c->st.code_bytes);
        psdb_value_ref ref = {key, 32};
        if (PSDB_SUCCEEDED(hr) && strategy == VKID_PIPELINE_CACHE)
            hr = psdb_writer_put_group(c->w, key, 32, version, 1, &ref);
        if (PSDB_FAILED(hr))
            goto write_failed;
        c->st.reused++;
        goto counted;
    }
    int drc = vkdec_pipeline_decode(desc, desc_size, kind == PSDB_SODB_VK_GRAPHICS, &p);
    if (drc != 0) {
        hr = drc == -2 ? PSDB_E_OUTOFMEMORY : PSDB_E_CACHE_CORRUPT;
        snprintf(c->err, c->err_size, "entry %llu: decoding the vulkan pipeline failed: %s",
                 (unsigned long long)c->index, psdb_hr_str(hr));
        c->hr = hr;
        return 1;
    }
    VkResult r = VK_SUCCESS;
    if (strategy == VKID_PIPELINE_CACHE && !c->parts.cache[bucket]) {
        VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
        r = vkCreatePipelineCache(c->d->device, &cci, NULL, &c->parts.cache[bucket]);
        got.what = "creating a cache part";
    }
    vkbe_how how = {.want_cache = strategy == VKID_PIPELINE_CACHE,
                    .merge_into =
                        strategy == VKID_PIPELINE_CACHE ? c->parts.cache[bucket] : VK_NULL_HANDLE,
                    .capture_binaries = strategy == VKID_PIPELINE_BINARY};
    if (r == VK_SUCCESS)
        r = vkbe_create(c->d, &p, &how, &got);
    vkdec_free(&p);
    if (r == VK_SUCCESS && strategy == VKID_PIPELINE_CACHE &&
        vkid_check_cache_header(&c->d->id, got.cache, got.cache_size) != 0)
        r = VK_ERROR_INITIALIZATION_FAILED, got.what = "checking the pipeline cache header";
    if (r != VK_SUCCESS) {
        if (c->st.failed++ == 0)
            snprintf(c->first_failure, sizeof(c->first_failure),
                     "entry %llu: %s failed: VkResult %d", (unsigned long long)c->index, got.what,
                     (int)r);
        free(got.cache);
        free(got.binaries);
        goto progress;
    }
    /* One group per pipeline under its SODB object key: the binaries (their own value), or only
     * the metadata record (the code is in a cache part or in Mesa's entries). */
    if (strategy == VKID_PIPELINE_BINARY) {
        hr = psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_OBJECT_CODE, got.binaries,
                                   got.binaries_size);
        c->st.code_bytes += got.binaries_size;
    }
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_METADATA, meta, strlen(meta));
    psdb_value_ref ref = {key, 32};
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(c->w, key, 32, version, 1, &ref);
    free(got.cache);
    free(got.binaries);
    if (PSDB_FAILED(hr))
        goto write_failed;
    c->st.compiled++;
counted:
    c->st.pipelines++;
    if (kind == PSDB_SODB_VK_COMPUTE)
        c->st.compute++;
    else
        c->st.graphics++;
progress:
    progress_line(c);
    return 0;
write_failed:
    snprintf(c->err, c->err_size, "entry %llu: writing the psdb failed: %s",
             (unsigned long long)c->index, psdb_hr_str(hr));
    c->hr = hr;
    return 1;
}

static int count_vk(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                    size_t desc_size, void *arg)
{
    (void)key, (void)version, (void)desc, (void)desc_size;
    if (kind == PSDB_SODB_VK_COMPUTE || kind == PSDB_SODB_VK_GRAPHICS)
        (*(uint64_t *)arg)++;
    return 0;
}

/* Reads a whole file (malloc'd). */
static int read_file(const char *path, void **out, size_t *size)
{
    FILE *f = fopen(path, "rb");
    void *b = NULL;
    long n;
    *out = NULL;
    if (!f)
        return -1;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(b = malloc((size_t)n ? (size_t)n : 1)) || fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        fclose(f);
        return -1;
    }
    fclose(f);
    *out = b;
    *size = (size_t)n;
    return 0;
}

/* Finds <dir>/mesa_shader_cache_sf/<identity>/<driver>/foz_cache.foz; folder gets
 * "<identity>/<driver>". */
static int find_mesa_cache(const char *dir, char *folder, size_t folder_size)
{
    char base[4096], sub[4096], file[4096];
    if (vkbe_fmt(base, sizeof(base), "%s/mesa_shader_cache_sf", dir) != 0)
        return -1;
    DIR *d1 = opendir(base);
    int found = -1;
    struct dirent *e1, *e2;
    while (d1 && found != 0 && (e1 = readdir(d1))) {
        if (e1->d_name[0] == '.')
            continue;
        if (vkbe_fmt(sub, sizeof(sub), "%s/%s", base, e1->d_name) != 0)
            continue;
        DIR *d2 = opendir(sub);
        while (d2 && found != 0 && (e2 = readdir(d2))) {
            struct stat st;
            if (e2->d_name[0] == '.')
                continue;
            if (vkbe_fmt(file, sizeof(file), "%s/%s/foz_cache.foz", sub, e2->d_name) == 0 &&
                stat(file, &st) == 0 && st.st_size > 0 &&
                vkbe_fmt(folder, folder_size, "%s/%s", e1->d_name, e2->d_name) == 0)
                found = 0;
        }
        if (d2)
            closedir(d2);
    }
    if (d1)
        closedir(d1);
    return found;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The key of the Mesa entry whose 40 hex digits are hash. */
static void entry_key(const uint8_t *hash, uint8_t out[33])
{
    char name[64] = "psdb-vulkan:mesa-entry:";
    size_t n = strlen(name);
    memcpy(name + n, hash, 40);
    vkid_piece_key(VKID_PIECE_MESA_ENTRY, name, n + 40, out);
}

/* Copies the base's Mesa entries, each a piece of its own. */
typedef struct entry_copy {
    vcompile *c;
    psdb_hr hr;
} entry_copy;

static int copy_entry(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                      void *ctx)
{
    entry_copy *e = ctx;
    (void)num_values;
    if (key_size != VKID_PIECE_KEY_SIZE || ((const uint8_t *)key)[0] != VKID_PIECE_MESA_ENTRY)
        return 0;
    e->hr = copy_from_base(e->c, key, key_size, version, &e->c->st.code_bytes);
    return PSDB_FAILED(e->hr);
}

/* Mesa's cache as pieces: the folder under the cache's key, and each entry of the cache Mesa wrote
 * (checked whole first) as a value and group of its own; with a base, the base's entries too (a
 * taken pipeline's code is there), those of this compile beside them unless the base has the same
 * entry. */
static psdb_hr put_mesa(vcompile *c, const char *cache_dir)
{
    char path[4096], folder[1024], why[256];
    void *foz = NULL, *idx = NULL, *base_folder = NULL;
    size_t foz_n = 0, idx_n = 0, base_folder_n = 0;
    uint8_t kfoz[32];
    psdb_hr hr = PSDB_S_OK;
    int have = find_mesa_cache(cache_dir, folder, sizeof(folder)) == 0;
    if (!have && c->st.compiled > 0) {
        snprintf(c->err, c->err_size, "mesa wrote no single-file cache under %s", cache_dir);
        return PSDB_E_FAIL;
    }
    vkid_mesa_key(0, kfoz);
    if (c->base &&
        vkdl_value(c->base, kfoz, 32, PSDB_VALUE_METADATA, &base_folder, &base_folder_n) ==
            PSDB_S_OK &&
        have && (base_folder_n != strlen(folder) || memcmp(base_folder, folder, base_folder_n))) {
        snprintf(c->err, c->err_size,
                 "the base's mesa cache was made for another cache identity (%.*s, this machine "
                 "%s): compile without --base",
                 (int)base_folder_n, (const char *)base_folder, folder);
        hr = PSDB_E_DRIVER_VERSION_MISMATCH;
        goto cleanup;
    }
    if (!have) /* every pipeline taken from the base: its folder */
        snprintf(folder, sizeof(folder), "%.*s", (int)base_folder_n,
                 base_folder ? (const char *)base_folder : "");
    hr = psdb_writer_put_value(c->w, kfoz, 32, PSDB_VALUE_METADATA, folder, strlen(folder));
    psdb_value_ref ref = {kfoz, 32};
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(c->w, kfoz, 32, 1, 1, &ref);
    if (PSDB_SUCCEEDED(hr) && c->base) {
        entry_copy e = {c, PSDB_S_OK};
        hr = psdb_file_foreach_group(c->base, copy_entry, &e);
        if (PSDB_SUCCEEDED(hr))
            hr = e.hr;
    }
    if (PSDB_FAILED(hr) || !have)
        goto cleanup;
    if (vkbe_fmt(path, sizeof(path), "%s/mesa_shader_cache_sf/%s/foz_cache.foz", cache_dir,
                 folder) != 0 ||
        read_file(path, &foz, &foz_n) != 0 ||
        vkbe_fmt(path, sizeof(path), "%s/mesa_shader_cache_sf/%s/foz_cache_idx.foz", cache_dir,
                 folder) != 0 ||
        read_file(path, &idx, &idx_n) != 0) {
        snprintf(c->err, c->err_size, "reading mesa's cache under %s: %s", cache_dir,
                 strerror(errno));
        hr = PSDB_E_IO;
        goto cleanup;
    }
    if (vkdl_foz_check(foz, foz_n, idx, idx_n, why, sizeof(why)) != 0) {
        snprintf(c->err, c->err_size, "mesa's cache is malformed: %s", why);
        hr = PSDB_E_FAIL;
        goto cleanup;
    }
    /* Checked: entries run back to back from the magic to the end. */
    for (size_t off = 16; off < foz_n && PSDB_SUCCEEDED(hr);) {
        const uint8_t *e = (const uint8_t *)foz + off;
        size_t n = 40 + 16 + le32(e + 40);
        uint8_t key[33];
        entry_key(e, key);
        if (!base_has(c->base, key, sizeof(key), PSDB_VALUE_OBJECT_CODE)) {
            psdb_value_ref r = {key, sizeof(key)};
            hr = psdb_writer_put_value(c->w, key, sizeof(key), PSDB_VALUE_OBJECT_CODE, e, n);
            if (PSDB_SUCCEEDED(hr))
                hr = psdb_writer_put_group(c->w, key, sizeof(key), 1, 1, &r);
            c->st.code_bytes += n;
        }
        off += n;
    }
cleanup:
    if (PSDB_FAILED(hr) && !c->err[0])
        snprintf(c->err, c->err_size, "writing the mesa cache: %s", psdb_hr_str(hr));
    free(foz);
    free(idx);
    free(base_folder);
    return hr;
}

/* The strategy record (and for binaries the device's global pipeline key). */
static psdb_hr put_strategy(vcompile *c)
{
    uint8_t key[32], gkey[32];
    uint32_t gkey_n = 0;
    const char *name = vkid_strategy_name(c->d->id.strategy);
    psdb_hr hr = PSDB_S_OK;
    vkid_strategy_key(key);
    if (c->d->id.strategy == VKID_PIPELINE_BINARY) {
        VkResult r = vkbin_global_key(&c->d->bin, c->d->device, gkey, &gkey_n);
        if (r != VK_SUCCESS || gkey_n == 0) {
            snprintf(c->err, c->err_size, "reading the global pipeline key failed: VkResult %d",
                     (int)r);
            return PSDB_E_FAIL;
        }
        hr = psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_OBJECT_CODE, gkey, gkey_n);
    }
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_METADATA, name, strlen(name));
    psdb_value_ref ref = {key, 32};
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(c->w, key, 32, 1, 1, &ref);
    return hr;
}

/* The base, when it can serve this compile: proven (its content digest), for this device (its
 * family and ABI), compiled the same way, and for binaries with the same global key. NULL
 * otherwise, said on progress. */
static psdb_file *open_base(vcompile *c, const char *base_path)
{
    psdb_file *f = NULL;
    uint8_t gkey[32], mine[32];
    uint32_t gkey_n = 0, mine_n = 0;
    const char *why = NULL;
    char msg[512] = "";
    psdb_hr hr = vkdl_open(base_path, &c->d->id, NULL, &f);
    if (PSDB_FAILED(hr)) {
        snprintf(msg, sizeof(msg), "%s", psdb_error_last());
        why = msg;
    } else if (vkdl_strategy(f, gkey, &gkey_n) != c->d->id.strategy) {
        why = "it keeps its code another way";
    } else if (c->d->id.strategy == VKID_PIPELINE_BINARY &&
               (vkbin_global_key(&c->d->bin, c->d->device, mine, &mine_n) != VK_SUCCESS ||
                mine_n != gkey_n || memcmp(mine, gkey, gkey_n) != 0)) {
        why = "its binaries are for another driver build (global pipeline key)";
    }
    if (why) {
        if (c->progress)
            fprintf(c->progress,
                    "psdb compile: base %s does not serve this device: %s; every "
                    "pipeline is compiled\n",
                    base_path, why);
        psdb_file_release(f);
        return NULL;
    }
    return f;
}

psdb_hr vkbe_compile(const char *sodb_path, const char *base_path, uint32_t device_index,
                     const char *out_path, FILE *progress, vkbe_compile_stats *stats, char *err,
                     size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb *s = NULL;
    psdb_app_identity app;
    vkbe_dev d;
    vcompile c;
    char tmpl[] = "/tmp/psdb-vk-compile-XXXXXX";
    char *cache_dir = NULL;

    memset(&d, 0, sizeof(d));
    memset(&c, 0, sizeof(c));
    err[0] = '\0';
    c.t0 = vkbe_now();
    c.err = err;
    c.err_size = err_size;
    c.progress = progress;
    hr = psdb_sodb_open(sodb_path, &s);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "cannot open SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_sodb_get_identity(s, &app);
    psdb_sodb_foreach(s, count_vk, &c.total);
    if (c.total == 0) {
        hr = PSDB_E_INVALIDARG;
        snprintf(err, err_size, "SODB %s holds no vulkan pipeline", sodb_path);
        goto cleanup;
    }
    cache_dir = mkdtemp(tmpl);
    if (!cache_dir) {
        hr = PSDB_E_IO;
        snprintf(err, err_size, "mkdtemp %s: %s", tmpl, strerror(errno));
        goto cleanup;
    }
    vkbe_private_cache(cache_dir);
    /* The NVIDIA driver's own disk cache off: every pipeline is compiled here. */
    setenv("__GL_SHADER_DISK_CACHE", "0", 1);
    if (vkbe_dev_open(&d, device_index, err, err_size) != 0) {
        hr = PSDB_E_ADAPTER_NOT_FOUND;
        goto cleanup;
    }
    c.d = &d;
    const char *forced = getenv("PSDB_VULKAN_STRATEGY");
    if (d.id.strategy == VKID_PIPELINE_BINARY && c.total > BINARY_PIPELINES_MAX &&
        !(forced && strcmp(forced, "pipeline-binary") == 0)) {
        /* More pipelines than a device makes from binaries (schema/COMPILER.md section 5): the
         * VkPipelineCache way, in cache parts, serves every one of them. */
        d.id.strategy = VKID_PIPELINE_CACHE;
        if (progress)
            fprintf(progress,
                    "psdb compile: %llu pipelines are more than the %u a device makes from "
                    "pipeline binaries: the code goes in cache parts\n",
                    (unsigned long long)c.total, BINARY_PIPELINES_MAX);
    }
    if (base_path)
        c.base = open_base(&c, base_path);
    if (d.id.strategy == VKID_PIPELINE_CACHE && (hr = parts_plan(&c, s)) < 0) {
        snprintf(err, err_size, "planning the cache parts: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_target t = {d.id.family, d.id.abi, d.id.compiler_version, 0};
    hr = psdb_writer_create(out_path, &app, &t, &c.w);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "cannot create %s: %s", out_path, psdb_hr_str(hr));
        goto cleanup;
    }
    if (progress) {
        fprintf(progress, "psdb compile: %llu vulkan pipelines on %s (%s, %s)\n",
                (unsigned long long)c.total, d.id.device_name, d.id.family,
                d.id.strategy == VKID_MESA_DISK_CACHE   ? "mesa disk cache"
                : d.id.strategy == VKID_PIPELINE_BINARY ? "pipeline binaries"
                                                        : "pipeline cache");
        fflush(progress);
    }
    c.last_progress = vkbe_now();
    hr = d.id.strategy == VKID_PIPELINE_CACHE ? psdb_sodb_foreach_by_key(s, compile_entry, &c)
                                              : psdb_sodb_foreach(s, compile_entry, &c);
    if (PSDB_FAILED(c.hr)) {
        hr = c.hr;
        goto cleanup;
    }
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "reading SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    if (c.st.pipelines == 0) {
        hr = PSDB_E_FAIL;
        snprintf(err, err_size, "no pipeline could be created (%llu failed; first: %s)",
                 (unsigned long long)c.st.failed, c.first_failure);
        goto cleanup;
    }
    if ((hr = put_strategy(&c)) < 0)
        goto cleanup;
    if (d.id.strategy == VKID_PIPELINE_CACHE && (hr = parts_write(&c)) < 0)
        goto cleanup;
    vkid_strategy strategy = d.id.strategy;
    int mesa = strategy == VKID_MESA_DISK_CACHE;
    parts_free(&c);
    vkbe_dev_close(&d); /* Mesa writes its cache out when the driver closes it */
    if (mesa && (hr = put_mesa(&c, cache_dir)) < 0)
        goto cleanup;
    hr = psdb_writer_finish(c.w);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "writing %s: %s", out_path, psdb_hr_str(hr));
        goto cleanup;
    }
    c.st.seconds = vkbe_now() - c.t0;
    c.st.strategy = vkid_strategy_name(strategy);
    if (stats)
        *stats = c.st;
    if (c.st.failed && progress)
        fprintf(progress, "psdb compile: %llu pipelines failed to create (first: %s)\n",
                (unsigned long long)c.st.failed, c.first_failure);
cleanup:
    if (c.d)
        parts_free(&c);
    vkbe_dev_close(&d);
    psdb_writer_release(c.w);
    psdb_file_release(c.base);
    psdb_sodb_release(s);
    if (cache_dir)
        vkbe_remove_tree(cache_dir);
    return hr;
}
