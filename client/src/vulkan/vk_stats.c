/* vk_stats.c - the layer's counters for the whole process, and their report: one line each for
 * delivery and capture on stderr, and one JSON object in PSDB_LAYER_STATS. */
#include "vulkan/psdb_vulkan.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* guards g_stats */
static vkstats g_stats;

vkstats *vkstats_lock(void)
{
    pthread_mutex_lock(&g_lock);
    return &g_stats;
}

void vkstats_unlock(void)
{
    pthread_mutex_unlock(&g_lock);
}

void vkstats_report(const char *capture_path)
{
    const char *stats_path = getenv("PSDB_LAYER_STATS");
    char types[VKENC_MAX_STYPES * 12 + 1];
    size_t off = 0;
    pthread_mutex_lock(&g_lock);
    vkstats s = g_stats;
    pthread_mutex_unlock(&g_lock);
    char driver_hits[24] = "null"; /* no device reported creation feedback */
    if (s.feedback)
        snprintf(driver_hits, sizeof(driver_hits), "%" PRIu64, s.driver_hits);
    types[0] = '\0';
    for (uint32_t i = 0; i < s.num_stypes && off < sizeof(types); i++) {
        int w = snprintf(types + off, sizeof(types) - off, "%s%" PRIu32, i ? "," : "", s.stypes[i]);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    if (s.delivery != 0)
        fprintf(stderr,
                "psdb layer: delivery: %" PRIu64 " pipelines, %" PRIu64 " hits, %" PRIu64
                " misses (%" PRIu64 " rejected)%s%s\n",
                s.pipelines, s.hits, s.misses, s.rejected, s.feedback ? ", driver hits " : "",
                s.feedback ? driver_hits : "");
    if (capture_path)
        fprintf(stderr,
                "psdb layer: capture %s: %" PRIu64 " pipelines, %" PRIu64 " recorded, %" PRIu64
                " already recorded, %" PRIu64 " unrepresentable (sTypes: %s), %" PRIu64 " failed\n",
                capture_path, s.pipelines, s.recorded, s.already, s.unrepresentable,
                s.num_stypes ? types : "none", s.failed);
    if (!stats_path || !*stats_path)
        return;
    FILE *f = fopen(stats_path, "w");
    if (!f) {
        fprintf(stderr, "psdb layer: stats %s: cannot open: %s\n", stats_path, strerror(errno));
        return;
    }
    fprintf(f,
            "{\"pipelines\": %" PRIu64 ", \"captured\": %" PRIu64 ", \"already_captured\": %" PRIu64
            ", \"unrepresentable\": %" PRIu64 ", \"capture_failed\": %" PRIu64
            ", \"unrepresentable_stypes\": [%s], \"delivery\": \"%s\", \"psdb_hits\": %" PRIu64
            ", \"psdb_misses\": %" PRIu64 ", \"psdb_rejected\": %" PRIu64
            ", \"psdb_lookup_ns\": %" PRIu64 ", \"merged_cache\": \"%s\""
            ", \"app_caches_fed\": %" PRIu64 ", \"driver_hits\": %s}\n",
            s.pipelines, s.recorded, s.already, s.unrepresentable, s.failed, types,
            s.delivery > 0 ? "on" : (s.delivery < 0 ? "refused" : "off"), s.hits, s.misses,
            s.rejected, s.lookup_ns, s.merged > 0 ? "on" : (s.merged < 0 ? "refused" : "off"),
            s.fed, driver_hits);
    if (fclose(f) != 0)
        fprintf(stderr, "psdb layer: stats %s: cannot write: %s\n", stats_path, strerror(errno));
}
