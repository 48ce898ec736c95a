/* vk_compile.c - `psdb compile --backend vulkan`: every Vulkan entry of an SODB replayed on the
 * device, and what the driver compiled written into a PSDB for the device's identity.
 *
 * DESIGN: where the driver's VkPipelineCache carries code, that cache's data is the pipeline's
 * value, and every pipeline's cache merged into one is stored once more; for lavapipe
 * (schema/COMPILER.md section 5) the compile runs with Mesa's single-file disk cache in a private
 * folder and the PSDB carries that cache, written when the instance is destroyed. */
#include "vulkan/vk_backend.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct vcompile {
    vkbe_dev *d;
    psdb_writer *w;
    vkbe_compile_stats st;
    FILE *progress;
    double last_progress, t0;
    uint64_t total, index;
    psdb_hr hr;
    char *err;
    size_t err_size;
    char first_failure[256];
} vcompile;

static const char MESA_META[] = "mesa-disk-cache";

static int compile_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                         size_t desc_size, void *arg)
{
    vcompile *c = arg;
    vkdec_pipeline p;
    void *blob = NULL;
    size_t blob_n = 0;
    double secs = 0;
    const char *what = "decoding";
    psdb_hr hr = PSDB_S_OK;
    (void)version;
    if (kind != PSDB_SODB_VK_COMPUTE && kind != PSDB_SODB_VK_GRAPHICS)
        return 0; /* D3D12 entries: the reference compiler's */
    c->index++;
    int drc = vkdec_pipeline_decode(desc, desc_size, kind == PSDB_SODB_VK_GRAPHICS, &p);
    if (drc != 0) {
        hr = drc == -2 ? PSDB_E_OUTOFMEMORY : PSDB_E_CACHE_CORRUPT;
        snprintf(c->err, c->err_size, "entry %llu: decoding the vulkan pipeline failed: %s",
                 (unsigned long long)c->index, psdb_hr_str(hr));
        c->hr = hr;
        return 1;
    }
    int mesa = c->d->id.strategy == VKID_MESA_DISK_CACHE;
    VkResult r =
        vkbe_replay_one(c->d, &p, NULL, 0, 0, mesa ? NULL : &blob, &blob_n, &secs, NULL, &what);
    vkdec_free(&p);
    if (r == VK_SUCCESS && !mesa && vkid_check_cache_header(&c->d->id, blob, blob_n) != 0)
        r = VK_ERROR_INITIALIZATION_FAILED, what = "checking the pipeline cache header";
    if (r != VK_SUCCESS) {
        if (c->st.failed++ == 0)
            snprintf(c->first_failure, sizeof(c->first_failure),
                     "entry %llu: %s failed: VkResult %d", (unsigned long long)c->index, what,
                     (int)r);
        free(blob);
        goto progress;
    }
    /* One value per pipeline under its SODB object key: the cache data (VkPipelineCache
     * drivers), or only the metadata record (Mesa: the code is in the shared cache values). */
    if (!mesa)
        hr = psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_OBJECT_CODE, blob, blob_n);
    if (PSDB_SUCCEEDED(hr))
        hr = mesa ? psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_METADATA, MESA_META,
                                          sizeof(MESA_META) - 1)
                  : psdb_writer_put_value(c->w, key, 32, PSDB_VALUE_METADATA, "vk-pipeline-cache",
                                          17);
    psdb_value_ref ref = {key, 32};
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(c->w, key, 32, version, 1, &ref);
    free(blob);
    if (PSDB_FAILED(hr)) {
        snprintf(c->err, c->err_size, "entry %llu: writing the psdb failed: %s",
                 (unsigned long long)c->index, psdb_hr_str(hr));
        c->hr = hr;
        return 1;
    }
    c->st.pipelines++;
    c->st.code_bytes += blob_n;
    if (kind == PSDB_SODB_VK_COMPUTE)
        c->st.compute++;
    else
        c->st.graphics++;
progress:
    if (c->progress && vkbe_now() - c->last_progress >= 2.0) {
        c->last_progress = vkbe_now();
        fprintf(c->progress, "psdb compile: %llu/%llu pipelines, %llu failed, %.1f s\n",
                (unsigned long long)c->index, (unsigned long long)c->total,
                (unsigned long long)c->st.failed, c->last_progress - c->t0);
        fflush(c->progress);
    }
    return 0;
}

/* The merged cache (every pipeline compiled, each one's fresh cache merged in) as one more value
 * of the PSDB under vkid_merged_key, checked like each pipeline's. */
static psdb_hr put_merged(vkbe_dev *d, psdb_writer *w, uint64_t *code_bytes, char *err,
                          size_t err_size)
{
    uint8_t key[32];
    void *b = NULL;
    size_t n = 0;
    psdb_hr hr = PSDB_E_FAIL;
    VkResult r = vkGetPipelineCacheData(d->device, d->merged, &n, NULL);
    if (r == VK_SUCCESS) {
        b = malloc(n ? n : 1);
        r = b ? vkGetPipelineCacheData(d->device, d->merged, &n, b) : VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    if (r != VK_SUCCESS || vkid_check_cache_header(&d->id, b, n) != 0) {
        snprintf(err, err_size, "reading the merged pipeline cache failed: VkResult %d", (int)r);
        goto cleanup;
    }
    vkid_merged_key(key);
    psdb_value_ref ref = {key, 32};
    hr = psdb_writer_put_value(w, key, 32, PSDB_VALUE_OBJECT_CODE, b, n);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_value(w, key, 32, PSDB_VALUE_METADATA, "vk-pipeline-cache-all", 21);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_writer_put_group(w, key, 32, 1, 1, &ref);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "writing the merged pipeline cache: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    *code_bytes += n;
cleanup:
    free(b);
    return hr;
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

psdb_hr vkbe_compile(const char *sodb_path, uint32_t device_index, const char *out_path,
                     FILE *progress, vkbe_compile_stats *stats, char *err, size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb *s = NULL;
    psdb_app_identity app;
    vkbe_dev d;
    vcompile c;
    char tmpl[] = "/tmp/psdb-vk-compile-XXXXXX";
    char *cache_dir = NULL;
    void *foz = NULL, *idx = NULL;
    size_t foz_n = 0, idx_n = 0;
    char folder[1024];

    memset(&d, 0, sizeof(d));
    memset(&c, 0, sizeof(c));
    err[0] = '\0';
    c.t0 = vkbe_now();
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
    if (d.id.strategy == VKID_PIPELINE_CACHE) {
        VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
        VkResult r = vkCreatePipelineCache(d.device, &cci, NULL, &d.merged);
        if (r != VK_SUCCESS) {
            d.merged = VK_NULL_HANDLE;
            hr = PSDB_E_FAIL;
            snprintf(err, err_size, "creating the merged pipeline cache failed: VkResult %d",
                     (int)r);
            goto cleanup;
        }
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
                d.id.strategy == VKID_MESA_DISK_CACHE ? "mesa disk cache" : "pipeline cache");
        fflush(progress);
    }
    c.d = &d;
    c.progress = progress;
    c.last_progress = vkbe_now();
    c.err = err;
    c.err_size = err_size;
    hr = psdb_sodb_foreach(s, compile_entry, &c);
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
    int mesa = d.id.strategy == VKID_MESA_DISK_CACHE;
    if (!mesa && (hr = put_merged(&d, c.w, &c.st.code_bytes, err, err_size)) < 0)
        goto cleanup;
    vkbe_dev_close(&d); /* Mesa writes its cache out when the driver closes it */
    if (mesa) {
        char path[4096];
        uint8_t kfoz[32], kidx[32];
        if (find_mesa_cache(cache_dir, folder, sizeof(folder)) != 0) {
            hr = PSDB_E_FAIL;
            snprintf(err, err_size, "mesa wrote no single-file cache under %s", cache_dir);
            goto cleanup;
        }
        int rc = vkbe_fmt(path, sizeof(path), "%s/mesa_shader_cache_sf/%s/foz_cache.foz", cache_dir,
                          folder);
        if (rc == 0)
            rc = read_file(path, &foz, &foz_n);
        if (rc == 0)
            rc = vkbe_fmt(path, sizeof(path), "%s/mesa_shader_cache_sf/%s/foz_cache_idx.foz",
                          cache_dir, folder);
        if (rc != 0 || read_file(path, &idx, &idx_n) != 0) {
            hr = PSDB_E_IO;
            snprintf(err, err_size, "reading mesa's cache under %s: %s", cache_dir,
                     strerror(errno));
            goto cleanup;
        }
        vkid_mesa_key(0, kfoz);
        vkid_mesa_key(1, kidx);
        psdb_value_ref refs[2] = {{kfoz, 32}, {kidx, 32}};
        hr = psdb_writer_put_value(c.w, kfoz, 32, PSDB_VALUE_OBJECT_CODE, foz, foz_n);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_writer_put_value(c.w, kfoz, 32, PSDB_VALUE_METADATA, folder, strlen(folder));
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_writer_put_value(c.w, kidx, 32, PSDB_VALUE_OBJECT_CODE, idx, idx_n);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_writer_put_group(c.w, kfoz, 32, 1, 2, refs);
        c.st.code_bytes += foz_n + idx_n;
        if (PSDB_FAILED(hr)) {
            snprintf(err, err_size, "writing the mesa cache into %s: %s", out_path,
                     psdb_hr_str(hr));
            goto cleanup;
        }
    }
    hr = psdb_writer_finish(c.w);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "writing %s: %s", out_path, psdb_hr_str(hr));
        goto cleanup;
    }
    c.st.seconds = vkbe_now() - c.t0;
    if (stats)
        *stats = c.st;
    if (c.st.failed && progress)
        fprintf(progress, "psdb compile: %llu pipelines failed to create (first: %s)\n",
                (unsigned long long)c.st.failed, c.first_failure);
cleanup:
    vkbe_dev_close(&d);
    psdb_writer_release(c.w);
    psdb_sodb_release(s);
    if (cache_dir)
        vkbe_remove_tree(cache_dir);
    free(foz);
    free(idx);
    return hr;
}
