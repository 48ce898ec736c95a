/* stats.c - psdbd's demand recording: in-memory per-day counters, flushed to the index by a
 * background thread.
 *
 * DESIGN
 * A resolve must stay a cache lookup, so recording one is a hash, a lookup in the calling
 * thread's own table under that table's own mutex (only the flusher and /metrics ever take it
 * too, so it is uncontended: a shared mutex made every request for a popular key wait for the
 * others, 0.64 of the resolves/s without recording), and an addition; an allocation only for a
 * key this thread has not seen since the last flush. The flusher takes each thread's whole table
 * under its lock (a pointer walk), writes the counts outside any lock (the same key from two
 * threads is two upserts), and puts them back when the write fails so nothing is lost to a busy
 * or full disk. The cap on distinct keys (one counter for all threads, touched only when a key is
 * made) bounds memory whatever clients send; names that are too long or not UTF-8 (a resolve's
 * arguments are anything a client decodes to) are never kept, since every report is JSON.
 *
 * The per-application totals behind /metrics live beside the day counters but are never
 * flushed: they count since start, like every other psdbd series. */
#include "stats.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define BUCKETS 512
#define APP_BUCKETS 64
#define MAX_APPS 4096 /* distinct applications with totals per thread; the rest are "other" */

struct entry {
    struct entry *next;
    uint64_t hash;
    psdbd_stat_row row; /* strings point into text */
    char text[];
};

struct app_total {
    struct app_total *next;
    uint64_t hash;
    uint64_t n[5]; /* hits, misses, complete, partial, bytes */
    char name[];
};

/* One request thread's counters. Made on the thread's first record, kept until the recorder is
 * freed (worker threads live as long as the daemon). */
struct shard {
    struct shard *next; /* in psdbd_stats.shards */
    pthread_mutex_t lock;
    unsigned napps;
    struct entry *buckets[BUCKETS];
    struct app_total *apps[APP_BUCKETS];
};

struct psdbd_stats {
    psdbd_stats_options opt;
    pthread_key_t key; /* this thread's struct shard */
    pthread_mutex_t shards_lock;
    struct shard *shards;
    atomic_uint held;
    atomic_uint_fast64_t dropped, flush_failures, other[5];
    psdbd_index *ix;
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int stop;
    uint64_t asked, finished; /* flush requests made and served */
    int last_rc;
};

/* ---- keys --------------------------------------------------------------------------------------
 */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    return s ? fnv(h, s, strlen(s) + 1) : fnv(h, "", 1);
}

static uint64_t row_hash(const psdbd_stat_row *r)
{
    uint64_t h = 0xcbf29ce484222325ull;
    uint64_t nums[6] = {(uint64_t)r->kind, (uint64_t)r->day, r->app_version,
                        r->abi_min,        r->abi_max,       r->has_profile ? r->profile + 1 : 0};
    h = fnv(h, nums, sizeof(nums));
    h = fnv_str(h, r->app);
    h = fnv_str(h, r->family);
    return fnv_str(h, r->sha256);
}

static int str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int row_eq(const psdbd_stat_row *a, const psdbd_stat_row *b)
{
    return a->kind == b->kind && a->day == b->day && a->app_version == b->app_version &&
           a->abi_min == b->abi_min && a->abi_max == b->abi_max &&
           a->has_profile == b->has_profile && a->profile == b->profile && str_eq(a->app, b->app) &&
           str_eq(a->family, b->family) && str_eq(a->sha256, b->sha256);
}

/* Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), at most `max`
 * bytes: what jansson will encode and the reports can show. */
static int good_name(const char *s, size_t max)
{
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)s;
    if (!s)
        return 1;
    while (*p) {
        unsigned c = *p, need = 0;
        uint32_t cp = 0, min = 0;
        if (c < 0x80) {
            p++;
            n++;
            if (n > max)
                return 0;
            continue;
        }
        if ((c & 0xe0) == 0xc0)
            need = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0)
            need = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0)
            need = 3, cp = c & 0x07, min = 0x10000;
        else
            return 0;
        for (unsigned i = 1; i <= need; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += need + 1;
        n += need + 1;
        if (n > max)
            return 0;
    }
    return 1;
}

/* ---- recording ---------------------------------------------------------------------------------
 */

psdbd_stats *psdbd_stats_create(const psdbd_stats_options *opt)
{
    psdbd_stats *st = xcalloc(1, sizeof(*st));
    st->opt = *opt;
    if (st->opt.flush_interval == 0)
        st->opt.flush_interval = 1;
    if (st->opt.retention_days == 0)
        st->opt.retention_days = 1;
    if (pthread_key_create(&st->key, NULL) != 0)
        psdbd_out_of_memory(); /* the only way it fails with keys to spare */
    pthread_mutex_init(&st->shards_lock, NULL);
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->wake, NULL);
    pthread_cond_init(&st->done, NULL);
    return st;
}

int64_t psdbd_stats_today(void)
{
    int64_t t = (int64_t)time(NULL);
    return t >= 0 ? t / 86400 : (t - 86399) / 86400;
}

static char *copy_into(char **at, const char *s)
{
    char *dst = *at;
    size_t n;
    if (!s)
        return NULL;
    n = strlen(s) + 1;
    memcpy(dst, s, n);
    *at += n;
    return dst;
}

/* The calling thread's table, made and listed on first use. */
static struct shard *local_of(psdbd_stats *st)
{
    struct shard *sh = pthread_getspecific(st->key);
    if (sh)
        return sh;
    sh = xcalloc(1, sizeof(*sh));
    pthread_mutex_init(&sh->lock, NULL);
    pthread_mutex_lock(&st->shards_lock);
    sh->next = st->shards;
    st->shards = sh;
    pthread_mutex_unlock(&st->shards_lock);
    if (pthread_setspecific(st->key, sh) != 0)
        psdbd_out_of_memory();
    return sh;
}

/* Adds r's counts to its key's entry, making the entry when there is room. */
static void record(psdbd_stats *st, const psdbd_stat_row *r)
{
    uint64_t h = row_hash(r);
    struct shard *sh = local_of(st);
    size_t b = (size_t)(h % BUCKETS);
    struct entry *e;
    pthread_mutex_lock(&sh->lock);
    for (e = sh->buckets[b]; e; e = e->next)
        if (e->hash == h && row_eq(&e->row, r))
            break;
    if (!e && atomic_load_explicit(&st->held, memory_order_relaxed) >= st->opt.max_keys) {
        atomic_fetch_add_explicit(&st->dropped, 1, memory_order_relaxed);
        goto cleanup;
    }
    if (!e) {
        size_t len = (r->app ? strlen(r->app) + 1 : 0) + (r->family ? strlen(r->family) + 1 : 0) +
                     (r->sha256 ? strlen(r->sha256) + 1 : 0);
        e = xcalloc(1, sizeof(*e) + len);
        char *at = e->text;
        e->hash = h;
        e->row = *r;
        e->row.n[0] = e->row.n[1] = e->row.n[2] = 0;
        e->row.app = copy_into(&at, r->app);
        e->row.family = copy_into(&at, r->family);
        e->row.sha256 = copy_into(&at, r->sha256);
        e->next = sh->buckets[b];
        sh->buckets[b] = e;
        atomic_fetch_add_explicit(&st->held, 1, memory_order_relaxed);
    }
    for (int i = 0; i < 3; i++)
        e->row.n[i] += r->n[i];
cleanup:
    pthread_mutex_unlock(&sh->lock);
}

/* Adds to an application's totals since start (hits, misses, complete, partial, bytes). */
static void add_total(psdbd_stats *st, const char *app, const uint64_t add[5])
{
    uint64_t h = fnv_str(0xcbf29ce484222325ull, app);
    struct shard *sh = local_of(st);
    size_t b = (size_t)(h % APP_BUCKETS);
    struct app_total *t;
    pthread_mutex_lock(&sh->lock);
    for (t = sh->apps[b]; t; t = t->next)
        if (t->hash == h && strcmp(t->name, app) == 0)
            break;
    if (!t && sh->napps < MAX_APPS) {
        size_t n = strlen(app) + 1;
        t = xcalloc(1, sizeof(*t) + n);
        memcpy(t->name, app, n);
        t->hash = h;
        t->next = sh->apps[b];
        sh->apps[b] = t;
        sh->napps++;
    }
    if (t)
        for (int i = 0; i < 5; i++)
            t->n[i] += add[i];
    pthread_mutex_unlock(&sh->lock);
    if (!t)
        for (int i = 0; i < 5; i++)
            atomic_fetch_add_explicit(&st->other[i], add[i], memory_order_relaxed);
}

void psdbd_stats_resolve(psdbd_stats *st, int64_t day, const char *app, uint64_t app_version,
                         const char *family, int hit, uint64_t abi_min, uint64_t abi_max,
                         int has_profile, uint64_t profile)
{
    psdbd_stat_row r = {.kind = PSDBD_STAT_RESOLVE,
                        .day = day,
                        .app = app,
                        .family = family,
                        .app_version = app_version};
    uint64_t total[5] = {hit ? 1 : 0, hit ? 0 : 1, 0, 0, 0};
    if (!st)
        return;
    if (!good_name(app, PSDBD_STATS_NAME_MAX) || !good_name(family, PSDBD_STATS_NAME_MAX)) {
        atomic_fetch_add_explicit(&st->dropped, 1, memory_order_relaxed);
        return;
    }
    r.n[hit ? 0 : 1] = 1;
    record(st, &r);
    add_total(st, app, total);
    if (hit)
        return;
    r.kind = PSDBD_STAT_MISS;
    r.abi_min = abi_min;
    r.abi_max = abi_max;
    r.has_profile = has_profile ? 1 : 0;
    r.profile = has_profile ? profile & 0xFFFFFFFF00000000ull : 0;
    r.n[0] = 1;
    r.n[1] = 0;
    record(st, &r);
}

void psdbd_stats_download(psdbd_stats *st, int64_t day, const char *sha256, const char *app,
                          int complete, uint64_t bytes)
{
    psdbd_stat_row r = {.kind = PSDBD_STAT_DOWNLOAD, .day = day, .sha256 = sha256};
    uint64_t total[5] = {0, 0, complete ? 1 : 0, complete ? 0 : 1, bytes};
    if (!st || !sha256 || !psdbd_is_lower_hex(sha256, 64) || sha256[64] != '\0')
        return;
    r.n[complete ? 0 : 1] = 1;
    r.n[2] = bytes;
    record(st, &r);
    if (app && good_name(app, PSDBD_STATS_NAME_MAX))
        add_total(st, app, total);
}

unsigned psdbd_stats_held(psdbd_stats *st)
{
    return st ? atomic_load(&st->held) : 0;
}

uint64_t psdbd_stats_dropped(psdbd_stats *st)
{
    return st ? atomic_load(&st->dropped) : 0;
}

/* ---- flushing ----------------------------------------------------------------------------------
 */

/* Takes every held entry out of the tables: a list, *count long. */
static struct entry *drain(psdbd_stats *st, size_t *count)
{
    struct entry *all = NULL;
    size_t n = 0;
    pthread_mutex_lock(&st->shards_lock);
    for (struct shard *sh = st->shards; sh; sh = sh->next) {
        pthread_mutex_lock(&sh->lock);
        for (int b = 0; b < BUCKETS; b++) {
            struct entry *e = sh->buckets[b], *next;
            sh->buckets[b] = NULL;
            for (; e; e = next) {
                next = e->next;
                e->next = all;
                all = e;
                n++;
            }
        }
        pthread_mutex_unlock(&sh->lock);
    }
    pthread_mutex_unlock(&st->shards_lock);
    atomic_fetch_sub(&st->held, (unsigned)n);
    *count = n;
    return all;
}

/* One flush: 0, or -1 when the index refused the counts (they are held again). */
static int flush_once(psdbd_stats *st)
{
    size_t n = 0, i = 0;
    struct entry *all = drain(st, &n), *e, *next;
    psdbd_stat_row *rows = NULL;
    int64_t today = psdbd_stats_today();
    int rc = 0;
    if (n == 0)
        goto cleanup; /* nothing to add; expiry waits for the next flush with counts */
    rows = xcalloc(n ? n : 1, sizeof(*rows));
    for (e = all; e; e = e->next)
        rows[i++] = e->row;
    psdbd_rc irc =
        psdbd_index_stats_add(st->ix, rows, n, today - (int64_t)st->opt.retention_days + 1);
    if (irc != PSDBD_OK) {
        atomic_fetch_add(&st->flush_failures, 1);
        psdbd_log("stats: flush of %zu counts failed (%s); kept for the next flush", n,
                  irc == PSDBD_FULL ? "disk full" : "index error");
        for (e = all; e; e = e->next)
            record(st, &e->row);
        rc = -1;
    }
cleanup:
    for (e = all; e; e = next) {
        next = e->next;
        free(e);
    }
    free(rows);
    return rc;
}

static void *flusher(void *arg)
{
    psdbd_stats *st = arg;
    pthread_mutex_lock(&st->lock);
    while (!st->stop) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += st->opt.flush_interval;
        while (!st->stop && st->asked == st->finished) {
            int e = pthread_cond_timedwait(&st->wake, &st->lock, &deadline);
            if (e == ETIMEDOUT)
                break;
        }
        if (st->stop)
            break;
        uint64_t serving = st->asked;
        pthread_mutex_unlock(&st->lock);
        int rc = flush_once(st);
        pthread_mutex_lock(&st->lock);
        if (serving != st->finished) {
            st->finished = serving;
            st->last_rc = rc;
            pthread_cond_broadcast(&st->done);
        }
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

int psdbd_stats_start(psdbd_stats *st, psdbd_index *ix, char *err, size_t err_size)
{
    int e;
    st->ix = ix;
    if ((e = pthread_create(&st->thread, NULL, flusher, st)) != 0) {
        snprintf(err, err_size, "stats: start the flusher thread: %s", strerror(e));
        return -1;
    }
    st->started = 1;
    return 0;
}

int psdbd_stats_flush(psdbd_stats *st)
{
    int rc;
    if (!st || !st->ix)
        return 0;
    if (!st->started)
        return flush_once(st);
    pthread_mutex_lock(&st->lock);
    uint64_t mine = ++st->asked;
    pthread_cond_signal(&st->wake);
    while (st->finished < mine && !st->stop)
        pthread_cond_wait(&st->done, &st->lock);
    rc = st->finished >= mine ? st->last_rc : -1;
    pthread_mutex_unlock(&st->lock);
    return rc;
}

void psdbd_stats_free(psdbd_stats *st)
{
    if (!st)
        return;
    if (st->started) {
        pthread_mutex_lock(&st->lock);
        st->stop = 1;
        pthread_cond_broadcast(&st->wake);
        pthread_cond_broadcast(&st->done);
        pthread_mutex_unlock(&st->lock);
        pthread_join(st->thread, NULL);
    }
    /* The last flush, on this thread: clean shutdown loses nothing. */
    if (st->ix && flush_once(st) != 0)
        psdbd_log("stats: the last flush failed; %u counts are lost", psdbd_stats_held(st));
    size_t n = 0;
    for (struct entry *e = drain(st, &n), *next; e; e = next) {
        next = e->next;
        free(e);
    }
    for (struct shard *sh = st->shards, *next_sh; sh; sh = next_sh) {
        next_sh = sh->next;
        for (int b = 0; b < APP_BUCKETS; b++)
            for (struct app_total *t = sh->apps[b], *next; t; t = next) {
                next = t->next;
                free(t);
            }
        pthread_mutex_destroy(&sh->lock);
        free(sh);
    }
    pthread_key_delete(st->key);
    pthread_mutex_destroy(&st->shards_lock);
    pthread_mutex_destroy(&st->lock);
    pthread_cond_destroy(&st->wake);
    pthread_cond_destroy(&st->done);
    free(st);
}

/* ---- metrics -----------------------------------------------------------------------------------
 */

struct total_copy {
    char *name;
    uint64_t n[5];
};

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct total_copy *)a)->name, ((const struct total_copy *)b)->name);
}

static int by_volume(const void *a, const void *b)
{
    const struct total_copy *x = a, *y = b;
    uint64_t vx = x->n[0] + x->n[1] + x->n[2] + x->n[3], vy = y->n[0] + y->n[1] + y->n[2] + y->n[3];
    if (vx != vy)
        return vx < vy ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* A label value in the text format: backslash, quote and newline escaped. */
static void put_label(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', f), fputc(*s, f);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
}

void psdbd_stats_render_metrics(psdbd_stats *st, FILE *f)
{
    struct total_copy *all = NULL;
    size_t n = 0, cap = 0;
    uint64_t other[5] = {0};
    int any_other = 0;
    static const char *const names[] = {"hit", "miss", "complete", "partial"};
    if (!st)
        return;
    pthread_mutex_lock(&st->shards_lock);
    for (struct shard *sh = st->shards; sh; sh = sh->next) {
        pthread_mutex_lock(&sh->lock);
        for (int b = 0; b < APP_BUCKETS; b++)
            for (struct app_total *t = sh->apps[b]; t; t = t->next) {
                if (n == cap) {
                    cap = cap ? cap * 2 : 64;
                    struct total_copy *grown = realloc(all, cap * sizeof(*all));
                    if (!grown)
                        psdbd_out_of_memory();
                    all = grown;
                }
                all[n].name = xstrdup(t->name);
                memcpy(all[n].n, t->n, sizeof(t->n));
                n++;
            }
        pthread_mutex_unlock(&sh->lock);
    }
    pthread_mutex_unlock(&st->shards_lock);
    /* One application counted by several threads: summed into one line. */
    if (n > 1) {
        size_t w = 0;
        qsort(all, n, sizeof(*all), by_name);
        for (size_t i = 0; i < n; i++) {
            if (w > 0 && strcmp(all[w - 1].name, all[i].name) == 0) {
                for (int k = 0; k < 5; k++)
                    all[w - 1].n[k] += all[i].n[k];
                free(all[i].name);
                continue;
            }
            all[w++] = all[i];
        }
        n = w;
    }
    if (n > 1)
        qsort(all, n, sizeof(*all), by_volume);
    for (int i = 0; i < 5; i++) {
        other[i] = atomic_load(&st->other[i]);
        any_other |= other[i] != 0;
    }
    /* Past the top N, and any name a label should not carry (a control character, or "other"
     * itself), go into app="other": the series count stays bounded by N + 1. */
    size_t named = 0;
    for (size_t i = 0; i < n; i++) {
        if (named < st->opt.top_apps && psdbd_control_char_in(all[i].name) < 0 &&
            strcmp(all[i].name, "other") != 0) {
            named++;
            continue;
        }
        for (int k = 0; k < 5; k++)
            other[k] += all[i].n[k];
        any_other = 1;
        all[i].name[0] = '\0';
    }
    fprintf(f, "# HELP psdbd_demand_resolves_total Resolves answered since start, by application "
               "(the top applications; the rest as \"other\") and result.\n"
               "# TYPE psdbd_demand_resolves_total counter\n");
    for (size_t i = 0; i <= n; i++) {
        const char *name = i < n ? all[i].name : "other";
        const uint64_t *v = i < n ? all[i].n : other;
        if ((i < n && !name[0]) || (i == n && !any_other))
            continue;
        for (int k = 0; k < 2; k++) {
            fputs("psdbd_demand_resolves_total{app=\"", f);
            put_label(f, name);
            fprintf(f, "\",result=\"%s\"} %llu\n", names[k], (unsigned long long)v[k]);
        }
    }
    fprintf(f, "# HELP psdbd_demand_downloads_total Blob responses since start, by application "
               "and whether they were complete or partial.\n"
               "# TYPE psdbd_demand_downloads_total counter\n");
    for (size_t i = 0; i <= n; i++) {
        const char *name = i < n ? all[i].name : "other";
        const uint64_t *v = i < n ? all[i].n : other;
        if ((i < n && !name[0]) || (i == n && !any_other))
            continue;
        for (int k = 2; k < 4; k++) {
            fputs("psdbd_demand_downloads_total{app=\"", f);
            put_label(f, name);
            fprintf(f, "\",kind=\"%s\"} %llu\n", names[k], (unsigned long long)v[k]);
        }
    }
    fprintf(f, "# HELP psdbd_demand_download_bytes_total Blob body bytes sent since start, by "
               "application.\n"
               "# TYPE psdbd_demand_download_bytes_total counter\n");
    for (size_t i = 0; i <= n; i++) {
        const char *name = i < n ? all[i].name : "other";
        const uint64_t *v = i < n ? all[i].n : other;
        if ((i < n && !name[0]) || (i == n && !any_other))
            continue;
        fputs("psdbd_demand_download_bytes_total{app=\"", f);
        put_label(f, name);
        fprintf(f, "\"} %llu\n", (unsigned long long)v[4]);
    }
    fprintf(f,
            "# HELP psdbd_stats_dropped_total Demand counts not recorded: the key cap was "
            "reached between two flushes, or a name was too long or not UTF-8.\n"
            "# TYPE psdbd_stats_dropped_total counter\n"
            "psdbd_stats_dropped_total %llu\n"
            "# HELP psdbd_stats_flush_failures_total Flushes of demand counts the index refused "
            "(the counts were kept for the next one).\n"
            "# TYPE psdbd_stats_flush_failures_total counter\n"
            "psdbd_stats_flush_failures_total %llu\n"
            "# HELP psdbd_stats_held_keys Demand counters held in memory until the next flush.\n"
            "# TYPE psdbd_stats_held_keys gauge\n"
            "psdbd_stats_held_keys %u\n",
            (unsigned long long)atomic_load(&st->dropped),
            (unsigned long long)atomic_load(&st->flush_failures), atomic_load(&st->held));
    for (size_t i = 0; i < n; i++)
        free(all[i].name);
    free(all);
}
