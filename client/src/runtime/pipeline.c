/* pipeline.c - pipeline state creation (MODEL G1): compute, graphics and stream-described
 * pipelines select one PSDB (F), look every compile unit up in it, and keep their association for
 * object-associated lookups (I3-I5). */
#include "runtime/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "format/desc.h"
#include "common/error.h"

psdb_hr psdb__pipeline_new(psdb_device *dev, psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_pipeline *p = calloc(1, sizeof(*p));
    if (!p) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    atomic_init(&p->refs, 1);
    p->dev = dev;
    psdb__device_ref(dev);
    *out = p;
cleanup:
    return hr;
}

/* The common path: one selection for the whole operation (F7), held until creation ends (I2). */
static psdb_hr create_planned(psdb_device *dev, const psdb_session_subobject *sub, psdb__plan *plan,
                              int is_compute, psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__selection sel = {0};
    psdb_pipeline *p = NULL;
    hr = psdb__select(dev, sub, &sel);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__pipeline_new(dev, &p);
    if (PSDB_FAILED(hr))
        goto cleanup;
    p->is_compute = is_compute;
    memcpy(p->group_key, plan->group_key, sizeof(p->group_key));
    hr = psdb__run_creation(dev, &sel, plan, 0, &p->info);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__associate(&sel, &p->assoc);
    p->desc = plan->desc; /* moved: the library, serialization and derivation read it */
    memset(&plan->desc, 0, sizeof(plan->desc));
    *out = p;
    p = NULL;
cleanup:
    psdb__selection_release(&sel);
    psdb_pipeline_release(p);
    return hr;
}

static psdb_hr create_compute(psdb_device *dev, const psdb_compute_pipeline_desc *desc,
                              psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan plan = {0};
    hr = psdb__device_driver(dev)->plan_compute(desc, &plan);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = create_planned(dev, desc->psdb, &plan, 1, out);
    if (PSDB_SUCCEEDED(hr))
        psdb__capture(dev, PSDB_SODB_COMPUTE, &(*out)->desc);
cleanup:
    psdb__plan_free(&plan);
    return hr;
}

static psdb_hr create_graphics(psdb_device *dev, const psdb_graphics_pipeline_desc *desc,
                               psdb_pipeline **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan plan = {0};
    hr = psdb__device_driver(dev)->plan_graphics(desc, &plan);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = create_planned(dev, desc->psdb, &plan, 0, out);
    if (PSDB_SUCCEEDED(hr))
        psdb__capture(dev, PSDB_SODB_GRAPHICS, &(*out)->desc);
cleanup:
    psdb__plan_free(&plan);
    return hr;
}

psdb_hr psdb_device_create_compute_pipeline(psdb_device *dev,
                                            const psdb_compute_pipeline_desc *desc,
                                            psdb_pipeline **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (out)
        *out = NULL;
    if (!dev || !desc || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_create_compute_pipeline: NULL device, desc or out");
        goto cleanup;
    }
    hr = create_compute(dev, desc, out);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_device_create_graphics_pipeline(psdb_device *dev,
                                             const psdb_graphics_pipeline_desc *desc,
                                             psdb_pipeline **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (out)
        *out = NULL;
    if (!dev || !desc || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_create_graphics_pipeline: NULL device, desc or out");
        goto cleanup;
    }
    hr = create_graphics(dev, desc, out);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_device_create_pipeline_state(psdb_device *dev, const psdb_pipeline_stream_desc *desc,
                                          psdb_pipeline **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_compute_pipeline_desc cd;
    psdb_graphics_pipeline_desc gd;
    int is_compute = 0;
    if (out)
        *out = NULL;
    if (!dev || !desc || !out || (desc->num_subobjects && !desc->subobjects)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_device_create_pipeline_state: NULL device, "
                                                  "desc or out, or subobjects NULL with a count");
        goto cleanup;
    }
    memset(&cd, 0, sizeof(cd));
    memset(&gd, 0, sizeof(gd));
    hr = psdb__stream_to_desc(desc, &is_compute, &cd, &gd);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = is_compute ? create_compute(dev, &cd, out) : create_graphics(dev, &gd, out);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_pipeline_addref(psdb_pipeline *p)
{
    if (p)
        atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
}

void psdb_pipeline_release(psdb_pipeline *p)
{
    if (!p || atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
        return;
    psdb__association_release(&p->assoc);
    psdb__buf_free(&p->desc);
    psdb_pipeline_release(p->base);
    psdb_device *dev = p->dev;
    free(p);
    psdb__device_unref(dev);
}

psdb_hr psdb_pipeline_get_creation_info(const psdb_pipeline *p, psdb_creation_info *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!p || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_pipeline_get_creation_info: NULL pipeline or out");
        goto cleanup;
    }
    *out = p->info;
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_pipeline_find_value(psdb_pipeline *p, const void *key, size_t key_size,
                                 uint32_t value_type, void *value, size_t *value_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!p) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_pipeline_find_value: NULL pipeline");
        goto cleanup;
    }
    hr = psdb__associated_find_value(p->dev, &p->assoc, key, key_size, value_type, value,
                                     value_size);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb__pipeline_plan(const psdb_pipeline *p, psdb__plan *out)
{
    psdb_hr hr = PSDB_S_OK;
    memset(out, 0, sizeof(*out));
    if (p->origin == PSDB__ORIGIN_DESERIALIZED || p->origin == PSDB__ORIGIN_DERIVED_COMPACT ||
        !p->desc.len) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "pipeline: deserialized or derived-compact pipelines have no description to plan from");
        goto cleanup;
    }
    hr = psdb__device_driver(p->dev)->plan_encoded(
        p->is_compute ? PSDB_SODB_COMPUTE : PSDB_SODB_GRAPHICS, p->desc.data, p->desc.len, out);
cleanup:
    return hr;
}
