/* rt_fixture.h - shared fixtures of the runtime suites: an adapter and identity, devices, pipeline
 * descriptions, PSDBs built with the reference compiler, and a lookup-event recorder. Header-only
 * (static functions) because each suite is one executable. */
#ifndef PSDB_RT_FIXTURE_H
#define PSDB_RT_FIXTURE_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compiler.h"
#include "testutil.h"

/* Every helper is static; a suite uses some of them. */
#define RT_FN static __attribute__((unused))

#define RT_FAMILY "contoso-gfx9"
#define RT_EXE "/games/contoso/game"

static const psdb_app_identity rt_identity = {
    .desc = {.exe_filename = "game", .name = "Game", .version = PSDB_VERSION(1, 2, 0, 0)},
    .app_id = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};

RT_FN psdb_adapter_desc rt_adapter(void)
{
    psdb_adapter_desc a = {.vendor_id = 0x1234,
                           .device_id = 0x42,
                           .family = RT_FAMILY,
                           .abi_min = 1,
                           .abi_max = 10,
                           .compiler_version = PSDB_VERSION(1, 0, 0, 0),
                           .app_profile_version = PSDB_VERSION(3, 1, 0, 0),
                           .driver_build = 77};
    return a;
}

RT_FN psdb_target rt_target(uint64_t abi)
{
    psdb_target t = {.family = RT_FAMILY,
                     .abi_version = abi,
                     .compiler_version = PSDB_VERSION(1, 0, 0, 0),
                     .profile_version = PSDB_VERSION(3, 1, 0, 0)};
    return t;
}

/* A device with identity, no simulated compile cost, on the given registry root. */
RT_FN psdb_device *rt_device(const char *registry, const char *exe_path)
{
    psdb_device *dev = NULL;
    psdb_device_desc d = {.adapter = rt_adapter(),
                          .identity = &rt_identity,
                          .exe_path = exe_path,
                          .registry_dir = registry,
                          .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    return dev;
}

/* Compute description number n: distinct bytecode per n. Storage lives in the struct. */
typedef struct rt_compute {
    char cs[64], rs[16];
    psdb_compute_pipeline_desc desc;
} rt_compute;

RT_FN void rt_compute_init(rt_compute *c, int n, const psdb_session_subobject *psdb)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->cs, sizeof(c->cs), "compute shader bytecode #%d", n);
    snprintf(c->rs, sizeof(c->rs), "root-sig");
    c->desc.root_signature = c->rs;
    c->desc.root_signature_size = strlen(c->rs);
    c->desc.cs.code = c->cs;
    c->desc.cs.size = strlen(c->cs);
    c->desc.psdb = psdb;
}

typedef struct rt_graphics {
    char vs[64], ps[64], rs[16];
    psdb_graphics_pipeline_desc desc;
} rt_graphics;

RT_FN void rt_graphics_init(rt_graphics *g, int n, const psdb_session_subobject *psdb)
{
    memset(g, 0, sizeof(*g));
    snprintf(g->vs, sizeof(g->vs), "vertex shader #%d", n);
    snprintf(g->ps, sizeof(g->ps), "pixel shader #%d", n);
    snprintf(g->rs, sizeof(g->rs), "root-sig");
    g->desc.root_signature = g->rs;
    g->desc.root_signature_size = strlen(g->rs);
    g->desc.vs.code = g->vs;
    g->desc.vs.size = strlen(g->vs);
    g->desc.ps.code = g->ps;
    g->desc.ps.size = strlen(g->ps);
    g->desc.sample_mask = 0xFFFFFFFFu;
    g->desc.num_render_targets = 1;
    g->desc.rtv_formats[0] = PSDB_FORMAT_R8G8B8A8_UNORM;
    g->desc.ps_outputs[0].components = 4;
    g->desc.sample_count = 1;
    g->desc.psdb = psdb;
}

/* A state object with one DXIL library (n picks its bytecode). */
typedef struct rt_state_object {
    char lib[64], rs[16];
    const char *exports[1];
    psdb_dxil_library_desc dxil;
    psdb_shader global_rs;
    psdb_existing_collection_desc coll;
    psdb_state_subobject sub[4];
    psdb_state_object_desc desc;
} rt_state_object;

RT_FN void rt_state_object_init(rt_state_object *s, uint32_t type, int n,
                                const psdb_session_subobject *psdb, psdb_state_object *collection)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->lib, sizeof(s->lib), "dxil library #%d", n);
    snprintf(s->rs, sizeof(s->rs), "global-rs");
    s->exports[0] = "RayGen";
    s->dxil.library.code = s->lib;
    s->dxil.library.size = strlen(s->lib);
    s->dxil.exports = s->exports;
    s->dxil.num_exports = 1;
    s->global_rs.code = s->rs;
    s->global_rs.size = strlen(s->rs);
    uint32_t k = 0;
    s->sub[k++] = (psdb_state_subobject){PSDB_SUBOBJECT_GLOBAL_ROOT_SIGNATURE, &s->global_rs};
    s->sub[k++] = (psdb_state_subobject){PSDB_SUBOBJECT_DXIL_LIBRARY, &s->dxil};
    if (collection) {
        s->coll.collection = collection;
        s->sub[k++] = (psdb_state_subobject){PSDB_SUBOBJECT_EXISTING_COLLECTION, &s->coll};
    }
    if (psdb)
        s->sub[k++] = (psdb_state_subobject){PSDB_SUBOBJECT_PSDB, psdb};
    s->desc.type = type;
    s->desc.num_subobjects = k;
    s->desc.subobjects = s->sub;
}

/* Adds every unit of a plan to a PSDB writer (skip_last: leave the last unit out, a partial
 * hit). */
RT_FN void rt_put_plan(psdb_writer *w, const psdb__plan *plan, const psdb_target *t, int skip_last)
{
    psdb_value_ref refs[16];
    uint32_t n = 0;
    for (uint32_t i = 0; i < plan->num_units; i++) {
        if (skip_last && i + 1 == plan->num_units)
            break;
        psdb__buf code = {0}, meta = {0};
        ck_assert_hr(psdb__compile_unit(&plan->units[i], t, PSDB_COMPILE_COST_FREE, &code, &meta),
                     PSDB_S_OK);
        psdb_hr hr = psdb_writer_put_value(w, plan->units[i].key, 32, PSDB_VALUE_OBJECT_CODE,
                                           code.data, code.len);
        ck_assert(hr == PSDB_S_OK || hr == PSDB_S_FALSE);
        hr = psdb_writer_put_value(w, plan->units[i].key, 32, PSDB_VALUE_METADATA, meta.data,
                                   meta.len);
        ck_assert(hr == PSDB_S_OK || hr == PSDB_S_FALSE);
        psdb__buf_free(&code);
        psdb__buf_free(&meta);
        refs[n].key = plan->units[i].key;
        refs[n].key_size = 32;
        n++;
    }
    psdb_hr hr = psdb_writer_put_group(w, plan->group_key, 32, 1, n, refs);
    ck_assert(hr == PSDB_S_OK || hr == PSDB_E_ALREADY_EXISTS);
}

/* What a PSDB built by rt_make_psdb holds. */
typedef struct rt_contents {
    const int *compute; /* compute descriptions by number */
    int num_compute;
    const int *graphics;
    int num_graphics;
    const int *state_objects; /* RAYTRACING_PIPELINE state objects without collections */
    int num_state_objects;
    int partial; /* leave each object's last unit out */
    uint64_t abi;
} rt_contents;

RT_FN void rt_make_psdb(const char *path, const rt_contents *c)
{
    psdb_writer *w = NULL;
    psdb_target t = rt_target(c->abi ? c->abi : 5);
    ck_assert_hr(psdb_writer_create(path, &rt_identity, &t, &w), PSDB_S_OK);
    for (int i = 0; i < c->num_compute; i++) {
        rt_compute d;
        psdb__plan plan = {0};
        rt_compute_init(&d, c->compute[i], NULL);
        ck_assert_hr(psdb__plan_compute(&d.desc, &plan), PSDB_S_OK);
        rt_put_plan(w, &plan, &t, c->partial);
        psdb__plan_free(&plan);
    }
    for (int i = 0; i < c->num_graphics; i++) {
        rt_graphics d;
        psdb__plan plan = {0};
        rt_graphics_init(&d, c->graphics[i], NULL);
        ck_assert_hr(psdb__plan_graphics(&d.desc, &plan), PSDB_S_OK);
        rt_put_plan(w, &plan, &t, c->partial);
        psdb__plan_free(&plan);
    }
    for (int i = 0; i < c->num_state_objects; i++) {
        rt_state_object d;
        psdb__plan plan = {0};
        rt_state_object_init(&d, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, c->state_objects[i], NULL,
                             NULL);
        ck_assert_hr(psdb__plan_state_object(&d.desc, &plan), PSDB_S_OK);
        rt_put_plan(w, &plan, &t, c->partial);
        psdb__plan_free(&plan);
    }
    ck_assert_hr(psdb_writer_finish(w), PSDB_S_OK);
    psdb_writer_release(w);
}

/* A PSDB with compute descriptions 0..n-1, graphics 0..n-1 and state objects 0..n-1. */
RT_FN void rt_make_full_psdb(const char *path, int n)
{
    int ids[64];
    for (int i = 0; i < n && i < 64; i++)
        ids[i] = i;
    rt_contents c = {.compute = ids,
                     .num_compute = n,
                     .graphics = ids,
                     .num_graphics = n,
                     .state_objects = ids,
                     .num_state_objects = n};
    rt_make_psdb(path, &c);
}

/* Registers path as the "default" component of RT_EXE for RT_FAMILY. */
RT_FN void rt_register_default(const char *registry, const char *path)
{
    psdb_installer *inst = NULL;
    psdb_application *app = NULL;
    psdb_installer_desc d = {.name = "test-installer", .root_dir = registry};
    ck_assert_hr(psdb_installer_open(&d, &inst), PSDB_S_OK);
    ck_assert_hr(psdb_installer_register_application(inst, RT_EXE, &rt_identity.desc, &app),
                 PSDB_S_OK);
    psdb_component_psdb p = {RT_FAMILY, path};
    ck_assert_hr(
        psdb_application_register_component(app, PSDB_DEFAULT_COMPONENT, NULL, 1, &p, NULL),
        PSDB_S_OK);
    psdb_application_release(app);
    psdb_installer_release(inst);
}

RT_FN psdb_session *rt_open(psdb_device *dev, const char *path)
{
    psdb_session *s = NULL;
    psdb_session_desc d = {.psdb_path = path};
    ck_assert_hr(psdb_device_open_session(dev, &d, &s), PSDB_S_OK);
    return s;
}

/* ---- lookup recorder ------------------------------------------------------------------------- */
#define RT_MAX_EVENTS 4096

typedef struct rt_event {
    uint64_t op;
    psdb_session *session;
    uint32_t type, query;
    psdb_hr result;
} rt_event;

typedef struct rt_recorder {
    pthread_mutex_t lock;
    rt_event ev[RT_MAX_EVENTS];
    size_t n;
} rt_recorder;

RT_FN void rt_record(const psdb_lookup_event *e, void *ctx)
{
    rt_recorder *r = ctx;
    pthread_mutex_lock(&r->lock);
    if (r->n < RT_MAX_EVENTS) {
        rt_event *x = &r->ev[r->n++];
        x->op = e->operation_id;
        x->session = e->session;
        x->type = e->value_type;
        x->query = e->query;
        x->result = e->result;
    }
    pthread_mutex_unlock(&r->lock);
}

RT_FN rt_recorder *rt_recorder_new(psdb_device *dev)
{
    rt_recorder *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    pthread_mutex_init(&r->lock, NULL);
    ck_assert_hr(psdb_device_set_lookup_callback(dev, rt_record, r), PSDB_S_OK);
    return r;
}

RT_FN void rt_recorder_free(rt_recorder *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r);
}

/* Events of one operation; all_in set to 1 when every one searched `s`. */
RT_FN size_t rt_events_of(rt_recorder *r, uint64_t op, psdb_session *s, int *all_in)
{
    size_t n = 0;
    *all_in = 1;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n; i++) {
        if (r->ev[i].op != op)
            continue;
        n++;
        if (r->ev[i].session != s)
            *all_in = 0;
    }
    pthread_mutex_unlock(&r->lock);
    return n;
}

RT_FN void rt_destroyed(void *ctx)
{
    (*(int *)ctx)++;
}

#endif
