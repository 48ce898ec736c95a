/* http_parse.c - psdbd's parsers of request parts (routes, Range, validators, dates), kept free
 * of libmicrohttpd so that unit tests and fuzz targets call them directly. */
#include "http_parse.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common.h"

psdbd_route psdbd_route_of(const char *url, const char **tail)
{
    static const char blobs[] = "/v1/blobs/", psdbs[] = "/v1/psdbs/", apps[] = "/v1/apps/",
                      stats[] = "/v1/stats/";
    size_t n;
    *tail = NULL;
    if (strcmp(url, "/healthz") == 0)
        return PSDBD_ROUTE_HEALTHZ;
    if (strcmp(url, "/readyz") == 0)
        return PSDBD_ROUTE_READYZ;
    if (strcmp(url, "/metrics") == 0)
        return PSDBD_ROUTE_METRICS;
    if (strcmp(url, "/v1/psdbs") == 0)
        return PSDBD_ROUTE_PUBLISH;
    if (strcmp(url, "/v1/sodbs") == 0)
        return PSDBD_ROUTE_SODBS;
    if (strncmp(url, "/v1/sodbs/", 10) == 0) {
        *tail = url + 10; /* an SODB's id (DELETE: retire) */
        return PSDBD_ROUTE_SODBS;
    }
    if (strcmp(url, "/v1/jobs") == 0 || strncmp(url, "/v1/jobs/", 9) == 0 ||
        strcmp(url, "/v1/workers") == 0) {
        *tail = url + 4; /* "jobs...", "workers" */
        return PSDBD_ROUTE_FARM;
    }
    if (strcmp(url, "/v1/resolve") == 0)
        return PSDBD_ROUTE_RESOLVE;
    if (strcmp(url, "/v1/apps") == 0)
        return PSDBD_ROUTE_APPS;
    if (strcmp(url, "/") == 0 || strcmp(url, "/dashboard.js") == 0 ||
        strcmp(url, "/dashboard.css") == 0) {
        *tail = url;
        return PSDBD_ROUTE_DASHBOARD;
    }
    if (strncmp(url, stats, sizeof(stats) - 1) == 0) {
        *tail = url + sizeof(stats) - 1;
        return PSDBD_ROUTE_STATS;
    }
    if (strncmp(url, blobs, sizeof(blobs) - 1) == 0) {
        *tail = url + sizeof(blobs) - 1;
        return PSDBD_ROUTE_BLOB;
    }
    if (strncmp(url, psdbs, sizeof(psdbs) - 1) == 0) {
        *tail = url + sizeof(psdbs) - 1;
        return PSDBD_ROUTE_PSDB_GET;
    }
    n = strlen(url);
    if (strncmp(url, apps, sizeof(apps) - 1) == 0 && n > sizeof(apps) - 1 + 6 &&
        strcmp(url + n - 6, "/psdbs") == 0) {
        *tail = url + sizeof(apps) - 1;
        return PSDBD_ROUTE_APP_PSDBS;
    }
    return PSDBD_ROUTE_OTHER;
}

int psdbd_uri_has_encoded_nul(const char *raw)
{
    for (const char *p = raw; (p = strchr(p, '%')) != NULL; p++)
        if (p[1] == '0' && p[2] == '0')
            return 1;
    return 0;
}

static int b64_value(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int psdbd_is_signature_b64(const char *s)
{
    /* 64 bytes = 21 groups of 3 plus 1 byte: 86 characters, "==", and the last character carries
     * 2 bits of data and 4 pad bits that must be zero for the encoding to be the canonical one. */
    int v = 0;
    if (!s || strlen(s) != 88 || s[86] != '=' || s[87] != '=')
        return 0;
    for (size_t i = 0; i < 86; i++)
        if ((v = b64_value(s[i])) < 0)
            return 0;
    return (v & 0x0f) == 0;
}

const char *psdbd_trailer_field(unsigned i)
{
    static const char *const names[PSDBD_TRAILER_FIELDS] = {"X-Psdb-Sha256", "X-Psdb-Size",
                                                            "X-Psdb-Signature"};
    return i < PSDBD_TRAILER_FIELDS ? names[i] : NULL;
}

unsigned psdbd_trailer_names(const char *value)
{
    unsigned names = 0;
    const char *p = value;
    while (p && *p) {
        size_t n = strcspn(p, ",");
        const char *end = p + n;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        for (unsigned i = 0; i < PSDBD_TRAILER_FIELDS; i++) {
            const char *f = psdbd_trailer_field(i);
            if ((size_t)(end - p) == strlen(f) && strncasecmp(p, f, strlen(f)) == 0)
                names |= 1u << i;
        }
        p += strcspn(p, ",");
        if (*p == ',')
            p++;
    }
    return names;
}

int psdbd_parse_range(const char *h, uint64_t size, uint64_t *off, uint64_t *len)
{
    const char *p, *dash;
    uint64_t a = 0, b = 0;
    char num[24];
    if (!h || strncasecmp(h, "bytes=", 6) != 0 || strchr(h, ','))
        return 0;
    p = h + 6;
    while (*p == ' ')
        p++;
    dash = strchr(p, '-');
    if (!dash || (size_t)(dash - p) >= sizeof(num) || strlen(dash + 1) >= sizeof(num))
        return 0;
    if (dash == p) { /* suffix: the last N bytes */
        if (psdb__parse_u64(dash + 1, &b) != 0 || strncmp(dash + 1, "0x", 2) == 0)
            return 0;
        if (b == 0 || size == 0)
            return -1;
        if (b > size)
            b = size;
        *off = size - b;
        *len = b;
        return 1;
    }
    memcpy(num, p, (size_t)(dash - p));
    num[dash - p] = '\0';
    if (psdb__parse_u64(num, &a) != 0 || strncmp(num, "0x", 2) == 0)
        return 0;
    if (dash[1] == '\0') {
        b = UINT64_MAX;
    } else if (psdb__parse_u64(dash + 1, &b) != 0 || strncmp(dash + 1, "0x", 2) == 0 || b < a) {
        return 0;
    }
    if (a >= size)
        return -1;
    if (b >= size)
        b = size - 1;
    *off = a;
    *len = b - a + 1;
    return 1;
}

size_t psdbd_parse_ranges(const char *h, uint64_t size, psdbd_range *out, size_t max)
{
    size_t n = 0;
    const char *p = NULL;
    if (!h || strncasecmp(h, "bytes=", 6) != 0 || !strchr(h, ','))
        return 0;
    p = h + 6;
    for (;;) {
        char num[24];
        uint64_t a = 0, b = 0;
        size_t k = 0;
        while (*p == ' ')
            p++;
        for (k = 0; p[k] >= '0' && p[k] <= '9'; k++)
            if (k + 1 >= sizeof(num))
                return 0;
        if (k == 0 || p[k] != '-')
            return 0;
        memcpy(num, p, k);
        num[k] = '\0';
        if (psdb__parse_u64(num, &a) != 0)
            return 0;
        p += k + 1;
        for (k = 0; p[k] >= '0' && p[k] <= '9'; k++)
            if (k + 1 >= sizeof(num))
                return 0;
        if (k == 0)
            return 0; /* an open range among several: not what a delta asks */
        memcpy(num, p, k);
        num[k] = '\0';
        if (psdb__parse_u64(num, &b) != 0 || b < a || b >= size || n == max)
            return 0;
        /* Ascending, with a gap: the parts come back in the order asked and never merge. */
        if (n > 0 && a <= out[n - 1].off + out[n - 1].len)
            return 0;
        out[n].off = a;
        out[n].len = b - a + 1;
        n++;
        p += k;
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        if (*p != ',')
            return 0;
        p++;
    }
    return n >= 2 ? n : 0;
}

/* Walks an entity-tag list ("*" or 1#entity-tag, RFC 9110 8.8.3). Returns 1 when it is "*" or
 * lists "sha" (weak tags count only when `weak_ok`), 0 otherwise, including malformed lists. */
static int etag_list_matches(const char *list, const char *sha, int weak_ok)
{
    const char *p = list;
    size_t n = strlen(sha);
    if (!list)
        return 0;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '*') {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        return *p == '\0';
    }
    while (*p) {
        int weak = 0;
        const char *open, *close;
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        if (p[0] == 'W' && p[1] == '/') {
            weak = 1;
            p += 2;
        }
        if (*p != '"')
            return 0;
        open = p + 1;
        close = strchr(open, '"');
        if (!close)
            return 0;
        if ((!weak || weak_ok) && (size_t)(close - open) == n && memcmp(open, sha, n) == 0)
            return 1;
        p = close + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p && *p != ',')
            return 0;
    }
    return 0;
}

int psdbd_etag_matches(const char *inm, const char *sha)
{
    return etag_list_matches(inm, sha, 1);
}

int psdbd_etag_matches_strong(const char *im, const char *sha)
{
    return etag_list_matches(im, sha, 0);
}

/* ---- HTTP-date ------------------------------------------------------------------------------- */

static const char wdays[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const long_wdays[7] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                          "Thursday", "Friday", "Saturday"};

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static int days_in_month(int64_t y, unsigned m)
{
    static const unsigned char dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : dm[m - 1];
}

/* Reads exactly `n` digits at *p. */
static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        char ch = (*p)[i];
        if (ch < '0' || ch > '9')
            return -1;
        v = v * 10 + (ch - '0');
    }
    *p += n;
    *out = v;
    return 0;
}

static int month_of(const char **p, int *out)
{
    for (int i = 0; i < 12; i++)
        if (strncmp(*p, months[i], 3) == 0) {
            *p += 3;
            *out = i + 1;
            return 0;
        }
    return -1;
}

static int lit(const char **p, const char *s)
{
    size_t n = strlen(s);
    if (strncmp(*p, s, n) != 0)
        return -1;
    *p += n;
    return 0;
}

/* "HH:MM:SS" */
static int clock_of(const char **p, int *h, int *mi, int *s)
{
    if (digits(p, 2, h) || lit(p, ":") || digits(p, 2, mi) || lit(p, ":") || digits(p, 2, s))
        return -1;
    return *h > 23 || *mi > 59 || *s > 60 ? -1 : 0;
}

int psdbd_parse_http_date(const char *s, int64_t *out)
{
    const char *p = s;
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, wd = -1;
    if (!s)
        return -1;
    for (int i = 0; i < 7; i++)
        if (strncmp(p, long_wdays[i], strlen(long_wdays[i])) == 0 &&
            p[strlen(long_wdays[i])] == ',') {
            wd = i;
            p += strlen(long_wdays[i]);
            break;
        }
    if (wd >= 0) { /* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
        if (lit(&p, ", ") || digits(&p, 2, &d) || lit(&p, "-") || month_of(&p, &mo) ||
            lit(&p, "-") || digits(&p, 2, &y) || lit(&p, " ") || clock_of(&p, &h, &mi, &sec) ||
            lit(&p, " GMT"))
            return -1;
        y += y < 70 ? 2000 : 1900; /* two-digit years: 1970-2069 */
    } else {
        for (int i = 0; i < 7; i++)
            if (strncmp(p, wdays[i], 3) == 0)
                wd = i;
        if (wd < 0)
            return -1;
        p += 3;
        if (*p == ',') { /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
            if (lit(&p, ", ") || digits(&p, 2, &d) || lit(&p, " ") || month_of(&p, &mo) ||
                lit(&p, " ") || digits(&p, 4, &y) || lit(&p, " ") || clock_of(&p, &h, &mi, &sec) ||
                lit(&p, " GMT"))
                return -1;
        } else { /* asctime: "Sun Nov  6 08:49:37 1994" */
            if (lit(&p, " ") || month_of(&p, &mo) || lit(&p, " "))
                return -1;
            if (*p == ' ') {
                p++;
                if (digits(&p, 1, &d))
                    return -1;
            } else if (digits(&p, 2, &d)) {
                return -1;
            }
            if (lit(&p, " ") || clock_of(&p, &h, &mi, &sec) || lit(&p, " ") || digits(&p, 4, &y))
                return -1;
        }
    }
    if (*p != '\0' || d < 1 || d > days_in_month(y, (unsigned)mo))
        return -1;
    *out = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec;
    return 0;
}

const char *psdbd_format_http_date(int64_t t, char *buf, size_t size)
{
    int64_t days = t >= 0 ? t / 86400 : (t - 86399) / 86400, secs = t - days * 86400;
    /* civil_from_days (Hinnant) */
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t y = (int64_t)yoe + era * 400;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1;
    unsigned m = mp < 10 ? mp + 3 : mp - 9;
    y += m <= 2;
    int wd = (int)((days % 7 + 11) % 7); /* 1970-01-01 was a Thursday */
    snprintf(buf, size, "%s, %02u %s %04lld %02d:%02d:%02d GMT", wdays[wd], d, months[m - 1],
             (long long)y, (int)(secs / 3600), (int)(secs / 60 % 60), (int)(secs % 60));
    return buf;
}

/* ---- preconditions --------------------------------------------------------------------------- */

unsigned psdbd_blob_preconditions(const psdbd_conditions *h, const char *sha, int64_t last_modified,
                                  int64_t now, int *use_range)
{
    int64_t t = 0;
    *use_range = 1;
    /* Steps 1 and 2: a write-style precondition fails the request whatever the method. */
    if (h->if_match) {
        if (!psdbd_etag_matches_strong(h->if_match, sha))
            return PSDBD_PRECONDITION_FAILED;
    } else if (h->if_unmodified_since && psdbd_parse_http_date(h->if_unmodified_since, &t) == 0 &&
               last_modified > t) {
        return PSDBD_PRECONDITION_FAILED;
    }
    /* Steps 3 and 4: If-None-Match wins over If-Modified-Since; a date in the future is not a
     * valid validator (RFC 9110 13.1.3) and is ignored. */
    if (h->if_none_match) {
        if (psdbd_etag_matches(h->if_none_match, sha))
            return PSDBD_PRECONDITION_NOT_MODIFIED;
    } else if (h->if_modified_since && psdbd_parse_http_date(h->if_modified_since, &t) == 0 &&
               t <= now && last_modified <= t) {
        return PSDBD_PRECONDITION_NOT_MODIFIED;
    }
    /* Step 5: If-Range is an entity-tag (strong comparison) or an HTTP-date that must equal
     * Last-Modified exactly; anything else sends the whole blob. */
    if (h->if_range) {
        const char *v = h->if_range;
        if (v[0] == '"' || (v[0] == 'W' && v[1] == '/'))
            *use_range = v[0] == '"' && psdbd_etag_matches_strong(v, sha) && !strchr(v + 1, ',');
        else
            *use_range = psdbd_parse_http_date(v, &t) == 0 && t == last_modified;
    }
    return PSDBD_PRECONDITION_GO;
}
