/* serialized_pso_test.c - serialized graphics PSOs (MODEL X): tools device only, what a
 * serialized PSO holds, blobs shared across PSOs, validation on deserialization, no second
 * serialization. */
#include "rt_fixture.h"

#include "runtime/pipeline_library.h"

typedef struct msgs {
    int count;
    uint32_t id;
} msgs;

static void on_message(uint32_t severity, uint32_t id, const char *text, void *ctx)
{
    msgs *m = ctx;
    (void)text;
    if (severity == PSDB_MESSAGE_SEVERITY_ERROR) {
        m->count++;
        m->id = id;
    }
}

static psdb_device *device(uint32_t flags, const psdb_adapter_desc *adapter)
{
    psdb_device *dev = NULL;
    psdb_device_desc d = {.adapter = adapter ? *adapter : rt_adapter(),
                          .identity = &rt_identity,
                          .flags = flags,
                          .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    return dev;
}

static psdb_pipeline *graphics(psdb_device *dev, rt_graphics *g, int n)
{
    psdb_pipeline *p = NULL;
    rt_graphics_init(g, n, NULL);
    ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &g->desc, &p), PSDB_S_OK);
    return p;
}

static psdb_deserialize_graphics_pipeline_desc to_desc(const psdb_serialized_graphics_pipeline *s,
                                                       const rt_graphics *g)
{
    psdb_deserialize_graphics_pipeline_desc d = {.root_signature = g->desc.root_signature,
                                                 .root_signature_size = g->desc.root_signature_size,
                                                 .packet = s->packet,
                                                 .packet_size = s->packet_size,
                                                 .metadata = s->metadata,
                                                 .metadata_size = s->metadata_size,
                                                 .vs = s->vs,
                                                 .ps = s->ps,
                                                 .ds = s->ds,
                                                 .hs = s->hs,
                                                 .gs = s->gs};
    return d;
}

START_TEST(test_serialized_pso__X1_only_a_tools_device_serializes)
{
    psdb_device *retail = device(0, NULL);
    rt_graphics g;
    psdb_pipeline *p = graphics(retail, &g, 0);
    psdb_serialized_graphics_pipeline s;
    memset(&s, 0xFF, sizeof(s));
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(retail, p, 0, &s), PSDB_E_UNSUPPORTED);
    ck_assert_ptr_null(s.packet);
    psdb_pipeline_release(p);
    psdb_device_release(retail);

    psdb_device *tools = device(PSDB_DEVICE_FLAG_TOOLS, NULL);
    p = graphics(tools, &g, 0);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, p, 0, &s), PSDB_S_OK);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, p, 1, &s), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, NULL, 0, &s), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, p, 0, NULL), PSDB_E_INVALIDARG);
    rt_compute c;
    rt_compute_init(&c, 0, NULL);
    psdb_pipeline *cp = NULL;
    ck_assert_hr(psdb_device_create_compute_pipeline(tools, &c.desc, &cp), PSDB_S_OK);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, cp, 0, &s), PSDB_E_INVALIDARG);
    psdb_pipeline_release(cp);
    psdb_pipeline_release(p);
    psdb_device_release(tools);
}
END_TEST

START_TEST(test_serialized_pso__X2_packet_metadata_and_stages)
{
    psdb_device *tools = device(PSDB_DEVICE_FLAG_TOOLS, NULL);
    rt_graphics g;
    psdb_pipeline *p = graphics(tools, &g, 0);
    psdb_serialized_graphics_pipeline s;
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, p, 0, &s), PSDB_S_OK);
    ck_assert_ptr_nonnull(s.packet);
    ck_assert_uint_gt(s.packet_size, 0);
    const uint8_t *m = s.metadata;
    ck_assert_uint_ge(s.metadata_size, 128);
    ck_assert_mem_eq(m, "PSDBSPSM", 8);
    ck_assert_uint_eq(psdb__le32(m + 8), 1); /* structure version */
    ck_assert_uint_eq(psdb__le64(m + 16), s.metadata_size);
    ck_assert_uint_eq(psdb__le32(m + 24), rt_adapter().vendor_id);
    ck_assert_uint_eq(psdb__le32(m + 120), 0x3); /* VS and PS */
    /* The CRC-32 covers the metadata (its own field read as zero), packet and stages. */
    uint8_t *copy = malloc(s.metadata_size);
    memcpy(copy, m, s.metadata_size);
    memset(copy + 12, 0, 4);
    uint32_t crc = psdb__crc32(0, copy, s.metadata_size);
    crc = psdb__crc32(crc, s.packet, s.packet_size);
    const psdb_serialized_shader *st[] = {&s.vs, &s.ps, &s.ds, &s.hs, &s.gs};
    for (int i = 0; i < 5; i++) {
        crc = psdb__crc32(crc, st[i]->gpu_instructions, st[i]->gpu_instructions_size);
        crc = psdb__crc32(crc, st[i]->metadata, st[i]->metadata_size);
    }
    ck_assert_uint_eq(crc, psdb__le32(m + 12));
    free(copy);
    /* Per stage: GPU instructions and metadata for VS and PS, nothing for the others. */
    ck_assert_ptr_nonnull(s.vs.gpu_instructions);
    ck_assert_ptr_nonnull(s.ps.gpu_instructions);
    ck_assert_mem_eq(s.vs.metadata, "PSDBSSHM", 8);
    ck_assert_ptr_null(s.ds.gpu_instructions);
    ck_assert_ptr_null(s.gs.metadata);
    ck_assert_uint_eq(s.hs.metadata_size, 0);
    psdb_pipeline_release(p);
    psdb_device_release(tools);
}
END_TEST

START_TEST(test_serialized_pso__X3_blobs_are_shared_across_psos)
{
    psdb_device *tools = device(PSDB_DEVICE_FLAG_TOOLS, NULL);
    rt_graphics a, b;
    psdb_pipeline *pa = graphics(tools, &a, 0);
    rt_graphics_init(&b, 0, NULL);
    snprintf(b.ps, sizeof(b.ps), "another pixel shader");
    b.desc.ps.size = strlen(b.ps);
    psdb_pipeline *pb = NULL;
    ck_assert_hr(psdb_device_create_graphics_pipeline(tools, &b.desc, &pb), PSDB_S_OK);
    psdb_serialized_graphics_pipeline sa, sb, sa2;
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, pa, 0, &sa), PSDB_S_OK);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, pb, 0, &sb), PSDB_S_OK);
    /* The shared vertex shader is one blob; the pixel shaders and PSO metadata differ. */
    ck_assert_ptr_eq(sa.vs.gpu_instructions, sb.vs.gpu_instructions);
    ck_assert_ptr_eq(sa.vs.metadata, sb.vs.metadata);
    ck_assert_ptr_ne(sa.ps.gpu_instructions, sb.ps.gpu_instructions);
    ck_assert_ptr_ne(sa.metadata, sb.metadata);
    /* Serializing again gives the very same blobs. */
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, pa, 0, &sa2), PSDB_S_OK);
    ck_assert_ptr_eq(sa.packet, sa2.packet);
    ck_assert_ptr_eq(sa.metadata, sa2.metadata);
    psdb_pipeline_release(pa);
    psdb_pipeline_release(pb);
    psdb_device_release(tools);
}
END_TEST

START_TEST(test_serialized_pso__X4_deserialize_gives_a_working_pso)
{
    psdb_device *tools = device(PSDB_DEVICE_FLAG_TOOLS, NULL);
    rt_graphics g;
    psdb_pipeline *p = graphics(tools, &g, 0);
    psdb_serialized_graphics_pipeline s;
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, p, 0, &s), PSDB_S_OK);
    psdb_device *retail = device(0, NULL);
    rt_recorder *rec = rt_recorder_new(retail);
    psdb_deserialize_graphics_pipeline_desc d = to_desc(&s, &g);
    psdb_pipeline *q = NULL;
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, &d, &q), PSDB_S_OK);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(retail), 0);
    ck_assert_uint_eq(rec->n, 0);
    psdb_creation_info info;
    ck_assert_hr(psdb_pipeline_get_creation_info(q, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_NONE);
    /* Working: derivations from it validate exports against it. */
    psdb_derived_graphics_state_desc x = {.type = PSDB_DERIVED_STATE_DEPTH_STENCIL};
    x.depth_stencil.depth_enable = 1;
    psdb_pipeline *dq = NULL;
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(retail, q, 1, &x, &dq), PSDB_S_OK);
    psdb_derived_graphics_state_desc bl = {.type = PSDB_DERIVED_STATE_BLEND};
    bl.blend.render_target[0].blend_enable = 1; /* UNORM8 target: blending needs FLOAT16 */
    bl.blend.render_target[0].src_blend = PSDB_BLEND_ONE;
    bl.blend.render_target[0].dest_blend = PSDB_BLEND_ONE;
    psdb_pipeline *bad = NULL;
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(retail, q, 1, &bl, &bad),
                 PSDB_E_INVALIDARG);
    psdb_pipeline_release(dq);
    psdb_pipeline_release(q);
    q = NULL;
    /* Validation: CRC (a flipped instruction byte), root signature, stages, version. */
    uint8_t *instr = malloc(s.ps.gpu_instructions_size);
    memcpy(instr, s.ps.gpu_instructions, s.ps.gpu_instructions_size);
    instr[0] ^= 1;
    d.ps.gpu_instructions = instr;
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, &d, &q), PSDB_E_INVALIDARG);
    d = to_desc(&s, &g);
    d.root_signature = "another root signature";
    d.root_signature_size = strlen(d.root_signature);
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, &d, &q), PSDB_E_INVALIDARG);
    d = to_desc(&s, &g);
    memset(&d.ps, 0, sizeof(d.ps));
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, &d, &q), PSDB_E_INVALIDARG);
    d = to_desc(&s, &g);
    d.gs = s.vs;
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, &d, &q), PSDB_E_INVALIDARG);
    uint8_t *meta = malloc(s.metadata_size);
    memcpy(meta, s.metadata, s.metadata_size);
    d = to_desc(&s, &g);
    d.metadata = meta;
    psdb__put_le32(meta + 8, 2);
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, &d, &q),
                 PSDB_E_DRIVER_VERSION_MISMATCH);
    meta[0] ^= 1;
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, &d, &q), PSDB_E_INVALIDARG);
    d.metadata_size = 100;
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, &d, &q), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(retail, NULL, &q), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(q);
    free(meta);
    free(instr);
    /* The adapter: another device id, another driver build. */
    psdb_adapter_desc ad = rt_adapter();
    ad.device_id++;
    psdb_device *other = device(0, &ad);
    d = to_desc(&s, &g);
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(other, &d, &q),
                 PSDB_E_ADAPTER_NOT_FOUND);
    psdb_device_release(other);
    ad = rt_adapter();
    ad.driver_build++;
    other = device(0, &ad);
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(other, &d, &q),
                 PSDB_E_DRIVER_VERSION_MISMATCH);
    psdb_device_release(other);
    psdb_pipeline_release(p);
    psdb_device_release(retail);
    rt_recorder_free(rec);
    psdb_device_release(tools);
}
END_TEST

START_TEST(test_serialized_pso__X5_a_deserialized_pso_is_not_serialized_again)
{
    psdb_device *tools = device(PSDB_DEVICE_FLAG_TOOLS, NULL);
    msgs m = {0};
    ck_assert_hr(psdb_device_set_message_callback(tools, on_message, &m), PSDB_S_OK);
    rt_graphics g;
    psdb_pipeline *p = graphics(tools, &g, 0);
    psdb_serialized_graphics_pipeline s, again;
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, p, 0, &s), PSDB_S_OK);
    ck_assert_int_eq(m.count, 0);
    psdb_deserialize_graphics_pipeline_desc d = to_desc(&s, &g);
    psdb_pipeline *q = NULL, *dq = NULL;
    ck_assert_hr(psdb_device_deserialize_graphics_pipeline(tools, &d, &q), PSDB_S_OK);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, q, 0, &again), PSDB_E_INVALIDARG);
    ck_assert_int_eq(m.count, 1);
    ck_assert_uint_eq(m.id, PSDB_MESSAGE_ID_SERIALIZE_DESERIALIZED);
    ck_assert_ptr_null(again.packet);
    /* What derives from it neither, and it cannot go into a pipeline library. */
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(tools, q, 0, NULL, &dq), PSDB_S_OK);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, dq, 0, &again), PSDB_E_INVALIDARG);
    ck_assert_int_eq(m.count, 2);
    psdb_pipeline_library *lib = NULL;
    ck_assert_hr(psdb_device_create_pipeline_library(tools, NULL, 0, &lib), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_library_store_pipeline(lib, "q", q), PSDB_E_INVALIDARG);
    psdb_pipeline_library_release(lib);
    /* A PSO derived from a created one serializes. */
    psdb_pipeline *dp = NULL;
    ck_assert_hr(psdb_device_create_derived_graphics_pipeline(tools, p, 0, NULL, &dp), PSDB_S_OK);
    ck_assert_hr(psdb_device_serialize_graphics_pipeline(tools, dp, 0, &again), PSDB_S_OK);
    psdb_pipeline_release(dp);
    psdb_pipeline_release(dq);
    psdb_pipeline_release(q);
    psdb_pipeline_release(p);
    psdb_device_release(tools);
}
END_TEST

/* The fuzz corpus (tests/fuzz/corpus/serialized_pso): the container of serialized_pso_fuzz.c
 * holding a valid serialized PSO, and damaged ones. PSDB_WRITE_CORPUS=1 rewrites it. */
static void container(const psdb_serialized_graphics_pipeline *s, int damage, psdb__buf *out)
{
    const void *ptr[12] = {s->packet,
                           s->metadata,
                           s->vs.gpu_instructions,
                           s->vs.metadata,
                           s->ps.gpu_instructions,
                           s->ps.metadata,
                           s->ds.gpu_instructions,
                           s->ds.metadata,
                           s->hs.gpu_instructions,
                           s->hs.metadata,
                           s->gs.gpu_instructions,
                           s->gs.metadata};
    size_t len[12] = {s->packet_size,
                      s->metadata_size,
                      s->vs.gpu_instructions_size,
                      s->vs.metadata_size,
                      s->ps.gpu_instructions_size,
                      s->ps.metadata_size,
                      s->ds.gpu_instructions_size,
                      s->ds.metadata_size,
                      s->hs.gpu_instructions_size,
                      s->hs.metadata_size,
                      s->gs.gpu_instructions_size,
                      s->gs.metadata_size};
    for (int i = 0; i < 12; i++)
        psdb__buf_u32(out, ptr[i] ? (uint32_t)len[i] : UINT32_MAX);
    size_t meta_at = 48 + len[0];
    for (int i = 0; i < 12; i++)
        if (ptr[i])
            psdb__buf_append(out, ptr[i], len[i]);
    ck_assert_hr(psdb__buf_status(out), PSDB_S_OK);
    if (damage == 1)
        out->data[out->len - 1] ^= 1; /* the CRC no longer matches */
    if (damage == 2)
        psdb__put_le32(out->data + meta_at + 8, 7); /* another structure version */
    if (damage == 3)
        psdb__put_le32(out->data + meta_at + 24, 0x9999); /* another vendor */
}

START_TEST(test_serialized_pso__X4_fuzz_corpus_replays_with_exact_statuses)
{
    static const char *const names[] = {"valid", "bad_crc", "other_version", "other_vendor"};
    static const psdb_hr want[] = {PSDB_S_OK, PSDB_E_INVALIDARG, PSDB_E_DRIVER_VERSION_MISMATCH,
                                   PSDB_E_ADAPTER_NOT_FOUND};
    const char *dir = PSDB_TEST_DATA "/../fuzz/corpus/serialized_pso";
    char path[1024];
    psdb_device *dev = device(PSDB_DEVICE_FLAG_TOOLS, NULL);
    if (getenv("PSDB_WRITE_CORPUS")) {
        rt_graphics g;
        psdb_pipeline *p = graphics(dev, &g, 0);
        psdb_serialized_graphics_pipeline s;
        ck_assert_hr(psdb_device_serialize_graphics_pipeline(dev, p, 0, &s), PSDB_S_OK);
        for (int i = 0; i < 4; i++) {
            psdb__buf b = {0};
            container(&s, i, &b);
            snprintf(path, sizeof(path), "%s/%s.spso", dir, names[i]);
            ck_assert_int_eq(tu_write_file(path, b.data, b.len), 0);
            psdb__buf_free(&b);
        }
        psdb_pipeline_release(p);
    }
    for (int i = 0; i < 4; i++) {
        size_t size = 0;
        snprintf(path, sizeof(path), "%s/%s.spso", dir, names[i]);
        uint8_t *c = (uint8_t *)tu_read_file(path, &size);
        ck_assert_msg(c != NULL && size >= 48, "missing corpus file %s", path);
        const void *ptr[12];
        size_t len[12], pos = 48;
        for (int k = 0; k < 12; k++) {
            uint32_t n = psdb__le32(c + 4 * k);
            ptr[k] = n == UINT32_MAX ? NULL : c + pos;
            len[k] = n == UINT32_MAX ? 0 : n;
            pos += len[k];
            ck_assert_uint_le(pos, size);
        }
        psdb_deserialize_graphics_pipeline_desc d = {.root_signature = "root-sig",
                                                     .root_signature_size = 8,
                                                     .packet = ptr[0],
                                                     .packet_size = len[0],
                                                     .metadata = ptr[1],
                                                     .metadata_size = len[1],
                                                     .vs = {ptr[2], len[2], ptr[3], len[3]},
                                                     .ps = {ptr[4], len[4], ptr[5], len[5]},
                                                     .ds = {ptr[6], len[6], ptr[7], len[7]},
                                                     .hs = {ptr[8], len[8], ptr[9], len[9]},
                                                     .gs = {ptr[10], len[10], ptr[11], len[11]}};
        psdb_pipeline *q = NULL;
        psdb_hr hr = psdb_device_deserialize_graphics_pipeline(dev, &d, &q);
        ck_assert_msg(hr == want[i], "%s: got %s", names[i], psdb_hr_str(hr));
        psdb_pipeline_release(q);
        free(c);
    }
    psdb_device_release(dev);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("serialized_pso");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_serialized_pso__X1_only_a_tools_device_serializes);
    tcase_add_test(tc, test_serialized_pso__X2_packet_metadata_and_stages);
    tcase_add_test(tc, test_serialized_pso__X3_blobs_are_shared_across_psos);
    tcase_add_test(tc, test_serialized_pso__X4_deserialize_gives_a_working_pso);
    tcase_add_test(tc, test_serialized_pso__X4_fuzz_corpus_replays_with_exact_statuses);
    tcase_add_test(tc, test_serialized_pso__X5_a_deserialized_pso_is_not_serialized_again);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
