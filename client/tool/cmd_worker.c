/* cmd_worker.c - `psdb worker`: a compile farm worker (schema/HTTP.md, "Farm"). It announces its
 * target, then claims jobs, downloads and verifies each job's SODB, compiles it (reference compiler
 * or the Vulkan backend), publishes the PSDB with a version 2 statement and finishes the job.
 *
 * DESIGN
 * One job at a time, on the main thread; a second thread keeps the job's lease alive (an extend
 * every lease_s/3) on a client of its own that shares the main client's connections. A lease the
 * server says is lost (another worker has the job now) stops the job before its publish: the other
 * worker's result counts, and the serial the claim named is not used twice. A network failure the
 * transport gave up on is retried here with a backoff of 0.2 s doubling to 30 s, for as long as
 * it takes (psdbd restarting, a network cut): a worker is a service. Any other failure of a job
 * goes to psdbd as its one-line error (/fail), which queues the job again or holds it after its
 * attempts. SIGINT and SIGTERM set a flag that the transfers' cancel, the reference compiler's
 * progress and every sleep poll: the job in hand is failed with "worker stopped" (so that it is
 * handed out at once, not when its lease expires) and the worker exits 0. A Vulkan compile in
 * flight runs to its end first (the backend has no cancel). */
#include "tool.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/hash.h"
#include "common/status_map.h"
#include "vulkan/psdb_vulkan.h"

#define MAX_TRUST 16
#define BACKOFF_FIRST_MS 200u
#define BACKOFF_MAX_MS 30000u

static const char usage_text[] =
    "usage: psdb worker --server URL --token T --key KEYFILE --trust SODB_SIGNER.pub [--trust "
    "...]\n"
    "                   [--backend vulkan [--device N] |\n"
    "                    --backend reference --family F --abi N [--compiler-version V]\n"
    "                    [--profile-version V] [--cost-ns-per-kib C]]\n"
    "                   [--name NAME] [--once] [--max-jobs N] [--json] [--lease-s S]\n"
    "                   [--poll-s S] [--work-dir DIR] [--ca-file FILE]\n"
    "\n"
    "A compile farm worker (schema/HTTP.md, \"Farm\"). Announces its target to psdbd (which\n"
    "queues a job for every application whose newest SODB has no PSDB for it), then loops:\n"
    "claims the job of highest demand for its target, downloads the job's SODB and verifies its\n"
    "SHA-256 and SODB statement against the --trust keys, compiles it, publishes the PSDB signed\n"
    "with KEYFILE (a version 2 statement naming the SODB, the serial the claim gave) and marks\n"
    "the job done. A failure is sent to psdbd as the job's one-line error, which queues it again\n"
    "(or holds it after its attempts). The lease is extended every lease_s/3 seconds while the\n"
    "job runs; a lost lease abandons the job unpublished. A base PSDB named by a claim must be\n"
    "signed by a --trust key or by KEYFILE.pub (read when it exists).\n"
    "\n"
    "  --backend reference   (default) the reference compiler for --family/--abi (and\n"
    "                        --compiler-version, --profile-version: the PSDB's target; a job\n"
    "                        naming a profile version gets that one); --cost-ns-per-kib as psdb\n"
    "                        compile\n"
    "  --backend vulkan      the driver of Vulkan device --device N (default 0), as psdb compile\n"
    "                        --backend vulkan; the target is the one psdb install --target auto\n"
    "                        asks for on that device\n"
    "                        Either backend: a claim naming a base PSDB (an earlier version's)\n"
    "                        compiles incrementally from it (psdb compile --base), once\n"
    "                        verified; a base that cannot be fetched is compiled without\n"
    "  --name NAME           the worker's name (default <hostname>-<pid>)\n"
    "  --once                exit when there is nothing to do (else poll every --poll-s)\n"
    "  --max-jobs N          exit after N jobs (done or failed)\n"
    "  --json                one JSON line per job on stdout (job, app, app_version, family,\n"
    "                        abi, outcome done|failed|lost|stopped, psdb_id, serial, base,\n"
    "                        compile_s, total_s, error)\n"
    "  --lease-s S           the lease asked for (default 60)\n"
    "  --poll-s S            the wait between claims that found nothing (default 5; 0.01 to\n"
    "                        3600, decimals allowed)\n"
    "  --work-dir DIR        where each job's files go (default $TMPDIR or /tmp)\n"
    "\n"
    "Network failures are retried with a backoff of 0.2 s doubling to 30 s, without end.\n"
    "SIGINT or SIGTERM stops the worker: the job in hand is failed with \"worker stopped\" and\n"
    "the exit status is 0. Exit status 1: a usage error, or psdbd refusing the worker (the token,\n"
    "the key). --token may also come from $PSDB_TOKEN. A progress line goes to stderr on a\n"
    "terminal. PSDB_WORKER_TEST_DELAY_MS (a test knob) sleeps that long before each compile.\n";

/* The signal that asked to stop, 0 while none: only set in the handler. */
static volatile sig_atomic_t g_stop;

static void on_stop(int sig)
{
    g_stop = sig;
}

typedef struct worker {
    psdb_client_desc cd;
    const char *trust[MAX_TRUST + 1]; /* the --trust keys, then KEYFILE.pub where it exists */
    char own_pub[4200];
    psdb_client *client;
    const char *key_path, *name_arg, *work_dir;
    char name[160];
    int vulkan, once, json, tty;
    uint32_t device;
    uint64_t max_jobs, cost;
    uint32_t lease_s;
    uint64_t poll_ms;
    psdb_precompile_target target; /* family, abi_min = abi_max, compiler, profile */
    uint64_t delay_ms;
    uint64_t done, failed;
    /* Cancels a transfer when asked to stop; off for the last /fail of a stopped job. */
    int cancel_on_stop;
} worker;

/* ---- time and sleeping ------------------------------------------------------------------------
 */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleeps ms milliseconds in 50 ms slices; returns early (non-zero) when asked to stop. */
static int nap_ms(uint64_t ms)
{
    while (ms > 0 && !g_stop) {
        uint64_t step = ms < 50 ? ms : 50;
        struct timespec ts = {0, (long)(step * 1000000u)};
        nanosleep(&ts, NULL);
        ms -= step;
    }
    return g_stop != 0;
}

static int cancel_cb(const psdb_progress *p, void *ctx)
{
    (void)p;
    return ((const worker *)ctx)->cancel_on_stop && g_stop != 0;
}

/* Calls fn(ctx) again while it fails with PSDB_E_NETWORK, with the backoff of the DESIGN, until it
 * answers otherwise or the worker is asked to stop (then PSDB_E_CANCELLED). */
static psdb_hr with_backoff(const worker *w, const char *what, psdb_hr (*fn)(void *ctx), void *ctx)
{
    uint64_t wait = BACKOFF_FIRST_MS;
    psdb_hr hr;
    while ((hr = fn(ctx)) == PSDB_E_NETWORK) {
        if (w->tty)
            fprintf(stderr, "\rpsdb worker: %s: %s; again in %.1f s\033[K", what,
                    psdb_client_last_error(w->client), (double)wait / 1000.0);
        else
            fprintf(stderr, "psdb worker: %s: %s; again in %.1f s\n", what,
                    psdb_client_last_error(w->client), (double)wait / 1000.0);
        if (nap_ms(wait))
            return PSDB_E_CANCELLED;
        wait = wait * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : wait * 2;
    }
    return hr;
}

/* ---- the lease --------------------------------------------------------------------------------
 */

typedef struct lease_keeper {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, quit;
    int lost; /* the server gave the job to another worker */
    psdb_client *client;
    const psdb_farm_claim *claim;
    uint32_t lease_s;
} lease_keeper;

static void *lease_thread(void *arg)
{
    lease_keeper *k = arg;
    uint32_t every_ms = k->lease_s * 1000u / 3u;
    pthread_mutex_lock(&k->mu);
    while (!k->quit && !k->lost) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += every_ms / 1000u;
        until.tv_nsec += (long)(every_ms % 1000u) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!k->quit && pthread_cond_timedwait(&k->cv, &k->mu, &until) != ETIMEDOUT)
            ;
        if (k->quit)
            break;
        pthread_mutex_unlock(&k->mu);
        /* A network failure is tried again at the next period: the lease has two more. */
        psdb_hr hr = psdb_client_farm_extend(k->client, k->claim, k->lease_s);
        pthread_mutex_lock(&k->mu);
        if (hr == PSDB_E_ALREADY_EXISTS)
            k->lost = 1;
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static psdb_hr lease_start(lease_keeper *k, worker *w, const psdb_farm_claim *cl)
{
    psdb_client_desc cd = w->cd;
    memset(k, 0, sizeof(*k));
    cd.share_connections_with = w->client;
    cd.progress_cancel = NULL; /* the lease is kept until the job is given back */
    cd.max_retries = 2;
    k->claim = cl;
    k->lease_s = w->lease_s;
    psdb_hr hr = psdb_client_create(&cd, &k->client);
    if (PSDB_FAILED(hr))
        return hr;
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    if (pthread_create(&k->thread, NULL, lease_thread, k) != 0) {
        pthread_mutex_destroy(&k->mu);
        pthread_cond_destroy(&k->cv);
        psdb_client_release(k->client);
        k->client = NULL;
        return PSDB_E_OUTOFMEMORY;
    }
    k->started = 1;
    return PSDB_S_OK;
}

static int lease_lost(lease_keeper *k)
{
    int lost;
    pthread_mutex_lock(&k->mu);
    lost = k->lost;
    pthread_mutex_unlock(&k->mu);
    return lost;
}

static void lease_stop(lease_keeper *k)
{
    if (!k->started)
        return;
    pthread_mutex_lock(&k->mu);
    k->quit = 1;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    psdb_client_release(k->client);
    k->started = 0;
}

/* ---- one job ----------------------------------------------------------------------------------
 */

typedef struct job_run {
    worker *w;
    psdb_farm_claim *cl;
    lease_keeper lease;
    char dir[4096], sodb_path[4200], base_path[4200], out_path[4200];
    psdb_manifest *sodb;
    psdb_publish_result *pub;
    char psdb_id[64];
    char error[640];
    const char *outcome; /* done, failed, lost, stopped */
    int used_base;
    double t0, compile_s;
} job_run;

/* Records the job's one-line error (the first one counts). Returns hr. */
static psdb_hr job_error(job_run *j, psdb_hr hr, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static psdb_hr job_error(job_run *j, psdb_hr hr, const char *fmt, ...)
{
    va_list ap;
    if (!j->error[0]) {
        va_start(ap, fmt);
        vsnprintf(j->error, sizeof(j->error), fmt, ap);
        va_end(ap);
    }
    return hr;
}

static psdb_hr find_sodb(void *ctx)
{
    job_run *j = ctx;
    psdb_manifest **v = NULL;
    uint32_t n = 0;
    psdb_hr hr =
        psdb_client_list_sodbs(j->w->client, j->cl->job.app_name, j->cl->job.app_version, &v, &n);
    for (uint32_t i = 0; PSDB_SUCCEEDED(hr) && i < n && !j->sodb; i++)
        if (memcmp(v[i]->sha256, j->cl->job.sodb_sha256, 32) == 0) {
            j->sodb = v[i];
            v[i] = NULL;
        }
    psdb_manifest_list_free(v, n);
    return hr;
}

static psdb_hr get_sodb(void *ctx)
{
    job_run *j = ctx;
    return psdb_client_download(j->w->client, j->sodb, j->sodb_path);
}

static psdb_hr get_base(void *ctx)
{
    job_run *j = ctx;
    return psdb_client_download(j->w->client, j->cl->base, j->base_path);
}

static psdb_hr do_publish(void *ctx)
{
    job_run *j = ctx;
    psdb_publish_desc d = {.key_path = j->w->key_path,
                           .psdb_path = j->out_path,
                           .serial = j->cl->serial,
                           .sodb_sha256 = j->cl->job.sodb_sha256};
    psdb_publish_result_free(j->pub);
    j->pub = NULL;
    return psdb_client_publish(j->w->client, &d, &j->pub);
}

static psdb_hr do_done(void *ctx)
{
    job_run *j = ctx;
    return psdb_client_farm_done(j->w->client, j->cl, j->psdb_id);
}

static psdb_hr do_fail(void *ctx)
{
    job_run *j = ctx;
    return psdb_client_farm_fail(j->w->client, j->cl, j->error[0] ? j->error : "failed");
}

static int ref_progress(uint64_t done, uint64_t total, void *ctx)
{
    job_run *j = ctx;
    (void)done, (void)total;
    return g_stop != 0 || lease_lost(&j->lease);
}

/* The SODB's manifest must describe the job's application and version: a validly signed SODB of
 * another application is not this job's. */
static psdb_hr check_sodb_manifest(job_run *j)
{
    const psdb_manifest *m = j->sodb;
    char a[40], b[40];
    if (strcmp(m->app.desc.name, j->cl->job.app_name) != 0 ||
        m->app.desc.version != j->cl->job.app_version)
        return job_error(j, PSDB_E_INTEGRITY, "the SODB's manifest is for %s %s, the job for %s %s",
                         m->app.desc.name, psdb__format_version(m->app.desc.version, a, sizeof(a)),
                         j->cl->job.app_name,
                         psdb__format_version(j->cl->job.app_version, b, sizeof(b)));
    return PSDB_S_OK;
}

/* Compiles the SODB into out_path for the job; the target must be in the job's cell. */
static psdb_hr compile(job_run *j)
{
    worker *w = j->w;
    psdb_hr hr;
    double t = now_s();
    psdb_file *f = NULL;
    psdb_file_info info;
    if (w->delay_ms && nap_ms(w->delay_ms))
        return PSDB_E_CANCELLED;
    if (w->vulkan) {
        char err[512] = "";
        vkbe_compile_stats st = {0};
        hr = vkbe_compile(j->sodb_path, j->used_base ? j->base_path : NULL, w->device, j->out_path,
                          NULL, &st, err, sizeof(err));
        if (PSDB_FAILED(hr))
            return job_error(j, hr, "compile: %s", err[0] ? err : psdb_hr_str(hr));
    } else {
        uint64_t profile =
            j->cl->job.profile_version ? j->cl->job.profile_version : w->target.profile_version;
        psdb_sodb_compile_desc cd = {
            .target = {j->cl->job.family, w->target.abi_min, w->target.compiler_version, profile},
            .compile_ns_per_kib = w->cost,
            .progress = ref_progress,
            .progress_ctx = j,
            .base_path = j->used_base ? j->base_path : NULL};
        hr = psdb_sodb_compile(j->sodb_path, &cd, j->out_path, NULL);
        if (hr == PSDB_E_CANCELLED)
            return hr;
        if (PSDB_FAILED(hr))
            return job_error(j, hr, "compile: %s", psdb_error_last());
    }
    j->compile_s = now_s() - t;
    /* What was compiled must be the job's cell (a Vulkan driver updated since the announce has
     * another ABI): else the publish would not finish the job. */
    hr = psdb_file_open(j->out_path, NULL, &f);
    if (PSDB_SUCCEEDED(hr))
        hr = psdb_file_get_info(f, &info);
    if (PSDB_FAILED(hr))
        job_error(j, hr, "compile: reading back %s: %s", j->out_path, psdb_hr_str(hr));
    else if (strcmp(info.target.family, j->cl->job.family) != 0 ||
             info.target.abi_version < j->cl->job.abi_min ||
             info.target.abi_version > j->cl->job.abi_max)
        hr = job_error(j, PSDB_E_DRIVER_VERSION_MISMATCH,
                       "compile: the device compiled for %s abi %llu, the job is %s abi %llu-%llu",
                       info.target.family, (unsigned long long)info.target.abi_version,
                       j->cl->job.family, (unsigned long long)j->cl->job.abi_min,
                       (unsigned long long)j->cl->job.abi_max);
    psdb_file_release(f);
    return hr;
}

/* The id of the manifest a publish answered. */
static psdb_hr published_id(job_run *j)
{
    psdb_manifest *m = NULL;
    psdb_hr hr = PSDB_E_PROTOCOL;
    if (j->pub && j->pub->body)
        hr = psdb_manifest_parse(j->pub->body, j->pub->body_size, &m);
    if (PSDB_SUCCEEDED(hr))
        snprintf(j->psdb_id, sizeof(j->psdb_id), "%s", m->id);
    else
        job_error(j, PSDB_E_PROTOCOL, "publish: the server's answer is not a manifest");
    psdb_manifest_free(m);
    return hr;
}

static void job_files_remove(job_run *j)
{
    const char *files[] = {j->sodb_path, j->base_path, j->out_path};
    char part[4300];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (!files[i][0])
            continue;
        unlink(files[i]);
        snprintf(part, sizeof(part), "%s.part", files[i]);
        unlink(part);
    }
    if (j->dir[0])
        rmdir(j->dir);
}

static void job_report(job_run *j)
{
    worker *w = j->w;
    const psdb_farm_job *job = &j->cl->job;
    char ver[40];
    double total = now_s() - j->t0;
    psdb__format_version(job->app_version, ver, sizeof(ver));
    if (w->tty)
        fputs("\r\033[K", stderr);
    if (w->json) {
        json_t *o =
            json_pack("{s:I, s:s, s:s, s:s, s:I, s:s, s:s?, s:I, s:b, s:f, s:f, s:s?}", "job",
                      (json_int_t)job->id, "app", job->app_name, "app_version", ver, "family",
                      job->family, "abi", (json_int_t)w->target.abi_min, "outcome", j->outcome,
                      "psdb_id", j->psdb_id[0] ? j->psdb_id : NULL, "serial",
                      (json_int_t)j->cl->serial, "base", j->used_base, "compile_s", j->compile_s,
                      "total_s", total, "error", j->error[0] ? j->error : NULL);
        if (o && tool_json_dumpf(o, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER) == 0)
            fputc('\n', stdout);
        json_decref(o);
    } else {
        tool_printf_safe(stdout, "job %llu %s %s %s:%llu %s%s%s (%.2f s compile, %.2f s total)%s%s",
                         (unsigned long long)job->id, job->app_name, ver, job->family,
                         (unsigned long long)w->target.abi_min, j->outcome,
                         j->psdb_id[0] ? ", psdb " : "", j->psdb_id, j->compile_s, total,
                         j->error[0] ? ": " : "", j->error);
        fputc('\n', stdout);
    }
    fflush(stdout);
}

static void progress_line(const worker *w, const job_run *j, const char *step)
{
    char ver[40];
    if (!w->tty)
        return;
    fprintf(stderr, "\r\033[Kpsdb worker %s: %llu done, %llu failed; job %llu ", w->name,
            (unsigned long long)w->done, (unsigned long long)w->failed,
            (unsigned long long)j->cl->job.id);
    tool_put_safe(stderr, j->cl->job.app_name);
    fprintf(stderr, " %s: %s", psdb__format_version(j->cl->job.app_version, ver, sizeof(ver)),
            step);
    fflush(stderr);
}

/* Runs one claimed job to its end (done, failed, lost or stopped). Returns non-zero when the
 * worker must stop for good (psdbd refuses it). */
static int run_job(worker *w, psdb_farm_claim *cl)
{
    job_run j = {.w = w, .cl = cl, .outcome = "failed", .t0 = now_s()};
    psdb_hr hr;
    int fatal = 0;
    const char *tmp = w->work_dir ? w->work_dir : getenv("TMPDIR");
    snprintf(j.dir, sizeof(j.dir), "%s/psdb-worker-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(j.dir)) {
        job_error(&j, PSDB_E_IO, "mkdtemp %s: %s", j.dir, strerror(errno));
        j.dir[0] = '\0';
        goto finish;
    }
    snprintf(j.sodb_path, sizeof(j.sodb_path), "%s/job.sodb", j.dir);
    snprintf(j.out_path, sizeof(j.out_path), "%s/job.psdb", j.dir);
    if (PSDB_FAILED(hr = lease_start(&j.lease, w, cl))) {
        job_error(&j, hr, "cannot start the lease thread (%s)", psdb_hr_str(hr));
        goto finish;
    }
    progress_line(w, &j, "fetching the SODB");
    hr = with_backoff(w, "sodbs", find_sodb, &j);
    if (PSDB_SUCCEEDED(hr) && !j.sodb)
        hr = job_error(&j, PSDB_E_NOT_FOUND, "the job's SODB is not published (any more)");
    if (PSDB_SUCCEEDED(hr))
        hr = check_sodb_manifest(&j);
    if (PSDB_SUCCEEDED(hr))
        hr = with_backoff(w, "download", get_sodb, &j);
    if (PSDB_SUCCEEDED(hr) && cl->base) {
        /* The base only saves work: one that cannot be had is compiled without. */
        progress_line(w, &j, "fetching the base PSDB");
        snprintf(j.base_path, sizeof(j.base_path), "%s/base.psdb", j.dir);
        j.used_base = PSDB_SUCCEEDED(with_backoff(w, "download", get_base, &j));
        if (!j.used_base)
            progress_line(w, &j, "the base PSDB could not be fetched: compiling without it");
    }
    if (PSDB_FAILED(hr)) {
        if (hr != PSDB_E_CANCELLED)
            job_error(&j, hr, "%s", psdb_client_last_error(w->client));
        goto finish;
    }
    progress_line(w, &j, j.used_base ? "compiling (with the base)" : "compiling");
    if (PSDB_FAILED(hr = compile(&j)))
        goto finish;
    if (lease_lost(&j.lease) || g_stop)
        goto finish;
    progress_line(w, &j, "publishing");
    hr = with_backoff(w, "publish", do_publish, &j);
    if (PSDB_FAILED(hr)) {
        if (hr != PSDB_E_CANCELLED)
            job_error(&j, hr, "publish: %s",
                      j.pub && j.pub->message[0] ? j.pub->message : psdb_hr_str(hr));
        fatal = hr == PSDB_E_ACCESS && j.pub && j.pub->http_status == PSDB__HTTP_UNAUTHORIZED;
        goto finish;
    }
    if (PSDB_FAILED(hr = published_id(&j)))
        goto finish;
    hr = with_backoff(w, "done", do_done, &j);
    if (hr == PSDB_E_ALREADY_EXISTS) {
        j.outcome = "lost";
        goto finish;
    }
    if (PSDB_FAILED(hr)) {
        job_error(&j, hr, "done: %s", psdb_client_last_error(w->client));
        goto finish;
    }
    j.outcome = "done";
finish:
    lease_stop(&j.lease);
    if (strcmp(j.outcome, "done") != 0 && strcmp(j.outcome, "lost") != 0) {
        if (j.lease.lost) {
            j.outcome = "lost";
        } else {
            if (g_stop && !j.error[0]) {
                j.outcome = "stopped";
                snprintf(j.error, sizeof(j.error), "worker stopped");
            }
            /* The job goes back now, not when its lease expires; a stopped worker sends this one
             * request without its cancel. */
            w->cancel_on_stop = 0;
            if (g_stop)
                (void)do_fail(&j);
            else
                (void)with_backoff(w, "fail", do_fail, &j);
            w->cancel_on_stop = 1;
        }
    }
    if (strcmp(j.outcome, "done") == 0)
        w->done++;
    else
        w->failed++;
    job_report(&j);
    job_files_remove(&j);
    psdb_manifest_free(j.sodb);
    psdb_publish_result_free(j.pub);
    return fatal;
}

/* ---- the loop ---------------------------------------------------------------------------------
 */

typedef struct claim_ctx {
    worker *w;
    psdb_target t;
    psdb_farm_claim *cl;
    uint64_t created;
} claim_ctx;

static psdb_hr do_announce(void *ctx)
{
    claim_ctx *c = ctx;
    return psdb_client_farm_announce(c->w->client, c->w->name, &c->t, &c->created);
}

static psdb_hr do_claim(void *ctx)
{
    claim_ctx *c = ctx;
    return psdb_client_farm_claim(c->w->client, c->w->name, &c->t, c->w->lease_s, &c->cl);
}

static int work(worker *w)
{
    claim_ctx c = {.w = w,
                   .t = {w->target.family, w->target.abi_min, w->target.compiler_version,
                         w->target.profile_version}};
    psdb_hr hr = with_backoff(w, "announce", do_announce, &c);
    if (hr == PSDB_E_CANCELLED)
        return 0;
    if (PSDB_FAILED(hr))
        return tool_fail("worker", "%s", psdb_client_last_error(w->client));
    if (!w->json)
        tool_printf_safe(stderr,
                         "psdb worker %s: target %s abi %llu; %llu jobs queued by the "
                         "announce",
                         w->name, w->target.family, (unsigned long long)w->target.abi_min,
                         (unsigned long long)c.created);
    if (!w->json)
        fputc('\n', stderr);
    while (!g_stop && (w->max_jobs == 0 || w->done + w->failed < w->max_jobs)) {
        hr = with_backoff(w, "claim", do_claim, &c);
        if (hr == PSDB_E_CANCELLED)
            break;
        if (PSDB_FAILED(hr))
            return tool_fail("worker", "%s", psdb_client_last_error(w->client));
        if (hr == PSDB_S_FALSE) {
            if (w->once)
                break;
            if (w->tty) {
                fprintf(stderr, "\r\033[Kpsdb worker %s: %llu done, %llu failed; idle", w->name,
                        (unsigned long long)w->done, (unsigned long long)w->failed);
                fflush(stderr);
            }
            nap_ms(w->poll_ms);
            continue;
        }
        int fatal = run_job(w, c.cl);
        psdb_farm_claim_free(c.cl);
        c.cl = NULL;
        if (fatal)
            return tool_fail("worker", "psdbd refuses the worker's token; stopping");
    }
    if (w->tty)
        fputs("\r\033[K", stderr);
    return 0;
}

static int parse_u32(const char *opt, const char *v, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t x;
    if (psdb__parse_u64(v, &x) != 0 || x < lo || x > hi)
        return tool_fail("worker", "invalid %s '%s' (%u-%u)", opt, v, lo, hi);
    *out = (uint32_t)x;
    return 0;
}

/* Seconds with up to 3 decimals ("5", "0.25") into milliseconds, without floating point. */
static int parse_seconds_ms(const char *v, uint64_t *ms)
{
    char whole[24];
    const char *dot = strchr(v, '.');
    size_t n = dot ? (size_t)(dot - v) : strlen(v), k = dot ? strlen(dot + 1) : 0;
    uint64_t w = 0, frac = 0;
    if (n == 0 || n >= sizeof(whole) || k > 3 || (dot && k == 0))
        return -1;
    memcpy(whole, v, n);
    whole[n] = '\0';
    if (psdb__parse_u64(whole, &w) != 0 || w > 3600)
        return -1;
    for (size_t i = 0; i < 3; i++) {
        char ch = i < k ? dot[1 + i] : '0';
        if (ch < '0' || ch > '9')
            return -1;
        frac = frac * 10 + (uint64_t)(ch - '0');
    }
    *ms = w * 1000 + frac;
    return 0;
}

int cmd_worker(int argc, char **argv)
{
    worker w = {.cd = {.token = getenv("PSDB_TOKEN"), .max_retries = 2},
                .lease_s = 60,
                .poll_ms = 5000,
                .cost = PSDB_COMPILE_NS_PER_KIB_DEFAULT,
                .cancel_on_stop = 1};
    const char *backend = "reference", *family = NULL, *delay = getenv("PSDB_WORKER_TEST_DELAY_MS");
    uint64_t abi = 0, compiler_version = 0, profile_version = 0;
    uint32_t ntrust = 0;
    int rc = 1, have_device = 0;
    psdb_key *key = NULL;
    char why[512];
    struct sigaction sa = {.sa_handler = on_stop};

    if (tool_wants_help(argc, argv)) {
        fputs(usage_text, stdout);
        return 0;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--once") == 0) {
            w.once = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            w.json = 1;
            continue;
        }
        if (!v || a[0] != '-')
            return tool_fail("worker", "%s '%s' (see --help)",
                             a[0] == '-' ? "a value is missing after" : "unexpected argument", a);
        i++;
        if (tool_server_option(a, v, &w.cd))
            ;
        else if (strcmp(a, "--key") == 0)
            w.key_path = v;
        else if (strcmp(a, "--trust") == 0) {
            if (ntrust == MAX_TRUST)
                return tool_fail("worker", "at most %d --trust keys", MAX_TRUST);
            w.trust[ntrust++] = v;
        } else if (strcmp(a, "--backend") == 0) {
            if (strcmp(v, "vulkan") != 0 && strcmp(v, "reference") != 0)
                return tool_fail("worker", "unknown --backend '%s' (reference or vulkan)", v);
            backend = v;
        } else if (strcmp(a, "--device") == 0) {
            if (parse_u32(a, v, 0, 15, &w.device))
                return 1;
            have_device = 1;
        } else if (strcmp(a, "--family") == 0)
            family = v;
        else if (strcmp(a, "--abi") == 0) {
            if (psdb__parse_u64(v, &abi) != 0 || abi == 0 || abi == UINT64_MAX)
                return tool_fail("worker", "invalid --abi '%s' (0 and 2^64-1 are reserved)", v);
        } else if (strcmp(a, "--compiler-version") == 0) {
            if (psdb__parse_version(v, &compiler_version) != 0)
                return tool_fail("worker", "invalid --compiler-version '%s'", v);
        } else if (strcmp(a, "--profile-version") == 0) {
            if (psdb__parse_version(v, &profile_version) != 0)
                return tool_fail("worker", "invalid --profile-version '%s'", v);
        } else if (strcmp(a, "--cost-ns-per-kib") == 0) {
            if (psdb__parse_u64(v, &w.cost) != 0)
                return tool_fail("worker", "invalid --cost-ns-per-kib '%s'", v);
            if (w.cost == 0)
                w.cost = PSDB_COMPILE_COST_FREE;
        } else if (strcmp(a, "--name") == 0)
            w.name_arg = v;
        else if (strcmp(a, "--max-jobs") == 0) {
            if (psdb__parse_u64(v, &w.max_jobs) != 0 || w.max_jobs == 0)
                return tool_fail("worker", "invalid --max-jobs '%s' (1 or more)", v);
        } else if (strcmp(a, "--lease-s") == 0) {
            if (parse_u32(a, v, 3, 86400, &w.lease_s))
                return 1;
        } else if (strcmp(a, "--poll-s") == 0) {
            if (parse_seconds_ms(v, &w.poll_ms) != 0 || w.poll_ms < 10 || w.poll_ms > 3600000)
                return tool_fail("worker",
                                 "invalid --poll-s '%s' (0.01-3600, at most 3 "
                                 "decimals)",
                                 v);
        } else if (strcmp(a, "--work-dir") == 0)
            w.work_dir = v;
        else
            return tool_fail("worker", "unknown option '%s' (see --help)", a);
    }
    w.vulkan = strcmp(backend, "vulkan") == 0;
    if (!w.cd.server_url || !w.cd.token || !w.key_path || ntrust == 0)
        return tool_fail("worker", "--server, --token, --key and --trust are required");
    if (w.vulkan && (family || abi))
        return tool_fail("worker", "--backend vulkan takes no --family or --abi (the device "
                                   "gives the target)");
    if (!w.vulkan && (!family || !abi || have_device))
        return tool_fail("worker", "--backend reference needs --family and --abi (and no "
                                   "--device)");
    if (family && (!*family || strlen(family) >= PSDB_ADAPTER_FAMILY_MAX))
        return tool_fail("worker", "invalid --family (1-%d bytes)", PSDB_ADAPTER_FAMILY_MAX - 1);
    if (family && tool_bad_name("worker", "--family", family))
        return 1;
    if (w.name_arg && tool_bad_name("worker", "--name", w.name_arg))
        return 1;
    if (delay && psdb__parse_u64(delay, &w.delay_ms) != 0)
        return tool_fail("worker", "invalid PSDB_WORKER_TEST_DELAY_MS '%s'", delay);
    /* The signing key is checked before any job is claimed: a worker that cannot publish must not
     * take jobs from the others. */
    if (PSDB_FAILED(psdb_key_load_kind(w.key_path, PSDB_KEY_PRIVATE, &key, why, sizeof(why))))
        return tool_fail("worker", "--key %s", why);
    psdb_key_release(key);
    if (w.vulkan) {
        char err[512] = "";
        psdb_hr hr = vkbe_device_target(w.device, &w.target, err, sizeof(err));
        if (PSDB_FAILED(hr))
            return tool_fail("worker", "--backend vulkan: %s", err[0] ? err : psdb_hr_str(hr));
    } else {
        snprintf(w.target.family, sizeof(w.target.family), "%s", family);
        w.target.abi_min = w.target.abi_max = abi;
        w.target.compiler_version = compiler_version;
        w.target.profile_version = profile_version;
    }
    if (w.name_arg) {
        snprintf(w.name, sizeof(w.name), "%s", w.name_arg);
    } else {
        char host[64] = "worker";
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(w.name, sizeof(w.name), "%s-%ld", host, (long)getpid());
    }
    /* A claim's base PSDB was most likely built by this farm: the worker's own public key (keygen
     * writes it beside the private one) vouches for bases too. A base signed by a key trusted by
     * neither is not used: the job is compiled in full. */
    snprintf(w.own_pub, sizeof(w.own_pub), "%s.pub", w.key_path);
    if (access(w.own_pub, R_OK) == 0)
        w.trust[ntrust++] = w.own_pub;
    w.cd.trusted_keys = w.trust;
    w.cd.num_trusted_keys = ntrust;
    w.cd.progress_cancel = cancel_cb;
    w.cd.progress_ctx = &w;
    psdb_hr hr = psdb_client_create(&w.cd, &w.client);
    if (PSDB_FAILED(hr)) {
        tool_fail("worker", "%s", psdb_error_last());
        goto cleanup;
    }
    w.tty = !w.json && isatty(STDERR_FILENO);
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    rc = work(&w);
cleanup:
    psdb_client_release(w.client);
    return rc;
}
