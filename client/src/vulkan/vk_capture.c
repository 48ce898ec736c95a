/* vk_capture.c - the process's capture: the pipelines a Vulkan application creates recorded into
 * the SODB PSDB_CAPTURE names (schema/SODB.md section 3), one entry each, committed as added. */
#include "vulkan/psdb_vulkan.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* guards everything below */
static psdb_sodb_writer *g_writer;
static unsigned g_writer_refs;
static char g_capture_path[PATH_MAX];
static int g_capture_failed; /* the writer could not be opened: said once */

static uint64_t vk_to_psdb_version(uint32_t v)
{
    return PSDB_VERSION(VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v),
                        0);
}

/* An application that gives no version (no VkApplicationInfo, applicationVersion 0, or one whose
 * major, minor and patch are all 0) is version 0.0.0.1: an application identity needs a non-zero
 * version (schema/MODEL.md), and a mapped Vulkan version never sets the fourth field, so no
 * versioned application can collide with it (schema/SODB.md §3.1). Vulkan's own tools (vkcube)
 * and translation layers pass 0. */
#define NO_APP_VERSION PSDB_VERSION(0, 0, 0, 1)

/* The application identity of schema/SODB.md §3.1: VkApplicationInfo, the executable's file
 * name, and an AppId derived from the application name (Vulkan has none). */
void vkcap_open(const VkApplicationInfo *app)
{
    char exe[PATH_MAX];
    const char *exe_name = NULL;
    psdb_app_identity id;
    const char *path = getenv("PSDB_CAPTURE");
    if (!path || !*path)
        return;
    memset(&id, 0, sizeof(id));
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        const char *slash = strrchr(exe, '/');
        exe_name = slash ? slash + 1 : exe;
    }
    id.desc.exe_filename = exe_name;
    id.desc.name = app && app->pApplicationName && *app->pApplicationName
                       ? app->pApplicationName
                       : (exe_name && *exe_name ? exe_name : "unknown");
    id.desc.version = app ? vk_to_psdb_version(app->applicationVersion) : 0;
    if (id.desc.version == 0)
        id.desc.version = NO_APP_VERSION;
    if (app && app->pEngineName && *app->pEngineName) {
        id.desc.engine_name = app->pEngineName;
        id.desc.engine_version = vk_to_psdb_version(app->engineVersion);
    }
    static const char prefix[] = "psdb-vulkan-app-id:";
    char seed[sizeof(prefix) + 256];
    uint8_t digest[32];
    int seed_len = snprintf(seed, sizeof(seed), "%s%s", prefix, id.desc.name);
    if (seed_len < 0 || (size_t)seed_len >= sizeof(seed))
        seed_len = (int)sizeof(seed) - 1; /* a longer name: its first 255 bytes */
    _Static_assert(sizeof(id.app_id) <= sizeof(digest), "an AppId is a digest's prefix");
    psdb__sha256(seed, (size_t)seed_len, digest);
    memcpy(id.app_id, digest, sizeof(id.app_id));

    pthread_mutex_lock(&g_lock);
    if (g_writer) {
        g_writer_refs++;
    } else if (!g_capture_failed) {
        psdb_hr hr = psdb_sodb_writer_open(path, &id, &g_writer);
        if (PSDB_FAILED(hr)) {
            fprintf(stderr, "psdb layer: capture %s: cannot open the SODB: %s\n", path,
                    psdb_hr_str(hr));
            g_capture_failed = 1;
            g_writer = NULL;
        } else {
            g_writer_refs = 1;
            snprintf(g_capture_path, sizeof(g_capture_path), "%s", path);
        }
    }
    pthread_mutex_unlock(&g_lock);
}

void vkcap_close(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_writer && --g_writer_refs == 0) {
        psdb_sodb_writer_release(g_writer);
        g_writer = NULL;
    }
    pthread_mutex_unlock(&g_lock);
}

int vkcap_active(void)
{
    pthread_mutex_lock(&g_lock);
    int on = g_writer != NULL;
    pthread_mutex_unlock(&g_lock);
    return on;
}

const char *vkcap_path(char *buf, size_t size)
{
    pthread_mutex_lock(&g_lock);
    int on = g_writer != NULL;
    if (on)
        snprintf(buf, size, "%s", g_capture_path);
    pthread_mutex_unlock(&g_lock);
    return on ? buf : NULL;
}

static void stats_stype(vkstats *s, uint32_t stype)
{
    for (uint32_t i = 0; i < s->num_stypes; i++)
        if (s->stypes[i] == stype)
            return;
    if (s->num_stypes < VKENC_MAX_STYPES)
        s->stypes[s->num_stypes++] = stype;
}

void vkcap_pipeline(uint32_t kind, const vkenc *e)
{
    psdb_hr hr = PSDB_S_OK;
    pthread_mutex_lock(&g_lock);
    int on = g_writer != NULL;
    /* Recorded under the capture's lock: one writer, added to from any thread. */
    if (on && !e->unrepresentable && !e->oom)
        hr = psdb_sodb_writer_add(g_writer, kind, 1, e->data, e->len);
    vkstats *s = vkstats_lock();
    s->pipelines++;
    if (!on) {
        /* capture off: only the count */
    } else if (e->unrepresentable) {
        s->unrepresentable++;
        for (uint32_t i = 0; i < e->num_stypes; i++)
            stats_stype(s, e->stypes[i]);
    } else if (e->oom) {
        s->failed++;
    } else if (hr == PSDB_S_FALSE) {
        s->already++;
    } else if (PSDB_SUCCEEDED(hr)) {
        s->recorded++;
    } else {
        if (s->failed == 0)
            fprintf(stderr, "psdb layer: capture %s: cannot record a pipeline: %s\n",
                    g_capture_path, psdb_hr_str(hr));
        s->failed++;
    }
    vkstats_unlock();
    pthread_mutex_unlock(&g_lock);
}
