/* delta_fetch.c - what a delta update fetches, through the client's transport: the value map, and
 * the runs of the blob the sources do not hold, a few hundred at a time in multi-range requests
 * whose parts go straight into the output as the ordered pass reaches them (delta_int.h). */
#include "delivery/delta_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "common/fdio.h"
#include "common/status_map.h"

/* ---- one answer: the map, or a run ------------------------------------------------------------
 */

/* The map (of NULL: written into fd from offset 0, at most `end` bytes; every attempt starts
 * over) or a run of the blob (appended to the output; an attempt after a cut asks for the rest). */
typedef struct fetch_sink {
    const fetcher *f;
    const char *url;
    int fd;
    out_file *of;
    uint64_t off, at, end; /* first byte asked, next one to receive, end of what was asked */
    char range[64];
} fetch_sink;

static int fetch_begin(void *ctx, psdb__attempt *a, const char **range)
{
    fetch_sink *s = ctx;
    (void)a;
    if (!s->of) {
        s->at = s->off;
        return 0;
    }
    snprintf(s->range, sizeof(s->range), "%llu-%llu", (unsigned long long)s->at,
             (unsigned long long)s->end - 1);
    *range = s->range;
    return 0;
}

static int fetch_header(void *ctx, psdb__attempt *a, const char *p, size_t len)
{
    fetch_sink *s = ctx;
    unsigned long long start = 0;
    if (a->status != PSDB__HTTP_PARTIAL_CONTENT || len <= 14 ||
        strncasecmp(p, "Content-Range:", 14) != 0)
        return 0;
    const char *b = memchr(p, ' ', len);
    if (!b || sscanf(b, " bytes %llu-", &start) != 1 || start != s->at) {
        a->failed = psdb__error_set(PSDB_E_PROTOCOL,
                                    "delta: %s answered other bytes than asked for (from %llu)",
                                    s->url, (unsigned long long)s->at);
        return -1;
    }
    return 0;
}

static int fetch_write(void *ctx, psdb__attempt *a, const char *p, size_t len)
{
    fetch_sink *s = ctx;
    if (a->status != PSDB__HTTP_OK && a->status != PSDB__HTTP_PARTIAL_CONTENT)
        return 0; /* an error page: drained */
    if (len > s->end - s->at) {
        a->failed =
            psdb__error_set(PSDB_E_PROTOCOL, "delta: %s sent more than the %llu bytes asked",
                            s->url, (unsigned long long)(s->end - s->off));
        return -1;
    }
    if (s->of ? psdb__delta_out_put(s->of, (const uint8_t *)p, len) != 0
              : psdb__pwrite_all(s->fd, p, len, s->at) != 0) {
        int e = s->of ? s->of->err : errno;
        a->failed = psdb__error_set(psdb__errno_hr(e), "delta: write: %s", strerror(e));
        return -1;
    }
    s->at += len;
    return 0;
}

/* A run is whole when all of it came; a cut one is asked for again from where it stopped. */
static int fetch_complete(void *ctx)
{
    const fetch_sink *s = ctx;
    return !s->of || s->at == s->end;
}

/* The delta's transfers report the bytes of the new file produced, resumed ones included. */
static void fetch_progress(void *ctx, psdb_progress *p)
{
    const fetch_sink *s = ctx;
    *p = (psdb_progress){s->f->what, s->of ? s->of->pos : 0, s->f->total, 0};
}

/* GETs url into fd at 0 (the whole answer, at most len bytes; of NULL) or [off, off + len) of it
 * into of (ranged). No status is retried: a server without the map, or one that does not answer
 * ranges, makes the update download in full. *got adds what came (the map: its size). */
static psdb_hr fetch(psdb_client *c, const fetcher *f, const char *url, out_file *of, uint64_t off,
                     uint64_t len, int fd, uint64_t *got)
{
    fetch_sink s = {
        .f = f, .url = url, .fd = fd, .of = of, .off = off, .at = off, .end = off + len};
    psdb__request r = {.who = "delta",
                       .url = url,
                       .flags = PSDB__REQ_PROGRESS | PSDB__REQ_STATUS_FINAL,
                       .expect = {of ? PSDB__HTTP_PARTIAL_CONTENT : PSDB__HTTP_OK},
                       .ctx = &s,
                       .begin = fetch_begin,
                       .header = fetch_header,
                       .write = fetch_write,
                       .complete = fetch_complete,
                       .progress = fetch_progress};
    psdb_hr hr = psdb__transport_run(c, &r, NULL);
    *got += s.at - off;
    return hr;
}

psdb_hr psdb__delta_fetch_map(psdb_client *c, const fetcher *f, const char *url, uint64_t max,
                              int fd, uint64_t *got)
{
    *got = 0;
    return fetch(c, f, url, NULL, 0, max, fd, got);
}

/* ---- many runs in one answer ------------------------------------------------------------------
 */

/* One request for runs[first..last) as "Range: a-b,c-d,...": the answer is a 206
 * multipart/byteranges whose parts are read by their Content-Range (a part may span several runs
 * when the server merged them), or a single-part 206 (a server that answers the first range
 * only, or merged them all). Each part starts where the pass stands: the pass writes the local
 * bytes before it first, then the part goes straight to the output. */
typedef struct multi_sink {
    const fetcher *f;
    rebuild *rb;
    const run *runs;
    const char *range;
    size_t next, last; /* the next run expected, and the end of the batch */
    int multipart, not_multi;
    char boundary[80];
    size_t boundary_len;
    char line[256];
    size_t line_len;
    int in_data, have_range, ended;
    uint64_t a, b, remaining, part_last_run;
    uint64_t body_bytes;
    psdb_hr failed; /* the pass refused the map or could not write */
} multi_sink;

static int parse_content_range(const char *p, size_t len, uint64_t *a, uint64_t *b)
{
    char tmp[128];
    unsigned long long x = 0, y = 0;
    if (len >= sizeof(tmp))
        return -1;
    memcpy(tmp, p, len);
    tmp[len] = '\0';
    const char *v = strchr(tmp, ':');
    if (!v || sscanf(v + 1, " bytes %llu-%llu/", &x, &y) != 2 || y < x)
        return -1;
    *a = x;
    *b = y;
    return 0;
}

static int multi_begin(void *ctx, psdb__attempt *a, const char **range)
{
    (void)a;
    *range = ((multi_sink *)ctx)->range;
    return 0;
}

static int multi_header(void *ctx, psdb__attempt *a, const char *p, size_t len)
{
    multi_sink *s = ctx;
    (void)a;
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) {
        s->multipart = s->have_range = 0;
    } else if (len > 13 && strncasecmp(p, "Content-Type:", 13) == 0) {
        const char *b = NULL;
        for (size_t i = 13; i + 9 <= len && !b; i++)
            if (strncasecmp(p + i, "boundary=", 9) == 0)
                b = p + i + 9;
        if (b) {
            size_t k = 0;
            while (b + k < p + len && b[k] != '\r' && b[k] != '\n' && b[k] != ';' && b[k] != ' ')
                k++;
            if (k > 0 && k + 2 < sizeof(s->boundary)) {
                s->boundary[0] = s->boundary[1] = '-';
                memcpy(s->boundary + 2, b, k);
                s->boundary_len = k + 2;
                s->multipart = 1;
            }
        }
    } else if (len > 14 && strncasecmp(p, "Content-Range:", 14) == 0) {
        s->have_range = parse_content_range(p, len, &s->a, &s->b) == 0;
    }
    return 0;
}

/* A part [a, b] begins: it must start at the next run and end at the end of a run of the batch. */
static int part_begin(multi_sink *s, psdb__attempt *at)
{
    size_t j = s->next;
    if (j >= s->last || s->a != s->runs[j].start)
        return -1;
    while (j < s->last && s->runs[j].end < s->b + 1)
        j++;
    if (j == s->last || s->runs[j].end != s->b + 1)
        return -1;
    s->part_last_run = j;
    psdb_hr hr = psdb__delta_rebuild_to(s->rb, s->a);
    if (PSDB_FAILED(hr)) {
        s->failed = at->failed = hr;
        return -1;
    }
    s->remaining = s->b - s->a + 1;
    s->in_data = 1;
    s->have_range = 0;
    return 0;
}

static int part_data(multi_sink *s, psdb__attempt *at, const char *p, size_t k)
{
    if (psdb__delta_out_put(s->rb->of, (const uint8_t *)p, k) != 0) {
        s->failed = at->failed = psdb__errno_hr(s->rb->of->err);
        return -1;
    }
    s->remaining -= k;
    if (s->remaining == 0) {
        s->rb->fetched_to = s->b + 1;
        s->next = (size_t)s->part_last_run + 1;
        s->in_data = 0;
    }
    return 0;
}

static int multi_write(void *ctx, psdb__attempt *at, const char *p, size_t len)
{
    multi_sink *s = ctx;
    size_t i = 0;
    if (at->status != PSDB__HTTP_PARTIAL_CONTENT) {
        s->not_multi = at->status == PSDB__HTTP_OK; /* ranges ignored: the whole blob would come */
        return s->not_multi ? -1 : 0;
    }
    s->body_bytes += len;
    if (!s->multipart) { /* one part: the Content-Range of the answer */
        if (!s->in_data && (!s->have_range || part_begin(s, at) != 0))
            return -1;
        if (len > s->remaining || part_data(s, at, p, len) != 0)
            return -1;
        return 0;
    }
    while (i < len) {
        if (s->in_data) {
            size_t k = len - i < s->remaining ? len - i : (size_t)s->remaining;
            if (part_data(s, at, p + i, k) != 0)
                return -1;
            i += k;
            continue;
        }
        if (s->ended) /* the epilogue, if any */
            return 0;
        char ch = p[i++];
        if (ch != '\n') {
            if (s->line_len + 1 >= sizeof(s->line))
                return -1; /* no header line of ours is this long */
            s->line[s->line_len++] = ch;
            continue;
        }
        size_t l = s->line_len;
        s->line_len = 0;
        if (l > 0 && s->line[l - 1] == '\r')
            l--;
        if (l == 0) {
            if (s->have_range && part_begin(s, at) != 0)
                return -1;
        } else if (l == s->boundary_len + 2 && memcmp(s->line, s->boundary, s->boundary_len) == 0 &&
                   memcmp(s->line + s->boundary_len, "--", 2) == 0) {
            s->ended = 1;
        } else if (l == s->boundary_len && memcmp(s->line, s->boundary, l) == 0) {
            s->have_range = 0;
        } else if (l > 14 && strncasecmp(s->line, "Content-Range:", 14) == 0) {
            s->have_range = parse_content_range(s->line, l, &s->a, &s->b) == 0;
            if (!s->have_range)
                return -1;
        }
    }
    return 0;
}

static void multi_progress(void *ctx, psdb_progress *p)
{
    const multi_sink *s = ctx;
    *p = (psdb_progress){s->f->what, s->rb->of->pos, s->f->total, 0};
}

/* Fetches every run in file order while the pass writes the bytes between them: batches of runs
 * in one multi-range request each; a server that answers a whole blob to several ranges, or a
 * batch that fails, leaves the rest to one ranged request per run (with the transport's retries,
 * which resume a run where it stopped). */
psdb_hr psdb__delta_fetch_runs(psdb_client *c, const fetcher *f, const char *url, rebuild *rb,
                               const run *runs, size_t nruns, uint64_t *got)
{
    psdb_hr hr = PSDB_S_OK;
    psdb__delta_outcome *out = rb->out;
    int multi = 1;
    char *range = malloc(MULTI_RANGE_HEADER + 64);
    if (!range)
        hr = PSDB_E_OUTOFMEMORY;
    for (size_t ri = 0; ri < nruns && PSDB_SUCCEEDED(hr);) {
        size_t last = ri, used = 0;
        while (multi && last < nruns && used < MULTI_RANGE_HEADER) {
            int k = snprintf(range + used, 64, "%s%llu-%llu", last > ri ? "," : "",
                             (unsigned long long)runs[last].start,
                             (unsigned long long)runs[last].end - 1);
            used += (size_t)k;
            last++;
        }
        if (multi && last - ri >= 2) {
            multi_sink s = {
                .f = f, .rb = rb, .runs = runs, .range = range, .next = ri, .last = last};
            /* One attempt: whatever goes wrong with it, the runs it left are fetched one by
             * one, each with the transport's retries. */
            psdb__request r = {.who = "delta",
                               .url = url,
                               .flags = PSDB__REQ_PROGRESS | PSDB__REQ_STATUS_FINAL,
                               .expect = {PSDB__HTTP_PARTIAL_CONTENT},
                               .max_attempts = 1,
                               .ctx = &s,
                               .begin = multi_begin,
                               .header = multi_header,
                               .write = multi_write,
                               .progress = multi_progress};
            psdb_hr got_hr = psdb__transport_run(c, &r, NULL);
            *got += s.body_bytes;
            if (got_hr == PSDB_E_CANCELLED) {
                hr = got_hr;
                break;
            }
            if (PSDB_FAILED(s.failed)) {
                hr = s.failed; /* the pass refused the map or could not write: no retry */
                break;
            }
            if (PSDB_FAILED(got_hr) || s.next == ri || s.not_multi)
                multi = 0; /* not the answer asked for: one run a request from here */
            if (s.in_data && s.rb->of->pos > runs[s.next].start) {
                /* Cut inside a part: the rest of that part's runs as one ranged request. */
                uint64_t from = s.rb->of->pos, to = runs[s.part_last_run].end;
                hr = fetch(c, f, url, rb->of, from, to - from, -1, got);
                if (PSDB_FAILED(hr)) {
                    WHY("fetching bytes %llu-%llu of the blob failed (%s)",
                        (unsigned long long)from, (unsigned long long)to - 1, psdb_hr_str(hr));
                    break;
                }
                rb->fetched_to = to;
                s.next = (size_t)s.part_last_run + 1;
            }
            ri = s.next;
            continue;
        }
        /* One run. */
        hr = psdb__delta_rebuild_to(rb, runs[ri].start);
        if (PSDB_FAILED(hr))
            break;
        hr = fetch(c, f, url, rb->of, runs[ri].start, runs[ri].end - runs[ri].start, -1, got);
        if (PSDB_FAILED(hr)) {
            WHY("fetching bytes %llu-%llu of the blob failed (%s)",
                (unsigned long long)runs[ri].start, (unsigned long long)runs[ri].end - 1,
                psdb_hr_str(hr));
            break;
        }
        rb->fetched_to = runs[ri].end;
        ri++;
    }
    free(range);
    return hr;
}
