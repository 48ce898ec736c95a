/* record_sodb.c - what an engine does to ship precompiled shaders: record the pipelines it creates
 * into an SODB through <psdb/sodb.h>, read them back, and compile them for one GPU family with the
 * reference compiler. Usage: record_sodb OUT.sodb [OUT.psdb]. Prints what it did; exits 0 when
 * every step succeeded and every entry read back is the description recorded. Public API only:
 * build it against an installed libpsdb with `cc record_sodb.c $(pkg-config --cflags --libs psdb)`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <psdb/psdb.h>

/* Stand-ins for what a real engine passes to D3D12: root signatures and shader bytecode are opaque
 * byte strings to psdb (the reference compiler hashes and transforms them, it does not parse them).
 */
static const char ROOT_SIGNATURE[] = "root signature: 2 CBVs, 1 table";
static const char BLUR_CS[] = "DXBC compute: separable blur";
static const char CULL_CS[] = "DXBC compute: GPU culling";
static const char MESH_VS[] = "DXBC vertex: skinned mesh";
static const char MESH_PS[] = "DXBC pixel: PBR lighting";
static const char RT_LIBRARY[] = "DXIL library: RayGen, Miss, ClosestHit";

static const psdb_app_identity IDENTITY = {
    .desc = {.exe_filename = "example.exe",
             .name = "Record Example",
             .version = PSDB_VERSION(1, 0, 0, 0),
             .engine_name = "example-engine",
             .engine_version = PSDB_VERSION(2, 1, 0, 0)},
    .app_id = {0x52, 0x45, 0x43, 0x4f, 0x52, 0x44, 0x2d, 0x45, 0x58, 0x41, 0x4d, 0x50, 0x4c, 0x45,
               0x00, 0x01},
};

#define NUM_ENTRIES 5u

/* What was recorded, to compare the read-back entries with. */
typedef struct recorded {
    uint32_t kind;
    uint8_t key[32];
} recorded;

typedef struct reader {
    const recorded *expect;
    uint32_t seen, mismatched;
    psdb_hr hr; /* the first decode failure */
} reader;

static psdb_compute_pipeline_desc compute_desc(const char *cs)
{
    psdb_compute_pipeline_desc d = {.root_signature = ROOT_SIGNATURE,
                                    .root_signature_size = sizeof(ROOT_SIGNATURE),
                                    .cs = {cs, strlen(cs) + 1}};
    return d;
}

/* An opaque G-buffer pass; `blended` gives the variant a game would create for a decal pass. */
static psdb_graphics_pipeline_desc graphics_desc(int blended)
{
    psdb_graphics_pipeline_desc d;
    memset(&d, 0, sizeof(d));
    d.root_signature = ROOT_SIGNATURE;
    d.root_signature_size = sizeof(ROOT_SIGNATURE);
    d.vs = (psdb_shader){MESH_VS, sizeof(MESH_VS)};
    d.ps = (psdb_shader){MESH_PS, sizeof(MESH_PS)};
    d.sample_mask = 0xFFFFFFFFu;
    d.num_render_targets = 1;
    d.rtv_formats[0] = PSDB_FORMAT_R16G16B16A16_FLOAT;
    d.dsv_format = PSDB_FORMAT_D32_FLOAT;
    d.sample_count = 1;
    d.ps_outputs[0] = (psdb_ps_output){4, PSDB_COMPONENT_FLOAT};
    d.depth_stencil.depth_enable = 1;
    d.depth_stencil.depth_write_mask = 1;
    d.depth_stencil.depth_func = 2; /* LESS */
    if (blended) {
        d.blend.render_target[0] = (psdb_render_target_blend_desc){
            .blend_enable = 1,
            .src_blend = PSDB_BLEND_SRC_ALPHA,
            .dest_blend = PSDB_BLEND_INV_SRC_ALPHA,
            .blend_op = PSDB_BLEND_OP_ADD,
            .src_blend_alpha = PSDB_BLEND_ONE,
            .dest_blend_alpha = PSDB_BLEND_ZERO,
            .blend_op_alpha = PSDB_BLEND_OP_ADD,
            .render_target_write_mask = PSDB_COLOR_WRITE_ENABLE_ALL};
        d.depth_stencil.depth_write_mask = 0;
    }
    return d;
}

/* One description of each kind the writer takes. */
typedef struct item {
    uint32_t kind; /* PSDB_SODB_COMPUTE, _GRAPHICS or _STATE_OBJECT */
    const void *desc;
} item;

static psdb_hr add(psdb_sodb_writer *w, const item *it)
{
    if (it->kind == PSDB_SODB_COMPUTE)
        return psdb_sodb_writer_add_compute(w, 1, it->desc);
    if (it->kind == PSDB_SODB_GRAPHICS)
        return psdb_sodb_writer_add_graphics(w, 1, it->desc);
    return psdb_sodb_writer_add_state_object(w, 1, it->desc);
}

/* The key an entry is recorded under, and its compiled code stored under in a PSDB. */
static psdb_hr key_of(uint32_t kind, const void *desc, uint8_t out[32])
{
    if (kind == PSDB_SODB_COMPUTE)
        return psdb_sodb_compute_key(desc, out);
    if (kind == PSDB_SODB_GRAPHICS)
        return psdb_sodb_graphics_key(desc, out);
    return psdb_sodb_state_object_key(desc, out);
}

/* Records the five descriptions, each twice as an engine that records every creation does (the
 * second add of the same description changes nothing), and keeps their kinds and keys. */
static psdb_hr record(psdb_sodb_writer *w, recorded out[NUM_ENTRIES], uint32_t *added)
{
    psdb_hr hr = PSDB_S_OK;
    psdb_compute_pipeline_desc blur = compute_desc(BLUR_CS), cull = compute_desc(CULL_CS);
    psdb_graphics_pipeline_desc opaque = graphics_desc(0), decal = graphics_desc(1);
    static const char *const exports[] = {"RayGen", "Miss", "ClosestHit"};
    psdb_shader rs = {ROOT_SIGNATURE, sizeof(ROOT_SIGNATURE)};
    psdb_dxil_library_desc lib = {{RT_LIBRARY, sizeof(RT_LIBRARY)}, exports, 3};
    psdb_hit_group_desc hit = {.name = "HitGroup", .closest_hit = "ClosestHit"};
    psdb_state_subobject subs[] = {{PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE, &rs},
                                   {PSDB_SUBOBJECT_DXIL_LIBRARY, &lib},
                                   {PSDB_SUBOBJECT_HIT_GROUP, &hit}};
    psdb_state_object_desc rt = {PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 3, subs};
    const item items[NUM_ENTRIES] = {{PSDB_SODB_COMPUTE, &blur},
                                     {PSDB_SODB_COMPUTE, &cull},
                                     {PSDB_SODB_GRAPHICS, &opaque},
                                     {PSDB_SODB_GRAPHICS, &decal},
                                     {PSDB_SODB_STATE_OBJECT, &rt}};

    *added = 0;
    for (uint32_t n = 0; n < 2 * NUM_ENTRIES && PSDB_SUCCEEDED(hr); n++) {
        hr = add(w, &items[n % NUM_ENTRIES]); /* S_FALSE: recorded already */
        if (hr == PSDB_S_OK)
            (*added)++;
    }
    for (uint32_t i = 0; i < NUM_ENTRIES && PSDB_SUCCEEDED(hr); i++) {
        out[i].kind = items[i].kind;
        hr = key_of(items[i].kind, items[i].desc, out[i].key);
    }
    return hr;
}

/* psdb_sodb_foreach: each entry is the one recorded at that place, and decodes into a description
 * whose key is the entry's again. */
static int check_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                       size_t size, void *ctx)
{
    reader *r = ctx;
    psdb_sodb_entry *e = NULL;
    uint8_t again[32];
    psdb_hr hr = psdb_sodb_decode(kind, desc, size, &e);
    if (PSDB_SUCCEEDED(hr))
        hr = key_of(kind,
                    kind == PSDB_SODB_COMPUTE    ? (const void *)e->compute
                    : kind == PSDB_SODB_GRAPHICS ? (const void *)e->graphics
                                                 : (const void *)e->state_object,
                    again);
    if (PSDB_FAILED(hr) && PSDB_SUCCEEDED(r->hr))
        r->hr = hr;
    if (PSDB_FAILED(hr) || r->seen >= NUM_ENTRIES || version != 1 ||
        kind != r->expect[r->seen].kind || memcmp(key, r->expect[r->seen].key, 32) != 0 ||
        memcmp(again, key, 32) != 0)
        r->mismatched++;
    r->seen++;
    psdb_sodb_entry_release(e);
    return 0;
}

static int progress(uint64_t done, uint64_t total, void *ctx)
{
    (void)ctx;
    printf("compile: %llu of %llu entries\n", (unsigned long long)done, (unsigned long long)total);
    return 0; /* non-zero would cancel the compile */
}

static int count_group(const void *key, size_t key_size, uint64_t version, uint32_t num_values,
                       void *ctx)
{
    (void)key, (void)key_size, (void)version, (void)num_values;
    (*(uint64_t *)ctx)++;
    return 0;
}

int main(int argc, char **argv)
{
    int rc = 1;
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb_writer *w = NULL;
    psdb_sodb *s = NULL;
    psdb_file *f = NULL;
    recorded rec[NUM_ENTRIES];
    reader r = {.expect = rec};
    uint32_t added = 0;
    const char *step = "";

    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: record_sodb OUT.sodb [OUT.psdb]\n");
        return 2;
    }
    /* 1. Record: opened (created) once, shared by every thread that creates pipelines. */
    step = "opening the SODB";
    hr = psdb_sodb_writer_open(argv[1], &IDENTITY, &w);
    if (PSDB_SUCCEEDED(hr)) {
        step = "recording";
        hr = record(w, rec, &added);
    }
    if (PSDB_FAILED(hr))
        goto cleanup;
    psdb_sodb_writer_release(w); /* each add was durable already */
    w = NULL;
    printf("recorded %u descriptions (2 compute, 2 graphics, 1 state object) in %s, %u already "
           "there\n",
           added, argv[1], 2 * NUM_ENTRIES - added);

    /* 2. Read back. */
    step = "reading the SODB";
    hr = psdb_sodb_open(argv[1], &s);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_sodb_foreach(s, check_entry, &r);
    if (PSDB_SUCCEEDED(hr) && PSDB_FAILED(r.hr))
        hr = r.hr;
    if (PSDB_FAILED(hr))
        goto cleanup;
    printf("read back %u entries, %u not as recorded\n", r.seen, r.mismatched);
    if (r.seen != NUM_ENTRIES || r.mismatched != 0)
        goto cleanup;

    /* 3. Compile for one GPU family (what a build farm runs, `psdb compile`). */
    if (argc == 3) {
        psdb_sodb_compile_desc cd = {.target = {.family = "example-gfx", .abi_version = 1},
                                     .compile_ns_per_kib = PSDB_COMPILE_COST_FREE,
                                     .progress = progress};
        psdb_sodb_compile_stats st;
        psdb_file_info info;
        uint64_t groups = 0;
        step = "compiling";
        hr = psdb_sodb_compile(argv[1], &cd, argv[2], &st);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_file_open(argv[2], NULL, &f);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_file_get_info(f, &info);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_file_foreach_group(f, count_group, &groups);
        if (PSDB_FAILED(hr))
            goto cleanup;
        printf("compiled %llu pipelines into %s for %s: %llu groups, %llu values\n",
               (unsigned long long)st.pipelines, argv[2], info.target.family,
               (unsigned long long)groups, (unsigned long long)info.num_values);
        if (groups != NUM_ENTRIES)
            goto cleanup;
    }
    rc = 0;
cleanup:
    if (PSDB_FAILED(hr))
        fprintf(stderr, "record_sodb: %s: %s\n", step, psdb_error_last());
    psdb_file_release(f);
    psdb_sodb_release(s);
    psdb_sodb_writer_release(w);
    return rc;
}
