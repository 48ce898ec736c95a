/* state_object.c - state-object creation and AddToStateObject (MODEL G3, G4): each operation
 * selects its own PSDB; referenced collections and the base object keep theirs. */
#include "runtime/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "format/desc.h"
#include "common/error.h"

/* Checks the subobjects the runtime interprets (PSDB, existing collections) and finds the PSDB
 * subobject. The compiler validates the rest when planning. */
static psdb_hr scan_subobjects(psdb_device *dev, const psdb_state_object_desc *d,
                               const psdb_session_subobject **psdb, uint32_t *num_collections)
{
    psdb_hr hr = PSDB_S_OK;
    *psdb = NULL;
    *num_collections = 0;
    if (d->num_subobjects && !d->subobjects) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "state object: subobjects NULL with a count");
        goto cleanup;
    }
    for (uint32_t i = 0; i < d->num_subobjects; i++) {
        const psdb_state_subobject *so = &d->subobjects[i];
        if (so->type == PSDB_SUBOBJECT_PSDB) {
            if (!so->desc || *psdb) { /* one PSDB subobject per operation */
                hr = psdb__error_const(
                    PSDB_E_INVALIDARG,
                    "state object: a PSDB subobject without desc, or more than one");
                goto cleanup;
            }
            *psdb = so->desc;
        } else if (so->type == PSDB_SUBOBJECT_EXISTING_COLLECTION) {
            const psdb_existing_collection_desc *c = so->desc;
            if (!c || !c->collection || c->collection->dev != dev ||
                c->collection->type != PSDB_STATE_OBJECT_COLLECTION) {
                hr = psdb__error_const(
                    PSDB_E_INVALIDARG,
                    "state object: a collection subobject that is not a collection");
                goto cleanup;
            }
            (*num_collections)++;
        }
    }
cleanup:
    return hr;
}

static int collection_key(psdb_state_object *so, uint8_t key[32])
{
    memcpy(key, so->group_key, 32);
    return 0;
}

static psdb_hr create(psdb_device *dev, const psdb_state_object_desc *desc, psdb_state_object *base,
                      psdb_state_object **out)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__plan plan = {0};
    psdb__selection sel = {0};
    psdb_state_object *so = NULL;
    const psdb_session_subobject *sub = NULL;
    uint32_t num_collections = 0;
    hr = scan_subobjects(dev, desc, &sub, &num_collections);
    if (PSDB_FAILED(hr))
        goto cleanup;
    hr = psdb__device_driver(dev)->plan_state_object(desc, collection_key, &plan);
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* G3: an addition selects for itself; the base's selection is neither inherited nor
     * changed. */
    hr = psdb__select(dev, sub, &sel);
    if (PSDB_FAILED(hr))
        goto cleanup;
    so = calloc(1, sizeof(*so));
    if (!so) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    atomic_init(&so->refs, 1);
    so->dev = dev;
    psdb__device_ref(dev);
    so->type = desc->type;
    memcpy(so->group_key, plan.group_key, 32);
    if (num_collections) {
        so->collections = calloc(num_collections, sizeof(*so->collections));
        if (!so->collections) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        for (uint32_t i = 0; i < desc->num_subobjects; i++) {
            if (desc->subobjects[i].type != PSDB_SUBOBJECT_EXISTING_COLLECTION)
                continue;
            const psdb_existing_collection_desc *c = desc->subobjects[i].desc;
            /* G4: the collection is reused as it is, with its own PSDB association. */
            atomic_fetch_add(&c->collection->refs, 1);
            so->collections[so->num_collections++] = c->collection;
        }
    }
    if (base) {
        atomic_fetch_add(&base->refs, 1);
        so->base = base;
    }
    hr = psdb__run_creation(dev, &sel, &plan, 1, &so->info);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__associate(&sel, &so->assoc);
    psdb__capture(dev, PSDB_SODB_STATE_OBJECT, &plan.desc);
    *out = so;
    so = NULL;
cleanup:
    psdb__selection_release(&sel);
    psdb_state_object_release(so);
    psdb__plan_free(&plan);
    return hr;
}

psdb_hr psdb_device_create_state_object(psdb_device *dev, const psdb_state_object_desc *desc,
                                        psdb_state_object **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (out)
        *out = NULL;
    if (!dev || !desc || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_create_state_object: NULL device, desc or out");
        goto cleanup;
    }
    hr = create(dev, desc, NULL, out);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_device_add_to_state_object(psdb_device *dev, const psdb_state_object_desc *addition,
                                        psdb_state_object *base, psdb_state_object **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (out)
        *out = NULL;
    if (!dev || !addition || !base || !out || base->dev != dev ||
        base->type == PSDB_STATE_OBJECT_COLLECTION || addition->type != base->type) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_device_add_to_state_object: NULL device, addition, base or out, a base of "
            "another device or a collection, or an addition of another type");
        goto cleanup;
    }
    hr = create(dev, addition, base, out);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_state_object_release(psdb_state_object *so)
{
    if (!so || atomic_fetch_sub_explicit(&so->refs, 1, memory_order_acq_rel) != 1)
        return;
    psdb__association_release(&so->assoc);
    for (uint32_t i = 0; i < so->num_collections; i++)
        psdb_state_object_release(so->collections[i]);
    free(so->collections);
    psdb_state_object_release(so->base);
    psdb_device *dev = so->dev;
    free(so);
    psdb__device_unref(dev);
}

psdb_hr psdb_state_object_get_creation_info(const psdb_state_object *so, psdb_creation_info *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!so || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_state_object_get_creation_info: NULL state object or out");
        goto cleanup;
    }
    *out = so->info;
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_state_object_find_value(psdb_state_object *so, const void *key, size_t key_size,
                                     uint32_t value_type, void *value, size_t *value_size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!so) {
        hr =
            psdb__error_const(PSDB_E_INVALIDARG, "psdb_state_object_find_value: NULL state object");
        goto cleanup;
    }
    hr = psdb__associated_find_value(so->dev, &so->assoc, key, key_size, value_type, value,
                                     value_size);
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}
