/* cmd_synth_vulkan.c - `psdb synth`: --api d3d12 (the default, cmd_synth.c) or --api vulkan. */
#include "tool.h"

#include <stdlib.h>
#include <string.h>

#include "build/synth_vulkan.h"
#include "common/parse.h"

int cmd_synth_api(int argc, char **argv);

static void vusage(FILE *f)
{
    fprintf(
        f,
        "usage: psdb synth --api vulkan --app NAME --app-version V --pipelines N [--seed S]\n"
        "                  [--engine NAME[:VERSION]] [--changed F [--patch K]] -o OUT.sodb\n"
        "\n"
        "Writes an SODB of N distinct Vulkan pipelines (schema/SODB.md section 3) built from\n"
        "GLSL shader families (blur, noise and grading compute shaders; a mesh vertex shader,\n"
        "rigid or skinned; a PBR fragment shader with 1-8 lights, shadows, fog) compiled to\n"
        "SPIR-V with glslang, with variants by define and specialization constant and\n"
        "fixed-function states (blend, cull, formats, topology). N is at most %llu. The same\n"
        "arguments always give a byte-identical file.\n"
        "\n"
        "  --app NAME              application name (required)\n"
        "  --app-version V         application version, a.b.c.d or a number (required)\n"
        "  --pipelines N           number of entries, >= 1 (required)\n"
        "  --seed S                corpus seed (default 1)\n"
        "  --engine NAME[:V]       engine name and version (default none)\n"
        "  --changed F             write patch K of the corpus instead (version N+1 of the\n"
        "                          game, give it a higher --app-version): each pipeline is\n"
        "                          touched with probability F (0-1 or N%%), half of those with\n"
        "                          an edited shader (a constant of its compute or fragment\n"
        "                          GLSL changed), half removed and replaced by new pipelines\n"
        "                          of the same kind after the others; the rest are the\n"
        "                          corpus's bytes in its order\n"
        "  --patch K               which patch, >= 1 (default 1): patches differ in what they\n"
        "                          touch; each is deterministic\n"
        "  -o, --output OUT.sodb   output file (replaced)\n",
        (unsigned long long)psdb__synth_vulkan_max());
}

static int synth_vulkan(int argc, char **argv)
{
    const char *app = NULL, *out = NULL, *engine = NULL;
    uint64_t version = 0, n = 0, seed = 1, engine_version = 0, patch = 0;
    uint32_t changed = 0;
    int have_version = 0, have_changed = 0, rc = 1;
    psdb__synth_vulkan_stats st;
    char err[512];
    char engine_name[128];
    if (tool_wants_help(argc, argv)) {
        vusage(stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--api") == 0 && val) {
            i++;
        } else if (strcmp(a, "--app") == 0 && val) {
            app = val;
            i++;
        } else if (strcmp(a, "--app-version") == 0 && val) {
            if (psdb__parse_version(val, &version) != 0) {
                rc = tool_fail("synth", "--app-version: not a version: %s", val);
                goto cleanup;
            }
            have_version = 1;
            i++;
        } else if (strcmp(a, "--pipelines") == 0 && val) {
            if (psdb__parse_u64(val, &n) != 0 || n == 0) {
                rc = tool_fail("synth", "--pipelines: not a count >= 1: %s", val);
                goto cleanup;
            }
            i++;
        } else if (strcmp(a, "--seed") == 0 && val) {
            if (psdb__parse_u64(val, &seed) != 0) {
                rc = tool_fail("synth", "--seed: not a number: %s", val);
                goto cleanup;
            }
            i++;
        } else if (strcmp(a, "--engine") == 0 && val) {
            const char *colon = strchr(val, ':');
            size_t len = colon ? (size_t)(colon - val) : strlen(val);
            if (len == 0 || len >= sizeof(engine_name) ||
                (colon && psdb__parse_version(colon + 1, &engine_version) != 0)) {
                rc = tool_fail("synth", "--engine: not NAME[:VERSION]: %s", val);
                goto cleanup;
            }
            memcpy(engine_name, val, len);
            engine_name[len] = '\0';
            engine = engine_name;
            i++;
        } else if (strcmp(a, "--changed") == 0 && val) {
            if (tool_parse_permille(val, &changed) != 0) {
                rc = tool_fail("synth", "--changed: not a fraction 0-1 or 0%%-100%%: %s", val);
                goto cleanup;
            }
            have_changed = 1;
            i++;
        } else if (strcmp(a, "--patch") == 0 && val) {
            if (psdb__parse_u64(val, &patch) != 0 || patch == 0) {
                rc = tool_fail("synth", "--patch: not a number >= 1: %s", val);
                goto cleanup;
            }
            i++;
        } else if ((strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) && val) {
            out = val;
            i++;
        } else {
            vusage(stderr);
            rc = tool_fail("synth", "unknown or incomplete option: %s", a);
            goto cleanup;
        }
    }
    if (!app || !*app || !have_version || n == 0 || !out) {
        vusage(stderr);
        rc = tool_fail("synth", "--app, --app-version, --pipelines and -o are required");
        goto cleanup;
    }
    if (tool_bad_name("synth", "--app", app) || tool_bad_name("synth", "--engine", engine))
        goto cleanup;
    if (patch && !have_changed) {
        rc = tool_fail("synth", "--patch needs --changed (the fraction of pipelines it touches)");
        goto cleanup;
    }
    if (have_changed && !patch)
        patch = 1;
    if (psdb__synth_vulkan_max() && n > psdb__synth_vulkan_max()) { /* 0: no glslang */
        rc = tool_fail("synth", "--pipelines: at most %llu distinct Vulkan pipelines, not %llu",
                       (unsigned long long)psdb__synth_vulkan_max(), (unsigned long long)n);
        goto cleanup;
    }
    psdb__synth_vulkan_params p = {.app_name = app,
                                   .app_version = version,
                                   .engine_name = engine,
                                   .engine_version = engine ? engine_version : 0,
                                   .pipelines = n,
                                   .seed = seed,
                                   .patch = patch,
                                   .changed_permille = changed};
    psdb_hr hr = psdb__synth_vulkan(out, &p, &st, err, sizeof(err));
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("synth", "%s", err);
        goto cleanup;
    }
    printf("%llu Vulkan pipelines (%llu compute, %llu graphics) from %zu SPIR-V modules -> %s",
           (unsigned long long)n, (unsigned long long)st.compute, (unsigned long long)st.graphics,
           st.modules, out);
    if (patch)
        printf(" (patch %llu: %llu edited, %llu removed and replaced)", (unsigned long long)patch,
               (unsigned long long)st.edited, (unsigned long long)st.replaced);
    printf("\n");
    rc = 0;
cleanup:
    return rc;
}

int cmd_synth_api(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--api") != 0)
            continue;
        if (strcmp(argv[i + 1], "vulkan") == 0)
            return synth_vulkan(argc, argv);
        if (strcmp(argv[i + 1], "d3d12") != 0)
            return tool_fail("synth", "--api: not d3d12 or vulkan: %s", argv[i + 1]);
    }
    /* The D3D12 corpus: cmd_synth without the --api d3d12 pair it does not know. */
    char **rest = calloc((size_t)argc + 1, sizeof(*rest));
    if (!rest)
        return tool_fail("synth", "out of memory");
    int m = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--api") == 0 && i + 1 < argc) {
            i++;
            continue;
        }
        rest[m++] = argv[i];
    }
    int rc = cmd_synth(m, rest);
    free(rest);
    return rc;
}
