/* runtime_e2e_test.c - end to end: capture a run into an SODB, `psdb compile` it, register the PSDB
 * as the implicit default, replay on a new device (100% PSDB hits), then move the lookups to an
 * explicit device-wide default; `psdb registry list` shows the registration. */
#include "rt_fixture.h"

#define NUM_COMPUTE 6
#define NUM_GRAPHICS 6
#define NUM_STATE_OBJECTS 2

typedef struct replay_log {
    pthread_mutex_t lock;
    size_t events, hits;
    psdb_session *sessions[4];
    size_t num_sessions;
} replay_log;

static void log_event(const psdb_lookup_event *e, void *ctx)
{
    replay_log *l = ctx;
    pthread_mutex_lock(&l->lock);
    l->events++;
    if (e->result == PSDB_S_OK)
        l->hits++;
    size_t i = 0;
    while (i < l->num_sessions && l->sessions[i] != e->session)
        i++;
    if (i == l->num_sessions && i < 4)
        l->sessions[l->num_sessions++] = e->session;
    pthread_mutex_unlock(&l->lock);
}

/* The same creations every run. */
static void run_workload(psdb_device *dev)
{
    for (int i = 0; i < NUM_COMPUTE; i++) {
        rt_compute c;
        psdb_pipeline *p = NULL;
        rt_compute_init(&c, i, NULL);
        ck_assert_hr(psdb_device_create_compute_pipeline(dev, &c.desc, &p), PSDB_S_OK);
        psdb_pipeline_release(p);
    }
    for (int i = 0; i < NUM_GRAPHICS; i++) {
        rt_graphics g;
        psdb_pipeline *p = NULL;
        rt_graphics_init(&g, i, NULL);
        ck_assert_hr(psdb_device_create_graphics_pipeline(dev, &g.desc, &p), PSDB_S_OK);
        psdb_pipeline_release(p);
    }
    for (int i = 0; i < NUM_STATE_OBJECTS; i++) {
        rt_state_object s;
        psdb_state_object *so = NULL;
        rt_state_object_init(&s, PSDB_STATE_OBJECT_RAYTRACING_PIPELINE, i, NULL, NULL);
        ck_assert_hr(psdb_device_create_state_object(dev, &s.desc, &so), PSDB_S_OK);
        psdb_state_object_release(so);
    }
}

static void compile(const char *sodb, uint64_t abi, const char *out)
{
    char *cmd = NULL;
    ck_assert_int_gt(asprintf(&cmd,
                              "'%s' compile '%s' --family %s --abi %llu --compiler-version 1.0.0.0"
                              " --profile-version 3.1.0.0 --cost-ns-per-kib 0 -o '%s'",
                              PSDB_TOOL, sodb, RT_FAMILY, (unsigned long long)abi, out),
                     0);
    ck_assert_msg(tu_run(cmd, NULL) == 0, "psdb compile failed: %s", cmd);
    free(cmd);
}

START_TEST(test_runtime_e2e__capture_compile_register_replay)
{
    char *dir = tu_mkdtemp(), *reg = tu_path(dir, "registry"), *sodb = tu_path(dir, "run.sodb"),
         *psdb = tu_path(dir, "game.psdb"), *explicit_path = tu_path(dir, "explicit.psdb"),
         *listing = tu_path(dir, "list.json");
    psdb_statistics st;

    /* 1. A first run, no PSDB anywhere, captured. */
    psdb_device_desc d = {.adapter = rt_adapter(),
                          .identity = &rt_identity,
                          .exe_path = RT_EXE,
                          .registry_dir = reg,
                          .capture_sodb_path = sodb,
                          .compile_ns_per_kib = PSDB_COMPILE_COST_FREE};
    psdb_device *dev = NULL;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    run_workload(dev);
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_int_eq(st.default_psdb_registered, 0);
    ck_assert_uint_eq(st.pipeline_states.num_created, NUM_COMPUTE + NUM_GRAPHICS);
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, NUM_COMPUTE + NUM_GRAPHICS);
    psdb_device_release(dev);

    /* 2. psdb compile, 3. register as "default". */
    compile(sodb, 5, psdb);
    rt_register_default(reg, psdb);
    char *cmd = NULL;
    ck_assert_int_gt(asprintf(&cmd, "'%s' registry list --registry '%s' --json", PSDB_TOOL, reg),
                     0);
    ck_assert_int_eq(tu_run(cmd, listing), 0);
    free(cmd);
    char *text = tu_read_file(listing, NULL);
    ck_assert_ptr_nonnull(strstr(text, psdb));
    ck_assert_ptr_nonnull(strstr(text, "\"default\""));
    ck_assert_ptr_nonnull(strstr(text, RT_FAMILY));
    free(text);
    /* Text form, --help, and a bad argument. */
    ck_assert_int_gt(asprintf(&cmd, "'%s' registry list --registry '%s'", PSDB_TOOL, reg), 0);
    ck_assert_int_eq(tu_run(cmd, listing), 0);
    free(cmd);
    text = tu_read_file(listing, NULL);
    ck_assert_ptr_nonnull(strstr(text, RT_EXE));
    ck_assert_ptr_nonnull(strstr(text, "component default"));
    free(text);
    ck_assert_int_gt(asprintf(&cmd, "'%s' registry list --help", PSDB_TOOL), 0);
    ck_assert_int_eq(tu_run(cmd, NULL), 0);
    free(cmd);
    ck_assert_int_gt(asprintf(&cmd, "'%s' registry list --bogus", PSDB_TOOL), 0);
    ck_assert_int_ne(tu_run(cmd, NULL), 0);
    free(cmd);

    /* 4. A new device replays the same creations: every one is a PSDB hit. */
    d.capture_sodb_path = NULL;
    ck_assert_hr(psdb_device_create(&d, &dev), PSDB_S_OK);
    replay_log log = {0};
    pthread_mutex_init(&log.lock, NULL);
    ck_assert_hr(psdb_device_set_lookup_callback(dev, log_event, &log), PSDB_S_OK);
    run_workload(dev);
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_int_eq(st.default_psdb_registered, 1);
    ck_assert_uint_eq(st.pipeline_states.num_created, NUM_COMPUTE + NUM_GRAPHICS);
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, 0);
    ck_assert_uint_eq(st.pipeline_states.num_total_cache_missed, 0);
    ck_assert_uint_eq(st.state_objects.num_created, NUM_STATE_OBJECTS);
    ck_assert_uint_eq(st.state_objects.num_psdb_cache_missed, 0);
    ck_assert_uint_eq(psdb_device_get_local_compile_count(dev), 0);
    ck_assert_uint_gt(log.events, 0);
    ck_assert_uint_eq(log.hits, log.events);
    ck_assert_uint_eq(log.num_sessions, 1);
    psdb_session *implicit = log.sessions[0];

    /* 5. An explicit device-wide default (the same run compiled for ABI 6): the lookups move. */
    compile(sodb, 6, explicit_path);
    psdb_session *s = rt_open(dev, explicit_path);
    ck_assert_hr(psdb_device_set_default_session(dev, s, PSDB_SESSION_FLAG_NONE), PSDB_S_OK);
    log.events = log.hits = 0;
    log.num_sessions = 0;
    run_workload(dev);
    ck_assert_uint_eq(log.num_sessions, 1);
    ck_assert_ptr_eq(log.sessions[0], s);
    ck_assert_ptr_ne(log.sessions[0], implicit);
    ck_assert_uint_eq(log.hits, log.events);
    ck_assert_hr(psdb_device_get_statistics(dev, &st), PSDB_S_OK);
    ck_assert_uint_eq(st.pipeline_states.num_created, 2 * (NUM_COMPUTE + NUM_GRAPHICS));
    ck_assert_uint_eq(st.pipeline_states.num_psdb_cache_missed, 0);
    /* Clearing moves them back. */
    ck_assert_hr(psdb_device_set_default_session(dev, NULL, 0), PSDB_S_OK);
    log.num_sessions = 0;
    run_workload(dev);
    ck_assert_uint_eq(log.num_sessions, 1);
    ck_assert_ptr_eq(log.sessions[0], implicit);
    psdb_session_release(s);
    psdb_device_release(dev);
    pthread_mutex_destroy(&log.lock);
    tu_rmtree(dir);
    free(dir);
    free(reg);
    free(sodb);
    free(psdb);
    free(explicit_path);
    free(listing);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime_e2e");
    TCase *tc = tcase_create("runtime_e2e");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_runtime_e2e__capture_compile_register_replay);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
