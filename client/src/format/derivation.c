/* derivation.c - derivation records (schema/PIPELINE_LIBRARY.md, "Derivation records"): the state
 * encodings a record carries, the public reader (psdb_derivation_records_validate / _next), and
 * the public writer and diff (psdb_derivation_writer_*, psdb_derivation_diff) that base-set
 * builders such as `psdb baseset` write them with. */
#include "format/derivation.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/hash.h"
#include "common/error.h"

/* ---- state encodings (schema/PIPELINE_LIBRARY.md, "Derivation records") ---------------------- */

#define DS_WORDS 14u
#define RS_WORDS 11u
#define BLEND_WORDS PSDB__DRV_MAX_STATE_WORDS
const uint32_t psdb__derivation_state_word_count[5] = {DS_WORDS, RS_WORDS, BLEND_WORDS, 1u, 2u};

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Writes state `type` of d as its words. */
void psdb__derivation_state_words(const psdb_graphics_pipeline_desc *d, uint32_t type, uint32_t *w)
{
    uint32_t n = 0;
    switch (type) {
    case PSDB_DERIVED_STATE_DEPTH_STENCIL: {
        const psdb_depth_stencil_desc *x = &d->depth_stencil;
        const psdb_depth_stencilop_desc *f[2] = {&x->front_face, &x->back_face};
        w[n++] = (uint32_t)x->depth_enable;
        w[n++] = x->depth_write_mask;
        w[n++] = x->depth_func;
        w[n++] = (uint32_t)x->stencil_enable;
        w[n++] = x->stencil_read_mask;
        w[n++] = x->stencil_write_mask;
        for (int i = 0; i < 2; i++) {
            w[n++] = f[i]->stencil_fail_op;
            w[n++] = f[i]->stencil_depth_fail_op;
            w[n++] = f[i]->stencil_pass_op;
            w[n++] = f[i]->stencil_func;
        }
        break;
    }
    case PSDB_DERIVED_STATE_RASTERIZER: {
        const psdb_rasterizer_desc *x = &d->rasterizer;
        w[n++] = x->fill_mode;
        w[n++] = x->cull_mode;
        w[n++] = (uint32_t)x->front_counter_clockwise;
        w[n++] = (uint32_t)x->depth_bias;
        w[n++] = fbits(x->depth_bias_clamp);
        w[n++] = fbits(x->slope_scaled_depth_bias);
        w[n++] = (uint32_t)x->depth_clip_enable;
        w[n++] = (uint32_t)x->multisample_enable;
        w[n++] = (uint32_t)x->antialiased_line_enable;
        w[n++] = x->forced_sample_count;
        w[n++] = x->conservative_raster;
        break;
    }
    case PSDB_DERIVED_STATE_BLEND: {
        const psdb_blend_desc *x = &d->blend;
        w[n++] = (uint32_t)x->alpha_to_coverage_enable;
        w[n++] = (uint32_t)x->independent_blend_enable;
        for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
            const psdb_render_target_blend_desc *r = &x->render_target[i];
            w[n++] = (uint32_t)r->blend_enable;
            w[n++] = (uint32_t)r->logic_op_enable;
            w[n++] = r->src_blend;
            w[n++] = r->dest_blend;
            w[n++] = r->blend_op;
            w[n++] = r->src_blend_alpha;
            w[n++] = r->dest_blend_alpha;
            w[n++] = r->blend_op_alpha;
            w[n++] = r->logic_op;
            w[n++] = r->render_target_write_mask;
        }
        break;
    }
    case PSDB_DERIVED_STATE_SAMPLE_MASK:
        w[n++] = d->sample_mask;
        break;
    default:
        w[n++] = d->shader_limits.max_waves_per_cu;
        w[n++] = d->shader_limits.cu_enable_mask;
        break;
    }
    (void)n;
}

/* Reads state `type` from its words into x. */
static void state_from_words_u32(uint32_t type, const uint32_t *w,
                                 psdb_derived_graphics_state_desc *x)
{
    uint32_t n = 0;
    memset(x, 0, sizeof(*x));
    x->type = type;
    switch (type) {
    case PSDB_DERIVED_STATE_DEPTH_STENCIL: {
        psdb_depth_stencil_desc *d = &x->depth_stencil;
        psdb_depth_stencilop_desc *f[2] = {&d->front_face, &d->back_face};
        d->depth_enable = (int)w[n++];
        d->depth_write_mask = w[n++];
        d->depth_func = w[n++];
        d->stencil_enable = (int)w[n++];
        d->stencil_read_mask = w[n++];
        d->stencil_write_mask = w[n++];
        for (int i = 0; i < 2; i++) {
            f[i]->stencil_fail_op = w[n++];
            f[i]->stencil_depth_fail_op = w[n++];
            f[i]->stencil_pass_op = w[n++];
            f[i]->stencil_func = w[n++];
        }
        break;
    }
    case PSDB_DERIVED_STATE_RASTERIZER: {
        psdb_rasterizer_desc *r = &x->rasterizer;
        r->fill_mode = w[n++];
        r->cull_mode = w[n++];
        r->front_counter_clockwise = (int)w[n++];
        r->depth_bias = (int32_t)w[n++];
        r->depth_bias_clamp = bitsf(w[n++]);
        r->slope_scaled_depth_bias = bitsf(w[n++]);
        r->depth_clip_enable = (int)w[n++];
        r->multisample_enable = (int)w[n++];
        r->antialiased_line_enable = (int)w[n++];
        r->forced_sample_count = w[n++];
        r->conservative_raster = w[n++];
        break;
    }
    case PSDB_DERIVED_STATE_BLEND: {
        psdb_blend_desc *b = &x->blend;
        b->alpha_to_coverage_enable = (int)w[n++];
        b->independent_blend_enable = (int)w[n++];
        for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++) {
            psdb_render_target_blend_desc *r = &b->render_target[i];
            r->blend_enable = (int)w[n++];
            r->logic_op_enable = (int)w[n++];
            r->src_blend = w[n++];
            r->dest_blend = w[n++];
            r->blend_op = w[n++];
            r->src_blend_alpha = w[n++];
            r->dest_blend_alpha = w[n++];
            r->blend_op_alpha = w[n++];
            r->logic_op = w[n++];
            r->render_target_write_mask = w[n++];
        }
        break;
    }
    case PSDB_DERIVED_STATE_SAMPLE_MASK:
        x->sample_mask = w[n++];
        break;
    default:
        x->shader_limits.max_waves_per_cu = w[n++];
        x->shader_limits.cu_enable_mask = w[n++];
        break;
    }
}

/* Reads state `type` from its little-endian words at p into x. */
static void state_from_words(uint32_t type, const uint8_t *p, psdb_derived_graphics_state_desc *x)
{
    uint32_t w[BLEND_WORDS];
    for (uint32_t i = 0; i < psdb__derivation_state_word_count[type]; i++)
        w[i] = psdb__le32(p + 4u * i);
    state_from_words_u32(type, w, x);
}

/* ---- reading records ------------------------------------------------------------------------- */

/* Size of one record at p (with `left` bytes available), 0 when malformed. */
static size_t record_size(const uint8_t *p, size_t left, uint32_t num_bases)
{
    if (left < 40)
        return 0;
    uint32_t base = psdb__le32(p + 32), mask = psdb__le32(p + 36);
    if (base >= num_bases || (mask & ~0x1Fu))
        return 0;
    size_t n = 40;
    for (uint32_t t = 0; t < 5; t++)
        if (mask & (1u << t))
            n += 4u * psdb__derivation_state_word_count[t];
    return n <= left ? n : 0;
}

psdb_hr psdb_derivation_records_validate(const void *data, size_t size, uint32_t *count)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_E_INVALIDARG;
    const uint8_t *b = data;
    if (!b || !count || size < PSDB__DRV_HEADER_SIZE || memcmp(b, PSDB__DRV_MAGIC, 8) != 0)
        goto cleanup;
    if (psdb__le32(b + 8) != PSDB__DRV_VERSION) {
        hr = psdb__error_const(
            PSDB_E_DRIVER_VERSION_MISMATCH,
            "psdb_derivation_records_validate: derivation records of another format version");
        goto cleanup;
    }
    if (psdb__le64(b + 24) != 0 || psdb__crc32(0, b + PSDB__DRV_HEADER_SIZE,
                                               size - PSDB__DRV_HEADER_SIZE) != psdb__le32(b + 12))
        goto cleanup;
    uint64_t nb = psdb__le32(b + 16), nr = psdb__le32(b + 20);
    size_t pos = PSDB__DRV_HEADER_SIZE;
    if (nb * 32u > size - pos)
        goto cleanup;
    pos += (size_t)nb * 32u;
    for (uint64_t i = 0; i < nr; i++) {
        size_t n = record_size(b + pos, size - pos, (uint32_t)nb);
        if (!n)
            goto cleanup;
        pos += n;
    }
    if (pos != size)
        goto cleanup;
    *count = (uint32_t)nr;
    hr = PSDB_S_OK;
cleanup:
    if (hr == PSDB_E_INVALIDARG)
        psdb__error_const(hr, "psdb_derivation_records_validate: NULL argument, or damaged "
                              "derivation records (magic, "
                              "CRC, a count or a record size)");
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_derivation_records_next(const void *data, size_t size, size_t *cursor,
                                     psdb_derivation *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_E_INVALIDARG;
    const uint8_t *b = data;
    if (!b || !cursor || !out || size < PSDB__DRV_HEADER_SIZE || memcmp(b, PSDB__DRV_MAGIC, 8) != 0)
        goto cleanup;
    if (psdb__le32(b + 8) != PSDB__DRV_VERSION) {
        hr = psdb__error_const(
            PSDB_E_DRIVER_VERSION_MISMATCH,
            "psdb_derivation_records_next: derivation records of another format version");
        goto cleanup;
    }
    uint64_t nb = psdb__le32(b + 16);
    size_t first = PSDB__DRV_HEADER_SIZE + (size_t)nb * 32u;
    if (nb * 32u > size - PSDB__DRV_HEADER_SIZE)
        goto cleanup;
    size_t pos = *cursor ? *cursor : first;
    if (pos < first || pos > size)
        goto cleanup;
    if (pos == size) {
        hr = PSDB_S_FALSE;
        goto cleanup;
    }
    size_t n = record_size(b + pos, size - pos, (uint32_t)nb);
    if (!n)
        goto cleanup;
    const uint8_t *r = b + pos;
    memset(out, 0, sizeof(*out));
    memcpy(out->key, r, 32);
    memcpy(out->base_key, b + PSDB__DRV_HEADER_SIZE + 32u * psdb__le32(r + 32), 32);
    uint32_t mask = psdb__le32(r + 36);
    const uint8_t *p = r + 40;
    for (uint32_t t = 0; t < 5; t++) {
        if (!(mask & (1u << t)))
            continue;
        state_from_words(t, p, &out->descs[out->count++]);
        p += 4u * psdb__derivation_state_word_count[t];
    }
    *cursor = pos + n;
    hr = PSDB_S_OK;
cleanup:
    if (hr == PSDB_E_INVALIDARG)
        psdb__error_const(
            hr,
            "psdb_derivation_records_next: NULL argument, or damaged derivation records (magic, "
            "CRC, a count or a record size)");
    return psdb__error_ret(hr, err_mark, __func__);
}

/* ---- the derivation of one PSO from another ------------------------------------------------- */

psdb_hr psdb_derivation_diff(const psdb_graphics_pipeline_desc *base,
                             const psdb_graphics_pipeline_desc *desc, psdb_derivation *out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint32_t bw[PSDB__DRV_MAX_STATE_WORDS], dw[PSDB__DRV_MAX_STATE_WORDS];
    if (!base || !desc || !out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_derivation_diff: NULL argument");
        goto cleanup;
    }
    out->count = 0;
    memset(out->descs, 0, sizeof(out->descs));
    for (uint32_t t = 0; t < 5; t++) {
        psdb__derivation_state_words(base, t, bw);
        psdb__derivation_state_words(desc, t, dw);
        if (memcmp(bw, dw, psdb__derivation_state_word_count[t] * 4u) != 0)
            state_from_words_u32(t, dw, &out->descs[out->count++]);
    }
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

/* ---- writing records ------------------------------------------------------------------------- */

struct psdb_derivation_writer {
    psdb__buf bases;   /* the base keys, 32 bytes each, in the order added */
    psdb__buf records; /* the encoded records */
    uint32_t num_bases, num_records;
    uint32_t *index; /* open addressing over the base keys: base number + 1, 0 = empty */
    size_t cap;      /* slots in index, a power of two above twice num_bases */
};

/* The slot of key in the index: where it is, or the empty slot where it goes. */
static size_t base_slot(const psdb_derivation_writer *w, const uint8_t key[32])
{
    size_t i = (size_t)psdb__le64(key) & (w->cap - 1);
    while (w->index[i] && memcmp(w->bases.data + 32u * (w->index[i] - 1u), key, 32) != 0)
        i = (i + 1) & (w->cap - 1);
    return i;
}

/* Grows the index to hold one more base: 0, or -1 out of memory (the index is unchanged). */
static int base_index_reserve(psdb_derivation_writer *w)
{
    if (((size_t)w->num_bases + 1) * 2 <= w->cap)
        return 0;
    size_t cap = w->cap ? w->cap * 2 : 64;
    uint32_t *index = calloc(cap, sizeof(*index));
    if (!index)
        return -1;
    uint32_t *old = w->index;
    w->index = index;
    w->cap = cap;
    for (uint32_t b = 0; b < w->num_bases; b++)
        w->index[base_slot(w, w->bases.data + 32u * b)] = b + 1u;
    free(old);
    return 0;
}

psdb_hr psdb_derivation_writer_create(psdb_derivation_writer **out)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!out) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_derivation_writer_create: NULL out");
        goto cleanup;
    }
    *out = calloc(1, sizeof(**out));
    if (!*out)
        hr = PSDB_E_OUTOFMEMORY;
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

psdb_hr psdb_derivation_writer_add_base(psdb_derivation_writer *w, const uint8_t key[32])
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    if (!w || !key || w->num_bases == UINT32_MAX - 1u) {
        hr = psdb__error_const(PSDB_E_INVALIDARG,
                               "psdb_derivation_writer_add_base: NULL argument, or too many bases");
        goto cleanup;
    }
    if (w->cap && w->index[base_slot(w, key)]) {
        hr = psdb__error_const(PSDB_E_ALREADY_EXISTS,
                               "psdb_derivation_writer_add_base: the key is a base already");
        goto cleanup;
    }
    if (base_index_reserve(w) != 0) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    size_t len = w->bases.len;
    psdb__buf_append(&w->bases, key, 32);
    hr = psdb__buf_status(&w->bases);
    if (PSDB_FAILED(hr)) {
        w->bases.len = len; /* nothing added: the buffer keeps what it held */
        w->bases.oom = 0;
        goto cleanup;
    }
    w->index[base_slot(w, key)] = ++w->num_bases;
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

/* The words of one derived state: state `x->type` of a description holding x's member. */
static void derived_state_words(const psdb_derived_graphics_state_desc *x, uint32_t *w)
{
    psdb_graphics_pipeline_desc d;
    memset(&d, 0, sizeof(d));
    d.depth_stencil = x->depth_stencil;
    d.rasterizer = x->rasterizer;
    d.blend = x->blend;
    d.sample_mask = x->sample_mask;
    d.shader_limits = x->shader_limits;
    psdb__derivation_state_words(&d, x->type, w);
}

psdb_hr psdb_derivation_writer_add(psdb_derivation_writer *w, const psdb_derivation *d)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint32_t mask = 0, words[PSDB__DRV_MAX_STATE_WORDS];
    if (!w || !d || d->count > 5 || w->num_records == UINT32_MAX - 1u) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_derivation_writer_add: NULL argument, "
                                                  "more than 5 states, or too many records");
        goto cleanup;
    }
    for (uint32_t i = 0; i < d->count; i++) {
        uint32_t t = d->descs[i].type;
        if (t > PSDB_DERIVED_STATE_SHADER_LIMITS || (mask >> t) != 0) {
            hr = psdb__error_set(PSDB_E_INVALIDARG,
                                 "psdb_derivation_writer_add: state %u has type %u: types must be "
                                 "PSDB_DERIVED_STATE_* values in increasing order",
                                 (unsigned)i, (unsigned)t);
            goto cleanup;
        }
        mask |= 1u << t;
    }
    size_t slot = w->cap ? base_slot(w, d->base_key) : 0;
    if (!w->cap || !w->index[slot]) {
        hr = psdb__error_const(PSDB_E_NOT_FOUND,
                               "psdb_derivation_writer_add: the base key is no base of the writer");
        goto cleanup;
    }
    size_t len = w->records.len;
    psdb__buf_append(&w->records, d->key, 32);
    psdb__buf_u32(&w->records, w->index[slot] - 1u);
    psdb__buf_u32(&w->records, mask);
    for (uint32_t i = 0; i < d->count; i++) {
        derived_state_words(&d->descs[i], words);
        for (uint32_t k = 0; k < psdb__derivation_state_word_count[d->descs[i].type]; k++)
            psdb__buf_u32(&w->records, words[k]);
    }
    hr = psdb__buf_status(&w->records);
    if (PSDB_FAILED(hr)) {
        w->records.len = len; /* nothing added: the buffer keeps what it held */
        w->records.oom = 0;
        goto cleanup;
    }
    w->num_records++;
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

size_t psdb_derivation_writer_get_serialized_size(psdb_derivation_writer *w)
{
    return w ? PSDB__DRV_HEADER_SIZE + w->bases.len + w->records.len : 0;
}

psdb_hr psdb_derivation_writer_serialize(psdb_derivation_writer *w, void *data, size_t size)
{
    const unsigned err_mark = psdb__error_mark();
    psdb_hr hr = PSDB_S_OK;
    uint8_t *b = data;
    if (!w || !b || size < psdb_derivation_writer_get_serialized_size(w)) {
        hr = psdb__error_const(PSDB_E_INVALIDARG, "psdb_derivation_writer_serialize: NULL "
                                                  "argument, or a buffer smaller than the records");
        goto cleanup;
    }
    memcpy(b, PSDB__DRV_MAGIC, 8);
    psdb__put_le32(b + 8, PSDB__DRV_VERSION);
    psdb__put_le32(b + 16, w->num_bases);
    psdb__put_le32(b + 20, w->num_records);
    psdb__put_le64(b + 24, 0);
    if (w->bases.len)
        memcpy(b + PSDB__DRV_HEADER_SIZE, w->bases.data, w->bases.len);
    if (w->records.len)
        memcpy(b + PSDB__DRV_HEADER_SIZE + w->bases.len, w->records.data, w->records.len);
    psdb__put_le32(b + 12,
                   psdb__crc32(0, b + PSDB__DRV_HEADER_SIZE, w->bases.len + w->records.len));
cleanup:
    return psdb__error_ret(hr, err_mark, __func__);
}

void psdb_derivation_writer_release(psdb_derivation_writer *w)
{
    if (!w)
        return;
    psdb__buf_free(&w->bases);
    psdb__buf_free(&w->records);
    free(w->index);
    free(w);
}
