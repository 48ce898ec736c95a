/* cmd_replay.c - psdb replay: create every pipeline of an SODB on a device, as the game would,
 * report how many the registered (or a given) PSDB served, which missed and why, and gate a CI
 * pipeline on the hit rate (schema/REPLAY.md). */
#include "tool.h"

#include "junit.h"
#include "replay_report.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

/* Exit statuses (schema/REPLAY.md): 0 done (and the gate met), 1 an error (including a failed
 * creation or a report that could not be written), 2 a usage error, 3 the hit rate is below
 * --min-hit-rate. */
#define REPLAY_EXIT_BELOW_MIN 3
#define REPLAY_MAX_LISTED_DEFAULT 1000u
#define REPLAY_MAX_LISTED_LIMIT 1000000u

static const char usage_text[] =
    "usage: psdb replay SODB --family F --abi-min A --abi-max B [--profile-version V]\n"
    "                   [--exe-path PATH] [--registry DIR] [--psdb FILE] [--cost-ns-per-kib N]\n"
    "                   [--min-hit-rate R] [--junit FILE] [--max-listed N] [--json]\n"
    "\n"
    "Creates a device for the adapter family and ABI range, with the SODB's application identity,\n"
    "and creates every pipeline and state object the SODB records. With --exe-path the device's\n"
    "implicit default is the PSDB registered for that executable (psdb install); --psdb FILE sets\n"
    "FILE as the device-wide default instead. Prints the device statistics: how many creations\n"
    "found every value in the PSDB. --cost-ns-per-kib sets the simulated compile cost of a miss\n"
    "(default: the reference compiler's).\n"
    "\n"
    "The hit rate is PSDB hits / created objects: the pipelines and state objects the device\n"
    "created (failed creations and entries replay cannot create, such as Vulkan entries, are not\n"
    "in it), a hit being a creation that found every value it looked up in the selected PSDB (a\n"
    "partial hit is a miss). A replay that created nothing has hit rate 0.\n"
    "\n"
    "  --min-hit-rate R  exit with status 3 when the hit rate is below R: a fraction in [0, 1]\n"
    "                    (0.95, at most 9 decimals) or a percentage (95%, at most 7); equal\n"
    "                    passes\n"
    "  --junit FILE      write a JUnit XML report to FILE (replaced atomically, also when the\n"
    "                    gate fails): one test case per SODB kind and one failing test case per\n"
    "                    missed or failed creation with its reason\n"
    "  --max-listed N    list at most N missed or failed creations one by one in the JUnit and\n"
    "                    JSON reports (default 1000, at most 1000000); the rest are counted\n"
    "  --json            print the summary as one JSON object\n"
    "\n"
    "Exit status: 0 replayed (and the hit rate at least R); 1 an error (the SODB, the device, a\n"
    "failed creation, the report file); 2 an unknown option; 3 the hit rate is below R.\n";

typedef struct replay {
    psdb_device *dev;
    replay_report *report;
    psdb_hr fatal; /* out of memory while counting: stops the walk */
} replay;

static double seconds_between(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static int replay_one(uint32_t sodb_kind, const uint8_t key[32], uint64_t version, const void *desc,
                      size_t size, void *ctx)
{
    replay *r = ctx;
    psdb_hr hr = PSDB_S_OK;
    psdb_sodb_entry *e = NULL;
    psdb_pipeline *p = NULL;
    psdb_state_object *so = NULL;
    psdb_creation_info info;
    const char *step = "decode";
    struct timespec t0, t1;
    uint32_t kind = replay_kind_of(sodb_kind);
    if (kind == REPLAY_KIND_COUNT) /* psdb_sodb_foreach refuses other kinds */
        goto cleanup;
    if (kind == REPLAY_KIND_VK_COMPUTE || kind == REPLAY_KIND_VK_GRAPHICS) {
        /* The reference driver creates D3D12 descriptions only (schema/SODB.md section 3). */
        replay_report_skipped(r->report, kind);
        goto cleanup;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    replay_report_begin(r->report);
    hr = psdb_sodb_decode(sodb_kind, desc, size, &e);
    if (PSDB_SUCCEEDED(hr)) {
        step = "creation";
        if (kind == REPLAY_KIND_COMPUTE) {
            hr = psdb_device_create_compute_pipeline(r->dev, e->compute, &p);
        } else if (kind == REPLAY_KIND_GRAPHICS) {
            hr = psdb_device_create_graphics_pipeline(r->dev, e->graphics, &p);
        } else {
            /* A recorded collection is only a key: objects that build on collections cannot be
             * recreated from the SODB alone. */
            for (uint32_t i = 0; i < e->state_object->num_subobjects; i++)
                if (e->state_object->subobjects[i].type == PSDB_SUBOBJECT_EXISTING_COLLECTION) {
                    replay_report_skipped(r->report, kind);
                    goto cleanup;
                }
            hr = psdb_device_create_state_object(r->dev, e->state_object, &so);
        }
    }
    if (PSDB_SUCCEEDED(hr)) {
        step = "creation info";
        hr = p ? psdb_pipeline_get_creation_info(p, &info)
               : psdb_state_object_get_creation_info(so, &info);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (PSDB_SUCCEEDED(hr))
        hr = replay_report_created(r->report, kind, key, version, &info, seconds_between(&t0, &t1));
    else
        hr = replay_report_failed(r->report, kind, key, version, hr, step,
                                  seconds_between(&t0, &t1));
    if (PSDB_FAILED(hr))
        r->fatal = hr;
cleanup:
    psdb_pipeline_release(p);
    psdb_state_object_release(so);
    psdb_sodb_entry_release(e);
    return PSDB_FAILED(r->fatal);
}

/* The replay's statistics: one JSON object with --json, else a few lines. */
static int print_summary(const psdb_statistics *st, const replay_report *rep,
                         const replay_rate *threshold, int json, double secs)
{
    int rc = -1;
    json_t *o = NULL;
    uint32_t created = st->pipeline_states.num_created + st->state_objects.num_created;
    uint32_t missed =
        st->pipeline_states.num_psdb_cache_missed + st->state_objects.num_psdb_cache_missed;
    uint32_t hits = created - missed;
    double hit_rate = created ? 100.0 * (double)hits / (double)created : 0.0;
    replay_counts total = replay_report_total(rep);
    char text[32];
    if (json) {
        o = json_pack("{s:b, s:{s:i, s:i, s:i, s:i}, s:{s:i, s:i, s:i, s:i}, s:f, s:i, s:f}",
                      "default_psdb_registered", st->default_psdb_registered, "pipeline_states",
                      "created", (int)st->pipeline_states.num_created, "psdb_missed",
                      (int)st->pipeline_states.num_psdb_cache_missed, "total_missed",
                      (int)st->pipeline_states.num_total_cache_missed, "unknown",
                      (int)st->pipeline_states.num_cache_unknown, "state_objects", "created",
                      (int)st->state_objects.num_created, "psdb_missed",
                      (int)st->state_objects.num_psdb_cache_missed, "total_missed",
                      (int)st->state_objects.num_total_cache_missed, "unknown",
                      (int)st->state_objects.num_cache_unknown, "psdb_hit_rate", hit_rate, "failed",
                      (int)total.failed, "seconds", secs);
        if (!o || json_object_set_new(o, "created", json_integer(created)) != 0 ||
            json_object_set_new(o, "hits", json_integer(hits)) != 0 ||
            json_object_set_new(o, "hit_rate",
                                json_real(created ? (double)hits / (double)created : 0.0)) != 0)
            goto cleanup;
        if (threshold &&
            (json_object_set_new(o, "min_hit_rate",
                                 json_real((double)threshold->num / (double)threshold->den)) != 0 ||
             json_object_set_new(
                 o, "gate",
                 json_string(replay_rate_met(hits, created, threshold) ? "passed" : "failed")) !=
                 0))
            goto cleanup;
        if (replay_report_add_json(rep, o) != 0 ||
            tool_json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(15)) != 0)
            goto cleanup;
        fputc('\n', stdout);
    } else {
        printf("default PSDB registered: %s\n", st->default_psdb_registered ? "yes" : "no");
        printf("created %u (pipelines %u, state objects %u), PSDB missed %u, hit rate %s, "
               "failed %u, %.3f s\n",
               created, st->pipeline_states.num_created, st->state_objects.num_created, missed,
               replay_rate_percent(hits, created, text, sizeof(text)), total.failed, secs);
        replay_report_print(rep, stdout);
    }
    rc = 0;
cleanup:
    json_decref(o);
    return rc;
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
        {"min-hit-rate", required_argument, NULL, 'g'},
        {"junit", required_argument, NULL, 'u'},
        {"max-listed", required_argument, NULL, 'L'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *family = NULL, *exe = NULL, *registry = NULL, *psdb_path = NULL, *junit = NULL;
    uint64_t abi_min = 0, abi_max = 0, profile = 0, cost = 0,
             max_listed = REPLAY_MAX_LISTED_DEFAULT;
    int json = 0, c, rc = 1;
    psdb_sodb *sodb = NULL;
    psdb_session *session = NULL;
    replay_report report = {0};
    replay_rate threshold_value = {0, 1};
    const replay_rate *threshold = NULL;
    psdb__buf xml = {0};
    replay r = {.report = &report};
    char why[128];

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
        case 'g':
            if (replay_rate_parse(optarg, &threshold_value, why, sizeof(why)))
                return tool_fail("replay", "--min-hit-rate '%s': %s", optarg, why);
            threshold = &threshold_value;
            break;
        case 'u':
            if (!*optarg)
                return tool_fail("replay", "--junit: empty file name");
            junit = optarg;
            break;
        case 'L':
            if (psdb__parse_u64(optarg, &max_listed) || max_listed > REPLAY_MAX_LISTED_LIMIT)
                return tool_fail("replay", "--max-listed '%s': not a number from 0 to %u", optarg,
                                 REPLAY_MAX_LISTED_LIMIT);
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
    if (tool_bad_name("replay", "--family", family))
        return 1;
    report.max_cases = (size_t)max_listed;
    time_t started = time(NULL);
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
    /* Without --psdb, a creation selects nothing only when no default PSDB was found. */
    report.no_psdb = exe ? "no PSDB selected: none registered for --exe-path fits the family, ABI "
                           "range and profile version (default PSDB registered: no)"
                         : "no PSDB selected: neither --psdb nor --exe-path was given";
    hr = psdb_device_set_lookup_callback(r.dev, replay_report_lookup, &report);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("replay", "lookup callback: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    hr = psdb_sodb_foreach(sodb, replay_one, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (PSDB_FAILED(r.fatal)) {
        rc = tool_fail("replay", "counting the creations: %s", psdb_hr_str(r.fatal));
        goto cleanup;
    }
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
    double secs = seconds_between(&t0, &t1);
    uint32_t created = st.pipeline_states.num_created + st.state_objects.num_created;
    uint32_t hits =
        created - st.pipeline_states.num_psdb_cache_missed - st.state_objects.num_psdb_cache_missed;
    replay_counts total = replay_report_total(&report);
    /* The per-kind counts come from each creation's info, the gate's from the device: they are
     * the same creations, so a difference is a defect to report, not a figure to publish. */
    if (total.created != created || total.hits != hits) {
        rc = tool_fail("replay",
                       "the creations' info (%u created, %u hits) disagrees with the device "
                       "statistics (%u created, %u hits)",
                       total.created, total.hits, created, hits);
        goto cleanup;
    }
    if (print_summary(&st, &report, threshold, json, secs) != 0) {
        rc = tool_fail("replay", "printing the summary: out of memory");
        goto cleanup;
    }
    rc = 0;
    if (junit) {
        char stamp[32], err[512];
        struct tm tm;
        gmtime_r(&started, &tm);
        strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        replay_junit_run run = {.sodb = argv[optind],
                                .app_name = id.desc.name,
                                .family = family,
                                .exe_path = exe,
                                .psdb_path = psdb_path,
                                .app_version = id.desc.version,
                                .abi_min = abi_min,
                                .abi_max = abi_max,
                                .profile_version = profile,
                                .created = created,
                                .hits = hits,
                                .threshold = threshold,
                                .seconds = secs,
                                .timestamp = stamp};
        hr = replay_report_junit(&report, &run, &xml);
        if (PSDB_FAILED(hr))
            rc = tool_fail("replay", "--junit %s: %s", junit, psdb_hr_str(hr));
        else if (junit_write_atomic(junit, &xml, err, sizeof(err)) != 0)
            rc = tool_fail("replay", "--junit: %s", err);
    }
    if (total.failed) {
        const replay_case *first = NULL;
        for (size_t i = 0; i < report.num_cases && !first; i++)
            if (PSDB_FAILED(report.cases[i].error))
                first = &report.cases[i];
        rc = tool_fail("replay", "%u creations failed (first: %s)", total.failed,
                       first ? first->message : "not listed");
    }
    /* An error (status 1) says more than the gate: it stays. */
    if (threshold && !replay_gate_say(hits, created, threshold, json) && rc == 0)
        rc = REPLAY_EXIT_BELOW_MIN;
cleanup:
    psdb__buf_free(&xml);
    replay_report_free(&report);
    psdb_session_release(session);
    psdb_device_release(r.dev);
    psdb_sodb_release(sodb);
    return rc;
}
