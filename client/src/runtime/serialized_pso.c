/* serialized_pso.c - serialized graphics PSOs (MODEL X): a tools device turns a PSO into packet,
 * metadata and per-stage blobs (schema/SERIALIZED_PSO.md), deduplicated across everything it
 * serialized; any device turns them back into a working PSO.
 *
 * DESIGN
 * The blobs are the compiled units of the reference compiler: the packet carries the pipeline
 * unit (the GPU state), each stage's GPU instructions are its unit's object code, its metadata the
 * unit's compiler metadata. Shared shaders give identical bytes, so interning every blob by its
 * SHA-256 in one device-wide store makes them one blob at one address (X3). The PSO metadata holds
 * what deserialization validates (CRC-32 over everything, structure version, adapter and driver)
 * and the compact creation arguments: the SODB encoding of the description with the root signature
 * and each shader's bytecode replaced by their SHA-256. That is enough to derive from the PSO and
 * to validate the root signature, but not to plan or serialize it again (X5): the bytecode is gone,
 * as on the console, where metadata irrelevant to execution is dropped. */
#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/desc.h"
#include "common/hash.h"
#include "runtime/pipeline.h"
#include "common/error.h"

#define SPSO_META_MAGIC "PSDBSPSM"
#define SPSO_STAGE_MAGIC "PSDBSSHM"
#define SPSO_PACKET_MAGIC "PSDBSPKT"
#define SPSO_VERSION 1u
#define SPSO_META_HEADER 128u
#define SPSO_STAGE_HEADER 56u
#define SPSO_PACKET_HEADER 48u
#define SPSO_STAGES 5

/* ---- the device's blob store (X3) ------------------------------------------------------------ */

typedef struct sblob {
    uint8_t digest[32];
    uint8_t *data;
    size_t size;
} sblob;

struct psdb__serialized_store {
    psdb__device_ext ext; /* first: the device frees the store through it */
    pthread_mutex_t lock;
    sblob *blobs;
    size_t num, cap;
};

static void store_free(struct psdb__serialized_store *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->num; i++)
        free(st->blobs[i].data);
    free(st->blobs);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static void store_free_ext(psdb__device_ext *ext)
{
    store_free((struct psdb__serialized_store *)ext);
}

static psdb_hr store_get(psdb_device *dev, struct psdb__serialized_store **out)
{
    psdb_hr hr = PSDB_S_OK;
    struct psdb__serialized_store *st =
        (struct psdb__serialized_store *)atomic_load(psdb__device_serialized_slot(dev));
    psdb__device_ext *expected = NULL;
    if (st)
        goto cleanup;
    st = calloc(1, sizeof(*st));
    if (!st || pthread_mutex_init(&st->lock, NULL) != 0) {
        free(st);
        st = NULL;
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    st->ext.free = store_free_ext;
    if (!atomic_compare_exchange_strong(psdb__device_serialized_slot(dev), &expected, &st->ext)) {
        store_free(st); /* another serialization made it first */
        st = (struct psdb__serialized_store *)expected;
    }
cleanup:
    *out = st;
    return hr;
}

/* Returns the store's copy of the bytes (one per distinct content). */
static psdb_hr intern(struct psdb__serialized_store *st, const psdb__buf *b, const void **out,
                      size_t *out_size)
{
    psdb_hr hr = PSDB_S_OK;
    uint8_t digest[32];
    psdb__sha256(b->data, b->len, digest);
    pthread_mutex_lock(&st->lock);
    for (size_t i = 0; i < st->num; i++) {
        if (st->blobs[i].size == b->len && memcmp(st->blobs[i].digest, digest, 32) == 0) {
            *out = st->blobs[i].data;
            *out_size = b->len;
            goto cleanup;
        }
    }
    if (st->num == st->cap) {
        size_t n = st->cap ? st->cap * 2 : 64;
        sblob *p = realloc(st->blobs, n * sizeof(*p));
        if (!p) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        st->blobs = p;
        st->cap = n;
    }
    sblob *x = &st->blobs[st->num];
    x->data = malloc(b->len ? b->len : 1);
    if (!x->data) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    memcpy(x->data, b->data, b->len);
    memcpy(x->digest, digest, 32);
    x->size = b->len;
    st->num++;
    *out = x->data;
    *out_size = b->len;
cleanup:
    pthread_mutex_unlock(&st->lock);
    return hr;
}

/* ---- serialize (X1-X3, X5) ------------------------------------------------------------------- */

static psdb_shader *stage_of(psdb_graphics_pipeline_desc *g, int i)
{
    psdb_shader *s[SPSO_STAGES] = {&g->vs, &g->ps, &g->ds, &g->hs, &g->gs};
    return s[i];
}

static psdb_serialized_shader *out_stage(psdb_serialized_graphics_pipeline *o, int i)
{
    psdb_serialized_shader *s[SPSO_STAGES] = {&o->vs, &o->ps, &o->ds, &o->hs, &o->gs};
    return s[i];
}

static const psdb_serialized_shader *in_stage(const psdb_deserialize_graphics_pipeline_desc *d,
                                              int i)
{
    const psdb_serialized_shader *s[SPSO_STAGES] = {&d->vs, &d->ps, &d->ds, &d->hs, &d->gs};
    return s[i];
}

/* The compact creation arguments: the encoding with digests in place of bytecode. */
static psdb_hr encode_compact(const psdb_graphics_pipeline_desc *g, uint8_t digests[6][32],
                              psdb__buf *out)
{
    psdb_graphics_pipeline_desc c = *g;
    psdb__sha256(g->root_signature, g->root_signature_size, digests[5]);
    c.root_signature = digests[5];
    c.root_signature_size = 32;
    for (int i = 0; i < SPSO_STAGES; i++) {
        psdb_shader *s = stage_of(&c, i);
        if (!s->size)
            continue;
        psdb__sha256(s->code, s->size, digests[i]);
        s->code = digests[i];
        s->size = 32;
    }
    return psdb__desc_encode_graphics(&c, out);
}

/* CRC-32 of the serialized PSO: the metadata with its CRC field read as zero, the packet, then
 * each stage's instructions and metadata in VS PS DS HS GS order. */
static uint32_t pso_crc(const uint8_t *meta, size_t meta_size, const void *packet,
                        size_t packet_size, const psdb_serialized_shader *const stages[SPSO_STAGES])
{
    static const uint8_t zero[4] = {0};
    uint32_t crc = psdb__crc32(0, meta, 12);
    crc = psdb__crc32(crc, zero, 4);
    crc = psdb__crc32(crc, meta + 16, meta_size - 16);
    crc = psdb__crc32(crc, packet, packet_size);
    for (int i = 0; i < SPSO_STAGES; i++) {
        crc = psdb__crc32(crc, stages[i]->gpu_instructions, stages[i]->gpu_instructions_size);
        crc = psdb__crc32(crc, stages[i]->metadata, stages[i]->metadata_size);
    }
    return crc;
}

static void put_header_unit(psdb__buf *b, const char *magic, uint32_t kind, const uint8_t *key)
{
    psdb__buf_append(b, magic, 8);
    psdb__buf_u32(b, SPSO_VERSION);
    psdb__buf_u32(b, kind);
    psdb__buf_append(b, key, PSDB__KEY_SIZE);
}

psdb_hr psdb_device_serialize_graphics_pipeline(psdb_device *dev, psdb_pipeline *p, uint32_t flags,
                                                psdb_serialized_graphics_pipeline *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_graphics_pipeline_desc *g = NULL;
    psdb__plan plan = {0};
    psdb__buf code = {0}, meta = {0}, blob = {0}, compact = {0}, il = {0}, so = {0};
    struct psdb__serialized_store *st = NULL;
    psdb_serialized_graphics_pipeline r;
    uint8_t digests[6][32];
    memset(&r, 0, sizeof(r));
    if (out)
        memset(out, 0, sizeof(*out));
    if (!dev || !p || !out || flags != PSDB_SERIALIZE_FLAG_NONE || p->dev != dev || p->is_compute) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_device_serialize_graphics_pipeline: NULL device, pipeline or out, unknown flags, "
            "or a pipeline that is not a graphics pipeline of this device");
        goto cleanup;
    }
    if (!(psdb__device_flags(dev) & PSDB_DEVICE_FLAG_TOOLS)) {
        hr = psdb__error_const(PSDB_E_UNSUPPORTED,
                               "psdb_device_serialize_graphics_pipeline: the device was not "
                               "created with the tools flag (X1)"); /* X1: not in retail builds */
        goto cleanup;
    }
    if (p->origin == PSDB__ORIGIN_DESERIALIZED || p->origin == PSDB__ORIGIN_DERIVED_COMPACT) {
        psdb__message(dev, PSDB_MESSAGE_SEVERITY_ERROR, PSDB_MESSAGE_ID_SERIALIZE_DESERIALIZED,
                      "serialize pso: the pso was deserialized (or derived from one) and lacks "
                      "what serialization needs; serialize the pso it came from");
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_device_serialize_graphics_pipeline: the pipeline was deserialized (or derived "
            "from one) and lacks what serialization needs (X5)"); /* X5 */
        goto cleanup;
    }
    hr = psdb__desc_decode_graphics(p->desc.data, p->desc.len, &g);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__pipeline_plan(p, &plan);
    if (PSDB_SUCCEEDED(hr))
        hr = store_get(dev, &st);
    if (PSDB_FAILED(hr))
        goto cleanup;
    uint32_t stage_mask = 0;
    for (uint32_t i = 0; i < plan.num_units; i++) {
        const psdb__unit *u = &plan.units[i];
        hr = psdb__device_driver(dev)->compile_unit(u, psdb__device_target(dev),
                                                    PSDB_COMPILE_COST_FREE, &code, &meta);
        if (PSDB_FAILED(hr))
            goto cleanup;
        if (u->kind == PSDB__UNIT_PIPELINE) {
            put_header_unit(&blob, SPSO_PACKET_MAGIC, u->kind, u->key);
            psdb__buf_u32(&blob, (uint32_t)code.len);
            psdb__buf_append(&blob, code.data, code.len);
            psdb__buf_u32(&blob, (uint32_t)meta.len);
            psdb__buf_append(&blob, meta.data, meta.len);
            hr = psdb__buf_status(&blob);
            if (PSDB_SUCCEEDED(hr))
                hr = intern(st, &blob, &r.packet, &r.packet_size);
        } else {
            assert(u->kind <= PSDB__UNIT_GS);
            psdb_serialized_shader *s = out_stage(&r, (int)u->kind);
            stage_mask |= 1u << u->kind;
            hr = intern(st, &code, &s->gpu_instructions, &s->gpu_instructions_size);
            put_header_unit(&blob, SPSO_STAGE_MAGIC, u->kind, u->key);
            psdb__buf_u32(&blob, (uint32_t)meta.len); /* shader compiler metadata */
            psdb__buf_append(&blob, meta.data, meta.len);
            psdb__buf_u32(&blob, 0); /* PIX shader info: none in the reference driver */
            if (PSDB_SUCCEEDED(hr))
                hr = psdb__buf_status(&blob);
            if (PSDB_SUCCEEDED(hr))
                hr = intern(st, &blob, &s->metadata, &s->metadata_size);
        }
        psdb__buf_free(&code);
        psdb__buf_free(&meta);
        psdb__buf_free(&blob);
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    hr = encode_compact(g, digests, &compact);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__desc_append_input_layout(&il, &g->input_layout);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb__desc_append_stream_output(&so, &g->stream_output);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__buf_append(&blob, SPSO_META_MAGIC, 8);
    psdb__buf_u32(&blob, SPSO_VERSION);
    psdb__buf_u32(&blob, 0); /* CRC-32, set below */
    psdb__buf_u64(&blob, SPSO_META_HEADER + 12 + compact.len + il.len + so.len);
    psdb__buf_u32(&blob, psdb__device_adapter(dev)->vendor_id);
    psdb__buf_u32(&blob, psdb__device_adapter(dev)->device_id);
    psdb__buf_u64(&blob, psdb__device_adapter(dev)->driver_build);
    psdb__buf_u64(&blob, psdb__device_target(dev)->abi_version);
    psdb__buf_u64(&blob, psdb__device_target(dev)->compiler_version);
    psdb__buf_append(&blob, p->group_key, 32);
    psdb__buf_append(&blob, digests[5], 32);
    psdb__buf_u32(&blob, stage_mask);
    psdb__buf_u32(&blob, 0);
    psdb__buf_u32(&blob, (uint32_t)compact.len);
    psdb__buf_append(&blob, compact.data, compact.len);
    psdb__buf_u32(&blob, (uint32_t)il.len);
    psdb__buf_append(&blob, il.data, il.len);
    psdb__buf_u32(&blob, (uint32_t)so.len);
    psdb__buf_append(&blob, so.data, so.len);
    hr = psdb__buf_status(&blob);
    if (PSDB_FAILED(hr))
        goto cleanup;
    const psdb_serialized_shader *stages[SPSO_STAGES] = {&r.vs, &r.ps, &r.ds, &r.hs, &r.gs};
    psdb__put_le32(blob.data + 12, pso_crc(blob.data, blob.len, r.packet, r.packet_size, stages));
    hr = intern(st, &blob, &r.metadata, &r.metadata_size);
    if (PSDB_FAILED(hr))
        goto cleanup;
    *out = r;
cleanup:
    psdb__buf_free(&code);
    psdb__buf_free(&meta);
    psdb__buf_free(&blob);
    psdb__buf_free(&compact);
    psdb__buf_free(&il);
    psdb__buf_free(&so);
    psdb__plan_free(&plan);
    free(g);
    return psdb__error_ret(hr, err_mark, __func__);
}

/* ---- deserialize (X4) ------------------------------------------------------------------------ */

/* Checks a stage or packet blob's header: magic, version, kind. */
static int blob_header_ok(const void *data, size_t size, const char *magic, uint32_t kind,
                          size_t header)
{
    const uint8_t *b = data;
    return b && size >= header && memcmp(b, magic, 8) == 0 && psdb__le32(b + 8) == SPSO_VERSION &&
           psdb__le32(b + 12) == kind;
}

/* Validates and takes the compact creation arguments out of the metadata. */
static psdb_hr check_metadata(psdb_device *dev, const psdb_deserialize_graphics_pipeline_desc *d,
                              const uint8_t **compact, size_t *compact_size)
{
    psdb_hr hr = PSDB_S_OK;
    const uint8_t *m = d->metadata;
    size_t n = d->metadata_size;
    if (!m || n < SPSO_META_HEADER || memcmp(m, SPSO_META_MAGIC, 8) != 0) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_device_deserialize_graphics_pipeline: the blob's metadata is "
                               "not a serialized pso (too short or wrong magic)");
        goto cleanup;
    }
    if (psdb__le32(m + 8) != SPSO_VERSION) {
        hr = psdb__error_const(PSDB_E_DRIVER_VERSION_MISMATCH,
                               "psdb_device_deserialize_graphics_pipeline: the blob's format "
                               "version is not this runtime's");
        goto cleanup;
    }
    if (psdb__le64(m + 16) != n) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_device_deserialize_graphics_pipeline: the blob's metadata size is damaged");
        goto cleanup;
    }
    if (psdb__le32(m + 24) != psdb__device_adapter(dev)->vendor_id ||
        psdb__le32(m + 28) != psdb__device_adapter(dev)->device_id) {
        hr = psdb__error_const(
            PSDB_E_ADAPTER_NOT_FOUND,
            "psdb_device_deserialize_graphics_pipeline: the blob was made for another adapter");
        goto cleanup;
    }
    if (psdb__le64(m + 32) != psdb__device_adapter(dev)->driver_build ||
        psdb__le64(m + 40) != psdb__device_target(dev)->abi_version ||
        psdb__le64(m + 48) != psdb__device_target(dev)->compiler_version) {
        hr = psdb__error_const(PSDB_E_DRIVER_VERSION_MISMATCH,
                               "psdb_device_deserialize_graphics_pipeline: the blob was made by "
                               "another driver or compiler version");
        goto cleanup;
    }
    hr = psdb__error_const(
        PSDB_E_INVALIDARG,
        "psdb_device_deserialize_graphics_pipeline: the blob's metadata is damaged");
    const psdb_serialized_shader *stages[SPSO_STAGES];
    uint32_t mask = psdb__le32(m + 120);
    if (!d->packet || (mask & ~0x1Fu) || psdb__le32(m + 124) != 0)
        goto cleanup;
    for (int i = 0; i < SPSO_STAGES; i++) {
        stages[i] = in_stage(d, i);
        int present = (mask >> i) & 1u;
        int given = stages[i]->gpu_instructions || stages[i]->gpu_instructions_size ||
                    stages[i]->metadata || stages[i]->metadata_size;
        if (present != given ||
            (given && (!stages[i]->gpu_instructions ||
                       !blob_header_ok(stages[i]->metadata, stages[i]->metadata_size,
                                       SPSO_STAGE_MAGIC, (uint32_t)i, SPSO_STAGE_HEADER))))
            goto cleanup;
    }
    if (pso_crc(m, n, d->packet, d->packet_size, stages) != psdb__le32(m + 12))
        goto cleanup;
    if (!blob_header_ok(d->packet, d->packet_size, SPSO_PACKET_MAGIC, PSDB__UNIT_PIPELINE,
                        SPSO_PACKET_HEADER))
        goto cleanup;
    uint8_t rs[32];
    psdb__sha256(d->root_signature, d->root_signature_size, rs);
    if (memcmp(rs, m + 88, 32) != 0)
        goto cleanup; /* not the root signature the PSO was compiled with */
    psdb__rd r = {.p = m, .len = n, .pos = SPSO_META_HEADER};
    uint32_t cl = psdb__rd_u32(&r);
    const uint8_t *c = psdb__rd_bytes(&r, cl);
    uint32_t il = psdb__rd_u32(&r);
    psdb__rd_bytes(&r, il);
    uint32_t so = psdb__rd_u32(&r);
    psdb__rd_bytes(&r, so);
    if (r.bad || r.pos != n)
        goto cleanup;
    *compact = c;
    *compact_size = cl;
    hr = PSDB_S_OK;
cleanup:
    return hr;
}

psdb_hr psdb_device_deserialize_graphics_pipeline(
    psdb_device *dev, const psdb_deserialize_graphics_pipeline_desc *desc, psdb_pipeline **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    psdb_graphics_pipeline_desc *g = NULL;
    psdb_pipeline *p = NULL;
    const uint8_t *compact = NULL;
    size_t compact_size = 0;
    if (out)
        *out = NULL;
    if (!dev || !desc || !out || !desc->root_signature || !desc->root_signature_size) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_device_deserialize_graphics_pipeline: NULL "
                                                  "device, desc or out, or no root signature");
        goto cleanup;
    }
    hr = check_metadata(dev, desc, &compact, &compact_size);
    if (PSDB_FAILED(hr))
        goto cleanup;
    /* The compact arguments must decode, and name the same stages as the stage mask. */
    if (PSDB_FAILED(psdb__desc_decode_graphics(compact, compact_size, &g))) {
        hr = psdb__error_const(
            PSDB_E_INVALIDARG,
            "psdb_device_deserialize_graphics_pipeline: the blob's description is damaged");
        goto cleanup;
    }
    uint32_t mask = psdb__le32((const uint8_t *)desc->metadata + 120);
    for (int i = 0; i < SPSO_STAGES; i++) {
        if ((stage_of(g, i)->size != 0) != ((mask >> i) & 1u)) {
            hr = psdb__error_const(PSDB_E_INVALIDARG,
                                   "psdb_device_deserialize_graphics_pipeline: the blob's shader "
                                   "stages do not match its stage mask");
            goto cleanup;
        }
    }
    hr = psdb__pipeline_new(dev, &p);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb__buf_append(&p->desc, compact, compact_size);
    hr = psdb__buf_status(&p->desc);
    if (PSDB_FAILED(hr))
        goto cleanup;
    memcpy(p->group_key, (const uint8_t *)desc->metadata + 56, 32);
    p->origin = PSDB__ORIGIN_DESERIALIZED;
    p->info.operation_id = psdb__device_next_operation(dev);
    p->info.selection = PSDB_SELECTION_NONE;
    *out = p;
    p = NULL;
cleanup:
    psdb_pipeline_release(p);
    free(g);
    return psdb__error_ret(hr, err_mark, __func__);
}
