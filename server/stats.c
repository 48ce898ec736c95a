/* stats.c - psdbd's demand recording: in-memory per-day counters, flushed to the index by a
 * background thread, within bounds that no client can push.
 *
 * DESIGN
 * A resolve must stay a cache lookup, so recording one is a hash, a lookup in the calling
 * thread's own table under that table's own mutex (only the flusher and /metrics ever take it
 * too, so it is uncontended: a shared mutex made every request for a popular key wait for the
 * others, 0.64 of the resolves/s without recording), and an addition; an allocation only for a
 * key this thread has not seen since the last flush. The flusher takes each thread's whole table
 * under its lock (a pointer walk), writes the counts outside any lock (the same key from two
 * threads is two upserts), and puts them back when the write fails so nothing is lost to a busy
 * or full disk.
 *
 * Anyone who may resolve can send any name, so what a client sends must not decide how much
 * memory or index psdbd uses. Three bounds, each folding what is over it into the day's
 * aggregate (a PSDBD_STAT_OTHER row: counted, never itemized), so no count is lost:
 * - in memory, between two flushes: at most `max_keys` keys and `max_memory` bytes of them (one
 *   counter for all threads, touched only when a key is made); a name longer than
 *   PSDBD_STATS_NAME_MAX or not a name by psdb's rule is never kept at all;
 * - in the index, per day: at most `max_names` distinct application and family names and
 *   `max_day_bytes` of new keys (each costs twice its names' bytes plus KEY_COST, what its row and
 *   index entries take). The flusher alone decides, at flush time, against a ledger of the day's
 *   stored keys (SHA-256 digests, so a crafted name cannot pass as a stored one), seeded from the
 *   index the first time it meets a day so that a restart does not grant a new budget. A key
 *   stored earlier that day is always added to; a resolve with hits is always kept (only a
 *   published PSDB can be hit, so its key is bounded by what publishers published).
 * Each replica of a shared PostgreSQL index keeps its own ledger: the bounds hold per replica.
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
#define KEY_COST 128  /* bytes a stored key takes beyond twice its names: row and index entries */
#define LEDGERS 3     /* days with a ledger at once: today, yesterday around midnight, one more */

struct entry {
    struct entry *next;
    uint64_t hash;
    size_t size;        /* bytes held, for the memory bound */
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

/* A set of 16-byte digests (open addressing; an all-zero slot is empty). */
struct dset {
    uint8_t (*slot)[16];
    size_t cap, n;
};

/* What the index holds of one day, as far as the bounds go: the digests of its stored keys and
 * names, and the bytes its keys cost. Used by the flusher only. */
struct ledger {
    int used;
    int64_t day;
    uint64_t bytes;
    struct dset keys, names;
};

struct psdbd_stats {
    psdbd_stats_options opt;
    pthread_key_t key; /* this thread's struct shard */
    pthread_mutex_t shards_lock;
    struct shard *shards;
    atomic_uint held;
    atomic_uint_fast64_t held_bytes;
    atomic_uint_fast64_t dropped, flush_failures, other[5];
    psdbd_index *ix;
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    int stop;
    uint64_t asked, finished; /* flush requests made and served */
    int last_rc;
    /* The flusher's own (flush_once never runs twice at once: the flusher thread, or the caller
     * before it starts or after it stopped). */
    struct ledger ledgers[LEDGERS];
    unsigned char *scratch;
    size_t scratch_cap;
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

/* A name the recorder keeps: a name by psdb's rule (so also what JSON can carry), of at most
 * PSDBD_STATS_NAME_MAX bytes. NULL (no name) is fine. */
static int good_name(const char *s)
{
    return !s || (strlen(s) <= PSDBD_STATS_NAME_MAX && psdb__name_scan(s, NULL) == PSDB__NAME_OK);
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
    if (st->opt.max_names == 0)
        st->opt.max_names = PSDBD_STATS_MAX_NAMES_DEFAULT;
    if (st->opt.max_day_bytes == 0)
        st->opt.max_day_bytes = PSDBD_STATS_MAX_DAY_BYTES_DEFAULT;
    if (st->opt.max_memory == 0)
        st->opt.max_memory = PSDBD_STATS_MAX_MEMORY_DEFAULT;
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

/* r's entry in sh (locked), made when absent and, unless `bounded` is 0, when there is room.
 * NULL: absent and no room. */
static struct entry *entry_of(psdbd_stats *st, struct shard *sh, const psdbd_stat_row *r,
                              int bounded)
{
    uint64_t h = row_hash(r);
    size_t b = (size_t)(h % BUCKETS), len, size;
    struct entry *e;
    char *at;
    for (e = sh->buckets[b]; e; e = e->next)
        if (e->hash == h && row_eq(&e->row, r))
            goto cleanup;
    len = (r->app ? strlen(r->app) + 1 : 0) + (r->family ? strlen(r->family) + 1 : 0) +
          (r->sha256 ? strlen(r->sha256) + 1 : 0);
    size = sizeof(*e) + len;
    if (bounded &&
        (atomic_load_explicit(&st->held, memory_order_relaxed) >= st->opt.max_keys ||
         atomic_load_explicit(&st->held_bytes, memory_order_relaxed) + size > st->opt.max_memory))
        goto cleanup; /* e is NULL: no room */
    e = xcalloc(1, size);
    at = e->text;
    e->hash = h;
    e->size = size;
    e->row = *r;
    e->row.n[0] = e->row.n[1] = e->row.n[2] = 0;
    e->row.app = copy_into(&at, r->app);
    e->row.family = copy_into(&at, r->family);
    e->row.sha256 = copy_into(&at, r->sha256);
    e->next = sh->buckets[b];
    sh->buckets[b] = e;
    atomic_fetch_add_explicit(&st->held, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&st->held_bytes, size, memory_order_relaxed);
cleanup:
    return e;
}

/* What r adds to its day's aggregate (hits, misses, miss requests): a resolve's hits and misses,
 * a miss's requests; a download adds nothing (its key is a published blob's digest: bounded). */
static void other_counts(const psdbd_stat_row *r, uint64_t out[3])
{
    out[0] = r->kind == PSDBD_STAT_RESOLVE ? r->n[0] : r->kind == PSDBD_STAT_OTHER ? r->n[0] : 0;
    out[1] = r->kind == PSDBD_STAT_RESOLVE ? r->n[1] : r->kind == PSDBD_STAT_OTHER ? r->n[1] : 0;
    out[2] = r->kind == PSDBD_STAT_MISS ? r->n[0] : r->kind == PSDBD_STAT_OTHER ? r->n[2] : 0;
}

/* Adds r's counts to its key's entry, made when there is room; else to its day's aggregate
 * (counted as dropped). An aggregate is always made: one per day and thread. */
static void record(psdbd_stats *st, const psdbd_stat_row *r)
{
    struct shard *sh = local_of(st);
    struct entry *e;
    pthread_mutex_lock(&sh->lock);
    if ((e = entry_of(st, sh, r, r->kind != PSDBD_STAT_OTHER)) != NULL) {
        for (int i = 0; i < 3; i++)
            e->row.n[i] += r->n[i];
    } else {
        psdbd_stat_row o = {.kind = PSDBD_STAT_OTHER, .day = r->day};
        uint64_t add[3];
        atomic_fetch_add_explicit(&st->dropped, 1, memory_order_relaxed);
        other_counts(r, add);
        if (add[0] || add[1] || add[2]) {
            e = entry_of(st, sh, &o, 0);
            for (int i = 0; i < 3; i++)
                e->row.n[i] += add[i];
        }
    }
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
    if (!app || !family || !good_name(app) || !good_name(family)) {
        /* Never kept by name: counted in the day's aggregate only. */
        psdbd_stat_row o = {.kind = PSDBD_STAT_OTHER, .day = day, .n = {hit, !hit, !hit}};
        atomic_fetch_add_explicit(&st->dropped, 1, memory_order_relaxed);
        record(st, &o);
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
    if (app && good_name(app))
        add_total(st, app, total);
}

unsigned psdbd_stats_held(psdbd_stats *st)
{
    return st ? atomic_load(&st->held) : 0;
}

uint64_t psdbd_stats_held_bytes(psdbd_stats *st)
{
    return st ? atomic_load(&st->held_bytes) : 0;
}

uint64_t psdbd_stats_dropped(psdbd_stats *st)
{
    return st ? atomic_load(&st->dropped) : 0;
}

/* ---- the day ledgers ---------------------------------------------------------------------------
 */

static int digest_zero(const uint8_t d[16])
{
    static const uint8_t zero[16];
    return memcmp(d, zero, 16) == 0;
}

static size_t dset_find(const struct dset *s, const uint8_t d[16])
{
    uint64_t h;
    memcpy(&h, d, sizeof(h));
    size_t i = (size_t)(h & (s->cap - 1));
    while (!digest_zero(s->slot[i]) && memcmp(s->slot[i], d, 16) != 0)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static int dset_has(const struct dset *s, const uint8_t d[16])
{
    return s->cap && !digest_zero(s->slot[dset_find(s, d)]);
}

static void dset_add(struct dset *s, const uint8_t d[16])
{
    if ((s->n + 1) * 2 > s->cap) {
        struct dset grown = {xcalloc(s->cap ? s->cap * 2 : 64, 16), s->cap ? s->cap * 2 : 64, 0};
        for (size_t i = 0; i < s->cap; i++)
            if (!digest_zero(s->slot[i]))
                memcpy(grown.slot[dset_find(&grown, s->slot[i])], s->slot[i], 16), grown.n++;
        free(s->slot);
        *s = grown;
    }
    size_t i = dset_find(s, d);
    if (digest_zero(s->slot[i])) {
        memcpy(s->slot[i], d, 16);
        s->n++;
    }
}

static void ledger_clear(struct ledger *l)
{
    free(l->keys.slot);
    free(l->names.slot);
    memset(l, 0, sizeof(*l));
}

/* The flusher's scratch buffer, at least n bytes. */
static unsigned char *scratch(psdbd_stats *st, size_t n)
{
    if (n > st->scratch_cap) {
        free(st->scratch);
        st->scratch = xmalloc(n);
        st->scratch_cap = n;
    }
    return st->scratch;
}

/* The first 16 bytes of SHA-256 over b[0, n), whose first byte tags what it is (a key or a
 * name); an all-zero result is nudged off the empty slot's value. */
static void digest16(const unsigned char *b, size_t n, uint8_t out[16])
{
    uint8_t full[32];
    psdb__sha256(b, n, full);
    memcpy(out, full, 16);
    if (digest_zero(out))
        out[0] = 1;
}

static void name_digest(psdbd_stats *st, const char *name, uint8_t out[16])
{
    size_t n = name ? strlen(name) : 0;
    unsigned char *b = scratch(st, n + 1);
    b[0] = 'n';
    if (n)
        memcpy(b + 1, name, n);
    digest16(b, n + 1, out);
}

/* A key's digest over every field of its identity, the names' lengths included. */
static void key_digest(psdbd_stats *st, const psdbd_stat_row *r, uint8_t out[16])
{
    size_t la = r->app ? strlen(r->app) : 0, lf = r->family ? strlen(r->family) : 0;
    uint64_t nums[9] = {(uint64_t)r->kind,
                        (uint64_t)r->day,
                        r->app_version,
                        r->abi_min,
                        r->abi_max,
                        (uint64_t)(r->has_profile != 0),
                        r->profile,
                        la,
                        lf};
    unsigned char *b = scratch(st, 1 + sizeof(nums) + la + lf);
    b[0] = 'k';
    memcpy(b + 1, nums, sizeof(nums));
    if (la)
        memcpy(b + 1 + sizeof(nums), r->app, la);
    if (lf)
        memcpy(b + 1 + sizeof(nums) + la, r->family, lf);
    digest16(b, 1 + sizeof(nums) + la + lf, out);
}

/* What a stored key costs in the index, for the day's byte budget. */
static uint64_t key_cost(const psdbd_stat_row *r)
{
    return 2 * ((r->app ? strlen(r->app) : 0) + (r->family ? strlen(r->family) : 0)) + KEY_COST;
}

/* Enters a key as stored in the ledger. */
static void ledger_take(psdbd_stats *st, struct ledger *l, const psdbd_stat_row *r,
                        const uint8_t kd[16])
{
    uint8_t d[16];
    dset_add(&l->keys, kd);
    name_digest(st, r->app, d);
    dset_add(&l->names, d);
    name_digest(st, r->family, d);
    dset_add(&l->names, d);
    l->bytes += key_cost(r);
}

struct seeding {
    psdbd_stats *st;
    struct ledger *l;
};

static int seed_key(const psdbd_stat_row *key, void *ctx)
{
    struct seeding *sd = ctx;
    uint8_t kd[16];
    key_digest(sd->st, key, kd);
    ledger_take(sd->st, sd->l, key, kd);
    return 0;
}

/* The ledger of `day`: made on first need from what the index holds of that day (the oldest
 * ledger makes room). NULL when the index cannot be read (the flush fails and is retried). */
static struct ledger *ledger_of(psdbd_stats *st, int64_t day)
{
    struct ledger *l = NULL;
    struct seeding sd = {st, NULL};
    for (int i = 0; i < LEDGERS && !l; i++)
        if (st->ledgers[i].used && st->ledgers[i].day == day)
            l = &st->ledgers[i];
    if (l)
        goto cleanup;
    for (int i = 0; i < LEDGERS; i++) {
        struct ledger *c = &st->ledgers[i];
        if (!l || (l->used && (!c->used || c->day < l->day)))
            l = c; /* a free ledger, else the oldest day's */
    }
    ledger_clear(l);
    l->day = day;
    sd.l = l;
    if (psdbd_index_stats_day_keys(st->ix, day, seed_key, &sd) != PSDBD_OK) {
        psdbd_log("stats: read the stored keys of day %lld failed; the flush is retried",
                  (long long)day);
        ledger_clear(l);
        l = NULL;
        goto cleanup;
    }
    l->used = 1;
cleanup:
    return l;
}

/* Whether a drained key is stored by name (1), folded into its day's aggregate (0), or -1 when its
 * day's ledger cannot be read. */
static int admit(psdbd_stats *st, const psdbd_stat_row *r)
{
    uint8_t kd[16], da[16], df[16];
    struct ledger *l = NULL;
    unsigned new_names = 0;
    int rc = 1;
    if (r->kind != PSDBD_STAT_RESOLVE && r->kind != PSDBD_STAT_MISS)
        goto cleanup; /* downloads (published blobs) and aggregates: bounded already */
    if (!(l = ledger_of(st, r->day))) {
        rc = -1;
        goto cleanup;
    }
    key_digest(st, r, kd);
    if (dset_has(&l->keys, kd))
        goto cleanup; /* stored earlier that day: added to */
    name_digest(st, r->app, da);
    name_digest(st, r->family, df);
    new_names = !dset_has(&l->names, da) + (!dset_has(&l->names, df) && memcmp(da, df, 16) != 0);
    if (!(r->kind == PSDBD_STAT_RESOLVE && r->n[0] > 0) &&
        (l->names.n + new_names > st->opt.max_names ||
         l->bytes + key_cost(r) > st->opt.max_day_bytes)) {
        rc = 0;
        goto cleanup;
    }
    ledger_take(st, l, r, kd);
cleanup:
    return rc;
}

/* ---- flushing ----------------------------------------------------------------------------------
 */

/* Takes every held entry out of the tables: a list, *count long. */
static struct entry *drain(psdbd_stats *st, size_t *count)
{
    struct entry *all = NULL;
    size_t n = 0;
    uint64_t bytes = 0;
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
                bytes += e->size;
            }
        }
        pthread_mutex_unlock(&sh->lock);
    }
    pthread_mutex_unlock(&st->shards_lock);
    atomic_fetch_sub(&st->held, (unsigned)n);
    atomic_fetch_sub(&st->held_bytes, bytes);
    *count = n;
    return all;
}

/* Adds r's counts to the aggregate row of its day among rows[0, *n), appending one. */
static void fold(psdbd_stat_row *rows, size_t *n, const psdbd_stat_row *r)
{
    uint64_t add[3];
    size_t i = 0;
    while (i < *n && rows[i].day != r->day)
        i++;
    if (i == *n)
        rows[(*n)++] = (psdbd_stat_row){.kind = PSDBD_STAT_OTHER, .day = r->day};
    other_counts(r, add);
    for (int k = 0; k < 3; k++)
        rows[i].n[k] += add[k];
}

/* One flush: 0, or -1 when the index refused the counts (they are held again). */
static int flush_once(psdbd_stats *st)
{
    size_t n = 0, kept = 0, nfold = 0, nfolded = 0;
    struct entry *all = drain(st, &n), *e, *next;
    psdbd_stat_row *rows = NULL, *folded = NULL;
    int64_t today = psdbd_stats_today();
    int rc = 0;
    psdbd_rc irc = PSDBD_OK;
    if (n == 0)
        goto cleanup; /* nothing to add; expiry waits for the next flush with counts */
    rows = xcalloc(2 * n, sizeof(*rows)); /* the kept keys, then at most one aggregate each */
    folded = xcalloc(n, sizeof(*folded));
    for (e = all; e; e = e->next) {
        int a = admit(st, &e->row);
        if (a < 0) {
            irc = PSDBD_ERROR;
            break;
        }
        if (a) {
            rows[kept++] = e->row;
        } else {
            fold(folded, &nfold, &e->row);
            nfolded++;
        }
    }
    if (irc == PSDBD_OK) {
        memcpy(rows + kept, folded, nfold * sizeof(*rows));
        irc = psdbd_index_stats_add(st->ix, rows, kept + nfold,
                                    today - (int64_t)st->opt.retention_days + 1);
    }
    if (irc == PSDBD_OK) {
        atomic_fetch_add(&st->dropped, nfolded);
    } else {
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
    free(folded);
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
            if (pthread_cond_timedwait(&st->wake, &st->lock, &deadline) == ETIMEDOUT)
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
    for (int i = 0; i < LEDGERS; i++)
        ledger_clear(&st->ledgers[i]);
    free(st->scratch);
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
        if (named < st->opt.top_apps && psdb__name_scan(all[i].name, NULL) == PSDB__NAME_OK &&
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
            "# HELP psdbd_stats_dropped_total Demand counts not recorded key by key (summed "
            "in the day's aggregate instead): a name too long or not a name, the key or memory "
            "bound between two flushes, the day's name or byte budget.\n"
            "# TYPE psdbd_stats_dropped_total counter\n"
            "psdbd_stats_dropped_total %llu\n"
            "# HELP psdbd_stats_flush_failures_total Flushes of demand counts the index refused "
            "(the counts were kept for the next one).\n"
            "# TYPE psdbd_stats_flush_failures_total counter\n"
            "psdbd_stats_flush_failures_total %llu\n"
            "# HELP psdbd_stats_held_keys Demand counters held in memory until the next flush.\n"
            "# TYPE psdbd_stats_held_keys gauge\n"
            "psdbd_stats_held_keys %u\n"
            "# HELP psdbd_stats_held_bytes Bytes of the demand counters held in memory until the "
            "next flush.\n"
            "# TYPE psdbd_stats_held_bytes gauge\n"
            "psdbd_stats_held_bytes %llu\n",
            (unsigned long long)atomic_load(&st->dropped),
            (unsigned long long)atomic_load(&st->flush_failures), atomic_load(&st->held),
            (unsigned long long)atomic_load(&st->held_bytes));
    for (size_t i = 0; i < n; i++)
        free(all[i].name);
    free(all);
}
