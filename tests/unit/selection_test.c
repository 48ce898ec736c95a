/* selection_test.c - the device-wide default (MODEL E), selection (F), operations that select (G),
 * lifetime (I) and the seed's two samples. */
#include "rt_fixture.h"

/* One world: a registry with an implicit default (psdb I), PSDBs A and B that hold every test
 * description, E that holds nothing, and a device. */
typedef struct world {
    char *dir, *reg, *path_a, *path_b, *path_e, *path_i;
    psdb_device *dev;
    psdb_session *a, *b, *e;
    rt_recorder *rec;
    int a_gone, b_gone, e_gone;
} world;

static void world_init(world *w, int with_implicit)
{
    memset(w, 0, sizeof(*w));
    w->dir = tu_mkdtemp();
    w->reg = tu_path(w->dir, "registry");
    w->path_a = tu_path(w->dir, "a.psdb");
    w->path_b = tu_path(w->dir, "b.psdb");
    w->path_e = tu_path(w->dir, "e.psdb");
    w->path_i = tu_path(w->dir, "implicit.psdb");
    rt_make_full_psdb(w->path_a, 4);
    rt_make_full_psdb(w->path_b, 4);
    rt_contents none = {0};
    rt_make_psdb(w->path_e, &none);
    if (with_implicit) {
        rt_make_full_psdb(w->path_i, 4);
        rt_register_default(w->reg, w->path_i);
    }
    w->dev = rt_device(w->reg, RT_EXE);
    w->a = rt_open(w->dev, w->path_a);
    w->b = rt_open(w->dev, w->path_b);
    w->e = rt_open(w->dev, w->path_e);
    ck_assert_hr(psdb_session_on_destroy(w->a, rt_destroyed, &w->a_gone), PSDB_S_OK);
    ck_assert_hr(psdb_session_on_destroy(w->b, rt_destroyed, &w->b_gone), PSDB_S_OK);
    ck_assert_hr(psdb_session_on_destroy(w->e, rt_destroyed, &w->e_gone), PSDB_S_OK);
    w->rec = rt_recorder_new(w->dev);
}

static void world_free(world *w)
{
    psdb_session_release(w->a);
    psdb_session_release(w->b);
    psdb_session_release(w->e);
    psdb_device_release(w->dev);
    rt_recorder_free(w->rec);
    tu_rmtree(w->dir);
    free(w->dir);
    free(w->reg);
    free(w->path_a);
    free(w->path_b);
    free(w->path_e);
    free(w->path_i);
}

/* Creates compute pipeline n; checks every lookup of the operation searched `expect` (NULL: no
 * lookups at all, F6) and returns the pipeline. */
static psdb_pipeline *compute(world *w, int n, const psdb_session_subobject *sub,
                              psdb_session *expect, psdb_creation_info *info)
{
    rt_compute c;
    psdb_pipeline *p = NULL;
    rt_compute_init(&c, n, sub);
    ck_assert_hr(psdb_device_create_compute_pipeline(w->dev, &c.desc, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(p, info), PSDB_S_OK);
    int all_in = 0;
    size_t events = rt_events_of(w->rec, info->operation_id, expect, &all_in);
    if (expect) {
        ck_assert_uint_gt(events, 0);
        ck_assert_msg(all_in, "a lookup of operation %llu went elsewhere",
                      (unsigned long long)info->operation_id);
    } else {
        ck_assert_uint_eq(events, 0);
        ck_assert_uint_eq(info->lookups, 0);
    }
    ck_assert_uint_eq(events, info->lookups);
    return p;
}

/* The session the implicit default is, learnt from an implicit-selected creation's events. */
static psdb_session *implicit_session(world *w)
{
    rt_compute c;
    psdb_pipeline *p = NULL;
    psdb_creation_info info;
    psdb_session *s = NULL;
    rt_compute_init(&c, 3, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(w->dev, &c.desc, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_IMPLICIT_DEFAULT);
    pthread_mutex_lock(&w->rec->lock);
    for (size_t i = 0; i < w->rec->n; i++)
        if (w->rec->ev[i].op == info.operation_id)
            s = w->rec->ev[i].session;
    pthread_mutex_unlock(&w->rec->lock);
    psdb_pipeline_release(p);
    ck_assert_ptr_nonnull(s);
    return s;
}

static const psdb_session_subobject null_none = {NULL, PSDB_SESSION_FLAG_NONE};

/* ---- E ----------------------------------------------------------------------------------------- */

START_TEST(test_selection__E1_no_explicit_default_initially)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    psdb_pipeline *p = compute(&w, 0, NULL, implicit_session(&w), &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_IMPLICIT_DEFAULT);
    psdb_pipeline_release(p);
    world_free(&w);
    world_init(&w, 0);
    p = compute(&w, 0, NULL, NULL, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_NONE);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__E2_set_and_clear)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    psdb_pipeline *p = compute(&w, 0, NULL, w.a, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(info.flags, PSDB_SESSION_FLAG_NONE);
    psdb_pipeline_release(p);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    p = compute(&w, 0, NULL, w.b, &info);
    ck_assert_uint_eq(info.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    psdb_pipeline_release(p);
    ck_assert_hr(psdb_device_set_default_session(w.dev, NULL, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    p = compute(&w, 0, NULL, NULL, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_NONE);
    psdb_pipeline_release(p);
    /* Clearing twice is fine. */
    ck_assert_hr(psdb_device_set_default_session(w.dev, NULL, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__E3_unknown_flags_rejected)
{
    world w;
    world_init(&w, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0x2u), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0x80000000u), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0x3u), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_set_default_session(w.dev, NULL, 0x4u), PSDB_E_INVALIDARG);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__E4_null_with_flags_rejected)
{
    world w;
    world_init(&w, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, NULL, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_set_default_session(NULL, NULL, 0), PSDB_E_INVALIDARG);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__E5_invalid_sessions_rejected)
{
    world w;
    world_init(&w, 0);
    /* An application-managed cache session is not a PSDB session. */
    psdb_session *cache = NULL;
    psdb_cache_session_desc cd = {.identifier = {9}, .mode = PSDB_CACHE_MODE_MEMORY};
    ck_assert_hr(psdb_device_create_cache_session(w.dev, &cd, &cache), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_default_session(w.dev, cache, 0), PSDB_E_INVALIDARG);
    /* Another device's session (same adapter, same identity). */
    psdb_device *other = rt_device(w.reg, RT_EXE);
    psdb_session *foreign = rt_open(other, w.path_a);
    ck_assert_hr(psdb_device_set_default_session(w.dev, foreign, 0), PSDB_E_INVALIDARG);
    /* A device without identity does not support explicit PSDBs (A4): its own session is
     * refused. */
    psdb_device *anon = NULL;
    psdb_device_desc dd = {.adapter = rt_adapter(), .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    ck_assert_hr(psdb_device_create(&dd, &anon), PSDB_S_OK);
    psdb_session *own = rt_open(anon, w.path_a);
    ck_assert_hr(psdb_device_set_default_session(anon, own, 0), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_set_default_session(anon, NULL, 0), PSDB_S_OK);
    psdb_session_release(own);
    psdb_device_release(anon);
    psdb_session_release(foreign);
    psdb_device_release(other);
    psdb_session_release(cache);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__E6_failure_keeps_previous_session_and_flags)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    psdb_session *cache = NULL;
    psdb_cache_session_desc cd = {.identifier = {9}, .mode = PSDB_CACHE_MODE_MEMORY};
    ck_assert_hr(psdb_device_create_cache_session(w.dev, &cd, &cache), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, 0x8u), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_set_default_session(w.dev, NULL, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_set_default_session(w.dev, cache, PSDB_SESSION_FLAG_NONE),
                 PSDB_E_INVALIDARG);
    psdb_pipeline *p = compute(&w, 0, NULL, w.a, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(info.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    psdb_pipeline_release(p);
    psdb_session_release(cache);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__E7_device_holds_its_own_reference)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    psdb_session *a = w.a;
    psdb_session_release(w.a);
    w.a = NULL;
    ck_assert_int_eq(w.a_gone, 0);
    psdb_pipeline *p = compute(&w, 1, NULL, a, &info);
    ck_assert(info.psdb_hit);
    psdb_pipeline_release(p); /* NONE: the pipeline held it too */
    ck_assert_int_eq(w.a_gone, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, NULL, 0), PSDB_S_OK);
    ck_assert_int_eq(w.a_gone, 1);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__E8_default_belongs_to_one_device)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    psdb_device *other = rt_device(w.reg, RT_EXE);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    rt_compute c;
    psdb_pipeline *p = NULL;
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb_device_create_compute_pipeline(other, &c.desc, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_IMPLICIT_DEFAULT);
    psdb_pipeline_release(p);
    p = compute(&w, 0, NULL, w.a, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    psdb_pipeline_release(p);
    psdb_device_release(other);
    world_free(&w);
}
END_TEST

/* ---- F ----------------------------------------------------------------------------------------- */

START_TEST(test_selection__F1_per_object_session_wins_with_its_flags)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    psdb_session_subobject sub = {w.b, PSDB_SESSION_FLAG_CREATE_ONLY};
    psdb_pipeline *p = compute(&w, 0, &sub, w.b, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_PER_OBJECT);
    ck_assert_uint_eq(info.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    ck_assert(info.psdb_hit);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__F2_omitted_or_null_none_selects_device_default)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    psdb_pipeline *p = compute(&w, 0, NULL, w.a, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(info.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    psdb_pipeline_release(p);
    p = compute(&w, 0, &null_none, w.a, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(info.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__F3_no_default_selects_implicit_or_nothing)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    psdb_session *imp = implicit_session(&w);
    psdb_pipeline *p = compute(&w, 0, &null_none, imp, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_IMPLICIT_DEFAULT);
    ck_assert(info.psdb_hit);
    psdb_pipeline_release(p);
    world_free(&w);
    world_init(&w, 0);
    p = compute(&w, 0, &null_none, NULL, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_NONE);
    ck_assert(!info.psdb_hit);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__F4_invalid_subobjects_fail_creation)
{
    world w;
    world_init(&w, 1);
    rt_compute c;
    psdb_pipeline *p = NULL;
    psdb_session_subobject bad = {NULL, PSDB_SESSION_FLAG_CREATE_ONLY};
    rt_compute_init(&c, 0, &bad);
    ck_assert_hr(psdb_device_create_compute_pipeline(w.dev, &c.desc, &p), PSDB_E_INVALIDARG);
    ck_assert_ptr_null(p);
    psdb_session_subobject unknown = {w.a, 0x10u};
    c.desc.psdb = &unknown;
    ck_assert_hr(psdb_device_create_compute_pipeline(w.dev, &c.desc, &p), PSDB_E_INVALIDARG);
    psdb_session *cache = NULL;
    psdb_cache_session_desc cd = {.identifier = {3}, .mode = PSDB_CACHE_MODE_MEMORY};
    ck_assert_hr(psdb_device_create_cache_session(w.dev, &cd, &cache), PSDB_S_OK);
    psdb_session_subobject not_psdb = {cache, 0};
    c.desc.psdb = &not_psdb;
    ck_assert_hr(psdb_device_create_compute_pipeline(w.dev, &c.desc, &p), PSDB_E_INVALIDARG);
    psdb_device *other = rt_device(w.reg, RT_EXE);
    psdb_session *foreign = rt_open(other, w.path_a);
    psdb_session_subobject f = {foreign, 0};
    c.desc.psdb = &f;
    ck_assert_hr(psdb_device_create_compute_pipeline(w.dev, &c.desc, &p), PSDB_E_INVALIDARG);
    /* No lookups and no statistics for refused creations. */
    ck_assert_uint_eq(w.rec->n, 0);
    psdb_statistics st;
    ck_assert_hr(psdb_device_get_statistics(w.dev, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.pipeline_states.num_created, 0);
    psdb_session_release(foreign);
    psdb_device_release(other);
    psdb_session_release(cache);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__F5_a_miss_never_falls_back)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    /* Per-object E misses everything; neither the device default A nor the implicit default is
     * searched. */
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    psdb_session_subobject sub = {w.e, 0};
    psdb_pipeline *p = compute(&w, 0, &sub, w.e, &info);
    ck_assert(!info.psdb_hit);
    ck_assert_uint_eq(info.hits, 0);
    psdb_pipeline_release(p);
    /* Device default E misses; the implicit default is not searched. */
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.e, 0), PSDB_S_OK);
    p = compute(&w, 1, NULL, w.e, &info);
    ck_assert(!info.psdb_hit);
    psdb_pipeline_release(p);
    /* A description A does not hold (number 9) misses in A only. */
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    p = compute(&w, 9, NULL, w.a, &info);
    ck_assert(!info.psdb_hit);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__F6_no_selection_no_lookups)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 0);
    psdb_pipeline *p = compute(&w, 0, NULL, NULL, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_NONE);
    ck_assert_uint_eq(w.rec->n, 0);
    psdb_pipeline_release(p);
    rt_graphics g;
    rt_graphics_init(&g, 0, &null_none);
    ck_assert_hr(psdb_device_create_graphics_pipeline(w.dev, &g.desc, &p), PSDB_S_OK);
    ck_assert_uint_eq(w.rec->n, 0);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__F7_one_selection_covers_every_query)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, 0), PSDB_S_OK);
    rt_graphics g;
    psdb_pipeline *p = NULL;
    rt_graphics_init(&g, 2, NULL);
    ck_assert_hr(psdb_device_create_graphics_pipeline(w.dev, &g.desc, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    /* VS, PS and the pipeline state: size + data for object code and metadata each. */
    int seen[2][2] = {{0}};
    size_t n = 0;
    for (size_t i = 0; i < w.rec->n; i++) {
        rt_event *e = &w.rec->ev[i];
        if (e->op != info.operation_id)
            continue;
        ck_assert_ptr_eq(e->session, w.b);
        ck_assert_hr(e->result, PSDB_S_OK);
        seen[e->type][e->query]++;
        n++;
    }
    ck_assert_uint_eq(n, 12);
    ck_assert_int_eq(seen[PSDB_VALUE_OBJECT_CODE][PSDB_QUERY_SIZE], 3);
    ck_assert_int_eq(seen[PSDB_VALUE_OBJECT_CODE][PSDB_QUERY_DATA], 3);
    ck_assert_int_eq(seen[PSDB_VALUE_METADATA][PSDB_QUERY_SIZE], 3);
    ck_assert_int_eq(seen[PSDB_VALUE_METADATA][PSDB_QUERY_DATA], 3);
    ck_assert(info.psdb_hit);
    ck_assert_uint_eq(info.lookups, 12);
    ck_assert_uint_eq(info.hits, 12);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

/* ---- G ----------------------------------------------------------------------------------------- */

START_TEST(test_selection__G1_compute_graphics_and_streams_select)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    psdb_pipeline *p = compute(&w, 0, NULL, w.a, &info);
    ck_assert(info.psdb_hit);
    psdb_pipeline_release(p);
    rt_graphics g;
    rt_graphics_init(&g, 1, NULL);
    ck_assert_hr(psdb_device_create_graphics_pipeline(w.dev, &g.desc, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert(info.psdb_hit);
    psdb_pipeline_release(p);
    /* A compute stream and a graphics stream. */
    rt_compute c;
    rt_compute_init(&c, 2, NULL);
    psdb_shader rs = {c.desc.root_signature, c.desc.root_signature_size};
    psdb_stream_subobject cs_stream[] = {{PSDB_STREAM_ROOT_SIGNATURE, &rs},
                                         {PSDB_STREAM_CS, &c.desc.cs}};
    psdb_pipeline_stream_desc sd = {cs_stream, 2};
    ck_assert_hr(psdb_device_create_pipeline_state(w.dev, &sd, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert(info.psdb_hit);
    psdb_pipeline_release(p);
    rt_graphics_init(&g, 3, NULL);
    psdb_shader grs = {g.desc.root_signature, g.desc.root_signature_size};
    psdb_render_targets_desc rts = {1, {PSDB_FORMAT_R8G8B8A8_UNORM}};
    psdb_stream_subobject gs_stream[] = {{PSDB_STREAM_ROOT_SIGNATURE, &grs},
                                         {PSDB_STREAM_VS, &g.desc.vs},
                                         {PSDB_STREAM_PS, &g.desc.ps},
                                         {PSDB_STREAM_RENDER_TARGETS, &rts},
                                         {PSDB_STREAM_PS_OUTPUTS, g.desc.ps_outputs},
                                         {PSDB_STREAM_PSDB, &null_none}};
    psdb_pipeline_stream_desc gsd = {gs_stream, 6};
    ck_assert_hr(psdb_device_create_pipeline_state(w.dev, &gsd, &p), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(p, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    int all_in = 0;
    ck_assert_uint_gt(rt_events_of(w.rec, info.operation_id, w.a, &all_in), 0);
    ck_assert(all_in);
    psdb_pipeline_release(p);
    /* NULL arguments. */
    ck_assert_hr(psdb_device_create_compute_pipeline(w.dev, NULL, &p), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_compute_pipeline(NULL, &c.desc, &p), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_compute_pipeline(w.dev, &c.desc, NULL), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_graphics_pipeline(w.dev, NULL, &p), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_device_create_pipeline_state(w.dev, NULL, &p), PSDB_E_INVALIDARG);
    world_free(&w);
}
END_TEST

static psdb_state_object *state_object(world *w, uint32_t type, int n,
                                       const psdb_session_subobject *sub,
                                       psdb_state_object *collection, psdb_state_object *base,
                                       psdb_creation_info *info)
{
    rt_state_object d;
    psdb_state_object *so = NULL;
    rt_state_object_init(&d, type, n, sub, collection);
    if (base)
        ck_assert_hr(psdb_device_add_to_state_object(w->dev, &d.desc, base, &so), PSDB_S_OK);
    else
        ck_assert_hr(psdb_device_create_state_object(w->dev, &d.desc, &so), PSDB_S_OK);
    ck_assert_hr(psdb_state_object_get_creation_info(so, info), PSDB_S_OK);
    return so;
}

START_TEST(test_selection__G3_add_to_state_object_selects_for_itself)
{
    world w;
    psdb_creation_info base_info, add_info, info;
    int all_in = 0;
    world_init(&w, 1);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    psdb_state_object *base = state_object(&w, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 0, NULL,
                                           NULL, NULL, &base_info);
    ck_assert_uint_eq(base_info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert(base_info.psdb_hit);
    ck_assert_uint_gt(rt_events_of(w.rec, base_info.operation_id, w.a, &all_in), 0);
    ck_assert(all_in);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    psdb_state_object *add = state_object(&w, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 1, NULL,
                                          NULL, base, &add_info);
    ck_assert_uint_eq(add_info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(add_info.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    ck_assert_uint_gt(rt_events_of(w.rec, add_info.operation_id, w.b, &all_in), 0);
    ck_assert(all_in);
    /* The base keeps A for its object-associated lookups. */
    ck_assert_hr(psdb_state_object_get_creation_info(base, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.operation_id, base_info.operation_id);
    ck_assert_uint_eq(info.flags, PSDB_SESSION_FLAG_NONE);
    uint8_t key[32] = {0};
    size_t size = 0;
    size_t before = w.rec->n;
    ck_assert_hr(psdb_state_object_find_value(base, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &size),
                 PSDB_E_NOT_FOUND);
    ck_assert_uint_eq(w.rec->n, before + 1);
    ck_assert_ptr_eq(w.rec->ev[before].session, w.a);
    /* An addition with its own PSDB subobject selects it. */
    psdb_session_subobject sub = {w.e, 0};
    psdb_state_object *add2 = state_object(&w, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 2, &sub,
                                           NULL, add, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_PER_OBJECT);
    ck_assert_uint_gt(rt_events_of(w.rec, info.operation_id, w.e, &all_in), 0);
    ck_assert(all_in);
    /* Bad additions. */
    rt_state_object d;
    psdb_state_object *so = NULL;
    rt_state_object_init(&d, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 3, NULL, NULL);
    ck_assert_hr(psdb_device_add_to_state_object(w.dev, &d.desc, NULL, &so), PSDB_E_INVALIDARG);
    d.desc.type = PSDB_STATE_OBJECT_EXECUTABLE;
    ck_assert_hr(psdb_device_add_to_state_object(w.dev, &d.desc, base, &so), PSDB_E_INVALIDARG);
    psdb_state_object_release(add2);
    psdb_state_object_release(add);
    psdb_state_object_release(base);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__G4_referenced_collections_keep_their_psdb)
{
    world w;
    psdb_creation_info cinfo, info;
    int all_in = 0;
    world_init(&w, 1);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    psdb_state_object *coll =
        state_object(&w, PSDB_STATE_OBJECT_COLLECTION, 0, NULL, NULL, NULL, &cinfo);
    ck_assert_uint_gt(rt_events_of(w.rec, cinfo.operation_id, w.a, &all_in), 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, 0), PSDB_S_OK);
    psdb_state_object *so =
        state_object(&w, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 1, NULL, coll, NULL, &info);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_gt(rt_events_of(w.rec, info.operation_id, w.b, &all_in), 0);
    ck_assert(all_in);
    /* The collection still searches A. */
    uint8_t key[32] = {1};
    size_t size = 0;
    size_t before = w.rec->n;
    ck_assert_hr(psdb_state_object_find_value(coll, key, 32, PSDB_VALUE_METADATA, NULL, &size),
                 PSDB_E_NOT_FOUND);
    ck_assert_ptr_eq(w.rec->ev[before].session, w.a);
    /* A collection of another device is refused. */
    psdb_device *other = rt_device(w.reg, RT_EXE);
    rt_state_object d;
    psdb_state_object *x = NULL;
    rt_state_object_init(&d, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, 1, NULL, coll);
    ck_assert_hr(psdb_device_create_state_object(other, &d.desc, &x), PSDB_E_INVALIDARG);
    psdb_device_release(other);
    /* The collection outlives the application's reference while referenced. */
    psdb_state_object_release(coll);
    psdb_state_object_release(so);
    world_free(&w);
}
END_TEST

/* ---- I ----------------------------------------------------------------------------------------- */

START_TEST(test_selection__I1_device_holds_default_until_replaced_or_destroyed)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    psdb_session *a = w.a;
    psdb_session_release(w.a);
    w.a = NULL;
    psdb_pipeline *p = compute(&w, 0, NULL, a, &info);
    ck_assert_int_eq(w.a_gone, 0); /* CREATE_ONLY does not drop the device's reference */
    psdb_pipeline_release(p);
    ck_assert_int_eq(w.a_gone, 0);
    /* Destroying the device releases it. */
    psdb_session_release(w.b);
    psdb_session_release(w.e);
    w.b = w.e = NULL;
    psdb_device_release(w.dev);
    w.dev = NULL;
    ck_assert_int_eq(w.a_gone, 1);
    world_free(&w);
}
END_TEST

/* In the middle of a creation the callback replaces and clears the default and drops the
 * application's reference: the operation keeps its session (I2, I6) and every later lookup of it
 * still goes there. */
typedef struct midway {
    world *w;
    uint64_t op;
    int done;
    int gone_in_flight;
} midway;

static void midway_cb(const psdb_lookup_event *e, void *ctx)
{
    midway *m = ctx;
    rt_record(e, m->w->rec);
    if (m->done)
        return;
    m->done = 1;
    m->op = e->operation_id;
    ck_assert_hr(psdb_device_set_default_session(m->w->dev, m->w->b, 0), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_default_session(m->w->dev, NULL, 0), PSDB_S_OK);
    psdb_session_release(m->w->a);
    m->w->a = NULL;
    m->gone_in_flight = m->w->a_gone;
}

START_TEST(test_selection__I2_operation_holds_its_session)
{
    world w;
    world_init(&w, 0);
    midway m = {&w, 0, 0, 0};
    ck_assert_hr(psdb_device_set_lookup_callback(w.dev, midway_cb, &m), PSDB_S_OK);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    psdb_session *a = w.a;
    rt_graphics g;
    psdb_pipeline *p = NULL;
    rt_graphics_init(&g, 0, NULL);
    ck_assert_hr(psdb_device_create_graphics_pipeline(w.dev, &g.desc, &p), PSDB_S_OK);
    ck_assert_int_eq(m.gone_in_flight, 0);
    int all_in = 0;
    ck_assert_uint_eq(rt_events_of(w.rec, m.op, a, &all_in), 12);
    ck_assert(all_in);
    /* CREATE_ONLY: released when creation finished. */
    ck_assert_int_eq(w.a_gone, 1);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__I3_none_object_keeps_session)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    psdb_session *a = w.a;
    psdb_pipeline *p = compute(&w, 0, NULL, a, &info);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, 0), PSDB_S_OK);
    psdb_session_release(w.a);
    w.a = NULL;
    ck_assert_int_eq(w.a_gone, 0);
    /* Later lookups go to A, not to the new default B. Look up a value A holds. */
    rt_compute c;
    psdb__plan plan = {0};
    rt_compute_init(&c, 0, NULL);
    ck_assert_hr(psdb__plan_compute(&c.desc, &plan), PSDB_S_OK);
    size_t before = w.rec->n, size = 0;
    ck_assert_hr(psdb_pipeline_find_value(p, plan.units[0].key, 32, PSDB_VALUE_OBJECT_CODE, NULL,
                                          &size),
                 PSDB_S_OK);
    ck_assert_uint_gt(size, 0);
    uint8_t *buf = malloc(size);
    size_t got = size;
    ck_assert_hr(psdb_pipeline_find_value(p, plan.units[0].key, 32, PSDB_VALUE_OBJECT_CODE, buf,
                                          &got),
                 PSDB_S_OK);
    ck_assert_uint_eq(got, size);
    got = 1;
    ck_assert_hr(psdb_pipeline_find_value(p, plan.units[0].key, 32, PSDB_VALUE_OBJECT_CODE, buf,
                                          &got),
                 PSDB_E_MORE_DATA);
    free(buf);
    ck_assert_uint_eq(w.rec->n, before + 3);
    for (size_t i = before; i < w.rec->n; i++)
        ck_assert_ptr_eq(w.rec->ev[i].session, a);
    /* Each object-associated lookup is its own operation. */
    ck_assert_uint_ne(w.rec->ev[before].op, w.rec->ev[before + 1].op);
    ck_assert_uint_eq(w.rec->ev[before].query, PSDB_QUERY_SIZE);
    ck_assert_uint_eq(w.rec->ev[before + 1].query, PSDB_QUERY_DATA);
    psdb__plan_free(&plan);
    /* Bad arguments. */
    ck_assert_hr(psdb_pipeline_find_value(NULL, "k", 1, 0, NULL, &size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_find_value(p, NULL, 1, 0, NULL, &size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_find_value(p, "k", 0, 0, NULL, &size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_find_value(p, "k", 1, 4, NULL, &size), PSDB_E_INVALIDARG);
    ck_assert_hr(psdb_pipeline_find_value(p, "k", 1, 0, NULL, NULL), PSDB_E_INVALIDARG);
    psdb_pipeline_release(p);
    ck_assert_int_eq(w.a_gone, 1);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__I4_create_only_falls_back_to_implicit_never_device_default)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 1);
    psdb_session *imp = implicit_session(&w);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    psdb_pipeline *p = compute(&w, 0, NULL, w.b, &info);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    psdb_session_release(w.b);
    w.b = NULL;
    ck_assert_int_eq(w.b_gone, 1); /* the object did not keep it */
    size_t before = w.rec->n, size = 0;
    uint8_t key[32] = {7};
    ck_assert_hr(psdb_pipeline_find_value(p, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &size),
                 PSDB_E_NOT_FOUND);
    ck_assert_uint_eq(w.rec->n, before + 1);
    ck_assert_ptr_eq(w.rec->ev[before].session, imp);
    psdb_pipeline_release(p);
    world_free(&w);
    /* Without an implicit default: nothing to search, no event. */
    world_init(&w, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.b, PSDB_SESSION_FLAG_CREATE_ONLY),
                 PSDB_S_OK);
    p = compute(&w, 0, NULL, w.b, &info);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    before = w.rec->n;
    ck_assert_hr(psdb_pipeline_find_value(p, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &size),
                 PSDB_E_NOT_FOUND);
    ck_assert_uint_eq(w.rec->n, before);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__I5_object_without_psdb_never_gains_one)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 0);
    psdb_pipeline *p = compute(&w, 0, NULL, NULL, &info);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, 0), PSDB_S_OK);
    size_t size = 0;
    uint8_t key[32] = {0};
    ck_assert_hr(psdb_pipeline_find_value(p, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &size),
                 PSDB_E_NOT_FOUND);
    ck_assert_uint_eq(w.rec->n, 0);
    psdb_pipeline_release(p);
    world_free(&w);
}
END_TEST

START_TEST(test_selection__I6_replacing_releases_only_the_device_reference)
{
    world w;
    psdb_creation_info info;
    world_init(&w, 0);
    ck_assert_hr(psdb_device_set_default_session(w.dev, w.a, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    psdb_pipeline *p = compute(&w, 0, NULL, w.a, &info);
    psdb_session_release(w.a);
    w.a = NULL;
    ck_assert_hr(psdb_device_set_default_session(w.dev, NULL, 0), PSDB_S_OK);
    ck_assert_int_eq(w.a_gone, 0); /* the pipeline still holds it */
    psdb_pipeline_addref(p);
    psdb_pipeline_release(p);
    ck_assert_int_eq(w.a_gone, 0);
    psdb_pipeline_release(p);
    ck_assert_int_eq(w.a_gone, 1);
    world_free(&w);
}
END_TEST

/* ---- the seed's samples ------------------------------------------------------------------------ */

/* "Set and Clear the Device Default", line by line (with and without registration). */
static void sample_one(int with_implicit)
{
    world w;
    world_init(&w, with_implicit);
    psdb_session *imp = with_implicit ? implicit_session(&w) : NULL;
    psdb_session *pSessionA = w.a, *pSessionB = w.b;
    rt_compute c;
    rt_compute_init(&c, 1, NULL); /* "The pipeline description contains no PSDB subobject." */
    const psdb_compute_pipeline_desc *pDesc = &c.desc;
    psdb_device *pDevice = w.dev;
    psdb_creation_info ia, ib, ii;
    int all_in = 0;

    psdb_hr hr = psdb_device_set_default_session(pDevice, pSessionA, PSDB_SESSION_FLAG_NONE);
    ck_assert_hr(hr, PSDB_S_OK);
    psdb_pipeline *psoA = NULL;
    hr = psdb_device_create_compute_pipeline(pDevice, pDesc, &psoA);
    ck_assert_hr(hr, PSDB_S_OK);

    hr = psdb_device_set_default_session(pDevice, pSessionB, PSDB_SESSION_FLAG_CREATE_ONLY);
    ck_assert_hr(hr, PSDB_S_OK);
    psdb_pipeline *psoB = NULL;
    hr = psdb_device_create_compute_pipeline(pDevice, pDesc, &psoB);
    ck_assert_hr(hr, PSDB_S_OK);

    hr = psdb_device_set_default_session(pDevice, NULL, PSDB_SESSION_FLAG_NONE);
    ck_assert_hr(hr, PSDB_S_OK);
    psdb_pipeline *psoImplicit = NULL;
    hr = psdb_device_create_compute_pipeline(pDevice, pDesc, &psoImplicit);
    ck_assert_hr(hr, PSDB_S_OK);

    /* psoA selects session A with NONE and retains it for its lifetime. */
    ck_assert_hr(psdb_pipeline_get_creation_info(psoA, &ia), PSDB_S_OK);
    ck_assert_uint_eq(ia.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(ia.flags, PSDB_SESSION_FLAG_NONE);
    ck_assert_uint_gt(rt_events_of(w.rec, ia.operation_id, pSessionA, &all_in), 0);
    ck_assert(all_in);
    /* psoB selects session B with CREATE_ONLY and uses it only during creation. */
    ck_assert_hr(psdb_pipeline_get_creation_info(psoB, &ib), PSDB_S_OK);
    ck_assert_uint_eq(ib.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(ib.flags, PSDB_SESSION_FLAG_CREATE_ONLY);
    ck_assert_uint_gt(rt_events_of(w.rec, ib.operation_id, pSessionB, &all_in), 0);
    ck_assert(all_in);
    /* Clearing restores registration-based selection; without registration, no PSDB. */
    ck_assert_hr(psdb_pipeline_get_creation_info(psoImplicit, &ii), PSDB_S_OK);
    ck_assert_uint_eq(ii.selection, with_implicit ? PSDB_SELECTION_IMPLICIT_DEFAULT
                                                  : PSDB_SELECTION_NONE);
    ck_assert_uint_eq(rt_events_of(w.rec, ii.operation_id, imp, &all_in),
                      with_implicit ? 8u : 0u);
    ck_assert(all_in);

    /* Later lookups: psoA -> A (retained); psoB -> the implicit default if present, else none.
     * Replacing or clearing the default changes neither. */
    ck_assert_hr(psdb_device_set_default_session(pDevice, pSessionB, 0), PSDB_S_OK);
    uint8_t key[32] = {5};
    size_t size = 0, before = w.rec->n;
    ck_assert_hr(psdb_pipeline_find_value(psoA, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &size),
                 PSDB_E_NOT_FOUND);
    ck_assert_ptr_eq(w.rec->ev[before].session, pSessionA);
    before = w.rec->n;
    ck_assert_hr(psdb_pipeline_find_value(psoB, key, 32, PSDB_VALUE_OBJECT_CODE, NULL, &size),
                 PSDB_E_NOT_FOUND);
    if (with_implicit) {
        ck_assert_uint_eq(w.rec->n, before + 1);
        ck_assert_ptr_eq(w.rec->ev[before].session, imp);
    } else {
        ck_assert_uint_eq(w.rec->n, before);
    }
    psdb_pipeline_release(psoImplicit);
    psdb_pipeline_release(psoB);
    psdb_pipeline_release(psoA);
    world_free(&w);
}

START_TEST(test_selection__sample_set_and_clear_the_device_default)
{
    sample_one(1);
    sample_one(0);
}
END_TEST

/* "Override the Device Default for One Pipeline State", line by line. */
START_TEST(test_selection__sample_override_the_device_default_for_one_pipeline_state)
{
    world w;
    world_init(&w, 1);
    psdb_device *pDevice = w.dev;
    psdb_session *pObjectSession = w.b;
    ck_assert_hr(psdb_device_set_default_session(pDevice, w.a, 0), PSDB_S_OK); /* has a default */
    rt_compute shader_src;
    rt_compute_init(&shader_src, 2, NULL);
    psdb_shader pRootSignature = {shader_src.desc.root_signature,
                                  shader_src.desc.root_signature_size};
    psdb_shader shader = shader_src.desc.cs;

    psdb_session_subobject psdb_desc = {pObjectSession, PSDB_SESSION_FLAG_NONE};
    psdb_stream_subobject desc[] = {{PSDB_STREAM_ROOT_SIGNATURE, &pRootSignature},
                                    {PSDB_STREAM_CS, &shader},
                                    {PSDB_STREAM_PSDB, &psdb_desc}};
    psdb_pipeline_stream_desc stream = {desc, 3};
    psdb_pipeline *pso = NULL;
    psdb_hr hr = psdb_device_create_pipeline_state(pDevice, &stream, &pso);
    ck_assert_hr(hr, PSDB_S_OK);

    /* The non-null per-object session takes precedence over the device-wide default. */
    psdb_creation_info info;
    int all_in = 0;
    ck_assert_hr(psdb_pipeline_get_creation_info(pso, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_PER_OBJECT);
    ck_assert_uint_eq(rt_events_of(w.rec, info.operation_id, pObjectSession, &all_in), 8);
    ck_assert(all_in);
    ck_assert(info.psdb_hit);
    psdb_pipeline_release(pso);

    /* Replacing pObjectSession with nullptr while keeping Flags NONE selects the device's
     * effective default. */
    psdb_desc.session = NULL;
    ck_assert_hr(psdb_device_create_pipeline_state(pDevice, &stream, &pso), PSDB_S_OK);
    ck_assert_hr(psdb_pipeline_get_creation_info(pso, &info), PSDB_S_OK);
    ck_assert_uint_eq(info.selection, PSDB_SELECTION_DEVICE_DEFAULT);
    ck_assert_uint_eq(rt_events_of(w.rec, info.operation_id, w.a, &all_in), 8);
    ck_assert(all_in);
    psdb_pipeline_release(pso);
    world_free(&w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("selection");
    TCase *tc = tcase_create("selection");
    tcase_add_test(tc, test_selection__E1_no_explicit_default_initially);
    tcase_add_test(tc, test_selection__E2_set_and_clear);
    tcase_add_test(tc, test_selection__E3_unknown_flags_rejected);
    tcase_add_test(tc, test_selection__E4_null_with_flags_rejected);
    tcase_add_test(tc, test_selection__E5_invalid_sessions_rejected);
    tcase_add_test(tc, test_selection__E6_failure_keeps_previous_session_and_flags);
    tcase_add_test(tc, test_selection__E7_device_holds_its_own_reference);
    tcase_add_test(tc, test_selection__E8_default_belongs_to_one_device);
    tcase_add_test(tc, test_selection__F1_per_object_session_wins_with_its_flags);
    tcase_add_test(tc, test_selection__F2_omitted_or_null_none_selects_device_default);
    tcase_add_test(tc, test_selection__F3_no_default_selects_implicit_or_nothing);
    tcase_add_test(tc, test_selection__F4_invalid_subobjects_fail_creation);
    tcase_add_test(tc, test_selection__F5_a_miss_never_falls_back);
    tcase_add_test(tc, test_selection__F6_no_selection_no_lookups);
    tcase_add_test(tc, test_selection__F7_one_selection_covers_every_query);
    tcase_add_test(tc, test_selection__G1_compute_graphics_and_streams_select);
    tcase_add_test(tc, test_selection__G3_add_to_state_object_selects_for_itself);
    tcase_add_test(tc, test_selection__G4_referenced_collections_keep_their_psdb);
    tcase_add_test(tc, test_selection__I1_device_holds_default_until_replaced_or_destroyed);
    tcase_add_test(tc, test_selection__I2_operation_holds_its_session);
    tcase_add_test(tc, test_selection__I3_none_object_keeps_session);
    tcase_add_test(tc, test_selection__I4_create_only_falls_back_to_implicit_never_device_default);
    tcase_add_test(tc, test_selection__I5_object_without_psdb_never_gains_one);
    tcase_add_test(tc, test_selection__I6_replacing_releases_only_the_device_reference);
    tcase_add_test(tc, test_selection__sample_set_and_clear_the_device_default);
    tcase_add_test(tc, test_selection__sample_override_the_device_default_for_one_pipeline_state);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
