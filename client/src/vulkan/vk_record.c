/* vk_record.c - a device's object records: the encoding of each shader module, sampler,
 * descriptor set layout, pipeline layout and render pass by handle, which a pipeline's encoding
 * copies in (psdb_vulkan.h, "A device's object records"). */
#include "vulkan/psdb_vulkan.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define OBJ_BUCKETS 1024u

typedef struct lobj {
    struct lobj *next;
    uint64_t handle;
    VkObjectType type;
    uint8_t *data;
    size_t len;
    uint32_t unrepresentable, num_stypes;
    uint32_t stypes[VKENC_MAX_STYPES];
    uint32_t subpass_depth, subpass_color;
} lobj;

struct vkrec {
    pthread_mutex_t lock; /* guards objs */
    lobj *objs[OBJ_BUCKETS];
};

psdb_hr vkrec_create(vkrec **out)
{
    vkrec *r = calloc(1, sizeof(*r));
    if (r)
        pthread_mutex_init(&r->lock, NULL);
    *out = r;
    return r ? PSDB_S_OK : PSDB_E_OUTOFMEMORY;
}

void vkrec_release(vkrec *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < OBJ_BUCKETS; i++) {
        lobj *o = r->objs[i];
        while (o) {
            lobj *n = o->next;
            free(o->data);
            free(o);
            o = n;
        }
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static size_t bucket(uint64_t handle)
{
    return (size_t)((handle * 0x9E3779B97F4A7C15ull) >> 54) % OBJ_BUCKETS;
}

/* Unlinks and frees the record of (type, handle), if any. Called with r->lock held. */
static void obj_unlink(vkrec *r, VkObjectType type, uint64_t handle)
{
    lobj **pp = &r->objs[bucket(handle)];
    for (lobj *o = *pp; o; pp = &o->next, o = o->next) {
        if (o->handle == handle && o->type == type) {
            *pp = o->next;
            free(o->data);
            free(o);
            break;
        }
    }
}

/* Takes ownership of e's bytes; replaces an older record of the same handle. Called with r->lock
 * held. */
static void obj_put(vkrec *r, VkObjectType type, uint64_t handle, vkenc *e, uint32_t depth,
                    uint32_t color)
{
    obj_unlink(r, type, handle);
    lobj *o = calloc(1, sizeof(*o));
    if (!o || e->oom) {
        /* Without the record, pipelines using the object count as unrepresentable later. */
        free(o);
        vkenc_free(e);
        return;
    }
    o->handle = handle;
    o->type = type;
    o->data = e->data;
    o->len = e->len;
    o->unrepresentable = e->unrepresentable;
    o->num_stypes = e->num_stypes;
    memcpy(o->stypes, e->stypes, sizeof(o->stypes));
    o->subpass_depth = depth;
    o->subpass_color = color;
    o->next = r->objs[bucket(handle)];
    r->objs[bucket(handle)] = o;
    memset(e, 0, sizeof(*e)); /* the record owns the bytes now */
}

/* vkenc_lookup.find; called with r->lock held, so the bytes stay valid while they are copied. */
static int obj_find(void *ctx, VkObjectType type, uint64_t handle, vkenc_object *out)
{
    vkrec *r = ctx;
    for (lobj *o = r->objs[bucket(handle)]; o; o = o->next) {
        if (o->handle == handle && o->type == type) {
            out->data = o->data;
            out->len = o->len;
            out->unrepresentable = o->unrepresentable;
            out->stypes = o->stypes;
            out->num_stypes = o->num_stypes;
            out->subpass_depth = o->subpass_depth;
            out->subpass_color = o->subpass_color;
            return 0;
        }
    }
    return -1;
}

/* What a record is made from: the create-info of one kind of object. */
typedef enum rec_kind { SHADER_MODULE, SAMPLER, SET_LAYOUT, PIPELINE_LAYOUT, RP1, RP2 } rec_kind;

/* Encodes ci (of kind) and records it as handle. Layouts refer to recorded objects and are
 * encoded under the lock; the others are encoded before it is taken. */
static void record(vkrec *r, rec_kind kind, uint64_t handle, const void *ci)
{
    static const VkObjectType type[] = {
        [SHADER_MODULE] = VK_OBJECT_TYPE_SHADER_MODULE,
        [SAMPLER] = VK_OBJECT_TYPE_SAMPLER,
        [SET_LAYOUT] = VK_OBJECT_TYPE_DESCRIPTOR_SET_LAYOUT,
        [PIPELINE_LAYOUT] = VK_OBJECT_TYPE_PIPELINE_LAYOUT,
        [RP1] = VK_OBJECT_TYPE_RENDER_PASS,
        [RP2] = VK_OBJECT_TYPE_RENDER_PASS,
    };
    vkenc e;
    vkenc_lookup lk = {obj_find, r};
    uint32_t depth = 0, color = 0;
    memset(&e, 0, sizeof(e));
    if (kind == SHADER_MODULE)
        vkenc_shader_module(&e, ci);
    else if (kind == SAMPLER)
        vkenc_sampler(&e, ci);
    else if (kind == RP1)
        vkenc_render_pass(&e, ci, &depth, &color);
    else if (kind == RP2)
        vkenc_render_pass2(&e, ci, &depth, &color);
    pthread_mutex_lock(&r->lock);
    if (kind == SET_LAYOUT)
        vkenc_set_layout(&e, ci, &lk);
    else if (kind == PIPELINE_LAYOUT)
        vkenc_pipeline_layout(&e, ci, &lk);
    obj_put(r, type[kind], handle, &e, depth, color);
    pthread_mutex_unlock(&r->lock);
}

void vkrec_shader_module(vkrec *r, uint64_t handle, const VkShaderModuleCreateInfo *ci)
{
    record(r, SHADER_MODULE, handle, ci);
}

void vkrec_sampler(vkrec *r, uint64_t handle, const VkSamplerCreateInfo *ci)
{
    record(r, SAMPLER, handle, ci);
}

void vkrec_set_layout(vkrec *r, uint64_t handle, const VkDescriptorSetLayoutCreateInfo *ci)
{
    record(r, SET_LAYOUT, handle, ci);
}

void vkrec_pipeline_layout(vkrec *r, uint64_t handle, const VkPipelineLayoutCreateInfo *ci)
{
    record(r, PIPELINE_LAYOUT, handle, ci);
}

void vkrec_render_pass(vkrec *r, uint64_t handle, const VkRenderPassCreateInfo *ci)
{
    record(r, RP1, handle, ci);
}

void vkrec_render_pass2(vkrec *r, uint64_t handle, const VkRenderPassCreateInfo2 *ci)
{
    record(r, RP2, handle, ci);
}

void vkrec_forget(vkrec *r, VkObjectType type, uint64_t handle)
{
    if (handle == 0)
        return;
    pthread_mutex_lock(&r->lock);
    obj_unlink(r, type, handle);
    pthread_mutex_unlock(&r->lock);
}

void vkrec_pipeline(vkrec *r, uint32_t kind, const void *ci, vkenc *e)
{
    vkenc_lookup lk = {obj_find, r};
    pthread_mutex_lock(&r->lock);
    if (kind == PSDB_SODB_VK_COMPUTE)
        vkenc_compute_pipeline(e, ci, &lk);
    else
        vkenc_graphics_pipeline(e, ci, &lk);
    pthread_mutex_unlock(&r->lock);
}
