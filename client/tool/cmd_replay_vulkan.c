/* cmd_replay_vulkan.c - `psdb replay --backend vulkan`: time-to-usable of every Vulkan pipeline of
 * an SODB on the Vulkan device, cold and with a PSDB (the Vulkan component's vkbe_replay). */
#include "tool.h"

#include <string.h>

#include <jansson.h>

#include "common/parse.h"
#include "vulkan/psdb_vulkan.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: psdb replay --backend vulkan SODB [PSDB] [--device N] [--json]\n"
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
               "  --device N   Vulkan device index (default 0)\n"
               "  --json       print the figures as JSON\n");
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
                     "s:f, s:f}",
                     "pipelines", (json_int_t)s->pipelines, "failed", (json_int_t)s->failed, "hits",
                     (json_int_t)s->hits, "misses", (json_int_t)s->misses, "total_s", s->total_s,
                     "median_ms", s->median_ms, "p95_ms", s->p95_ms, "setup_s", s->setup_s,
                     "lookup_s", s->lookup_s, "create_s", s->create_s, "first_use_s",
                     s->first_use_s, "objects_s", s->objects_s, "wall_s", s->wall_s, "merged_cache",
                     s->merged_cache, "proof_s", s->proof_s, "file_sha256_s", s->file_sha256_s,
                     "device_s", s->device_s);
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
           "SHA-256 %.3f s, the device's creation %.3f s\n",
           s->proof_s, s->setup_s, s->merged_cache ? " (the PSDB's merged cache)" : "", s->lookup_s,
           s->create_s, s->first_use_s, s->objects_s, s->wall_s, s->file_sha256_s, s->device_s);
}

int cmd_replay_vulkan(int argc, char **argv)
{
    const char *sodb = NULL, *psdb = NULL;
    uint64_t device = 0;
    int json = 0;
    char err[512] = "";
    vkbe_replay_stats cold, warm;
    memset(&cold, 0, sizeof(cold));
    memset(&warm, 0, sizeof(warm));
    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--backend") == 0 && i + 1 < argc) {
            i++;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--device") == 0 && i + 1 < argc) {
            if (psdb__parse_u64(argv[++i], &device) != 0 || device > 15)
                return tool_fail("replay", "invalid --device '%s' (0-15)", argv[i]);
        } else if (a[0] == '-') {
            return tool_fail("replay", "unknown option for --backend vulkan '%s' (try --help)", a);
        } else if (!sodb) {
            sodb = a;
        } else if (!psdb) {
            psdb = a;
        } else {
            return tool_fail("replay", "more than an SODB and a PSDB given ('%s')", a);
        }
    }
    if (!sodb)
        return tool_fail("replay", "--backend vulkan needs an SODB (try --help)");
    psdb_hr hr = vkbe_replay(sodb, psdb, (uint32_t)device, &cold, &warm, err, sizeof(err));
    if (PSDB_FAILED(hr))
        return tool_fail("replay", "%s", err[0] ? err : psdb_hr_str(hr));
    double ratio = psdb && warm.total_s > 0 ? cold.total_s / warm.total_s : 0.0;
    if (json) {
        json_t *o = json_pack("{s:o, s:o*, s:f}", "cold", pass_json(&cold), "psdb",
                              psdb ? pass_json(&warm) : NULL, "speedup", ratio);
        if (!o || tool_json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
            json_decref(o);
            return tool_fail("replay", "cannot print JSON");
        }
        fputc('\n', stdout);
        json_decref(o);
        return 0;
    }
    pass_print("cold", &cold);
    if (psdb) {
        pass_print("psdb", &warm);
        printf("speed-up %.2fx (cold total / psdb total)\n", ratio);
    }
    return 0;
}
