/* sodb_compile.c - psdb_sodb_compile (psdb/sodb.h): an SODB compiled into a PSDB with the reference
 * compiler, each distinct unit once, one group per entry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/compiler.h"
#include "format/sodb.h"
#include "common/error.h"

/* ---- Compiling a whole SODB ------------------------------------------------------------------ */

/* An open-addressing set of 32-byte keys (the units already compiled). */
typedef struct key_set {
    uint8_t (*slots)[PSDB__KEY_SIZE];
    uint8_t *used;
    size_t cap, count;
} key_set;

static size_t key_slot(const key_set *s, const uint8_t *key)
{
    size_t i = (size_t)psdb__le64(key) & (s->cap - 1);
    while (s->used[i] && memcmp(s->slots[i], key, PSDB__KEY_SIZE) != 0)
        i = (i + 1) & (s->cap - 1);
    return i;
}

/* 1 inserted, 0 already present, -1 out of memory. */
static int key_set_add(key_set *s, const uint8_t *key)
{
    if ((s->count + 1) * 2 > s->cap) {
        key_set n = {0};
        n.cap = s->cap ? s->cap * 2 : 1024;
        n.slots = malloc(n.cap * PSDB__KEY_SIZE);
        n.used = calloc(n.cap, 1);
        if (!n.slots || !n.used) {
            free(n.slots);
            free(n.used);
            return -1;
        }
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->used[i])
                continue;
            size_t j = key_slot(&n, s->slots[i]);
            memcpy(n.slots[j], s->slots[i], PSDB__KEY_SIZE);
            n.used[j] = 1;
        }
        n.count = s->count;
        free(s->slots);
        free(s->used);
        *s = n;
    }
    size_t i = key_slot(s, key);
    if (s->used[i])
        return 0;
    memcpy(s->slots[i], key, PSDB__KEY_SIZE);
    s->used[i] = 1;
    s->count++;
    return 1;
}

typedef struct compile_ctx {
    psdb_writer *w;
    psdb_file *base; /* the previous version's PSDB serving this target, or NULL */
    const psdb_sodb_compile_desc *d;
    key_set units, groups;
    psdb_sodb_compile_stats st;
    uint64_t index, total;
    psdb_hr hr;
} compile_ctx;

/* The progress callback after every 1000 entries and after the last: 0 go on, else stop. */
static int report_progress(compile_ctx *c, int last)
{
    if (!c->d->progress || (!last && c->index % 1000 != 0))
        return 0;
    return c->d->progress(c->index, c->total, c->d->progress_ctx);
}

/* One value of the base appended to b (empty): 1 when present and whole (its blob's digest is
 * checked by the lookup), else 0. */
static int base_value(psdb_file *base, const uint8_t *key, uint32_t type, psdb__buf *b)
{
    size_t n = 0;
    uint8_t *v = NULL;
    int ok = psdb_file_find_value(base, key, PSDB__KEY_SIZE, type, NULL, &n) == PSDB_S_OK &&
             (v = malloc(n ? n : 1)) != NULL &&
             psdb_file_find_value(base, key, PSDB__KEY_SIZE, type, v, &n) == PSDB_S_OK;
    if (ok) {
        psdb__buf_append(b, v, n);
        ok = psdb__buf_status(b) == PSDB_S_OK;
    }
    free(v);
    return ok;
}

/* Both values of a unit from the base: 1, or 0 with both buffers freed (the unit is compiled).
 * A unit the base lacks is no error: what the lookup recorded is cleared. */
static int base_values(psdb_file *base, const uint8_t *key, psdb__buf *oc, psdb__buf *md)
{
    int ok = base_value(base, key, PSDB_VALUE_OBJECT_CODE, oc) &&
             base_value(base, key, PSDB_VALUE_METADATA, md);
    if (!ok) {
        psdb__buf_free(oc);
        psdb__buf_free(md);
        psdb__error_clear();
    }
    return ok;
}

/* The base when it serves exactly this identity and target; else NULL (every unit compiled). */
static psdb_file *open_base(const char *path, const psdb_app_identity *id, const psdb_target *t)
{
    psdb_file *f = NULL;
    psdb_file_info info;
    if (psdb_file_open(path, NULL, &f) != PSDB_S_OK || psdb_file_get_info(f, &info) != PSDB_S_OK ||
        strcmp(info.target.family, t->family) != 0 || info.target.abi_version != t->abi_version ||
        info.target.compiler_version != t->compiler_version ||
        info.target.profile_version != t->profile_version ||
        strcmp(info.identity.desc.name ? info.identity.desc.name : "", id->desc.name ? id->desc.name : "") != 0 ||
        strcmp(info.identity.desc.exe_filename ? info.identity.desc.exe_filename : "",
               id->desc.exe_filename ? id->desc.exe_filename : "") != 0) {
        psdb_file_release(f);
        f = NULL;
        psdb__error_clear();
    }
    return f;
}

static int compile_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                         size_t desc_size, void *arg)
{
    compile_ctx *c = arg;
    psdb__plan plan = {0};
    psdb_value_ref *refs = NULL;
    psdb__buf oc = {0}, md = {0};
    const char *what = "planning";
    char hex[17];
    psdb_hr hr = PSDB_S_OK;

    c->index++;
    psdb__hex(key, 8, hex);
    int fresh = key_set_add(&c->groups, key);
    if (fresh < 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (fresh == 0) {
        c->st.skipped++;
        goto cleanup;
    }
    /* Vulkan captures hold SPIR-V for a real driver; the reference compiler models D3D12 only. */
    if (kind == PSDB_SODB_VK_COMPUTE || kind == PSDB_SODB_VK_GRAPHICS) {
        what = "compiling (a Vulkan pipeline: the reference compiler has no Vulkan backend; use "
               "--backend vulkan)";
        hr = PSDB_E_INVALIDARG;
        goto cleanup;
    }
    hr = psdb__plan_encoded(kind, desc, desc_size, &plan);
    if (PSDB_SUCCEEDED(hr) && memcmp(plan.group_key, key, PSDB__KEY_SIZE) != 0)
        hr = PSDB_E_CACHE_CORRUPT;
    if (PSDB_FAILED(hr))
        goto cleanup;
    refs = calloc(plan.num_units, sizeof(*refs));
    if (!refs) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    for (uint32_t i = 0; i < plan.num_units; i++) {
        const psdb__unit *u = &plan.units[i];
        refs[i].key = u->key;
        refs[i].key_size = PSDB__KEY_SIZE;
        c->st.units++;
        int add = key_set_add(&c->units, u->key);
        if (add < 0) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        if (add == 0)
            continue;
        int reused = c->base && base_values(c->base, u->key, &oc, &md);
        what = "compiling";
        if (!reused)
            hr = psdb__compile_unit(u, &c->d->target, c->d->compile_ns_per_kib, &oc, &md);
        if (PSDB_FAILED(hr))
            goto cleanup;
        what = "writing";
        hr = psdb_writer_put_value(c->w, u->key, PSDB__KEY_SIZE, PSDB_VALUE_OBJECT_CODE, oc.data,
                                   oc.len);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_writer_put_value(c->w, u->key, PSDB__KEY_SIZE, PSDB_VALUE_METADATA, md.data,
                                       md.len);
        psdb__buf_free(&oc);
        psdb__buf_free(&md);
        if (PSDB_FAILED(hr))
            goto cleanup;
        if (reused) {
            c->st.units_reused++;
        } else {
            c->st.units_compiled++;
            c->st.code_bytes += u->code_size;
        }
    }
    what = "writing";
    hr = psdb_writer_put_group(c->w, key, PSDB__KEY_SIZE, version, plan.num_units, refs);
    if (PSDB_FAILED(hr))
        goto cleanup;
    c->st.pipelines++;
    if (kind == PSDB_SODB_COMPUTE)
        c->st.compute++;
    else if (kind == PSDB_SODB_GRAPHICS)
        c->st.graphics++;
    else
        c->st.state_objects++;
cleanup:
    if (PSDB_SUCCEEDED(hr) && report_progress(c, 0) != 0)
        hr = psdb__error_set(PSDB_E_CANCELLED, "entry %llu: stopped by the progress callback",
                             (unsigned long long)c->index);
    else if (PSDB_FAILED(hr))
        psdb__error_set(hr, "entry %llu (key %s...): %s failed: %s", (unsigned long long)c->index,
                        hex, what, psdb_hr_str(hr));
    c->hr = hr;
    psdb__buf_free(&oc);
    psdb__buf_free(&md);
    free(refs);
    psdb__plan_free(&plan);
    return PSDB_FAILED(hr);
}

static double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

psdb_hr psdb_sodb_compile(const char *sodb_path, const psdb_sodb_compile_desc *desc,
                          const char *psdb_path, psdb_sodb_compile_stats *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb *s = NULL;
    psdb_app_identity id;
    compile_ctx c = {0};
    double t0 = mono_seconds();

    if (!sodb_path || !desc || !psdb_path) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_sodb_compile: NULL path or desc");
        goto cleanup;
    }
    hr = psdb_sodb_open(sodb_path, &s);
    if (PSDB_FAILED(hr)) {
        psdb__error_set(hr, "cannot open SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_sodb_get_identity(s, &id);
    if (desc->progress) {
        hr = psdb__sodb_count(s, &c.total);
        if (PSDB_FAILED(hr)) {
            psdb__error_set(hr, "reading SODB %s: counting its entries: %s", sodb_path,
                            psdb_hr_str(hr));
            goto cleanup;
        }
    }
    hr = psdb_writer_create(psdb_path, &id, &desc->target, &c.w);
    if (PSDB_FAILED(hr)) {
        psdb__error_set(hr, "cannot create %s: %s", psdb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    c.d = desc;
    if (desc->base_path) {
        c.base = open_base(desc->base_path, &id, &desc->target);
        c.st.base_used = c.base != NULL;
    }
    hr = psdb_sodb_foreach(s, compile_entry, &c);
    if (PSDB_FAILED(c.hr)) {
        hr = c.hr;
        goto cleanup;
    }
    if (PSDB_FAILED(hr)) {
        psdb__error_set(hr, "reading SODB %s after entry %llu: %s", sodb_path,
                        (unsigned long long)c.index, psdb_hr_str(hr));
        goto cleanup;
    }
    /* The last report, unless the last entry made it already (an empty SODB reports 0 of 0). */
    if ((c.index == 0 || c.index % 1000 != 0) && report_progress(&c, 1) != 0) {
        hr = psdb__error_set(PSDB_E_CANCELLED, "entry %llu: stopped by the progress callback",
                             (unsigned long long)c.index);
        goto cleanup;
    }
    hr = psdb_writer_finish(c.w);
    if (PSDB_FAILED(hr)) {
        psdb__error_set(hr, "writing %s: %s", psdb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    c.st.seconds = mono_seconds() - t0;
    if (out)
        *out = c.st;
cleanup:
    psdb_writer_release(c.w);
    psdb_file_release(c.base);
    psdb_sodb_release(s);
    free(c.units.slots);
    free(c.units.used);
    free(c.groups.slots);
    free(c.groups.used);
    return psdb__error_ret(hr, err_mark, __func__);
}
