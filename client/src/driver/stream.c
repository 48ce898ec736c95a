/* stream.c - pipeline-state streams (D3D12's CreatePipelineState): a stream of subobjects turned
 * into a compute or graphics description. */
#include "driver/compiler.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "format/desc.h"
#include "common/error.h"

/* ---- Pipeline-state streams ------------------------------------------------------------------ */

psdb_hr psdb__stream_to_desc(const psdb_pipeline_stream_desc *s, int *is_compute,
                             psdb_compute_pipeline_desc *cd, psdb_graphics_pipeline_desc *gd)
{
    const void *by_type[PSDB_STREAM_PSDB + 1] = {0};

    if (!s || !is_compute || !cd || !gd || (s->num_subobjects && !s->subobjects))
        return psdb__error_const(
            PSDB_E_INVALIDARG,
            "pipeline state stream: NULL stream, or subobjects NULL with a count");
    for (uint32_t i = 0; i < s->num_subobjects; i++) {
        uint32_t type = s->subobjects[i].type;
        if (type > PSDB_STREAM_PSDB || !s->subobjects[i].data || by_type[type])
            return psdb__error_const(PSDB_E_INVALIDARG,
                                     "pipeline state stream: an unknown subobject type, a "
                                     "subobject without data, or one given twice");
        by_type[type] = s->subobjects[i].data;
    }
    int compute = by_type[PSDB_STREAM_CS] != NULL;
    if (compute && (by_type[PSDB_STREAM_VS] || by_type[PSDB_STREAM_PS] || by_type[PSDB_STREAM_DS] ||
                    by_type[PSDB_STREAM_HS] || by_type[PSDB_STREAM_GS]))
        return psdb__error_const(PSDB_E_INVALIDARG,
                                 "pipeline state stream: a compute shader with graphics shaders");

    memset(cd, 0, sizeof(*cd));
    memset(gd, 0, sizeof(*gd));
    *is_compute = compute;
    const psdb_shader *rs = by_type[PSDB_STREAM_ROOT_SIGNATURE];
    const psdb_session_subobject *psdb = by_type[PSDB_STREAM_PSDB];
    if (compute) {
        if (rs) {
            cd->root_signature = rs->code;
            cd->root_signature_size = rs->size;
        }
        cd->cs = *(const psdb_shader *)by_type[PSDB_STREAM_CS];
        cd->psdb = psdb;
        return PSDB_S_OK;
    }
    if (rs) {
        gd->root_signature = rs->code;
        gd->root_signature_size = rs->size;
    }
    psdb_shader *stages[] = {&gd->vs, &gd->ps, &gd->ds, &gd->hs, &gd->gs};
    const uint32_t stage_types[] = {PSDB_STREAM_VS, PSDB_STREAM_PS, PSDB_STREAM_DS, PSDB_STREAM_HS,
                                    PSDB_STREAM_GS};
    for (int i = 0; i < 5; i++)
        if (by_type[stage_types[i]])
            *stages[i] = *(const psdb_shader *)by_type[stage_types[i]];
    if (by_type[PSDB_STREAM_STREAM_OUTPUT])
        gd->stream_output = *(const psdb_stream_output_desc *)by_type[PSDB_STREAM_STREAM_OUTPUT];
    if (by_type[PSDB_STREAM_BLEND])
        gd->blend = *(const psdb_blend_desc *)by_type[PSDB_STREAM_BLEND];
    gd->sample_mask = by_type[PSDB_STREAM_SAMPLE_MASK]
                          ? *(const uint32_t *)by_type[PSDB_STREAM_SAMPLE_MASK]
                          : UINT32_MAX;
    if (by_type[PSDB_STREAM_RASTERIZER])
        gd->rasterizer = *(const psdb_rasterizer_desc *)by_type[PSDB_STREAM_RASTERIZER];
    if (by_type[PSDB_STREAM_DEPTH_STENCIL])
        gd->depth_stencil = *(const psdb_depth_stencil_desc *)by_type[PSDB_STREAM_DEPTH_STENCIL];
    if (by_type[PSDB_STREAM_INPUT_LAYOUT])
        gd->input_layout = *(const psdb_input_layout_desc *)by_type[PSDB_STREAM_INPUT_LAYOUT];
    if (by_type[PSDB_STREAM_PRIMITIVE_TOPOLOGY])
        gd->primitive_topology_type = *(const uint32_t *)by_type[PSDB_STREAM_PRIMITIVE_TOPOLOGY];
    if (by_type[PSDB_STREAM_RENDER_TARGETS]) {
        const psdb_render_targets_desc *rt = by_type[PSDB_STREAM_RENDER_TARGETS];
        gd->num_render_targets = rt->num_render_targets;
        memcpy(gd->rtv_formats, rt->rtv_formats, sizeof(gd->rtv_formats));
    }
    if (by_type[PSDB_STREAM_DEPTH_STENCIL_FORMAT])
        gd->dsv_format = *(const uint32_t *)by_type[PSDB_STREAM_DEPTH_STENCIL_FORMAT];
    gd->sample_count = 1;
    if (by_type[PSDB_STREAM_SAMPLE_DESC]) {
        const uint32_t *sd = by_type[PSDB_STREAM_SAMPLE_DESC];
        gd->sample_count = sd[0];
        gd->sample_quality = sd[1];
    }
    if (by_type[PSDB_STREAM_PS_OUTPUTS])
        memcpy(gd->ps_outputs, by_type[PSDB_STREAM_PS_OUTPUTS], sizeof(gd->ps_outputs));
    gd->psdb = psdb;
    return PSDB_S_OK;
}
