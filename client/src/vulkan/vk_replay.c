/* vk_replay.c - `psdb replay --backend vulkan`: the time-to-usable of an SODB's Vulkan pipelines
 * on the device, cold and with a PSDB delivered as the layer delivers it (named, or found in the
 * registry as the layer finds it), each pass in a child process, and what became of each entry
 * (schema/REPLAY.md). */
#include "vulkan/vk_backend.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fdio.h"
#include "common/hash.h"
#include "common/status_map.h"

typedef struct vpass {
    vkbe_dev *d;
    psdb_file *f;
    vkdl_keys keys;
    uint64_t n, cap, failed, hits, misses;
    int binaries_refused; /* as the layer: once the driver refused binaries, none is made again */
    double *ms;
    double lookup_s, create_s, use_s, objects_s;
    vkbe_entry_outcome *entries; /* every entry's outcome, in SODB order */
    size_t num_entries, cap_entries;
} vpass;

/* What a pass reports besides its figures. */
typedef struct pass_report {
    int psdb_refused; /* the pass failed on the PSDB: it cannot be used for the device */
    char device_name[256], family[64];
    uint64_t abi;
    vkbe_entry_outcome *entries;
    size_t num_entries;
} pass_report;

/* Records one entry's outcome: 0, or -1 out of memory. */
static int record(vpass *v, uint32_t kind, const uint8_t key[32], uint64_t version,
                  vkbe_outcome outcome, VkResult r, const char *step, double seconds)
{
    int rc = -1;
    if (v->num_entries == v->cap_entries) {
        size_t cap = v->cap_entries ? v->cap_entries * 2 : 256;
        vkbe_entry_outcome *e = realloc(v->entries, cap * sizeof(*e));
        if (!e)
            goto cleanup;
        v->entries = e;
        v->cap_entries = cap;
    }
    vkbe_entry_outcome *e = &v->entries[v->num_entries++];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    memcpy(e->key, key, 32);
    e->version = version;
    e->outcome = (uint32_t)outcome;
    e->vk_result = (int32_t)r;
    snprintf(e->step, sizeof(e->step), "%s", step ? step : "");
    e->seconds = seconds;
    rc = 0;
cleanup:
    return rc;
}

static int replay_entry(uint32_t kind, const uint8_t key[32], uint64_t version, const void *desc,
                        size_t desc_size, void *arg)
{
    vpass *v = arg;
    vkdec_pipeline p;
    void *data = NULL;
    size_t size = 0;
    int bad = 0;
    double secs = 0, create_s = 0;
    int hit = 0;
    if (kind != PSDB_SODB_VK_COMPUTE && kind != PSDB_SODB_VK_GRAPHICS)
        return record(v, kind, key, version, VKBE_SKIPPED, VK_SUCCESS, NULL, 0) != 0;
    if (vkdec_pipeline_decode(desc, desc_size, kind == PSDB_SODB_VK_GRAPHICS, &p) != 0) {
        v->failed++;
        return record(v, kind, key, version, VKBE_FAILED, VK_SUCCESS, "decode", 0) != 0;
    }
    double t0 = vkbe_now();
    int binaries = v->d->id.strategy == VKID_PIPELINE_BINARY;
    if (v->f) {
        /* As the layer: with a merged cache the hit needs only the key. */
        hit = vkdl_lookup(v->f, &v->keys, &v->d->id, key, v->d->merged ? NULL : &data, &size, &bad);
    }
    double lookup = vkbe_now() - t0;
    /* A hit of a PSDB of binaries: its binaries made for this creation (the driver's time, counted
     * with the creation), and the creation made from them. */
    vkbin_set bins;
    memset(&bins, 0, sizeof(bins));
    double tb = vkbe_now();
    if (hit == 1 && binaries &&
        (!v->d->binaries || v->binaries_refused ||
         vkbin_create(&v->d->bin, v->d->device, data, size, &bins) != VK_SUCCESS))
        hit = 0, bad = 1; /* binaries the driver refused: a miss of refused data */
    double bin_s = vkbe_now() - tb;
    if (v->f) {
        if (hit == 1)
            v->hits++;
        else
            v->misses++;
    }
    vkbe_how how = {.initial = binaries ? NULL : data,
                    .initial_size = binaries ? 0 : size,
                    .use_merged = hit == 1 && v->d->merged,
                    .binaries = bins.count ? &bins.info : NULL};
    vkbe_got got;
    VkResult r = vkbe_create(v->d, &p, &how, &got);
    vkbin_destroy(&v->d->bin, v->d->device, &bins);
    secs = got.seconds + bin_s;
    create_s = got.create_s + bin_s;
    if (r != VK_SUCCESS && how.binaries) {
        /* As the layer: a creation the driver refused to make from the delivered binaries (the
         * NVIDIA driver answers VK_PIPELINE_COMPILE_REQUIRED once a device has made a few
         * thousand binaries) is made again as the application asked, a miss of refused data;
         * its time counts both attempts. */
        how.binaries = NULL;
        v->binaries_refused = 1;
        hit = 0, bad = 1;
        v->hits--;
        v->misses++;
        r = vkbe_create(v->d, &p, &how, &got);
        secs += got.seconds;
        create_s += got.create_s;
    }
    /* A pipeline's time-to-usable runs from the application asking for it (the lookup, then
     * vkCreate*Pipelines) to its first use done. Its shader modules, layouts and render pass
     * are the application's own objects, made before it asks, with or without a PSDB: they are
     * counted apart (objects_s). */
    double total = lookup + secs;
    double objects = vkbe_now() - t0 - total;
    free(data);
    vkdec_free(&p);
    if (r != VK_SUCCESS) {
        v->failed++;
        return record(v, kind, key, version, VKBE_FAILED, r, got.what, total) != 0;
    }
    vkbe_outcome outcome = !v->f      ? VKBE_NO_PSDB
                           : hit == 1 ? VKBE_HIT
                           : hit < 0  ? VKBE_LOOKUP_ERROR
                           : bad      ? VKBE_REFUSED
                                      : VKBE_NOT_IN_PSDB;
    if (record(v, kind, key, version, outcome, r, NULL, total) != 0)
        return 1;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        double *m = realloc(v->ms, cap * sizeof(*m));
        if (!m)
            return 1;
        v->ms = m;
        v->cap = cap;
    }
    v->ms[v->n++] = total * 1000.0;
    v->lookup_s += lookup;
    v->create_s += create_s;
    v->use_s += secs - create_s;
    v->objects_s += objects > 0 ? objects : 0;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The SHA-256 of the file at path into out: 0, or -1 (errno set) when it cannot be read. */
static int file_sha256(const char *path, uint8_t out[32])
{
    uint8_t buf[1 << 16];
    ssize_t r = -1;
    psdb__sha256_ctx *c = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || !(c = psdb__sha256_begin()))
        goto cleanup;
    while ((r = psdb__read_upto(fd, buf, sizeof(buf))) > 0)
        psdb__sha256_update(c, buf, (size_t)r);
cleanup:
    if (c)
        psdb__sha256_end(c, out);
    if (fd >= 0)
        close(fd);
    return r == 0 ? 0 : -1;
}

/* Seconds psdb_file_check takes to prove f by the SHA-256 of the whole file on its own (what the
 * layer overlaps with the device's creation), -1 when it fails. */
static double file_sha256_time(psdb_file *f, const uint8_t sha[32])
{
    double t = vkbe_now();
    return psdb_file_check(f, PSDB_FILE_CHECK_SHA256, sha) == PSDB_S_OK ? vkbe_now() - t : -1;
}

/* One pass in this process; 0 or -1 with err set (rep->psdb_refused when the PSDB could not be
 * used). reg_trust: the registry's digest of psdb_path, or NULL for a file named directly (its
 * own SHA-256 then stands in for it). On success rep->entries is the caller's. */
static int run_pass(const char *sodb_path, const char *psdb_path, const vkdl_trust *reg_trust,
                    uint32_t device_index, vkbe_replay_stats *out, pass_report *rep, char *err,
                    size_t err_size)
{
    psdb_sodb *s = NULL;
    vkbe_dev d;
    vpass v;
    vkdl_proof *proof = NULL;
    vkdl_trust trust = {0};
    char tmpl[] = "/tmp/psdb-vk-replay-XXXXXX";
    char *dir = NULL, msg[512] = "";
    int rc = -1;
    memset(&d, 0, sizeof(d));
    memset(&v, 0, sizeof(v));
    memset(out, 0, sizeof(*out));
    psdb_hr hr = psdb_sodb_open(sodb_path, &s);
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "cannot open SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    /* Cold: no driver disk cache at all. With the PSDB: Mesa reads the shipped cache from an
     * otherwise empty cache folder; the NVIDIA driver's own cache stays off. */
    setenv("__GL_SHADER_DISK_CACHE", "0", 1);
    unsetenv("MESA_DISK_CACHE_READ_ONLY_FOZ_DBS");
    if (!psdb_path) {
        setenv("MESA_SHADER_CACHE_DISABLE", "true", 1);
    } else {
        dir = mkdtemp(tmpl);
        if (!dir) {
            snprintf(err, err_size, "mkdtemp %s: %s", tmpl, strerror(errno));
            goto cleanup;
        }
        vkbe_private_cache(dir);
        hr = vkdl_open(psdb_path, NULL, reg_trust, &v.f);
        if (PSDB_SUCCEEDED(hr))
            hr = vkdl_mesa_setup(v.f, msg, sizeof(msg));
        if (PSDB_FAILED(hr)) {
            vkbe_fmt(err, err_size, "psdb %s: %s", psdb_path, msg[0] ? msg : psdb_error_last());
            rep->psdb_refused = 1;
            goto cleanup;
        }
        psdb_file_release(v.f);
        v.f = NULL;
    }
    /* As the layer does for an installed PSDB: proven by the SHA-256 its install recorded (taken
     * here, outside the clock, as the registry would hold it), the proof started before the
     * device is created and running beside it; the pass waits only for what is left of it once
     * the device exists. */
    if (reg_trust) {
        trust = *reg_trust;
    } else if (psdb_path && file_sha256(psdb_path, trust.sha256) != 0) {
        snprintf(err, err_size, "psdb %s: cannot read it: %s", psdb_path, strerror(errno));
        rep->psdb_refused = 1;
        goto cleanup;
    }
    trust.have_sha256 = 1;
    if (psdb_path && PSDB_FAILED(hr = vkdl_proof_start(psdb_path, &trust, &proof))) {
        snprintf(err, err_size, "psdb %s: %s", psdb_path, psdb_hr_str(hr));
        rep->psdb_refused = 1;
        goto cleanup;
    }
    double t_dev = vkbe_now();
    if (vkbe_dev_open(&d, device_index, err, err_size) != 0)
        goto cleanup;
    out->device_s = vkbe_now() - t_dev;
    snprintf(rep->device_name, sizeof(rep->device_name), "%s", d.id.device_name);
    snprintf(rep->family, sizeof(rep->family), "%s", d.id.family);
    rep->abi = d.id.abi;
    if (psdb_path) {
        char why[512];
        double t = vkbe_now();
        hr = vkdl_proof_finish(proof, &d.id, &v.f, why, sizeof(why));
        proof = NULL;
        out->proof_s = vkbe_now() - t;
        if (PSDB_FAILED(hr)) {
            vkbe_fmt(err, err_size, "psdb %s does not fit device %s (%s, abi %llu): %s", psdb_path,
                     d.id.device_name, d.id.family, (unsigned long long)d.id.abi, why);
            rep->psdb_refused = 1;
            goto cleanup;
        }
        out->file_sha256_s = file_sha256_time(v.f, trust.sha256);
        /* The PSDB's strategy decides how its hits are served (binaries: only for the driver
         * build whose global pipeline key they carry). */
        uint8_t gkey[32], mine[32];
        uint32_t gkey_n = 0, mine_n = 0;
        d.id.strategy = vkdl_strategy(v.f, gkey, &gkey_n);
        if (d.id.strategy == VKID_PIPELINE_BINARY &&
            (!d.binaries || vkbin_global_key(&d.bin, d.device, mine, &mine_n) != VK_SUCCESS ||
             mine_n != gkey_n || memcmp(mine, gkey, gkey_n) != 0)) {
            snprintf(err, err_size,
                     "psdb %s: its pipeline binaries are not for this device's driver build",
                     psdb_path);
            goto cleanup;
        }
        hr = vkdl_keys_load(v.f, &v.keys);
        if (PSDB_FAILED(hr)) {
            snprintf(err, err_size, "psdb %s: its pipeline keys: %s", psdb_path, psdb_error_last());
            rep->psdb_refused = 1;
            goto cleanup;
        }
    }
    v.d = &d;
    double t0 = vkbe_now();
    /* The merged cache is made once per device (the layer: at device creation), inside the
     * time-to-usable. A PSDB without one, or one that fails its check, is replayed with each
     * pipeline's own data, as the layer falls back. */
    if (v.f && d.id.strategy == VKID_PIPELINE_CACHE) {
        vkdl_cache_fns fns = {vkCreatePipelineCache, vkMergePipelineCaches, vkDestroyPipelineCache};
        uint32_t parts = 0;
        if (vkdl_device_cache(v.f, &d.id, &fns, d.device, &d.merged, &parts, msg, sizeof(msg)) !=
            PSDB_S_OK)
            d.merged = VK_NULL_HANDLE;
        out->merged_cache = d.merged != VK_NULL_HANDLE;
        out->cache_parts = parts;
    }
    out->setup_s = vkbe_now() - t0;
    hr = psdb_sodb_foreach(s, replay_entry, &v);
    out->wall_s = vkbe_now() - t0;
    out->lookup_s = v.lookup_s;
    out->create_s = v.create_s;
    out->first_use_s = v.use_s;
    out->objects_s = v.objects_s;
    out->total_s = out->proof_s + out->setup_s + v.lookup_s + v.create_s + v.use_s;
    if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "replaying SODB %s: %s", sodb_path, psdb_hr_str(hr));
        goto cleanup;
    }
    out->pipelines = v.n;
    out->failed = v.failed;
    out->hits = v.hits;
    out->misses = v.misses;
    if (v.n) {
        qsort(v.ms, v.n, sizeof(double), cmp_double);
        out->median_ms = v.ms[v.n / 2];
        out->p95_ms = v.ms[(v.n * 95) / 100 < v.n ? (v.n * 95) / 100 : v.n - 1];
    }
    rep->entries = v.entries;
    rep->num_entries = v.num_entries;
    v.entries = NULL;
    rc = 0;
cleanup:
    if (proof) {
        psdb_file *f = NULL;
        vkdl_proof_finish(proof, NULL, &f, NULL, 0);
        psdb_file_release(f);
    }
    psdb_file_release(v.f);
    vkdl_keys_free(&v.keys);
    vkbe_dev_close(&d);
    psdb_sodb_release(s);
    free(v.ms);
    free(v.entries);
    if (dir)
        vkbe_remove_tree(dir);
    return rc;
}

/* A pass in a child process: the driver opens its caches afresh and the environment the pass
 * sets stays in the child. Its figures and report come back through a pipe: a header, then the
 * entries. */
static psdb_hr pass_in_child(const char *sodb_path, const char *psdb_path,
                             const vkdl_trust *reg_trust, uint32_t device_index,
                             vkbe_replay_stats *out, pass_report *rep, char *err, size_t err_size)
{
    struct {
        int rc;
        vkbe_replay_stats st;
        pass_report rep; /* entries: not sent as a pointer, they follow */
        char err[512];
    } msg;
    int fds[2];
    psdb_hr hr = PSDB_E_FAIL;
    vkbe_entry_outcome *entries = NULL;
    memset(rep, 0, sizeof(*rep));
    fflush(NULL);
    if (pipe(fds) != 0) {
        snprintf(err, err_size, "pipe: %s", strerror(errno));
        return PSDB_E_FAIL;
    }
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(err, err_size, "fork: %s", strerror(errno));
        return PSDB_E_FAIL;
    }
    if (pid == 0) {
        close(fds[0]);
        memset(&msg, 0, sizeof(msg));
        msg.rc = run_pass(sodb_path, psdb_path, reg_trust, device_index, &msg.st, &msg.rep, msg.err,
                          sizeof(msg.err));
        entries = msg.rep.entries;
        msg.rep.entries = NULL;
        int w = psdb__write_all(fds[1], &msg, sizeof(msg)) == 0 &&
                psdb__write_all(fds[1], entries, msg.rep.num_entries * sizeof(*entries)) == 0;
        _exit(w ? 0 : 1);
    }
    close(fds[1]);
    ssize_t got = psdb__read_upto(fds[0], &msg, sizeof(msg));
    int whole = got == (ssize_t)sizeof(msg) &&
                msg.rep.num_entries <= SIZE_MAX / sizeof(*entries); /* else the child died */
    size_t bytes = whole ? msg.rep.num_entries * sizeof(*entries) : 0;
    if (bytes && !(entries = malloc(bytes))) {
        snprintf(err, err_size, "out of memory for %zu entries' outcomes", msg.rep.num_entries);
        hr = PSDB_E_OUTOFMEMORY;
    } else if (whole && bytes) {
        whole = psdb__read_upto(fds[0], entries, bytes) == (ssize_t)bytes;
    }
    close(fds[0]);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    while (wait4(pid, &status, 0, &ru) < 0 && psdb__errno_is(errno, PSDB__ERRNO_INTERRUPTED))
        ;
    if (hr == PSDB_E_OUTOFMEMORY) {
        /* said above */
    } else if (!whole) {
        snprintf(err, err_size, "replay pass died (status %d)", status);
    } else if (msg.rc != 0) {
        snprintf(err, err_size, "%s", msg.err);
        rep->psdb_refused = msg.rep.psdb_refused;
    } else {
        *out = msg.st;
        out->peak_rss_kib = (uint64_t)ru.ru_maxrss; /* Linux: KiB */
        *rep = msg.rep;
        rep->entries = entries;
        entries = NULL;
        hr = PSDB_S_OK;
    }
    free(entries);
    return hr;
}

/* The registry's PSDB for the device the cold pass met (out->family), as the layer finds it:
 * PSDB_S_OK (path and trust set), PSDB_S_FALSE (none registered, or refused: out->refused), or a
 * failure with err set. */
static psdb_hr find_registered(const vkbe_replay_desc *desc, vkbe_replay_result *out,
                               vkdl_trust *trust, char *err, size_t err_size)
{
    char why[512] = "", resolved[PATH_MAX];
    /* The layer looks itself up by /proc/self/exe: a path with its links resolved. An executable
     * that is not on this machine is looked up as given. */
    const char *exe = realpath(desc->exe_path, resolved) ? resolved : desc->exe_path;
    snprintf(out->exe_path, sizeof(out->exe_path), "%s", exe);
    psdb_hr hr = vkfind_registered(desc->registry_dir, exe, out->family, out->psdb_path,
                                   sizeof(out->psdb_path), trust, why, sizeof(why));
    out->registered = hr == PSDB_S_OK || hr == PSDB_E_INTEGRITY;
    if (hr == PSDB_E_INTEGRITY) {
        snprintf(out->refused, sizeof(out->refused), "%s", why);
        hr = PSDB_S_FALSE;
    } else if (PSDB_FAILED(hr)) {
        snprintf(err, err_size, "%s", why);
        hr = PSDB_E_FAIL;
    }
    return hr;
}

psdb_hr vkbe_replay(const vkbe_replay_desc *desc, vkbe_replay_result *out, char *err,
                    size_t err_size)
{
    psdb_hr hr = PSDB_S_OK;
    pass_report cold, warm;
    vkdl_trust trust;
    const char *psdb_path = NULL;
    memset(&cold, 0, sizeof(cold));
    memset(&warm, 0, sizeof(warm));
    memset(&trust, 0, sizeof(trust));
    if (out)
        memset(out, 0, sizeof(*out));
    if (!desc || !out || !desc->sodb_path || (desc->psdb_path && desc->exe_path)) {
        snprintf(err, err_size, "replay: invalid arguments");
        return PSDB_E_INVALIDARG;
    }
    hr = pass_in_child(desc->sodb_path, NULL, NULL, desc->device_index, &out->cold, &cold, err,
                       err_size);
    if (PSDB_FAILED(hr))
        goto cleanup;
    snprintf(out->device_name, sizeof(out->device_name), "%s", cold.device_name);
    snprintf(out->family, sizeof(out->family), "%s", cold.family);
    out->abi = cold.abi;
    if (desc->psdb_path) {
        snprintf(out->psdb_path, sizeof(out->psdb_path), "%s", desc->psdb_path);
        psdb_path = desc->psdb_path;
    } else if (desc->exe_path) {
        hr = find_registered(desc, out, &trust, err, err_size);
        if (PSDB_FAILED(hr))
            goto cleanup;
        psdb_path = hr == PSDB_S_OK ? out->psdb_path : NULL;
    }
    if (psdb_path) {
        hr = pass_in_child(desc->sodb_path, psdb_path, desc->exe_path ? &trust : NULL,
                           desc->device_index, &out->warm, &warm, err, err_size);
        /* The registry's PSDB that fails its proof is refused, as the layer refuses it: the
         * device runs without it. One named directly that cannot be used is the caller's error. */
        if (PSDB_FAILED(hr) && hr != PSDB_E_OUTOFMEMORY && warm.psdb_refused && desc->exe_path) {
            snprintf(out->refused, sizeof(out->refused), "%s", err);
            err[0] = '\0';
            hr = PSDB_S_OK;
        } else if (PSDB_FAILED(hr)) {
            goto cleanup;
        } else {
            out->warm_ran = 1;
        }
    }
    pass_report *counted = out->warm_ran ? &warm : &cold;
    for (size_t i = 0; out->refused[0] && i < counted->num_entries; i++)
        if (counted->entries[i].outcome == VKBE_NO_PSDB)
            counted->entries[i].outcome = VKBE_REFUSED;
    out->entries = counted->entries;
    out->num_entries = counted->num_entries;
    counted->entries = NULL;
    hr = PSDB_S_OK;
cleanup:
    free(cold.entries);
    free(warm.entries);
    if (PSDB_FAILED(hr))
        vkbe_replay_result_free(out);
    return hr;
}

void vkbe_replay_result_free(vkbe_replay_result *r)
{
    if (r) {
        free(r->entries);
        r->entries = NULL;
        r->num_entries = 0;
    }
}
