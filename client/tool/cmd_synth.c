/* cmd_synth.c - `psdb synth`: writes a deterministic synthetic SODB that looks like a game's. */
#include "tool.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build/synth.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: psdb synth --app NAME --app-version V --pipelines N [--seed S] [--variants K]\n"
        "                  [--exe FILE] [--engine NAME[:VERSION]] [--app-id UUID]\n"
        "                  [--compute-fraction F] [--state-objects M]\n"
        "                  [--changed F [--patch K]] -o OUT.sodb\n"
        "\n"
        "Writes a synthetic state-object database (SODB) of N pipeline descriptions: compute\n"
        "and graphics pipelines with shaders of realistic sizes shared across pipelines with a\n"
        "skewed distribution, a few root signatures, and graphics base pipelines each in K\n"
        "state variants that differ only in blend, depth-stencil, rasterizer and sample mask.\n"
        "The same arguments always give a byte-identical file.\n"
        "\n"
        "  --app NAME              application name (required)\n"
        "  --app-version V         application version, a.b.c.d or a number (required)\n"
        "  --pipelines N           number of entries, >= 1 (required)\n"
        "  --seed S                corpus seed (default 1)\n"
        "  --variants K            pipelines per graphics base (the base and K-1 variants),\n"
        "                          1-%u (default 4)\n"
        "  --exe FILE              executable file name (default NAME.exe)\n"
        "  --engine NAME[:V]       engine name and version (default psdb-synth:1.0.0.0)\n"
        "  --app-id UUID           AppId (default: derived from the name)\n"
        "  --compute-fraction F    share of compute pipelines, 0-1 (default 0.2)\n"
        "  --state-objects M       raytracing state objects after the pipelines (default 0)\n"
        "  --changed F             write patch K of the corpus instead (version N+1 of the\n"
        "                          game, give it a higher --app-version): a fraction F (0-1 or\n"
        "                          N%%) of the pipelines is touched, half with an edited shader,\n"
        "                          half removed and replaced by new pipelines; the rest and the\n"
        "                          state objects are the corpus's bytes\n"
        "  --patch K               which patch, >= 1 (default 1): patches differ in what they\n"
        "                          touch; each is deterministic\n"
        "  -o, --output OUT.sodb   output file (replaced)\n",
        PSDB_SYNTH_MAX_VARIANTS);
}

static void progress(uint64_t done, uint64_t total, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "\rpsdb synth: %llu/%llu pipelines", (unsigned long long)done,
            (unsigned long long)total);
    if (done == total)
        fputc('\n', stderr);
}

int tool_parse_permille(const char *s, uint32_t *permille)
{
    uint64_t whole = 0, frac = 0, scale = 1000;
    const char *p = s;
    if (!*p)
        return -1;
    while (*p >= '0' && *p <= '9') {
        whole = whole * 10 + (uint64_t)(*p - '0');
        if (whole > 100)
            return -1;
        p++;
    }
    if (*p == '%') {
        if (p[1] || whole > 100)
            return -1;
        *permille = (uint32_t)(whole * 10);
        return 0;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            scale /= 10;
            frac += (uint64_t)(*p - '0') * scale;
            if (scale == 0)
                return -1;
            p++;
        }
    }
    if (*p || whole > 1 || (whole == 1 && frac > 0))
        return -1;
    *permille = (uint32_t)(whole * 1000 + frac);
    return 0;
}

int cmd_synth(int argc, char **argv)
{
    psdb__synth_params p = {.seed = 1, .variants = 4, .compute_permille = 200};
    const char *out = NULL;
    char *engine = NULL;
    uint8_t app_id[16];
    uint64_t v = 0;
    int have_version = 0, have_n = 0, have_changed = 0, rc = 1;

    if (tool_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    /* Every option takes a value: each step consumes a pair. */
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val && a[0] == '-') {
            rc = tool_fail("synth", "%s needs a value (try --help)", a);
            goto cleanup;
        }
        if (strcmp(a, "--app") == 0) {
            p.app_name = val;
        } else if (strcmp(a, "--app-version") == 0) {
            if (psdb__parse_version(val, &p.app_version) != 0 || p.app_version == 0) {
                rc = tool_fail("synth", "invalid --app-version '%s'", val);
                goto cleanup;
            }
            have_version = 1;
        } else if (strcmp(a, "--pipelines") == 0) {
            if (psdb__parse_u64(val, &p.pipelines) != 0 || p.pipelines == 0) {
                rc = tool_fail("synth", "invalid --pipelines '%s' (want a number >= 1)", val);
                goto cleanup;
            }
            have_n = 1;
        } else if (strcmp(a, "--seed") == 0) {
            if (psdb__parse_u64(val, &p.seed) != 0) {
                rc = tool_fail("synth", "invalid --seed '%s'", val);
                goto cleanup;
            }
        } else if (strcmp(a, "--variants") == 0) {
            if (psdb__parse_u64(val, &v) != 0 || v == 0 || v > PSDB_SYNTH_MAX_VARIANTS) {
                rc = tool_fail("synth", "invalid --variants '%s' (want 1-%u)", val,
                               PSDB_SYNTH_MAX_VARIANTS);
                goto cleanup;
            }
            p.variants = (uint32_t)v;
        } else if (strcmp(a, "--exe") == 0) {
            p.exe_filename = val;
        } else if (strcmp(a, "--engine") == 0) {
            free(engine);
            engine = strdup(val);
            if (!engine) {
                rc = tool_fail("synth", "out of memory");
                goto cleanup;
            }
            char *colon = strrchr(engine, ':');
            p.engine_version = 0;
            if (colon) {
                *colon = '\0';
                if (psdb__parse_version(colon + 1, &p.engine_version) != 0) {
                    rc = tool_fail("synth", "invalid engine version in --engine '%s'", val);
                    goto cleanup;
                }
            }
            p.engine_name = engine;
        } else if (strcmp(a, "--app-id") == 0) {
            if (psdb__parse_uuid(val, app_id) != 0) {
                rc = tool_fail("synth", "invalid --app-id '%s' (want a UUID)", val);
                goto cleanup;
            }
            p.app_id = app_id;
        } else if (strcmp(a, "--state-objects") == 0) {
            if (psdb__parse_u64(val, &p.state_objects) != 0 || p.state_objects > 1000000) {
                rc = tool_fail("synth", "invalid --state-objects '%s' (want 0-1000000)", val);
                goto cleanup;
            }
        } else if (strcmp(a, "--compute-fraction") == 0) {
            if (tool_parse_permille(val, &p.compute_permille) != 0) {
                rc = tool_fail("synth", "invalid --compute-fraction '%s' (want 0-1)", val);
                goto cleanup;
            }
        } else if (strcmp(a, "--changed") == 0) {
            if (tool_parse_permille(val, &p.changed_permille) != 0) {
                rc = tool_fail("synth", "invalid --changed '%s' (want 0-1 or 0%%-100%%)", val);
                goto cleanup;
            }
            have_changed = 1;
        } else if (strcmp(a, "--patch") == 0) {
            if (psdb__parse_u64(val, &p.patch) != 0 || p.patch == 0) {
                rc = tool_fail("synth", "invalid --patch '%s' (want a number >= 1)", val);
                goto cleanup;
            }
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            out = val;
        } else {
            rc = tool_fail("synth", "unknown argument '%s' (try --help)", a);
            goto cleanup;
        }
    }
    if (!p.app_name || !*p.app_name || !have_version || !have_n || !out) {
        rc = tool_fail("synth", "--app, --app-version, --pipelines and -o are required");
        goto cleanup;
    }
    if (tool_bad_name("synth", "--app", p.app_name) ||
        tool_bad_name("synth", "--exe", p.exe_filename) ||
        tool_bad_name("synth", "--engine", p.engine_name))
        goto cleanup;
    if (p.patch && !have_changed) {
        rc = tool_fail("synth", "--patch needs --changed (the fraction of pipelines it touches)");
        goto cleanup;
    }
    if (have_changed && !p.patch)
        p.patch = 1;
    if (p.pipelines >= 5000 && isatty(STDERR_FILENO))
        p.progress = progress;
    psdb_hr hr = psdb__synth_write(&p, out);
    if (PSDB_FAILED(hr)) {
        rc = tool_fail("synth", "writing %s failed: %s", out, psdb_hr_str(hr));
        goto cleanup;
    }
    rc = 0;
cleanup:
    free(engine);
    return rc;
}
