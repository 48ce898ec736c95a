/* vk_layer.c - VK_LAYER_PSDB_delivery: a Vulkan layer that captures an application's pipelines
 * and delivers PSDBs compiled from them.
 *
 * DESIGN: the layer is the loader glue over the Vulkan component (client/src/vulkan/psdb_vulkan.h,
 * Fossilize's split: a library that knows Vulkan, a layer that only dispatches). It follows the
 * loader-layer interface version 2: the loader negotiates through
 * vkNegotiateLoaderLayerInterfaceVersion (the one exported symbol), hands each vkCreateInstance and
 * vkCreateDevice the next layer's GetProcAddr in the create-info chain, and the layer keeps one
 * record per instance and per device, found by the dispatch key (the loader's dispatch-table
 * pointer stored at the start of every dispatchable handle). Records live in lists under one
 * global lock; an application has few instances and devices, and the lock is held only to find
 * or unlink a record. The device hooks are a table (DEVICE_HOOKS); each calls down the chain and
 * hands what it saw to the component.
 *
 * Capture (PSDB_CAPTURE=<path>): the component opens an SODB writer when the first instance is
 * created (vkcap_open), keeps the encoding of every shader module, sampler, descriptor set
 * layout, pipeline layout and render pass per device (vkrec: the encoding's DESIGN says why
 * objects are encoded at creation), and records each compute and graphics pipeline the driver
 * created as one SODB entry (vkcap_pipeline). A pipeline whose create-info chains a structure the
 * encoding cannot carry is counted, not recorded. Nothing the layer does can fail the
 * application's call: an encoding or writer failure is counted and the driver's result is
 * returned unchanged.
 *
 * Delivery (schema/COMPILER.md section 5): before the first instance reaches the driver the
 * component finds the PSDBs, starts proving them on threads of their own and, for Mesa, sets up
 * its read-only disk cache (vkfind_prepare); at device creation it takes the proof and opens the
 * PSDB for the device's identity (vkfind_open),
 * and the layer makes one VkPipelineCache from the PSDB's merged cache data (every pipeline's
 * cache merged at compile time, header checked): a driver creates a pipeline from one warm cache
 * in a tenth of a millisecond, from a fresh one-pipeline cache in milliseconds. Each pipeline
 * creation is looked up by the SHA-256 of its encoding (vkfind_lookup): a hit is created with the
 * merged cache, or (an application passing its own cache, or a PSDB without merged data) with a
 * cache made from that pipeline's own checked data. Whatever fails, the creation goes to the
 * driver as without the layer.
 *
 * At vkDestroyDevice the counters are reported (vkstats_report): a line on stderr when capturing
 * or delivering, and JSON in PSDB_LAYER_STATS=<path> when set. */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#include <psdb/psdb.h>

#include "vulkan/psdb_vulkan.h"

#define LAYER_EXPORT __attribute__((visibility("default")))

/* ---- Records ------------------------------------------------------------------------------- */
typedef struct linstance {
    struct linstance *next;
    void *key;
    VkInstance instance;
    PFN_vkGetInstanceProcAddr gipa;
    PFN_vkDestroyInstance DestroyInstance;
} linstance;

#define FED_MAX 16u

typedef struct ldevice {
    struct ldevice *next;
    void *key;
    VkDevice device;
    PFN_vkGetDeviceProcAddr gdpa;
    PFN_vkDestroyDevice DestroyDevice;
    PFN_vkCreateShaderModule CreateShaderModule;
    PFN_vkDestroyShaderModule DestroyShaderModule;
    PFN_vkCreateSampler CreateSampler;
    PFN_vkDestroySampler DestroySampler;
    PFN_vkCreateDescriptorSetLayout CreateDescriptorSetLayout;
    PFN_vkDestroyDescriptorSetLayout DestroyDescriptorSetLayout;
    PFN_vkCreatePipelineLayout CreatePipelineLayout;
    PFN_vkDestroyPipelineLayout DestroyPipelineLayout;
    PFN_vkCreateRenderPass CreateRenderPass;
    PFN_vkCreateRenderPass2 CreateRenderPass2;
    PFN_vkCreateRenderPass2 CreateRenderPass2KHR;
    PFN_vkDestroyRenderPass DestroyRenderPass;
    PFN_vkCreateComputePipelines CreateComputePipelines;
    PFN_vkCreateGraphicsPipelines CreateGraphicsPipelines;
    PFN_vkCreatePipelineCache CreatePipelineCache;
    PFN_vkDestroyPipelineCache DestroyPipelineCache;
    PFN_vkDestroyPipeline DestroyPipeline;
    PFN_vkMergePipelineCaches MergePipelineCaches;
    vkfind_device dl; /* the device's identity and the PSDB delivered to it (dl.psdb), if any */
    vkrec *rec;       /* the encodings of the objects it created */
    /* VK_EXT_pipeline_creation_feedback is on for this device (the layer enables it where the
     * driver has it and a PSDB of VkPipelineCache data is delivered): hits are confirmed by the
     * driver's own report (driver_hits). */
    int feedback;
    /* One cache holding every pipeline of psdb (its cache parts merged), made at device creation,
     * or VK_NULL_HANDLE: hits of creations that pass no cache of their own use it. */
    VkPipelineCache merged;
    /* A PSDB of pipeline binaries: VK_KHR_pipeline_binary enabled by the layer and its functions;
     * every hit is created from its own binaries. */
    int binaries;
    /* Set once the driver refused a creation from delivered binaries (the NVIDIA driver then
     * refuses every later one on the device): hits go down as the application gave them, counted
     * as refused data, without making binaries the driver would refuse again. */
    atomic_int binaries_refused;
    vkbin_fns bin;
    /* Application caches the merged cache was merged into (guarded by fed_lock), so that their
     * hits are served from them; forgotten at vkDestroyPipelineCache. */
    VkPipelineCache fed[FED_MAX];
    uint32_t num_fed;
    /* vkMergePipelineCaches needs its destination externally synchronized, and an application
     * may create pipelines with its cache on several threads: merges into an application's cache
     * hold this for writing, creations with one for reading. */
    pthread_rwlock_t cache_lock;
    pthread_mutex_t fed_lock; /* guards fed, num_fed */
} ldevice;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* guards the two lists */
static linstance *g_instances;
static ldevice *g_devices;

static void *dispatch_key(const void *handle)
{
    return *(void *const *)handle;
}

static linstance *instance_find(void *key)
{
    linstance *i;
    pthread_mutex_lock(&g_lock);
    for (i = g_instances; i && i->key != key; i = i->next)
        ;
    pthread_mutex_unlock(&g_lock);
    return i;
}

static ldevice *device_find(void *key)
{
    ldevice *d;
    pthread_mutex_lock(&g_lock);
    for (d = g_devices; d && d->key != key; d = d->next)
        ;
    pthread_mutex_unlock(&g_lock);
    return d;
}

/* Objects are encoded when capturing, or when a PSDB is delivered (its lookups need the key). */
static int tracking(const ldevice *d)
{
    return d->dl.psdb != NULL || vkcap_active();
}

/* ---- Delivery set-up ------------------------------------------------------------------------ */
/* The counters, said at each vkDestroyDevice (stderr, PSDB_LAYER_STATS). */
static void stats_report(void)
{
    char path[PATH_MAX];
    vkstats_report(vkcap_path(path, sizeof(path)));
}

/* The device cache of d's PSDB (its cache parts, each checked, merged into one) as d->merged. 1
 * made, 0 none (another strategy, a PSDB without parts), -1 refused (said on stderr once): the
 * creations then use each pipeline's own cache data where the PSDB has it. */
static int merged_attach(ldevice *d)
{
    char msg[256] = "";
    vkdl_cache_fns fns = {d->CreatePipelineCache, d->MergePipelineCaches, d->DestroyPipelineCache};
    if (d->dl.id.strategy != VKID_PIPELINE_CACHE || !fns.create || !fns.merge || !fns.destroy)
        return 0;
    psdb_hr hr = vkdl_device_cache(d->dl.psdb, &d->dl.id, &fns, d->device, &d->merged, NULL, msg,
                                   sizeof(msg));
    if (PSDB_SUCCEEDED(hr))
        return hr == PSDB_S_OK;
    vkstats *s = vkstats_lock();
    if (s->merged == 0)
        fprintf(stderr, "psdb layer: delivery %s: %s; each pipeline's own cache data is used\n",
                d->dl.path, msg[0] ? msg : psdb_hr_str(hr));
    vkstats_unlock();
    return -1;
}

/* The device's identity, from the physical device's properties. 0, or -1 without them. */
static int device_identity(linstance *inst, VkPhysicalDevice phys, vkid *out)
{
    PFN_vkGetPhysicalDeviceProperties props = NULL;
    PFN_vkGetPhysicalDeviceProperties2 props2 = NULL;
    if (!inst)
        return -1;
    props = (PFN_vkGetPhysicalDeviceProperties)inst->gipa(inst->instance,
                                                          "vkGetPhysicalDeviceProperties");
    props2 = (PFN_vkGetPhysicalDeviceProperties2)inst->gipa(inst->instance,
                                                            "vkGetPhysicalDeviceProperties2");
    if (!props)
        return -1;
    vkid_query(props, props2, phys, out);
    return 0;
}

/* A PSDB found for d that cannot be delivered after all (the device lacks what its code needs):
 * closed, the counters' delivery state set back (off for S_FALSE, refused for a failure), said
 * once on stderr. */
static void delivery_drop(ldevice *d, psdb_hr hr, const char *why)
{
    fprintf(stderr, "psdb layer: delivery %s: not used for %s: %s\n", d->dl.path,
            d->dl.id.device_name, why);
    vkfind_close(&d->dl);
    vkstats *s = vkstats_lock();
    s->delivery = PSDB_FAILED(hr) ? -1 : 0;
    vkstats_unlock();
}

/* Before the device is created: its identity, and the PSDB the component finds, proves and opens
 * for it (vkfind_open: a PSDB of another driver build, or one that fails its proof, is refused and
 * the device runs as without it). */
static void delivery_find(ldevice *d, linstance *inst, VkPhysicalDevice phys)
{
    if (device_identity(inst, phys, &d->dl.id) == 0)
        vkfind_open(&d->dl);
}

/* After the device is created: the merged cache of a delivered PSDB. */
static void delivery_attach(ldevice *d)
{
    if (!d->dl.psdb)
        return;
    int merged = merged_attach(d);
    vkstats *s = vkstats_lock();
    if (merged && s->merged >= 0)
        s->merged = merged;
    vkstats_unlock();
}
/* ---- Device-level interceptions ----------------------------------------------------------- */
static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateShaderModule(VkDevice device,
                                                               const VkShaderModuleCreateInfo *ci,
                                                               const VkAllocationCallbacks *a,
                                                               VkShaderModule *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreateShaderModule(device, ci, a, out);
    if (r == VK_SUCCESS && tracking(d))
        vkrec_shader_module(d->rec, (uint64_t)*out, ci);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyShaderModule(VkDevice device, VkShaderModule m,
                                                            const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    vkrec_forget(d->rec, VK_OBJECT_TYPE_SHADER_MODULE, (uint64_t)m);
    d->DestroyShaderModule(device, m, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateSampler(VkDevice device,
                                                          const VkSamplerCreateInfo *ci,
                                                          const VkAllocationCallbacks *a,
                                                          VkSampler *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreateSampler(device, ci, a, out);
    if (r == VK_SUCCESS && tracking(d))
        vkrec_sampler(d->rec, (uint64_t)*out, ci);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroySampler(VkDevice device, VkSampler s,
                                                       const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    vkrec_forget(d->rec, VK_OBJECT_TYPE_SAMPLER, (uint64_t)s);
    d->DestroySampler(device, s, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL
layer_CreateDescriptorSetLayout(VkDevice device, const VkDescriptorSetLayoutCreateInfo *ci,
                                const VkAllocationCallbacks *a, VkDescriptorSetLayout *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreateDescriptorSetLayout(device, ci, a, out);
    if (r == VK_SUCCESS && tracking(d))
        vkrec_set_layout(d->rec, (uint64_t)*out, ci);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyDescriptorSetLayout(VkDevice device,
                                                                   VkDescriptorSetLayout l,
                                                                   const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    vkrec_forget(d->rec, VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT, (uint64_t)l);
    d->DestroyDescriptorSetLayout(device, l, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL
layer_CreatePipelineLayout(VkDevice device, const VkPipelineLayoutCreateInfo *ci,
                           const VkAllocationCallbacks *a, VkPipelineLayout *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreatePipelineLayout(device, ci, a, out);
    if (r == VK_SUCCESS && tracking(d))
        vkrec_pipeline_layout(d->rec, (uint64_t)*out, ci);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyPipelineLayout(VkDevice device, VkPipelineLayout l,
                                                              const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    vkrec_forget(d->rec, VK_OBJECT_TYPE_PIPELINE_LAYOUT, (uint64_t)l);
    d->DestroyPipelineLayout(device, l, a);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateRenderPass(VkDevice device,
                                                             const VkRenderPassCreateInfo *ci,
                                                             const VkAllocationCallbacks *a,
                                                             VkRenderPass *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->CreateRenderPass(device, ci, a, out);
    if (r == VK_SUCCESS && tracking(d))
        vkrec_render_pass(d->rec, (uint64_t)*out, ci);
    return r;
}

static VkResult render_pass2(ldevice *d, PFN_vkCreateRenderPass2 next, VkDevice device,
                             const VkRenderPassCreateInfo2 *ci, const VkAllocationCallbacks *a,
                             VkRenderPass *out)
{
    VkResult r = next(device, ci, a, out);
    if (r == VK_SUCCESS && tracking(d))
        vkrec_render_pass2(d->rec, (uint64_t)*out, ci);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateRenderPass2(VkDevice device,
                                                              const VkRenderPassCreateInfo2 *ci,
                                                              const VkAllocationCallbacks *a,
                                                              VkRenderPass *out)
{
    ldevice *d = device_find(dispatch_key(device));
    return render_pass2(d, d->CreateRenderPass2, device, ci, a, out);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateRenderPass2KHR(VkDevice device,
                                                                 const VkRenderPassCreateInfo2 *ci,
                                                                 const VkAllocationCallbacks *a,
                                                                 VkRenderPass *out)
{
    ldevice *d = device_find(dispatch_key(device));
    return render_pass2(d, d->CreateRenderPass2KHR, device, ci, a, out);
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyRenderPass(VkDevice device, VkRenderPass rp,
                                                          const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    vkrec_forget(d->rec, VK_OBJECT_TYPE_RENDER_PASS, (uint64_t)rp);
    d->DestroyRenderPass(device, rp, a);
}

/* Records the pipelines one vkCreate*Pipelines call created (kind: PSDB_SODB_VK_COMPUTE with an
 * array of VkComputePipelineCreateInfo, or _VK_GRAPHICS with VkGraphicsPipelineCreateInfo). An
 * error may leave pPipelines unwritten (older drivers): nothing is recorded then. A success code
 * (VK_PIPELINE_COMPILE_REQUIRED included) sets the elements it did not create to VK_NULL_HANDLE;
 * the others were created. */
static void capture_created(ldevice *d, uint32_t kind, VkResult r, uint32_t n, const void *ci,
                            const VkPipeline *out)
{
    size_t stride = kind == PSDB_SODB_VK_COMPUTE ? sizeof(VkComputePipelineCreateInfo)
                                                 : sizeof(VkGraphicsPipelineCreateInfo);
    int on = vkcap_active();
    for (uint32_t i = 0; r >= 0 && i < n; i++) {
        if (out[i] == VK_NULL_HANDLE)
            continue;
        vkenc e;
        memset(&e, 0, sizeof(e));
        if (on)
            vkrec_pipeline(d->rec, kind, (const char *)ci + i * stride, &e);
        vkcap_pipeline(kind, &e);
        vkenc_free(&e);
    }
}

/* ---- Delivery -------------------------------------------------------------------------------
 */
static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Looks pipeline ci up in the device's PSDB (vkfind_lookup: its SODB object key is the SHA-256
 * of its encoding, exactly what `psdb compile --backend vulkan` stored it under). With cache
 * non-NULL, on a hit with VkPipelineCache data, *cache is a new cache created from the
 * pipeline's own data (the caller destroys it); with cache NULL the lookup only decides hit or
 * miss (Mesa's code, or the merged cache, serves the hit). */
static int deliver_one(ldevice *d, uint32_t kind, const void *ci, VkPipelineCache *cache)
{
    void *data = NULL;
    size_t size = 0;
    int bad = 0;
    uint64_t t0 = mono_ns();
    if (cache)
        *cache = VK_NULL_HANDLE;
    int hit = vkfind_lookup(&d->dl, d->rec, kind, ci, cache ? &data : NULL, &size, &bad);
    /* The lookup's cost ends here: what follows is the driver's. */
    uint64_t dt = mono_ns() - t0;
    if (hit == 1 && data && cache) {
        VkPipelineCacheCreateInfo cci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                         .initialDataSize = size,
                                         .pInitialData = data};
        if (!d->CreatePipelineCache ||
            d->CreatePipelineCache(d->device, &cci, NULL, cache) != VK_SUCCESS) {
            *cache = VK_NULL_HANDLE;
            hit = 0;
        }
    }
    free(data);
    vkstats *s = vkstats_lock();
    s->lookup_ns += dt;
    if (hit == 1)
        s->hits++;
    else
        s->misses++;
    if (bad)
        s->rejected++;
    vkstats_unlock();
    return hit == 1;
}

/* Whether creations of this batch may be split into one call each: a derivative that names its
 * base by index within the batch may not. */
static int splittable(uint32_t kind, uint32_t n, const void *ci)
{
    for (uint32_t i = 0; i < n; i++) {
        VkPipelineCreateFlags f = kind == PSDB_SODB_VK_COMPUTE
                                      ? ((const VkComputePipelineCreateInfo *)ci)[i].flags
                                      : ((const VkGraphicsPipelineCreateInfo *)ci)[i].flags;
        if (f & VK_PIPELINE_CREATE_DERIVATIVE_BIT)
            return 0;
    }
    return 1;
}

/* Creation feedback (VK_EXT_pipeline_creation_feedback) of one creation: the layer's own, chained
 * in front of the application's structures, or the application's when it asked for it. */
#define FB_STAGES 8u
typedef struct fb_slot {
    VkPipelineCreationFeedbackCreateInfo info;
    VkPipelineCreationFeedback fb;
    VkPipelineCreationFeedback stages[FB_STAGES];
    const VkPipelineCreationFeedback *read; /* NULL: no feedback for this creation */
} fb_slot;

static const VkPipelineCreationFeedback *app_feedback(const void *chain)
{
    for (const VkBaseInStructure *b = chain; b; b = b->pNext)
        if (b->sType == VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO)
            return ((const VkPipelineCreationFeedbackCreateInfo *)(const void *)b)
                ->pPipelineCreationFeedback;
    return NULL;
}

/* Copies of the n create-infos with feedback chained in (*copy and *slots, the caller frees both),
 * or -1 without memory (the creation then goes down without feedback). */
static int fb_prepare(uint32_t kind, uint32_t n, const void *ci, void **copy, fb_slot **slots)
{
    size_t stride = kind == PSDB_SODB_VK_COMPUTE ? sizeof(VkComputePipelineCreateInfo)
                                                 : sizeof(VkGraphicsPipelineCreateInfo);
    *copy = malloc(stride * n);
    *slots = calloc(n, sizeof(**slots));
    if (!*copy || !*slots) {
        free(*copy);
        free(*slots);
        *copy = NULL;
        *slots = NULL;
        return -1;
    }
    memcpy(*copy, ci, stride * n);
    for (uint32_t i = 0; i < n; i++) {
        fb_slot *f = &(*slots)[i];
        const void **next;
        uint32_t stages;
        if (kind == PSDB_SODB_VK_COMPUTE) {
            VkComputePipelineCreateInfo *c = &((VkComputePipelineCreateInfo *)*copy)[i];
            next = &c->pNext;
            stages = 1;
        } else {
            VkGraphicsPipelineCreateInfo *g = &((VkGraphicsPipelineCreateInfo *)*copy)[i];
            next = &g->pNext;
            stages = g->stageCount;
        }
        if ((f->read = app_feedback(*next)) != NULL || stages > FB_STAGES)
            continue;
        f->info = (VkPipelineCreationFeedbackCreateInfo){
            .sType = VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO,
            .pNext = *next,
            .pPipelineCreationFeedback = &f->fb,
            .pipelineStageCreationFeedbackCount = stages,
            .pPipelineStageCreationFeedbacks = f->stages};
        *next = &f->info;
        f->read = &f->fb;
    }
    return 0;
}

/* Creates down the chain; app is the application's own cache (or VK_NULL_HANDLE), which no merge
 * may write while the driver reads it. hit (may be NULL: none) says which creations the PSDB
 * serves: on a device with creation feedback, those the driver reports as served from the
 * pipeline cache it was given are counted as driver hits. */
static VkResult create_next(ldevice *d, uint32_t kind, VkPipelineCache cache, VkPipelineCache app,
                            uint32_t n, const void *ci, const VkAllocationCallbacks *a,
                            VkPipeline *out, const uint8_t *hit)
{
    VkResult r;
    void *copy = NULL;
    fb_slot *slots = NULL;
    uint64_t confirmed = 0;
    if (d->feedback && hit && fb_prepare(kind, n, ci, &copy, &slots) == 0)
        ci = copy;
    if (app)
        pthread_rwlock_rdlock(&d->cache_lock);
    if (kind == PSDB_SODB_VK_COMPUTE)
        r = d->CreateComputePipelines(d->device, cache, n, ci, a, out);
    else
        r = d->CreateGraphicsPipelines(d->device, cache, n, ci, a, out);
    if (app)
        pthread_rwlock_unlock(&d->cache_lock);
    for (uint32_t i = 0; slots && r >= 0 && i < n; i++) {
        const VkPipelineCreationFeedback *f = slots[i].read;
        confirmed += hit[i] && out[i] != VK_NULL_HANDLE && f &&
                     (f->flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT) &&
                     (f->flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT);
    }
    if (slots) {
        vkstats_lock()->driver_hits += confirmed;
        vkstats_unlock();
    }
    free(copy);
    free(slots);
    return r;
}

/* Merges src into the application's cache app, excluded from the creations that use app. */
static VkResult merge_into_app(ldevice *d, VkPipelineCache app, VkPipelineCache src)
{
    if (!d->MergePipelineCaches)
        return VK_ERROR_FEATURE_NOT_PRESENT;
    pthread_rwlock_wrlock(&d->cache_lock);
    VkResult r = d->MergePipelineCaches(d->device, app, 1, &src);
    pthread_rwlock_unlock(&d->cache_lock);
    return r;
}

/* Whether the application's cache app holds the merged cache: merged into it at its first
 * creation under the layer, so that every hit with it needs only the key and the application's
 * cache keeps working as without the layer (it gains the PSDB's pipelines). 0 when the merge
 * fails or FED_MAX caches are fed already: the caller then goes pipeline by pipeline. */
static int app_cache_fed(ldevice *d, VkPipelineCache app)
{
    int fed = 0;
    pthread_mutex_lock(&d->fed_lock);
    for (uint32_t i = 0; i < d->num_fed && !fed; i++)
        fed = d->fed[i] == app;
    int room = d->num_fed < FED_MAX;
    pthread_mutex_unlock(&d->fed_lock);
    if (fed || !room || merge_into_app(d, app, d->merged) != VK_SUCCESS)
        return fed;
    pthread_mutex_lock(&d->fed_lock);
    for (uint32_t i = 0; i < d->num_fed && !fed; i++)
        fed = d->fed[i] == app; /* another thread fed it meanwhile */
    int added = !fed && d->num_fed < FED_MAX;
    if (added)
        d->fed[d->num_fed++] = app;
    pthread_mutex_unlock(&d->fed_lock);
    if (added) {
        vkstats_lock()->fed++;
        vkstats_unlock();
    }
    return 1;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyPipelineCache(VkDevice device, VkPipelineCache cache,
                                                             const VkAllocationCallbacks *a)
{
    ldevice *d = device_find(dispatch_key(device));
    pthread_mutex_lock(&d->fed_lock);
    for (uint32_t i = 0; i < d->num_fed; i++) {
        if (d->fed[i] == cache) {
            d->fed[i] = d->fed[--d->num_fed]; /* a later cache may get the same handle */
            break;
        }
    }
    pthread_mutex_unlock(&d->fed_lock);
    d->DestroyPipelineCache(device, cache, a);
}

/* vkCreate*Pipelines with a PSDB delivered. Mesa's code arrives through its disk cache: the batch
 * goes down unchanged and the lookups only count. For VkPipelineCache data with the device's
 * merged cache: a creation that passes no cache goes pipeline by pipeline, a hit with the merged
 * cache, a miss with none (as the application asked); an application's own cache is fed the
 * merged cache once (app_cache_fed) and its batches then go down unchanged. Without a merged cache
 * (or feeding failed) a hit is created with a cache made from the pipeline's own data, or, when
 * the application passes its own cache, that data is merged into the application's cache first.
 * A batch that may not be split (derivatives naming their base by index) goes down whole: with the
 * merged cache when every pipeline of it is a hit. */
/* vkCreate*Pipelines with a PSDB of pipeline binaries: each hit's binaries are made from its value
 * and chained into a copy of its create-info (VkPipelineBinaryInfoKHR), the batch goes down whole,
 * with no cache when any element is made from binaries (the extension asks so). A driver that
 * refuses a hit's binaries makes it a miss (rejected); a creation made from them is a driver hit:
 * the driver built the pipeline from the delivered binaries, or failed. */
static VkResult create_from_binaries(ldevice *d, uint32_t kind, VkPipelineCache cache, uint32_t n,
                                     const void *ci, const VkAllocationCallbacks *a,
                                     VkPipeline *out)
{
    size_t stride = kind == PSDB_SODB_VK_COMPUTE ? sizeof(VkComputePipelineCreateInfo)
                                                 : sizeof(VkGraphicsPipelineCreateInfo);
    uint8_t *copy = malloc(stride * (n ? n : 1));
    vkbin_set *sets = calloc(n ? n : 1, sizeof(*sets));
    uint32_t hits = 0, rejected = 0, misses = 0;
    uint64_t ns = 0;
    VkResult r;
    if (!copy || !sets) {
        free(copy);
        free(sets);
        return kind == PSDB_SODB_VK_COMPUTE
                   ? d->CreateComputePipelines(d->device, cache, n, ci, a, out)
                   : d->CreateGraphicsPipelines(d->device, cache, n, ci, a, out);
    }
    memcpy(copy, ci, stride * n);
    for (uint32_t i = 0; i < n; i++) {
        void *data = NULL;
        size_t size = 0;
        int bad = 0;
        uint64_t t0 = mono_ns();
        int hit = vkfind_lookup(&d->dl, d->rec, kind, copy + i * stride, &data, &size, &bad);
        ns += mono_ns() - t0;
        if (hit == 1 && (atomic_load_explicit(&d->binaries_refused, memory_order_relaxed) ||
                         vkbin_create(&d->bin, d->device, data, size, &sets[i]) != VK_SUCCESS))
            hit = 0, bad = 1;
        free(data);
        if (hit == 1) {
            const void **next =
                kind == PSDB_SODB_VK_COMPUTE
                    ? &((VkComputePipelineCreateInfo *)(void *)(copy + i * stride))->pNext
                    : &((VkGraphicsPipelineCreateInfo *)(void *)(copy + i * stride))->pNext;
            sets[i].info.pNext = *next;
            *next = &sets[i].info;
            hits++;
        } else {
            misses++;
            rejected += bad != 0;
        }
    }
    VkPipelineCache use = hits ? VK_NULL_HANDLE : cache;
    if (kind == PSDB_SODB_VK_COMPUTE)
        r = d->CreateComputePipelines(d->device, use, n, (const void *)copy, a, out);
    else
        r = d->CreateGraphicsPipelines(d->device, use, n, (const void *)copy, a, out);
    int refused = 0;
    for (uint32_t i = 0; i < n && r != VK_SUCCESS; i++)
        refused |= sets[i].count && out[i] == VK_NULL_HANDLE;
    if (refused) {
        atomic_store_explicit(&d->binaries_refused, 1, memory_order_relaxed);
        /* The driver refused a creation from delivered binaries (the NVIDIA driver answers
         * VK_PIPELINE_COMPILE_REQUIRED once a device has made a few thousand binaries): the batch
         * goes down again as the application gave it, and its hits count as refused data. */
        for (uint32_t i = 0; i < n; i++)
            if (out[i] != VK_NULL_HANDLE)
                d->DestroyPipeline(d->device, out[i], a);
        if (kind == PSDB_SODB_VK_COMPUTE)
            r = d->CreateComputePipelines(d->device, cache, n, ci, a, out);
        else
            r = d->CreateGraphicsPipelines(d->device, cache, n, ci, a, out);
        misses += hits;
        rejected += hits;
        hits = 0;
    }
    uint64_t made = 0;
    for (uint32_t i = 0; i < n; i++) {
        made += !refused && r >= 0 && sets[i].count && out[i] != VK_NULL_HANDLE;
        vkbin_destroy(&d->bin, d->device, &sets[i]);
    }
    vkstats *s = vkstats_lock();
    s->lookup_ns += ns;
    s->hits += hits;
    s->misses += misses;
    s->rejected += rejected;
    s->driver_hits += made;
    vkstats_unlock();
    free(copy);
    free(sets);
    return r;
}

static VkResult create_delivered(ldevice *d, uint32_t kind, VkPipelineCache cache, uint32_t n,
                                 const void *ci, const VkAllocationCallbacks *a, VkPipeline *out)
{
    size_t stride = kind == PSDB_SODB_VK_COMPUTE ? sizeof(VkComputePipelineCreateInfo)
                                                 : sizeof(VkGraphicsPipelineCreateInfo);
    if (d->binaries)
        return create_from_binaries(d, kind, cache, n, ci, a, out);
    int merged = d->merged != VK_NULL_HANDLE && cache == VK_NULL_HANDLE;
    int fed = d->merged != VK_NULL_HANDLE && cache != VK_NULL_HANDLE && app_cache_fed(d, cache);
    if (d->dl.id.strategy == VKID_MESA_DISK_CACHE || fed || !splittable(kind, n, ci)) {
        uint32_t hits = 0;
        uint8_t *hit = calloc(n ? n : 1, 1); /* NULL: no driver hits counted, nothing else lost */
        for (uint32_t i = 0; i < n; i++) {
            int h = deliver_one(d, kind, (const char *)ci + i * stride, NULL);
            hits += (uint32_t)h;
            if (hit)
                hit[i] = (uint8_t)h;
        }
        /* A batch with a miss goes down with the application's cache: its hits then reach the
         * driver with no delivered data, and no driver hit is claimed for them. */
        int served = fed || (merged && hits == n);
        VkResult r = create_next(d, kind, merged && hits == n ? d->merged : cache, cache, n, ci, a,
                                 out, served ? hit : NULL);
        free(hit);
        return r;
    }
    VkResult result = VK_SUCCESS;
    for (uint32_t i = 0; i < n; i++) {
        const void *one = (const char *)ci + i * stride;
        VkPipelineCache c = VK_NULL_HANDLE, use = cache;
        uint8_t hit = 0;
        if (merged) {
            /* A miss goes down with no cache, as the application asked. */
            hit = (uint8_t)deliver_one(d, kind, one, NULL);
            use = hit ? d->merged : VK_NULL_HANDLE;
        } else {
            deliver_one(d, kind, one, &c);
            hit = c != VK_NULL_HANDLE;
            if (c && cache == VK_NULL_HANDLE)
                use = c;
            else if (c && merge_into_app(d, cache, c) != VK_SUCCESS)
                hit = 0;
        }
        VkResult r = create_next(d, kind, use, cache, 1, one, a, &out[i], &hit);
        if (c)
            d->DestroyPipelineCache(d->device, c, NULL);
        if (r < 0) {
            /* As for a failed batch: the elements not created are VK_NULL_HANDLE, the ones
             * before stay created. */
            for (uint32_t j = i; j < n; j++)
                out[j] = VK_NULL_HANDLE;
            return r;
        }
        if (r != VK_SUCCESS)
            result = r;
    }
    return result;
}

/* A device whose PSDB failed its proof: each pipeline created is a miss whose data was refused. */
static void count_refused(ldevice *d, VkResult r, uint32_t n, const VkPipeline *out)
{
    uint64_t created = 0;
    if (!d->dl.refused || r < 0)
        return;
    for (uint32_t i = 0; i < n; i++)
        created += out[i] != VK_NULL_HANDLE;
    vkstats *s = vkstats_lock();
    s->misses += created;
    s->rejected += created;
    vkstats_unlock();
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateComputePipelines(
    VkDevice device, VkPipelineCache cache, uint32_t n, const VkComputePipelineCreateInfo *ci,
    const VkAllocationCallbacks *a, VkPipeline *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->dl.psdb ? create_delivered(d, PSDB_SODB_VK_COMPUTE, cache, n, ci, a, out)
                            : d->CreateComputePipelines(device, cache, n, ci, a, out);
    count_refused(d, r, n, out);
    capture_created(d, PSDB_SODB_VK_COMPUTE, r, n, ci, out);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateGraphicsPipelines(
    VkDevice device, VkPipelineCache cache, uint32_t n, const VkGraphicsPipelineCreateInfo *ci,
    const VkAllocationCallbacks *a, VkPipeline *out)
{
    ldevice *d = device_find(dispatch_key(device));
    VkResult r = d->dl.psdb ? create_delivered(d, PSDB_SODB_VK_GRAPHICS, cache, n, ci, a, out)
                            : d->CreateGraphicsPipelines(device, cache, n, ci, a, out);
    count_refused(d, r, n, out);
    capture_created(d, PSDB_SODB_VK_GRAPHICS, r, n, ci, out);
    return r;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyDevice(VkDevice device,
                                                      const VkAllocationCallbacks *a)
{
    void *key = dispatch_key(device);
    ldevice *d = NULL;
    pthread_mutex_lock(&g_lock);
    for (ldevice **pp = &g_devices; *pp; pp = &(*pp)->next) {
        if ((*pp)->key == key) {
            d = *pp;
            *pp = d->next;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (!d)
        return;
    stats_report();
    if (d->merged)
        d->DestroyPipelineCache(device, d->merged, NULL);
    d->DestroyDevice(device, a);
    vkfind_close(&d->dl);
    vkrec_release(d->rec);
    pthread_mutex_destroy(&d->fed_lock);
    pthread_rwlock_destroy(&d->cache_lock);
    free(d);
}

/* Device-level names the layer intercepts, with where ldevice keeps the next function. */
typedef struct hook {
    const char *name;
    PFN_vkVoidFunction fn;
    size_t next_offset;
} hook;

#define HOOK(n)                                                                                    \
    {                                                                                              \
        "vk" #n, (PFN_vkVoidFunction)layer_##n, offsetof(ldevice, n)                               \
    }
static const hook DEVICE_HOOKS[] = {
    HOOK(DestroyDevice),
    HOOK(CreateShaderModule),
    HOOK(DestroyShaderModule),
    HOOK(CreateSampler),
    HOOK(DestroySampler),
    HOOK(CreateDescriptorSetLayout),
    HOOK(DestroyDescriptorSetLayout),
    HOOK(CreatePipelineLayout),
    HOOK(DestroyPipelineLayout),
    HOOK(CreateRenderPass),
    HOOK(CreateRenderPass2),
    HOOK(CreateRenderPass2KHR),
    HOOK(DestroyRenderPass),
    HOOK(CreateComputePipelines),
    HOOK(CreateGraphicsPipelines),
    HOOK(DestroyPipelineCache),
};
#undef HOOK
#define NUM_DEVICE_HOOKS (sizeof(DEVICE_HOOKS) / sizeof(DEVICE_HOOKS[0]))

static PFN_vkVoidFunction *next_slot(ldevice *d, const hook *h)
{
    return (PFN_vkVoidFunction *)(void *)((char *)d + h->next_offset);
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device,
                                                                        const char *name);

/* VK_KHR_pipeline_binary on for a device of a delivered PSDB of binaries: where the device has it
 * (and VK_KHR_maintenance5, which it needs), *out becomes ci with both extensions added to its list
 * (*names, the caller's to free) and the pipelineBinaries feature chained in front (*features, the
 * caller's storage), unless the application's chain already names that feature structure (then
 * the application decided). 0 done, -1 not available (the PSDB is then not delivered). */
static int binaries_enable(linstance *inst, VkPhysicalDevice phys, const VkDeviceCreateInfo *ci,
                           VkDeviceCreateInfo *out, const char ***names,
                           VkPhysicalDevicePipelineBinaryFeaturesKHR *features)
{
    static const char *const want[2] = {VK_KHR_MAINTENANCE_5_EXTENSION_NAME,
                                        VK_KHR_PIPELINE_BINARY_EXTENSION_NAME};
    PFN_vkEnumerateDeviceExtensionProperties enumerate = NULL;
    PFN_vkGetPhysicalDeviceFeatures2 features2 = NULL;
    uint32_t add = 0;
    *names = NULL;
    if (!inst)
        return -1;
    enumerate = (PFN_vkEnumerateDeviceExtensionProperties)inst->gipa(
        inst->instance, "vkEnumerateDeviceExtensionProperties");
    features2 = (PFN_vkGetPhysicalDeviceFeatures2)inst->gipa(inst->instance,
                                                             "vkGetPhysicalDeviceFeatures2");
    if (!vkbin_supported(enumerate, features2, phys))
        return -1;
    for (const VkBaseInStructure *b = ci->pNext; b; b = b->pNext)
        if (b->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_BINARY_FEATURES_KHR &&
            !((const VkPhysicalDevicePipelineBinaryFeaturesKHR *)(const void *)b)->pipelineBinaries)
            return -1;
    if (!(*names = calloc(ci->enabledExtensionCount + 2, sizeof(**names))))
        return -1;
    for (uint32_t i = 0; i < ci->enabledExtensionCount; i++)
        (*names)[i] = ci->ppEnabledExtensionNames[i];
    for (uint32_t w = 0; w < 2; w++) {
        int have = 0;
        for (uint32_t i = 0; i < ci->enabledExtensionCount && !have; i++)
            have = strcmp(ci->ppEnabledExtensionNames[i], want[w]) == 0;
        if (!have)
            (*names)[ci->enabledExtensionCount + add++] = want[w];
    }
    *out = *ci;
    out->enabledExtensionCount = ci->enabledExtensionCount + add;
    out->ppEnabledExtensionNames = *names;
    int named = 0;
    for (const VkBaseInStructure *b = ci->pNext; b; b = b->pNext)
        named |= b->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_BINARY_FEATURES_KHR;
    if (!named) {
        *features = (VkPhysicalDevicePipelineBinaryFeaturesKHR){
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_BINARY_FEATURES_KHR,
            .pNext = (void *)ci->pNext,
            .pipelineBinaries = VK_TRUE};
        out->pNext = features;
    }
    return 0;
}

/* Creation feedback on for a device of delivered VkPipelineCache data, so that the driver's own
 * report tells which hits it served from the data (stats "driver_hits"): where the device has
 * VK_EXT_pipeline_creation_feedback, *out becomes ci with the extension added to its list (*names,
 * the caller's to free, holds the list). 0 done (or already enabled by the application), -1 not
 * available (the device runs without it). */
static int feedback_enable(linstance *inst, VkPhysicalDevice phys, const VkDeviceCreateInfo *ci,
                           VkDeviceCreateInfo *out, const char ***names)
{
    static const char ext[] = VK_EXT_PIPELINE_CREATION_FEEDBACK_EXTENSION_NAME;
    PFN_vkEnumerateDeviceExtensionProperties enumerate = NULL;
    VkExtensionProperties *props = NULL;
    uint32_t n = 0;
    int have = 0, rc = -1;
    *names = NULL;
    if (!inst)
        return -1;
    for (uint32_t i = 0; i < ci->enabledExtensionCount; i++) {
        if (strcmp(ci->ppEnabledExtensionNames[i], ext) == 0) {
            *out = *ci;
            return 0;
        }
    }
    enumerate = (PFN_vkEnumerateDeviceExtensionProperties)inst->gipa(
        inst->instance, "vkEnumerateDeviceExtensionProperties");
    if (!enumerate || enumerate(phys, NULL, &n, NULL) != VK_SUCCESS || n == 0 ||
        !(props = calloc(n, sizeof(*props))) || enumerate(phys, NULL, &n, props) != VK_SUCCESS)
        goto cleanup;
    for (uint32_t i = 0; i < n && !have; i++)
        have = strcmp(props[i].extensionName, ext) == 0;
    if (!have || !(*names = calloc(ci->enabledExtensionCount + 1, sizeof(**names))))
        goto cleanup;
    for (uint32_t i = 0; i < ci->enabledExtensionCount; i++)
        (*names)[i] = ci->ppEnabledExtensionNames[i];
    (*names)[ci->enabledExtensionCount] = ext;
    *out = *ci;
    out->enabledExtensionCount = ci->enabledExtensionCount + 1;
    out->ppEnabledExtensionNames = *names;
    rc = 0;
cleanup:
    free(props);
    return rc;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateDevice(VkPhysicalDevice phys,
                                                         const VkDeviceCreateInfo *ci,
                                                         const VkAllocationCallbacks *a,
                                                         VkDevice *out)
{
    VkLayerDeviceCreateInfo *link = (VkLayerDeviceCreateInfo *)ci->pNext;
    while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO &&
                     link->function == VK_LAYER_LINK_INFO))
        link = (VkLayerDeviceCreateInfo *)link->pNext;
    if (!link || !link->u.pLayerInfo)
        return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkGetDeviceProcAddr gdpa = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    linstance *inst = instance_find(dispatch_key(phys));
    PFN_vkCreateDevice create =
        (PFN_vkCreateDevice)gipa(inst ? inst->instance : VK_NULL_HANDLE, "vkCreateDevice");
    if (!create)
        return VK_ERROR_INITIALIZATION_FAILED;
    ldevice *d = calloc(1, sizeof(*d));
    if (!d || PSDB_FAILED(vkrec_create(&d->rec))) {
        free(d);
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    const char **names = NULL;
    VkDeviceCreateInfo with_feedback, with_binaries;
    VkPhysicalDevicePipelineBinaryFeaturesKHR bin_features;
    delivery_find(d, inst, phys);
    if (d->dl.psdb && d->dl.id.strategy == VKID_PIPELINE_CACHE &&
        feedback_enable(inst, phys, ci, &with_feedback, &names) == 0) {
        ci = &with_feedback;
        d->feedback = 1;
    }
    if (d->dl.psdb && d->dl.id.strategy == VKID_PIPELINE_BINARY) {
        if (binaries_enable(inst, phys, ci, &with_binaries, &names, &bin_features) == 0) {
            ci = &with_binaries;
            d->binaries = 1;
        } else {
            delivery_drop(d, PSDB_S_FALSE, "the device has no VK_KHR_pipeline_binary");
        }
    }
    /* The next layer reads its own link: advance before calling down. */
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;
    VkResult r = create(phys, ci, a, out);
    free(names);
    if (r != VK_SUCCESS) {
        vkfind_close(&d->dl);
        vkrec_release(d->rec);
        free(d);
        return r;
    }
    d->device = *out;
    d->key = dispatch_key(*out);
    d->gdpa = gdpa;
    for (size_t i = 0; i < NUM_DEVICE_HOOKS; i++)
        *next_slot(d, &DEVICE_HOOKS[i]) = gdpa(*out, DEVICE_HOOKS[i].name);
    d->CreatePipelineCache = (PFN_vkCreatePipelineCache)gdpa(*out, "vkCreatePipelineCache");
    d->DestroyPipelineCache = (PFN_vkDestroyPipelineCache)gdpa(*out, "vkDestroyPipelineCache");
    d->DestroyPipeline = (PFN_vkDestroyPipeline)gdpa(*out, "vkDestroyPipeline");
    d->MergePipelineCaches = (PFN_vkMergePipelineCaches)gdpa(*out, "vkMergePipelineCaches");
    pthread_mutex_init(&d->fed_lock, NULL);
    pthread_rwlock_init(&d->cache_lock, NULL);
    if (d->binaries) {
        uint8_t key[32];
        uint32_t key_size = 0;
        /* Binaries of another driver build are refused before any is handed over. */
        if (vkbin_fns_load(gdpa, *out, &d->bin) != 0 ||
            vkbin_global_key(&d->bin, *out, key, &key_size) != VK_SUCCESS)
            delivery_drop(d, PSDB_S_FALSE, "the driver gives no pipeline binary functions");
        else if (key_size != d->dl.binary_key_size || memcmp(key, d->dl.binary_key, key_size) != 0)
            delivery_drop(d, PSDB_E_DRIVER_VERSION_MISMATCH,
                          "its binaries are for another driver build (global pipeline key)");
        d->binaries = d->dl.psdb != NULL;
        if (d->binaries) {
            vkstats_lock()->feedback = 1; /* a creation from binaries is the driver's own word */
            vkstats_unlock();
        }
    }
    delivery_attach(d);
    if (d->feedback) {
        vkstats_lock()->feedback = 1;
        vkstats_unlock();
    }
    pthread_mutex_lock(&g_lock);
    d->next = g_devices;
    g_devices = d;
    pthread_mutex_unlock(&g_lock);
    return VK_SUCCESS;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device,
                                                                        const char *name)
{
    if (strcmp(name, "vkGetDeviceProcAddr") == 0)
        return (PFN_vkVoidFunction)layer_GetDeviceProcAddr;
    ldevice *d = device ? device_find(dispatch_key(device)) : NULL;
    if (!d)
        return NULL;
    for (size_t i = 0; i < NUM_DEVICE_HOOKS; i++)
        if (strcmp(name, DEVICE_HOOKS[i].name) == 0)
            /* Offer the hook only where the driver has the function (extensions, versions). */
            return *next_slot(d, &DEVICE_HOOKS[i]) ? DEVICE_HOOKS[i].fn : NULL;
    return d->gdpa(device, name);
}

/* ---- Instance level ------------------------------------------------------------------------ */
/* A Vulkan 1.0 instance (no VkApplicationInfo, or apiVersion 1.0) that does not enable
 * VK_KHR_get_physical_device_properties2 gets the loader's emulated vkGetPhysicalDeviceProperties2,
 * which leaves VkPhysicalDeviceDriverProperties unset: the device identity (driverID, driverInfo)
 * would differ from the one psdb compile derives and every PSDB be refused. The instance is created
 * with the extension added where the application did not enable it, and as the application asked
 * where the driver lacks it (the identity then has no driver properties, as on a 1.0 driver). */
static VkResult create_with_properties2(PFN_vkCreateInstance create, const VkInstanceCreateInfo *ci,
                                        const VkAllocationCallbacks *a, VkInstance *out)
{
    static const char ext[] = VK_KHR_GET_PHYSICAL_DEVICE_PROPERTIES_2_EXTENSION_NAME;
    const char **names = NULL;
    VkResult r;
    int have = ci->pApplicationInfo && ci->pApplicationInfo->apiVersion >= VK_API_VERSION_1_1;
    for (uint32_t i = 0; !have && i < ci->enabledExtensionCount; i++)
        have = strcmp(ci->ppEnabledExtensionNames[i], ext) == 0;
    if (!have)
        names = malloc(((size_t)ci->enabledExtensionCount + 1) * sizeof(*names));
    if (names) {
        VkInstanceCreateInfo with = *ci;
        for (uint32_t i = 0; i < ci->enabledExtensionCount; i++)
            names[i] = ci->ppEnabledExtensionNames[i];
        names[ci->enabledExtensionCount] = ext;
        with.enabledExtensionCount = ci->enabledExtensionCount + 1;
        with.ppEnabledExtensionNames = names;
        r = create(&with, a, out);
        if (r != VK_ERROR_EXTENSION_NOT_PRESENT)
            goto cleanup;
    }
    r = create(ci, a, out);
cleanup:
    free(names);
    return r;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateInstance(const VkInstanceCreateInfo *ci,
                                                           const VkAllocationCallbacks *a,
                                                           VkInstance *out)
{
    VkLayerInstanceCreateInfo *link = (VkLayerInstanceCreateInfo *)ci->pNext;
    while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO &&
                     link->function == VK_LAYER_LINK_INFO))
        link = (VkLayerInstanceCreateInfo *)link->pNext;
    if (!link || !link->u.pLayerInfo)
        return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
    if (!create)
        return VK_ERROR_INITIALIZATION_FAILED;
    linstance *inst = calloc(1, sizeof(*inst));
    if (!inst)
        return VK_ERROR_OUT_OF_HOST_MEMORY;
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;
    /* Before the first instance reaches the driver: Mesa opens its disk cache when the driver
     * loads, so a shipped read-only cache must be arranged now (vkfind_prepare). */
    pthread_mutex_lock(&g_lock);
    int first = g_instances == NULL;
    pthread_mutex_unlock(&g_lock);
    vkfind_prepare(first);
    VkResult r = create_with_properties2(create, ci, a, out);
    if (r != VK_SUCCESS) {
        free(inst);
        return r;
    }
    inst->instance = *out;
    inst->key = dispatch_key(*out);
    inst->gipa = gipa;
    inst->DestroyInstance = (PFN_vkDestroyInstance)gipa(*out, "vkDestroyInstance");
    pthread_mutex_lock(&g_lock);
    inst->next = g_instances;
    g_instances = inst;
    pthread_mutex_unlock(&g_lock);
    vkcap_open(ci->pApplicationInfo);
    return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyInstance(VkInstance instance,
                                                        const VkAllocationCallbacks *a)
{
    if (!instance)
        return;
    void *key = dispatch_key(instance);
    linstance *inst = NULL;
    pthread_mutex_lock(&g_lock);
    for (linstance **pp = &g_instances; *pp; pp = &(*pp)->next) {
        if ((*pp)->key == key) {
            inst = *pp;
            *pp = inst->next;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (!inst)
        return;
    inst->DestroyInstance(instance, a);
    free(inst);
    pthread_mutex_lock(&g_lock);
    int last = g_instances == NULL;
    pthread_mutex_unlock(&g_lock);
    if (last)
        vkfind_drop(); /* proofs no device took */
    vkcap_close();
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetInstanceProcAddr(VkInstance instance,
                                                                          const char *name)
{
    if (strcmp(name, "vkGetInstanceProcAddr") == 0)
        return (PFN_vkVoidFunction)layer_GetInstanceProcAddr;
    if (strcmp(name, "vkCreateInstance") == 0)
        return (PFN_vkVoidFunction)layer_CreateInstance;
    if (strcmp(name, "vkDestroyInstance") == 0)
        return (PFN_vkVoidFunction)layer_DestroyInstance;
    if (strcmp(name, "vkCreateDevice") == 0)
        return (PFN_vkVoidFunction)layer_CreateDevice;
    if (strcmp(name, "vkGetDeviceProcAddr") == 0)
        return (PFN_vkVoidFunction)layer_GetDeviceProcAddr;
    /* Device-level hooks are offered through vkGetDeviceProcAddr only, where the device is known
     * and a hook is never handed out for a function the driver lacks. */
    linstance *inst = instance ? instance_find(dispatch_key(instance)) : NULL;
    return inst ? inst->gipa(instance, name) : NULL;
}

LAYER_EXPORT VKAPI_ATTR VkResult VKAPI_CALL
vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v)
{
    if (!v || v->sType != LAYER_NEGOTIATE_INTERFACE_STRUCT)
        return VK_ERROR_INITIALIZATION_FAILED;
    if (v->loaderLayerInterfaceVersion < 2)
        return VK_ERROR_INITIALIZATION_FAILED;
    v->loaderLayerInterfaceVersion = 2;
    v->pfnGetInstanceProcAddr = layer_GetInstanceProcAddr;
    v->pfnGetDeviceProcAddr = layer_GetDeviceProcAddr;
    v->pfnGetPhysicalDeviceProcAddr = NULL;
    return VK_SUCCESS;
}
