/* cmd_replay_vulkan.c - `psdb replay --backend vulkan`: time-to-usable of every Vulkan pipeline of
 * an SODB on the Vulkan device, cold and with a PSDB (the Vulkan component's vkbe_replay), and the
 * D3D12 replay's hit rate, gate and reports for it (schema/REPLAY.md section 5). */
#include "tool.h"

#include <assert.h>
#include <limits.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/parse.h"
#include "junit.h"
#include "replay_report.h"
#include "vulkan/psdb_vulkan.h"

/* Exit statuses as the D3D12 replay's (schema/REPLAY.md section 2). */
#define REPLAY_EXIT_USAGE 2
#define REPLAY_EXIT_BELOW_MIN 3
#define REPLAY_MAX_LISTED_DEFAULT 1000u
#define REPLAY_MAX_LISTED_LIMIT 1000000u

static void usage(FILE *f)
{
    fprintf(f,
            "usage: psdb replay --backend vulkan SODB [PSDB] [--device N] [--exe-path PATH]\n"
            "                   [--registry DIR] [--min-hit-rate R] [--junit FILE]\n"
            "                   [--max-listed N] [--json]\n"
            "\n"
            "Creates and first-uses every Vulkan pipeline of SODB on the Vulkan device, cold\n"
            "(driver disk caches off), then, given PSDB, with it delivered as the layer\n"
            "delivers it, each pass in a fresh process. Reports time-to-usable per pipeline\n"
            "(the PSDB lookup, vkCreate*Pipelines and the first use; median, p95) and in total\n"
            "(with the merged cache's setup once per device), hits and misses, and the\n"
            "cold/PSDB ratio of the totals. The shader modules, layouts and render passes a\n"
            "pipeline needs are the application's own objects, made before it asks for the\n"
            "pipeline: their time is reported apart, as is the whole pass.\n"
            "\n"
            "The hit rate is PSDB hits / created pipelines (those of the pass with the PSDB;\n"
            "without one, every created pipeline misses); each miss has one reason: no_psdb,\n"
            "not_in_psdb, refused (the PSDB's data for it, or the whole PSDB, failed a check),\n"
            "lookup_error. D3D12 entries are skipped.\n"
            "\n"
            "  --device N        Vulkan device index (default 0)\n"
            "  --exe-path PATH   replay with the PSDB installed for this executable, found as\n"
            "                    the layer finds it: the registry's default component PSDB for\n"
            "                    PATH (links resolved) and the device's family, proven by the\n"
            "                    SHA-256 its install recorded; one that fails is refused (every\n"
            "                    pipeline a miss), none registered is no_psdb. Not with PSDB\n"
            "  --registry DIR    the registry's root for --exe-path (default: the user's,\n"
            "                    PSDB_REGISTRY_DIR honoured)\n"
            "  --min-hit-rate R  exit with status 3 when the hit rate is below R: a fraction in\n"
            "                    [0, 1] (0.95, at most 9 decimals) or a percentage (95%%, at most\n"
            "                    7); equal passes\n"
            "  --junit FILE      write a JUnit XML report to FILE (replaced atomically, also when\n"
            "                    the gate fails): one test case per SODB kind and one failing\n"
            "                    test case per missed or failed pipeline with its reason\n"
            "  --max-listed N    list at most N missed or failed pipelines one by one in the\n"
            "                    JUnit and JSON reports (default 1000, at most 1000000)\n"
            "  --json            print the figures, counts and missed pipelines as JSON\n"
            "\n"
            "Exit status: 0 replayed (and the hit rate at least R); 1 an error (the SODB, the\n"
            "device, a PSDB named that does not fit it, a registry that cannot be read, a\n"
            "pipeline that failed, the report file); 2 an unknown option; 3 the hit rate is\n"
            "below R.\n");
}

int tool_backend_is_vulkan(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--backend") == 0)
            return strcmp(argv[i + 1], "vulkan") == 0;
    return 0;
}

static json_t *pass_json(const vkbe_replay_stats *s)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b, s:f, "
                     "s:f, s:f, s:I}",
                     "pipelines", (json_int_t)s->pipelines, "failed", (json_int_t)s->failed, "hits",
                     (json_int_t)s->hits, "misses", (json_int_t)s->misses, "total_s", s->total_s,
                     "median_ms", s->median_ms, "p95_ms", s->p95_ms, "setup_s", s->setup_s,
                     "lookup_s", s->lookup_s, "create_s", s->create_s, "first_use_s",
                     s->first_use_s, "objects_s", s->objects_s, "wall_s", s->wall_s, "merged_cache",
                     s->merged_cache, "proof_s", s->proof_s, "file_sha256_s", s->file_sha256_s,
                     "device_s", s->device_s, "peak_rss_kib", (json_int_t)s->peak_rss_kib);
}

static void pass_print(const char *name, const vkbe_replay_stats *s)
{
    printf("%-5s %llu pipelines usable in %.3f s (median %.3f ms, p95 %.3f ms), %llu failed, "
           "%llu hits, %llu misses\n",
           name, (unsigned long long)s->pipelines, s->total_s, s->median_ms, s->p95_ms,
           (unsigned long long)s->failed, (unsigned long long)s->hits,
           (unsigned long long)s->misses);
    printf("      proof %.3f s, setup %.3f s%s, lookups %.3f s, creation %.3f s, first use %.3f s; "
           "apart: modules, layouts and render passes %.3f s, the whole pass %.3f s, the file's "
           "SHA-256 %.3f s, the device's creation %.3f s; peak RSS %llu KiB\n",
           s->proof_s, s->setup_s, s->merged_cache ? " (the PSDB's merged cache)" : "", s->lookup_s,
           s->create_s, s->first_use_s, s->objects_s, s->wall_s, s->file_sha256_s, s->device_s,
           (unsigned long long)s->peak_rss_kib);
}

/* The reason and message of one entry's outcome, as the reports give it. */
static uint32_t outcome_reason(const vkbe_replay_result *res, const vkbe_entry_outcome *e,
                               const char *no_psdb, char *msg, size_t size)
{
    uint32_t reason = REPLAY_MISS_NOT_IN_PSDB;
    switch (e->outcome) {
    case VKBE_NO_PSDB:
        reason = REPLAY_MISS_NO_PSDB;
        snprintf(msg, size, "%s", no_psdb);
        break;
    case VKBE_REFUSED:
        reason = REPLAY_MISS_REFUSED;
        snprintf(msg, size, "refused: %s",
                 res->refused[0] ? res->refused
                                 : "its data failed a check (a damaged blob, or VkPipelineCache "
                                   "data whose header does not name this device)");
        break;
    case VKBE_LOOKUP_ERROR:
        reason = REPLAY_MISS_LOOKUP_ERROR;
        snprintf(msg, size, "lookup error: out of memory");
        break;
    case VKBE_FAILED:
        if (e->vk_result)
            snprintf(msg, size, "%s failed: VkResult %d", e->step, (int)e->vk_result);
        else
            snprintf(msg, size, "%s failed: the entry does not decode", e->step);
        break;
    default:
        snprintf(msg, size, "not in the PSDB: it holds no pipeline with this key");
        break;
    }
    return reason;
}

/* Counts every entry of the pass into the report: PSDB_S_OK or PSDB_E_OUTOFMEMORY. */
static psdb_hr count_entries(const vkbe_replay_result *res, const char *no_psdb,
                             replay_report *report)
{
    psdb_hr hr = PSDB_S_OK;
    char msg[PATH_MAX + 1024];
    for (size_t i = 0; i < res->num_entries && PSDB_SUCCEEDED(hr); i++) {
        const vkbe_entry_outcome *e = &res->entries[i];
        uint32_t kind = replay_kind_of(e->kind);
        if (kind == REPLAY_KIND_COUNT)
            continue;
        if (e->outcome == VKBE_SKIPPED) {
            replay_report_skipped(report, kind);
            continue;
        }
        uint32_t reason = outcome_reason(res, e, no_psdb, msg, sizeof(msg));
        hr = replay_report_outcome(report, kind, e->key, e->version, e->outcome != VKBE_FAILED,
                                   e->outcome == VKBE_HIT, reason, msg, e->seconds);
    }
    return hr;
}

/* Where the PSDB came from, one line of the text output. */
static void psdb_line(const vkbe_replay_result *res)
{
    char safe[TOOL_SAFE_SIZE];
    printf("device %s (%s abi %llu); ", tool_safe(res->device_name, safe, sizeof(safe)),
           res->family, (unsigned long long)res->abi);
    if (res->refused[0]) {
        printf("PSDB %s refused: ", tool_safe(res->psdb_path, safe, sizeof(safe)));
        tool_put_safe(stdout, res->refused);
        putchar('\n');
    } else if (res->psdb_path[0]) {
        printf("PSDB %s%s\n", tool_safe(res->psdb_path, safe, sizeof(safe)),
               res->registered ? " (registered for --exe-path)" : "");
    } else {
        printf("no PSDB%s\n", res->exe_path[0] ? " registered for --exe-path" : "");
    }
}

/* The JSON output: today's passes and speed-up, then the D3D12 replay's counts where they apply. */
static int print_json(const vkbe_replay_result *res, const replay_report *rep,
                      const replay_rate *threshold, int have_psdb)
{
    int rc = -1;
    char abi[24];
    replay_counts total = replay_report_total(rep);
    const vkbe_replay_stats *warm = res->warm_ran ? &res->warm : NULL;
    double ratio = warm && warm->total_s > 0 ? res->cold.total_s / warm->total_s : 0.0;
    snprintf(abi, sizeof(abi), "%llu", (unsigned long long)res->abi);
    json_t *o = json_pack("{s:o, s:o*, s:f}", "cold", pass_json(&res->cold), "psdb",
                          warm ? pass_json(warm) : NULL, "speedup", ratio);
    if (!o ||
        json_object_set_new(o, "device",
                            json_pack("{s:s, s:s, s:s}", "name", res->device_name, "family",
                                      res->family, "abi", abi)) != 0 ||
        json_object_set_new(o, "psdb_file",
                            have_psdb ? json_string(res->psdb_path) : json_null()) != 0 ||
        json_object_set_new(o, "default_psdb_registered", json_boolean(res->registered)) != 0 ||
        json_object_set_new(o, "refused",
                            res->refused[0] ? json_string(res->refused) : json_null()) != 0 ||
        json_object_set_new(o, "created", json_integer(total.created)) != 0 ||
        json_object_set_new(o, "hits", json_integer(total.hits)) != 0 ||
        json_object_set_new(
            o, "hit_rate",
            json_real(total.created ? (double)total.hits / (double)total.created : 0.0)) != 0 ||
        json_object_set_new(o, "failed", json_integer(total.failed)) != 0)
        goto cleanup;
    if (threshold &&
        (json_object_set_new(o, "min_hit_rate",
                             json_real((double)threshold->num / (double)threshold->den)) != 0 ||
         json_object_set_new(o, "gate",
                             json_string(replay_rate_met(total.hits, total.created, threshold)
                                             ? "passed"
                                             : "failed")) != 0))
        goto cleanup;
    if (replay_report_add_json(rep, o) != 0 ||
        tool_json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0)
        goto cleanup;
    fputc('\n', stdout);
    rc = 0;
cleanup:
    json_decref(o);
    return rc;
}

/* The JUnit report of the run into path: 0, or 1 after saying why. */
static int write_junit(const char *path, const char *sodb, const vkbe_replay_result *res,
                       const replay_report *rep, const replay_rate *threshold, const char *exe,
                       time_t started)
{
    int rc = 1;
    psdb_sodb *s = NULL;
    psdb__buf xml = {0};
    psdb_app_identity id;
    char stamp[32], err[512];
    struct tm tm;
    replay_counts total = replay_report_total(rep);
    const vkbe_replay_stats *pass = res->warm_ran ? &res->warm : &res->cold;
    /* The suite is named by the application the SODB records. */
    psdb_hr hr = psdb_sodb_open(sodb, &s);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_sodb_get_identity(s, &id);
    if (PSDB_FAILED(hr)) {
        tool_fail("replay", "--junit: %s: %s", sodb, psdb_hr_str(hr));
        goto cleanup;
    }
    gmtime_r(&started, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    replay_junit_run run = {.sodb = sodb,
                            .app_name = id.desc.name,
                            .family = res->family,
                            .exe_path = exe ? res->exe_path : NULL,
                            .psdb_path = res->psdb_path[0] ? res->psdb_path : NULL,
                            .device_name = res->device_name,
                            .app_version = id.desc.version,
                            .abi_min = res->abi,
                            .abi_max = res->abi,
                            .created = total.created,
                            .hits = total.hits,
                            .threshold = threshold,
                            .seconds = pass->wall_s,
                            .timestamp = stamp};
    hr = replay_report_junit(rep, &run, &xml);
    if (PSDB_FAILED(hr))
        tool_fail("replay", "--junit %s: %s", path, psdb_hr_str(hr));
    else if (junit_write_atomic(path, &xml, err, sizeof(err)) != 0)
        tool_fail("replay", "--junit: %s", err);
    else
        rc = 0;
cleanup:
    psdb__buf_free(&xml);
    psdb_sodb_release(s);
    return rc;
}

/* Whether a is one of the options that take a value. */
static int takes_value(const char *a)
{
    static const char *const opts[] = {"--backend",      "--device", "--exe-path",  "--registry",
                                       "--min-hit-rate", "--junit",  "--max-listed"};
    int found = 0;
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]) && !found; i++)
        found = strcmp(a, opts[i]) == 0;
    return found;
}

int cmd_replay_vulkan(int argc, char **argv)
{
    const char *sodb = NULL, *psdb = NULL, *exe = NULL, *registry = NULL, *junit = NULL;
    uint64_t device = 0, max_listed = REPLAY_MAX_LISTED_DEFAULT;
    int json = 0, rc = 1;
    char err[512] = "", why[128], no_psdb[PATH_MAX + 160];
    replay_rate threshold_value = {0, 1};
    const replay_rate *threshold = NULL;
    replay_report report = {.vulkan = 1};
    vkbe_replay_result res;
    memset(&res, 0, sizeof(res));
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            json = 1;
            continue;
        }
        if (a[0] != '-') {
            if (!sodb) {
                sodb = a;
            } else if (!psdb) {
                psdb = a;
            } else {
                rc = tool_fail("replay", "more than an SODB and a PSDB given ('%s')", a);
                goto cleanup;
            }
            continue;
        }
        if (!takes_value(a)) {
            tool_fail("replay", "unknown option for --backend vulkan '%s' (try --help)", a);
            rc = REPLAY_EXIT_USAGE;
            goto cleanup;
        }
        if (!val) {
            rc = tool_fail("replay", "%s needs a value (try --help)", a);
            goto cleanup;
        }
        i++;
        if (strcmp(a, "--backend") == 0) {
            /* vulkan: tool_backend_is_vulkan sent us here */
        } else if (strcmp(a, "--device") == 0) {
            if (psdb__parse_u64(val, &device) != 0 || device > 15) {
                rc = tool_fail("replay", "invalid --device '%s' (0-15)", val);
                goto cleanup;
            }
        } else if (strcmp(a, "--exe-path") == 0) {
            if (!*val) {
                rc = tool_fail("replay", "--exe-path: empty path");
                goto cleanup;
            }
            exe = val;
        } else if (strcmp(a, "--registry") == 0) {
            if (!*val) {
                rc = tool_fail("replay", "--registry: empty path");
                goto cleanup;
            }
            registry = val;
        } else if (strcmp(a, "--min-hit-rate") == 0) {
            if (replay_rate_parse(val, &threshold_value, why, sizeof(why)) != 0) {
                rc = tool_fail("replay", "--min-hit-rate '%s': %s", val, why);
                goto cleanup;
            }
            threshold = &threshold_value;
        } else if (strcmp(a, "--junit") == 0) {
            if (!*val) {
                rc = tool_fail("replay", "--junit: empty file name");
                goto cleanup;
            }
            junit = val;
        } else {
            assert(strcmp(a, "--max-listed") == 0);
            if (psdb__parse_u64(val, &max_listed) || max_listed > REPLAY_MAX_LISTED_LIMIT) {
                rc = tool_fail("replay", "--max-listed '%s': not a number from 0 to %u", val,
                               REPLAY_MAX_LISTED_LIMIT);
                goto cleanup;
            }
        }
    }
    if (!sodb) {
        rc = tool_fail("replay", "--backend vulkan needs an SODB (try --help)");
        goto cleanup;
    }
    if (psdb && exe) {
        rc =
            tool_fail("replay", "a PSDB file and --exe-path exclude each other: --exe-path replays "
                                "the PSDB installed for it");
        goto cleanup;
    }
    if (registry && !exe) {
        rc = tool_fail("replay", "--registry needs --exe-path (the executable to look up)");
        goto cleanup;
    }
    report.max_cases = (size_t)max_listed;
    time_t started = time(NULL);
    vkbe_replay_desc desc = {.sodb_path = sodb,
                             .psdb_path = psdb,
                             .exe_path = exe,
                             .registry_dir = registry,
                             .device_index = (uint32_t)device};
    psdb_hr hr = vkbe_replay(&desc, &res, err, sizeof(err));
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("replay", "%s", err[0] ? err : psdb_hr_str(hr));
        goto cleanup;
    }
    if (exe)
        snprintf(no_psdb, sizeof(no_psdb),
                 "no PSDB selected: none registered for --exe-path %s for %s (component default)",
                 res.exe_path, res.family);
    else
        snprintf(no_psdb, sizeof(no_psdb),
                 "no PSDB selected: neither a PSDB nor --exe-path was given");
    hr = count_entries(&res, no_psdb, &report);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("replay", "counting the pipelines: %s", psdb_hr_str(hr));
        goto cleanup;
    }
    replay_counts total = replay_report_total(&report);
    const vkbe_replay_stats *pass = res.warm_ran ? &res.warm : &res.cold;
    /* The pass's figures and its entries' outcomes are the same creations: a difference is a
     * defect to report, not a figure to publish. */
    if (total.created != pass->pipelines || total.failed != pass->failed) {
        rc = tool_fail("replay",
                       "the entries' outcomes (%u created, %u failed) disagree with the pass "
                       "(%llu created, %llu failed)",
                       total.created, total.failed, (unsigned long long)pass->pipelines,
                       (unsigned long long)pass->failed);
        goto cleanup;
    }
    if (json) {
        if (print_json(&res, &report, threshold, res.psdb_path[0] != 0) != 0) {
            rc = tool_fail("replay", "cannot print JSON");
            goto cleanup;
        }
    } else {
        char text[32];
        pass_print("cold", &res.cold);
        if (res.warm_ran) {
            pass_print("psdb", &res.warm);
            printf("speed-up %.2fx (cold total / psdb total)\n",
                   res.warm.total_s > 0 ? res.cold.total_s / res.warm.total_s : 0.0);
        }
        psdb_line(&res);
        printf("created %u, PSDB missed %u, hit rate %s, failed %u\n", total.created,
               total.created - total.hits,
               replay_rate_percent(total.hits, total.created, text, sizeof(text)), total.failed);
        replay_report_print(&report, stdout);
    }
    rc = 0;
    if (junit)
        rc = write_junit(junit, sodb, &res, &report, threshold, exe, started);
    if (total.failed) {
        const replay_case *first = NULL;
        for (size_t i = 0; i < report.num_cases && !first; i++)
            if (PSDB_FAILED(report.cases[i].error))
                first = &report.cases[i];
        rc = tool_fail("replay", "%u pipelines failed (first: %s)", total.failed,
                       first ? first->message : "not listed");
    }
    /* An error (status 1) says more than the gate: it stays. */
    if (threshold && !replay_gate_say(total.hits, total.created, threshold, json) && rc == 0)
        rc = REPLAY_EXIT_BELOW_MIN;
cleanup:
    replay_report_free(&report);
    vkbe_replay_result_free(&res);
    return rc;
}
