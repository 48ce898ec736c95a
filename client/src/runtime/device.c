/* device.c - the device: creation and features (MODEL A), the implicit default (B7), the
 * device-wide default and selection (E, F, H), creation lookups and the local driver cache (F5-F7,
 * J), ShaderCacheControl (J2) and statistics (K1). */
#include "runtime/device_int.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"
#include "common/error.h"

/* ---- references ------------------------------------------------------------------------------ */

void psdb__device_ref(psdb_device *dev)
{
    atomic_fetch_add(&dev->refs, 1);
}

static void free_identity(psdb_app_identity *id)
{
    free((char *)id->desc.exe_filename);
    free((char *)id->desc.name);
    free((char *)id->desc.engine_name);
}

void psdb__local_clear(psdb__local_cache *c)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < PSDB__LOCAL_BUCKETS; i++) {
        psdb__local_entry *e = c->buckets[i];
        while (e) {
            psdb__local_entry *next = e->next;
            psdb__buf_free(&e->object_code);
            psdb__buf_free(&e->metadata);
            free(e);
            e = next;
        }
        c->buckets[i] = NULL;
    }
    c->count = 0;
    pthread_mutex_unlock(&c->lock);
}

void psdb__device_unref(psdb_device *dev)
{
    if (!dev || atomic_fetch_sub(&dev->refs, 1) != 1)
        return;
    /* Last reference: no session, object or operation refers to the device any more. */
    psdb_session_release(dev->implicit);
    psdb_sodb_writer_release(dev->capture);
    psdb__device_ext *ext = atomic_load(&dev->serialized);
    if (ext)
        ext->free(ext);
    psdb__local_clear(&dev->local);
    pthread_mutex_destroy(&dev->local.lock);
    free(atomic_load(&dev->lookup_rec));
    pthread_mutex_destroy(&dev->set_lock);
    pthread_mutex_destroy(&dev->msg_lock);
    pthread_mutex_destroy(&dev->caches_lock);
    free_identity(&dev->identity);
    free(dev->exe_path);
    free(dev->registry_dir);
    free(dev->cache_dir);
    free(dev);
}

/* ---- the read-section protocol of the default and the callback (DESIGN in device.h) ---------- */

/* Called by setters (under set_lock) after swapping a pointer: once `readers` has been zero, no
 * read section still uses the previous record. Read sections are a few instructions long, so
 * this rarely loops; it yields in case a reader was preempted inside one. */
static void wait_for_readers(psdb_device *dev)
{
    while (atomic_load(&dev->readers) != 0)
        sched_yield();
}

/* ---- creation -------------------------------------------------------------------------------- */

#define KNOWN_ADAPTER_FLAGS (PSDB_ADAPTER_FLAG_NO_ASD | PSDB_ADAPTER_FLAG_NO_LIBRARY)
#define KNOWN_DEVICE_FLAGS (PSDB_DEVICE_FLAG_TOOLS)

static int valid_adapter(const psdb_adapter_desc *a)
{
    if (a->flags & ~KNOWN_ADAPTER_FLAGS)
        return 0;
    if (a->flags & PSDB_ADAPTER_FLAG_NO_ASD)
        return !a->family || strlen(a->family) < PSDB_ADAPTER_FAMILY_MAX;
    return a->family && *a->family && strlen(a->family) < PSDB_ADAPTER_FAMILY_MAX &&
           a->abi_min != 0 && a->abi_max != UINT64_MAX && a->abi_min <= a->abi_max;
}

/* MODEL A2: name and version required; engine version 0 when there is no engine name. */
static int valid_identity(const psdb_app_identity *id)
{
    const psdb_app_desc *d = &id->desc;
    return d->name && *d->name && d->version != 0 && (d->engine_name || d->engine_version == 0);
}

static psdb_hr copy_identity(const psdb_app_identity *in, psdb_app_identity *out)
{
    psdb_hr hr = PSDB_S_OK;
    *out = *in;
    out->desc.exe_filename = psdb__strdup(in->desc.exe_filename);
    out->desc.name = psdb__strdup(in->desc.name);
    out->desc.engine_name = psdb__strdup(in->desc.engine_name);
    if ((in->desc.exe_filename && !out->desc.exe_filename) || !out->desc.name ||
        (in->desc.engine_name && !out->desc.engine_name))
        hr = PSDB_E_OUTOFMEMORY;
    return hr;
}

/* B7: the "default" component of the application registered at the device's exe path, its PSDB
 * for the device's family, when it exists and is compatible (A3). Any failure leaves it absent. */
static void resolve_implicit_default(psdb_device *dev)
{
    char *path = NULL;
    if (!dev->asd || !dev->exe_path)
        goto cleanup;
    if (PSDB_FAILED(psdb__registry_find_psdb(dev->registry_dir, dev->exe_path,
                                             PSDB_DEFAULT_COMPONENT, dev->family_buf, &path)))
        goto cleanup;
    if (PSDB_FAILED(psdb__session_open_file(dev, path, 1, &dev->implicit)))
        dev->implicit = NULL;
cleanup:
    free(path);
}

psdb_hr psdb_device_create(const psdb_device_desc *desc, psdb_device **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_device *dev = NULL;
    if (out)
        *out = NULL;
    if (!desc || !out || !valid_adapter(&desc->adapter) || (desc->flags & ~KNOWN_DEVICE_FLAGS) ||
        (desc->identity && !valid_identity(desc->identity)) ||
        (desc->exe_path && !*desc->exe_path) ||
        (desc->capture_sodb_path && (!*desc->capture_sodb_path || !desc->identity))) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_create: NULL desc or out, an invalid adapter, identity "
                               "or flags, an empty exe path, or a capture path without identity");
        goto cleanup;
    }
    dev = calloc(1, sizeof(*dev));
    if (!dev) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    atomic_init(&dev->refs, 1);
    atomic_init(&dev->next_operation, 1);
    pthread_mutex_init(&dev->set_lock, NULL);
    pthread_mutex_init(&dev->msg_lock, NULL);
    pthread_mutex_init(&dev->caches_lock, NULL);
    pthread_mutex_init(&dev->local.lock, NULL);
    dev->adapter = desc->adapter;
    if (desc->adapter.family)
        memcpy(dev->family_buf, desc->adapter.family, strlen(desc->adapter.family) + 1);
    dev->adapter.family = dev->family_buf;
    dev->flags = desc->flags;
    dev->compile_ns_per_kib = desc->compile_ns_per_kib;
    dev->driver = &psdb__reference_driver;
    dev->asd = !(desc->adapter.flags & PSDB_ADAPTER_FLAG_NO_ASD);
    /* The driver compiles locally at its highest ABI (research notes, section 3). */
    dev->target.family = dev->family_buf;
    dev->target.abi_version = desc->adapter.abi_max;
    dev->target.compiler_version = desc->adapter.compiler_version;
    dev->target.profile_version = desc->adapter.app_profile_version;
    if (desc->identity) {
        dev->has_identity = 1;
        hr = copy_identity(desc->identity, &dev->identity);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    dev->explicit_supported = dev->asd && dev->has_identity;
    dev->exe_path = psdb__strdup(desc->exe_path);
    dev->registry_dir = psdb__strdup(desc->registry_dir);
    dev->cache_dir = psdb__strdup(desc->cache_dir);
    if ((desc->exe_path && !dev->exe_path) || (desc->registry_dir && !dev->registry_dir) ||
        (desc->cache_dir && !dev->cache_dir)) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    if (desc->capture_sodb_path) {
        hr = psdb_sodb_writer_open(desc->capture_sodb_path, desc->identity, &dev->capture);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    resolve_implicit_default(dev);
    *out = dev;
    dev = NULL;
cleanup:
    psdb__device_unref(dev);
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_device_release(psdb_device *dev)
{
    if (!dev)
        return;
    /* Destroying the device releases its default (I1); objects and in-flight operations keep
     * their own references (I6). */
    pthread_mutex_lock(&dev->set_lock);
    psdb__default *old = atomic_exchange(&dev->default_rec, NULL);
    wait_for_readers(dev);
    pthread_mutex_unlock(&dev->set_lock);
    if (old)
        psdb_session_release(old->session);
    free(old);
    psdb__device_unref(dev);
}

/* ---- features (A4) --------------------------------------------------------------------------- */

psdb_hr psdb_device_check_feature_support(psdb_device *dev, psdb_feature f, void *data, size_t size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!dev || !data) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_check_feature_support: NULL device or data");
        goto cleanup;
    }
    switch (f) {
    case PSDB_FEATURE_SHADER_CACHE: {
        psdb_feature_data_shader_cache *d = data;
        if (size != sizeof(*d)) {
            hr = psdb__error_const(
                PSDB_E_INVALIDARG,
                "psdb_device_check_feature_support: data size does not match the feature's struct");
            goto cleanup;
        }
        d->support_flags =
            PSDB_SHADER_CACHE_SUPPORT_SINGLE_PSO | PSDB_SHADER_CACHE_SUPPORT_AUTOMATIC_INPROC_CACHE;
        if (!(dev->adapter.flags & PSDB_ADAPTER_FLAG_NO_LIBRARY))
            d->support_flags |= PSDB_SHADER_CACHE_SUPPORT_LIBRARY;
        break;
    }
    case PSDB_FEATURE_SHADER_CACHE_ABI_SUPPORT: {
        psdb_feature_data_shader_cache_abi_support *d = data;
        if (size != sizeof(*d)) {
            hr = psdb__error_const(
                PSDB_E_INVALIDARG,
                "psdb_device_check_feature_support: data size does not match the feature's struct");
            goto cleanup;
        }
        if (!dev->asd) {
            hr =
                psdb__error_const(PSDB_E_FAIL, "psdb_device_check_feature_support: the adapter has "
                                               "no shader delivery support (NO_ASD)");
            goto cleanup;
        }
        memset(d, 0, sizeof(*d));
        memcpy(d->adapter_family, dev->family_buf, strlen(dev->family_buf) + 1);
        d->minimum_abi_supported_version = dev->adapter.abi_min;
        d->maximum_abi_supported_version = dev->adapter.abi_max;
        d->compiler_version = dev->adapter.compiler_version;
        d->application_profile_version = dev->adapter.app_profile_version;
        break;
    }
    case PSDB_FEATURE_EXPLICIT_PSDBS: {
        psdb_feature_data_explicit_psdbs *d = data;
        if (size != sizeof(*d)) {
            hr = psdb__error_const(
                PSDB_E_INVALIDARG,
                "psdb_device_check_feature_support: data size does not match the feature's struct");
            goto cleanup;
        }
        d->supported = dev->explicit_supported;
        break;
    }
    default:
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_check_feature_support: unknown feature");
        break;
    }
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

/* ---- the device-wide default (E) and selection (F) ------------------------------------------- */

int psdb__session_is_explicit_psdb(psdb_device *dev, const psdb_session *s)
{
    return dev->explicit_supported && s->kind == PSDB__SESSION_PSDB && s->dev == dev &&
           !s->owned_by_device;
}

psdb_hr psdb_device_set_default_session(psdb_device *dev, psdb_session *session, uint32_t flags)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__default *rec = NULL, *old = NULL;
    if (!dev || (flags & ~PSDB_SESSION_FLAG_CREATE_ONLY) || (!session && flags != 0) ||
        (session && !psdb__session_is_explicit_psdb(dev, session))) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_device_set_default_session: NULL device, unknown flags, flags without a "
            "session, or a session that is not an explicit PSDB session of this device (E3, "
            "E4, E5)"); /* E3, E4, E5; nothing changed (E6) */
        goto cleanup;
    }
    if (session) {
        rec = malloc(sizeof(*rec));
        if (!rec) {
            hr = PSDB_E_OUTOFMEMORY; /* E6: nothing changed */
            goto cleanup;
        }
        rec->session = session;
        rec->flags = flags;
        psdb_session_addref(session); /* E7 */
    }
    pthread_mutex_lock(&dev->set_lock);
    old = atomic_exchange(&dev->default_rec, rec);
    wait_for_readers(dev);
    pthread_mutex_unlock(&dev->set_lock);
    /* Outside the lock: this may destroy the session (its callbacks run here) while creations
     * and objects that selected it keep their own references (H5, I6). */
    if (old)
        psdb_session_release(old->session);
    free(old);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb__select(psdb_device *dev, const psdb_session_subobject *sub, psdb__selection *out)
{
    psdb_hr hr = PSDB_S_OK;
    memset(out, 0, sizeof(*out));
    if (sub) {
        if ((sub->flags & ~PSDB_SESSION_FLAG_CREATE_ONLY) || (!sub->session && sub->flags != 0) ||
            (sub->session && !psdb__session_is_explicit_psdb(dev, sub->session))) {
            hr = psdb__error_const(PSDB_E_INVALIDARG,
                                   "pipeline creation: a PSDB subobject's session is not an "
                                   "explicit PSDB session of this device (F4)"); /* F4 */
            goto cleanup;
        }
    }
    atomic_fetch_add(&dev->readers, 1); /* read section: before loading any pointer */
    psdb__callback *cb = atomic_load(&dev->lookup_rec);
    psdb__default *def = atomic_load(&dev->default_rec);
    if (cb) {
        out->lookup_fn = cb->fn;
        out->lookup_ctx = cb->ctx;
    }
    if (sub && sub->session) { /* F1 */
        out->session = sub->session;
        out->kind = PSDB_SELECTION_PER_OBJECT;
        out->flags = sub->flags;
    } else if (def) { /* F2: session and flags from one record (H2) */
        out->session = def->session;
        out->kind = PSDB_SELECTION_DEVICE_DEFAULT;
        out->flags = def->flags;
    } else if (dev->implicit) { /* F3 */
        out->session = dev->implicit;
        out->kind = PSDB_SELECTION_IMPLICIT_DEFAULT;
        out->flags = PSDB_SESSION_FLAG_NONE;
    } else {
        out->kind = PSDB_SELECTION_NONE;
    }
    if (out->session)
        psdb_session_addref(out->session); /* I2 */
    atomic_fetch_sub(&dev->readers, 1);
cleanup:
    return hr;
}

void psdb__selection_release(psdb__selection *sel)
{
    psdb_session_release(sel->session);
    sel->session = NULL;
}

void psdb__associate(psdb__selection *sel, psdb__association *out)
{
    memset(out, 0, sizeof(*out));
    if (!sel->session)
        return; /* I5: no PSDB now, none later */
    if (sel->flags & PSDB_SESSION_FLAG_CREATE_ONLY) {
        out->fallback_implicit = 1; /* I4 */
        psdb__selection_release(sel);
    } else {
        out->session = sel->session; /* I3: the reference moves to the object */
        sel->session = NULL;
    }
}

void psdb__association_release(psdb__association *a)
{
    psdb_session_release(a->session);
    a->session = NULL;
}

psdb_hr psdb_device_set_lookup_callback(psdb_device *dev,
                                        void (*fn)(const psdb_lookup_event *ev, void *ctx),
                                        void *ctx)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb__callback *rec = NULL, *old = NULL;
    if (!dev) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_device_set_lookup_callback: NULL device");
        goto cleanup;
    }
    if (fn) {
        rec = malloc(sizeof(*rec));
        if (!rec) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        rec->fn = fn;
        rec->ctx = ctx;
    }
    pthread_mutex_lock(&dev->set_lock);
    old = atomic_exchange(&dev->lookup_rec, rec);
    wait_for_readers(dev);
    pthread_mutex_unlock(&dev->set_lock);
    free(old);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_device_set_message_callback(psdb_device *dev,
                                         void (*fn)(uint32_t severity, uint32_t id,
                                                    const char *text, void *ctx),
                                         void *ctx)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!dev) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_device_set_message_callback: NULL device");
        goto cleanup;
    }
    pthread_mutex_lock(&dev->msg_lock);
    dev->msg_fn = fn;
    dev->msg_ctx = fn ? ctx : NULL;
    pthread_mutex_unlock(&dev->msg_lock);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb__message(psdb_device *dev, uint32_t severity, uint32_t id, const char *text)
{
    /* Under the lock so that a callback is never called after it was replaced. */
    pthread_mutex_lock(&dev->msg_lock);
    if (dev->msg_fn)
        dev->msg_fn(severity, id, text, dev->msg_ctx);
    pthread_mutex_unlock(&dev->msg_lock);
}

void psdb__capture(psdb_device *dev, uint32_t kind, const psdb__buf *encoded)
{
    if (!dev->capture)
        return;
    psdb_hr hr = psdb_sodb_writer_add(dev->capture, kind, 1, encoded->data, encoded->len);
    if (PSDB_FAILED(hr))
        psdb__message(dev, PSDB_MESSAGE_SEVERITY_WARNING, 1,
                      "capture: recording a creation description failed");
}

/* ---- lookups and the local driver cache ------------------------------------------------------ */

static void emit(const psdb__selection *sel, uint64_t op, uint32_t type, uint32_t query,
                 const uint8_t *key, size_t key_size, psdb_hr result)
{
    if (!sel->lookup_fn)
        return;
    psdb_lookup_event ev = {.operation_id = op,
                            .session = sel->session,
                            .value_type = type,
                            .query = query,
                            .key = key,
                            .key_size = key_size,
                            .result = result};
    sel->lookup_fn(&ev, sel->lookup_ctx);
}

/* One value of one unit: size query, then data query (C3). Both are lookup events. */
static psdb_hr lookup_value(const psdb__selection *sel, uint64_t op, const uint8_t *key,
                            uint32_t type, psdb_creation_info *info, psdb__buf *out)
{
    psdb_hr hr = PSDB_S_OK;
    size_t size = 0, got = 0;
    uint8_t *data = NULL;
    psdb_file *f = sel->session->file;
    hr = psdb_file_find_value(f, key, PSDB__KEY_SIZE, type, NULL, &size);
    info->lookups++;
    emit(sel, op, type, PSDB_QUERY_SIZE, key, PSDB__KEY_SIZE, hr);
    if (PSDB_FAILED(hr))
        goto cleanup;
    info->hits++;
    data = malloc(size ? size : 1);
    if (!data) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    got = size;
    hr = psdb_file_find_value(f, key, PSDB__KEY_SIZE, type, data, &got);
    info->lookups++;
    emit(sel, op, type, PSDB_QUERY_DATA, key, PSDB__KEY_SIZE, hr);
    if (PSDB_FAILED(hr))
        goto cleanup;
    info->hits++;
    out->data = data;
    out->len = out->cap = got;
    data = NULL;
cleanup:
    free(data);
    return hr;
}

static size_t local_bucket(const uint8_t key[32])
{
    return (size_t)psdb__le32(key) % PSDB__LOCAL_BUCKETS;
}

static int local_contains(psdb__local_cache *c, const uint8_t key[32])
{
    int found = 0;
    pthread_mutex_lock(&c->lock);
    for (psdb__local_entry *e = c->buckets[local_bucket(key)]; e && !found; e = e->next)
        found = memcmp(e->key, key, 32) == 0;
    pthread_mutex_unlock(&c->lock);
    return found;
}

/* Takes ownership of the buffers. A unit compiled twice at once keeps the first copy. */
static psdb_hr local_store(psdb__local_cache *c, const uint8_t key[32], psdb__buf *code,
                           psdb__buf *meta)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__local_entry *n = calloc(1, sizeof(*n));
    if (!n) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    memcpy(n->key, key, 32);
    n->object_code = *code;
    n->metadata = *meta;
    memset(code, 0, sizeof(*code));
    memset(meta, 0, sizeof(*meta));
    size_t b = local_bucket(key);
    pthread_mutex_lock(&c->lock);
    int dup = 0;
    for (psdb__local_entry *e = c->buckets[b]; e && !dup; e = e->next)
        dup = memcmp(e->key, key, 32) == 0;
    if (!dup) {
        n->next = c->buckets[b];
        c->buckets[b] = n;
        c->count++;
        n = NULL;
    }
    pthread_mutex_unlock(&c->lock);
cleanup:
    if (n) {
        psdb__buf_free(&n->object_code);
        psdb__buf_free(&n->metadata);
        free(n);
    }
    return hr;
}

psdb_hr psdb__run_creation(psdb_device *dev, const psdb__selection *sel, const psdb__plan *plan,
                           int state_object, psdb_creation_info *info)
{
    return psdb__run_creation_ex(dev, sel, plan, state_object, NULL, NULL, info);
}

psdb_hr psdb__run_creation_ex(psdb_device *dev, const psdb__selection *sel, const psdb__plan *plan,
                              int state_object, psdb__unit_source_fn source, void *source_ctx,
                              psdb_creation_info *info)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__buf code = {0}, meta = {0};
    int all_hit = 1, any_compiled = 0;
    memset(info, 0, sizeof(*info));
    info->operation_id = atomic_fetch_add(&dev->next_operation, 1);
    info->selection = sel->kind;
    info->flags = sel->flags;
    /* F6: no selected PSDB, no lookups; J2: disabled lookups, none either. */
    int search = sel->session && !atomic_load(&dev->precompiled_disabled);
    for (uint32_t i = 0; i < plan->num_units; i++) {
        const psdb__unit *u = &plan->units[i];
        int unit_hit = 0;
        if (search) {
            /* F7: every query of every unit goes to the one selected session; a miss never
             * falls back to another PSDB (F5). A unit whose object code misses needs a compile,
             * so its metadata is not asked for. */
            unit_hit = PSDB_SUCCEEDED(
                lookup_value(sel, info->operation_id, u->key, PSDB_VALUE_OBJECT_CODE, info, &code));
            if (unit_hit)
                unit_hit = PSDB_SUCCEEDED(lookup_value(sel, info->operation_id, u->key,
                                                       PSDB_VALUE_METADATA, info, &meta));
            psdb__buf_free(&code);
            psdb__buf_free(&meta);
        }
        if (unit_hit)
            continue; /* the precompiled values are used as they are: no compile */
        all_hit = 0;
        if (source && source(source_ctx, u->key))
            continue; /* the caller holds the compiled values (a pipeline library's blobs) */
        int use_local = !atomic_load(&dev->implicit_disabled);
        if (use_local && local_contains(&dev->local, u->key))
            continue;
        any_compiled = 1;
        hr = dev->driver->compile_unit(u, &dev->target, dev->compile_ns_per_kib, &code, &meta);
        if (PSDB_FAILED(hr))
            goto cleanup;
        atomic_fetch_add(&dev->local_compiles, 1);
        /* J1: local results go to the local driver cache, never to the selected PSDB. */
        if (use_local) {
            hr = local_store(&dev->local, u->key, &code, &meta);
            if (PSDB_FAILED(hr))
                goto cleanup;
        }
        psdb__buf_free(&code);
        psdb__buf_free(&meta);
    }
    info->psdb_hit = search && all_hit && plan->num_units > 0;
    psdb__counters *c = state_object ? &dev->state_object_stats : &dev->pipeline_stats;
    atomic_fetch_add(&c->created, 1);
    if (!dev->asd) {
        atomic_fetch_add(&c->unknown, 1);
    } else {
        if (!info->psdb_hit) /* a partial hit is a miss (K1) */
            atomic_fetch_add(&c->psdb_missed, 1);
        if (any_compiled)
            atomic_fetch_add(&c->total_missed, 1);
    }
cleanup:
    psdb__buf_free(&code);
    psdb__buf_free(&meta);
    return hr;
}

psdb_hr psdb__associated_find_value(psdb_device *dev, const psdb__association *a, const void *key,
                                    size_t key_size, uint32_t value_type, void *value,
                                    size_t *value_size)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__selection sel = {0};
    if (!key || !key_size || value_type >= PSDB_VALUE_TYPE_COUNT || !value_size) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "find value: NULL key or value_size, an empty key, or an unknown value type");
        goto cleanup;
    }
    /* I3: the retained session; I4: the implicit default, never the current device default. */
    psdb_session *s = a->session ? a->session : (a->fallback_implicit ? dev->implicit : NULL);
    if (!s) {
        hr = psdb__error_const(
            PSDB_E_NOT_FOUND,
            "find value: no PSDB is associated to search (I4, I5)"); /* I4, I5: no PSDB to search,
                                                                        no lookup event */
        goto cleanup;
    }
    if (atomic_load(&dev->precompiled_disabled)) {
        hr = psdb__error_const(
            PSDB_E_NOT_CURRENTLY_AVAILABLE,
            "find value: precompiled shaders are disabled on this device (J2)"); /* J2: no lookup
                                                                                    while disabled
                                                                                  */
        goto cleanup;
    }
    atomic_fetch_add(&dev->readers, 1);
    psdb__callback *cb = atomic_load(&dev->lookup_rec);
    if (cb) {
        sel.lookup_fn = cb->fn;
        sel.lookup_ctx = cb->ctx;
    }
    atomic_fetch_sub(&dev->readers, 1);
    sel.session = s;
    uint64_t op = atomic_fetch_add(&dev->next_operation, 1);
    hr = psdb_file_find_value(s->file, key, key_size, value_type, value, value_size);
    emit(&sel, op, value_type, value ? PSDB_QUERY_DATA : PSDB_QUERY_SIZE, key, key_size, hr);
cleanup:
    return hr;
}

/* ---- ShaderCacheControl (J2) and statistics (K1) --------------------------------------------- */

#define KNOWN_KINDS                                                                                \
    (PSDB_CACHE_KIND_IMPLICIT | PSDB_CACHE_KIND_APPLICATION | PSDB_CACHE_KIND_PRECOMPILED)
#define KNOWN_CONTROLS                                                                             \
    (PSDB_CACHE_CONTROL_DISABLE | PSDB_CACHE_CONTROL_ENABLE | PSDB_CACHE_CONTROL_CLEAR)

psdb_hr psdb_device_shader_cache_control(psdb_device *dev, uint32_t kinds, uint32_t control)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!dev || !kinds || (kinds & ~KNOWN_KINDS) || !control || (control & ~KNOWN_CONTROLS) ||
        ((control & PSDB_CACHE_CONTROL_DISABLE) && (control & PSDB_CACHE_CONTROL_ENABLE))) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_shader_cache_control: NULL device, no or unknown "
                               "kinds, no or unknown control, or both disable and enable");
        goto cleanup;
    }
    int set = (control & PSDB_CACHE_CONTROL_DISABLE) ? 1 : 0;
    int change = (control & (PSDB_CACHE_CONTROL_DISABLE | PSDB_CACHE_CONTROL_ENABLE)) != 0;
    if (kinds & PSDB_CACHE_KIND_PRECOMPILED) {
        /* Only lookups stop: the default and every object's selection stay as they are. A PSDB
         * is read-only, so CLEAR leaves it alone. */
        if (change)
            atomic_store(&dev->precompiled_disabled, set);
    }
    if (kinds & PSDB_CACHE_KIND_IMPLICIT) {
        if (change)
            atomic_store(&dev->implicit_disabled, set);
        if (control & PSDB_CACHE_CONTROL_CLEAR)
            psdb__local_clear(&dev->local);
    }
    if (kinds & PSDB_CACHE_KIND_APPLICATION) {
        if (change)
            atomic_store(&dev->application_disabled, set);
        if (control & PSDB_CACHE_CONTROL_CLEAR)
            psdb__cache_clear_all(dev);
    }
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

static void read_counters(psdb__counters *c, psdb_creation_statistics *out)
{
    out->num_created = atomic_load(&c->created);
    out->num_psdb_cache_missed = atomic_load(&c->psdb_missed);
    out->num_total_cache_missed = atomic_load(&c->total_missed);
    out->num_cache_unknown = atomic_load(&c->unknown);
}

psdb_hr psdb_device_get_statistics(psdb_device *dev, psdb_statistics *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!dev || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_device_get_statistics: NULL device or out");
        goto cleanup;
    }
    memset(out, 0, sizeof(*out));
    out->default_psdb_registered = dev->implicit != NULL;
    read_counters(&dev->pipeline_stats, &out->pipeline_states);
    read_counters(&dev->state_object_stats, &out->state_objects);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

uint32_t psdb_device_get_local_compile_count(psdb_device *dev)
{
    return dev ? atomic_load(&dev->local_compiles) : 0;
}

/* ---- What the files built on the core read of the device (runtime.h) ------------------------ */

const psdb_adapter_desc *psdb__device_adapter(const psdb_device *dev)
{
    return &dev->adapter;
}

const psdb_target *psdb__device_target(const psdb_device *dev)
{
    return &dev->target;
}

const psdb__driver *psdb__device_driver(const psdb_device *dev)
{
    return dev->driver;
}

uint32_t psdb__device_flags(const psdb_device *dev)
{
    return dev->flags;
}

uint64_t psdb__device_next_operation(psdb_device *dev)
{
    return atomic_fetch_add(&dev->next_operation, 1);
}

_Atomic(psdb__device_ext *) *psdb__device_serialized_slot(psdb_device *dev)
{
    return &dev->serialized;
}
