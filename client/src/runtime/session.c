/* session.c - sessions (MODEL D): PSDB sessions opened from a file or a registered component,
 * reference counting and destruction callbacks shared with application-managed cache sessions. */
#include "runtime/device_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "registry/registry.h"
#include "common/error.h"
#include "common/status_map.h"

psdb_hr psdb__session_new(psdb_device *dev, uint32_t kind, int owned_by_device, psdb_session **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_session *s = calloc(1, sizeof(*s));
    if (!s) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    atomic_init(&s->refs, 1);
    s->kind = kind;
    s->dev = dev;
    s->owned_by_device = owned_by_device;
    pthread_mutex_init(&s->cb_lock, NULL);
    /* The implicit default is owned by the device: a reference back would never drop. */
    if (!owned_by_device)
        psdb__device_ref(dev);
    *out = s;
cleanup:
    return hr;
}

psdb_hr psdb__session_open_file(psdb_device *dev, const char *path, int owned_by_device,
                                psdb_session **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_session *s = NULL;
    struct stat st;
    *out = NULL;
    /* A registered PSDB that was deleted is "not found", not an I/O failure. */
    if (stat(path, &st) != 0) {
        int e = errno;
        hr = psdb__error_set(psdb__errno_is(e, PSDB__ERRNO_NO_SUCH_PATH) ? PSDB_E_NOT_FOUND
                                                                         : PSDB_E_IO,
                             "open session: stat %s: %s", path, strerror(e));
        goto cleanup;
    }
    hr = psdb__session_new(dev, PSDB__SESSION_PSDB, owned_by_device, &s);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb_file_open(path, &dev->adapter, &s->file);
    if (PSDB_FAILED(hr))
        goto cleanup;
    *out = s;
    s = NULL;
cleanup:
    psdb_session_release(s);
    return hr;
}

psdb_hr psdb_device_open_session(psdb_device *dev, const psdb_session_desc *desc,
                                 psdb_session **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    char *path = NULL;
    if (out)
        *out = NULL;
    if (!dev || !desc || !out || (!desc->psdb_path == !desc->component) ||
        (desc->psdb_path && !*desc->psdb_path) || (desc->component && !*desc->component)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_open_session: NULL device, desc or out, or not exactly "
                               "one of a non-empty psdb_path and component");
        goto cleanup;
    }
    if (!dev->asd) {
        hr = psdb__error_const(PSDB_E_UNSUPPORTED,
                               "psdb_device_open_session: the device has no ABI to check a PSDB "
                               "against (A4)"); /* no ABI to check a PSDB against (A4) */
        goto cleanup;
    }
    if (desc->component) {
        if (!dev->exe_path) {
            hr = psdb__error_const(
                PSDB_E_NOT_FOUND,
                "psdb_device_open_session: a component needs a device created with an exe path");
            goto cleanup;
        }
        hr = psdb__registry_find_psdb(dev->registry_dir, dev->exe_path, desc->component,
                                      dev->family_buf, &path);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    hr = psdb__session_open_file(dev, desc->component ? path : desc->psdb_path, 0, out);
cleanup:
    free(path);
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_session_addref(psdb_session *s)
{
    if (s)
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

void psdb_session_release(psdb_session *s)
{
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    psdb_device *dev = s->owned_by_device ? NULL : s->dev;
    /* Backing files are closed before the callbacks run: "destroyed" means released. */
    psdb_file_release(s->file);
    if (s->store)
        psdb__cache_detach(s);
    for (size_t i = 0; i < s->num_cbs; i++)
        s->cbs[i].fn(s->cbs[i].ctx);
    free(s->cbs);
    pthread_mutex_destroy(&s->cb_lock);
    free(s);
    psdb__device_unref(dev);
}

psdb_hr psdb_session_on_destroy(psdb_session *s, void (*fn)(void *ctx), void *ctx)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!s || !fn) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_session_on_destroy: NULL session or callback");
        goto cleanup;
    }
    pthread_mutex_lock(&s->cb_lock);
    if (s->num_cbs == s->cap_cbs) {
        size_t cap = s->cap_cbs ? s->cap_cbs * 2 : 2;
        psdb__destroy_cb *n = realloc(s->cbs, cap * sizeof(*n));
        if (!n) {
            hr = PSDB_E_OUTOFMEMORY;
            pthread_mutex_unlock(&s->cb_lock);
            goto cleanup;
        }
        s->cbs = n;
        s->cap_cbs = cap;
    }
    s->cbs[s->num_cbs].fn = fn;
    s->cbs[s->num_cbs].ctx = ctx;
    s->num_cbs++;
    pthread_mutex_unlock(&s->cb_lock);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_session_find_value(psdb_session *s, const void *key, size_t key_size, void *value,
                                size_t *value_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!s || !key || !key_size || !value_size) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_session_find_value: NULL session, key or value_size, or an empty key");
        goto cleanup;
    }
    if (s->kind == PSDB__SESSION_CACHE) {
        hr = psdb__cache_find(s, key, key_size, value, value_size);
        goto cleanup;
    }
    /* A PSDB session answers for object code, the value a key names first. */
    hr = psdb_file_find_value(s->file, key, key_size, PSDB_VALUE_OBJECT_CODE, value, value_size);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_session_store_value(psdb_session *s, const void *key, size_t key_size,
                                 const void *value, size_t value_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!s || !key || !key_size || (!value && value_size)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_session_store_value: NULL session or key, "
                                                  "an empty key, or a NULL value with a size");
        goto cleanup;
    }
    if (s->kind != PSDB__SESSION_CACHE) {
        hr = psdb__error_const(
            PSDB_E_ACCESS,
            "psdb_session_store_value: a PSDB session is read-only (J1)"); /* a PSDB is read-only
                                                                              (J1) */
        goto cleanup;
    }
    hr = psdb__cache_store_value(s, key, key_size, value, value_size);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}
