/* vk_decode_fuzz.c - libFuzzer target for the Vulkan entry decoder (client/src/vulkan/vk_decode.c,
 * what `psdb compile/replay --backend vulkan` run on every SODB entry before a driver sees it): any
 * input is refused or decodes into create-infos whose every array can be read in full. The first
 * byte picks the kind (bit 0: graphics), the rest is the entry. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/psdb_vulkan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; b && i < n; i++)
        sink ^= b[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vkdec_pipeline p;
    if (size < 1)
        return 0;
    int rc = vkdec_pipeline_decode(data + 1, size - 1, data[0] & 1, &p);
    if (rc == -1 || rc == -2)
        return 0;
    if (rc != 0)
        abort();
    for (uint32_t i = 0; i < p.num_stages; i++) {
        touch(p.modules[i].pCode, p.modules[i].codeSize);
        touch(p.stages[i].pName, strlen(p.stages[i].pName));
        const VkSpecializationInfo *sp = p.stages[i].pSpecializationInfo;
        if (sp) {
            touch(sp->pMapEntries, sp->mapEntryCount * sizeof(*sp->pMapEntries));
            touch(sp->pData, sp->dataSize);
        }
    }
    for (uint32_t i = 0; p.has_layout && i < p.layout.ci.setLayoutCount; i++) {
        if (!p.layout.present[i])
            continue;
        const vkdec_set_layout *s = &p.layout.sets[i];
        touch(s->ci.pBindings, s->ci.bindingCount * sizeof(*s->ci.pBindings));
        for (uint32_t j = 0; j < s->ci.bindingCount; j++)
            if (s->samplers[j])
                touch(s->samplers[j], s->ci.pBindings[j].descriptorCount * sizeof(**s->samplers));
    }
    if (p.render_pass) {
        touch(p.rp.pAttachments, p.rp.attachmentCount * sizeof(*p.rp.pAttachments));
        for (uint32_t i = 0; i < p.rp.subpassCount; i++)
            touch(p.rp.pSubpasses[i].pColorAttachments,
                  p.rp.pSubpasses[i].colorAttachmentCount *
                      sizeof(*p.rp.pSubpasses[i].pColorAttachments));
    }
    vkdec_free(&p);
    return 0;
}
