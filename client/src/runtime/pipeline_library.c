/* pipeline_library.c - the pipeline library (MODEL L, G2): its tables, storing PSOs by name (L5,
 * L8) and loading them back (L7, G2). */
#include "runtime/plib_int.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/desc.h"
#include "common/error.h"

/* ---- the library ----------------------------------------------------------------------------- */

static uint64_t name_hash(const char *name, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)name[i]) * 0x100000001b3ull;
    return h;
}

/* Unit keys are SHA-256 digests: their first bytes are already uniform. */
static uint64_t key_hash(const uint8_t key[PSDB__KEY_SIZE])
{
    return psdb__le64(key);
}

static uint64_t entry_hash(const psdb_pipeline_library *lib, size_t i)
{
    return name_hash(lib->entries[i].name, lib->entries[i].name_len);
}

static uint64_t blob_hash(const psdb_pipeline_library *lib, size_t i)
{
    return key_hash(lib->blobs[i].key);
}

static void index_put(plib_index *ix, uint64_t h, size_t i)
{
    size_t m = ix->cap - 1, at = (size_t)h & m;
    while (ix->slots[at])
        at = (at + 1) & m;
    ix->slots[at] = (uint32_t)(i + 1);
}

/* Makes room for `count` items, rehashing the `count - 1` present ones when it grows. */
static psdb_hr index_reserve(plib_index *ix, size_t count, const psdb_pipeline_library *lib,
                             uint64_t (*hash)(const psdb_pipeline_library *, size_t))
{
    psdb_hr hr = PSDB_S_OK;
    if (count * 2 <= ix->cap)
        goto cleanup;
    size_t cap = ix->cap ? ix->cap : 32;
    while (cap < count * 2)
        cap *= 2;
    uint32_t *slots = calloc(cap, sizeof(*slots));
    if (!slots) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    plib_index grown = {slots, cap};
    for (size_t i = 0; i < ix->cap; i++)
        if (ix->slots[i])
            index_put(&grown, hash(lib, ix->slots[i] - 1u), ix->slots[i] - 1u);
    free(ix->slots);
    *ix = grown;
cleanup:
    return hr;
}

int psdb__plib_find_entry(const psdb_pipeline_library *lib, const char *name, size_t len,
                          size_t *at)
{
    if (!lib->names.cap)
        return 0;
    size_t m = lib->names.cap - 1;
    for (size_t s = (size_t)name_hash(name, len) & m; lib->names.slots[s]; s = (s + 1) & m) {
        const plib_entry *e = &lib->entries[lib->names.slots[s] - 1u];
        if (e->name_len == len && memcmp(e->name, name, len) == 0) {
            *at = lib->names.slots[s] - 1u;
            return 1;
        }
    }
    return 0;
}

int psdb__plib_find_blob(const psdb_pipeline_library *lib, const uint8_t key[PSDB__KEY_SIZE],
                         uint32_t *at)
{
    if (!lib->keys.cap)
        return 0;
    size_t m = lib->keys.cap - 1;
    for (size_t s = (size_t)key_hash(key) & m; lib->keys.slots[s]; s = (s + 1) & m) {
        if (memcmp(lib->blobs[lib->keys.slots[s] - 1u].key, key, PSDB__KEY_SIZE) == 0) {
            *at = lib->keys.slots[s] - 1u;
            return 1;
        }
    }
    return 0;
}

/* Appends the entry / blob just written at the end of its array to its index. */
psdb_hr psdb__plib_index_entry(psdb_pipeline_library *lib)
{
    psdb_hr hr = index_reserve(&lib->names, lib->num_entries, lib, entry_hash);
    if (PSDB_SUCCEEDED(hr))
        index_put(&lib->names, entry_hash(lib, lib->num_entries - 1), lib->num_entries - 1);
    return hr;
}

psdb_hr psdb__plib_index_blob(psdb_pipeline_library *lib)
{
    psdb_hr hr = index_reserve(&lib->keys, lib->num_blobs, lib, blob_hash);
    if (PSDB_SUCCEEDED(hr))
        index_put(&lib->keys, blob_hash(lib, lib->num_blobs - 1), lib->num_blobs - 1);
    return hr;
}

static psdb_hr grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return PSDB_S_OK;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return PSDB_E_OUTOFMEMORY;
    *arr = p;
    *cap = n;
    return PSDB_S_OK;
}

void psdb_pipeline_library_release(psdb_pipeline_library *lib)
{
    if (!lib)
        return;
    for (size_t i = 0; i < lib->num_entries; i++) {
        free(lib->entries[i].owned_name);
        free(lib->entries[i].units);
        psdb_pipeline_release(lib->entries[i].pso);
    }
    for (size_t i = 0; i < lib->num_blobs; i++)
        free(lib->blobs[i].owned);
    free(lib->entries);
    free(lib->blobs);
    free(lib->names.slots);
    free(lib->keys.slots);
    pthread_mutex_destroy(&lib->lock);
    psdb__device_unref(lib->dev);
    free(lib);
}

void psdb__pipeline_library_counts(psdb_pipeline_library *lib, size_t *entries, size_t *blobs)
{
    pthread_mutex_lock(&lib->lock);
    *entries = lib->num_entries;
    *blobs = lib->num_blobs;
    pthread_mutex_unlock(&lib->lock);
}

/* ---- store (L5, L8) -------------------------------------------------------------------------- */

psdb_hr psdb_pipeline_library_store_pipeline(psdb_pipeline_library *lib, const char *name,
                                             psdb_pipeline *p)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__plan plan = {0};
    plib_blob *fresh = NULL;
    uint32_t num_fresh = 0;
    uint32_t *units = NULL;
    char *owned_name = NULL;
    size_t at = 0;
    int locked = 0;
    if (!lib || !name || !*name || !p || p->dev != lib->dev) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_pipeline_library_store_pipeline: NULL library, name or "
                               "pipeline, an empty name, or a pipeline of another device");
        goto cleanup;
    }
    size_t len = strlen(name);
    pthread_mutex_lock(&lib->lock);
    int exists = psdb__plib_find_entry(lib, name, len, &at);
    pthread_mutex_unlock(&lib->lock);
    if (exists) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_pipeline_library_store_pipeline: a pipeline is already stored "
                               "under this name (L5)"); /* L5: no overwrite */
        goto cleanup;
    }
    hr = psdb__pipeline_plan(p, &plan);
    if (PSDB_FAILED(hr))
        goto cleanup;
    fresh = calloc(plan.num_units, sizeof(*fresh));
    units = calloc(plan.num_units, sizeof(*units));
    owned_name = psdb__strdup(name);
    if (!fresh || !units || !owned_name) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint32_t i = 0; i < plan.num_units; i++) {
        uint32_t idx = 0;
        pthread_mutex_lock(&lib->lock);
        int have = psdb__plib_find_blob(lib, plan.units[i].key, &idx);
        pthread_mutex_unlock(&lib->lock);
        for (uint32_t j = 0; !have && j < num_fresh; j++)
            have = memcmp(fresh[j].key, plan.units[i].key, PSDB__KEY_SIZE) == 0;
        if (have)
            continue; /* L8: a unit already held is shared */
        psdb__buf code = {0}, meta = {0};
        hr = psdb__device_driver(lib->dev)->compile_unit(
            &plan.units[i], psdb__device_target(lib->dev), PSDB_COMPILE_COST_FREE, &code, &meta);
        plib_blob *x = &fresh[num_fresh];
        if (PSDB_SUCCEEDED(hr)) {
            x->owned = malloc(code.len + meta.len + 1);
            if (!x->owned)
                hr = PSDB_E_OUTOFMEMORY;
        }
        if (PSDB_SUCCEEDED(hr)) {
            memcpy(x->key, plan.units[i].key, PSDB__KEY_SIZE);
            memcpy(x->owned, code.data, code.len);
            memcpy(x->owned + code.len, meta.data, meta.len);
            x->code = x->owned;
            x->code_size = code.len;
            x->meta = x->owned + code.len;
            x->meta_size = meta.len;
            num_fresh++;
        }
        psdb__buf_free(&code);
        psdb__buf_free(&meta);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    pthread_mutex_lock(&lib->lock);
    locked = 1;
    if (psdb__plib_find_entry(lib, name, len, &at)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_pipeline_library_store_pipeline: a pipeline is already stored "
                               "under this name (L5)"); /* stored meanwhile by another thread */
        goto cleanup;
    }
    hr = grow((void **)&lib->blobs, &lib->cap_blobs, lib->num_blobs + num_fresh,
              sizeof(*lib->blobs));
    if (PSDB_SUCCEEDED(hr))
        hr = grow((void **)&lib->entries, &lib->cap_entries, lib->num_entries + 1,
                  sizeof(*lib->entries));
    if (PSDB_FAILED(hr))
        goto cleanup;
    for (uint32_t j = 0; j < num_fresh; j++) {
        uint32_t idx = 0;
        if (psdb__plib_find_blob(lib, fresh[j].key, &idx))
            continue; /* added meanwhile by another store: keep one */
        lib->blobs[lib->num_blobs++] = fresh[j];
        hr = psdb__plib_index_blob(lib);
        if (PSDB_FAILED(hr)) {
            lib->num_blobs--; /* not indexed: leave it out (fresh still owns it) */
            goto cleanup;
        }
        fresh[j].owned = NULL;
    }
    for (uint32_t i = 0; i < plan.num_units; i++) {
        int found = psdb__plib_find_blob(lib, plan.units[i].key, &units[i]);
        assert(found);
        (void)found;
    }
    plib_entry *e = &lib->entries[lib->num_entries++];
    memset(e, 0, sizeof(*e));
    e->owned_name = owned_name;
    e->name = owned_name;
    e->name_len = len;
    owned_name = NULL;
    e->kind = p->is_compute ? PSDB__PLIB_KIND_COMPUTE : PSDB__PLIB_KIND_GRAPHICS;
    memcpy(e->group_key, plan.group_key, PSDB__KEY_SIZE);
    e->units = units;
    e->num_units = plan.num_units;
    hr = psdb__plib_index_entry(lib);
    if (PSDB_FAILED(hr)) {
        lib->num_entries--; /* not indexed: undo (the owned name and units are freed below) */
        owned_name = e->owned_name;
        goto cleanup;
    }
    units = NULL;
    psdb_pipeline_addref(p); /* the library keeps the stored PSO (a load returns it, G2) */
    e->pso = p;
cleanup:
    if (locked)
        pthread_mutex_unlock(&lib->lock);
    for (uint32_t j = 0; j < num_fresh; j++)
        free(fresh[j].owned);
    free(fresh);
    free(units);
    free(owned_name);
    psdb__plan_free(&plan);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* ---- load (L7, G2) --------------------------------------------------------------------------- */

static int library_has_unit(void *ctx, const uint8_t key[32])
{
    psdb_pipeline_library *lib = ctx;
    uint32_t idx = 0;
    pthread_mutex_lock(&lib->lock);
    int have = psdb__plib_find_blob(lib, key, &idx);
    pthread_mutex_unlock(&lib->lock);
    return have;
}

/* Finds the entry, checks the description against it, and returns its PSO or creates it. */
static psdb_hr load(psdb_pipeline_library *lib, const char *name, uint32_t kind,
                    const psdb_compute_pipeline_desc *cd, const psdb_graphics_pipeline_desc *gd,
                    psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan plan = {0};
    psdb__selection sel = {0};
    psdb_pipeline *p = NULL;
    size_t at = 0;
    psdb_device *dev = lib->dev;
    hr = kind == PSDB__PLIB_KIND_COMPUTE ? psdb__device_driver(dev)->plan_compute(cd, &plan)
                                         : psdb__device_driver(dev)->plan_graphics(gd, &plan);
    if (PSDB_FAILED(hr))
        goto cleanup;
    pthread_mutex_lock(&lib->lock);
    if (!psdb__plib_find_entry(lib, name, strlen(name), &at) || lib->entries[at].kind != kind ||
        memcmp(lib->entries[at].group_key, plan.group_key, PSDB__KEY_SIZE) != 0) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "pipeline library load: no pipeline stored under this name, or one stored with another "
            "description (L7)"); /* L7: unknown name or mismatching description */
    } else if (lib->entries[at].pso) {
        p = lib->entries[at].pso; /* G2: the existing PSO, with its original selection */
        psdb_pipeline_addref(p);
    }
    pthread_mutex_unlock(&lib->lock);
    if (PSDB_FAILED(hr) || p)
        goto cleanup;
    /* G2: the load that creates selects like any creation (F), from the load description. */
    hr = psdb__select(dev, kind == PSDB__PLIB_KIND_COMPUTE ? cd->psdb : gd->psdb, &sel);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__pipeline_new(dev, &p);
    if (PSDB_FAILED(hr))
        goto cleanup;
    p->is_compute = kind == PSDB__PLIB_KIND_COMPUTE;
    memcpy(p->group_key, plan.group_key, PSDB__KEY_SIZE);
    hr = psdb__run_creation_ex(dev, &sel, &plan, 0, library_has_unit, lib, &p->info);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__associate(&sel, &p->assoc);
    p->desc = plan.desc; /* the plan's encoding of the load description */
    memset(&plan.desc, 0, sizeof(plan.desc));
    pthread_mutex_lock(&lib->lock);
    /* The entry table may have grown meanwhile: find the entry again. */
    int found = psdb__plib_find_entry(lib, name, strlen(name), &at);
    assert(found);
    (void)found;
    if (lib->entries[at].pso) {
        /* Another load of the same name won the race the seed leaves to the caller: keep one. */
        psdb_pipeline_release(p);
        p = lib->entries[at].pso;
    } else {
        lib->entries[at].pso = p;
    }
    psdb_pipeline_addref(p);
    pthread_mutex_unlock(&lib->lock);
cleanup:
    if (PSDB_SUCCEEDED(hr))
        *out = p;
    else
        psdb_pipeline_release(p);
    psdb__selection_release(&sel);
    psdb__plan_free(&plan);
    return hr;
}

psdb_hr psdb_pipeline_library_load_compute_pipeline(psdb_pipeline_library *lib, const char *name,
                                                    const psdb_compute_pipeline_desc *desc,
                                                    psdb_pipeline **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (out)
        *out = NULL;
    if (!lib || !name || !desc || !out) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_pipeline_library_load_compute_pipeline: NULL library, name, desc or out");
        goto cleanup;
    }
    hr = load(lib, name, PSDB__PLIB_KIND_COMPUTE, desc, NULL, out);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_pipeline_library_load_graphics_pipeline(psdb_pipeline_library *lib, const char *name,
                                                     const psdb_graphics_pipeline_desc *desc,
                                                     psdb_pipeline **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (out)
        *out = NULL;
    if (!lib || !name || !desc || !out) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_pipeline_library_load_graphics_pipeline: NULL library, name, desc or out");
        goto cleanup;
    }
    hr = load(lib, name, PSDB__PLIB_KIND_GRAPHICS, NULL, desc, out);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_pipeline_library_load_pipeline(psdb_pipeline_library *lib, const char *name,
                                            const psdb_pipeline_stream_desc *desc,
                                            psdb_pipeline **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_compute_pipeline_desc cd;
    psdb_graphics_pipeline_desc gd;
    int is_compute = 0;
    if (out)
        *out = NULL;
    if (!lib || !name || !desc || !out || (desc->num_subobjects && !desc->subobjects)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_pipeline_library_load_pipeline: NULL library, name, desc or "
                               "out, or subobjects NULL with a count");
        goto cleanup;
    }
    memset(&cd, 0, sizeof(cd));
    memset(&gd, 0, sizeof(gd));
    hr = psdb__stream_to_desc(desc, &is_compute, &cd, &gd);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = is_compute ? load(lib, name, PSDB__PLIB_KIND_COMPUTE, &cd, NULL, out)
                    : load(lib, name, PSDB__PLIB_KIND_GRAPHICS, NULL, &gd, out);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}
