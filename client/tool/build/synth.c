/* synth.c - the synthetic corpus generator: a deterministic, game-like SODB (synth.h).
 *
 * DESIGN
 * Everything derives from one splitmix64 stream seeded by SHA-256(seed, app name), plus one stream
 * per shader (seeded by its pool and index) so a shader's bytes never depend on the order in
 * which shaders are first used. Only integer arithmetic is used, so the corpus is the same on
 * every platform. Shaders are drawn from pools with weights 1/(rank+1) (Zipf, s = 1): a few
 * shaders are used by many pipelines, most by few, as in real games. Entries that collide with an
 * earlier one (same encoding) are redrawn, so the file holds exactly `pipelines` entries. */
#include "build/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/hash.h"

/* ---- Random numbers -------------------------------------------------------------------------- */

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n > 0); the modulo bias is irrelevant for a corpus. */
static uint64_t below(uint64_t *s, uint64_t n)
{
    return next(s) % n;
}

/* A Zipf-like pick over `n` ranks from a cumulative table of weights 2^32 / (rank + 1). */
typedef struct zipf {
    uint64_t *cum;
    uint64_t n;
} zipf;

static int zipf_init(zipf *z, uint64_t n)
{
    z->n = n;
    z->cum = malloc(n * sizeof(uint64_t));
    if (!z->cum)
        return -1;
    uint64_t total = 0;
    for (uint64_t r = 0; r < n; r++) {
        total += (1ull << 32) / (r + 1);
        z->cum[r] = total;
    }
    return 0;
}

static uint64_t zipf_pick(const zipf *z, uint64_t *s)
{
    uint64_t x = below(s, z->cum[z->n - 1]);
    uint64_t lo = 0, hi = z->n - 1;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (z->cum[mid] > x)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* ---- Shaders --------------------------------------------------------------------------------- */

enum pool_id { POOL_VS, POOL_PS, POOL_CS, POOL_GS, POOL_HS, POOL_DS, POOL_RS, POOL_COUNT };

static const struct {
    uint32_t min, max; /* bytes */
    int skew_small;    /* min of two draws: most shaders small, a tail of large ones */
} SIZES[POOL_COUNT] = {
    {1536, 8192, 0},  /* VS */
    {2048, 32768, 1}, /* PS */
    {2048, 28672, 1}, /* CS */
    {2048, 8192, 0},  /* GS */
    {2048, 6144, 0},  /* HS */
    {2048, 8192, 0},  /* DS */
    {64, 512, 0},     /* root signatures */
};

/* A lazily filled cache of one pool's shaders; indices past `n` are fresh shaders used only to
 * break collisions. */
typedef struct pool {
    psdb_shader *items;
    uint64_t n, cap;
    zipf z;
} pool;

typedef struct gen {
    uint64_t rng;
    uint64_t seed_base;
    pool pools[POOL_COUNT];
    int oom;
} gen;

static const psdb_shader *shader(gen *g, int pid, uint64_t index)
{
    pool *p = &g->pools[pid];
    if (index >= p->cap) {
        uint64_t cap = p->cap ? p->cap : 16;
        while (cap <= index)
            cap *= 2;
        psdb_shader *items = realloc(p->items, cap * sizeof(*items));
        if (!items) {
            g->oom = 1;
            return NULL;
        }
        memset(items + p->cap, 0, (cap - p->cap) * sizeof(*items));
        p->items = items;
        p->cap = cap;
    }
    psdb_shader *s = &p->items[index];
    if (!s->code) {
        uint64_t st = g->seed_base ^ ((uint64_t)pid << 56) ^ (index * 0xD1B54A32D192ED03ull);
        uint32_t span = SIZES[pid].max - SIZES[pid].min;
        uint64_t a = below(&st, span), b = below(&st, span);
        size_t size = SIZES[pid].min + (size_t)(SIZES[pid].skew_small && b < a ? b : a);
        uint8_t *code = malloc(size);
        if (!code) {
            g->oom = 1;
            return NULL;
        }
        /* A DXBC-like container header, then pseudo-random bytes. */
        static const char *tags[POOL_COUNT] = {"DXBCvs", "DXBCps", "DXBCcs", "DXBCgs",
                                               "DXBChs", "DXBCds", "RTS0rs"};
        memcpy(code, tags[pid], 6);
        for (size_t i = 6; i < size; i += 8) {
            uint64_t v = next(&st);
            size_t n = size - i < 8 ? size - i : 8;
            for (size_t k = 0; k < n; k++)
                code[i + k] = (uint8_t)(v >> (8 * k));
        }
        s->code = code;
        s->size = size;
    }
    return s;
}

static const psdb_shader *pick(gen *g, int pid, int fresh)
{
    pool *p = &g->pools[pid];
    uint64_t index = fresh ? p->n + (uint64_t)fresh - 1 : zipf_pick(&p->z, &g->rng);
    return shader(g, pid, index);
}

/* ---- Fixed tables ---------------------------------------------------------------------------- */

static const psdb_input_element_desc IL_POS[] = {
    {"POSITION", 0, PSDB_FORMAT_R32G32B32_FLOAT, 0, 0, 0, 0}};
static const psdb_input_element_desc IL_MESH[] = {
    {"POSITION", 0, PSDB_FORMAT_R32G32B32_FLOAT, 0, 0, 0, 0},
    {"NORMAL", 0, PSDB_FORMAT_R16G16B16A16_SNORM, 0, 12, 0, 0},
    {"TEXCOORD", 0, PSDB_FORMAT_R16G16_FLOAT, 0, 20, 0, 0}};
static const psdb_input_element_desc IL_TANGENT[] = {
    {"POSITION", 0, PSDB_FORMAT_R32G32B32_FLOAT, 0, 0, 0, 0},
    {"NORMAL", 0, PSDB_FORMAT_R16G16B16A16_SNORM, 0, 12, 0, 0},
    {"TANGENT", 0, PSDB_FORMAT_R16G16B16A16_SNORM, 0, 20, 0, 0},
    {"TEXCOORD", 0, PSDB_FORMAT_R16G16_FLOAT, 0, 28, 0, 0}};
static const psdb_input_element_desc IL_SKINNED[] = {
    {"POSITION", 0, PSDB_FORMAT_R32G32B32_FLOAT, 0, 0, 0, 0},
    {"NORMAL", 0, PSDB_FORMAT_R16G16B16A16_SNORM, 0, 12, 0, 0},
    {"TEXCOORD", 0, PSDB_FORMAT_R16G16_FLOAT, 0, 20, 0, 0},
    {"BLENDINDICES", 0, PSDB_FORMAT_R8G8B8A8_UINT, 1, 0, 0, 0},
    {"BLENDWEIGHT", 0, PSDB_FORMAT_R8G8B8A8_UNORM, 1, 4, 0, 0}};
static const psdb_input_element_desc IL_INSTANCED[] = {
    {"POSITION", 0, PSDB_FORMAT_R32G32B32_FLOAT, 0, 0, 0, 0},
    {"TEXCOORD", 0, PSDB_FORMAT_R16G16_FLOAT, 0, 12, 0, 0},
    {"INSTANCE", 0, PSDB_FORMAT_R32G32B32A32_FLOAT, 1, 0, 1, 1},
    {"INSTANCE", 1, PSDB_FORMAT_R32G32B32A32_FLOAT, 1, 16, 1, 1},
    {"INSTANCE", 2, PSDB_FORMAT_R32G32B32A32_FLOAT, 1, 32, 1, 1}};
static const psdb_input_element_desc IL_UI[] = {
    {"POSITION", 0, PSDB_FORMAT_R32G32_FLOAT, 0, 0, 0, 0},
    {"COLOR", 0, PSDB_FORMAT_R8G8B8A8_UNORM, 0, 8, 0, 0},
    {"TEXCOORD", 0, PSDB_FORMAT_R32G32_FLOAT, 0, 12, 0, 0}};

#define IL(a)                                                                                      \
    {                                                                                              \
        a, sizeof(a) / sizeof(a[0])                                                                \
    }
static const psdb_input_layout_desc LAYOUTS[] = {{NULL, 0},      IL(IL_POS),     IL(IL_MESH),
                                                 IL(IL_TANGENT), IL(IL_SKINNED), IL(IL_INSTANCED),
                                                 IL(IL_UI)};

typedef struct rt_setup {
    uint32_t weight;
    int ps; /* 0 no PS, 1 PS */
    uint32_t num_rt;
    uint32_t formats[4];
    psdb_ps_output outputs[4];
    uint32_t dsv;
    uint32_t layout_min, layout_max; /* input layouts drawn from this range of LAYOUTS */
} rt_setup;

static const rt_setup SETUPS[] = {
    /* G-buffer: albedo, normals, material, emissive. */
    {35,
     1,
     4,
     {PSDB_FORMAT_R8G8B8A8_UNORM_SRGB, PSDB_FORMAT_R10G10B10A2_UNORM, PSDB_FORMAT_R8G8B8A8_UNORM,
      PSDB_FORMAT_R11G11B10_FLOAT},
     {{4, PSDB_COMPONENT_FLOAT},
      {4, PSDB_COMPONENT_FLOAT},
      {4, PSDB_COMPONENT_FLOAT},
      {3, PSDB_COMPONENT_FLOAT}},
     PSDB_FORMAT_D24_UNORM_S8_UINT,
     2,
     5},
    /* Forward HDR. */
    {25,
     1,
     1,
     {PSDB_FORMAT_R16G16B16A16_FLOAT},
     {{4, PSDB_COMPONENT_FLOAT}},
     PSDB_FORMAT_D32_FLOAT,
     2,
     5},
    /* Shadow depth-only. */
    {15, 0, 0, {0}, {{0, 0}}, PSDB_FORMAT_D32_FLOAT, 1, 5},
    /* Post-processing (full-screen triangle, no vertex input). */
    {10, 1, 1, {PSDB_FORMAT_R11G11B10_FLOAT}, {{3, PSDB_COMPONENT_FLOAT}}, 0, 0, 0},
    /* UI. */
    {10, 1, 1, {PSDB_FORMAT_R8G8B8A8_UNORM}, {{4, PSDB_COMPONENT_FLOAT}}, 0, 6, 6},
    /* Velocity + object id. */
    {5,
     1,
     2,
     {PSDB_FORMAT_R16G16_FLOAT, PSDB_FORMAT_R32_UINT},
     {{2, PSDB_COMPONENT_FLOAT}, {1, PSDB_COMPONENT_UINT}},
     PSDB_FORMAT_D32_FLOAT,
     2,
     5},
};

/* Variant state: what a derived PSO may override. */
#define NUM_BLENDS 6u
#define NUM_DEPTHS 5u
#define NUM_RASTERS 5u
#define NUM_MASKS 2u
#define NUM_COMBOS (NUM_BLENDS * NUM_DEPTHS * NUM_RASTERS * NUM_MASKS)

static void apply_combo(psdb_graphics_pipeline_desc *d, uint32_t combo)
{
    uint32_t blend = combo % NUM_BLENDS, depth = combo / NUM_BLENDS % NUM_DEPTHS;
    uint32_t raster = combo / (NUM_BLENDS * NUM_DEPTHS) % NUM_RASTERS;
    uint32_t mask = combo / (NUM_BLENDS * NUM_DEPTHS * NUM_RASTERS);
    psdb_render_target_blend_desc rt = {0,
                                        0,
                                        PSDB_BLEND_ONE,
                                        PSDB_BLEND_ZERO,
                                        PSDB_BLEND_OP_ADD,
                                        PSDB_BLEND_ONE,
                                        PSDB_BLEND_ZERO,
                                        PSDB_BLEND_OP_ADD,
                                        0,
                                        PSDB_COLOR_WRITE_ENABLE_ALL};
    switch (blend) {
    case 1: /* alpha blending */
        rt.blend_enable = 1;
        rt.src_blend = PSDB_BLEND_SRC_ALPHA;
        rt.dest_blend = PSDB_BLEND_INV_SRC_ALPHA;
        break;
    case 2: /* additive */
        rt.blend_enable = 1;
        rt.dest_blend = PSDB_BLEND_ONE;
        break;
    case 3: /* premultiplied alpha */
        rt.blend_enable = 1;
        rt.dest_blend = PSDB_BLEND_INV_SRC_ALPHA;
        break;
    case 4: /* colour only */
        rt.render_target_write_mask = PSDB_COLOR_WRITE_ENABLE_RED | PSDB_COLOR_WRITE_ENABLE_GREEN |
                                      PSDB_COLOR_WRITE_ENABLE_BLUE;
        break;
    case 5: /* multiplicative */
        rt.blend_enable = 1;
        rt.src_blend = PSDB_BLEND_DEST_COLOR;
        break;
    default:
        break;
    }
    memset(&d->blend, 0, sizeof(d->blend));
    for (int i = 0; i < PSDB_MAX_RENDER_TARGETS; i++)
        d->blend.render_target[i] = rt;

    static const psdb_depth_stencil_desc DEPTHS[NUM_DEPTHS] = {
        {1, 1, 2 /* LESS */, 0, 0xFF, 0xFF, {1, 1, 1, 8}, {1, 1, 1, 8}},
        {1, 0, 4 /* LESS_EQUAL */, 0, 0xFF, 0xFF, {1, 1, 1, 8}, {1, 1, 1, 8}},
        {1, 0, 3 /* EQUAL */, 0, 0xFF, 0xFF, {1, 1, 1, 8}, {1, 1, 1, 8}},
        {0, 0, 8, 0, 0xFF, 0xFF, {1, 1, 1, 8}, {1, 1, 1, 8}},
        {1, 1, 7 /* GREATER_EQUAL */, 1, 0xFF, 0x0F, {1, 1, 3, 8}, {1, 1, 3, 8}},
    };
    d->depth_stencil = DEPTHS[depth];

    psdb_rasterizer_desc r = {.fill_mode = 3, .cull_mode = 3, .depth_clip_enable = 1};
    switch (raster) {
    case 1:
        r.cull_mode = 1;
        break;
    case 2:
        r.cull_mode = 2;
        break;
    case 3:
        r.depth_bias = 100;
        r.slope_scaled_depth_bias = 1.5f;
        r.depth_bias_clamp = 0.01f;
        break;
    case 4:
        r.fill_mode = 2;
        r.cull_mode = 1;
        break;
    default:
        break;
    }
    d->rasterizer = r;
    d->sample_mask = mask ? 0x0000FFFFu : 0xFFFFFFFFu;
}

/* ---- The corpus ------------------------------------------------------------------------------ */

typedef struct base {
    psdb_graphics_pipeline_desc d;
    uint32_t first_combo, step, tried, emitted;
    int active;
} base;

static const uint32_t STEPS[] = {7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47};

static int new_base(gen *g, base *b, int fresh)
{
    uint32_t total = 0, x;
    memset(b, 0, sizeof(*b));
    for (size_t i = 0; i < sizeof(SETUPS) / sizeof(SETUPS[0]); i++)
        total += SETUPS[i].weight;
    x = (uint32_t)below(&g->rng, total);
    size_t si = 0;
    while (x >= SETUPS[si].weight) {
        x -= SETUPS[si].weight;
        si++;
    }
    const rt_setup *s = &SETUPS[si];
    psdb_graphics_pipeline_desc *d = &b->d;
    const psdb_shader *rs = pick(g, POOL_RS, 0);
    const psdb_shader *vs = pick(g, POOL_VS, 0);
    if (!rs || !vs)
        return -1;
    d->root_signature = rs->code;
    d->root_signature_size = rs->size;
    d->vs = *vs;
    /* Depth-only passes run a PS only for alpha testing (it writes no colour). */
    if (s->ps || below(&g->rng, 2) == 0) {
        const psdb_shader *ps = pick(g, POOL_PS, fresh);
        if (!ps)
            return -1;
        d->ps = *ps;
    } else if (fresh) {
        const psdb_shader *v2 = pick(g, POOL_VS, fresh);
        if (!v2)
            return -1;
        d->vs = *v2;
    }
    d->input_layout = LAYOUTS[s->layout_min + below(&g->rng, s->layout_max - s->layout_min + 1)];
    d->primitive_topology_type = 3; /* triangles */
    uint64_t r = below(&g->rng, 100);
    if (r < 5 && s->num_rt > 0) { /* tessellated */
        const psdb_shader *hs = pick(g, POOL_HS, 0), *ds = pick(g, POOL_DS, 0);
        if (!hs || !ds)
            return -1;
        d->hs = *hs;
        d->ds = *ds;
        d->primitive_topology_type = 4; /* patches */
    } else if (r < 7 && s->num_rt > 0) {
        const psdb_shader *gs = pick(g, POOL_GS, 0);
        if (!gs)
            return -1;
        d->gs = *gs;
    } else if (r < 9) {
        d->primitive_topology_type = 2; /* lines */
    }
    d->num_render_targets = s->num_rt;
    for (uint32_t i = 0; i < s->num_rt; i++) {
        d->rtv_formats[i] = s->formats[i];
        d->ps_outputs[i] = s->outputs[i];
    }
    d->dsv_format = s->dsv;
    d->sample_count = (si == 1 && below(&g->rng, 10) == 0) ? 4 : 1;
    b->first_combo = (uint32_t)below(&g->rng, NUM_COMBOS);
    b->step = STEPS[below(&g->rng, sizeof(STEPS) / sizeof(STEPS[0]))];
    b->active = 1;
    return 0;
}

/* ---- Patches ---------------------------------------------------------------------------------
 * A patch must leave every untouched pipeline byte-identical to the corpus, so the corpus's own
 * draws (which depend on which entries were duplicates) must not change: in a patch, duplicates
 * are decided against a set of the corpus entries drawn so far, not against what was written
 * (a removed entry is drawn but not written). Touch decisions come from their own stream. */

/* The 16-byte digests of the corpus entries drawn so far (open addressing, power-of-two size). */
typedef struct digest_set {
    uint8_t (*slots)[16];
    uint64_t cap, used;
} digest_set;

static int set_empty_slot(const uint8_t s[16])
{
    static const uint8_t zero[16];
    return memcmp(s, zero, 16) == 0;
}

/* 1 inserted, 0 already present, -1 out of memory. An all-zero digest is nudged (never seen in
 * SHA-256 output anyway) so that zero marks an empty slot. */
static int set_insert(digest_set *set, const uint8_t d_in[16])
{
    uint8_t d[16];
    memcpy(d, d_in, 16);
    if (set_empty_slot(d))
        d[0] = 1;
    if ((set->used + 1) * 2 > set->cap) {
        uint64_t cap = set->cap ? set->cap * 2 : 1024;
        uint8_t(*slots)[16] = calloc(cap, 16);
        if (!slots)
            return -1;
        for (uint64_t i = 0; i < set->cap; i++) {
            if (set_empty_slot(set->slots[i]))
                continue;
            uint64_t j = psdb__le64(set->slots[i]) & (cap - 1);
            while (!set_empty_slot(slots[j]))
                j = (j + 1) & (cap - 1);
            memcpy(slots[j], set->slots[i], 16);
        }
        free(set->slots);
        set->slots = slots;
        set->cap = cap;
    }
    uint64_t j = psdb__le64(d) & (set->cap - 1);
    while (!set_empty_slot(set->slots[j])) {
        if (memcmp(set->slots[j], d, 16) == 0)
            return 0;
        j = (j + 1) & (set->cap - 1);
    }
    memcpy(set->slots[j], d, 16);
    set->used++;
    return 1;
}

static int set_contains(const digest_set *set, const uint8_t d_in[16])
{
    uint8_t d[16];
    memcpy(d, d_in, 16);
    if (set_empty_slot(d))
        d[0] = 1;
    if (!set->cap)
        return 0;
    for (uint64_t j = psdb__le64(d) & (set->cap - 1); !set_empty_slot(set->slots[j]);
         j = (j + 1) & (set->cap - 1))
        if (memcmp(set->slots[j], d, 16) == 0)
            return 1;
    return 0;
}

enum patch_phase { PHASE_CORPUS, PHASE_ADDED };

typedef struct sink {
    psdb_sodb_writer *w;
    /* Patch state: unused (patching 0) when writing the corpus itself. */
    int patching;
    enum patch_phase phase;
    uint64_t patch_rng;
    uint32_t changed_permille;
    digest_set drawn;
    uint64_t replaced; /* corpus entries removed, each to be replaced by a new one */
    psdb__buf edited;  /* the bytes of the current edited shader */
} sink;

/* Digest of one description: the first half of its SODB object key (the kinds' encodings start
 * with different magics, so no two kinds share a key). */
static psdb_hr entry_digest(uint32_t kind, const void *desc, uint8_t out[16])
{
    uint8_t key[32];
    psdb_hr hr = kind == PSDB_SODB_COMPUTE ? psdb_sodb_compute_key(desc, key)
                                           : psdb_sodb_graphics_key(desc, key);
    if (PSDB_SUCCEEDED(hr))
        memcpy(out, key, 16);
    return hr;
}

/* An edit of one shader: same size and container tag, a run of about an eighth of its bytes
 * rewritten from the patch stream (a changed function), so the edited shader is new bytecode. */
static psdb_hr edit_shader(sink *k, const psdb_shader *in, psdb_shader *out)
{
    psdb__buf_free(&k->edited);
    psdb__buf_append(&k->edited, in->code, in->size);
    if (PSDB_FAILED(psdb__buf_status(&k->edited)))
        return PSDB_E_OUTOFMEMORY;
    uint8_t *b = k->edited.data;
    size_t n = in->size > 6 ? in->size - 6 : 0;
    size_t run = n / 8 ? n / 8 : n;
    size_t at = 6 + (n > run ? (size_t)below(&k->patch_rng, n - run + 1) : 0);
    for (size_t i = 0; i < run; i++)
        b[at + i] ^= (uint8_t)(next(&k->patch_rng) | 1); /* never a no-op */
    out->code = b;
    out->size = in->size;
    return PSDB_S_OK;
}

/* What happens to a corpus entry in the patch: 0 kept, 1 edited, 2 removed (and replaced). */
static int touch(sink *k)
{
    if (below(&k->patch_rng, 1000) >= k->changed_permille)
        return 0;
    return below(&k->patch_rng, 2) == 0 ? 1 : 2;
}

/* In a patch: S_FALSE for a corpus duplicate (the corpus would redraw), else S_OK after writing
 * what the patch makes of the entry. For added entries: S_FALSE also for anything the corpus
 * drew, so an added pipeline is never one of version N. */
static psdb_hr patch_gate(sink *k, uint32_t kind, const void *desc, int *action)
{
    uint8_t d[16];
    *action = 0;
    psdb_hr hr = entry_digest(kind, desc, d);
    if (PSDB_FAILED(hr))
        return hr;
    if (k->phase == PHASE_ADDED)
        return set_contains(&k->drawn, d) ? PSDB_S_FALSE : PSDB_S_OK;
    int r = set_insert(&k->drawn, d);
    if (r < 0)
        return PSDB_E_OUTOFMEMORY;
    if (r == 0)
        return PSDB_S_FALSE;
    *action = touch(k);
    return PSDB_S_OK;
}

/* Adds one description: S_OK added, S_FALSE a duplicate, or a failure. */
static psdb_hr emit_graphics(sink *k, const psdb_graphics_pipeline_desc *d)
{
    int action = 0;
    psdb_hr hr = k->patching ? patch_gate(k, PSDB_SODB_GRAPHICS, d, &action) : PSDB_S_OK;
    if (hr != PSDB_S_OK)
        return hr;
    if (action == 2) {
        k->replaced++;
        return PSDB_S_OK;
    }
    if (action == 1) {
        psdb_graphics_pipeline_desc e = *d;
        psdb_shader *target = e.ps.code ? &e.ps : &e.vs;
        hr = edit_shader(k, target, target);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_sodb_writer_add_graphics(k->w, 1, &e);
        /* An edit that happens to equal a written entry is simply not there twice. */
        return hr == PSDB_S_FALSE ? PSDB_S_OK : hr;
    }
    return psdb_sodb_writer_add_graphics(k->w, 1, d);
}

static psdb_hr emit_compute(sink *k, const psdb_compute_pipeline_desc *d)
{
    int action = 0;
    psdb_hr hr = k->patching ? patch_gate(k, PSDB_SODB_COMPUTE, d, &action) : PSDB_S_OK;
    if (hr != PSDB_S_OK)
        return hr;
    if (action == 2) {
        k->replaced++;
        return PSDB_S_OK;
    }
    if (action == 1) {
        psdb_compute_pipeline_desc e = *d;
        hr = edit_shader(k, &d->cs, &e.cs);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_sodb_writer_add_compute(k->w, 1, &e);
        return hr == PSDB_S_FALSE ? PSDB_S_OK : hr;
    }
    return psdb_sodb_writer_add_compute(k->w, 1, d);
}

static psdb_hr add_compute(gen *g, sink *k)
{
    psdb_hr hr = PSDB_S_FALSE;
    /* Skewed picks first; after a few collisions a shader no entry has used yet. */
    for (int attempt = 0; hr == PSDB_S_FALSE; attempt++) {
        int fresh = attempt < 8 ? 0 : attempt - 7;
        const psdb_shader *rs = pick(g, POOL_RS, 0), *cs = pick(g, POOL_CS, fresh);
        if (!rs || !cs)
            return PSDB_E_OUTOFMEMORY;
        psdb_compute_pipeline_desc d = {rs->code, rs->size, *cs, NULL};
        hr = emit_compute(k, &d);
    }
    return hr;
}

static psdb_hr add_graphics(gen *g, sink *k, base *b, uint32_t variants)
{
    psdb_hr hr = PSDB_S_FALSE;
    for (int attempt = 0; hr == PSDB_S_FALSE; attempt++) {
        if (!b->active || b->emitted >= variants || b->tried >= NUM_COMBOS) {
            int fresh = attempt < 8 ? 0 : attempt - 7;
            if (new_base(g, b, fresh) != 0)
                return PSDB_E_OUTOFMEMORY;
        }
        psdb_graphics_pipeline_desc d = b->d;
        apply_combo(&d, (b->first_combo + b->tried * b->step) % NUM_COMBOS);
        b->tried++;
        hr = emit_graphics(k, &d);
        if (hr == PSDB_S_OK)
            b->emitted++;
        else if (hr == PSDB_S_FALSE && b->emitted == 0)
            b->active = 0; /* the base itself collides: draw another */
    }
    return hr;
}

/* A raytracing pipeline: ray generation, miss and closest-hit shaders in one to three libraries
 * (compute-like bytecode from the CS pool, so popular libraries recur) and one hit group. */
static psdb_hr add_state_object(gen *g, sink *k)
{
    static const char *const raygen[] = {"RayGen"}, *const miss[] = {"Miss", "ShadowMiss"},
                             *const hit[] = {"ClosestHit", "AnyHit"};
    psdb_hr hr = PSDB_S_FALSE;
    for (int attempt = 0; hr == PSDB_S_FALSE; attempt++) {
        int fresh = attempt < 8 ? 0 : attempt - 7;
        const psdb_shader *rs = pick(g, POOL_RS, 0);
        uint32_t nlib = 1 + (uint32_t)below(&g->rng, 3);
        psdb_dxil_library_desc libs[3];
        static const char *const *const exports[3] = {raygen, miss, hit};
        static const uint32_t num_exports[3] = {1, 2, 2};
        psdb_hit_group_desc hg = {.name = "HitGroup",
                                  .closest_hit = "ClosestHit",
                                  .any_hit = nlib == 3 ? "AnyHit" : NULL};
        psdb_state_subobject subs[5];
        uint32_t n = 0;
        if (!rs)
            return PSDB_E_OUTOFMEMORY;
        subs[n++] = (psdb_state_subobject){PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE, rs};
        for (uint32_t i = 0; i < nlib; i++) {
            const psdb_shader *code = pick(g, POOL_CS, i + 1 == nlib ? fresh : 0);
            if (!code)
                return PSDB_E_OUTOFMEMORY;
            libs[i] = (psdb_dxil_library_desc){*code, exports[i], num_exports[i]};
            subs[n++] = (psdb_state_subobject){PSDB_SUBOBJECT_DXIL_LIBRARY, &libs[i]};
        }
        if (nlib == 3)
            subs[n++] = (psdb_state_subobject){PSDB_SUBOBJECT_HIT_GROUP, &hg};
        psdb_state_object_desc d = {PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, n, subs};
        hr = psdb_sodb_writer_add_state_object(k->w, 1, &d);
    }
    return hr;
}

psdb_hr psdb__synth_identity(const psdb__synth_params *p, char *exe_buf, size_t exe_size,
                             psdb_app_identity *out)
{
    if (!p || !out || !p->app_name || !*p->app_name || p->app_version == 0 || !exe_buf)
        return PSDB_E_INVALIDARG;
    memset(out, 0, sizeof(*out));
    const char *exe = p->exe_filename;
    if (!exe) {
        int n = snprintf(exe_buf, exe_size, "%s.exe", p->app_name);
        if (n < 0 || (size_t)n >= exe_size)
            return PSDB_E_INVALIDARG;
        exe = exe_buf;
    }
    out->desc.exe_filename = exe;
    out->desc.name = p->app_name;
    out->desc.version = p->app_version;
    out->desc.engine_name = p->engine_name ? p->engine_name : "psdb-synth";
    out->desc.engine_version = p->engine_name ? p->engine_version : PSDB_VERSION(1, 0, 0, 0);
    if (p->app_id) {
        memcpy(out->app_id, p->app_id, 16);
    } else {
        uint8_t h[32];
        psdb__sha256(p->app_name, strlen(p->app_name), h);
        memcpy(out->app_id, h, 16);
    }
    return PSDB_S_OK;
}

psdb_hr psdb__synth_write(const psdb__synth_params *p, const char *path)
{
    psdb_hr hr = PSDB_S_OK;
    gen g = {0};
    sink k = {0};
    base b = {0};
    char *tmp = NULL, exe[512];
    psdb_app_identity id;
    psdb__buf sb = {0};
    uint8_t h[32];

    if (!p || !path || p->pipelines == 0 || p->variants == 0 ||
        p->variants > PSDB_SYNTH_MAX_VARIANTS || p->compute_permille > 1000 ||
        p->changed_permille > 1000 || (p->changed_permille && !p->patch) ||
        (p->engine_name == NULL && p->engine_version != 0))
        return PSDB_E_INVALIDARG;
    hr = psdb__synth_identity(p, exe, sizeof(exe), &id);
    if (PSDB_FAILED(hr))
        return hr;

    psdb__buf_append(&sb, "psdb.synth.v1", 13);
    psdb__buf_u64(&sb, p->seed);
    psdb__buf_append(&sb, p->app_name, strlen(p->app_name));
    if (PSDB_FAILED(psdb__buf_status(&sb))) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    psdb__sha256(sb.data, sb.len, h);
    g.rng = psdb__le64(h);
    g.seed_base = psdb__le64(h + 8);
    if (p->patch) {
        /* Its own stream: the corpus's draws are the same whatever the patch. */
        psdb__buf_append(&sb, "psdb.synth.patch.v1", 19);
        psdb__buf_u64(&sb, p->patch);
        if (PSDB_FAILED(psdb__buf_status(&sb))) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
        psdb__sha256(sb.data, sb.len, h);
        k.patching = 1;
        k.patch_rng = psdb__le64(h);
        k.changed_permille = p->changed_permille;
    }

    uint64_t n = p->pipelines;
    uint64_t n_compute = n * p->compute_permille / 1000;
    uint64_t n_graphics = n - n_compute;
    uint64_t n_bases = (n_graphics + p->variants - 1) / p->variants;
    uint64_t sizes[POOL_COUNT] = {n_bases / 3 + 4, n_bases / 2 + 4, n_compute * 2 / 3 + 4, 4, 4, 4,
                                  3 + n / 2000};
    for (int i = 0; i < POOL_COUNT; i++) {
        g.pools[i].n = sizes[i];
        if (zipf_init(&g.pools[i].z, sizes[i]) != 0) {
            hr = PSDB_E_OUTOFMEMORY;
            goto cleanup;
        }
    }

    size_t plen = strlen(path);
    tmp = malloc(plen + 5);
    if (!tmp) {
        hr = PSDB_E_OUTOFMEMORY;
        goto cleanup;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    unlink(tmp);
    hr = psdb_sodb_writer_open_ex(tmp, &id, PSDB_SODB_WRITER_BULK, &k.w);
    if (PSDB_FAILED(hr))
        goto cleanup;

    for (uint64_t i = 0; i < n; i++) {
        /* Spread compute entries evenly among graphics ones. */
        int compute = (i + 1) * n_compute / n > i * n_compute / n;
        hr = compute ? add_compute(&g, &k) : add_graphics(&g, &k, &b, p->variants);
        if (g.oom)
            hr = PSDB_E_OUTOFMEMORY;
        if (PSDB_FAILED(hr))
            goto cleanup;
        if (p->progress && ((i + 1) % 1000 == 0 || i + 1 == n))
            p->progress(i + 1, n, p->progress_ctx);
    }
    /* The patch's new pipelines, one per removed one, drawn after the corpus (so they change
     * none of its draws) and never equal to a corpus entry. */
    uint64_t corpus_rng = g.rng;
    k.phase = PHASE_ADDED;
    g.rng = k.patch_rng ^ 0xA5A5A5A5A5A5A5A5ull;
    for (uint64_t i = 0, n_new = k.replaced; i < n_new; i++) {
        int compute = (i + 1) * n_compute / n > i * n_compute / n;
        hr = compute ? add_compute(&g, &k) : add_graphics(&g, &k, &b, p->variants);
        if (g.oom)
            hr = PSDB_E_OUTOFMEMORY;
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    g.rng = corpus_rng; /* the state objects are the corpus's */
    for (uint64_t i = 0; i < p->state_objects; i++) {
        hr = add_state_object(&g, &k);
        if (g.oom)
            hr = PSDB_E_OUTOFMEMORY;
        if (PSDB_FAILED(hr))
            goto cleanup;
    }
    hr = psdb_sodb_writer_commit(k.w);
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb_sodb_writer_release(k.w);
    k.w = NULL;
    if (rename(tmp, path) != 0) {
        hr = PSDB_E_IO;
        goto cleanup;
    }
cleanup:
    psdb_sodb_writer_release(k.w);
    if (tmp && PSDB_FAILED(hr))
        unlink(tmp);
    free(tmp);
    psdb__buf_free(&k.edited);
    free(k.drawn.slots);
    psdb__buf_free(&sb);
    for (int i = 0; i < POOL_COUNT; i++) {
        for (uint64_t j = 0; j < g.pools[i].cap; j++)
            free((void *)g.pools[i].items[j].code);
        free(g.pools[i].items);
        free(g.pools[i].z.cum);
    }
    return hr;
}
