/* cmd_replay.c - psdb replay: create every pipeline of an SODB on a device, as the game would, and
 * report how many the registered (or a given) PSDB served. */
#include "tool.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

static const char usage_text[] =
    "usage: psdb replay SODB --family F --abi-min A --abi-max B [--profile-version V]\n"
    "                   [--exe-path PATH] [--registry DIR] [--psdb FILE] [--cost-ns-per-kib N]\n"
    "                   [--json]\n"
    "\n"
    "Creates a device for the adapter family and ABI range, with the SODB's application identity,\n"
    "and creates every pipeline and state object the SODB records. With --exe-path the device's\n"
    "implicit default is the PSDB registered for that executable (psdb install); --psdb FILE sets\n"
    "FILE as the device-wide default instead. Prints the device statistics: how many creations\n"
    "found every value in the PSDB. --cost-ns-per-kib sets the simulated compile cost of a miss\n"
    "(default: the reference compiler's).\n";

typedef struct replay {
    psdb_device *dev;
    uint32_t failed;
    psdb_hr first_error;
} replay;

static int replay_one(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                      size_t size, void *ctx)
{
    (void)key;
    (void)version;
    replay *r = ctx;
    psdb_hr hr = PSDB_E_INVALIDARG;
    psdb_sodb_entry *e = NULL;
    if (kind == PSDB_SODB_COMPUTE) {
        psdb_pipeline *p = NULL;
        hr = psdb_sodb_decode(kind, desc, size, &e);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_device_create_compute_pipeline(r->dev, e->compute, &p);
        psdb_pipeline_release(p);
    } else if (kind == PSDB_SODB_GRAPHICS) {
        psdb_pipeline *p = NULL;
        hr = psdb_sodb_decode(kind, desc, size, &e);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_device_create_graphics_pipeline(r->dev, e->graphics, &p);
        psdb_pipeline_release(p);
    } else if (kind == PSDB_SODB_STATE_OBJECT) {
        psdb_state_object *so = NULL;
        hr = psdb_sodb_decode(kind, desc, size, &e);
        /* A recorded collection is only a key: objects that build on collections cannot be
         * recreated from the SODB alone. */
        for (uint32_t i = 0; PSDB_SUCCEEDED(hr) && i < e->state_object->num_subobjects; i++)
            if (e->state_object->subobjects[i].type == PSDB_SUBOBJECT_EXISTING_COLLECTION)
                hr = PSDB_S_FALSE;
        if (hr == PSDB_S_OK)
            hr = psdb_device_create_state_object(r->dev, e->state_object, &so);
        psdb_state_object_release(so);
    }
    psdb_sodb_entry_release(e);
    if (PSDB_FAILED(hr)) {
        if (!r->failed)
            r->first_error = hr;
        r->failed++;
    }
    return 0;
}

/* The replay's statistics: one JSON object with --json, else two lines. */
static void print_summary(const psdb_statistics *st, uint32_t failed, int json, double secs)
{
    uint32_t created = st->pipeline_states.num_created + st->state_objects.num_created;
    uint32_t missed =
        st->pipeline_states.num_psdb_cache_missed + st->state_objects.num_psdb_cache_missed;
    double hit_rate = created ? 100.0 * (double)(created - missed) / (double)created : 0.0;
    if (json) {
        json_t *o =
            json_pack("{s:b, s:{s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i}, s:f, s:i, s:f}",
                      "default_psdb_registered", st->default_psdb_registered, "pipeline_states",
                      "created", (int)st->pipeline_states.num_created, "psdb_missed",
                      (int)st->pipeline_states.num_psdb_cache_missed, "total_missed",
                      (int)st->pipeline_states.num_total_cache_missed, "unknown",
                      (int)st->pipeline_states.num_cache_unknown, "state_objects", "created",
                      (int)st->state_objects.num_created, "psdb_missed",
                      (int)st->state_objects.num_psdb_cache_missed, "total_missed",
                      (int)st->state_objects.num_total_cache_missed, "unknown",
                      (int)st->state_objects.num_cache_unknown, "psdb_hit_rate", hit_rate, "failed",
                      (int)failed, "seconds", secs);
        if (o) {
            tool_json_dumpf(o, stdout, JSON_COMPACT);
            fputc('\n', stdout);
            json_decref(o);
        }
    } else {
        printf("default PSDB registered: %s\n", st->default_psdb_registered ? "yes" : "no");
        printf("created %u (pipelines %u, state objects %u), PSDB missed %u, hit rate %.1f%%, "
               "failed %u, %.3f s\n",
               created, st->pipeline_states.num_created, st->state_objects.num_created, missed,
               hit_rate, failed, secs);
    }
}

int cmd_replay(int argc, char **argv)
{
    /* --backend vulkan: a real device (cmd_replay_vulkan.c). */
    if (tool_backend_is_vulkan(argc, argv))
        return cmd_replay_vulkan(argc, argv);
    static const struct option opts[] = {
        {"family", required_argument, NULL, 'f'},
        {"abi-min", required_argument, NULL, 'm'},
        {"abi-max", required_argument, NULL, 'M'},
        {"profile-version", required_argument, NULL, 'p'},
        {"exe-path", required_argument, NULL, 'e'},
        {"registry", required_argument, NULL, 'r'},
        {"psdb", required_argument, NULL, 'P'},
        {"cost-ns-per-kib", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *family = NULL, *exe = NULL, *registry = NULL, *psdb_path = NULL;
    uint64_t abi_min = 0, abi_max = 0, profile = 0, cost = 0;
    int json = 0, c, rc = 1;
    psdb_sodb *sodb = NULL;
    psdb_session *session = NULL;
    replay r = {0};

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            family = optarg;
            break;
        case 'e':
            exe = optarg;
            break;
        case 'r':
            registry = optarg;
            break;
        case 'P':
            psdb_path = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'm':
            if (psdb__parse_u64(optarg, &abi_min))
                return tool_fail("replay", "--abi-min: not a number: '%s'", optarg);
            break;
        case 'M':
            if (psdb__parse_u64(optarg, &abi_max))
                return tool_fail("replay", "--abi-max: not a number: '%s'", optarg);
            break;
        case 'p':
            if (psdb__parse_version(optarg, &profile))
                return tool_fail("replay", "--profile-version: not a version: '%s'", optarg);
            break;
        case 'c':
            if (psdb__parse_u64(optarg, &cost))
                return tool_fail("replay", "--cost-ns-per-kib: not a number: '%s'", optarg);
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        default:
            fputs(usage_text, stderr);
            return 2;
        }
    }
    if (optind != argc - 1 || !family || !abi_min || !abi_max)
        return tool_fail("replay", "an SODB, --family, --abi-min and --abi-max are required "
                                   "(see --help)");
    psdb_hr hr = psdb_sodb_open(argv[optind], &sodb);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("replay", "%s: %s", argv[optind], psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_app_identity id;
    hr = psdb_sodb_get_identity(sodb, &id);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("replay", "%s: %s", argv[optind], psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_device_desc dd = {
        .adapter = {.vendor_id = 0x1234,
                    .device_id = 1,
                    .family = family,
                    .abi_min = abi_min,
                    .abi_max = abi_max,
                    .app_profile_version = profile},
        .identity = &id,
        .exe_path = exe,
        .registry_dir = registry,
        .compile_ns_per_kib = cost,
    };
    hr = psdb_device_create(&dd, &r.dev);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("replay", "device: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    if (psdb_path) {
        psdb_session_desc sd = {.psdb_path = psdb_path};
        hr = psdb_device_open_session(r.dev, &sd, &session);
        if (PSDB_SUCCEEDED(hr))
            hr = psdb_device_set_default_session(r.dev, session, PSDB_SESSION_FLAG_NONE);
        if (PSDB_FAILED(hr)) {
            rc = tool_fail("replay", "%s: %s", psdb_path, psdb_hr_str(hr));
            goto cleanup;
        }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    hr = psdb_sodb_foreach(sodb, replay_one, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("replay", "%s: %s", argv[optind], psdb_hr_str(hr));
        goto cleanup;
    }
    psdb_statistics st;
    hr = psdb_device_get_statistics(r.dev, &st);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("replay", "statistics: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    print_summary(&st, r.failed, json,
                  (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    if (r.failed) {
        rc = tool_fail("replay", "%u creations failed (first: %s)", r.failed,
                       psdb_hr_str(r.first_error));
        goto cleanup;
    }
    rc = 0;
cleanup:
    psdb_session_release(session);
    psdb_device_release(r.dev);
    psdb_sodb_release(sodb);
    return rc;
}
